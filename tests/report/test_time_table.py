"""The report's time table: acquisition (master), device timestamp (device clock), delivery (master)."""
from __future__ import annotations

from rowbeam.model.sensor_clock import Delivery, SensorClock, Timebase, event_time
from rowbeam.report.time_table import time_table


def test_time_table_shows_the_three_times():
    block = event_time(Timebase(SensorClock(offset_ns=-350_000, resolution_ns=1000), Delivery(latency_ns=35_000_000)),
                       (1_000_000_000, 1_016_000_000), 30)
    text = time_table({"time": block})
    assert "1000000000 / 1016000000" in text and ">999650000<" in text and ">1051000000<" in text
    assert "35 ms after the end of acquisition" in text
    assert time_table({}) == ""
