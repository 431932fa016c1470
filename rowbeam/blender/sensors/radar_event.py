"""Render one radar frame: every beam of every chirp at the chirp's own time; radial velocity from motion (bpy).

Method: the LiDAR's OSL beam camera (`lidar_event.render_beam_layout`, `lidar_osl.beam_camera_source`) with
image rows = chirps and columns = beams, fixed beam directions (azimuth step 0), each row traced at its
chirp's exact time (`rowbeam.sensors.radar.RadarTiming`). Ranges, points and normals come from the Position
pass and true-normal AOV with the exact mount pose at each chirp's time (`lidar_labels.labels_from_beams`).

Radial velocity (m/s, positive = receding) of a return P on object o at chirp time t:
    v_r = (Mdot_o(t) M_o(t)^-1 P - odot(t)) . d_world(t)
with Mdot the central difference of matrix_world over t +- VELOCITY_STEP_NS (rigid and affine motion
exactly up to O(step^2) curvature; objects marked static have Mdot = 0; a moving instance's matrix by
instances.INSTANCE_MOTION_RULE), odot the mount origin's
velocity by the same difference, d_world the beam direction at t. Never a difference of ranges.
"""
from __future__ import annotations

import time

import numpy as np

from rowbeam.sensors import sensor_hook
from rowbeam.sensors.radar import RADAR
from rowbeam.blender.export.manifest import radar_core
from rowbeam.blender.sensors.exporter import Exporter, SensorEventOutput
from rowbeam.model.modalities import RADAR_MODALITIES
from rowbeam.sensors.radar import RadarSensor

from rowbeam.blender.cycles.label_materials import label_materials, unseen_materials
from rowbeam.blender.sensors.lidar_event import decided_beams, render_beam_layout, uncastable_beams
from rowbeam.blender.sensors.lidar_labels import labels_from_beams
from rowbeam.blender.sensors.lidar_layout import sweep_layout
from rowbeam.blender.sensors.lidar_osl import beam_camera_source
from rowbeam.blender.compat.scene_clock import objects_world_matrices, pose_method, rigid_poses, set_time
from rowbeam.blender.export.verify import verify_rows
from rowbeam.blender.objects.instances import instance_lookup, instance_matrices

VELOCITY_STEP_NS = 2_000_000          # +-2 ms: float32 matrix_world and subframe rounding vs curvature
RADAR_METHOD = ("cycles_osl_beam_camera: one Cycles render through the generated OSL beam camera (image rows = chirps, "
                "columns = beams, fixed directions), motion blur with a TOP rolling shutter (duration 0) shifted so each "
                "row is traced at its chirp's exact time; ranges, points and normals from the Position pass and a "
                "true-normal AOV with the exact mount pose at every chirp's time")
POSE_METHOD = ("mount matrix_world at every chirp's time, scale removed; radar frame = mount local axes (x forward, "
               "y left, z up); evaluated by ")
VELOCITY_METHOD = (f"v_r = (Mdot_o(t) M_o(t)^-1 P - odot(t)) . d_world(t): Mdot = central difference of the hit object's "
                   f"matrix_world over t +- {VELOCITY_STEP_NS} ns (scene_clock.objects_world_matrices; objects[].motion "
                   "static: 0), "
                   "odot = the mount origin's velocity by the same difference; not a difference of ranges")


def radar_shader_source(sensor: RadarSensor, layout, render=None) -> str:
    """OSL source: row = chirp, column = beam (fixed azimuth/elevation per beam)."""
    return beam_camera_source(sensor.id, layout, render, np.radians(sensor.elevations_deg).tolist(),
                              np.radians(sensor.azimuths_deg).tolist(), 0.0)


def chirp_motion(ctx, sensor: RadarSensor, timing, objects, instances=()) -> tuple[np.ndarray, np.ndarray,
                                                                                     np.ndarray]:
    """(M, Mdot) of [mount] + objects + instances (render indices of ctx.instances) at every chirp:
    (1+O+I, K, 4, 4) matrix_world and its time derivative (per s), and (K, 4, 4) rigid mount poses."""
    scene, clock = ctx.scene, ctx.clock
    mount = scene.objects[sensor.object]
    times = [timing.chirp_time_exact(j) for j in range(sensor.chirps)]
    bodies = [mount] + list(objects)

    def at(ts):
        M = objects_world_matrices(scene, clock, bodies, ts)
        if not instances:
            return M
        return np.concatenate([M, instance_matrices(scene, clock, ctx.instances, list(instances), ts)])

    M = at(times)
    before, after = at([t - VELOCITY_STEP_NS for t in times]), at([t + VELOCITY_STEP_NS for t in times])
    Mdot = (after - before) / (2 * VELOCITY_STEP_NS * 1e-9)
    return M, Mdot, rigid_poses(scene, clock, mount, times)


def radial_velocity(world: np.ndarray, index: np.ndarray, valid: np.ndarray, M: np.ndarray, Mdot: np.ndarray,
                    body_of_index: dict, d_world: np.ndarray) -> np.ndarray:
    """(K, B) float64 m/s: (v_point - v_origin) . d_world for valid beams (NaN elsewhere).
    world: (K, B, 3) hit points; index: (K, B) render index; M, Mdot: (1+O, K, 4, 4), body 0 = the mount;
    body_of_index: render index -> body (None: static, zero velocity); d_world: (K, B, 3) unit."""
    K, B = index.shape
    v_point = np.zeros((K, B, 3))
    for idx, body in body_of_index.items():
        if body is None:
            continue
        sel = valid & (index == idx)
        if not sel.any():
            continue
        k = np.nonzero(sel)[0]
        local = np.einsum("nij,nj->ni", np.linalg.inv(M[body, k]), np.c_[world[sel], np.ones(k.size)])
        v_point[sel] = np.einsum("nij,nj->ni", Mdot[body, k], local)[:, :3]
    v_origin = Mdot[0, :, :3, 3][:, None, :]
    v = np.einsum("kbi,kbi->kb", v_point - v_origin, d_world)
    return np.where(valid, v, np.nan)


def export_radar_event(ctx, sensor: RadarSensor, index: int) -> SensorEventOutput:
    scene, clock = ctx.scene, ctx.clock
    timing = sensor.timing(index)
    K, B = sensor.chirps, sensor.beams
    layout = sweep_layout(K, timing.firing_period_ns, [0] * B)
    seconds = {}
    moving = [e for e in ctx.table if e.motion != "static"]
    moving_inst = [e.render_index for e in ctx.instances.entries if e.motion != "static"]
    body_of_index = {e.render_index: None for e in ctx.table}
    body_of_index.update({e.render_index: i + 1 for i, e in enumerate(moving)})
    body_of_index.update({ri: 1 + len(moving) + i for i, ri in enumerate(moving_inst)})

    t0 = time.perf_counter()
    M, Mdot, poses = chirp_motion(ctx, sensor, timing, [scene.objects[e.obj_name] for e in moving], moving_inst)
    ref_pose = rigid_poses(scene, clock, scene.objects[sensor.object], [timing.reference_time_ns()])[0]
    seconds["poses"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    beams, device = render_beam_layout(ctx, sensor, timing, layout, radar_shader_source)
    seconds["render"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    directions = np.broadcast_to(sensor.directions()[None], (K, B, 3))
    beam_poses = poses[:, None]                                   # (K, 1, 4, 4): one pose per chirp
    labels, stats = labels_from_beams(beams, beam_poses, directions, (sensor.min_range_m, sensor.max_range_m), ctx.lut)
    d_world = np.einsum("kij,bj->kbi", poses[:, :3, :3], sensor.directions())
    v_r = radial_velocity(labels["_world"], labels["instance_id"], labels["valid"] == 1, M, Mdot, body_of_index,
                          d_world)
    too_fast = (labels["valid"] == 1) & (np.abs(v_r) > sensor.max_radial_velocity_mps)
    if too_fast.any():
        _invalidate(labels, too_fast, ctx.lut)
        v_r[too_fast] = np.nan
    stats["beyond_velocity_limit_beams"] = int(too_fast.sum())
    labels["radial_velocity"] = v_r.astype(np.float32)
    chirp_times = timing.chirp_times_ns()
    points = _point_table(labels, v_r, chirp_times)
    seconds["derive"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    decided = decided_beams(beams)
    labels["_not_cast"] = decided | uncastable_beams(ctx, labels)
    verification = _verify(ctx, sensor, timing, labels, poses, too_fast)
    seconds["verify"] = time.perf_counter() - t0

    arrays = {k: v for k, v in labels.items() if not k.startswith("_")}
    arrays.update(time_offset_ns=chirp_times - timing.frame_start_ns,
                  azimuth_deg=np.asarray(sensor.azimuths_deg, np.float64),
                  elevation_deg=np.asarray(sensor.elevations_deg, np.float64),
                  chirp_T_world_radar=poses, chirp_velocity_world=Mdot[0, :, :3, 3].copy(), points=points)
    method = {
        "label_render": RADAR_METHOD,
        "chirp_poses": POSE_METHOD + pose_method(scene, [scene.objects[sensor.object]]),
        "radial_velocity": VELOCITY_METHOD,
        "cycles": {"samples": 1, "pixel_filter": "GAUSSIAN", "filter_width_px": 0.01, "image_rows": layout.rows,
                   "image_columns": layout.width, "rolling_shutter_type": "TOP", "rolling_shutter_duration": 0.0,
                   "motion_steps": sensor.motion_steps, "render_time_quantization_ns": layout.quantization_ns,
                   "renders": [{"first_chirp": r.first_firing, "chirps": r.firings, "image_rows": r.rows}
                               for r in layout.renders()]},
        "derivation": stats,
        "verification": verification,
        "surface_policy": {**sensor.surface_policy.manifest_block(), "decided_beams": int(decided.sum()),
                           "unseen_materials": unseen_materials(label_materials(ctx.render_objects()))},
    }
    dims = {"K": K, "B": B, "N": int(points.size)}
    return SensorEventOutput(sensor, timing, arrays, dims, ref_pose, method, seconds, render_device=device)


def _invalidate(labels: dict, mask: np.ndarray, lut: np.ndarray) -> None:
    labels["valid"][mask] = 0
    labels["instance_id"][mask] = 0
    labels["semantic_id"][mask] = lut[0]
    for name in ("range", "cos_incidence", "normal_geometric"):
        labels[name][mask] = np.nan


def _point_table(labels: dict, v_r: np.ndarray, chirp_times: np.ndarray) -> np.ndarray:
    """One record per valid beam in (chirp, beam) order (rowbeam.model.modalities RADAR_MODALITIES['points'])."""
    k, b = np.nonzero(labels["valid"])
    table = np.zeros(k.size, dtype=RADAR_MODALITIES["points"].numpy_dtype())
    table["t_ns"], table["chirp"], table["beam"] = chirp_times[k], k, b
    radar, world = labels["_lidar"][k, b], labels["_world"][k, b]
    table["x"], table["y"], table["z"] = radar.T
    table["x_world"], table["y_world"], table["z_world"] = world.T
    table["range"] = np.linalg.norm(radar, axis=-1)
    table["radial_velocity"] = v_r[k, b]
    table["instance_id"], table["semantic_id"] = labels["instance_id"][k, b], labels["semantic_id"][k, b]
    return table


def _verify(ctx, sensor: RadarSensor, timing, labels: dict, poses: np.ndarray, too_fast: np.ndarray) -> dict:
    """Cast every beam of sampled chirps with Blender's BVH at the chirp's exact time; compare object and range.
    Beams in labels["_not_cast"] are not compared: those the surface policy decided (the BVH cast sees geometry,
    not materials) and those on geometry the cast cannot hit (lidar_event.uncastable_beams). Per chirp, the compared
    beams whose cast met a surface within the range limits (`cast_hit_beams`) and those that met none
    (`cast_miss_beams`; beams refused by the velocity limit in neither): the checker's `beam_coverage` source."""
    import bpy

    scene = ctx.scene
    name_to_index = {e.obj_name: e.render_index for e in ctx.table}
    chirps = verify_rows(sensor.chirps, sensor.verify_chirps)
    directions = sensor.directions()
    worst, mismatched, compared, per_chirp = 0.0, 0, 0, []
    for j in chirps:
        set_time(scene, ctx.clock, timing.chirp_time_exact(j))
        depsgraph = bpy.context.evaluated_depsgraph_get()
        instance_of = instance_lookup(ctx.instances) if ctx.instances else (lambda obj, M: None)
        R, o = poses[j, :3, :3], poses[j, :3, 3]
        c_worst, c_mismatch, hits, misses = 0.0, 0, [], []
        for b in range(sensor.beams):
            hit, loc, _, _, obj, M = scene.ray_cast(depsgraph, o.tolist(), (R @ directions[b]).tolist())
            rng = float(np.linalg.norm(np.array(loc) - o)) if hit else np.inf
            ok = hit and sensor.min_range_m <= rng <= sensor.max_range_m
            expected = (instance_of(obj, M) or name_to_index.get(obj.name, -1)) if ok else 0
            if labels["_not_cast"][j, b]:
                continue
            compared += 1
            if not too_fast[j, b]:
                (hits if ok else misses).append(b)
            else:
                expected = 0                  # refused by the velocity limit, not by the geometry
            if int(labels["instance_id"][j, b]) != expected:
                c_mismatch += 1
            elif ok and expected:
                c_worst = max(c_worst, abs(rng - float(labels["range"][j, b])))
        per_chirp.append({"chirp": j, "range_error_m": c_worst, "id_mismatch_beams": c_mismatch,
                          "cast_hit_beams": hits, "cast_miss_beams": misses})
        worst, mismatched = max(worst, c_worst), mismatched + c_mismatch
    return {"method": "bvh_ray_cast_exact_time: every beam of each listed chirp re-cast with scene.ray_cast (Blender "
                      "BVH) after frame_set to the chirp's exact time, from the exact mount pose",
            "chirps_checked": len(chirps), "rows_checked": len(chirps), "chirps": per_chirp,
            "beams_compared": compared, "worst_range_error_m": worst, "id_mismatch_beams": mismatched,
            "id_mismatch_fraction": mismatched / compared if compared else 0.0}


sensor_hook(RADAR, "export")(Exporter(export_radar_event, radar_core))
