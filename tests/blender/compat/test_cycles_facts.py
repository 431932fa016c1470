"""Measured Cycles behaviour the exporter is designed around (bpy 5.0.1, CPU). If a Blender
upgrade changes one of these, this file says which design decision to revisit."""
from __future__ import annotations

import bpy
import numpy as np
import pytest

from rowbeam.model.frames import apply, invert_rigid
from rowbeam.model.timing import SceneClock
from rowbeam.blender.cycles import cycles_setup as cs
from rowbeam.blender.compat.scene_patch import ScenePatch
from rowbeam.blender.scenes import calibration, common


def _render(scene, row=None, **settings):
    view_layer = scene.view_layers[0]
    with ScenePatch() as p:
        cs.common_settings(p, scene)
        cs.label_settings(p, scene, view_layer)
        if row is not None:
            cs.set_row_border(p, scene, row, scene.render.resolution_y)
        for key, value in settings.items():
            owner, attr = key.split("__")
            p.set(scene.render if owner == "render" else scene.cycles, attr, value)
        return cs.render_passes(scene, view_layer)


def test_native_rolling_shutter_is_half_a_row_late():
    """Row r of H is traced at shutter_open + D*(r+1)/H, not (r+0.5)/H: rowbeam shifts the shutter."""
    truth, _ = calibration.moving_plane(scale=16, speed=-300.0, z0=20.0)   # 10 m per frame
    scene = bpy.context.scene
    scene.frame_set(1)
    passes = _render(scene, render__use_motion_blur=True, render__motion_blur_position="START",
                     render__motion_blur_shutter=1.0, cycles__rolling_shutter_type="TOP",
                     cycles__rolling_shutter_duration=0.0)
    H = passes["depth"].shape[0]
    cam_z = passes["depth"][:, passes["depth"].shape[1] // 2].astype(np.float64)  # static camera: Z is exact
    t_frames = (20.0 - cam_z) / 10.0
    assert t_frames * H == pytest.approx(np.arange(1, H + 1), abs=2e-3)


def test_background_depth_and_position():
    common.new_scene(16, 8)
    common.add_camera("cam", np.eye(4), 10.0, 7.5, 3.5, 16, 8)
    passes = _render(bpy.context.scene)
    assert passes["depth"].shape == (8, 16) and passes["position"].shape == (8, 16, 3)
    assert np.all(passes["depth"] == np.float32(1e10))
    assert np.all(passes["index"] == 0)
    # no hit: Position and Normal are exactly zero (not a point at infinity), so only depth/index mark validity
    assert np.all(passes["position"] == 0) and np.all(passes["normal"] == 0)


def test_back_face_normals_are_flipped_toward_the_viewer():
    _, cam, T, _, _ = calibration._base(16)
    quad = common.add_quad("back", 30, 30, calibration._plane_facing(T, (0, 0, 8.0), (0, 0, 1.0)))  # faces away
    common.tag(quad, 1, "wall")
    with ScenePatch() as p:
        cs.add_true_normal_aov(p, [quad])
        passes = _render(bpy.context.scene)
    toward_camera = -T[:3, 2]                       # world direction from the plane to the camera
    for key in ("normal", "true_normal"):
        n = passes[key].reshape(-1, 3)
        assert np.abs(n - toward_camera).max() < 1e-5, key


def test_border_edges_half_a_row_inside_select_exactly_one_row():
    """Exact edges (row/H) select the wrong row or none for e.g. rows 219-223 of 720 (float32 truncation)."""
    common.new_scene(4, 720)
    T = calibration.seed_pose()
    common.add_camera("cam", T, 800.0, 1.5, 359.5, 4, 720)
    common.add_quad("tilt", 50, 50, calibration._plane_facing(T, (0, 0, 9.0), (0, 0.4, -1.0)))
    scene = bpy.context.scene
    full = _render(scene)["position"]
    for row in (0, 219, 220, 222, 223, 360, 719):
        one = _render(scene, row=row)["position"]
        assert one.shape == (1, 4, 3) and np.array_equal(one[0], full[row]), row


def test_depth_pass_uses_the_frame_centre_camera():
    """With a moving camera, Cycles' Z pass measures from the shutter-centre camera, so rowbeam
    derives camera_z from the Position pass and its own per-row pose."""
    truth, _ = calibration.ego_forward(scale=16, speed=30.0, distance=12.0)   # 1 m per frame
    scene = bpy.context.scene
    clock = SceneClock(30, 1.0, 1)
    scene.frame_set(1)
    passes = _render(scene, render__use_motion_blur=True, render__motion_blur_position="START",
                     render__motion_blur_shutter=1.0, cycles__rolling_shutter_type="TOP",
                     cycles__rolling_shutter_duration=0.0)
    z = passes["depth"].astype(np.float64)
    H, W = z.shape
    centre_time = float(clock.ns_of(1, 0.5))
    frame_centre_z = 12.0 - 30.0 * centre_time * 1e-9
    # first row was traced at t = 1/H frame: its true camera_z is ~12 - 1/H, yet Z reads the centre camera's
    u, t_row = float(W // 2), float(clock.ns_of(1, 1.0 / H))
    first_row_truth = float(truth.camera_z(np.array([u]), np.array([0.0]), t_row)[0])
    assert abs(z[0, W // 2] - frame_centre_z) < 1e-3
    assert abs(z[0, W // 2] - first_row_truth) > 0.4
    # the Position pass holds the row's hit point: seen from the camera pose at the row's own time it gives
    # the true camera_z (what rowbeam derives)
    P = passes["position"][0, W // 2].astype(np.float64)
    z_from_position = apply(invert_rigid(truth.camera_pose(t_row)), P)[2]
    assert abs(z_from_position - first_row_truth) < 1e-3
