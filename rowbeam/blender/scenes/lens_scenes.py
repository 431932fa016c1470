"""Calibration scenes for lens models (bpy): a marker board seen through a distorted rolling-shutter camera.

The seed camera (rowbeam/blender/scenes/calibration.py) at 1/scale resolution looks at a plane at camera z = `distance`
carrying a 3x3 grid of square markers (each its own object id); the rig gives the camera a `lens`.
Closed-form truth: plane, marker squares (camera frame), and, for `yaw_rate_rad_s`, the camera yawing
about world z (per-row poses). Markers centred at camera (x, y) = (+-2.5, +-1.4) m reach the image's
outer third, where distortion is largest.
"""
from __future__ import annotations

import math

import numpy as np

from rowbeam.blender.scenes import calibration, common

MARKER_HALF_M = 0.15
MARKER_XY = [(x, y) for y in (-1.4, 0.0, 1.4) for x in (-2.5, 0.0, 2.5)]
MARKER_ID0 = 0x7100
BOARD_ID = 0x7001

LENS_PRESETS = {
    # Brown-Conrady barrel with tangential terms (seed K / 4: f = 200 px at 320x180)
    "opencv": {"model": "opencv", "D": [-0.25, 0.06, 1.0e-3, -5.0e-4, 0.0]},
    # rational model, pincushion
    "opencv_rational": {"model": "opencv", "D": [0.08, -0.01, 0.0, 0.0, 0.0, 0.05, 0.0, 0.0]},
    # Kannala-Brandt fisheye with its own K (f = 110 px): the image corners lie beyond 90 deg (invalid, declared)
    "opencv_fisheye": {"model": "opencv_fisheye", "D": [-0.02, 0.01, -0.004, 0.0005],
                       "K": [[110.0, 0.0, 159.5], [0.0, 110.0, 89.5], [0.0, 0.0, 1.0]]},
    # pinhole through the lens camera with a given K equal to the Blender camera's (seed K / 4, cross-check)
    "pinhole_k": {"model": "pinhole", "D": [], "K": [[200.0, 0.0, 160.0], [0.0, 200.0, 90.0], [0.0, 0.0, 1.0]]},
}


# D-only lenses (K from the Blender camera) that `rowbeam scenes NAME --lens MODEL` gives any scene's cameras
SCENE_LENSES = {"opencv": {"model": "opencv", "D": [-0.25, 0.06, 1.0e-3, -5.0e-4, 0.0]},
                "opencv_fisheye": {"model": "opencv_fisheye", "D": [-0.02, 0.01, -0.004, 0.0005]}}


def marker_board(lens: str = "opencv", scale: int = 4, distance: float = 4.0, yaw_rate_rad_s: float = 0.0,
                 direction: str = "top_to_bottom", rgb_denoise: bool = False):
    """Markers on a plane at camera z = distance; rig lens = LENS_PRESETS[lens] (rgb denoised when asked)."""
    _, cam, T, K, size = calibration._base(scale)
    board = common.add_quad("board", 40, 40, calibration._plane_facing(T, (0, 0, distance), (0, 0, -1.0)))
    common.tag(board, BOARD_ID, "wall")
    markers = []
    for i, (x, y) in enumerate(MARKER_XY):
        centre = (x, y, distance - 0.01)        # 1 cm in front of the board
        m = common.add_quad(f"marker_{i}", MARKER_HALF_M, MARKER_HALF_M,
                            calibration._plane_facing(T, centre, (0, 0, -1.0)))
        common.tag(m, MARKER_ID0 + i, "marker")
        markers.append(centre)
    def pose(t_ns):
        return T
    if yaw_rate_rad_s:
        e0 = cam.rotation_euler.copy()
        loc = cam.location.copy()
        cam.keyframe_insert("location", frame=1)
        common.key_rotations(cam, [(1, e0), (2, (e0.x, e0.y, e0.z + yaw_rate_rad_s / calibration.FPS))])
        cam.location = loc

        def pose(t_ns):  # noqa: F811  (the yawing camera)
            a = yaw_rate_rad_s * t_ns * 1e-9
            Rz = np.array([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]])
            P = T.copy()
            P[:3, :3] = Rz @ T[:3, :3]
            return P
    truth = calibration.Truth(
        K, size, pose,
        [("board", calibration._static_plane(T, (0, 0, distance), (0, 0, -1.0))),
         ("markers", calibration._static_plane(T, (0, 0, distance - 0.01), (0, 0, -1.0)))],
        notes={"markers_camera": markers, "marker_half_m": MARKER_HALF_M, "marker_id0": MARKER_ID0,
               "board_id": BOARD_ID, "lens": LENS_PRESETS[lens], "T_world_camera": T})
    rig = common.camera_rig("camera_front", cam.name, rgb_samples=2, lens=LENS_PRESETS[lens],
                            readout_direction=direction, **({"rgb_denoise": True} if rgb_denoise else {}))
    return truth, rig


# Plates for object labels through a lens: (name, id, class, camera-frame rectangle x0, x1, y0, y1 in normalized
# coordinates, depth m). The big plate leaves the image on the right (part of it on the canvas beyond; for the
# fisheye part of it beyond the valid domain); the small one is nearer and occludes part of it.
PLATE_LAYOUT = {
    "opencv": [("plate", 0x7201, "target", (0.60, 1.10, -0.30, 0.35), 4.0),
               ("occluder", 0x7202, "target", (0.52, 0.75, -0.12, 0.08), 3.0)],
    "opencv_fisheye": [("plate", 0x7201, "target", (1.20, 40.0, -1.00, 0.80), 0.5),
                       ("occluder", 0x7202, "target", (1.00, 2.00, -0.25, 0.20), 0.4)],
}


def lens_plates(lens: str = "opencv", scale: int = 4):
    """Fronto-parallel rectangular plates at known depths (PLATE_LAYOUT[lens]) seen through LENS_PRESETS[lens],
    object labels on. truth.notes["plates"]: (name, id, (X0, X1, Y0, Y1) m in the camera frame, depth m,
    T_camera_object 4x4): the quad's local x is camera y, local y camera x, local z = -camera z."""
    _, cam, T, K, size = calibration._base(scale)
    plates = []
    for name, oid, cls, (x0, x1, y0, y1), d in PLATE_LAYOUT[lens]:
        X0, X1, Y0, Y1 = x0 * d, x1 * d, y0 * d, y1 * d
        centre = ((X0 + X1) / 2, (Y0 + Y1) / 2, d)
        M = calibration._plane_facing(np.eye(4), centre, (0, 0, -1.0))
        q = common.add_quad(name, (Y1 - Y0) / 2, (X1 - X0) / 2, T @ M)
        common.tag(q, oid, cls)
        plates.append((name, oid, (X0, X1, Y0, Y1), d, M))
    truth = calibration.Truth(K, size, lambda t: T, [],
                              notes={"plates": plates, "lens": LENS_PRESETS[lens], "T_world_camera": T})
    rig = common.camera_rig("camera_front", cam.name, rgb_samples=0, lens=LENS_PRESETS[lens], object_labels=True)
    return truth, rig


# Object labels of a deforming and of part-time-hidden objects through a lens: (name, id, camera-frame rectangle
# x0, x1, y0, y1 in normalized coordinates, depth m). "stretching": its edge x = x0 moves by STRETCH[lens] (normalized
# units) times the shape-key value, keyed linearly 0 at frame 1 -> 1 at frame 3 (linear extrapolation); "appearing":
# hide_render True from frame 1.5 to 1.9 (shown at the label render's time, hidden in the first canvas rows; shown at
# frame 1, where the object table is taken); "vanishing": shown until frame 2.1, then hidden (hidden at the label
# render's time). Event 1 (30 fps): canvas rows
# span frames ~1.70 .. 2.78, the image rows' shutter centre is frame ~2.24.
CHANGING_LAYOUT = {
    "opencv": [("stretching", 0x7301, (-0.50, -0.10, 0.10, 0.45), 3.0),
               ("appearing", 0x7302, (0.20, 0.50, -0.50, -0.20), 3.0),
               ("vanishing", 0x7303, (0.55, 0.75, 0.20, 0.40), 3.0)],
    "opencv_fisheye": [("stretching", 0x7301, (-1.00, -0.30, 0.10, 1.50), 1.0),
                       ("appearing", 0x7302, (0.20, 0.50, -0.50, -0.20), 3.0),
                       ("vanishing", 0x7303, (0.55, 0.75, 0.20, 0.40), 3.0)],
}
CHANGING_LAYOUT["pinhole"] = [               # the plain pinhole camera (no lens block): edges off pixel centres
    ("stretching", 0x7301, (0.2013, 0.4021, 0.1017, 0.5509), 3.0)] + CHANGING_LAYOUT["opencv"][1:]
STRETCH = {"opencv": -1.0, "opencv_fisheye": -6.0, "pinhole": -1.0}
SHAPE_KEY_FRAMES = (1, 3)                   # shape-key value 0 at the first frame, 1 at the second (linear)
HIDE_KEYS = {"appearing": [(1, False), (1.5, True), (1.9, False)], "vanishing": [(1, False), (2.1, True)]}  # (frame, hide)


def lens_changing_plates(lens: str = "opencv", scale: int = 4, readout_direction: str = "top_to_bottom"):
    """Fronto-parallel plates (CHANGING_LAYOUT[lens]) through LENS_PRESETS[lens] (lens "pinhole": the plain Blender
    camera, no lens), object labels on: one deformed by
    an animated shape key, two with animated hide_render. truth.notes["plates"]: (name, id, (X0, X1, Y0, Y1) m at
    shape-key value 0, depth m); notes["stretch_m"]: the stretching plate's X0 shift (m) at shape-key value 1."""
    from rowbeam.blender.compat import blender_compat

    _, cam, T, K, size = calibration._base(scale)
    plates, stretch_m = [], None
    for name, oid, (x0, x1, y0, y1), d in CHANGING_LAYOUT[lens]:
        X0, X1, Y0, Y1 = x0 * d, x1 * d, y0 * d, y1 * d
        M = calibration._plane_facing(np.eye(4), ((X0 + X1) / 2, (Y0 + Y1) / 2, d), (0, 0, -1.0))
        q = common.add_quad(name, (Y1 - Y0) / 2, (X1 - X0) / 2, T @ M)
        common.tag(q, oid, "target")
        plates.append((name, oid, (X0, X1, Y0, Y1), d))
        if name == "stretching":           # move the vertices on the camera-x = X0 edge along camera x
            q.shape_key_add(name="Basis")
            key = q.shape_key_add(name="stretch")
            key.slider_min, key.slider_max = -10.0, 10.0
            stretch_m = STRETCH[lens] * d
            shift_local = M[:3, :3].T @ np.array([stretch_m, 0.0, 0.0])
            for v, kd in zip(q.data.vertices, key.data, strict=True):
                cam_x = (M[:3, :3] @ np.array(v.co) + M[:3, 3])[0]
                if abs(cam_x - X0) < 1e-6:
                    kd.co = tuple(np.array(v.co) + shift_local)
            for frame, value in zip(SHAPE_KEY_FRAMES, (0.0, 1.0), strict=True):
                key.value = value
                key.keyframe_insert("value", frame=frame)
            for fc in blender_compat.fcurves(q.data.shape_keys):
                fc.extrapolation = "LINEAR"
                for kp in fc.keyframe_points:
                    kp.interpolation = "LINEAR"
        elif name in HIDE_KEYS:
            for f, h in HIDE_KEYS[name]:
                q.hide_render = h
                q.keyframe_insert("hide_render", frame=f)
            for fc in blender_compat.fcurves(q):
                for kp in fc.keyframe_points:
                    kp.interpolation = "CONSTANT"
    preset = {"lens": LENS_PRESETS[lens]} if lens != "pinhole" else {}      # "pinhole": the Blender camera itself
    truth = calibration.Truth(K, size, lambda t: T, [], notes={"plates": plates, "stretch_m": stretch_m,
                                                               "lens": preset.get("lens"), "T_world_camera": T})
    rig = common.camera_rig("camera_front", cam.name, rgb_samples=0, object_labels=True,
                            readout_direction=readout_direction, **preset)
    return truth, rig
