"""Map timed rows (camera rows, LiDAR firings) onto Cycles' shutter (pure arithmetic; no bpy).

Measured (bpy 5.0.1, `rolling_shutter_type='TOP'`, `rolling_shutter_duration=0`): Cycles gives
top-row index r of an H-row image the time  shutter_open + D*(r+1)/H  (D = shutter length),
custom (OSL) cameras included. With duration d > 0 a row is exposed over d*D centred at
shutter_open + D*(1-d)*((r+1)/H - 0.5) + D/2.

To trace row r at  first_row + r*row_period  we choose D = H*row_period and
shutter_open = first_row - row_period: Cycles' (r+1)/H would otherwise be one row period late
for LiDAR firings, and half a row late for camera row centres (first_row = start +
readout/(2H) + exposure/2), which is the "half-row correction".
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from rowbeam.model.timing import RollingShutterTiming


@dataclass(frozen=True)
class CyclesShutter:
    """Shutter for one render: centre time (exact ns), total length (ns), rolling exposure fraction."""

    centre_ns: Fraction
    duration_ns: Fraction
    rolling_duration: float      # Cycles `rolling_shutter_duration`

    @property
    def uses_motion_blur(self) -> bool:
        return self.duration_ns > 0


def timed_rows_shutter(first_row_ns: Fraction, row_period_ns: Fraction, rows: int, exposure_ns=0) -> CyclesShutter:
    """Shutter that traces row r at first_row_ns + r*row_period_ns; each row exposed over exposure_ns
    (0: one instant per row) centred on that time."""
    readout = rows * Fraction(row_period_ns)
    total = readout + exposure_ns
    centre = Fraction(first_row_ns) - Fraction(row_period_ns) + readout / 2
    rolling = float(Fraction(exposure_ns) / total) if exposure_ns and total else 0.0
    return CyclesShutter(centre, total if exposure_ns else readout, rolling)


def _camera_rows(t: RollingShutterTiming) -> tuple[Fraction, Fraction]:
    return t.first_row_time_exact(), t.period_ns


def label_shutter(t: RollingShutterTiming) -> CyclesShutter:
    """One deterministic time per row: the row's reference (exposure-centre) time."""
    first, period = _camera_rows(t)
    return timed_rows_shutter(first, period, t.rows)


def rgb_shutter(t: RollingShutterTiming) -> CyclesShutter:
    """Each row integrates over its own exposure interval, centred on its reference time."""
    first, period = _camera_rows(t)
    return timed_rows_shutter(first, period, t.rows, t.exposure_ns)


def cycles_row_time_ns(shutter: CyclesShutter, rows: int, r: int) -> Fraction:
    """Time Cycles gives top-row index r with rolling_shutter_duration = 0 (the measured model)."""
    return shutter.centre_ns - shutter.duration_ns / 2 + shutter.duration_ns * Fraction(r + 1, rows)
