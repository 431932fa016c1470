"""Object poses and deformed meshes at row times (bpy), for flow.

A moving object takes the mesh path (material points as triangle + barycentric, `material_points`) when
its surface can move relative to its matrix_world: a modifier deforms it (armature, lattice, curve, ...),
its shape keys are animated, or it has any other modifier (geometry nodes, build, remesh, ...). Its
evaluated mesh is sampled at every row time, with each modifier's render settings (show_render, render
subdivision levels) so the mesh is the one Cycles renders. If the triangles (vertex indices) differ
between any two sampled times the topology changes and the correspondence is undefined.
"""
from __future__ import annotations

import numpy as np

from .material_points import DeformingMesh
from .scene_clock import objects_world_matrices, set_time
from .scene_patch import ScenePatch

MESH_PATH_METHOD = ("material point = (triangle, barycentric coordinates) of the object's evaluated mesh (render "
                    "settings, Blender's loop triangles as Cycles renders them) nearest to the source pixel's "
                    "surface point at the source row's exact time; re-evaluated as sum_k b_k V_k(t) on the mesh "
                    "evaluated (scene.frame_set with subframe) at every row's exact time of the other event, linear "
                    "between adjacent rows")


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


def _evaluated_mesh(obj, depsgraph) -> tuple[np.ndarray, np.ndarray]:
    """(world vertices (V, 3) float64, loop triangles (T, 3) int64) of the evaluated object."""
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
    return local @ M[:3, :3].T + M[:3, 3], tris.reshape(-1, 3).astype(np.int64)


def sample_rows(scene, clock, rigid, deforming, times_ns):
    """One frame_set per time: (matrix_world of each `rigid` object (R, N, 4, 4), and per `deforming` object
    either a DeformingMesh (vertices (N, V, 3)) or the reason its topology is not constant (str)). Without
    deforming objects the matrices come from scene_clock.objects_world_matrices (direct where plain, identical)."""
    import bpy

    if not deforming:
        return objects_world_matrices(scene, clock, rigid, times_ns), []

    mats = np.empty((len(rigid), len(times_ns), 4, 4))
    verts = [[] for _ in deforming]
    tris = [None] * len(deforming)
    changed = [None] * len(deforming)
    with ScenePatch() as patch:
        _render_modifiers(patch, deforming)
        for i, t in enumerate(times_ns):
            set_time(scene, clock, t)
            for j, obj in enumerate(rigid):
                mats[j, i] = np.array(obj.matrix_world, dtype=np.float64)
            if not deforming:
                continue
            depsgraph = bpy.context.evaluated_depsgraph_get()
            for j, obj in enumerate(deforming):
                if changed[j]:
                    continue
                v, f = _evaluated_mesh(obj, depsgraph)
                if tris[j] is None:
                    tris[j] = f
                elif f.shape != tris[j].shape or not np.array_equal(f, tris[j]) or len(v) != len(verts[j][0]):
                    changed[j] = (f"topology changes: the evaluated mesh has {len(tris[j])} triangles / "
                                  f"{len(verts[j][0])} vertices at t = {float(times_ns[0]):.0f} ns and "
                                  f"{len(f)} / {len(v)} at t = {float(t):.0f} ns")
                    continue
                verts[j].append(v)
    meshes = [changed[j] or DeformingMesh(np.stack(verts[j]), tris[j]) for j in range(len(deforming))]
    return mats, meshes


def same_topology(a: DeformingMesh, b: DeformingMesh) -> str | None:
    """None when two samplings of one object share vertex count and triangles, else the reason they differ."""
    if a.vertices.shape[1] == b.vertices.shape[1] and np.array_equal(a.triangles, b.triangles):
        return None
    return (f"topology changes between the events: {len(a.triangles)} triangles / {a.vertices.shape[1]} vertices "
            f"at the source, {len(b.triangles)} / {b.vertices.shape[1]} at the destination")
