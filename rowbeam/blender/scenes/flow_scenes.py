"""Scenes for flow fixtures (bpy): the seed's advancing camera, exercise 3's passing van, a rotating
plate, and a plate moving down a rolling-shutter image. Cameras use the seed K / `scale`."""
from __future__ import annotations


import numpy as np

from rowbeam.model.frames import apply

from rowbeam.blender.scenes import calibration, common

FPS = calibration.FPS


def _global_shutter_rig(cam_name: str) -> dict:
    return common.camera_rig("camera_front", cam_name, readout_ns=0, exposure_ns=0, rgb_samples=0, verify_rows=2)


def seed_advance(scale: int = 1):
    """The worked flow example: a global-shutter camera advancing 0.5 m per event (15 m/s) toward the marker at
    camera (1, -1, 8): flow at (740, 260) is (6.67, -6.67) px."""
    truth, _ = calibration.marker(scale=scale)
    import bpy

    cam = bpy.data.objects["camera_front"]
    T = calibration.seed_pose()
    loc0 = np.array(cam.matrix_world.translation)
    common.key_locations(cam, [(1, tuple(loc0)), (2, tuple(loc0 + T[:3, 2] * 15.0 / FPS))])
    return truth, _global_shutter_rig(cam.name)


def passing_van(scale: int = 1):
    """Exercise 3: a wall at z = 8 drifting (4.5, -1.8) m/s in the camera frame -> flow (15, -6) px per
    event at full resolution; a van (box, front face 0.5 x 0.5 m at z ~ 4) crosses the view at 27 m/s:
    its face spans u ~ 100..200 in event 0 and ~ 280..380 in event 1, covering the destination
    (315, 194) of the wall point seen at (300, 200) in event 0."""
    _, cam, T, K, _ = calibration._base(scale)
    wall = common.add_quad("wall", 30, 30, calibration._plane_facing(T, (0, 0, 8.0), (0, 0, -1.0)))
    common.tag(wall, 0x8001, "wall")
    w0 = np.array(wall.matrix_world.translation)
    drift = T[:3, :3] @ np.array([4.5, -1.8, 0.0])
    common.key_locations(wall, [(1, tuple(w0)), (2, tuple(w0 + drift / FPS))])
    f, cx, cy = K[0, 0], K[0, 2], K[1, 2]
    z = 4.0
    centre0 = apply(T, [(150 / scale - cx) * z / f, (200 / scale - cy) * z / f, z])
    step = T[:3, :3] @ np.array([0.9, 0.0, 0.0])              # 27 m/s along camera x
    # world-axis-aligned box: 0.1 m deep (world x = camera z), 0.5 m wide (camera x), 0.5 m tall (camera y)
    van = common.add_box("van", (0.1, 0.5, 0.5), tuple(centre0))
    common.key_locations(van, [(1, tuple(centre0)), (2, tuple(centre0 + step))])
    common.tag(van, 0x8002, "van")
    return None, _global_shutter_rig(cam.name)


def rotating_plate(scale: int = 4, rate_rad_s: float = 3.0, simple_subdivision: bool = False):
    """A plate facing the camera at z = 8, spinning at `rate_rad_s` about its normal through camera
    (0.5, 0.2, 8); rolling-shutter camera. Returns (plate centre in camera, rate). simple_subdivision: the plate
    carries a Subdivision Surface modifier (SIMPLE, 2 levels: same flat square, 16 quads), which does not deform."""
    _, cam, T, K, size = calibration._base(scale)
    plate = common.add_quad("plate", 3.0, 3.0, calibration._plane_facing(T, (0.5, 0.2, 8.0), (0, 0, -1.0)))
    common.tag(plate, 0x8101, "target")
    if simple_subdivision:
        mod = plate.modifiers.new("subdivide", "SUBSURF")
        mod.subdivision_type, mod.levels, mod.render_levels = "SIMPLE", 2, 2
    plate.rotation_mode = "QUATERNION"
    q0 = plate.rotation_quaternion.copy()
    axis = T[:3, :3] @ np.array([0, 0, 1.0])
    from mathutils import Quaternion
    for frame in (1, 2):
        angle = rate_rad_s * (frame - 1) / FPS
        plate.rotation_quaternion = Quaternion(axis.tolist(), angle) @ q0
        plate.keyframe_insert("rotation_quaternion", frame=frame)
    common._linear_extrapolation(plate)
    truth = {"centre_camera": np.array([0.5, 0.2, 8.0]), "rate": rate_rad_s, "K": K, "T": T}
    return truth, common.camera_rig("camera_front", cam.name, rgb_samples=0, verify_rows=2)


def plate_moving_down(scale: int = 4, speed: float = 10.0):
    """A fronto-parallel plate at z = 8 moving +y (down the image) at `speed` m/s; static rolling-shutter camera."""
    _, cam, T, K, size = calibration._base(scale)
    plate = common.add_quad("plate", 30, 30, calibration._plane_facing(T, (0, 0, 8.0), (0, 0, -1.0)))
    common.tag(plate, 0x8201, "target")
    p0 = np.array(plate.matrix_world.translation)
    common.key_locations(plate, [(1, tuple(p0)), (2, tuple(p0 + T[:3, 1] * speed / FPS))])
    truth = {"speed": speed, "z": 8.0, "K": K}
    return truth, common.camera_rig("camera_front", cam.name, rgb_samples=0, verify_rows=2)
