"""The small time table on every event page: acquisition on the master clock, the device timestamp, the delivery."""
from __future__ import annotations

from rowbeam.report import html


def time_table(manifest: dict) -> str:
    """HTML: an event's acquisition [start, end] (master ns), device timestamp (device ns) and delivery (master ns,
    and its latency after the end of acquisition); "" for a manifest without a `time` block."""
    t = manifest.get("time")
    if not t:
        return ""
    start, end = t["acquisition_ns"]
    dev, deliv = t["device"], t["delivery"]
    clock = dev["clock"]
    rows = [["acquisition start / end", "master", f"{start} / {end}", "timing model span"],
            ["device timestamp", "device", str(dev["timestamp_ns"]),
             f"offset {clock['offset_ns']} ns, drift {clock['drift_ppm']:g} ppm, tick {clock['resolution_ns']} ns "
             f"({clock['rounding']}), jitter {dev['jitter_ns']} ns; stamps the acquisition start"],
            ["delivery", "master", str(deliv["delivery_ns"]),
             f"{(deliv['delivery_ns'] - end) / 1e6:g} ms after the end of acquisition"]]
    return "<h2>Time</h2>" + html.table(["time", "clock", "ns", "how"], [[html.esc(c) for c in r] for r in rows])
