"""The triangle mesh of an evaluated Blender object (or instance), as numpy arrays (bpy)."""
from __future__ import annotations

import numpy as np


def triangles_of(ob):
    """(vertices (V,3) local, triangles (F,3)) of an evaluated object (or instance), None without mesh geometry."""
    try:
        me = ob.to_mesh()
    except RuntimeError:
        return None
    if me is None:
        return None
    try:
        me.calc_loop_triangles()
        V = np.empty(len(me.vertices) * 3)
        me.vertices.foreach_get("co", V)
        F = np.empty(len(me.loop_triangles) * 3, dtype=np.int32)
        me.loop_triangles.foreach_get("vertices", F)
    finally:
        ob.to_mesh_clear()
    if len(F) == 0:
        return None
    return V.reshape(-1, 3), F.reshape(-1, 3)
