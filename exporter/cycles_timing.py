"""Map a rolling-shutter event onto Cycles' shutter (pure arithmetic; no bpy).

Measured (bpy 5.0.1, `rolling_shutter_type='TOP'`, `rolling_shutter_duration=0`): Cycles gives
top-row index r the time  shutter_open + D*(r+1)/H  -- half a row later than the row centre
(r+0.5)/H. With duration d > 0 a row is exposed over d*D centred at
shutter_open + D*(1-d)*((r+1)/H - 0.5) + D/2.

We want row r at  start + readout*(r+0.5)/H + exposure/2  (contracts.timing). Choosing
    D = readout (+ exposure for the rgb render),  d = exposure / D,
    centre = start + exposure/2 + readout/2 - readout/(2H)
puts every Cycles row exactly on its reference time: the -readout/(2H) term is the half-row
correction.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from contracts.timing import RollingShutterTiming


@dataclass(frozen=True)
class CyclesShutter:
    """Shutter for one render: centre time (exact ns), total length (ns), rolling exposure fraction."""

    centre_ns: Fraction
    duration_ns: Fraction
    rolling_duration: float      # Cycles `rolling_shutter_duration`
    half_row_correction_ns: Fraction

    @property
    def uses_motion_blur(self) -> bool:
        return self.duration_ns > 0


def _centre(t: RollingShutterTiming) -> tuple[Fraction, Fraction]:
    correction = Fraction(t.readout_ns, 2 * t.rows)
    return t.frame_start_ns + Fraction(t.exposure_ns + t.readout_ns, 2) - correction, correction


def label_shutter(t: RollingShutterTiming) -> CyclesShutter:
    """One deterministic time per row: the row's reference (exposure-centre) time."""
    centre, correction = _centre(t)
    return CyclesShutter(centre, Fraction(t.readout_ns), 0.0, correction)


def rgb_shutter(t: RollingShutterTiming) -> CyclesShutter:
    """Each row integrates over its own exposure interval, centred on its reference time."""
    centre, correction = _centre(t)
    total = t.readout_ns + t.exposure_ns
    rolling = float(Fraction(t.exposure_ns, total)) if total else 0.0
    return CyclesShutter(centre, Fraction(total), rolling, correction)


def cycles_row_time_ns(shutter: CyclesShutter, rows: int, r: int) -> Fraction:
    """Time Cycles gives top-row index r with rolling_shutter_duration = 0 (the measured model)."""
    return shutter.centre_ns - shutter.duration_ns / 2 + shutter.duration_ns * Fraction(r + 1, rows)
