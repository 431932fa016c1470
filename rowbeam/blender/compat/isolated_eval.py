"""Evaluate a few deforming objects at many times without re-evaluating the whole scene (bpy).

`scene.frame_set` re-evaluates every animated datablock of the scene (on the running example ~2.5 ms per
time, ~200 objects). A scratch scene that links only the objects asked for has a depsgraph holding them and
what they depend on (armatures, lattices, hook targets, parents are pulled in by Blender's dependency
builder), so `frame_set` on it evaluates only those: the same evaluated meshes, bit for bit
(tests/blender/export/test_label_speed.py), ~6x cheaper. It is used only where nothing can tell the two scenes apart:
modifiers from a deterministic list (no physics, simulation or geometry nodes), no rigid body, no time
remapping; and every use is guarded at its first and last time by the whole-scene evaluation (bit-identical,
with the scene a frame away meanwhile, or it falls back to frame_set on the scene for every time).
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from rowbeam.blender.compat.scene_clock import frames_subframes, set_time

# Modifiers whose result depends only on their object, its data, their target objects and the evaluation
# time; anything else (cloth, soft body, fluid, dynamic paint, particles, geometry nodes with simulation or
# scene inputs, ...) is evaluated on the whole scene.
DETERMINISTIC_MODIFIERS = frozenset((
    "ARMATURE", "LATTICE", "CURVE", "HOOK", "MESH_DEFORM", "SURFACE_DEFORM", "LAPLACIANDEFORM", "SIMPLE_DEFORM",
    "CAST", "DISPLACE", "WAVE", "SMOOTH", "CORRECTIVE_SMOOTH", "LAPLACIANSMOOTH", "SHRINKWRAP", "WARP",
    "SUBSURF", "MULTIRES", "MIRROR", "ARRAY", "SOLIDIFY", "BEVEL", "TRIANGULATE", "EDGE_SPLIT", "WEIGHTED_NORMAL",
    "DECIMATE", "WELD", "SCREW", "SKIN", "WIREFRAME", "MASK", "VERTEX_WEIGHT_EDIT", "VERTEX_WEIGHT_MIX",
    "VERTEX_WEIGHT_PROXIMITY", "UV_PROJECT", "UV_WARP", "NORMAL_EDIT", "DATA_TRANSFER", "BOOLEAN", "REMESH"))
METHOD_ISOLATED = ("scratch scene holding only the deforming objects (and what they depend on), frame_set per "
                   "time; bit-identical to the whole scene at the first and last time (checked every run)")
METHOD_SCENE = "scene.frame_set(frame, subframe) per time"


def isolation_reason(scene, objects) -> str | None:
    """None when `objects` can be evaluated in a scratch scene, else why not."""
    if scene.render.frame_map_old != scene.render.frame_map_new:
        return "time remapping (frame_map_old/new)"
    for obj in objects:
        for mod in obj.modifiers:
            if mod.type not in DETERMINISTIC_MODIFIERS:
                return f"{obj.name}: modifier {mod.type}"
        if getattr(obj, "rigid_body", None) is not None:
            return f"{obj.name}: rigid body"
    return None


def world_vertices(obj, depsgraph) -> np.ndarray:
    """World vertices (V, 3) float64 of the evaluated object (as mesh_motion._evaluated_mesh)."""
    ev = obj.evaluated_get(depsgraph)
    mesh = ev.to_mesh()
    try:
        co = np.empty(len(mesh.vertices) * 3, np.float32)
        mesh.vertices.foreach_get("co", co)
        M = np.array(ev.matrix_world, dtype=np.float64)
    finally:
        ev.to_mesh_clear()
    return co.reshape(-1, 3).astype(np.float64) @ M[:3, :3].T + M[:3, 3]


@contextmanager
def mesh_evaluator(scene, clock, objects, guard_times=()):
    """Yields (depsgraph_at, method): depsgraph_at(t_ns) evaluates `objects` at scene time t_ns (int or exact
    Fraction) and returns a depsgraph to read them from (`obj.evaluated_get(depsgraph)`); method is the text for
    the manifest. `guard_times`: times at which the scratch scene must equal the whole scene bit for bit, else the
    whole scene is used. The scene's time is restored on exit."""
    import bpy

    frame, sub = scene.frame_current, scene.frame_subframe

    def scene_at(t):
        set_time(scene, clock, t)
        return bpy.context.evaluated_depsgraph_get()

    reason = isolation_reason(scene, objects) if objects else "no objects"
    if reason is not None:
        try:
            yield scene_at, METHOD_SCENE + f" ({reason})"
        finally:
            scene.frame_set(frame, subframe=sub)
        return
    scratch = bpy.data.scenes.new("rowbeam_isolated_eval")
    try:
        scratch.render.fps, scratch.render.fps_base = scene.render.fps, scene.render.fps_base
        scratch.frame_start, scratch.frame_end = scene.frame_start, scene.frame_end
        for obj in objects:
            scratch.collection.objects.link(obj)
        layer = scratch.view_layers[0]
        layer.depsgraph          # noqa: B018 -- builds the scratch depsgraph so frame_set evaluates it

        def scratch_at(t):
            (f,), (s,) = frames_subframes(clock, [t])       # = clock.frame_subframe(t), integer arithmetic
            scratch.frame_set(f, subframe=s)
            return layer.depsgraph

        theirs = {t: [world_vertices(o, scene_at(t)) for o in objects] for t in guard_times}
        same = True
        for t in guard_times:
            f, s = clock.frame_subframe(t)
            scene.frame_set(f + 1, subframe=s)      # the scene a frame away: a dependence on the scene's time shows
            ours = [world_vertices(o, scratch_at(t)) for o in objects]
            same = same and all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(ours, theirs[t], strict=True))
        if same:
            yield scratch_at, METHOD_ISOLATED
        else:
            yield scene_at, METHOD_SCENE + " (the scratch scene differed from the scene at a guard time)"
    finally:
        bpy.data.scenes.remove(scratch)
        scene.frame_set(frame, subframe=sub)
