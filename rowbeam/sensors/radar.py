"""Radar: beam grid, presets and the per-chirp timing model (`rowbeam.radar@1`).

Radar frame = the mount object's local axes: x forward, y left, z up (metres), as the LiDAR's;
azimuth from +x toward +y, elevation up from the xy plane (`rowbeam.sensors.lidar.beam_directions`).
Frame f starts at first_frame_ns + f/rate_hz (`rowbeam.model.timing.periodic_event_start_ns`). Chirp j
of a frame occupies [frame_start + chirp_offset_ns + j*chirp_period_ns, ... + chirp_period_ns) and
is labelled at the centre of that interval:
    t(j) = frame_start + chirp_offset_ns + (j + 1/2) * chirp_period_ns      (exact; published rounded half up)
Every beam of a chirp is formed at once (digital beamforming): one time per chirp. The frame's
reference time is the centre of its chirp train: frame_start + chirp_offset_ns + chirps*chirp_period_ns/2.

Radial velocity of a return: the velocity of the hit material point relative to the sensor origin's
velocity at the chirp's time, projected on the beam direction, positive = receding:
    v_r = (v_point(t) - v_origin(t)) . d_world(t)
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from rowbeam.util.errors import RowbeamError
from rowbeam.model.surface_policy import DEFAULT_POLICY, SurfacePolicy
from rowbeam.sensors.lidar import beam_directions
from rowbeam.model.modalities import RADAR_MODALITIES
from rowbeam.model.timing import (
    NS_PER_S, exact, exact_ns_text, periodic_event_start_ns, require_timing_model, round_half_up,
)
from rowbeam.sensors.registry import SensorType, register

RADAR = "radar"
RADAR_MODEL = "rowbeam.radar@1"
MAX_CHIRPS = 65_536                 # one Cycles render row per chirp (Blender's row limit, docs/design.md)
MAX_BEAMS = 16_384                  # Cycles image columns
RADIAL_VELOCITY_SIGN = "positive = receding (range growing): v_r = (v_point - v_sensor_origin) . d_world"
CHIRP_TIME_DEFINITION = ("t(j) = frame_start_ns + chirp_offset_ns + (j + 1/2) * chirp_period_ns: the centre of chirp "
                         "j's interval [frame_start_ns + chirp_offset_ns + j*chirp_period_ns, +chirp_period_ns), "
                         "rounded half up to integer ns; every beam of a chirp at that time")
REFERENCE_TIME_DEFINITION = ("centre of the chirp train: frame_start_ns + chirp_offset_ns + chirps*chirp_period_ns/2, "
                             "rounded half up")
GRID_DEFINITION = ("beam b = e*azimuth_beams + a (azimuth fastest): azimuth_deg = az_min + (a + 1/2)*(az_max - az_min)/"
                   "azimuth_beams, elevation_deg = el_min + (e + 1/2)*(el_max - el_min)/elevation_beams; direction = "
                   "(cos el cos az, cos el sin az, sin el) in the radar frame (x forward, y left, z up)")

# Presets: chirp train and beam grid (rig fields they fill; rig fields given explicitly win).
PRESETS = {
    "front_long_range": {"chirps": 128, "chirp_period_ns": 50_000, "azimuth_fov_deg": [-45.0, 45.0],
                         "elevation_fov_deg": [-5.0, 5.0], "azimuth_beams": 32, "elevation_beams": 2},
    "corner_short_range": {"chirps": 64, "chirp_period_ns": 40_000, "azimuth_fov_deg": [-75.0, 75.0],
                           "elevation_fov_deg": [-10.0, 10.0], "azimuth_beams": 16, "elevation_beams": 2},
    "bench_128x64": {"chirps": 128, "chirp_period_ns": 100_000, "azimuth_fov_deg": [-60.0, 60.0],
                     "elevation_fov_deg": [-8.0, 8.0], "azimuth_beams": 16, "elevation_beams": 4},
}


def grid_angles_deg(fov_min: float, fov_max: float, n: int) -> np.ndarray:
    """(n,) cell-centre angles of an evenly divided field of view, degrees."""
    return fov_min + (np.arange(n) + 0.5) * (fov_max - fov_min) / n


@dataclass(frozen=True)
class RadarTiming:
    """Chirp times of one radar frame (exact rationals; int64 ns rounded half up where published)."""

    frame_start_ns: int
    chirp_offset_ns: int
    chirp_period_ns: int
    chirps: int

    @property
    def firing_period_ns(self) -> Fraction:
        """Time between chirps (ns): the row period of the Cycles layout (`rowbeam.blender.sensors.lidar_layout`)."""
        return Fraction(self.chirp_period_ns)

    def chirp_time_exact(self, j: int) -> Fraction:
        return self.frame_start_ns + self.chirp_offset_ns + Fraction((2 * j + 1) * self.chirp_period_ns, 2)

    def firing_time_exact(self, j: int) -> Fraction:
        """Same as chirp_time_exact (the layout's interface: one image row per chirp)."""
        return self.chirp_time_exact(j)

    def chirp_times_ns(self) -> np.ndarray:
        """(K,) int64 ns of every chirp, rounded half up."""
        j = np.arange(self.chirps, dtype=np.int64)
        # (2j+1)*P/2 rounded half up = ((2j+1)*P + 1) // 2
        return self.frame_start_ns + self.chirp_offset_ns + ((2 * j + 1) * self.chirp_period_ns + 1) // 2

    def chirp_intervals_ns(self) -> np.ndarray:
        """(K, 2) int64 [start, end) of every chirp's interval (exact integers)."""
        j = np.arange(self.chirps, dtype=np.int64)
        start = self.frame_start_ns + self.chirp_offset_ns + j * self.chirp_period_ns
        return np.stack([start, start + self.chirp_period_ns], -1)

    def duration_ns(self) -> int:
        """From frame start to the end of the last chirp."""
        return self.chirp_offset_ns + self.chirps * self.chirp_period_ns

    def reference_time_ns(self) -> int:
        return self.frame_start_ns + self.chirp_offset_ns + round_half_up(Fraction(self.chirps * self.chirp_period_ns, 2))

    @property
    def period_ns(self) -> Fraction:
        """Chirp period (ns, exact)."""
        return Fraction(self.chirp_period_ns)

    def span_ns(self) -> tuple[int, int]:
        """[start, end] (ns): frame start to the end of the last chirp (frame_start_ns + duration_ns())."""
        return self.frame_start_ns, self.frame_start_ns + self.duration_ns()

    def acquisition_times(self) -> tuple[np.ndarray, list[dict]]:
        """(chirp times (K,) int64 ns, [{"chirp": j}])."""
        t = self.chirp_times_ns()
        return t, [{"chirp": j} for j in range(len(t))]

    def times_span_ns(self) -> tuple[int, int]:
        """(first, last) chirp time (ns, as published): the centres of chirp 0 and chirp chirps-1."""
        t = self.chirp_times_ns()
        return int(t[0]), int(t[-1])

    def to_manifest(self) -> dict:
        return {"timing_model": RADAR_MODEL, "frame_start_ns": self.frame_start_ns,
                "chirp_offset_ns": self.chirp_offset_ns, "chirp_period_ns": self.chirp_period_ns,
                "chirps": self.chirps, "reference_time_ns": self.reference_time_ns(),
                "chirp_time_definition": CHIRP_TIME_DEFINITION, "reference_time_definition": REFERENCE_TIME_DEFINITION}

    @classmethod
    def from_manifest(cls, event: dict) -> "RadarTiming":
        require_timing_model(event, RADAR_MODEL)
        return cls(event["frame_start_ns"], event["chirp_offset_ns"], event["chirp_period_ns"], event["chirps"])


@dataclass(frozen=True)
class RadarSensor:
    id: str
    object: str
    rate_hz: float
    first_frame_ns: int
    chirps: int
    chirp_period_ns: int
    azimuths_deg: tuple            # (B,) per beam
    elevations_deg: tuple          # (B,) per beam
    min_range_m: float
    max_range_m: float
    max_radial_velocity_mps: float
    chirp_offset_ns: int = 0
    grid: dict | None = None       # the declared grid (fov and counts) when the beams come from one
    preset: str | None = None
    motion_steps: int = 7
    verify_chirps: int = 4
    surface_policy: SurfacePolicy = DEFAULT_POLICY     # rowbeam.model.surface_policy
    type: str = RADAR

    @property
    def beams(self) -> int:
        return len(self.azimuths_deg)

    @property
    def first_event_ns(self) -> int:
        return self.first_frame_ns

    def event_start_ns(self, index: int) -> int:
        return periodic_event_start_ns(self.first_frame_ns, self.rate_hz, index)

    def timing(self, index: int) -> RadarTiming:
        return RadarTiming(self.event_start_ns(index), self.chirp_offset_ns, self.chirp_period_ns, self.chirps)

    def event_duration_ns(self) -> int:
        return self.chirp_offset_ns + self.chirps * self.chirp_period_ns

    def event_cost(self, size_px=None) -> int:
        """Declared render cost of one frame: chirps x beams (size_px unused)."""
        return int(self.chirps) * int(self.beams)

    def beam_table(self) -> list[dict]:
        return [{"beam": b, "azimuth_deg": float(a), "elevation_deg": float(e)}
                for b, (a, e) in enumerate(zip(self.azimuths_deg, self.elevations_deg, strict=True))]

    def directions(self) -> np.ndarray:
        """(B, 3) unit beam directions in the radar frame."""
        return beam_directions(np.asarray(self.azimuths_deg, float), np.asarray(self.elevations_deg, float))


def table_directions(beams: list[dict]) -> np.ndarray:
    """(B, 3) unit directions of a manifest beam table (radar frame)."""
    return beam_directions(np.array([b["azimuth_deg"] for b in beams], float),
                           np.array([b["elevation_deg"] for b in beams], float))


def parse_radar_sensor(raw: dict, defaults: dict, where: str) -> RadarSensor:
    """Build a RadarSensor from a schema-valid rig entry; refuse what the schema cannot (one line naming the field)."""
    values = {**defaults, **(PRESETS[raw["preset"]] if "preset" in raw else {}), **raw}
    grid_keys = ("azimuth_fov_deg", "elevation_fov_deg", "azimuth_beams", "elevation_beams")
    if "beams_deg" in values:
        table = values.pop("beams_deg")
        for k in grid_keys:
            values.pop(k, None)
        az, el, grid = tuple(float(b[0]) for b in table), tuple(float(b[1]) for b in table), None
    else:
        missing = [k for k in grid_keys if k not in values]
        if missing:
            raise RowbeamError(f"{where}.{missing[0]}: required for a beam grid (or give beams_deg or a preset)")
        grid = {k: values.pop(k) for k in grid_keys}
        for k in ("azimuth_fov_deg", "elevation_fov_deg"):
            lo, hi = grid[k]
            if lo >= hi:
                raise RowbeamError(f"{where}.{k}: [{lo}, {hi}] must be increasing")
        a = grid_angles_deg(*grid["azimuth_fov_deg"], grid["azimuth_beams"])
        e = grid_angles_deg(*grid["elevation_fov_deg"], grid["elevation_beams"])
        az = tuple(float(x) for x in np.tile(a, len(e)))
        el = tuple(float(x) for x in np.repeat(e, len(a)))
        if len(az) > MAX_BEAMS:
            raise RowbeamError(f"{where}.azimuth_beams: {len(az)} beams; at most {MAX_BEAMS}")
    if values["min_range_m"] >= values["max_range_m"]:
        raise RowbeamError(f"{where}.min_range_m: {values['min_range_m']} must be below max_range_m "
                           f"{values['max_range_m']}")
    period = Fraction(NS_PER_S) / exact(values["rate_hz"])
    train = values.get("chirp_offset_ns", 0) + values["chirps"] * values["chirp_period_ns"]
    if train > period:
        raise RowbeamError(f"{where}.chirp_period_ns: chirp_offset_ns + chirps x chirp_period_ns = {train} ns is "
                           f"longer than the frame period {exact_ns_text(period)} (1/rate_hz)")
    return RadarSensor(azimuths_deg=az, elevations_deg=el, grid=grid, **values)


def radar_dims(manifest: dict) -> dict:
    """Named dimensions of a radar event: K chirps, B beams, N points."""
    points = manifest["modalities"].get("points", {}).get("shape", [0])
    return {"K": manifest["event"]["chirps"], "B": len(manifest["calibration"]["beams"]["table"]),
            "N": points[0] if points else 0}


def radar_poses(manifest: dict, arrays: dict):
    """(chirp times (K,) int64 ns, chirp poses (K, 4, 4) in the radar frame, what) or None."""
    if {"time_offset_ns", "chirp_T_world_radar"} <= arrays.keys():
        return manifest["event"]["frame_start_ns"] + arrays["time_offset_ns"], arrays["chirp_T_world_radar"], "chirp poses"
    return None


RADAR_TYPE = register(SensorType(
    name=RADAR, label="Radar", description="Chirps x beams with range and radial velocity, each chirp at its own time",
    parse=parse_radar_sensor, timing_from_manifest=RadarTiming.from_manifest, start_key="frame_start_ns",
    modalities=RADAR_MODALITIES, dims=radar_dims,
    pose_arrays=("time_offset_ns", "chirp_T_world_radar", "chirp_velocity_world", "points"), poses=radar_poses,
    timed_beams=True,
    modules={"check": "rowbeam.check.radar_checks", "report": "rowbeam.report.radar_page",
             "export": "rowbeam.blender.sensors.radar_event"}))
