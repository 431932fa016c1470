"""Rounding ties: every published integer-ns time rounds half UP. Each fixture hits exact .5 ties whose floor is
even (ties-to-even, Python's round() or numpy's rint, would round down there) with odd readout + exposure sums
and rates other than 10/20/30 Hz. The oracle is floor(x + 1/2) on exact rationals."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from rowbeam.model.timing import RollingShutterTiming, periodic_event_start_ns, round_half_up
from rowbeam.sensors.lidar import SpinningTiming
from rowbeam.sensors.radar import RadarTiming


def half_up(x: Fraction) -> int:
    return (x.numerator * 2 + x.denominator) // (2 * x.denominator)


def _ties_to_even_differs(values) -> int:
    """How many exact values are .5 ties with an even floor (where half-up and ties-to-even disagree)."""
    return sum(1 for x in values if x.denominator == 2 and (x.numerator // 2) % 2 == 0)


def test_round_half_up_itself():
    assert [round_half_up(Fraction(n, 2)) for n in (-3, -1, 1, 3, 4, 5)] == [-1, 0, 1, 2, 2, 3]
    assert round_half_up(Fraction(1100001, 2)) == 550001 != round(Fraction(1100001, 2))


@pytest.mark.parametrize("readout, exposure, rows, direction", [
    (1_000_001, 100_000, 90, "top_to_bottom"),         # odd readout + exposure sum
    (999_999, 3, 180, "bottom_to_top"),
    (999_990, 100_000, 90, "top_to_bottom"),          # readout = 90 x 11111 (odd): every row time on a tie
    (999_990, 100_000, 90, "bottom_to_top"),
    (4, 2, 4, "top_to_bottom"),
])
def test_rolling_shutter_times_round_ties_up(readout, exposure, rows, direction):
    t = RollingShutterTiming(1_000, readout, exposure, rows, direction)
    exact = [t.row_time_exact(r) for r in range(rows)]
    assert t.row_reference_times_ns().tolist() == [half_up(x) for x in exact]
    ref = Fraction(1_000) + Fraction(readout + exposure, 2)
    assert t.reference_time_ns() == half_up(ref)
    if (readout + exposure) % 2 and ((readout + exposure) // 2) % 2 == 0:
        assert t.reference_time_ns() != 1_000 + round(Fraction(readout + exposure, 2))      # a tie that matters
    starts = [Fraction(1_000) + Fraction(readout * (r if direction == "top_to_bottom" else rows - 1 - r), rows)
              for r in range(rows)]
    assert t.row_exposure_start_ns().tolist() == [half_up(x) for x in starts]


def test_the_rolling_shutter_fixtures_hit_ties():
    t = RollingShutterTiming(0, 999_990, 100_000, 90)
    assert _ties_to_even_differs([t.row_time_exact(r) for r in range(90)]) == 45
    assert _ties_to_even_differs([Fraction(1_100_001, 2)]) == 1


@pytest.mark.parametrize("rate_hz, index", [(40.96, 1), (1.6384, 1), (40.96, 5)])
def test_periodic_event_start_rounds_ties_up(rate_hz, index):
    """1e9 / 40.96 = 24414062.5 ns and 1e9 / 1.6384 = 610351562.5 ns: exact ties (even floor) at index 1."""
    exact = Fraction(index * 10**9) / Fraction(str(rate_hz))
    assert periodic_event_start_ns(7, rate_hz, index) == 7 + half_up(exact)
    if index == 1:
        assert exact.denominator == 2 and half_up(exact) != round(exact)


@pytest.mark.parametrize("rotation_hz, steps", [(10, 512), (12.5, 2048), (7.8125, 16384)])
def test_lidar_firing_times_round_ties_up(rotation_hz, steps):
    """1e9 / (10 x 512) = 195312.5 ns: odd firings fall on .5 ties."""
    t = SpinningTiming(3, rotation_hz, steps, (0, 1))
    p = Fraction(10**9) / (Fraction(str(rotation_hz)) * steps)
    exact = [3 + k * p for k in range(steps)]
    assert t.firing_times_ns().tolist() == [half_up(x) for x in exact]
    assert _ties_to_even_differs(exact) > 0
    assert np.array_equal(t.beam_times_ns()[:, 1], t.firing_times_ns() + 1)


@pytest.mark.parametrize("period", [3, 7, 50_001])
def test_radar_chirp_times_round_ties_up(period):
    """An odd chirp period puts every chirp centre on a .5 tie."""
    t = RadarTiming(11, 4, period, 9)
    exact = [t.chirp_time_exact(j) for j in range(9)]
    assert t.chirp_times_ns().tolist() == [half_up(x) for x in exact]
    assert _ties_to_even_differs(exact) > 0


@pytest.mark.parametrize("rotation_hz", [40.96, 12.8, 7.5])
def test_lidar_sweep_duration_rounds_half_up(rotation_hz):
    """One sweep = 1e9 / rotation_hz ns rounded half up: 40.96 Hz gives the tie 24414062.5 -> 24414063; a rate that
    is not an integer (12.8, 7.5 Hz) must not be truncated to one."""
    from rowbeam.model.rig import parse_rig

    sensor = {"id": "lidar_top", "type": "spinning_lidar", "object": "mount", "rotation_hz": rotation_hz,
              "azimuth_steps": 1024, "elevations_deg": [-10.0, 0.0], "first_sweep_ns": 0, "min_range_m": 0.5,
              "max_range_m": 100.0}
    lidar = parse_rig({"schema": "rowbeam/rig@1", "sensors": [sensor]}, "rig.json").sensors[0]
    assert lidar.event_duration_ns() == half_up(Fraction(10**9) / Fraction(str(rotation_hz)))
