"""Spinning LiDAR: beam table, presets and the per-firing timing model (`rowbeam.spinning_lidar@1`).

LiDAR frame: x forward, y left, z up (metres); azimuth from +x toward +y, elevation up from
the xy plane. Sweep s starts at first_sweep_ns + s/rotation_hz. Firing k of a sweep starts at
sweep_start + k * period/azimuth_steps; channel c fires time_offsets_ns[c] later. Every beam's
azimuth follows the head's rotation at its own time:
    azimuth(k, c) = start_azimuth + sign * 360 deg * rotation_hz * (t(k, c) - sweep_start) + azimuth_offset[c]
(sign +1 for ccw, -1 for cw). Times are exact rationals, published as int64 ns rounded half up.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from fractions import Fraction

import numpy as np

from rowbeam.util.errors import RowbeamError
from rowbeam.model.modalities import LIDAR_MODALITIES
from rowbeam.model.surface_policy import DEFAULT_POLICY, SurfacePolicy
from rowbeam.model.timing import (
    MIN_FIRING_PERIOD_NS, NS_PER_S, exact, periodic_event_start_ns, require_timing_model, round_half_up,
)
from rowbeam.sensors.registry import SensorType, register

LIDAR = "spinning_lidar"
SPINNING_MODEL = "rowbeam.spinning_lidar@1"

# VLP-16-like: 16 lasers in firing order, 2 deg apart, fired 2.304 us apart.
VLP16_ELEVATIONS = (-15, 1, -13, 3, -11, 5, -9, 7, -7, 9, -5, 11, -3, 13, -1, 15)
VLP16_TIME_OFFSETS_NS = tuple(2304 * i for i in range(16))


def preset_table(name: str) -> dict:
    """Channel table of a preset: elevations_deg (+ time_offsets_ns)."""
    if name.startswith("uniform_"):
        n = int(name.split("_")[1])
        return {"elevations_deg": [float(x) for x in np.linspace(-25.0, 15.0, n)]}
    if name == "vlp16":
        return {"elevations_deg": [float(x) for x in VLP16_ELEVATIONS], "time_offsets_ns": list(VLP16_TIME_OFFSETS_NS)}
    raise ValueError(name)


@dataclass(frozen=True)
class LidarSensor:
    id: str
    object: str
    rotation_hz: float
    azimuth_steps: int
    elevations_deg: tuple
    first_sweep_ns: int
    min_range_m: float
    max_range_m: float
    spin_direction: str = "ccw"
    start_azimuth_deg: float = 0.0
    azimuth_offsets_deg: tuple = ()
    time_offsets_ns: tuple = ()
    motion_steps: int = 7
    verify_firings: int = 8
    preset: str | None = None
    surface_policy: SurfacePolicy = DEFAULT_POLICY     # rowbeam.model.surface_policy
    type: str = LIDAR

    @property
    def channels(self) -> int:
        return len(self.elevations_deg)

    @property
    def first_event_ns(self) -> int:
        """Event (sweep) 0 start, ns; the periodic-sensor interface shared with CameraSensor."""
        return self.first_sweep_ns

    @property
    def rate_hz(self) -> float:
        """Events (sweeps) per second."""
        return self.rotation_hz

    def sweep_start_ns(self, index: int) -> int:
        return periodic_event_start_ns(self.first_sweep_ns, self.rotation_hz, index)

    def event_start_ns(self, index: int) -> int:
        return self.sweep_start_ns(index)

    def timing(self, index: int) -> "SpinningTiming":
        return SpinningTiming(self.sweep_start_ns(index), self.rotation_hz, self.azimuth_steps, self.time_offsets_ns)

    def event_duration_ns(self) -> int:
        """One full sweep (1/rotation_hz), ns rounded half up."""
        return round_half_up(NS_PER_S / exact(self.rotation_hz))

    def event_cost(self, size_px=None) -> int:
        """Declared render cost of one sweep: azimuth_steps x channels beams (size_px unused)."""
        return int(self.azimuth_steps) * len(self.beam_table())

    def beam_table(self) -> list[dict]:
        return [{"channel": c, "elevation_deg": float(e), "azimuth_offset_deg": float(self.azimuth_offsets_deg[c]),
                 "time_offset_ns": int(self.time_offsets_ns[c])} for c, e in enumerate(self.elevations_deg)]

    def azimuths_deg(self, timing: "SpinningTiming") -> np.ndarray:
        """(F, C) azimuth of every beam, degrees (not wrapped)."""
        sign = 1.0 if self.spin_direction == "ccw" else -1.0
        dt_s = timing.beam_offsets_exact_s()                       # (F, C) float64 seconds since sweep start
        return (self.start_azimuth_deg + sign * 360.0 * float(self.rotation_hz) * dt_s
                + np.asarray(self.azimuth_offsets_deg, dtype=np.float64)[None, :])

    def directions(self, timing: "SpinningTiming") -> np.ndarray:
        """(F, C, 3) unit beam directions in the LiDAR frame."""
        return beam_directions(self.azimuths_deg(timing), np.asarray(self.elevations_deg, dtype=np.float64)[None, :])


def beam_directions(azimuth_deg, elevation_deg) -> np.ndarray:
    az, el = np.radians(azimuth_deg), np.radians(elevation_deg)
    az, el = np.broadcast_arrays(az, el)
    return np.stack([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)], axis=-1)


@dataclass(frozen=True)
class SpinningTiming:
    sweep_start_ns: int
    rotation_hz: float
    azimuth_steps: int
    time_offsets_ns: tuple

    @cached_property
    def firing_period_ns(self) -> Fraction:
        return Fraction(NS_PER_S) / (exact(self.rotation_hz) * self.azimuth_steps)

    def firing_time_exact(self, k: int) -> Fraction:
        return self.sweep_start_ns + k * self.firing_period_ns

    def firing_times_exact(self, offsets=(0,)) -> list[Fraction]:
        """Exact time (ns) of every firing k plus each channel time offset o, ordered (k, o): the values of
        firing_time_exact(k) + o, built in integers over the period's denominator (no Fraction arithmetic per time)."""
        p = self.firing_period_ns
        num, den = p.numerator, p.denominator
        base = [self.sweep_start_ns * den + o * den for o in offsets]
        return [Fraction(b + k * num, den) for k in range(self.azimuth_steps) for b in base]

    def beam_time_exact(self, k: int, c: int) -> Fraction:
        return self.firing_time_exact(k) + self.time_offsets_ns[c]

    def firing_times_ns(self) -> np.ndarray:
        p = self.firing_period_ns
        k = np.arange(self.azimuth_steps, dtype=np.int64)
        # start + round_half_up(k * num / den), exact in integers
        return self.sweep_start_ns + (2 * k * p.numerator + p.denominator) // (2 * p.denominator)

    def beam_times_ns(self) -> np.ndarray:
        """(F, C) int64 ns of every beam."""
        return self.firing_times_ns()[:, None] + np.asarray(self.time_offsets_ns, dtype=np.int64)[None, :]

    def time_offsets_from_sweep_ns(self) -> np.ndarray:
        return self.beam_times_ns() - self.sweep_start_ns

    def beam_offsets_exact_s(self) -> np.ndarray:
        """(F, C) seconds since sweep start, from the exact rational firing times (float64)."""
        k = np.arange(self.azimuth_steps, dtype=np.float64)[:, None]
        return (k * float(self.firing_period_ns) + np.asarray(self.time_offsets_ns, dtype=np.float64)[None, :]) * 1e-9

    def sweep_duration_exact(self) -> Fraction:
        return self.azimuth_steps * self.firing_period_ns

    def reference_time_ns(self) -> int:
        """Centre of the sweep: the time motion-compensated points are expressed at."""
        return self.sweep_start_ns + round_half_up(self.sweep_duration_exact() / 2)

    @property
    def period_ns(self) -> Fraction:
        """Firing period (ns, exact): 1e9 / (rotation_hz * azimuth_steps) between consecutive firings."""
        return self.firing_period_ns

    def span_ns(self) -> tuple[int, int]:
        """[start, end] (ns) of the sweep: sweep_start_ns to sweep_start_ns + azimuth_steps * firing period
        (= 1e9 / rotation_hz), rounded half up."""
        return self.sweep_start_ns, self.sweep_start_ns + round_half_up(self.sweep_duration_exact())

    def acquisition_times(self) -> tuple[np.ndarray, list[dict]]:
        """(times (F*G,) int64 ns, what each is): every firing k's channel time group g, ordered (k, g) (ascending:
        offsets are shorter than the firing period), with {"firing", "channel_group", "channels"}."""
        offsets, group_of = self.time_groups()
        t = self.firing_times_ns()[:, None] + np.array(offsets, dtype=np.int64)[None, :]
        what = [{"firing": k, "channel_group": g, "channels": [c for c, x in enumerate(group_of) if x == g]}
                for k in range(t.shape[0]) for g in range(t.shape[1])]
        return t.ravel(), what

    def times_span_ns(self) -> tuple[int, int]:
        """(first, last) beam time (ns, as published): firing 0 plus the smallest channel offset, the last firing
        plus the largest."""
        t = self.firing_times_ns()
        offsets = self.time_groups()[0]
        return int(t[0]) + offsets[0], int(t[-1]) + offsets[-1]

    def time_groups(self) -> tuple[list[int], list[int]]:
        """(distinct channel time offsets ascending, group index of every channel)."""
        offsets = sorted(set(self.time_offsets_ns))
        return offsets, [offsets.index(o) for o in self.time_offsets_ns]

    def to_manifest(self) -> dict:
        return {
            "timing_model": SPINNING_MODEL,
            "sweep_start_ns": self.sweep_start_ns,
            "rotation_hz": self.rotation_hz,
            "azimuth_steps": self.azimuth_steps,
            "firing_period_ns": float(self.firing_period_ns),
            "firing_period_ns_exact": f"{self.firing_period_ns.numerator}/{self.firing_period_ns.denominator}",
            "channel_time_offsets_ns": list(self.time_offsets_ns),
            "reference_time_ns": self.reference_time_ns(),
            "firing_time_definition": ("t(k, c) = sweep_start_ns + k * 1e9 / (rotation_hz * azimuth_steps) + "
                                       "channel_time_offsets_ns[c], rounded half up to integer ns"),
            "reference_time_definition": "sweep centre: sweep_start_ns + 1e9 / (2 * rotation_hz), rounded half up",
        }

    @classmethod
    def from_manifest(cls, event: dict) -> "SpinningTiming":
        require_timing_model(event, SPINNING_MODEL)
        return cls(event["sweep_start_ns"], event["rotation_hz"], event["azimuth_steps"],
                   tuple(event["channel_time_offsets_ns"]))


def parse_lidar_sensor(raw: dict, defaults: dict, where: str) -> LidarSensor:
    """Build a LidarSensor from a schema-valid rig entry; check what the schema cannot."""
    values = {**defaults, **raw}
    if "preset" in values:
        values = {**preset_table(values["preset"]), **values}
    n = len(values["elevations_deg"])
    for key in ("azimuth_offsets_deg", "time_offsets_ns"):
        given = values.get(key)
        if given is None:
            values[key] = (0,) * n
        elif len(given) != n:
            raise RowbeamError(f"{where}.{key}: {len(given)} values for {n} channels")
        values[key] = tuple(values[key])
    values["elevations_deg"] = tuple(values["elevations_deg"])
    if values["min_range_m"] >= values["max_range_m"]:
        raise RowbeamError(f"{where}.min_range_m: {values['min_range_m']} must be below max_range_m "
                           f"{values['max_range_m']}")
    sensor = LidarSensor(**values)
    period = sensor.timing(0).firing_period_ns
    late = [o for o in sensor.time_offsets_ns if o >= period]
    if late:
        raise RowbeamError(f"{where}.time_offsets_ns: offset {late[0]} ns is not shorter than the firing period "
                           f"{float(period):.1f} ns")
    if period < MIN_FIRING_PERIOD_NS:
        raise RowbeamError(f"{where}.azimuth_steps: {sensor.azimuth_steps} firings per sweep at "
                           f"{sensor.rotation_hz} Hz fire more than once per ns")
    return sensor


def lidar_dims(manifest: dict) -> dict:
    """Named dimensions of a LiDAR event: F firings, C channels, G channel time groups, N points."""
    beams = manifest["calibration"]["beams"]["channels"]
    points = manifest["modalities"].get("points", {}).get("shape", [0])
    return {"F": manifest["event"]["azimuth_steps"], "C": len(beams),
            "G": len({b["time_offset_ns"] for b in beams}), "N": points[0] if points else 0}


def lidar_poses(manifest: dict, arrays: dict):
    """(firing-group times (F*G,) int64 ns, poses (F*G, 4, 4) in the LiDAR frame, what) or None."""
    if "firing_T_world_lidar" not in arrays:
        return None
    timing = SpinningTiming.from_manifest(manifest["event"])
    t = timing.firing_times_ns()[:, None] + np.array(timing.time_groups()[0], dtype=np.int64)[None, :]
    return t.ravel(), arrays["firing_T_world_lidar"].reshape(-1, 4, 4), "firing poses"


LIDAR_TYPE = register(SensorType(
    name=LIDAR, label="Spinning LiDAR", description="Rotating LiDAR with per-firing times",
    parse=parse_lidar_sensor, timing_from_manifest=SpinningTiming.from_manifest, start_key="sweep_start_ns",
    modalities=LIDAR_MODALITIES, dims=lidar_dims, pose_arrays=("firing_T_world_lidar",), poses=lidar_poses,
    timed_beams=True,
    modules={"check": "rowbeam.check.lidar_checks", "report": "rowbeam.report.lidar_page",
             "export": "rowbeam.blender.sensors.lidar_event"}))
