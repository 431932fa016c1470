"""Sensor clocks and delivery (rowbeam.model.sensor_clock): closed forms for offset and drift, quantisation ties,
the device <-> master round trip within one resolution step, seeded jitter and delivery never before acquisition."""
from __future__ import annotations

import random
import statistics
from fractions import Fraction

import pytest

from rowbeam.model.sensor_clock import (
    Delivery,
    SensorClock,
    Timebase,
    device_times_of,
    event_time,
    seeded_normal,
)


def test_offset_and_drift_closed_form():
    # device = offset + t (1 + drift 1e-6): +50 ppm over 1 s adds 50 us; -100 ppm over 2 s takes 200 us off
    assert SensorClock(offset_ns=1_000_000, drift_ppm=50).device_ns(1_000_000_000) == 1_001_050_000
    assert SensorClock(offset_ns=-7, drift_ppm=-100).device_ns(2_000_000_000) == 2_000_000_000 - 200_000 - 7
    # drift applied with the wrong sign or to the offset would give other numbers
    c = SensorClock(offset_ns=3_000, drift_ppm=1000, resolution_ns=1)
    assert c.device_ns(10_000) == 3_000 + 10_010
    assert c.master_of_device(3_000 + 10_010) == 10_000
    assert SensorClock(drift_ppm=0.1).device_ns(10**9) == 10**9 + 100      # 0.1 ppm exact, no float error


def test_quantisation_ties_floor_and_nearest():
    floor = SensorClock(resolution_ns=1000, rounding="floor")
    nearest = SensorClock(resolution_ns=1000, rounding="nearest")
    xs = [Fraction(1500), Fraction(2500), Fraction(-1500), Fraction(-2500), Fraction(999), Fraction(2000)]
    assert [floor.quantise(x) for x in xs] == [1000, 2000, -2000, -3000, 0, 2000]
    # ties upward (round-half-even would give 2000, -2000, -2000 for 2500, -1500, -2500)
    assert [nearest.quantise(x) for x in xs] == [2000, 3000, -1000, -2000, 1000, 2000]
    assert nearest.device_ns(2500) == 3000 and floor.device_ns(2500) == 2000


@pytest.mark.parametrize("rounding", ["floor", "nearest"])
def test_round_trip_within_one_resolution_step(rounding):
    rng = random.Random(7)
    for _ in range(400):
        c = SensorClock(offset_ns=rng.randint(-10**9, 10**9), drift_ppm=rng.uniform(-1000, 1000),
                        resolution_ns=rng.choice([1, 7, 1000, 32_768]), rounding=rounding)
        t = rng.randint(0, 86_400 * 10**9)
        j = rng.randint(-5000, 5000)
        d = c.device_ns(t, j)
        assert d % c.resolution_ns == 0
        assert c.round_trip_ok(t, d, j)
        err = Fraction(t) - c.master_of_device(d, j)
        step = Fraction(c.resolution_ns) / c.rate
        assert (0 <= err < step) if rounding == "floor" else (abs(err) <= step / 2)
        if err != step / 2:                          # one tick off is outside the bound (but at a tie)
            assert not c.round_trip_ok(t, d + c.resolution_ns, j)


def test_round_trip_is_exact_on_unquantised_times():
    c = SensorClock(offset_ns=12_345, drift_ppm=-333.3)
    for t in (0, 1, 999_999_999, 86_400 * 10**9):
        assert c.master_of_device(c.offset_ns + t * c.rate) == t


def test_seeded_jitter_is_reproducible_and_has_its_std():
    c = SensorClock(jitter_ns=200, seed=11)
    assert [c.event_jitter_ns(k) for k in range(5)] == [c.event_jitter_ns(k) for k in range(5)]
    assert [c.event_jitter_ns(k) for k in range(5)] != [SensorClock(jitter_ns=200, seed=12).event_jitter_ns(k)
                                                       for k in range(5)]
    draws = [seeded_normal(3, "clock", k) for k in range(20_000)]
    assert abs(statistics.fmean(draws)) < 0.03 and abs(statistics.pstdev(draws) - 1) < 0.03
    d = Delivery(latency_ns=5_000_000, jitter_ns=1_000_000, seed=2)
    jit = [d.event_jitter_ns(k) for k in range(5000)]
    assert min(jit) >= 0 and abs(statistics.fmean(jit) - 1_000_000 * (2 / 3.141592653589793) ** 0.5) < 30_000


def test_event_time_block():
    tb = Timebase(SensorClock(offset_ns=-1_000, drift_ppm=20, resolution_ns=1000, jitter_ns=50, seed=1),
                  Delivery(latency_ns=30_000_000, jitter_ns=2_000_000, seed=4))
    block = event_time(tb, (100_000_000, 133_000_000), 3)
    j = tb.clock.event_jitter_ns(3)
    assert block["acquisition_ns"] == [100_000_000, 133_000_000]
    assert block["device"]["jitter_ns"] == j
    assert block["device"]["timestamp_ns"] == 1000 * ((-1_000 + 100_000_000 + 2_000 + j) // 1000)
    assert block["delivery"]["delivery_ns"] == 133_000_000 + 30_000_000 + tb.delivery.event_jitter_ns(3)
    assert block["delivery"]["delivery_ns"] >= block["acquisition_ns"][1]
    m = {"time": block}
    assert device_times_of(m, [100_000_000]).tolist() == [block["device"]["timestamp_ns"]]
    assert device_times_of({}, [5, 6]).tolist() == [5, 6]


@pytest.mark.parametrize("bad", [dict(drift_ppm=1000.5), dict(resolution_ns=0), dict(jitter_ns=-1),
                                 dict(rounding="even")])
def test_clock_refuses_bad_values(bad):
    with pytest.raises(ValueError):
        SensorClock(**bad)
    with pytest.raises(ValueError):
        Delivery(latency_ns=-1)


def test_every_sensor_type_declares_clock_and_delivery_in_the_rig_schema():
    from rowbeam.bundle.schema import validator
    from rowbeam.sensors import sensor_types

    defs = validator("rowbeam/rig@1").schema["$defs"]
    for t in sensor_types():
        props = defs[t.name]["properties"]
        assert props.get("clock") == {"$ref": "#/$defs/clock"}, t.name
        assert props.get("delivery") == {"$ref": "#/$defs/delivery"}, t.name


def test_rig_timebase_parsed_and_ideal_by_default():
    from rowbeam.model.rig import parse_rig

    cam = {"id": "cam", "type": "rolling_shutter_camera", "object": "Camera", "rate_hz": 10, "first_event_ns": 0,
           "readout_ns": 1000, "exposure_ns": 100, "readout_direction": "top_to_bottom"}
    rig = parse_rig({"schema": "rowbeam/rig@1", "sensors": [
        cam, {**cam, "id": "cam2", "clock": {"offset_ns": -5, "drift_ppm": 12.5, "resolution_ns": 1000,
                                             "rounding": "nearest"}, "delivery": {"latency_ns": 7}}]})
    assert rig.timebase("cam") == Timebase()
    assert rig.timebase("cam2") == Timebase(SensorClock(-5, 12.5, 1000, "nearest"), Delivery(7))
