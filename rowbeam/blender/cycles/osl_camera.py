"""Custom (OSL) cameras: compile a generated camera shader with Cycles and make it the scene camera (bpy).

Used by the spinning LiDAR (rowbeam/blender/sensors/lidar_osl.py) and the lens camera (rowbeam/blender/cycles/lens_camera.py).
Cycles' camera space for a custom camera is the camera object's Blender-local frame with z negated
(measured with the LiDAR: x, y as local, z = -local z); raster y runs from 0 at the bottom. Custom cameras
need Blender >= 4.5 (blender_compat.CUSTOM_CAMERA_SINCE) and, on a GPU, OptiX.
"""
from __future__ import annotations

import hashlib
import os
import tempfile


CLIP_M = (1e-6, 1e7)      # the custom camera's clip_start / clip_end (m): rays from (almost) the camera centre

def compile_osl(source: str) -> tuple[str, str]:
    """(bytecode, md5) of OSL source, compiled by Cycles' own compiler."""
    import _cycles  # available once bpy is imported

    with tempfile.TemporaryDirectory(prefix="rowbeam_osl_") as d:
        src, out = os.path.join(d, "camera.osl"), os.path.join(d, "camera.oso")
        with open(src, "w") as f:
            f.write(source)
        if not _cycles.osl_compile(src, out):
            raise RuntimeError("Cycles could not compile a generated camera shader")
        with open(out) as f:
            bytecode = f.read()
    return bytecode, hashlib.md5(bytecode.encode(), usedforsecurity=False).hexdigest()


def make_custom_camera(patch, scene, parent, source: str, name: str):
    """A custom (OSL) camera parented to `parent` with identity local axes (parent's scale removed); made the
    scene camera; removed when `patch` restores."""
    import bpy
    from mathutils import Matrix

    from rowbeam.blender.compat.blender_compat import ensure_oslquery_importable

    ensure_oslquery_importable()
    bytecode, digest = compile_osl(source)
    text = bpy.data.texts.new(f"{name}.osl")
    text.write(source)
    data = bpy.data.cameras.new(name)
    data.type = "CUSTOM"
    data.custom_mode = "INTERNAL"
    data.custom_shader = text
    data.custom_bytecode = bytecode
    data.custom_bytecode_hash = digest
    data.clip_start, data.clip_end = CLIP_M          # range limits are applied to the labels, not the rays
    obj = bpy.data.objects.new(name, data)
    scene.collection.objects.link(obj)
    obj.parent = parent
    sx, sy, sz = parent.matrix_world.to_scale()
    obj.matrix_parent_inverse = Matrix.Diagonal((1.0 / sx, 1.0 / sy, 1.0 / sz, 1.0))   # rigid render camera
    obj.matrix_basis = Matrix.Identity(4)

    def remove():
        bpy.data.objects.remove(obj)
        bpy.data.cameras.remove(data)
        bpy.data.texts.remove(text)
    patch.on_restore(remove)
    patch.set(scene, "camera", obj)
    return obj


def custom_camera_device(patch, scene, device: str) -> str:
    """Cycles runs custom (OSL) cameras on the GPU only with OptiX; other GPU backends fall back to the CPU.
    Returns the device description to record."""
    if device.startswith("GPU:") and not device.startswith("GPU:OPTIX"):
        patch.set(scene.cycles, "device", "CPU")
        return f"CPU (custom OSL camera; {device} has no OSL support)"
    return device
