"""How a LiDAR sweep is laid out as a Cycles image (pure; no bpy).

Cycles gives every image row one time, evenly spaced. A sweep of F firings becomes F*S rows:
row k*S + s is traced at firing k's time + s*period/S. Channel c goes to slot
round(time_offset_ns[c] / (period/S)) and to a column of that slot; pixels with no channel
are skipped (zero throughput). S is the smallest number of slots whose time quantization is at
most TARGET_QUANTIZATION_NS (else the least quantization up to MAX_SLOTS), so channels fired
together need one row per firing (S = 1, width C) and VLP-16-like sequential firing at 10 Hz x
1800 steps needs S = 24 rows per firing. Blender renders at least 4 columns (resolution_x >= 4;
measured: a 3-wide request renders 4 wide), so narrower layouts are padded.

Blender renders at most MAX_ROWS = 65,536 rows (docs/design.md). A sweep needing more (F*S > MAX_ROWS,
e.g. 12 channels fired 1.5 us apart x 900 steps at 10 Hz: S = 73, 65,700 rows) is split into
renders of contiguous firing ranges, as even as possible, each at most MAX_ROWS rows; render j
covers firings [k0, k0 + n) and its row r = (k - k0)*S + s is traced at firing k's time +
s*period/S, exactly as in one render, so the quantization does not change. Since S <= MAX_SLOTS,
a sweep of F firings needs ceil(F*S / MAX_ROWS) renders of at least MAX_ROWS // MAX_SLOTS firings.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from rowbeam.blender.cycles.cycles_timing import CyclesShutter, timed_rows_shutter

MAX_SLOTS = 256
TARGET_QUANTIZATION_NS = 250        # 250 ns at 30 m/s relative speed is 7.5 um of motion
MIN_WIDTH = 4                       # Blender's minimum resolution_x
MAX_ROWS = 65_536                   # Blender's maximum resolution_y (measured, docs/design.md)


@dataclass(frozen=True)
class LayoutRender:
    """One Cycles render of a sweep: firings [first_firing, first_firing + firings), `rows` image rows."""

    first_firing: int
    firings: int
    slots: int

    @property
    def rows(self) -> int:
        return self.firings * self.slots

    @property
    def first_row(self) -> int:
        """Row of the whole-sweep layout that is this render's row 0."""
        return self.first_firing * self.slots

    def shutter(self, timing) -> CyclesShutter:
        """Shutter tracing this render's row r at firing (first_firing + r // S)'s exact time + (r % S)*period/S
        (`timing`: rowbeam.sensors.lidar.SpinningTiming)."""
        period = timing.firing_period_ns
        return timed_rows_shutter(timing.firing_time_exact(self.first_firing), period / self.slots, self.rows)


@dataclass(frozen=True)
class SweepLayout:
    firings: int
    slots: int                  # rows per firing (S)
    width: int                  # image columns (W)
    slot_of_channel: tuple      # (C,)
    column_of_channel: tuple    # (C,)
    quantization_ns: float      # worst |render time - declared beam time|
    max_rows: int = MAX_ROWS    # most image rows one render may have

    @property
    def rows(self) -> int:
        """Rows of the whole sweep (all renders stacked, firing 0 at the top)."""
        return self.firings * self.slots

    def renders(self) -> list[LayoutRender]:
        """Contiguous firing ranges, as even as possible, each at most max_rows rows; one when it fits."""
        per_render = self.max_rows // self.slots
        if per_render < 1:
            raise ValueError(f"{self.slots} rows per firing exceed {self.max_rows} rows per render")
        n = -(-self.firings // per_render)
        bounds = [self.firings * j // n for j in range(n + 1)]
        return [LayoutRender(a, b - a, self.slots) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]

    def channel_table(self) -> np.ndarray:
        """(S, W) channel at each slot/column, -1 where none."""
        table = np.full((self.slots, self.width), -1, dtype=np.int64)
        for c, (s, col) in enumerate(zip(self.slot_of_channel, self.column_of_channel, strict=True)):
            table[s, col] = c
        return table

    def pixel_of_beam(self, render: LayoutRender | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cols) of shape (F, C): where beam (k, c) lies in the whole-sweep image; with `render`,
        shape (render.firings, C): where beam (render.first_firing + i, c) lies in that render's image."""
        k = np.arange(self.firings if render is None else render.firings)[:, None]
        rows = k * self.slots + np.asarray(self.slot_of_channel)[None, :]
        cols = np.broadcast_to(np.asarray(self.column_of_channel)[None, :], rows.shape)
        return rows, cols


def sweep_layout(firings: int, firing_period_ns: Fraction, time_offsets_ns, max_rows: int = MAX_ROWS) -> SweepLayout:
    """Slots per firing and columns for `firings` firings of `firing_period_ns` (exact ns) with per-channel
    delays `time_offsets_ns` (each shorter than the period); renders of at most `max_rows` rows."""
    offsets = [Fraction(o) for o in time_offsets_ns]
    best = None
    for S in range(1, MAX_SLOTS + 1):
        slot_ns = Fraction(firing_period_ns) / S
        slots = [min(S - 1, round(o / slot_ns)) for o in offsets]
        err = float(max(abs(s * slot_ns - o) for s, o in zip(slots, offsets, strict=True)))
        if best is None or err < best[2]:
            best = (S, slots, err)
        if err <= TARGET_QUANTIZATION_NS:
            break
    S, slots, err = best
    columns, used = [], {}
    for s in slots:
        columns.append(used.get(s, 0))
        used[s] = used.get(s, 0) + 1
    return SweepLayout(firings, S, max(MIN_WIDTH, max(used.values())), tuple(slots), tuple(columns), err, max_rows)
