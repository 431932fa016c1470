"""IMU: sample timing model (`rowbeam.imu@1`), rig parser and registration.

Samples are instants on the scene clock: global sample n (n >= 0) of a sensor sampled at rate_hz is at
    t(n) = first_sample_ns + round_half_up(n * 1e9 / rate_hz)                 (exact rational, ties upward)
One event is a block of samples_per_event = S consecutive samples: event k holds n = k S .. k S + S - 1, so events
follow at rate_hz / S and event k starts at its first sample, t(k S). Its span is [t(k S), t(k S + S - 1)] (both
instants included); its reference time is the midpoint of the exact times of its first and last samples, rounded
half up.

IMU frame = the mount object's local axes with scale removed (`rowbeam.model.imu_kinematics`): angular velocity in
rad/s and specific force (acceleration minus gravity) in m/s^2, both in the IMU frame.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from rowbeam.model.imu_kinematics import DEFAULT_GRAVITY_WORLD
from rowbeam.model.imu_noise import ImuNoise
from rowbeam.model.modalities import IMU_MODALITIES
from rowbeam.model.surface_policy import DEFAULT_POLICY, SurfacePolicy
from rowbeam.model.timing import NS_PER_S, exact, periodic_event_start_ns, require_timing_model, round_half_up
from rowbeam.sensors.registry import SensorType, register
from rowbeam.util.errors import RowbeamError

IMU = "imu"
IMU_MODEL = "rowbeam.imu@1"
MAX_RATE_HZ = 4000                          # the highest sample rate an IMU may declare
DEFAULT_SAMPLES_PER_EVENT = 20
DEFAULT_STEP_NS = 10_000_000                # finite-difference step where motion is not differentiated exactly
SAMPLE_TIME_DEFINITION = ("t(n) = first_sample_ns + round_half_up(n * 1e9 / rate_hz) for global sample n; event k "
                          "holds n = k*samples_per_event .. (k+1)*samples_per_event - 1")
REFERENCE_TIME_DEFINITION = "midpoint of the exact times of the event's first and last samples, rounded half up"


@dataclass(frozen=True)
class ImuTiming:
    """Sample times of one IMU event (S samples starting at global sample first_index)."""

    first_sample_ns: int
    rate_hz: object                 # JSON number (exact() reads its decimal text)
    first_index: int
    samples: int

    def sample_time_exact(self, j: int) -> Fraction:
        """Exact time (ns) of the event's sample j (0 .. samples - 1)."""
        return self.first_sample_ns + Fraction((self.first_index + j) * NS_PER_S) / exact(self.rate_hz)

    def sample_times_ns(self) -> np.ndarray:
        """(S,) int64 sample times, rounded half up."""
        return np.array([self.first_sample_ns + round_half_up(Fraction((self.first_index + j) * NS_PER_S)
                                                               / exact(self.rate_hz)) for j in range(self.samples)],
                        dtype=np.int64)

    @property
    def period_ns(self) -> Fraction:
        """Sample period 1e9 / rate_hz (ns, exact)."""
        return Fraction(NS_PER_S) / exact(self.rate_hz)

    @property
    def event_start_ns(self) -> int:
        return int(self.sample_times_ns()[0])

    def span_ns(self) -> tuple[int, int]:
        """[first sample, last sample] (ns, as published)."""
        t = self.sample_times_ns()
        return int(t[0]), int(t[-1])

    def times_span_ns(self) -> tuple[int, int]:
        return self.span_ns()

    def reference_time_ns(self) -> int:
        return round_half_up((self.sample_time_exact(0) + self.sample_time_exact(self.samples - 1)) / 2)

    def to_manifest(self) -> dict:
        return {"timing_model": IMU_MODEL, "first_sample_ns": self.first_sample_ns, "rate_hz": self.rate_hz,
                "first_sample_index": self.first_index, "samples": self.samples,
                "event_start_ns": self.event_start_ns, "reference_time_ns": self.reference_time_ns(),
                "sample_time_definition": SAMPLE_TIME_DEFINITION,
                "reference_time_definition": REFERENCE_TIME_DEFINITION}

    @classmethod
    def from_manifest(cls, event: dict) -> "ImuTiming":
        require_timing_model(event, IMU_MODEL)
        return cls(event["first_sample_ns"], event["rate_hz"], event["first_sample_index"], event["samples"])


@dataclass(frozen=True)
class ImuSensor:
    """An IMU on a mount object: sample rate (Hz), samples per event, gravity (world, m/s^2), optional noise."""

    id: str
    object: str
    sample_rate_hz: object
    samples_per_event: int = DEFAULT_SAMPLES_PER_EVENT
    first_sample_ns: int = 0
    gravity_mps2: tuple = DEFAULT_GRAVITY_WORLD
    noise: ImuNoise | None = None
    finite_difference_step_ns: int = DEFAULT_STEP_NS
    surface_policy: SurfacePolicy = DEFAULT_POLICY     # every sensor spec has one; an IMU casts no rays
    type: str = IMU

    @property
    def rate_hz(self) -> Fraction:
        """Event rate (Hz, exact): sample_rate_hz / samples_per_event."""
        return exact(self.sample_rate_hz) / self.samples_per_event

    @property
    def first_event_ns(self) -> int:
        return self.first_sample_ns

    def event_start_ns(self, index: int) -> int:
        return periodic_event_start_ns(self.first_sample_ns, self.rate_hz, index)

    def timing(self, index: int) -> ImuTiming:
        return ImuTiming(self.first_sample_ns, self.sample_rate_hz, index * self.samples_per_event,
                         self.samples_per_event)

    def event_duration_ns(self) -> int:
        """Upper bound of last minus first sample time of any event: ceil((S - 1) * 1e9 / rate_hz)."""
        return math.ceil((self.samples_per_event - 1) * Fraction(NS_PER_S) / exact(self.sample_rate_hz))

    def event_cost(self, size_px=None) -> int:
        """Declared cost of one event: its samples (size_px unused)."""
        return int(self.samples_per_event)


def parse_imu_sensor(raw: dict, defaults: dict, where: str) -> ImuSensor:
    """Build an ImuSensor from a schema-valid rig entry; refuse a rate above MAX_RATE_HZ (one line naming it)."""
    values = {**defaults, **raw}
    rate = values.pop("rate_hz")
    if exact(rate) > MAX_RATE_HZ:
        raise RowbeamError(f"{where}.rate_hz: {rate} Hz is above the IMU bound of {MAX_RATE_HZ} Hz")
    noise = values.pop("noise", None)
    gravity = tuple(float(g) for g in values.pop("gravity_mps2", DEFAULT_GRAVITY_WORLD))
    return ImuSensor(sample_rate_hz=rate, gravity_mps2=gravity, noise=ImuNoise.from_rig(noise) if noise else None,
                     **values)


def imu_dims(manifest: dict) -> dict:
    """Named dimensions of an IMU event: S samples."""
    return {"S": manifest["event"]["samples"]}


def imu_poses(manifest: dict, arrays: dict):
    """(sample times (S,) int64 ns, sample poses (S, 4, 4) in the IMU frame, what) or None."""
    if {"sample_time_ns", "sample_T_world_imu"} <= arrays.keys():
        return arrays["sample_time_ns"], arrays["sample_T_world_imu"], "sample poses"
    return None


IMU_TYPE = register(SensorType(
    name=IMU, label="IMU", description="Angular velocity and specific force per sample, from the mount's motion",
    parse=parse_imu_sensor, timing_from_manifest=ImuTiming.from_manifest, start_key="event_start_ns",
    modalities=IMU_MODALITIES, dims=imu_dims,
    pose_arrays=("sample_time_ns", "sample_T_world_imu", "angular_velocity", "specific_force"), poses=imu_poses,
    modules={"check": "rowbeam.check.imu_checks", "report": "rowbeam.report.imu_page",
             "export": "rowbeam.blender.sensors.imu_event"}))
