"""Timing models: rolling-shutter rows, periodic events, scene clock, Cycles shutter mapping."""
from fractions import Fraction

import numpy as np
import pytest

from rowbeam.model.timing import RollingShutterTiming, SceneClock, periodic_event_start_ns
from rowbeam.blender.cycles.cycles_timing import cycles_row_time_ns, label_shutter, rgb_shutter, timed_rows_shutter

SEED = RollingShutterTiming(frame_start_ns=10_000_000_000, readout_ns=12_000_000, exposure_ns=4_000_000, rows=720)


def test_seed_row_centre_times():
    t = SEED.row_reference_times_ns()
    assert t.dtype == np.int64 and t.shape == (720,)
    assert t[0] * 1e-9 == pytest.approx(10.00201, abs=5e-6)  # seed gives 5 decimals
    assert t[360] * 1e-9 == pytest.approx(10.00801, abs=5e-6)
    assert t[719] * 1e-9 == pytest.approx(10.01399, abs=5e-6)
    # exact values: 10 s + 12 ms*(v+0.5)/720 + 2 ms, rounded half up
    assert (t[0], t[360], t[719]) == (10_002_008_333, 10_008_008_333, 10_013_991_667)
    assert SEED.reference_time_ns() == 10_008_000_000


def test_rows_are_a_half_row_earlier_than_cycles_native_time():
    """Cycles' native rolling shutter gives row r the time (r+1)/H of the readout: half a row late."""
    native = 10_000_000_000 + 2_000_000 + 12_000_000 * (np.arange(720) + 1) / 720
    assert np.abs(SEED.row_reference_times_ns() - native).max() == pytest.approx(8333.3, abs=1)


def test_bottom_to_top_reverses_rows():
    b = RollingShutterTiming(SEED.frame_start_ns, SEED.readout_ns, SEED.exposure_ns, 720, "bottom_to_top")
    assert np.array_equal(b.row_reference_times_ns(), SEED.row_reference_times_ns()[::-1])
    assert b.row_time_exact(719) == SEED.row_time_exact(0)


def test_exact_row_time_rounds_to_published_row_time():
    t = SEED.row_reference_times_ns()
    for v in (0, 1, 359, 719):
        assert int((SEED.row_time_exact(v) + Fraction(1, 2)) // 1) == t[v]


def test_exposure_start_and_global_shutter():
    assert SEED.row_exposure_start_ns()[0] == 10_000_000_000
    g = RollingShutterTiming(0, 0, 4_000_000, 10)
    assert np.all(g.row_reference_times_ns() == 2_000_000)


def test_periodic_schedule_is_exact_at_30hz():
    assert [periodic_event_start_ns(0, 30, k) for k in (0, 1, 2, 3, 30)] == [
        0, 33_333_333, 66_666_667, 100_000_000, 1_000_000_000]
    # 29.97 Hz is 2997/100, not a binary float approximation
    assert periodic_event_start_ns(0, 29.97, 2997) == 100_000_000_000


def test_scene_clock_maps_ns_to_frame_and_subframe():
    clock = SceneClock(fps=30, fps_base=1.0, frame_start=1)
    assert clock.frame_subframe(0) == (1, 0.0)
    f, s = clock.frame_subframe(50_000_000)   # 1.5 frames after frame_start
    assert (f, s) == (2, pytest.approx(0.5))
    assert clock.ns_of(31) == 1_000_000_000
    ntsc = SceneClock(fps=30000, fps_base=1001, frame_start=0)
    assert ntsc.ns_of(30000) == 1001 * 10**9   # 30000 frames of 1001/30000 s


@pytest.mark.parametrize("rows", [1, 90, 720])
def test_cycles_label_shutter_puts_every_row_on_its_reference_time(rows):
    t = RollingShutterTiming(10_000_000_000, 12_000_000, 4_000_000, rows)
    sh = label_shutter(t)
    for r in {0, rows // 2, rows - 1}:
        assert cycles_row_time_ns(sh, rows, r) == t.row_time_exact(r)
    # the shutter opens half a row before the readout start (+ exposure/2): Cycles' (r+1)/H made exact
    open_ns = sh.centre_ns - sh.duration_ns / 2
    assert open_ns == t.frame_start_ns + Fraction(t.exposure_ns, 2) - Fraction(12_000_000, 2 * rows)


def test_timed_rows_shutter_for_firings():
    """LiDAR firings at start + k*period: Cycles' (r+1)/H needs the shutter opened one period early."""
    period = Fraction(10**9, 10 * 2048)
    sh = timed_rows_shutter(Fraction(100_000_000), period, 2048)
    for k in (0, 1, 1024, 2047):
        assert cycles_row_time_ns(sh, 2048, k) == 100_000_000 + k * period
    assert sh.duration_ns == 2048 * period and sh.rolling_duration == 0.0


def test_cycles_rgb_shutter_exposes_each_row_around_its_reference_time():
    sh = rgb_shutter(SEED)
    assert sh.duration_ns == 16_000_000 and sh.rolling_duration == pytest.approx(0.25)
    # row r exposure centre: centre + D*(1-d)*((r+1)/H - 0.5) = reference time
    for r in (0, 360, 719):
        centre = sh.centre_ns + sh.duration_ns * (1 - Fraction(1, 4)) * (Fraction(r + 1, 720) - Fraction(1, 2))
        assert centre == SEED.row_time_exact(r)
