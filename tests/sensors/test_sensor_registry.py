"""The sensor-type registry and the periods / time spans every timing model exposes.

Periods and spans are compared with closed forms on rigs where the wrong readings disagree: rounding ties (half up,
not half to even), bottom_to_top readout (the first row read is the bottom one), a cw LiDAR with channel time
offsets, a radar with several chirps of an odd period and a chirp offset.
"""
from fractions import Fraction

import pytest

from rowbeam.model.rig import parse_rig
from rowbeam.model.timing import RollingShutterTiming
from rowbeam.sensors import (
    MODALITIES,
    find_sensor_type,
    load_layer,
    manifest_dims,
    required,
    sensor_type,
    sensor_types,
    type_of,
)
from rowbeam.sensors.camera import CAMERA
from rowbeam.sensors.lidar import LIDAR, SpinningTiming
from rowbeam.sensors.imu import IMU, ImuTiming
from rowbeam.sensors.radar import RADAR, RadarTiming
from rowbeam.util.errors import RowbeamError

START = 1_000_000_007


def _manifest(kind: str, timing) -> dict:
    return {"schema": "rowbeam/sample@1", "sensor": {"id": "s", "type": kind, "object": "o"},
            "event": timing.to_manifest()}


# --- rolling shutter ---------------------------------------------------------------------------------------------

def test_camera_row_period_and_span_with_ties():
    """readout 9 ns over 3 rows, exposure 2 ns: row times 1.5+1 = 2.5 and 7.5+1 = 8.5 ns after the start are ties;
    half up gives 3 and 9 (half to even would give 2 and 8)."""
    t = RollingShutterTiming(START, readout_ns=9, exposure_ns=2, rows=3)
    assert t.period_ns == Fraction(3)
    assert t.span_ns() == (START, START + 9 + 2)
    assert t.times_span_ns() == (START + 3, START + 9)
    assert t.first_row_time_exact() == START + Fraction(5, 2)


def test_camera_period_is_exact_when_rows_do_not_divide_the_readout():
    t = RollingShutterTiming(START, readout_ns=1001, exposure_ns=1000, rows=3)
    assert t.period_ns == Fraction(1001, 3)                       # not 333 or 333.67
    assert t.span_ns() == (START, START + 2001)                   # readout + exposure, an odd sum
    # row 0: 1001/6 + 500 = 666.83 -> 667; row 2: 5005/6 + 500 = 1334.17 -> 1334
    assert t.times_span_ns() == (START + 667, START + 1334)
    assert t.reference_time_ns() == START + 1001                  # 2001/2 = 1000.5 -> 1001 (half up)


def test_camera_bottom_to_top_first_row_is_the_bottom_row():
    t = RollingShutterTiming(START, readout_ns=9, exposure_ns=2, rows=3, direction="bottom_to_top")
    rows = t.row_reference_times_ns()
    assert t.first_row_time_exact() == t.row_time_exact(2) == START + Fraction(5, 2)
    assert t.times_span_ns() == (int(rows[2]), int(rows[0])) == (START + 3, START + 9)
    assert t.period_ns == Fraction(3) and t.span_ns() == (START, START + 11)


# --- spinning LiDAR ----------------------------------------------------------------------------------------------

def _lidar_rig(**extra) -> dict:
    lidar = {"id": "lidar", "type": LIDAR, "object": "mount", "rotation_hz": 1_000_000, "azimuth_steps": 16,
             "elevations_deg": [-1.0, 0.0, 1.0], "time_offsets_ns": [0, 7, 3], "spin_direction": "cw",
             "first_sweep_ns": START, "min_range_m": 0.5, "max_range_m": 50.0, **extra}
    return {"schema": "rowbeam/rig@1", "sensors": [lidar]}


def test_lidar_cw_firing_period_and_span_with_ties():
    """1 MHz x 16 firings: a 62.5 ns firing period; firing 1 at 62.5 ns is a tie (63 half up, 62 half to even)."""
    sensor = parse_rig(_lidar_rig()).sensors[0]
    assert sensor.spin_direction == "cw"
    t = sensor.timing(0)
    assert t.period_ns == Fraction(125, 2)
    assert int(t.firing_times_ns()[1]) == START + 63
    assert t.span_ns() == (START, START + 1000)                   # 16 x 62.5 ns: one sweep
    # first beam: firing 0 + smallest offset 0; last: firing 15 at 937.5 -> 938, + largest offset 7
    assert t.times_span_ns() == (START, START + 938 + 7)
    beams = t.beam_times_ns()
    assert t.times_span_ns() == (int(beams.min()), int(beams.max()))
    times, what = t.acquisition_times()
    assert list(times[:3]) == [START, START + 3, START + 7] and what[1] == {"firing": 0, "channel_group": 1,
                                                                             "channels": [2]}


def test_lidar_span_rounds_an_inexact_sweep_half_up():
    """7 Hz x 3 firings: the sweep is 1e9/7 = 142857142.857 ns -> 142857143 (truncation would give ...142)."""
    t = SpinningTiming(START, 7, 3, (0,))
    assert t.period_ns == Fraction(1_000_000_000, 21)
    assert t.span_ns() == (START, START + 142_857_143)
    assert t.times_span_ns() == (START, START + 95_238_095)      # 2e9/21 = 95238095.24


# --- radar -------------------------------------------------------------------------------------------------------

def test_radar_chirp_period_and_span_several_chirps():
    """4 chirps of 3 ns after a 5 ns offset: chirp j at 5 + (2j+1)*1.5 ns (ties 6.5 -> 7, 15.5 -> 16)."""
    t = RadarTiming(START, chirp_offset_ns=5, chirp_period_ns=3, chirps=4)
    assert t.period_ns == Fraction(3)
    assert t.span_ns() == (START, START + 5 + 4 * 3)
    assert t.times_span_ns() == (START + 7, START + 16)
    assert list(t.acquisition_times()[0]) == [START + 7, START + 10, START + 13, START + 16]


# --- spans from manifests, through the registry ------------------------------------------------------------------

@pytest.mark.parametrize("kind, timing", [
    (CAMERA, RollingShutterTiming(START, 9, 2, 3, "bottom_to_top")),
    (LIDAR, SpinningTiming(START, 1_000_000, 16, (0, 7, 3))),
    (RADAR, RadarTiming(START, 5, 3, 4)),
    (IMU, ImuTiming(START, 1024, 0, 5)),
])
def test_span_from_manifest_equals_the_timing_model(kind, timing):
    m = _manifest(kind, timing)
    assert type_of(m).span_ns(m) == timing.span_ns()
    assert type_of(m).timing_from_manifest(m["event"]).times_span_ns() == timing.times_span_ns()
    assert m["event"][type_of(m).start_key] == START


# --- the registry ------------------------------------------------------------------------------------------------

def test_builtin_types_and_capabilities():
    assert [t.name for t in sensor_types()] == [CAMERA, LIDAR, RADAR, IMU]
    assert [t.has_rows for t in sensor_types()] == [True, False, False, False]
    assert [t.timed_beams for t in sensor_types()] == [False, True, True, False]
    assert list(MODALITIES) == [CAMERA, LIDAR, RADAR, IMU, "flow"]
    assert "camera_z" in required(CAMERA) and "points" in required(RADAR)


def test_every_type_registers_its_check_and_report_page():
    load_layer("check")
    load_layer("report")
    for t in sensor_types():
        assert callable(t.hook("check_event")), t.name
        page = t.hook("report_page")
        assert page is not None and callable(page.render) and page.kind, t.name
    assert sensor_type(LIDAR).hook("cross_check").partner == CAMERA
    assert sensor_type(RADAR).hook("cross_check").partner == LIDAR


def test_unknown_type_is_a_one_line_error():
    with pytest.raises(RowbeamError, match="unknown sensor type 'sonar'"):
        sensor_type("sonar")
    assert find_sensor_type("sonar") is None


def test_dims_by_type():
    m = {"sensor": {"type": RADAR}, "event": {"chirps": 4}, "calibration": {"beams": {"table": [{}, {}]}},
         "modalities": {"points": {"shape": [5]}}}
    assert manifest_dims(m) == {"K": 4, "B": 2, "N": 5}
