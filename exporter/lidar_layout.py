"""How a LiDAR sweep is laid out as a Cycles image (pure; no bpy).

Cycles gives every image row one time, evenly spaced. A sweep of F firings becomes F*S rows:
row k*S + s is traced at firing k's time + s*period/S. Channel c goes to slot
round(time_offset_ns[c] / (period/S)) and to a column of that slot; pixels with no channel
are skipped (zero throughput). S is the smallest number of slots whose time quantization is at
most TARGET_QUANTIZATION_NS (else the least quantization up to MAX_SLOTS), so channels fired
together need one row per firing (S = 1, width C) and VLP-16-like sequential firing at 10 Hz x
1800 steps needs S = 24 rows per firing. Blender renders at least 4 columns (resolution_x >= 4;
measured: a 3-wide request renders 4 wide), so narrower layouts are padded.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

MAX_SLOTS = 256
TARGET_QUANTIZATION_NS = 250        # 250 ns at 30 m/s relative speed is 7.5 um of motion
MIN_WIDTH = 4                       # Blender's minimum resolution_x


@dataclass(frozen=True)
class SweepLayout:
    firings: int
    slots: int                  # rows per firing (S)
    width: int                  # image columns (W)
    slot_of_channel: tuple      # (C,)
    column_of_channel: tuple    # (C,)
    quantization_ns: float      # worst |render time - declared beam time|

    @property
    def rows(self) -> int:
        return self.firings * self.slots

    def channel_table(self) -> np.ndarray:
        """(S, W) channel at each slot/column, -1 where none."""
        table = np.full((self.slots, self.width), -1, dtype=np.int64)
        for c, (s, col) in enumerate(zip(self.slot_of_channel, self.column_of_channel, strict=True)):
            table[s, col] = c
        return table

    def pixel_of_beam(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cols) of shape (F, C): where beam (k, c) lies in the rendered image."""
        k = np.arange(self.firings)[:, None]
        rows = k * self.slots + np.asarray(self.slot_of_channel)[None, :]
        cols = np.broadcast_to(np.asarray(self.column_of_channel)[None, :], rows.shape)
        return rows, cols


def sweep_layout(firings: int, firing_period_ns: Fraction, time_offsets_ns) -> SweepLayout:
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
    return SweepLayout(firings, S, max(MIN_WIDTH, max(used.values())), tuple(slots), tuple(columns), err)
