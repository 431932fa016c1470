"""Per-event invariants of a spinning-LiDAR sweep: timing, geometry against the beam table and
poses, range limits, validity, normals, IDs and the point tables."""
from __future__ import annotations

import numpy as np

from rowbeam.model import qa_profile as tol
from rowbeam.check.coverage_checks import check_beam_coverage
from rowbeam.check.label_checks import check_ids, check_validity
from rowbeam.model.frames import is_rigid, rigid_mask
from rowbeam.check.cross_modal import CrossCheck, check_lidar_camera
from rowbeam.sensors import sensor_hook
from rowbeam.sensors.camera import CAMERA
from rowbeam.sensors.lidar import LIDAR, SpinningTiming, beam_directions


sensor_hook(LIDAR, "cross_check")(CrossCheck(
    CAMERA, ("points",), ("camera_z", "valid", "instance_id", "normal_geometric", "row_time_ns", "row_T_world_camera"),
    check_lidar_camera))


@sensor_hook(LIDAR, "check_event")
def check_lidar_event(manifest: dict, arrays: dict, add) -> None:
    event, cal = manifest["event"], manifest["calibration"]
    timing = SpinningTiming.from_manifest(event)
    beams = cal["beams"]["channels"]
    _check_timing(timing, beams, arrays, add)
    directions = _declared_directions(timing, cal, beams)
    check_sensor_poses(arrays.get("firing_T_world_lidar"), "firing", cal, "T_lidar_world", event, add)
    if not {"valid", "range"} <= arrays.keys():
        return
    check_validity(arrays, ("range", "normal_geometric", "cos_incidence"), add)
    valid = arrays["valid"] == 1
    _check_limits(cal["range_limits_m"], valid, arrays["range"], add)
    if "normal_geometric" in arrays:
        _check_normals(valid, arrays, directions, add)
    check_ids(manifest, arrays, add)
    if {"points", "firing_T_world_lidar"} <= arrays.keys():
        _check_points(timing, beams, valid, arrays, directions, np.array(cal["T_lidar_world"]["matrix"]), add)
    check_beam_verification(manifest["method"]["verification"], add)
    check_beam_coverage(manifest, arrays, add)


def _declared_directions(timing: SpinningTiming, cal: dict, beams: list) -> np.ndarray:
    sign = 1.0 if cal["beams"]["spin_direction"] == "ccw" else -1.0
    az = (cal["beams"]["start_azimuth_deg"] + sign * 360.0 * float(timing.rotation_hz) * timing.beam_offsets_exact_s()
          + np.array([b["azimuth_offset_deg"] for b in beams])[None, :])
    return beam_directions(az, np.array([b["elevation_deg"] for b in beams])[None, :])


def _check_timing(timing, beams, arrays, add):
    declared = [b["time_offset_ns"] for b in beams]
    add("beam_time_offsets", declared == list(timing.time_offsets_ns),
        "beam table time offsets equal event.channel_time_offsets_ns" if declared == list(timing.time_offsets_ns)
        else "beam table time offsets differ from event.channel_time_offsets_ns")
    if "time_offset_ns" in arrays:
        expected = timing.time_offsets_from_sweep_ns()
        got = arrays["time_offset_ns"].astype(np.int64)
        bad = np.argwhere(got != expected)
        add("beam_times", bad.size == 0,
            f"time_offset_ns differs from {SpinningTiming.__name__} at {len(bad)} beams (first firing {bad[0][0]}, "
            f"channel {bad[0][1]})" if bad.size else "every beam time equals rowbeam.spinning_lidar@1")


def _check_limits(limits, valid, rng, add):
    r = rng[valid]
    outside = int(np.count_nonzero((r < limits["min"]) | (r > limits["max"])))
    add("range_limits", outside == 0, f"{outside} returns outside [{limits['min']}, {limits['max']}] m" if outside
        else "every return lies within the declared range limits",
        min_range_m=float(r.min(initial=np.inf)) if r.size else None)


def _check_normals(valid, arrays, directions, add):
    n = arrays["normal_geometric"].astype(np.float64)[valid]
    d = directions[valid]
    length = np.abs(np.linalg.norm(n, axis=-1) - 1.0)
    worst = float(length.max(initial=0.0))
    add("normal_geometric_unit", worst <= tol.NORMAL_UNIT_TOL, f"normal_geometric deviates from unit length by "
        f"{worst:.3g}" if worst > tol.NORMAL_UNIT_TOL else "normal_geometric is unit length", worst_length_error=worst)
    cos = -np.einsum("ij,ij->i", n, d)
    away = int(np.count_nonzero(cos < -tol.GEOMETRIC_FACING_TOL))
    add("normal_geometric_facing", away == 0, f"geometric normal faces away from the sensor on {away} beams" if away
        else "geometric normal faces the sensor on every valid beam")
    if "cos_incidence" in arrays:
        err = np.abs(arrays["cos_incidence"].astype(np.float64)[valid] - cos)
        worst = float(err.max(initial=0.0))
        add("cos_incidence", worst <= tol.COS_INCIDENCE_TOL, f"cos_incidence differs from -n.d by {worst:.3g}"
            if worst > tol.COS_INCIDENCE_TOL else "cos_incidence = -n.d on every valid beam", worst_error=worst)


def _check_points(timing, beams, valid, arrays, directions, T_lidar_world_ref, add):
    pts = arrays["points"]
    k, c = np.nonzero(valid)
    same_beams = pts.size == k.size and np.array_equal(pts["firing"], k) and np.array_equal(pts["channel"], c)
    add("points_match_beams", same_beams, "points table holds one row per valid beam in (firing, channel) order"
        if same_beams else f"points table ({pts.size} rows) does not list the {k.size} valid beams in order")
    if not same_beams:
        return
    t_ok = np.array_equal(pts["t_ns"], timing.beam_times_ns()[k, c])
    add("points_times", t_ok, "point times equal their beams' times" if t_ok else "point t_ns differ from beam times")
    groups = sorted(set(timing.time_offsets_ns))
    g = np.array([groups.index(b["time_offset_ns"]) for b in beams])[c]
    T = arrays["firing_T_world_lidar"][k, g]
    world = np.stack([pts["x_world"], pts["y_world"], pts["z_world"]], -1)
    local = np.stack([pts["x"], pts["y"], pts["z"]], -1)
    origin = T[:, :3, 3]
    rng = np.linalg.norm(world - origin, axis=-1)
    r_err = np.abs(rng - arrays["range"][k, c])
    worst_r = float(r_err.max(initial=0.0))
    add("range_equals_world_distance", worst_r <= tol.LIDAR_RANGE_TOL_M,
        f"range differs from |p_world - origin(t)| by up to {worst_r:.3g} m" if worst_r > tol.LIDAR_RANGE_TOL_M
        else "range = |p_world - origin(t)| for every point", worst_error_m=worst_r)
    expected_local = np.einsum("nji,nj->ni", T[:, :3, :3], world - origin)
    worst_l = float(np.abs(expected_local - local).max(initial=0.0))
    add("points_lidar_frame", worst_l <= tol.LIDAR_POINT_TOL_M,
        f"point xyz differs from T_lidar_world(t) p_world by {worst_l:.3g} m" if worst_l > tol.LIDAR_POINT_TOL_M
        else "point xyz = T_lidar_world(t) p_world", worst_error_m=worst_l)
    lateral = np.linalg.norm(np.cross(local, directions[k, c]), axis=-1)     # distance from the beam line
    worst_a = float(lateral.max(initial=0.0))
    add("beam_directions", worst_a <= tol.LIDAR_LATERAL_TOL_M,
        f"returns lie up to {worst_a:.3g} m off their beam-table direction" if worst_a > tol.LIDAR_LATERAL_TOL_M
        else "every return lies on its beam-table direction", worst_lateral_m=worst_a)
    if "points_motion_compensated" in arrays:
        expected = world @ T_lidar_world_ref[:3, :3].T + T_lidar_world_ref[:3, 3]
        worst_m = float(np.abs(expected - arrays["points_motion_compensated"]).max(initial=0.0))
        add("points_motion_compensated", worst_m <= tol.LIDAR_POINT_TOL_M,
            f"motion-compensated points differ from T_lidar_world(reference) p_world by {worst_m:.3g} m"
            if worst_m > tol.LIDAR_POINT_TOL_M else "motion-compensated points = T_lidar_world(reference) p_world",
            worst_error_m=worst_m)


def check_sensor_poses(poses, unit: str, cal: dict, ref_name: str, event: dict, add) -> None:
    """Per-beam-time poses (..., 4, 4) rigid (when exported) and the calibration's reference pose `ref_name`
    rigid and stamped with event.reference_time_ns (LiDAR firings, radar chirps)."""
    if poses is not None:
        bad = np.flatnonzero(~rigid_mask(poses.reshape(-1, 4, 4), tol.RIGID_TOL))
        add(f"{unit}_poses_rigid", bad.size == 0, f"{bad.size} {unit} poses are not rigid" if bad.size
            else f"every {unit} pose is rigid")
    T_ref = cal[ref_name]
    ok = is_rigid(np.array(T_ref["matrix"]), tol.RIGID_TOL) and T_ref.get("time_ns") == event["reference_time_ns"]
    add("reference_pose", ok, f"{ref_name} is rigid and stamped with the reference time" if ok else
        f"calibration.{ref_name} is not rigid or not stamped with event.reference_time_ns")


def check_beam_verification(ver, add, unit: str = "firings"):
    """The exporter's BVH re-cast of sampled beams (LiDAR firings or radar chirps): worst range error and the
    fraction of beams that hit another object, within the QA profile's limits."""
    if ver.get(f"{unit}_checked", 0) == 0:
        add("exact_reference", True, f"no {unit} were verified against an exact reference", severity="warn")
        return
    r, frac = ver["worst_range_error_m"], ver["id_mismatch_fraction"]
    ok = r <= tol.VERIFY_MAX_RANGE_ERROR_M and frac <= tol.VERIFY_MAX_ID_MISMATCH_FRACTION
    add("exact_reference", ok, f"beams vs exact BVH ray cast: worst range error {r:.3g} m, {ver['id_mismatch_beams']} "
        f"of {ver['beams_compared']} beams hit another object" + ("" if ok else
        f" (limits {tol.VERIFY_MAX_RANGE_ERROR_M} m, {tol.VERIFY_MAX_ID_MISMATCH_FRACTION:.0%})"),
        worst_range_error_m=r, id_mismatch_fraction=frac)
