"""Sensor clocks and delivery latency: what a sensor's own clock writes and when its data reaches a consumer.

Master clock: the scene clock (`scene_monotonic_ns`, rowbeam.model.timing); every acquisition time is on it.
A sensor's device clock maps a master time t (ns) to the timestamp it writes:

    device(t) = Q(offset_ns + t * (1 + drift_ppm * 1e-6) + jitter)

with the event's timestamp jitter (integer ns, drawn once per event from a recorded seed) and the quantiser Q of
the declared resolution: "floor" -> resolution * floor(x / resolution) (a counter that truncates),
"nearest" -> the nearest multiple, ties upward. All arithmetic is exact (integers and Fractions).
The inverse, master_of_device(d) = (d - offset_ns - jitter) / (1 + drift_ppm * 1e-6), recovers t to within one
resolution step: floor: t - master_of_device(device(t)) in [0, resolution / rate); nearest: |.| <= resolution / 2 / rate.

Delivery (master clock): delivery_ns = end of acquisition + latency_ns + jitter, jitter = |N(0, jitter_ns^2)|
rounded to ns (a half-normal draw per event from a recorded seed), so a sample is never delivered before it is
acquired.

Seeded draws use their own generator (sha256 of seed, stream and event index -> Box-Muller), so a recorded seed
gives the same value on every machine and library version; the realised value is also recorded.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from fractions import Fraction

import numpy as np

from rowbeam.model.timing import exact

MAX_DRIFT_PPM = 1000                       # |drift_ppm| bound (the rig schema states the same number)
ROUNDING = ("floor", "nearest")
STAMPED = "acquisition_start"              # the master time an event's device timestamp stamps
DEVICE_RULE = ("device(t) = Q(offset_ns + t * (1 + drift_ppm * 1e-6) + jitter_ns), t = master (scene clock) ns; "
               "Q: floor -> resolution_ns * floor(x / resolution_ns), nearest -> nearest multiple of resolution_ns, "
               "ties upward; exact arithmetic; jitter_ns: this event's draw, the same for every sample of the event "
               "(rows, firings, chirps: device time of each = device(its master time))")
DELIVERY_RULE = ("delivery_ns = acquisition end (master ns) + latency_ns + jitter_ns, jitter_ns = round(|N(0, "
                 "latency jitter_ns^2)|) drawn per event from the seed; master clock")


def seeded_normal(seed: int, stream: str, index: int) -> float:
    """A standard normal draw fixed by (seed, stream, index): Box-Muller on two uniforms from sha256."""
    digest = hashlib.sha256(f"{int(seed)}:{stream}:{int(index)}".encode()).digest()
    u1 = (int.from_bytes(digest[:8], "big") + 1) / 2.0 ** 64        # (0, 1]
    u2 = int.from_bytes(digest[8:16], "big") / 2.0 ** 64            # [0, 1)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


@dataclass(frozen=True)
class SensorClock:
    """A device clock: offset_ns (device - master at t = 0, ns), drift_ppm (rate error, |.| <= 1000),
    resolution_ns (>= 1, the timestamp's tick), rounding (ROUNDING), jitter_ns (std of the per-event timestamp
    jitter, ns, >= 0) and its seed."""

    offset_ns: int = 0
    drift_ppm: float = 0.0
    resolution_ns: int = 1
    rounding: str = "floor"
    jitter_ns: float = 0.0
    seed: int = 0

    def __post_init__(self):
        if self.rounding not in ROUNDING:
            raise ValueError(f"unknown rounding {self.rounding!r}")
        if not (abs(self.drift_ppm) <= MAX_DRIFT_PPM and self.resolution_ns >= 1 and self.jitter_ns >= 0):
            raise ValueError("drift_ppm beyond +-1000, resolution_ns < 1 or jitter_ns < 0")

    @property
    def rate(self) -> Fraction:
        """Device ns per master ns, exact: 1 + drift_ppm * 1e-6."""
        return 1 + exact(self.drift_ppm) / 1_000_000

    def event_jitter_ns(self, index: int) -> int:
        """Timestamp jitter of event `index` (integer ns): round(jitter_ns * N(0, 1)) from the seed."""
        return round(self.jitter_ns * seeded_normal(self.seed, "clock", index)) if self.jitter_ns else 0

    def quantise(self, x) -> int:
        """Q(x): the timestamp (integer ns, a multiple of resolution_ns) of an exact device time x."""
        r = self.resolution_ns
        x = Fraction(x)
        if self.rounding == "floor":
            return r * math.floor(x / r)
        return r * math.floor(x / r + Fraction(1, 2))

    def device_ns(self, t_master, jitter_ns: int = 0) -> int:
        """The timestamp the device writes for master time t_master (ns, int or Fraction)."""
        return self.quantise(self.offset_ns + Fraction(t_master) * self.rate + jitter_ns)

    def device_times_ns(self, times, jitter_ns: int = 0) -> np.ndarray:
        """device_ns of every master time (int64 [N] in, int64 [N] out)."""
        return np.array([self.device_ns(int(t), jitter_ns) for t in np.asarray(times).ravel()], dtype=np.int64)

    def master_of_device(self, device_ns, jitter_ns: int = 0) -> Fraction:
        """Inverse map, exact: the master time (ns) whose unquantised device time is device_ns."""
        return (Fraction(device_ns) - self.offset_ns - jitter_ns) / self.rate

    def round_trip_bound(self) -> tuple[Fraction, Fraction]:
        """[lo, hi] of t - master_of_device(device_ns(t)) (ns): floor [0, res/rate), nearest [-res/2/rate, res/2/rate]."""
        step = Fraction(self.resolution_ns) / self.rate
        return (Fraction(0), step) if self.rounding == "floor" else (-step / 2, step / 2)

    def round_trip_ok(self, t_master, device_ns, jitter_ns: int = 0) -> bool:
        """Whether master_of_device(device_ns) is within the quantisation bound of t_master."""
        lo, hi = self.round_trip_bound()
        err = Fraction(t_master) - self.master_of_device(device_ns, jitter_ns)
        return lo <= err < hi if self.rounding == "floor" else lo <= err <= hi

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Delivery:
    """Delivery latency: latency_ns (fixed, >= 0) + a half-normal jitter of std jitter_ns (ns, >= 0) from seed."""

    latency_ns: int = 0
    jitter_ns: float = 0.0
    seed: int = 0

    def __post_init__(self):
        if self.latency_ns < 0 or self.jitter_ns < 0:
            raise ValueError("latency_ns and jitter_ns must be >= 0")

    def event_jitter_ns(self, index: int) -> int:
        """Delivery jitter of event `index` (integer ns, >= 0): round(|jitter_ns * N(0, 1)|) from the seed."""
        return round(abs(self.jitter_ns * seeded_normal(self.seed, "delivery", index))) if self.jitter_ns else 0

    def delivery_ns(self, acquisition_end_ns: int, index: int) -> int:
        """When event `index`, acquired until acquisition_end_ns (master), reaches a consumer (master ns)."""
        return int(acquisition_end_ns) + self.latency_ns + self.event_jitter_ns(index)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Timebase:
    """A sensor's clock and delivery (rig `clock`, `delivery`; defaults: an ideal clock, delivered at once)."""

    clock: SensorClock = SensorClock()
    delivery: Delivery = Delivery()


IDEAL = Timebase()


def parse_timebase(raw: dict) -> Timebase:
    """The Timebase of a schema-valid rig sensor entry's optional `clock` and `delivery` objects."""
    clock = raw.get("clock") or {}
    delivery = raw.get("delivery") or {}
    return Timebase(SensorClock(**clock), Delivery(**delivery))


def event_time(timebase: Timebase, span_ns: tuple[int, int], index: int) -> dict:
    """The manifest `time` block of event `index` acquired over span_ns = [start, end] (master ns)."""
    start, end = int(span_ns[0]), int(span_ns[1])
    clock, delivery = timebase.clock, timebase.delivery
    cj, dj = clock.event_jitter_ns(index), delivery.event_jitter_ns(index)
    return {
        "master_clock": "scene_monotonic_ns",
        "acquisition_ns": [start, end],
        "device": {"clock": clock.to_json(), "stamped": STAMPED, "jitter_ns": cj,
                   "timestamp_ns": clock.device_ns(start, cj), "rule": DEVICE_RULE},
        "delivery": {"latency": delivery.to_json(), "jitter_ns": dj, "delivery_ns": end + delivery.latency_ns + dj,
                     "rule": DELIVERY_RULE},
    }


def timebase_of_manifest(time_block: dict) -> Timebase:
    """The Timebase a manifest `time` block declares."""
    return Timebase(SensorClock(**time_block["device"]["clock"]), Delivery(**time_block["delivery"]["latency"]))


def device_times_of(manifest: dict, times) -> np.ndarray:
    """Device timestamps (int64 [N]) of master times (ns) of an event, by its manifest's `time` block (ideal clock
    when it has none)."""
    block = manifest.get("time")
    if block is None:
        return np.asarray(times, dtype=np.int64).ravel()
    return timebase_of_manifest(block).clock.device_times_ns(times, block["device"]["jitter_ns"])


TIME_CONCEPTS = {
    "state": "the scene's state at a master time: state log samples (state/state_log_*.json bodies[].t_ns with "
             "poses and velocities)",
    "command": "when a controller issued a command: state log commands[].commands[].command_ns (master ns)",
    "application": "when a command took effect on the scene's motion: state log commands[].commands[]."
                   "application_ns (master ns, >= command_ns)",
    "acquisition": "when a sensor sampled the scene: event manifest `event` timing model (row / firing / chirp "
                   "times, per-point t_ns) and time.acquisition_ns [start, end] (master ns)",
    "delivery": "when an event's data reaches a consumer: event manifest time.delivery.delivery_ns (master ns, >= "
                "time.acquisition_ns[1])",
    "device_timestamp": "what the sensor's own clock writes: event manifest time.device.timestamp_ns (device ns; "
                        "time.device.rule maps any master time of the event to device ns)",
}
