"""Display-referred 8-bit view of a camera event's RGB (bpy): the scene-linear RGB through the scene's own colour
management (view transform, look, exposure, gamma, curves, display device), exactly as Blender saves a render to
an 8-bit PNG, with dithering off. Formats whose tools show images (COCO, BOP, KITTI) get it as PNG; the bundle keeps
the float RGB and this 8-bit view beside it (`rgb_display`)."""
from __future__ import annotations

import os
import tempfile

import numpy as np

from rowbeam.blender.compat.scene_patch import ScenePatch

METHOD = ("the rgb payload (scene linear) saved by Blender as an 8-bit RGB PNG through the scene's colour management "
          "(bpy Image.save_render with the scene's view settings; dither 0), read back: sRGB-encoded display values "
          "0..255, row 0 = top")


def display_settings(scene) -> dict:
    """The scene's colour management that makes the display image (declared in the manifest)."""
    v, d = scene.view_settings, scene.display_settings
    return {"view_transform": v.view_transform, "look": v.look, "exposure_stops": float(v.exposure),
            "gamma": float(v.gamma), "use_curve_mapping": bool(v.use_curve_mapping),
            "display_device": d.display_device, "method": METHOD}


def display_rgb8(scene, rgb: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 display image of scene-linear rgb (H, W, 3) (row 0 = top) under the scene's colour management."""
    import bpy

    from rowbeam.blender.compat import blender_compat

    H, W = rgb.shape[:2]
    src = bpy.data.images.new("rowbeam_rgb_display", W, H, alpha=False, float_buffer=True)
    fd, path = tempfile.mkstemp(prefix="rowbeam_display_", suffix=".png")
    os.close(fd)
    back = None
    try:
        px = np.ones((H, W, 4), np.float32)
        px[..., :3] = np.nan_to_num(np.asarray(rgb, np.float32)[::-1])      # Blender images: bottom row first
        src.pixels.foreach_set(px.ravel())
        with ScenePatch() as p:
            settings = scene.render.image_settings
            if blender_compat.HAS_MEDIA_TYPE:
                p.set(settings, "media_type", "IMAGE")
            p.set(settings, "file_format", "PNG")
            p.set(settings, "color_mode", "RGB")
            p.set(settings, "color_depth", "8")
            p.set(scene.render, "dither_intensity", 0.0)
            src.save_render(path, scene=scene)
        back = bpy.data.images.load(path)
        got = np.empty(W * H * back.channels, np.float32)
        back.pixels.foreach_get(got)
        got = got.reshape(H, W, back.channels)[::-1, :, :3]
        return np.rint(got * 255.0).astype(np.uint8)
    finally:
        bpy.data.images.remove(src)
        if back is not None:
            bpy.data.images.remove(back)
        os.unlink(path)
