"""Object poses and deformed meshes at row times (bpy), for flow.

A moving object takes the mesh path (material points as triangle + barycentric, `material_points`) when
its surface can move relative to its matrix_world: a modifier deforms it (armature, lattice, curve, ...),
its shape keys are animated, or it has any other modifier (geometry nodes, build, remesh, ...). Its
evaluated mesh is sampled at the row times flow needs (`evaluate_meshes`), with each modifier's render
settings (show_render, render subdivision levels) so the mesh is the one Cycles renders. If the triangles
(vertex indices) differ between any two sampled times the topology changes and the correspondence is undefined.
"""
from __future__ import annotations

from contextlib import ExitStack

import numpy as np

from rowbeam.blender.flow.material_points import DeformingMesh
from rowbeam.blender.compat.scene_clock import set_time
from rowbeam.blender.compat.scene_patch import ScenePatch

MESH_PATH_METHOD = ("material point = (triangle, barycentric coordinates) of the object's evaluated mesh (render "
                    "settings, Blender's loop triangles as Cycles renders them) nearest to the source pixel's "
                    "surface point at the source row's exact time; re-evaluated as sum_k b_k V_k(t) on the mesh "
                    "evaluated (scene.frame_set with subframe) at the exact times of the other event's rows, linear "
                    "between adjacent rows. The mesh is evaluated at the rows the object shows in either event "
                    "(+- 2 rows) and at any further row a destination solve reaches (that direction is then solved "
                    "again), never interpolated; triangles and vertex count are compared over all evaluated rows "
                    "(deforming_mesh_rows: rows evaluated per event)")


def uses_mesh_path(scene, obj) -> bool:
    """The object's surface may move relative to its matrix_world (see module doc)."""
    keys = getattr(getattr(obj, "data", None), "shape_keys", None)
    return bool(obj.modifiers) or obj.is_deform_modified(scene, "RENDER") or bool(keys and keys.animation_data)


def _render_modifiers(patch: ScenePatch, objects) -> None:
    """Evaluate modifiers as the render does (the depsgraph bpy gives Python evaluates viewport settings)."""
    for obj in objects:
        for mod in obj.modifiers:
            if mod.show_viewport != mod.show_render:
                patch.set(mod, "show_viewport", mod.show_render)
            for view, render in (("levels", "render_levels"),):
                if hasattr(mod, render) and getattr(mod, view) != getattr(mod, render):
                    patch.set(mod, view, getattr(mod, render))


def _evaluated_mesh(obj, depsgraph, world: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(vertices (V, 3) float64, world metres (or object space, float32 values, with world=False), loop triangles
    (T, 3) int64) of the evaluated object."""
    ev = obj.evaluated_get(depsgraph)
    mesh = ev.to_mesh()
    try:
        mesh.calc_loop_triangles()
        co = np.empty(len(mesh.vertices) * 3, np.float32)
        mesh.vertices.foreach_get("co", co)
        tris = np.empty(len(mesh.loop_triangles) * 3, np.int32)
        mesh.loop_triangles.foreach_get("vertices", tris)
        M = np.array(ev.matrix_world, dtype=np.float64)
    finally:
        ev.to_mesh_clear()
    local = co.reshape(-1, 3).astype(np.float64)
    return (local @ M[:3, :3].T + M[:3, 3] if world else local), tris.reshape(-1, 3).astype(np.int64)


def evaluate_meshes(scene, clock, wanted) -> dict:
    """{key: (world vertices (V, 3) float64, loop triangles (T, 3) int64)} for each (obj, key, time_ns) of `wanted`:
    one frame_set per distinct time (ascending), modifiers at their render settings."""
    import bpy

    by_time = {}
    for obj, key, t in wanted:
        by_time.setdefault(t, []).append((obj, key))
    out = {}
    with ScenePatch() as patch:
        _render_modifiers(patch, list({o.name: o for o, _, _ in wanted}.values()))
        for t in sorted(by_time):
            set_time(scene, clock, t)
            depsgraph = bpy.context.evaluated_depsgraph_get()
            for obj, key in by_time[t]:
                out[key] = _evaluated_mesh(obj, depsgraph)
    return out


def mesh_from_samples(samples: dict, rows: int, times_ns) -> DeformingMesh | str | None:
    """One event's DeformingMesh from {row: (vertices, triangles)} (`evaluate_meshes`): vertices (rows, V, 3), NaN
    at rows not sampled; the reason (str) when the triangles or vertex count differ between two sampled rows
    (times_ns: the event's row times, for the reason); None when no row was sampled."""
    if not samples:
        return None
    order = sorted(samples)
    v0, f0 = samples[order[0]]
    for r in order[1:]:
        v, f = samples[r]
        if f.shape != f0.shape or len(v) != len(v0) or not np.array_equal(f, f0):
            return (f"topology changes: the evaluated mesh has {len(f0)} triangles / {len(v0)} vertices at "
                    f"t = {float(times_ns[order[0]]):.0f} ns and {len(f)} / {len(v)} at t = {float(times_ns[r]):.0f} ns")
    vertices = np.full((rows, len(v0), 3), np.nan)
    sampled = np.zeros(rows, bool)
    vertices[order] = np.stack([samples[r][0] for r in order])
    sampled[order] = True
    return DeformingMesh(vertices, f0, sampled)


CONSTANT_MESH_METHOD = ("a moving object with modifiers but no deform modifier and no animated shape keys moves "
                        "rigidly (material points fixed in its matrix_world frame) when its evaluated mesh (render "
                        "settings) is identical in object space -- every vertex position bit for bit and the loop "
                        "triangles -- at the first, middle and last row time of both events; otherwise it takes the "
                        "mesh path")


def constant_meshes(scene, clock, objects, times_ns) -> dict:
    """{name: text} of the objects (moving, on the mesh path: `uses_mesh_path`) that may move rigidly instead: no
    deform modifier (is_deform_modified) and no animated shape keys, and an evaluated mesh identical in object space
    (vertices bit for bit, triangles) at every time of times_ns (CONSTANT_MESH_METHOD)."""
    import bpy

    def shape_keys_animated(obj):
        keys = getattr(getattr(obj, "data", None), "shape_keys", None)
        return bool(keys and keys.animation_data)

    candidates = [o for o in objects if not o.is_deform_modified(scene, "RENDER") and not shape_keys_animated(o)]
    first, same = {}, {o.name: bool(times_ns) for o in candidates}
    with ScenePatch() as patch:
        _render_modifiers(patch, candidates)
        for t in times_ns if candidates else ():
            set_time(scene, clock, t)
            depsgraph = bpy.context.evaluated_depsgraph_get()
            for obj in (o for o in candidates if same[o.name]):
                v, f = _evaluated_mesh(obj, depsgraph, world=False)
                v0, f0 = first.setdefault(obj.name, (v, f))
                same[obj.name] = v.shape == v0.shape and f.shape == f0.shape and (
                    v.tobytes() == v0.tobytes() and np.array_equal(f, f0))
    return {o.name: (f"modifiers {', '.join(m.type for m in o.modifiers)}: evaluated mesh identical in object space "
                     f"at {len(times_ns)} times ({len(first[o.name][0])} vertices, {len(first[o.name][1])} triangles)")
            for o in candidates if same[o.name]}


def same_topology(a: DeformingMesh, b: DeformingMesh) -> str | None:
    """None when two samplings of one object share vertex count and triangles, else the reason they differ."""
    if a.vertices.shape[1] == b.vertices.shape[1] and np.array_equal(a.triangles, b.triangles):
        return None
    return (f"topology changes between the events: {len(a.triangles)} triangles / {a.vertices.shape[1]} vertices "
            f"at the source, {len(b.triangles)} / {b.vertices.shape[1]} at the destination")


MAX_MOTION_STEPS = 9           # 513 mesh samples per shutter
STEPS_METHOD = ("Cycles interpolates a deforming mesh linearly per vertex between 2^motion_steps + 1 samples evenly "
                "spaced over the render's shutter (measured: rendered camera_z matches the exact mesh at those "
                "times); the worst vertex error of that interpolation against the mesh evaluated exactly "
                "(scene.frame_set with subframe) is measured at the midpoints between samples (where linear "
                "interpolation of smooth motion errs most), in metres and in pixels (projected with the camera "
                "pose of the nearest row), and an object's motion_steps is raised from the sensor's until both "
                "are within the tolerance (or the cap)")


def motion_sample_times(shutter, steps: int) -> list:
    """Times (exact ns) Cycles samples a deforming mesh at: 2^steps + 1 evenly over the shutter."""
    n = 2 ** steps
    start = shutter.centre_ns - shutter.duration_ns / 2
    return [start + shutter.duration_ns * i / n for i in range(n + 1)]


def choose_deform_steps(scene, clock, objects, shutter, min_steps: int, row_times_ns, row_poses, K,
                        tol_m: float, tol_px: float) -> list[dict]:
    """Per object (deforming, visible to the render): the motion_steps chosen and the measured worst
    interpolation error (m, px) at those steps (see STEPS_METHOD). row_times_ns (H,) and row_poses (H, 4, 4)
    (T_world_camera, OpenCV) give the camera for the pixel error; K (3, 3)."""
    from rowbeam.blender.compat.isolated_eval import mesh_evaluator, world_vertices

    if not objects or not shutter.uses_motion_blur:
        return []
    row_t = np.array([float(t) for t in row_times_ns])
    cache = {}

    def sample(times):
        for t in times:
            if t in cache:
                continue
            depsgraph = depsgraph_at(t)
            cache[t] = [world_vertices(o, depsgraph) for o in objects]

    def pixels(points, t):
        T = row_poses[int(np.abs(row_t - float(t)).argmin())]
        X = (points - T[:3, 3]) @ T[:3, :3]
        z = np.where(X[:, 2] > 1e-3, X[:, 2], np.nan)
        return np.stack([K[0, 0] * X[:, 0] / z + K[0, 2], K[1, 1] * X[:, 1] / z + K[1, 2]], -1)

    out = [None] * len(objects)
    first = motion_sample_times(shutter, min_steps + 1)
    with ExitStack() as stack:
        _render_modifiers(stack.enter_context(ScenePatch()), objects)
        depsgraph_at, how = stack.enter_context(mesh_evaluator(scene, clock, objects, (first[0], first[-1])))
        for steps in range(min_steps, MAX_MOTION_STEPS + 1):
            fine = motion_sample_times(shutter, steps + 1)
            sample(fine)
            for j, obj in enumerate(objects):
                if out[j] is not None and (out[j]["within_tolerance"] or out[j].get("reason")):
                    continue
                if len({len(cache[t][j]) for t in fine}) > 1:
                    out[j] = {"name": obj.name, "motion_steps": steps, "within_tolerance": False,
                              "reason": "vertex count changes over the shutter (Cycles cannot interpolate it)"}
                    continue
                err_m = err_px = 0.0
                for i in range(1, len(fine), 2):
                    a, mid, b = cache[fine[i - 1]][j], cache[fine[i]][j], cache[fine[i + 1]][j]
                    lin = 0.5 * (a + b)
                    err_m = max(err_m, float(np.linalg.norm(mid - lin, axis=1).max(initial=0.0)))
                    d = np.linalg.norm(pixels(mid, fine[i]) - pixels(lin, fine[i]), axis=1)
                    err_px = max(err_px, float(np.nanmax(d, initial=0.0)) if np.isfinite(d).any() else 0.0)
                out[j] = {"name": obj.name, "motion_steps": steps, "motion_samples": 2 ** steps + 1,
                          "max_error_m": err_m, "max_error_px": err_px,
                          "within_tolerance": err_m <= tol_m and err_px <= tol_px, "mesh_evaluation": how}
            if all(o["within_tolerance"] or o.get("reason") for o in out):
                break
    return out
