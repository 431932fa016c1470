"""Render one spinning-LiDAR sweep with every beam at its own time; verify sampled firings (bpy).

Method: a custom OSL camera (rows = firing slots, columns = channels) on the mount, rendered
by Cycles with motion blur and a TOP rolling shutter of duration 0, the shutter shifted so
row r is traced at its slot's exact time (`cycles_timing.timed_rows_shutter`); once, or, when the
sweep needs more than Blender's 65,536 rows, once per contiguous firing range
(`lidar_layout.SweepLayout.renders`), each render's passes read at its beams' pixels. World hits are
expressed in the LiDAR frame with the exact mount pose at each beam's time (F-curves and parent
chains evaluated directly; frame_set per firing and time group where the motion needs it).
Reference: sampled firings re-cast with Blender's BVH (scene.ray_cast) after frame_set to the
beam's exact time.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

from rowbeam.sensors import sensor_hook
from rowbeam.sensors.lidar import LIDAR
from rowbeam.blender.export.manifest import lidar_core
from rowbeam.blender.sensors.exporter import Exporter, SensorEventOutput
from rowbeam.model.frames import invert_rigid
from rowbeam.sensors.lidar import LidarSensor

from rowbeam.blender.cycles import cycles_setup as cs
from rowbeam.blender.cycles.label_materials import apply_surface_policy, label_materials, unseen_materials
from rowbeam.blender.sensors.lidar_labels import beam_samples, labels_from_beams, point_tables
from rowbeam.blender.sensors.lidar_layout import MAX_ROWS, sweep_layout
from rowbeam.blender.sensors.lidar_osl import lidar_shader_source, make_lidar_camera
from rowbeam.blender.cycles.osl_camera import custom_camera_device
from rowbeam.blender.compat.scene_clock import pose_method, rigid_poses, set_time
from rowbeam.blender.compat.scene_patch import ScenePatch
from rowbeam.blender.export.verify import verify_rows
from rowbeam.blender.objects.instances import instance_lookup, resolve_index, setup_instance_passes

LIDAR_METHOD = ("cycles_osl_lidar_camera: one Cycles render (several over contiguous firing ranges when the sweep "
                "needs more rows than one render has, see cycles.renders) through a generated OSL camera whose image "
                "rows are firing slots and columns channels, motion blur with a TOP rolling shutter (duration 0) "
                "shifted so each row is traced at its firing's exact time; ranges, points and normals derived from "
                "the Position pass and a true-normal AOV with the exact mount pose at every beam's time")
POSE_METHOD = ("every firing's time plus each distinct channel time offset; mount matrix_world, scale removed; "
               "LiDAR frame = mount local axes (x forward, y left, z up); ")


def export_lidar_event(ctx, sensor: LidarSensor, index: int) -> SensorEventOutput:
    scene, clock = ctx.scene, ctx.clock
    mount = scene.objects[sensor.object]
    timing = sensor.timing(index)
    F, C = sensor.azimuth_steps, sensor.channels
    offsets, group_of_channel = timing.time_groups()
    layout = sweep_layout(F, timing.firing_period_ns, sensor.time_offsets_ns)
    seconds = {}

    t0 = time.perf_counter()
    all_poses = rigid_poses(scene, clock, mount, timing.firing_times_exact(offsets) + [timing.reference_time_ns()])
    poses, ref_pose = all_poses[:-1].reshape(F, len(offsets), 4, 4), all_poses[-1]
    seconds["poses"] = time.perf_counter() - t0
    beam_poses = poses[:, :1] if len(offsets) == 1 else poses[:, group_of_channel]   # (F, 1 or C, 4, 4)
    directions = sensor.directions(timing)

    renders = layout.renders()
    beam_times = timing.beam_times_ns()
    t0 = time.perf_counter()
    with beam_renders(ctx, sensor, timing, layout, lidar_shader_source) as (beams, device):
        seconds["render"] = time.perf_counter() - t0

        def derive():
            t0 = time.perf_counter()
            labels, stats = labels_from_beams(beams, beam_poses, directions, (sensor.min_range_m, sensor.max_range_m),
                                              ctx.lut)
            points, compensated = point_tables(labels, beam_times, invert_rigid(ref_pose))
            seconds["derive"] = time.perf_counter() - t0
            return labels, stats, points, compensated

        # numpy derivation in a worker thread while the main thread casts the verification rays (bpy stays on the
        # main thread); the same arithmetic either way, so the same bits
        t0 = time.perf_counter()
        with ThreadPoolExecutor(1, thread_name_prefix="rowbeam_lidar_derive") as pool:
            derived = pool.submit(derive)
            casts = _cast_verification_firings(ctx, sensor, timing, poses, directions, offsets, group_of_channel)
            labels, stats, points, compensated = derived.result()
        decided = decided_beams(beams)
        verification = _compare_verification(casts, labels, decided | uncastable_beams(ctx, labels))
        seconds["verify"] = time.perf_counter() - t0     # casts and comparison, overlapping `derive`

    arrays = {k: v for k, v in labels.items() if not k.startswith("_")}
    arrays.update(time_offset_ns=(beam_times - timing.sweep_start_ns).astype(np.uint32),
                  firing_T_world_lidar=poses, points=points, points_motion_compensated=compensated)
    method = {
        "label_render": LIDAR_METHOD,
        "firing_poses": POSE_METHOD + pose_method(scene, [mount]),
        "cycles": {"samples": 1, "pixel_filter": "GAUSSIAN", "filter_width_px": 0.01,
                   "image_rows": layout.rows, "image_columns": layout.width, "rows_per_firing": layout.slots,
                   "rolling_shutter_type": "TOP", "rolling_shutter_duration": 0.0, "motion_steps": sensor.motion_steps,
                   **(_shutter_fields(renders[0].shutter(timing)) if len(renders) == 1 else {}),
                   "row_time_correction_ns": float(timing.firing_period_ns / layout.slots),
                   "render_time_quantization_ns": layout.quantization_ns,
                   "max_image_rows_per_render": layout.max_rows,
                   "renders": [{"first_firing": r.first_firing, "firings": r.firings, "image_rows": r.rows,
                                **_shutter_fields(r.shutter(timing))} for r in renders]},
        "derivation": stats,
        "verification": verification,
        "surface_policy": {**sensor.surface_policy.manifest_block(), "decided_beams": int(decided.sum()),
                           "unseen_materials": unseen_materials(label_materials(ctx.render_objects()))},
    }
    dims = {"F": F, "C": C, "G": len(offsets), "N": int(points.size)}
    return SensorEventOutput(sensor, timing, arrays, dims, ref_pose, method, seconds, render_device=device)


def _shutter_fields(shutter) -> dict:
    return {"shutter_centre_ns": float(shutter.centre_ns), "shutter_duration_ns": float(shutter.duration_ns)}


def render_beam_layout(ctx, sensor, timing, layout, shader) -> tuple[dict, str]:
    """Render every beam of `layout` through the OSL beam camera `shader(sensor, layout, render)` on the mount
    `sensor.object`, each image row at its firing's exact time (`timing`: firing_time_exact, firing_period_ns);
    returns ({pass: (F, C, ...)} at the beams' pixels, render device text). Shared by LiDAR and radar."""
    with beam_renders(ctx, sensor, timing, layout, shader) as rendered:
        return rendered


@contextmanager
def beam_renders(ctx, sensor, timing, layout, shader):
    """`render_beam_layout` that yields its result with the render settings still applied, restored when the
    with-block ends. Those settings (passes, materials' AOV, lights and world off, motion blur flags, the beam
    camera) change no geometry, so ray casts in the block (verification) see the scene as it is without them;
    restoring them re-evaluates the whole depsgraph at the next frame_set, so casting inside the block costs
    that once per event instead of once more for the casts (measured ~30-50 ms CPU on the running example)."""
    scene = ctx.scene
    renders = layout.renders()
    device = ctx.device
    with ScenePatch() as p:
        device = custom_camera_device(p, scene, device)
        ctx.base_settings(p, layout.width, renders[0].rows)
        cs.label_settings(p, scene, ctx.view_layer)
        cs.data_pass_settings(p, scene, ctx.view_layer)         # no shading work: the beam passes are bit-identical
        objects = ctx.render_objects()
        cs.add_true_normal_aov(p, objects)
        apply_surface_policy(p, scene, ctx.view_layer, objects, sensor.surface_policy,
                             cs.TRUE_NORMAL_AOV)
        cs.set_render_indices(p, scene, ctx.table)
        setup_instance_passes(p, scene, ctx.view_layer, ctx.instances, objects)
        parts = [_render_part(p, ctx, sensor, timing, layout, part, objects, shader) for part in renders]
        yield {k: np.concatenate([part[k] for part in parts]) for k in parts[0]}, device


def _render_part(p, ctx, sensor, timing, layout, part, objects, shader=lidar_shader_source) -> dict:
    """Render firings part.first_firing .. (+ part.firings) with their settings recorded in `p`; return the passes
    at their beams (beam_samples). A later part's settings replace an earlier part's (its beam camera stays in the
    scene, unused, until `p` restores)."""
    scene = ctx.scene
    mount = scene.objects[sensor.object]
    cs.set_resolution(p, scene, layout.width, part.rows)
    cam = make_lidar_camera(p, scene, mount, shader(sensor, layout, part))
    static = {o.name for o in ctx.shutter_objects()[1]}  # certainly static: motion blur off (identical, cheaper)
    cs.apply_shutter(p, scene, ctx.clock, part.shutter(timing), sensor.motion_steps,
                     [o for o in objects if o.name not in static] + [cam, mount],
                     [o for o in objects if o.name in static])
    passes = cs.render_passes(scene, ctx.view_layer)
    if ctx.instances:           # instanced geometry: each instance's render index (objects/instances.py)
        passes["index"] = resolve_index(passes["index"], passes.pop("instance_random", None), ctx.instances)
    shape = passes["position"].shape[:2]
    if shape != (part.rows, layout.width):
        raise RuntimeError(f"Cycles rendered {shape[0]}x{shape[1]} rows x columns for a LiDAR render of "
                           f"{part.rows}x{layout.width} (at most {MAX_ROWS} rows per render)")
    return beam_samples(passes, *layout.pixel_of_beam(part))


def _verify(ctx, sensor, timing, labels, poses, directions, offsets, group_of_channel) -> dict:
    """Cast sampled firings with Blender's BVH at their exact time and compare object and range."""
    return _compare_verification(
        _cast_verification_firings(ctx, sensor, timing, poses, directions, offsets, group_of_channel), labels)


def _cast_verification_firings(ctx, sensor, timing, poses, directions, offsets, group_of_channel) -> list:
    """The verification's Blender part (main thread only): each sampled firing k's beams cast with scene.ray_cast
    after frame_set to each time group's exact time, from the exact mount pose (poses (F, G, 4, 4) T_world_lidar)
    along the declared direction (LiDAR frame). Returns [(k, [(channel c, expected instance id, range m, ok)])]: ok
    when the beam hits within [min_range_m, max_range_m] (range inf without a hit); the expected id is 0 where not
    ok, -1 for an object outside the object table."""
    import bpy

    scene = ctx.scene
    name_to_index = {e.obj_name: e.render_index for e in ctx.table}
    out = []
    for k in verify_rows(sensor.azimuth_steps, sensor.verify_firings):
        beams = []
        for g, offset in enumerate(offsets):
            set_time(scene, ctx.clock, timing.firing_time_exact(k) + offset)
            depsgraph = bpy.context.evaluated_depsgraph_get()
            instance_of = instance_lookup(ctx.instances) if ctx.instances else (lambda obj, M: None)
            R, o = poses[k, g, :3, :3], poses[k, g, :3, 3]
            for c in (c for c in range(sensor.channels) if group_of_channel[c] == g):
                hit, loc, _, _, obj, M = scene.ray_cast(depsgraph, o.tolist(), (R @ directions[k, c]).tolist())
                rng = float(np.linalg.norm(np.array(loc) - o)) if hit else np.inf
                ok = hit and sensor.min_range_m <= rng <= sensor.max_range_m
                expected = (instance_of(obj, M) or name_to_index.get(obj.name, -1)) if ok else 0
                beams.append((c, expected, rng, ok))
        out.append((k, beams))
    return out


def decided_beams(beams: dict) -> np.ndarray:
    """(F, C) bool: beams whose label ray met a surface the surface policy decided (beam_samples' `policy`)."""
    if "policy" not in beams:
        return np.zeros(beams["depth"].shape[:2], bool)
    return beams["policy"] > 0


def uncastable_beams(ctx, labels: dict) -> np.ndarray:
    """Bool mask of the beams labelled with an object scene.ray_cast cannot hit: a point cloud, curves or a volume,
    as the object itself or as geometry its Geometry Nodes make (rendered as instances of such data)."""
    import bpy

    kinds = {"POINTCLOUD", "CURVES", "VOLUME"}
    names = {o.name for o in ctx.render_objects() if o.type in kinds}
    for inst in bpy.context.evaluated_depsgraph_get().object_instances:
        if inst.is_instance and inst.parent is not None and inst.object.type in kinds:
            names.add(inst.parent.original.name)
    indices = [e.render_index for e in ctx.table if e.obj_name in names]
    insts = getattr(ctx, "instances", None)
    if insts:                         # an instance of such data, or an instance its instancer makes with it
        indices += [ri for ri, proto in insts.proto.items()
                    if proto in names or getattr(bpy.data.objects.get(proto), "type", None) in kinds
                    or insts.instancer.get(ri) in names]
    return np.isin(labels["instance_id"], indices)


def _compare_verification(casts: list, labels: dict, skip: np.ndarray | None = None) -> dict:
    """The verification record: the cast beams (`_cast_verification_firings`) against the exported instance id
    (every beam) and range (beams whose id agrees and that hit within the limits). Beams in `skip` ((F, C) bool)
    are not compared: those the surface policy decided (the BVH cast sees geometry, not materials) and those on
    geometry the BVH cast cannot hit (`uncastable_beams`). Per firing, the compared channels whose cast met a surface
    within the range limits (`cast_hit_channels`) and those whose cast met none (`cast_miss_channels`): the checker's
    `beam_coverage` second source."""
    worst_range, mismatched, compared = 0.0, 0, 0
    per_firing = []
    for k, beams in casts:
        f_worst, f_mismatch, hits, misses = 0.0, 0, [], []
        for c, expected, rng, ok in beams:
            if skip is not None and skip[k, c]:
                continue
            compared += 1
            (hits if ok else misses).append(c)
            if int(labels["instance_id"][k, c]) != expected:
                f_mismatch += 1
            elif ok:
                f_worst = max(f_worst, abs(rng - float(labels["range"][k, c])))
        per_firing.append({"firing": k, "range_error_m": f_worst, "id_mismatch_beams": f_mismatch,
                           "cast_hit_channels": hits, "cast_miss_channels": misses})
        worst_range = max(worst_range, f_worst)
        mismatched += f_mismatch
    return {
        "method": "bvh_ray_cast_exact_time: each listed firing re-cast with scene.ray_cast (Blender BVH) after "
                  "frame_set to each beam's exact time, from the exact mount pose along the declared beam direction",
        "firings_checked": len(casts),
        "rows_checked": len(casts),
        "firings": per_firing,
        "beams_compared": compared,
        "worst_range_error_m": worst_range,
        "id_mismatch_beams": mismatched,
        "id_mismatch_fraction": mismatched / compared if compared else 0.0,
    }


sensor_hook(LIDAR, "export")(Exporter(export_lidar_event, lidar_core))
