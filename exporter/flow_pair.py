"""Export the flow between two camera events of one sensor (bpy for object poses over time).

Reads both exported events (camera_z, instance_id, per-row poses), evaluates every moving
object's matrix_world at every row time of both events (scene_clock: direct where plain, else frame_set), runs
`flow_math.geometric_flow` both ways and writes a `rowbeam/flow@1` folder
flows/<sensor>/<i0>-<i1>/ next to the events.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from contracts import qa_profile
from contracts.bundle_reader import open_event
from contracts.camera_model import PIXEL_CONVENTION_TEXT
from contracts.files import sha256_file
from contracts.lens import lens_from_calibration
from contracts.modalities import FLAG_NAMES, FLAG_TEXT
from contracts.timing import RollingShutterTiming

from .flow_math import EventGeometry, geometric_flow
from .mesh_motion import MESH_PATH_METHOD, sample_rows, same_topology, uses_mesh_path
from .scene_clock import pose_method, set_time

NEEDED = ("camera_z", "instance_id", "row_T_world_camera")
DEFINITION = ("material-point flow: the source pixel's surface point, fixed in its object's frame (matrix_world, "
              "affine) or, on a deforming object, as (triangle, barycentric) of its evaluated mesh, moved to the "
              "destination time and projected by the destination camera at the time of the "
              "destination row it lands on (fixed point over the destination's per-row poses, linear between "
              "adjacent rows); backward flow is the same from the destination grid to the source event")
CONVENTIONS = {
    "flow": "pixels; u right, v down; flow = (u_dest - u_src, v_dest - v_src); NaN where the correspondence "
            "is undefined",
    "grid": "flow_forward and scene flow on the source event's pixel grid, flow_backward on the destination's",
    "direction": "forward: source -> destination (later) event; backward: destination -> source; backward flow "
                 "is not the negative of forward flow at the same index (different grids and visibility)",
    "time": "each source pixel at its own row's reference time; its destination at the reference time of the "
            "destination row it lands on (rows outside the image use the nearest edge row's time)",
    "pixel": PIXEL_CONVENTION_TEXT,
    "scene_flow": "scene_flow_world = P(dest time) - P(source time) in world metres; scene_flow_source_camera = "
                  "the same vector in the source camera frame (OpenCV optical) at the source row's time",
}


def load_event(event_dir: Path) -> tuple[dict, dict]:
    """(manifest, {NEEDED name: array}) of an exported endpoint event, through the bundle loader (hashes verified)."""
    event = open_event(event_dir)
    return event.manifest, event.arrays(NEEDED)


def _object_luts(ctx, rigid, deforming, t_src, t_dst):
    """(render index -> rigid slot (-1 none), -> deforming slot (-1 none), -> undefined) and the reason per
    object name for the objects whose correspondence is undefined because they are hidden at one endpoint."""
    size = max((e.render_index for e in ctx.table), default=0) + 1
    slot = np.full(size, -1, np.int64)
    dslot = np.full(size, -1, np.int64)
    undefined = np.zeros(size, np.uint8)
    scene = ctx.scene
    hidden = {}
    for t in (t_src, t_dst):
        set_time(scene, ctx.clock, t)
        for e in ctx.table:
            hidden.setdefault(e.obj_name, []).append(bool(scene.objects[e.obj_name].hide_render))
    reasons = {}
    for e in ctx.table:
        if len(set(hidden[e.obj_name])) > 1:
            undefined[e.render_index] = 1
            reasons[e.obj_name] = ("appears/disappears: hide_render is {} at the source and {} at the destination "
                                   "reference time".format(*hidden[e.obj_name]))
        if e.obj_name in rigid:
            slot[e.render_index] = rigid.index(e.obj_name)
        if e.obj_name in deforming:
            dslot[e.render_index] = deforming.index(e.obj_name)
    return slot, dslot, undefined, reasons


def compute_flow_pair(ctx, src_dir: Path, dst_dir: Path) -> tuple[dict, dict, dict]:
    """(arrays, method, endpoints) of the flow between two published camera events."""
    t0 = time.perf_counter()
    (m0, a0), (m1, a1) = load_event(src_dir), load_event(dst_dir)
    timing0, timing1 = (RollingShutterTiming.from_manifest(m["event"]) for m in (m0, m1))
    moving = [e.obj_name for e in ctx.table if e.motion == "moving"]
    deforming = [n for n in moving if uses_mesh_path(ctx.scene, ctx.scene.objects[n])]
    rigid = [n for n in moving if n not in deforming]
    slot, dslot, undefined, reasons = _object_luts(ctx, rigid, deforming, timing0.reference_time_ns(),
                                                   timing1.reference_time_ns())
    sampled = []
    for timing in (timing0, timing1):
        sampled.append(sample_rows(ctx.scene, ctx.clock, [ctx.scene.objects[n] for n in rigid],
                                   [ctx.scene.objects[n] for n in deforming],
                                   [timing.row_time_exact(v) for v in range(timing.rows)]))
    for j, name in enumerate(deforming):
        a, b = sampled[0][1][j], sampled[1][1][j]
        why = a if isinstance(a, str) else b if isinstance(b, str) else same_topology(a, b)
        if why:
            reasons.setdefault(name, why)
            render_index = next(e.render_index for e in ctx.table if e.obj_name == name)
            undefined[render_index] = 1
            dslot[render_index] = -1
    geoms = []
    for (m, a, _timing), (mats, meshes) in zip(((m0, a0, timing0), (m1, a1, timing1)), sampled, strict=False):
        meshes = tuple(x if not isinstance(x, str) else None for x in meshes)
        geoms.append(EventGeometry(np.array(m["calibration"]["K"]), a["camera_z"], a["instance_id"],
                                   a["row_T_world_camera"], mats, slot, undefined, dslot, meshes,
                                   lens_from_calibration(m["calibration"])))
    poses_s = time.perf_counter() - t0
    tol = (qa_profile.FLOW_DEPTH_TEST_ABS_M, qa_profile.FLOW_DEPTH_TEST_REL)
    t1 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:        # numpy releases the GIL: both directions at once
        fwd_job = pool.submit(geometric_flow, geoms[0], geoms[1], *tol)
        bwd_job = pool.submit(geometric_flow, geoms[1], geoms[0], *tol)
        fwd, bwd = fwd_job.result(), bwd_job.result()
    arrays = {"flow_forward": fwd.flow, "flow_backward": bwd.flow,
              "scene_flow_world": fwd.scene_flow_world, "scene_flow_source_camera": fwd.scene_flow_source_camera}
    for direction, result in (("forward", fwd), ("backward", bwd)):
        for flag in FLAG_NAMES:
            arrays[f"flow_{direction}_{flag}"] = getattr(result, flag)
    row_ns = timing1.readout_ns / timing1.rows
    method = {
        "definition": DEFINITION,
        "depth_test": {"abs_m": tol[0], "rel": tol[1]},
        "object_poses": "matrix_world of every rigidly moving object at every row's exact time of both events: "
                        + pose_method(ctx.scene, [ctx.scene.objects[n] for n in rigid])
                        + ("; deforming objects' evaluated meshes by scene.frame_set with subframe" if deforming else ""),
        "deforming_objects": MESH_PATH_METHOD,
        "objects": _object_methods(ctx, rigid, deforming, reasons),
        "forward": {**fwd.stats, "max_row_time_residual_ns": fwd.stats["max_row_residual"] * row_ns},
        "backward": {**bwd.stats, "max_row_time_residual_ns": bwd.stats["max_row_residual"] * row_ns},
        "seconds": {"poses": round(poses_s, 3), "flow": round(time.perf_counter() - t1, 3)},
    }
    return arrays, method, (m0, m1)


def _object_methods(ctx, rigid, deforming, reasons) -> list:
    """Per object of the table: how its material points move, and why its correspondence is undefined."""
    out = []
    for e in ctx.table:
        how = "mesh" if e.obj_name in deforming else "rigid" if e.obj_name in rigid else "static"
        row = {"name": e.obj_name, "render_index": e.render_index, "material_points": how,
               "correspondence": "undefined" if e.obj_name in reasons else "defined"}
        if e.obj_name in reasons:
            row["reason"] = reasons[e.obj_name]
        out.append(row)
    return out


def endpoint(root: Path, event_dir: Path, manifest: dict) -> dict:
    path = event_dir / "manifest.json"
    return {"index": manifest["event"]["index"], "sample_id": manifest["sample_id"],
            "manifest": path.relative_to(root).as_posix(), "manifest_sha256": sha256_file(path),
            "reference_time_ns": manifest["event"]["reference_time_ns"]}


def flow_manifest(*, flow_id, sensor, endpoints, calibration, modalities, method, build, lineage, run) -> dict:
    return {"schema": "rowbeam/flow@1", "flow_id": flow_id,
            "sensor": {"id": sensor.id, "type": sensor.type, "object": sensor.object},
            "endpoints": endpoints, "calibration": calibration, "conventions": CONVENTIONS,
            "flags": dict(FLAG_TEXT), "method": method, "modalities": modalities,
            "build": build, "lineage": lineage, "run": run}
