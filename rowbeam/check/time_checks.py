"""Checks of an event's `time` block (rowbeam.model.sensor_clock) and the causality audit over a bundle.

clock_model: the acquisition span is the timing model's; the timestamp jitter is the seeded draw; the device
timestamp is the declared clock applied to the acquisition start and maps back (device -> master) to it within one
resolution step. delivery: delivery_ns = acquisition end + latency + the seeded draw, never before the end of
acquisition. time_rig: the declared clock and latency are the bundle rig's. causality (bundle): no event's sample
(last row / firing / chirp time, acquisition end) is delivered before it is acquired.
"""
from __future__ import annotations

from rowbeam.model.sensor_clock import timebase_of_manifest
from rowbeam.sensors import type_of


def check_event_time(manifest: dict, add) -> None:
    """clock_model and delivery of one event manifest with a `time` block (none: nothing to check)."""
    block = manifest.get("time")
    if block is None:
        return
    index = manifest["event"]["index"]
    try:
        timebase = timebase_of_manifest(block)
    except ValueError as exc:
        add("clock_model", False, f"declared clock or latency unusable: {exc}")
        return
    start, end = block["acquisition_ns"]
    span = [int(t) for t in type_of(manifest).span_ns(manifest)]
    _check_clock(block["device"], timebase.clock, index, span, (start, end), add)
    _check_delivery(block["delivery"], timebase.delivery, index, end, add)


def _check_clock(device: dict, clock, index: int, span: list, acquisition: tuple, add) -> None:
    problems = []
    if list(acquisition) != span:
        problems.append(f"acquisition_ns {list(acquisition)} is not the timing model's span {span}")
    jitter = device["jitter_ns"]
    if jitter != clock.event_jitter_ns(index):
        problems.append(f"jitter_ns {jitter} is not the seeded draw {clock.event_jitter_ns(index)}")
    expected = clock.device_ns(span[0], jitter)
    if device["timestamp_ns"] != expected:
        problems.append(f"timestamp_ns {device['timestamp_ns']} is not the declared clock's {expected}")
    error = float(span[0] - clock.master_of_device(device["timestamp_ns"], jitter))
    if not clock.round_trip_ok(span[0], device["timestamp_ns"], jitter):
        lo, hi = clock.round_trip_bound()
        problems.append(f"device -> master maps the timestamp {error:.6g} ns from the acquisition start (bound "
                        f"[{float(lo):.6g}, {float(hi):.6g}] ns)")
    add("clock_model", not problems, "; ".join(problems) or (
        f"device timestamp {device['timestamp_ns']} ns = the declared clock at the acquisition start {span[0]} ns; "
        f"back to master within {error:.6g} ns (resolution {clock.resolution_ns} ns, {clock.rounding})"),
        round_trip_error_ns=error)


def _check_delivery(delivery: dict, latency, index: int, end: int, add) -> None:
    problems = []
    if delivery["jitter_ns"] != latency.event_jitter_ns(index):
        problems.append(f"jitter_ns {delivery['jitter_ns']} is not the seeded draw {latency.event_jitter_ns(index)}")
    expected = end + latency.latency_ns + delivery["jitter_ns"]
    if delivery["delivery_ns"] != expected:
        problems.append(f"delivery_ns {delivery['delivery_ns']} is not acquisition end + latency + jitter = {expected}")
    if delivery["delivery_ns"] < end:
        problems.append(f"delivered at {delivery['delivery_ns']} ns, before the end of acquisition {end} ns")
    add("delivery", not problems, "; ".join(problems) or
        f"delivered {delivery['delivery_ns'] - end} ns after the end of acquisition ({end} ns)",
        latency_ns=delivery["delivery_ns"] - end)


def check_time_against_rig(manifest: dict, timebase, add) -> None:
    """time_rig: the manifest's declared clock and latency equal the bundle rig's for its sensor."""
    block = manifest.get("time")
    if block is None:
        return
    declared = timebase_of_manifest(block)
    ok = declared == timebase
    add("time_rig", ok, "clock and delivery latency as the bundle's rig declares" if ok else
        f"the manifest declares {declared}, the bundle's rig {timebase}")


def check_causality(manifests: list, add) -> None:
    """causality (bundle): every event's last sample time and acquisition end are at or before its delivery; reports
    the delivery latency range per sensor. Events without a `time` block are not audited."""
    timed = [m for m in manifests if m is not None and "time" in m]
    if not timed:
        return
    late, latency = [], {}
    for m in timed:
        delivered = m["time"]["delivery"]["delivery_ns"]
        last = max(int(type_of(m).timing_from_manifest(m["event"]).times_span_ns()[1]), m["time"]["acquisition_ns"][1])
        if delivered < last:
            late.append(f"{m['sensor']['id']}/{m['event']['index']}: delivered {delivered} ns, last sample {last} ns")
        lo, hi = latency.get(m["sensor"]["id"], (None, None))
        d = delivered - m["time"]["acquisition_ns"][1]
        latency[m["sensor"]["id"]] = (d if lo is None else min(lo, d), d if hi is None else max(hi, d))
    ranges = ", ".join(f"{s} {lo}..{hi} ns" for s, (lo, hi) in sorted(latency.items()))
    add("causality", not late, "delivered before acquired: " + "; ".join(late[:5]) if late else
        f"{len(timed)} events, none delivered before its last sample was acquired; latency after acquisition end: "
        f"{ranges}", events=len(timed), violations=len(late))
