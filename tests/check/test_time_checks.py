"""Sensor clocks and delivery in a real export: the manifest's `time` block (acquisition on the master clock, the
device timestamp, the delivery time) passes clock_model, delivery, time_rig and the bundle's causality audit; each
check fails on its planted fault (asserted on the check's status in the QA report dict)."""
from __future__ import annotations

import json

import pytest

from rowbeam.model.sensor_clock import SensorClock

from tests.check.test_checker import _tilted_with_rgb
from tests.check.test_checker_faults import _copy, _edit_manifest
from tests.check.test_planted_faults import fails, passes

CLOCK = {"offset_ns": -2_500_000, "drift_ppm": 250.0, "resolution_ns": 1000, "rounding": "floor",
         "jitter_ns": 400.0, "seed": 9}
DELIVERY = {"latency_ns": 35_000_000, "jitter_ns": 3_000_000.0, "seed": 5}


def _clocked(scale):
    truth, rig = _tilted_with_rgb(scale)
    rig["sensors"][0].update(clock=dict(CLOCK), delivery=dict(DELIVERY))
    return truth, rig


@pytest.fixture(scope="module")
def clocked(exports):
    return exports("tilted_plane_clocked", _clocked, scale=8)


def _manifest(exported) -> dict:
    return json.loads((exported.event / "manifest.json").read_text())


def test_time_block_of_a_clocked_camera(clocked):
    m = _manifest(clocked)
    t, e = m["time"], m["event"]
    start, end = e["frame_start_ns"], e["frame_start_ns"] + e["readout_ns"] + e["exposure_ns"]
    assert t["acquisition_ns"] == [start, end]
    j = t["device"]["jitter_ns"]
    assert j == SensorClock(**CLOCK).event_jitter_ns(e["index"])
    # closed form: floor to 1 us of offset + start * (1 + 250e-6) + jitter (start/4000 < 1 ns past start // 4000)
    assert t["device"]["timestamp_ns"] == 1000 * ((-2_500_000 + start + start // 4000 + j) // 1000)
    assert t["delivery"]["delivery_ns"] >= end + DELIVERY["latency_ns"]
    bundle = json.loads((clocked.bundle / "bundle.json").read_text())
    assert {"state", "command", "application", "acquisition", "delivery"} <= bundle["time_concepts"].keys()


@pytest.mark.parametrize("check", ["clock_model", "delivery", "time_rig", "causality"])
def test_correct_time_fields_pass(clocked, check):
    passes(clocked.bundle, check)


@pytest.mark.parametrize("edit", [
    lambda t: t["device"].update(timestamp_ns=t["device"]["timestamp_ns"] + 1000),        # one tick late
    lambda t: t["device"].update(jitter_ns=t["device"]["jitter_ns"] + 1,                  # not the seeded draw
                                 timestamp_ns=SensorClock(**CLOCK).device_ns(t["acquisition_ns"][0],
                                                                             t["device"]["jitter_ns"] + 1)),
    lambda t: t["device"]["clock"].update(resolution_ns=7),                              # declared tick differs
    lambda t: t.update(acquisition_ns=[t["acquisition_ns"][0] + 1, t["acquisition_ns"][1]]),
], ids=["timestamp_one_tick_late", "jitter_not_seeded", "resolution_edited", "acquisition_start_edited"])
def test_clock_model_fails_on_planted_faults(clocked, tmp_path, edit):
    root, ev = _copy(clocked, tmp_path)
    _edit_manifest(ev, lambda m: edit(m["time"]))
    fails(root, "clock_model")


def test_delivery_before_acquisition_fails_delivery_and_causality(clocked, tmp_path):
    root, ev = _copy(clocked, tmp_path)

    def early(m):
        t = m["time"]
        t["delivery"].update(jitter_ns=0, delivery_ns=t["acquisition_ns"][1] - 1)
        t["delivery"]["latency"].update(latency_ns=0, jitter_ns=0.0)
    _edit_manifest(ev, early)
    fails(root, "delivery")
    fails(root, "causality")


def test_delivery_off_the_declared_latency_fails(clocked, tmp_path):
    root, ev = _copy(clocked, tmp_path)
    _edit_manifest(ev, lambda m: m["time"]["delivery"].update(delivery_ns=m["time"]["delivery"]["delivery_ns"] + 1))
    fails(root, "delivery")
    passes(root, "causality")


def test_latency_not_the_rigs_fails_time_rig(clocked, tmp_path):
    root, ev = _copy(clocked, tmp_path)

    def shorter(m):                 # consistent in itself (delivery passes), but not what the rig declares
        d = m["time"]["delivery"]
        d["latency"]["latency_ns"] -= 1_000_000
        d["delivery_ns"] -= 1_000_000
    _edit_manifest(ev, shorter)
    passes(root, "delivery")
    fails(root, "time_rig")


def test_clock_not_the_rigs_fails_time_rig(clocked, tmp_path):
    root, ev = _copy(clocked, tmp_path)
    _edit_manifest(ev, lambda m: m["time"]["device"]["clock"].update(drift_ppm=-250.0))
    fails(root, "time_rig")


def test_timestamp_off_the_tick_but_within_the_round_trip_fails_clock_model(clocked, tmp_path):
    """1 ns off the declared clock's timestamp (no longer a multiple of the tick) yet still mapping back within one
    tick of the acquisition start: only the comparison with the declared clock catches it."""
    root, ev = _copy(clocked, tmp_path)
    clock = SensorClock(**CLOCK)

    def off(m):
        t = m["time"]
        d, j, start = t["device"]["timestamp_ns"], t["device"]["jitter_ns"], t["acquisition_ns"][0]
        delta = next(x for x in (1, -1) if clock.round_trip_ok(start, d + x, j))
        t["device"]["timestamp_ns"] = d + delta
    _edit_manifest(ev, off)
    fails(root, "clock_model")
