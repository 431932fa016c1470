"""The camera Cycles renders through for a rolling-shutter sensor, and the passes it renders put back in sensor
order (rows top to bottom as the sensor reads them)."""
from __future__ import annotations

import math

import numpy as np

from rowbeam.blender.compat.scene_patch import ScenePatch


def use_render_camera(patch: ScenePatch, scene, cam_obj, direction: str):
    """Make the camera Cycles renders through active; return it.

    For bottom_to_top readout this is a child camera rolled 180 deg about the optical axis
    (shifts negated), so Cycles' top-first rows are the sensor's first rows; images rendered
    through it are flipped back with `unflip`.
    """
    import bpy

    if direction == "top_to_bottom":
        patch.set(scene, "camera", cam_obj)
        return cam_obj
    data = cam_obj.data.copy()
    data.shift_x, data.shift_y = -cam_obj.data.shift_x, -cam_obj.data.shift_y
    flipped = bpy.data.objects.new("rowbeam_flipped_camera", data)
    scene.collection.objects.link(flipped)
    flipped.parent = cam_obj
    flipped.matrix_parent_inverse.identity()
    flipped.rotation_euler = (0.0, 0.0, math.pi)

    def remove():
        bpy.data.objects.remove(flipped)
        bpy.data.cameras.remove(data)
    patch.on_restore(remove)
    patch.set(scene, "camera", flipped)
    return flipped


def unflip(passes: dict, direction: str) -> dict:
    if direction == "top_to_bottom":
        return passes
    return {k: np.ascontiguousarray(v[::-1, ::-1]) for k, v in passes.items()}
