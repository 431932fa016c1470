"""State log (`rowbeam/state_log@1`): poses and velocities of the ego body, the sensor mounts and every moving
object, sampled at declared rates over an export's span; the rule to interpolate them; and its checks.

A body's samples: t_ns (int64 [N], sample i of rate r at round_half_up(i * 1e9 / r) ns on the scene clock),
T_world_object (float64 [N, 4, 4], rigid: matrix_world with scale removed, the object's local axes),
velocity (float64 [N, 3], m/s, world: the object origin's velocity) and angular_velocity (float64 [N, 3],
rad/s, world). Velocities are central differences of matrix_world over +-VELOCITY_STEP_NS.
Interpolation at t between samples i and i+1 (a = (t - t_i)/(t_{i+1} - t_i)): translation linear, rotation
slerp (unit quaternions, shortest arc), velocity and angular velocity linear. Never matrix entries.

Files: `state/state_log_<sha256>.json` at the bundle root (sha256 of its own canonical JSON) and its arrays
`state/<sha256>.npy` (content addressed; written once, every writer agrees). Event manifests point at it
(`state.log`, `state.sha256`).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from rowbeam.model import qa_profile as tol
from rowbeam.model.frames import interpolate_rigid, rigid_mask
from rowbeam.sensors import type_of
from rowbeam.model.timing import NS_PER_S, exact, round_half_up

SCHEMA = "rowbeam/state_log@1"
STATE_DIR = "state"
VELOCITY_STEP_NS = 2_000_000
DEFAULT_RATE_HZ = 200
ARRAYS = ("t_ns", "T_world_object", "velocity", "angular_velocity")
INTERPOLATION = ("at t in [t_i, t_{i+1}], a = (t - t_i)/(t_{i+1} - t_i): translation lerp, rotation slerp (unit "
                 "quaternions w,x,y,z, shortest arc), velocity and angular_velocity lerp; never matrix entries")
VELOCITY_METHOD = (f"central difference of matrix_world (scale removed) over t +- {VELOCITY_STEP_NS} ns: velocity = "
                   "(p(t+h) - p(t-h))/2h, angular_velocity = log(R(t+h) R(t-h)^T)/2h (world frame)")


def sample_times_ns(rate_hz, start_ns, end_ns) -> np.ndarray:
    """(N,) int64 sample times of a rate covering [start_ns, end_ns] with one sample of margin each side (>= 0)."""
    r = exact(rate_hz)
    first = max(math.floor(Fraction(start_ns) * r / NS_PER_S) - 1, 0)
    last = math.ceil(Fraction(end_ns) * r / NS_PER_S) + 1
    return np.array([round_half_up(i * NS_PER_S / r) for i in range(first, last + 1)], dtype=np.int64)


def angular_velocity(R_before: np.ndarray, R_after: np.ndarray, dt_s: float) -> np.ndarray:
    """(..., 3) world angular velocity (rad/s) turning R_before into R_after over dt_s: log(R_after R_before^T)/dt."""
    D = np.einsum("...ij,...kj->...ik", R_after, R_before)
    cos = np.clip((np.trace(D, axis1=-2, axis2=-1) - 1) / 2, -1.0, 1.0)
    angle = np.arccos(cos)
    vee = np.stack([D[..., 2, 1] - D[..., 1, 2], D[..., 0, 2] - D[..., 2, 0], D[..., 1, 0] - D[..., 0, 1]], -1) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.where(angle > 1e-12, angle / np.sin(angle), 1.0)
    return vee * scale[..., None] / dt_s


class BodyTrack:
    """One body's samples with the declared interpolation."""

    def __init__(self, t_ns, T, v, w):
        self.t = np.asarray(t_ns, dtype=np.int64)
        self.T, self.v, self.w = np.asarray(T), np.asarray(v), np.asarray(w)

    def covers(self, times) -> np.ndarray:
        times = np.asarray(times)
        return (times >= self.t[0]) & (times <= self.t[-1])

    def _bracket(self, t):
        i = int(np.clip(np.searchsorted(self.t, t, side="right") - 1, 0, len(self.t) - 2))
        return i, (float(t) - float(self.t[i])) / float(self.t[i + 1] - self.t[i])

    def pose(self, t) -> np.ndarray:
        """T_world_object (4x4) at t_ns (inside the samples)."""
        i, a = self._bracket(t)
        return interpolate_rigid(self.T[i], self.T[i + 1], a)

    def velocities(self, t) -> tuple[np.ndarray, np.ndarray]:
        """(velocity (3,), angular velocity (3,)) at t_ns, linear between samples."""
        i, a = self._bracket(t)
        return (1 - a) * self.v[i] + a * self.v[i + 1], (1 - a) * self.w[i] + a * self.w[i + 1]

    def point_velocity(self, t, P) -> np.ndarray:
        """Velocity (world, m/s) of the material point at world position P of this rigid body at t."""
        v, w = self.velocities(t)
        return v + np.cross(w, np.asarray(P) - self.pose(t)[:3, 3])


def pose_error(A: np.ndarray, B: np.ndarray) -> tuple[float, float]:
    """(translation m, rotation rad) between two rigid poses."""
    d = A[:3, :3].T @ B[:3, :3]
    return float(np.linalg.norm(A[:3, 3] - B[:3, 3])), float(np.arccos(np.clip((np.trace(d) - 1) / 2, -1, 1)))


def velocity_excess(tr: BodyTrack) -> np.ndarray:
    """(N-1, 3) m/s: how far each interval's mean velocity from the pose samples, (p1 - p0) / dt, lies outside the
    range its two velocity samples span, per world axis. The mean of a velocity that moves from v0 to v1 without
    overshooting lies in [min, max] of the two: smooth motion, and a velocity step (a linear key's corner, an
    easing's end) inside the interval, both give ~0; a velocity scaled, negated or from another body does not."""
    dt = np.diff(tr.t) * 1e-9
    step = np.diff(tr.T[:, :3, 3], axis=0) / dt[:, None]
    v0, v1 = tr.v[:-1], tr.v[1:]
    return np.abs(step - (v0 + v1) / 2) - np.abs(v1 - v0) / 2


def check_log(log: dict, tracks: dict, add) -> None:
    """Samples on the declared rate grid, rigid poses, velocities consistent with the poses: each interval's mean
    velocity from the poses within the range of its two velocity samples (velocity_excess)."""
    problems, worst_v = [], 0.0
    for body in log["bodies"]:
        tr = tracks[body["name"]]
        r = exact(body["rate_hz"])
        i0 = round_half_up(Fraction(int(tr.t[0])) * r / NS_PER_S)
        grid = np.array([round_half_up((i0 + i) * NS_PER_S / r) for i in range(len(tr.t))], dtype=np.int64)
        if len(tr.t) < 2 or not np.array_equal(tr.t, grid):
            problems.append(f"{body['name']}: t_ns is not the {body['rate_hz']} Hz sample grid")
            continue
        if not rigid_mask(tr.T, tol.RIGID_TOL).all():
            problems.append(f"{body['name']}: T_world_object is not rigid")
        worst_v = max(worst_v, float(velocity_excess(tr).max(initial=0.0)))
    ok = not problems and worst_v <= tol.STATE_LOG_VELOCITY_TOL_MPS
    add("state_log", ok, "; ".join(problems[:3]) or (
        f"velocity disagrees with the pose samples by {worst_v:.3g} m/s" if worst_v > tol.STATE_LOG_VELOCITY_TOL_MPS
        else f"{len(log['bodies'])} bodies on their rate grids, rigid, velocities consistent with poses "
             f"(worst {worst_v:.3g} m/s)"), worst_velocity_error_mps=worst_v)


def sensor_poses(manifest: dict, arrays: dict) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(times (M,) int64, poses (M, 4, 4) in the sensor object's local axes, what) of an event's row/beam/chirp poses,
    by its sensor type (`SensorType.poses`); None when the arrays needed are absent."""
    return type_of(manifest).poses(manifest, arrays)


def check_event_against_log(manifest: dict, arrays: dict, tracks: dict, add) -> None:
    """Every row/beam/chirp pose equals the sensor object's logged pose at its time; radar radial velocity and sensor
    velocity equal the logged motion."""
    track = tracks.get(manifest["sensor"]["object"])
    got = sensor_poses(manifest, arrays)
    if got is None:
        return
    times, poses, what = got
    if track is None or not track.covers(times).all():
        add("state_log_poses", False, f"the state log has no samples of {manifest['sensor']['object']!r} covering the "
            f"event's {what}")
        return
    idx = range(len(times))                          # every row / firing group / chirp
    worst_t = worst_r = 0.0
    for i in idx:
        dt, dr = pose_error(track.pose(times[i]), poses[i])
        worst_t, worst_r = max(worst_t, dt), max(worst_r, dr)
    ok = worst_t <= tol.STATE_LOG_POSE_TOL_M and worst_r <= tol.STATE_LOG_ROTATION_TOL_RAD
    add("state_log_poses", ok, f"{len(idx)} {what} vs the state log interpolated at their times: worst "
        f"{worst_t:.3g} m, {worst_r:.3g} rad" + ("" if ok else f" (limits {tol.STATE_LOG_POSE_TOL_M} m, "
                                                  f"{tol.STATE_LOG_ROTATION_TOL_RAD} rad)"),
        worst_translation_m=worst_t, worst_rotation_rad=worst_r)
    _check_radar_velocity(manifest, arrays, tracks, track, times, add)
    own = type_of(manifest).hook("check_state_log")      # a type's motion derivatives vs the log (e.g. IMU)
    if own is not None:
        own(manifest, arrays, track, add)


def _check_radar_velocity(manifest, arrays, tracks, mount, times, add):
    """Radial velocity of every return and the sensor velocity of every chirp vs the state log (events with
    chirp_velocity_world and points, i.e. radar)."""
    if not {"chirp_velocity_world", "points"} <= arrays.keys():
        return
    sensor_v = np.array([mount.velocities(t)[0] for t in times])
    worst_s = float(np.abs(sensor_v - arrays["chirp_velocity_world"]).max(initial=0.0))
    by_index = {o["render_index"]: o for o in manifest["objects"]}
    pts = arrays["points"]
    P = np.stack([pts["x_world"], pts["y_world"], pts["z_world"]], -1)
    worst, missing = 0.0, 0
    for n in range(len(pts)):
        j, t = int(pts["chirp"][n]), int(pts["t_ns"][n])
        obj = by_index.get(int(pts["instance_id"][n]), {})
        if obj.get("motion") == "static":
            v_point = np.zeros(3)
        elif obj.get("name") in tracks and tracks[obj["name"]].covers([t]).all():
            v_point = tracks[obj["name"]].point_velocity(t, P[n])
        else:
            missing += 1
            continue
        origin = arrays["chirp_T_world_radar"][j, :3, 3]
        d = (P[n] - origin) / np.linalg.norm(P[n] - origin)
        expected = float((v_point - sensor_v[j]) @ d)
        worst = max(worst, abs(expected - float(pts["radial_velocity"][n])))
    ok = worst <= tol.STATE_LOG_VELOCITY_TOL_MPS and worst_s <= tol.STATE_LOG_VELOCITY_TOL_MPS and not missing
    add("radial_velocity_vs_state_log", ok, f"{len(pts) - missing} returns: radial velocity vs the logged object and "
        f"mount motion differs by at most {worst:.3g} m/s, sensor velocity by {worst_s:.3g} m/s"
        + (f"; {missing} returns on moving objects the log does not cover" if missing else ""),
        worst_error_mps=worst, worst_sensor_velocity_error_mps=worst_s)


def load_state_log(root, pointer: dict) -> tuple[dict, dict]:
    """(log document, {body name: BodyTrack}) of a manifest's `state` pointer; every file inside the bundle, hashes
    checked through the one loader (rowbeam.bundle.reader.read_payload). RowbeamError naming the file otherwise."""
    from rowbeam.bundle.reader import read_payload
    from rowbeam.util.errors import RowbeamError
    from rowbeam.bundle.files import load_json, resolve_inside, sha256_file

    path = resolve_inside(root, pointer["log"], root)
    log = load_json(path, "state log")
    if sha256_file(path) != pointer["sha256"]:
        raise RowbeamError(f"{pointer['log']}: sha256 does not match the manifest's state.sha256")
    if not isinstance(log, dict) or log.get("schema") != SCHEMA:
        raise RowbeamError(f"{pointer['log']}: not a {SCHEMA} document")
    from rowbeam.bundle.schema import schema_errors

    errors = schema_errors(log, SCHEMA)
    if errors:
        raise RowbeamError(f"{pointer['log']}: {errors[0]}")
    tracks = {b["name"]: BodyTrack(*(read_payload(root, b["arrays"][k], root) for k in ARRAYS)) for b in log["bodies"]}
    return log, tracks
