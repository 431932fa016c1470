"""Per-event invariants of a radar frame: chirp times vs `rowbeam.radar@1`, poses, range = |p_world - origin(t)|,
returns on their beam-table lines, range and velocity limits, validity, normals, ids, the point table, and the
recorded exact-reference error. Radial velocity against the state log is a bundle check (rowbeam/model/state_log.py)."""
from __future__ import annotations

import numpy as np

from rowbeam.model import qa_profile as tol
from rowbeam.check.coverage_checks import check_beam_coverage
from rowbeam.check.label_checks import check_ids, check_validity
from rowbeam.check.lidar_checks import check_beam_verification, check_sensor_poses
from rowbeam.check.cross_modal import CrossCheck
from rowbeam.sensors import sensor_hook
from rowbeam.sensors.lidar import LIDAR
from rowbeam.sensors.radar import RADAR, RadarTiming, table_directions


@sensor_hook(RADAR, "check_event")
def check_radar_event(manifest: dict, arrays: dict, add) -> None:
    event, cal = manifest["event"], manifest["calibration"]
    timing = RadarTiming.from_manifest(event)
    directions = table_directions(cal["beams"]["table"])               # (B, 3) radar frame
    if "time_offset_ns" in arrays:
        expected = timing.chirp_times_ns() - timing.frame_start_ns
        bad = np.flatnonzero(arrays["time_offset_ns"] != expected)
        add("chirp_times", bad.size == 0, f"time_offset_ns differs from rowbeam.radar@1 at {bad.size} chirps (first "
            f"{bad[0]})" if bad.size else "every chirp time equals rowbeam.radar@1 (centre of its interval)")
    for name, key in (("azimuth_deg", "azimuth_deg"), ("elevation_deg", "elevation_deg")):
        if name in arrays:
            same = np.array_equal(arrays[name], np.array([b[key] for b in cal["beams"]["table"]]))
            add(f"beam_{name}", same, f"{name} equals the beam table" if same else f"{name} differs from the beam table")
    check_sensor_poses(arrays.get("chirp_T_world_radar"), "chirp", cal, "T_radar_world", event, add)
    if not {"valid", "range"} <= arrays.keys():
        return
    check_validity(arrays, ("range", "radial_velocity", "normal_geometric", "cos_incidence"), add)
    valid = arrays["valid"] == 1
    lim = cal["range_limits_m"]
    r = arrays["range"][valid]
    outside = int(np.count_nonzero((r < lim["min"]) | (r > lim["max"])))
    add("range_limits", outside == 0, f"{outside} returns outside [{lim['min']}, {lim['max']}] m" if outside
        else "every return lies within the declared range limits")
    if "radial_velocity" in arrays:
        vmax = cal["max_radial_velocity_mps"]
        fast = int(np.count_nonzero(np.abs(arrays["radial_velocity"][valid]) > vmax))
        add("velocity_limits", fast == 0, f"{fast} returns beyond |v_r| <= {vmax} m/s" if fast
            else f"every return has |radial_velocity| <= {vmax} m/s")
    if "normal_geometric" in arrays:
        n = arrays["normal_geometric"].astype(np.float64)[valid]
        d = np.broadcast_to(directions[None], valid.shape + (3,))[valid]
        away = int(np.count_nonzero(-np.einsum("ij,ij->i", n, d) < -tol.GEOMETRIC_FACING_TOL))
        add("normal_geometric_facing", away == 0, f"geometric normal faces away from the sensor on {away} beams"
            if away else "geometric normal faces the sensor on every valid beam")
    check_ids(manifest, arrays, add)
    if {"points", "chirp_T_world_radar"} <= arrays.keys():
        _check_points(timing, valid, arrays, directions, add)
    check_beam_verification(manifest["method"]["verification"], add, unit="chirps")
    check_beam_coverage(manifest, arrays, add, unit="chirps")


def _check_points(timing: RadarTiming, valid, arrays, directions, add):
    pts = arrays["points"]
    k, b = np.nonzero(valid)
    same = pts.size == k.size and np.array_equal(pts["chirp"], k) and np.array_equal(pts["beam"], b)
    add("points_match_beams", same, "points table holds one row per valid beam in (chirp, beam) order" if same
        else f"points table ({pts.size} rows) does not list the {k.size} valid beams in order")
    if not same:
        return
    t_ok = np.array_equal(pts["t_ns"], timing.chirp_times_ns()[k])
    add("points_times", t_ok, "point times equal their chirps' times" if t_ok else "point t_ns differ from chirp times")
    T = arrays["chirp_T_world_radar"][k]
    world = np.stack([pts["x_world"], pts["y_world"], pts["z_world"]], -1)
    local = np.stack([pts["x"], pts["y"], pts["z"]], -1)
    origin = T[:, :3, 3]
    rng = np.linalg.norm(world - origin, axis=-1)
    worst_r = float(np.abs(rng - arrays["range"][k, b]).max(initial=0.0))
    add("range_equals_world_distance", worst_r <= tol.LIDAR_RANGE_TOL_M,
        f"range differs from |p_world - origin(t)| by up to {worst_r:.3g} m" if worst_r > tol.LIDAR_RANGE_TOL_M
        else "range = |p_world - origin(t)| for every return", worst_error_m=worst_r)
    expected_local = np.einsum("nji,nj->ni", T[:, :3, :3], world - origin)
    worst_l = float(np.abs(expected_local - local).max(initial=0.0))
    add("points_radar_frame", worst_l <= tol.LIDAR_POINT_TOL_M,
        f"point xyz differs from T_radar_world(t) p_world by {worst_l:.3g} m" if worst_l > tol.LIDAR_POINT_TOL_M
        else "point xyz = T_radar_world(t) p_world", worst_error_m=worst_l)
    lateral = float(np.linalg.norm(np.cross(local, directions[b]), axis=-1).max(initial=0.0))
    add("beam_directions", lateral <= tol.LIDAR_LATERAL_TOL_M,
        f"returns lie up to {lateral:.3g} m off their beam-table direction" if lateral > tol.LIDAR_LATERAL_TOL_M
        else "every return lies on its beam-table direction", worst_lateral_m=lateral)
    if "radial_velocity" in arrays:
        same_v = np.array_equal(pts["radial_velocity"].astype(np.float32), arrays["radial_velocity"][k, b])
        add("points_radial_velocity", same_v, "point radial velocities equal the per-beam array" if same_v
            else "point radial_velocity differs from the per-beam array")


def _world_points_normals(pts, normals, poses):
    """(N, 3) world points and (N, 3) world unit normals of a point table; poses (N, 4, 4) at each point's time."""
    P = np.stack([pts["x_world"], pts["y_world"], pts["z_world"]], -1)
    n = np.einsum("nij,nj->ni", poses[:, :3, :3], normals.astype(np.float64))
    return P, n / np.linalg.norm(n, axis=-1, keepdims=True)


def check_radar_lidar(radar_m: dict, ra: dict, lidar_m: dict, la: dict, add) -> None:
    """Radar returns on static surfaces lie on the LiDAR's surface where both see the same static object's face
    (equal world normals) within 1 m, at times at most tol.LIDAR_CAMERA_MAX_SKEW_NS apart: the distance of each radar
    return from the tangent plane of its nearest such LiDAR return."""
    name = f"radar_vs_lidar:{lidar_m['sensor']['id']}/{lidar_m['event']['index']}"
    rid = {o["render_index"]: o for o in radar_m["objects"]}
    lid = {o["render_index"]: o for o in lidar_m["objects"]}
    rp, lp = ra["points"], la["points"]
    r_obj = np.array([rid.get(int(i), {}).get("id", -1) if rid.get(int(i), {}).get("motion") == "static" else -1
                      for i in rp["instance_id"]], dtype=object)
    l_obj = np.array([lid.get(int(i), {}).get("id", -1) for i in lp["instance_id"]], dtype=object)
    Pr, nr = _world_points_normals(rp, ra["normal_geometric"][rp["chirp"], rp["beam"]], ra["chirp_T_world_radar"][rp["chirp"]])
    groups = sorted(set(lidar_m["event"]["channel_time_offsets_ns"]))
    g = np.array([groups.index(o) for o in lidar_m["event"]["channel_time_offsets_ns"]])[lp["channel"]]
    Pl, nl = _world_points_normals(lp, la["normal_geometric"][lp["firing"], lp["channel"]],
                                   la["firing_T_world_lidar"][lp["firing"], g])
    worst, pairs = 0.0, 0
    for i in np.flatnonzero(r_obj != -1):
        cand = (l_obj == r_obj[i]) & (np.abs(lp["t_ns"] - rp["t_ns"][i]) <= tol.LIDAR_CAMERA_MAX_SKEW_NS)
        cand &= nl @ nr[i] >= 1 - 1e-6
        if not cand.any():
            continue
        d = np.linalg.norm(Pl[cand] - Pr[i], axis=-1)
        j = int(np.argmin(d))
        if d[j] > 1.0:
            continue
        pairs += 1
        worst = max(worst, abs(float(nl[cand][j] @ (Pr[i] - Pl[cand][j]))))
    if not pairs:
        add(name, True, "no static radar return has a time-matched LiDAR return on the same face within 1 m",
            severity="warn")
        return
    ok = worst <= tol.RADAR_LIDAR_PLANE_TOL_M
    add(name, ok, f"{pairs} static radar returns vs time-matched LiDAR returns on the same face: worst distance from "
        f"the LiDAR surface {worst:.3g} m" + ("" if ok else f" (limit {tol.RADAR_LIDAR_PLANE_TOL_M} m)"),
        pairs=pairs, worst_plane_distance_m=worst)


sensor_hook(RADAR, "cross_check")(CrossCheck(
    LIDAR, ("points", "normal_geometric", "chirp_T_world_radar"), ("points", "normal_geometric", "firing_T_world_lidar"),
    check_radar_lidar))


@sensor_hook(RADAR, "check_rig_acquisition")
def check_radar_rig(manifest: dict, sensor, add) -> None:
    """The event's chirp train and beam table equal the bundle rig's radar `sensor` (check `radar_rig`)."""
    want = {"chirps": sensor.chirps, "chirp_period_ns": sensor.chirp_period_ns, "chirp_offset_ns": sensor.chirp_offset_ns}
    got = {k: manifest["event"].get(k) for k in want}
    table = [[b["azimuth_deg"], b["elevation_deg"]] for b in manifest["calibration"]["beams"]["table"]]
    same = got == want and table == [list(x) for x in zip(sensor.azimuths_deg, sensor.elevations_deg, strict=True)]
    add("radar_rig", same, "chirp train and beam table as the bundle's rig declares" if same else
        f"the manifest's chirp train {got} or beam table differs from the bundle's rig ({want})")
