"""IMU timing model (`rowbeam.imu@1`) and rig parsing, against closed forms where the wrong readings disagree.

1024 Hz has the period 976562.5 ns, so every odd sample time is a rounding tie (half up, not half to even, not
truncation); events of 5 samples start at the first sample of their block.
"""
from fractions import Fraction

import pytest

from rowbeam.model.rig import parse_rig
from rowbeam.model.timing import periodic_event_count
from rowbeam.sensors.imu import MAX_RATE_HZ, ImuTiming
from rowbeam.util.errors import RowbeamError

START = 1_000_000_007


def _rig(**fields) -> dict:
    return {"schema": "rowbeam/rig@1", "sensors": [{"id": "imu", "type": "imu", "object": "mount", "rate_hz": 200,
                                                    **fields}]}


def test_sample_times_ties_round_half_up():
    t = ImuTiming(START, 1024, 0, 5)
    assert t.period_ns == Fraction(1_953_125, 2)
    # n * 976562.5: 0, 976562.5 -> 976563, 1953125, 2929687.5 -> 2929688, 3906250
    assert t.sample_times_ns().tolist() == [START + x for x in (0, 976_563, 1_953_125, 2_929_688, 3_906_250)]
    assert t.span_ns() == t.times_span_ns() == (START, START + 3_906_250)
    assert t.reference_time_ns() == START + 1_953_125                  # midpoint of 0 and 3906250 (exact)


def test_event_blocks_and_reference_tie():
    """Event 1 of 2-sample events at 1024 Hz: samples 2 and 3 (1953125 and 2929687.5 ns); reference = their exact
    midpoint 2441406.25 -> 2441406 (not the midpoint of the rounded times, 2441406.5 -> 2441407)."""
    t = ImuTiming(START, 1024, 2, 2)
    assert t.sample_times_ns().tolist() == [START + 1_953_125, START + 2_929_688]
    assert t.reference_time_ns() == START + 2_441_406
    assert t.event_start_ns == START + 1_953_125


def test_sensor_schedule_and_duration_bound():
    s = parse_rig(_rig(rate_hz=1024, samples_per_event=3, first_sample_ns=START)).sensors[0]
    assert s.rate_hz == Fraction(1024, 3)
    for k in range(7):
        timing = s.timing(k)
        assert s.event_start_ns(k) == timing.event_start_ns == int(timing.sample_times_ns()[0])
        first, last = timing.span_ns()
        assert last - first <= s.event_duration_ns() == 1_953_125         # ceil(2 * 976562.5)
    # events whose last sample is by 10 ms: k * 3 * 976562.5 + 1953125 <= 10 ms -> k = 0 .. 2
    assert periodic_event_count(START, s.rate_hz, s.event_duration_ns(), START + 10_000_000) == 3


def test_rig_defaults_and_noise():
    s = parse_rig(_rig(noise={"gyroscope_noise_density": 1e-4, "gyroscope_random_walk": 1e-5,
                              "accelerometer_noise_density": 2e-3, "accelerometer_random_walk": 3e-4,
                              "seed": 11})).sensors[0]
    assert s.samples_per_event == 20 and s.gravity_mps2 == (0.0, 0.0, -9.80665) and s.first_sample_ns == 0
    assert s.noise.seed == 11 and s.noise.accelerometer.random_walk == 3e-4


def test_rate_above_the_bound_is_one_line_naming_the_field():
    with pytest.raises(RowbeamError, match=r"sensors\[0\]\.rate_hz: 5000 Hz is above the IMU bound of 4000 Hz"):
        parse_rig(_rig(rate_hz=5000))
    assert parse_rig(_rig(rate_hz=MAX_RATE_HZ)).sensors[0].sample_rate_hz == MAX_RATE_HZ


@pytest.mark.parametrize("field, value", [("samples_per_event", 0), ("gravity_mps2", [0, 0]),
                                          ("noise", {"gyroscope_noise_density": 1e-4})])
def test_schema_refuses_bad_fields(field, value):
    with pytest.raises(RowbeamError, match=field):
        parse_rig(_rig(**{field: value}))
