"""Export the flow between two camera events of one sensor (bpy for object poses over time).

Reads both exported events (camera_z, instance_id, per-row poses), evaluates every moving
object's matrix_world at every row time of both events (scene_clock: direct where plain, else frame_set), runs
`flow_math.geometric_flow` both ways and writes a `rowbeam/flow@1` folder
flows/<sensor>/<i0>-<i1>/ next to the events.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from rowbeam.model import qa_profile
from rowbeam.bundle.reader import open_event
from rowbeam.model.camera_model import PIXEL_CONVENTION_TEXT
from rowbeam.bundle.files import sha256_file
from rowbeam.model.lens import lens_from_calibration
from rowbeam.model.modalities import FLAG_NAMES, FLAG_TEXT
from rowbeam.model.timing import RollingShutterTiming

from rowbeam.blender.flow.flow_math import EventGeometry, geometric_flow
from rowbeam.blender.flow.material_points import MissingMeshRows
from rowbeam.blender.flow.mesh_motion import (
    CONSTANT_MESH_METHOD,
    MESH_PATH_METHOD,
    constant_meshes,
    evaluate_meshes,
    mesh_from_samples,
    same_topology,
    uses_mesh_path,
)
from rowbeam.blender.compat.scene_clock import objects_world_matrices, pose_method, set_time
from rowbeam.blender.objects.instances import instance_matrices

NEEDED = ("camera_z", "instance_id", "row_T_world_camera")
# a pair's payloads, in the order of its manifest's modalities
PAYLOADS = ("flow_forward", "flow_backward", "scene_flow_world", "scene_flow_source_camera",
            *(f"flow_{direction}_{flag}" for direction in ("forward", "backward") for flag in FLAG_NAMES))
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


def load_event(event_dir: Path, names=NEEDED) -> tuple[dict, dict]:
    """(manifest, {name: array}) of an exported endpoint event, through the bundle loader (hashes verified).
    The arrays are read-only: the in-line QA of the flow is handed the same decoded arrays (rowbeam.check.runner
    `kept`), so nothing here may change them."""
    event = open_event(event_dir)
    arrays = event.arrays(names)
    for a in arrays.values():
        a.flags.writeable = False
    return event.manifest, arrays


def _object_luts(ctx, rigid, deforming, t_src, t_dst):
    """(render index -> rigid slot (-1 none), -> deforming slot (-1 none), -> undefined) and the reason per
    object name for the objects whose correspondence is undefined because they are hidden at one endpoint.
    Instances (rowbeam.blender.objects.instances): a static one is static scene geometry; a moving one is rigid
    (slots after the rigid objects', in ctx.instances.entries order: its instanced geometry moves with its matrix)."""
    instances = ctx.instances.entries if ctx.instances else []
    size = max([e.render_index for e in ctx.table] + [e.render_index for e in instances] + [0]) + 1
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
    for i, e in enumerate(e for e in instances if e.motion != "static"):
        slot[e.render_index] = len(rigid) + i
    return slot, dslot, undefined, reasons


MESH_ROW_MARGIN = 2      # rows sampled on either side of a deforming object's rows (the destination solve stays near)


def _with_margin(rows, height: int) -> set:
    """The rows within MESH_ROW_MARGIN of any of `rows`, inside [0, height)."""
    rows = np.asarray(list(rows), np.int64)
    near = (rows[:, None] + np.arange(-MESH_ROW_MARGIN, MESH_ROW_MARGIN + 1)[None]).ravel()
    return set(np.unique(near[(near >= 0) & (near < height)]).tolist())


def _initial_mesh_rows(deforming, index_of, instance_ids) -> dict:
    """{(event 0|1, deforming slot): rows to sample first}: the rows the object shows in either event (the source
    rows of one direction; the other direction's destination solve lands near them), with a margin."""
    wanted = {}
    for j, name in enumerate(deforming):
        shown = np.concatenate([np.flatnonzero((ids == index_of[name]).any(axis=1)) for ids in instance_ids])
        for e, ids in enumerate(instance_ids):
            wanted[(e, j)] = _with_margin(shown, ids.shape[0]) if shown.size else set()
    return wanted


def compute_flow_pair(ctx, src_dir: Path, dst_dir: Path, early=None) -> tuple[dict, dict, tuple]:
    """(arrays, method, ((source manifest, arrays), (destination manifest, arrays))) of the flow between two
    published camera events; the endpoint arrays are the NEEDED payloads as decoded (hash-verified, read-only).
    early: a manifest.PayloadWriter of the flow's folder: the forward direction's payloads are handed to it as
    soon as they are solved (written while the backward direction solves), withdrawn if that solve is redone."""
    t0 = time.perf_counter()
    (m0, a0), (m1, a1) = load_event(src_dir), load_event(dst_dir)
    timings = tuple(RollingShutterTiming.from_manifest(m["event"]) for m in (m0, m1))
    row_times = [[timing.row_time_exact(v) for v in range(timing.rows)] for timing in timings]
    scene = ctx.scene
    moving = [e.obj_name for e in ctx.table if e.motion == "moving"]
    deforming = [n for n in moving if uses_mesh_path(scene, scene.objects[n])]
    probe = [t[v] for t in row_times for v in sorted({0, len(t) // 2, len(t) - 1})]   # first, middle, last rows
    constant = constant_meshes(scene, ctx.clock, [scene.objects[n] for n in deforming], probe)
    deforming = [n for n in deforming if n not in constant]
    rigid = [n for n in moving if n not in deforming]
    slot, dslot, undefined, reasons = _object_luts(ctx, rigid, deforming, timings[0].reference_time_ns(),
                                                   timings[1].reference_time_ns())
    mats = [_rigid_row_matrices(ctx, rigid, times) for times in row_times]
    lenses = [lens_from_calibration(m["calibration"]) for m in (m0, m1)]
    index_of = {e.obj_name: e.render_index for e in ctx.table}
    wanted = _initial_mesh_rows(deforming, index_of, (a0["instance_id"], a1["instance_id"]))
    samples = {key: {} for key in wanted}
    tol = (qa_profile.FLOW_DEPTH_TEST_ABS_M, qa_profile.FLOW_DEPTH_TEST_REL)
    results, why, solves, flow_s, poses_s = [None, None], None, 0, 0.0, 0.0
    while True:
        t1 = time.perf_counter()
        todo = [(scene.objects[deforming[j]], (e, j, r), row_times[e][r])
                for (e, j), rows in wanted.items() for r in sorted(rows) if r not in samples[(e, j)]]
        for (e, j, r), mesh in evaluate_meshes(scene, ctx.clock, todo).items():
            samples[(e, j)][r] = mesh
        meshes = [[mesh_from_samples(samples[(e, j)], timings[e].rows, row_times[e]) for j in range(len(deforming))]
                  for e in (0, 1)]
        und, ds, now = _undefined_meshes(meshes, deforming, index_of, undefined, dslot, reasons)
        if now != why:                       # which objects are undefined changed: both directions solve again
            if early is not None and results[0] is not None:
                early.withdraw(list(_direction_arrays("forward", results[0])))
            results, why = [None, None], now
        geoms = [EventGeometry(np.array(m["calibration"]["K"]), a["camera_z"], a["instance_id"],
                               a["row_T_world_camera"], mats[e], slot, und, ds,
                               tuple(x if not isinstance(x, str) else None for x in meshes[e]), lenses[e])
                 for e, (m, a) in enumerate(((m0, a0), (m1, a1)))]
        t2 = time.perf_counter()
        poses_s += t2 - (t0 if solves == 0 else t1)
        todo_dirs = [d for d in (0, 1) if results[d] is None]
        missing = _solve_directions(geoms, results, todo_dirs, tol, early)
        solves += len(todo_dirs)
        flow_s += time.perf_counter() - t2
        if not missing:
            break
        for gap in missing:      # a destination solve reached rows not sampled yet: sample them (+- margin), solve again
            e, j = next((e, j) for e in (0, 1) for j, x in enumerate(meshes[e]) if x is gap.mesh)
            wanted[(e, j)] |= _with_margin(gap.rows, timings[e].rows)
    fwd, bwd = results
    solved = {**_direction_arrays("forward", fwd), **_direction_arrays("backward", bwd)}
    arrays = {name: solved[name] for name in PAYLOADS}
    method = _pair_method(ctx, timings, tol, rigid, deforming, constant, samples, solves, why, results,
                          (poses_s, flow_s))
    return arrays, method, ((m0, a0), (m1, a1))


def _undefined_meshes(meshes: list, deforming: list, index_of: dict, undefined: np.ndarray, dslot: np.ndarray,
                      reasons: dict) -> tuple:
    """(undefined LUT, deforming-slot LUT, {object: reason}) with every deforming object whose mesh cannot be
    followed between the two events (a sampling refusal, or a topology change) marked undefined."""
    und, ds, now = undefined.copy(), dslot.copy(), dict(reasons)
    for j, name in enumerate(deforming):
        a, b = meshes[0][j], meshes[1][j]
        reason = a if isinstance(a, str) else b if isinstance(b, str) else (
            same_topology(a, b) if a is not None and b is not None else None)
        if reason:
            now.setdefault(name, reason)
            und[index_of[name]] = 1
            ds[index_of[name]] = -1
    return und, ds, now


def _solve_directions(geoms: list, results: list, todo_dirs: list, tol: tuple, early) -> list:
    """Solve each direction in `todo_dirs` (0 forward, 1 backward) into `results`; the forward one is handed to
    `early` as soon as it is solved. Returns the MissingMeshRows of the solves that reached unsampled rows."""
    missing = []
    # one direction after the other: on two threads (numpy releases the GIL) the pair cost 26-60 % more CPU
    # (hand-offs between the solve's short, cache-sized numpy calls) and gave no wall gain at load >= 4 on 2 cores
    for d in todo_dirs:
        try:
            results[d] = geometric_flow(geoms[d], geoms[1 - d], *tol, d == 0)
        except MissingMeshRows as gap:
            missing.append(gap)
            continue
        if early is not None and d == 0:
            early.submit(_direction_arrays("forward", results[0]))
    return missing


def _pair_method(ctx, timings, tol, rigid, deforming, constant, samples, solves, reasons, results, seconds) -> dict:
    """The flow manifest's method block: definition, depth test, object poses and meshes, both directions' stats
    (row residuals also in ns of the destination's row period) and seconds (poses, flow)."""
    fwd, bwd = results
    row_ns = float(timings[1].period_ns)
    poses_s, flow_s = seconds
    return {
        "definition": DEFINITION,
        "depth_test": {"abs_m": tol[0], "rel": tol[1]},
        "object_poses": "matrix_world of every rigidly moving object at every row's exact time of both events: "
                        + pose_method(ctx.scene, [ctx.scene.objects[n] for n in rigid])
                        + ("; deforming objects' evaluated meshes by scene.frame_set with subframe" if deforming else ""),
        "deforming_objects": MESH_PATH_METHOD,
        "constant_mesh_objects": {"method": CONSTANT_MESH_METHOD, "objects": constant},
        "deforming_mesh_rows": {name: {"source": len(samples[(0, j)]), "destination": len(samples[(1, j)]),
                                       "rows": [timings[0].rows, timings[1].rows]} for j, name in enumerate(deforming)},
        "flow_solves": solves,
        "objects": _object_methods(ctx, rigid, deforming, reasons),
        "forward": {**fwd.stats, "max_row_time_residual_ns": fwd.stats["max_row_residual"] * row_ns},
        "backward": {**bwd.stats, "max_row_time_residual_ns": bwd.stats["max_row_residual"] * row_ns},
        "seconds": {"poses": round(poses_s, 3), "flow": round(flow_s, 3)},
    }


def _rigid_row_matrices(ctx, rigid: list, times: list) -> np.ndarray:
    """(rigid objects + moving instances, rows, 4, 4) world matrices at each row's time: objects by
    scene_clock.objects_world_matrices, moving instances by instances.instance_matrices (INSTANCE_MOTION_RULE)."""
    scene = ctx.scene
    out = objects_world_matrices(scene, ctx.clock, [scene.objects[n] for n in rigid], times) if rigid \
        else np.empty((0, len(times), 4, 4))
    moving = [e.render_index for e in ctx.instances.entries if e.motion != "static"] if ctx.instances else []
    if moving:
        out = np.concatenate([out, instance_matrices(scene, ctx.clock, ctx.instances, moving, times)])
    return out


def _direction_arrays(direction: str, result) -> dict:
    """{payload name: array} of one direction's FlowResult: its flow and flags (and the scene flow it holds)."""
    out = {f"flow_{direction}": result.flow}
    if result.scene_flow_world is not None:
        out.update(scene_flow_world=result.scene_flow_world, scene_flow_source_camera=result.scene_flow_source_camera)
    out.update({f"flow_{direction}_{flag}": getattr(result, flag) for flag in FLAG_NAMES})
    return out


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
