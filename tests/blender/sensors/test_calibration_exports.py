"""Exported calibration scenes against closed-form truth (real Cycles renders via bpy)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from rowbeam.model.camera_model import pixel_grid, project, range_factor
from rowbeam.check.runner import check_bundle
from rowbeam.model.frames import apply, invert_rigid
from rowbeam.blender.scenes import calibration

from tests.helpers import load_event

Z_TOL = 1e-4        # m, the per-row tolerance; float32 positions near 20 m carry ~2e-6
N_TOL = 1e-5


def _truth_z(truth, t_rows, plane=0):
    W, H = truth.size
    u, v = pixel_grid(W, H)
    return np.stack([truth.camera_z(u[i], v[i], t_rows[i], plane) for i in range(H)])


def _check_passes(exported):
    report = check_bundle(exported.bundle)
    assert report["status"] == "pass", [c for e in report["events"] for c in e["checks"] if c["status"] != "pass"]


def test_fronto_plane(exports):
    e = exports("fronto_plane", calibration.fronto_plane, scale=4)
    m, a = load_event(e.event)
    W, H = e.truth.size
    assert a["valid"].all()
    assert np.abs(a["camera_z"] - 8.0).max() < Z_TOL
    u, v = pixel_grid(W, H)
    assert np.abs(a["range"] - 8.0 * range_factor(e.truth.K, u, v)).max() < Z_TOL
    # corner pixel: range and camera_z differ by 14 cm; calling one the other fails the tolerance
    assert a["range"][0, 0] - a["camera_z"][0, 0] > 0.1
    for name in ("normal_geometric", "normal_shading"):
        assert np.abs(a[name] - np.array([0, 0, -1.0])).max() < N_TOL
    assert np.abs(np.array(m["calibration"]["K"]) - e.truth.K).max() < 1e-4   # Blender stores lens/shift as float32
    (obj,) = m["objects"]
    assert obj["id"] == 0x1001 and obj["id_source"] == "object_property" and obj["class_id"] == 3
    assert np.all(a["instance_id"] == obj["render_index"]) and np.all(a["semantic_id"] == 3)
    assert a["rgb"].shape == (H, W, 3) and np.isfinite(a["rgb"]).all()
    _check_passes(e)


def test_marker_lands_on_the_seed_pixel(exports):
    """Seed: camera point (1,-1,8) -> pixel (740, 260), camera_z 8, range sqrt(66), at 1280x720."""
    e = exports("marker_seed", calibration.marker, scale=1)
    m, a = load_event(e.event)
    by_id = {o["id"]: o for o in m["objects"]}
    marker = by_id[e.truth.notes["marker_id"]]
    assert marker["class_id"] == 9                       # calibration_target in the street ontology
    rows, cols = np.nonzero(a["instance_id"] == marker["render_index"])
    assert (cols.mean(), rows.mean()) == (740.0, 260.0)    # centroid exactly on the pixel centre
    assert (cols.min(), cols.max(), rows.min(), rows.max()) == (736, 744, 256, 264)
    assert a["camera_z"][260, 740] == pytest.approx(8.0, abs=Z_TOL)
    assert a["range"][260, 740] == pytest.approx(math.sqrt(66), abs=Z_TOL)
    assert np.all(a["semantic_id"][rows, cols] == 9)
    # world round trip through the exported pose: pixel + camera_z -> world (18, 1, 2)
    T_camera_world = np.array(m["calibration"]["T_camera_world"]["matrix"])
    X_c = np.array([(740 - 640) / 800 * 8, (260 - 360) / 800 * 8, 8.0])
    assert apply(invert_rigid(T_camera_world), X_c) == pytest.approx([18, 1, 2], abs=1e-5)  # float32 matrix_world
    _check_passes(e)


def test_marker_with_vertical_fit_shift_and_non_square_pixels(exports, tmp_path):
    """An off-centre, shifted, non-square-pixel camera: the marker lands where K says."""
    def builder(scale):
        import bpy
        truth, rig = calibration.marker(scale=scale)
        cam = bpy.data.objects["camera_front"]
        cam.data.sensor_fit, cam.data.sensor_height = "VERTICAL", 14.0
        cam.data.shift_x, cam.data.shift_y = 0.07, -0.04
        bpy.context.scene.render.pixel_aspect_x = 1.5
        return truth, rig
    e = exports("marker_exotic", builder, scale=4)
    m, a = load_event(e.event)
    K = np.array(m["calibration"]["K"])
    assert K[0, 0] != K[1, 1]                     # non-square pixels reached K
    marker = next(o for o in m["objects"] if o["id"] == e.truth.notes["marker_id"])
    rows, cols = np.nonzero(a["instance_id"] == marker["render_index"])
    # exact footprint: pixel centres strictly inside the projected square
    h = e.truth.notes["marker_half_size_m"]
    (u0, v0), _ = project(K, [1.0 - h, -1.0 - h, 8.0])
    (u1, v1), _ = project(K, [1.0 + h, -1.0 + h, 8.0])
    assert (cols.min(), cols.max()) == (math.ceil(u0), math.floor(u1))
    assert (rows.min(), rows.max()) == (math.ceil(v0), math.floor(v1))
    # a half-pixel convention error would move the footprint by one pixel on at least one side
    shifted = (math.ceil(u0 + 0.5), math.floor(u1 + 0.5), math.ceil(v0 + 0.5), math.floor(v1 + 0.5))
    assert shifted != (cols.min(), cols.max(), rows.min(), rows.max()), (u0, u1, v0, v1)
    hit = a["instance_id"] == marker["render_index"]
    assert np.abs(a["camera_z"][hit] - 8.0).max() < Z_TOL
    _check_passes(e)


def test_tilted_plane_off_axis_depth_range_and_normals(exports):
    e = exports("tilted_plane", calibration.tilted_plane, scale=4)
    m, a = load_event(e.event)
    t = a["row_time_ns"]
    z = _truth_z(e.truth, t)
    W, H = e.truth.size
    u, v = pixel_grid(W, H)
    assert a["valid"].all()
    assert np.abs(a["camera_z"] - z).max() < Z_TOL
    assert np.abs(a["range"] - z * range_factor(e.truth.K, u, v)).max() < Z_TOL
    n = e.truth.normal_camera(0)
    assert n[2] < 0
    for name in ("normal_geometric", "normal_shading"):
        assert np.abs(a[name] - n).max() < N_TOL
    _check_passes(e)


@pytest.mark.parametrize("direction", ["top_to_bottom", "bottom_to_top"])
def test_moving_plane_camera_z_per_row_at_row_time(exports, direction):
    """Plane approaching at 40 m/s: every row's camera_z equals z0 + v*t_row within 1e-4 m."""
    e = exports(f"moving_plane_{direction}", calibration.moving_plane, scale=8, direction=direction)
    m, a = load_event(e.event)
    t = a["row_time_ns"]
    expected = _truth_z(e.truth, t)
    err = np.abs(a["camera_z"] - expected)
    assert a["valid"].all() and err.max() < Z_TOL
    rows = m["event"]["rows"]
    if direction == "top_to_bottom":
        assert np.all(np.diff(t) > 0)
    else:
        assert np.all(np.diff(t) < 0)
    # Wrong time models are visibly wrong: Cycles' native (r+1)/H time is half a row (2.7 mm) off,
    # the frame-start time ~8-56 cm off.
    readout = m["event"]["readout_ns"]
    half_row = readout / rows / 2
    shifted = _truth_z(e.truth, t + half_row)
    assert np.abs(shifted - a["camera_z"]).min() > 1e-3
    frame_start = _truth_z(e.truth, np.full_like(t, m["event"]["frame_start_ns"]))
    assert np.abs(frame_start - a["camera_z"]).min() > 0.05
    ver = m["method"]["verification"]
    assert ver["rows_checked"] == 3 and ver["worst_range_error_m"] < Z_TOL and ver["worst_silhouette_error_px"] == 0
    _check_passes(e)


def test_ego_forward_uses_the_row_pose_not_the_frame_centre(exports):
    """Camera advancing at 10 m/s toward a wall 12 m ahead: camera_z(row) = 12 - 10*t_row."""
    e = exports("ego_forward", calibration.ego_forward, scale=8)
    m, a = load_event(e.event)
    t = a["row_time_ns"]
    expected = 12.0 - 10.0 * t * 1e-9
    assert np.abs(a["camera_z"] - expected[:, None]).max() < Z_TOL
    # row poses are the analytic poses; the reference pose is at the event's reference time
    for i in (0, len(t) // 2, len(t) - 1):
        assert np.abs(a["row_T_world_camera"][i] - e.truth.camera_pose(t[i])).max() < 1e-6
    ref = m["calibration"]["T_camera_world"]
    assert np.abs(np.array(ref["matrix"]) - invert_rigid(e.truth.camera_pose(ref["time_ns"]))).max() < 1e-6
    # a frame-centre camera (what Cycles' Z pass uses) is off by up to 6 cm at the first/last rows
    centre = 12.0 - 10.0 * m["event"]["reference_time_ns"] * 1e-9
    assert abs(centre - expected[0]) > 0.05
    _check_passes(e)


def test_ego_yaw_rotates_labels_per_row(exports):
    """Camera yawing at 3 rad/s: per-row rotation changes both camera_z and the camera-frame normal."""
    e = exports("ego_yaw", calibration.ego_yaw, scale=8)
    m, a = load_event(e.event)
    t = a["row_time_ns"]
    assert np.abs(a["camera_z"] - _truth_z(e.truth, t)).max() < Z_TOL
    normals = np.stack([e.truth.normal_camera(ti) for ti in t])
    assert np.abs(a["normal_geometric"] - normals[:, None, :]).max() < N_TOL
    # the normal really rotates across the readout (3 rad/s * 12 ms = 2 degrees)
    assert np.degrees(np.arccos(np.clip(normals[0] @ normals[-1], -1, 1))) > 1.9
    _check_passes(e)
