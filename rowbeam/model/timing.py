"""Timing models on the scene clock.

Clock: integer nanoseconds, monotonic, t = 0 at the scene's frame_start.
Blender time mapping: frame f + subframe s  <->  t = (f - frame_start + s) * fps_base / fps seconds.
All schedule arithmetic is exact (integers and Fractions); a time is rounded to integer ns
once, half up, where it is published.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from fractions import Fraction

import numpy as np

NS_PER_S = 1_000_000_000
ROLLING_SHUTTER_MODEL = "rowbeam.rolling_shutter@1"
READOUT_DIRECTIONS = ("top_to_bottom", "bottom_to_top")

# Declared bounds of user input (the rig schema states the same numbers; tests pin them together).
MIN_RATE_HZ = 1e-3                    # event rate / LiDAR rotation rate, Hz
MAX_RATE_HZ = 1e6
MAX_SCENE_TIME_NS = 86_400 * NS_PER_S  # any time or duration in a rig: at most one day of scene time
MAX_EVENT_INDEX = 999_999             # event folders are named by six-digit indices
MIN_IMAGE_SIDE_PX = 4                 # Blender's smallest render size
MAX_IMAGE_SIDE_PX = 16_384            # per side, rig image_size_px or the scene's render resolution
MIN_FIRING_PERIOD_NS = 1              # LiDAR: rotation_hz * azimuth_steps <= 1e9 firings per second


def round_half_up(value: Fraction) -> int:
    """Round an exact rational to the nearest integer, ties upward."""
    return int((value + Fraction(1, 2)) // 1)


def exact(x) -> Fraction:
    """Exact rational of a JSON number (decimal text of floats, so 29.97 stays 2997/100)."""
    if isinstance(x, Fraction):
        return x
    if isinstance(x, int):
        return Fraction(x)
    return Fraction(repr(float(x)))


def exact_ns_text(value: Fraction) -> str:
    """An exact duration in ns as text: '55555556 ns' for an integer, '500000000/9 ns (55555555.556 ns)' otherwise
    (never a rounded value that could equal a neighbouring integer)."""
    value = Fraction(value)
    if value.denominator == 1:
        return f"{value.numerator} ns"
    return f"{value.numerator}/{value.denominator} ns ({float(value):.3f} ns)"


def require_timing_model(event: dict, model: str) -> None:
    """Refuse (ValueError) a manifest `event` block whose timing_model is not `model`."""
    if event.get("timing_model") != model:
        raise ValueError(f"unsupported timing model {event.get('timing_model')!r}")


def periodic_event_start_ns(first_event_ns: int, rate_hz: float, index: int) -> int:
    """Start time (ns) of the index-th event of a periodic sensor: first + index * 1e9 / rate."""
    return first_event_ns + round_half_up(Fraction(index * NS_PER_S) / exact(rate_hz))


def periodic_event_count(first_event_ns: int, rate_hz: float, duration_ns: int, end_ns) -> int:
    """How many events k >= 0 end by end_ns (ns, int or Fraction): periodic_event_start_ns(k) + duration_ns <= end_ns.

    Closed form, no loop: round_half_up(x) <= M  <=>  x < floor(M) + 1/2, so k * 1e9/rate < L with
    L = floor(end - first - duration) + 1/2 holds for k = 0 .. ceil(L * rate / 1e9) - 1.
    """
    slack = exact(end_ns) - first_event_ns - duration_ns
    limit = Fraction(slack.numerator // slack.denominator) + Fraction(1, 2)
    if limit <= 0:
        return 0
    q = limit * exact(rate_hz) / NS_PER_S
    return -(-q.numerator // q.denominator)


@dataclass(frozen=True)
class RollingShutterTiming:
    """Rolling shutter: row v of `rows` starts exposing at start + readout*v'/rows.

    v' is v for top_to_bottom and rows-1-v for bottom_to_top (v = image row, 0 at the top).
    Each row is exposed for exposure_ns; its reference time is the centre of its exposure:
        t_ref(v) = start + readout*(v' + 0.5)/rows + exposure/2      (rounded half up to ns)
    The event reference time is the centre of the whole acquisition:
        start + readout/2 + exposure/2.
    """

    frame_start_ns: int
    readout_ns: int
    exposure_ns: int
    rows: int
    direction: str = "top_to_bottom"

    def __post_init__(self):
        if self.direction not in READOUT_DIRECTIONS:
            raise ValueError(f"unknown readout direction {self.direction!r}")
        if self.rows <= 0 or self.readout_ns < 0 or self.exposure_ns < 0:
            raise ValueError("rows must be positive, readout and exposure non-negative")

    def readout_order(self) -> np.ndarray:
        """v' for every image row v (int64, shape [rows])."""
        v = np.arange(self.rows, dtype=np.int64)
        return v if self.direction == "top_to_bottom" else self.rows - 1 - v

    def row_time_exact(self, row: int) -> Fraction:
        """Exact reference time of image row `row` (ns, rational); rows outside 0..rows-1 extrapolate the schedule."""
        order = row if self.direction == "top_to_bottom" else self.rows - 1 - row
        return (self.frame_start_ns + Fraction(self.readout_ns * (2 * order + 1), 2 * self.rows)
                + Fraction(self.exposure_ns, 2))

    def row_reference_times_ns(self) -> np.ndarray:
        """Reference (exposure-centre) time of every image row, int64 ns, shape [rows]."""
        order = self.readout_order()
        # numerator / (2*rows), rounded half up, in exact integer arithmetic
        num = self.readout_ns * (2 * order + 1) + self.exposure_ns * self.rows
        den = 2 * self.rows
        return self.frame_start_ns + (num + self.rows) // den

    def row_exposure_start_ns(self) -> np.ndarray:
        """Exposure start of every image row, int64 ns (rounded half up)."""
        order = self.readout_order()
        return self.frame_start_ns + (2 * self.readout_ns * order + self.rows) // (2 * self.rows)

    def reference_time_ns(self) -> int:
        return self.frame_start_ns + round_half_up(Fraction(self.readout_ns + self.exposure_ns, 2))

    @property
    def period_ns(self) -> Fraction:
        """Row period (ns, exact): readout_ns / rows between consecutive rows in readout order."""
        return Fraction(self.readout_ns, self.rows)

    def first_row_time_exact(self) -> Fraction:
        """Exact reference time (ns) of the row read out first (v = 0 top_to_bottom, rows-1 bottom_to_top)."""
        return self.row_time_exact(0 if self.direction == "top_to_bottom" else self.rows - 1)

    def span_ns(self) -> tuple[int, int]:
        """[start, end] (ns) of the acquisition: the first row starts exposing at frame_start_ns, the last row
        stops at frame_start_ns + readout_ns + exposure_ns."""
        return self.frame_start_ns, self.frame_start_ns + self.readout_ns + self.exposure_ns

    def times_span_ns(self) -> tuple[int, int]:
        """(first, last) row reference time (ns, as published): the rows read first and last."""
        t = self.row_reference_times_ns()
        return int(t.min()), int(t.max())

    def to_manifest(self) -> dict:
        return {
            "timing_model": ROLLING_SHUTTER_MODEL,
            "frame_start_ns": self.frame_start_ns,
            "readout_ns": self.readout_ns,
            "exposure_ns": self.exposure_ns,
            "rows": self.rows,
            "readout_direction": self.direction,
            "reference_time_ns": self.reference_time_ns(),
            "row_time_definition": ("t_row(v) = frame_start_ns + readout_ns*(v'+0.5)/rows + exposure_ns/2, "
                                    "v' = v (top_to_bottom) or rows-1-v (bottom_to_top), "
                                    "rounded half up to integer ns; the centre of the row's exposure"),
            "reference_time_definition": "frame_start_ns + (readout_ns + exposure_ns)/2, rounded half up",
        }

    @classmethod
    def from_manifest(cls, event: dict) -> "RollingShutterTiming":
        require_timing_model(event, ROLLING_SHUTTER_MODEL)
        return cls(event["frame_start_ns"], event["readout_ns"], event["exposure_ns"],
                   event["rows"], event["readout_direction"])


@dataclass(frozen=True)
class SceneClock:
    """Maps scene-clock ns to Blender frames: t = (frame - frame_start) * fps_base / fps."""

    fps: int
    fps_base: float
    frame_start: int

    def frames_per_ns(self) -> Fraction:
        """fps / (fps_base * 1e9), exact; computed once per clock (the fields are frozen)."""
        return self._frames_per_ns

    @cached_property
    def _frames_per_ns(self) -> Fraction:
        return Fraction(self.fps) / (exact(self.fps_base) * NS_PER_S)

    def frame_of(self, t_ns) -> Fraction:
        """Exact (rational) Blender frame at scene time t_ns (int or Fraction)."""
        return self.frame_start + exact(t_ns) * self.frames_per_ns()

    def frame_subframe(self, t_ns) -> tuple[int, float]:
        """(integer frame, subframe in [0, 1)) for Blender's scene.frame_set at t_ns."""
        f = self.frame_of(t_ns)
        whole = f.numerator // f.denominator
        return int(whole), float(f - whole)

    def duration_frames(self, duration_ns) -> float:
        return float(exact(duration_ns) * self.frames_per_ns())

    def ns_of(self, frame: int, subframe: float = 0.0) -> Fraction:
        return (Fraction(frame - self.frame_start) + exact(subframe)) / self.frames_per_ns()
