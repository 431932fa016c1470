"""Optical and scene flow on rolling-shutter events: seed fixtures, exercise 3, a rotating plate, the
rolling-shutter correction, Cycles' Vector pass convention, invariants and adapters."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rowbeam.check.runner import check_bundle
from rowbeam.adapters.flow_formats import export_flow, read_flo, read_kitti, read_pfm
from rowbeam.bundle.schema import schema_errors
from rowbeam.blender.scenes import flow_scenes

from tests.conftest import REPO, run_python
from tests.helpers import assert_fails, failures, load_event, rehash

FLAGS = ("source_valid", "dest_in_bounds", "dest_visible", "correspondence_defined")


def _flow_exports(exports, name, builder, scale):
    return exports(name, builder, scale=scale, events={"camera_front": (0, 2)})


def _flow_dir(e) -> Path:
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export

    flow = e.bundle / "flows" / "camera_front" / "000000-000001"
    if not flow.exists():
        run_export(plan_export(ExportRequest(out=e.bundle, blend=e.blend, rig=e.rig, first_event=0, count=2,
                                             flow=True)))
    return flow


def _flags(a, direction, v, u):
    return [int(a[f"flow_{direction}_{f}"][v, u]) for f in FLAGS]


@pytest.fixture(scope="module")
def seed(exports):
    e = _flow_exports(exports, "flow_seed_advance", flow_scenes.seed_advance, 1)
    return e, _flow_dir(e)


@pytest.fixture(scope="module")
def van(exports):
    e = _flow_exports(exports, "flow_passing_van", flow_scenes.passing_van, 1)
    return e, _flow_dir(e)


def test_seed_camera_advancing_half_a_metre(seed):
    """Worked flow example: (1,-1,8) seen at (740, 260); the camera advances 0.5 m -> (746.67, 253.33): flow (6.67, -6.67)."""
    _, flow = seed
    m, a = load_event(flow)
    assert a["flow_forward"][260, 740] == pytest.approx([20 / 3, -20 / 3], abs=1e-3)
    assert _flags(a, "forward", 260, 740) == [1, 1, 1, 1]
    # static marker: no scene flow; backward flow at the destination pixel points back
    assert a["scene_flow_world"][260, 740] == pytest.approx([0, 0, 0], abs=1e-6)
    # backward, on the destination grid: (747, 253) sees the marker at z = 7.5 -> back at z = 8
    x = (747 - 640) / 800 * 7.5
    assert a["flow_backward"][253, 747] == pytest.approx([640 + 100 * x - 747, 360 - 100 * x - 253], abs=1e-3)
    assert m["endpoints"]["source"]["index"] == 0 and m["endpoints"]["destination"]["index"] == 1


def test_inline_qa_equals_a_check_from_disk(van):
    """The in-line QA of a flow is handed the endpoint arrays its solve decoded (hash-verified, read-only); a check
    that reads every payload from disk again reports exactly the same results and values."""
    from rowbeam.check.runner import check_path

    e, flow = van
    inline = json.loads((flow / "qa_report.json").read_text())["checks"]
    fresh = check_path(flow / "manifest.json", flow, e.bundle).results
    assert inline and json.loads(json.dumps(fresh)) == inline


def test_endpoint_arrays_only_the_check_reads_are_decoded_ahead_or_left_to_the_check(van, tmp_path):
    """The flow export decodes the endpoints' ENDPOINT_NEEDS beyond the solve's on a worker (rowbeam.blender.export.run
    _check_only_arrays): the arrays the check would read, hash-verified; nothing when one cannot be read (a
    changed file), so the check reads it and reports it."""
    from rowbeam.bundle.reader import read_payload
    from rowbeam.blender.export.run import _check_only_arrays

    e, _ = van
    event = e.bundle / "events" / "camera_front" / "000000"
    m = json.loads((event / "manifest.json").read_text())
    ahead = _check_only_arrays(event)
    assert sorted(ahead) == ["normal_geometric", "valid"]
    for name, a in ahead.items():
        assert not a.flags.writeable
        assert np.array_equal(a, read_payload(event, m["modalities"][name], e.bundle), equal_nan=True)
    changed = tmp_path / "000000"
    shutil.copytree(event, changed)
    (changed / m["modalities"]["valid"]["uri"]).write_bytes(b"changed")
    assert _check_only_arrays(changed) == {}


def test_exercise_3_covered_destination(van):
    """Exercise 3: (300, 200) -> (315, 194) under a passing van: flow (15, -6) defined, in bounds, not visible."""
    _, flow = van
    m, a = load_event(flow)
    assert a["flow_forward"][200, 300] == pytest.approx([15.0, -6.0], abs=1e-3)
    assert _flags(a, "forward", 200, 300) == [1, 1, 0, 1]
    assert _flags(a, "forward", 400, 600) == [1, 1, 1, 1]               # uncovered wall point
    assert a["scene_flow_world"][200, 300] == pytest.approx([0.0, -0.15, 0.06], abs=1e-5)  # 4.5, -1.8 m/s in camera x, y
    assert a["scene_flow_source_camera"][200, 300] == pytest.approx([0.15, -0.06, 0.0], abs=1e-5)
    # backward flow is defined on the destination grid: the van's front face (z = 3.95 m) moved 0.9 m right
    assert a["flow_backward"][194, 315] == pytest.approx([-0.9 * 800 / 3.95, 0.0], abs=1e-3)
    assert m["flags"]["dest_visible"].startswith("the moved point wins")


def test_flow_bundle_passes_all_invariants(van):
    e, _ = van
    report, failed = failures(e.bundle)
    assert not failed, failed
    names = {c["check"] for ev in report["events"] for c in ev["checks"]}
    assert {"flow_forward_flags", "flow_backward_flags", "flow_matches_scene_flow", "flow_depth_warp",
            "flow_cycle_consistency", "scene_flow_frames", "endpoint:source"} <= names


def test_rotating_plate_matches_an_independent_solution(exports):
    """Plate spinning at 3 rad/s about its normal, rolling shutter: compare with a separate solver."""
    e = _flow_exports(exports, "flow_rotating_plate", flow_scenes.rotating_plate, 4)
    m, a = load_event(_flow_dir(e))
    _rotating_plate_errors(e, a)


def test_object_with_a_modifier_that_does_not_deform_moves_rigidly(exports):
    """The same spinning plate with a Subdivision Surface modifier (SIMPLE: the evaluated mesh is constant in object
    space): it takes the rigid path, declared, and its flow matches the separate solver as without the modifier."""
    e = _flow_exports(exports, "flow_rotating_plate_subdivided", lambda scale: flow_scenes.rotating_plate(
        scale=scale, simple_subdivision=True), 4)
    m, a = load_event(_flow_dir(e))
    plate = next(o for o in m["method"]["objects"] if o["name"] == "plate")
    assert plate["material_points"] == "rigid", plate
    assert "SUBSURF" in m["method"]["constant_mesh_objects"]["objects"]["plate"]
    assert "deforming_pixels" not in m["method"]["forward"]
    _rotating_plate_errors(e, a)


def _rotating_plate_errors(e, a):
    """Worst |flow - separate solver| (px) at four plate pixels (at least 3 defined), asserted within 2e-3 px."""
    truth = e.truth
    K, c, w = truth["K"], truth["centre_camera"], truth["rate"]
    src, dst = (load_event(e.bundle / "events" / "camera_front" / f"{i:06d}")[1]["row_time_ns"] for i in (0, 1))
    checked, worst = 0, 0.0
    for (u, v) in [(100, 60), (120, 80), (90, 95), (130, 50)]:
        if not a["flow_forward_correspondence_defined"][v, u]:
            continue
        ts = src[v] * 1e-9
        X = np.array([(u - K[0, 2]) / K[0, 0] * 8.0, (v - K[1, 2]) / K[1, 1] * 8.0, 8.0])

        def rot(angle, p):
            ca, sa = np.cos(angle), np.sin(angle)
            d = p - c
            return c + np.array([ca * d[0] - sa * d[1], sa * d[0] + ca * d[1], d[2]])
        # camera z axis points away from the camera; the plate spins about +z_world = -y_camera? derive from truth:
        # the rotation axis is the camera +z (plate normal); Blender positive angle = counter-clockwise about it
        X0 = rot(-w * ts, X)                               # material point at angle 0
        vd = float(v)
        for _ in range(50):
            td = (dst[0] + (dst[-1] - dst[0]) * vd / (len(dst) - 1)) * 1e-9
            Y = rot(w * td, X0)
            ud, vn = K[0, 0] * Y[0] / Y[2] + K[0, 2], K[1, 1] * Y[1] / Y[2] + K[1, 2]
            if abs(vn - vd) < 1e-9:
                break
            vd = vn
        assert a["flow_forward"][v, u] == pytest.approx([ud - u, vn - v], abs=2e-3), (u, v)
        worst = max(worst, float(np.abs(a["flow_forward"][v, u] - [ud - u, vn - v]).max()))
        checked += 1
    assert checked >= 3
    print(f"rotating plate ({e.bundle.name}): worst flow error vs separate solver {worst:.3g} px over {checked} pixels")
    return worst


def test_rolling_shutter_flow_differs_from_global_shutter_by_the_known_amount(exports):
    """Plate moving down at 10 m/s, z = 8, f = 200 px: image speed w = 250 px/s, row period r = 12 ms/180.
    The destination lands later in the readout: flow_v = w T / (1 - w r) = 8.4746 px vs w T = 8.3333 px."""
    e = _flow_exports(exports, "flow_plate_down", flow_scenes.plate_moving_down, 4)
    m, a = load_event(_flow_dir(e))
    t0, t1 = (load_event(e.bundle / "events" / "camera_front" / f"{i:06d}")[1]["row_time_ns"][0] for i in (0, 1))
    w, r, T = 250.0, 12e-3 / 180, (t1 - t0) * 1e-9
    rolling, global_ = w * T / (1 - w * r), w * T
    # beyond the last row centre a destination takes the edge row's time (declared): compare inside it
    H = a["flow_forward"].shape[0]
    rows = np.arange(H)[:, None] + a["flow_forward"][..., 1]
    inside = (a["flow_forward_dest_in_bounds"] == 1) & (rows <= H - 1)
    fv = a["flow_forward"][..., 1][inside]
    assert inside.sum() > 0.9 * inside.size
    assert np.abs(fv - rolling).max() < 1e-3
    assert abs(rolling - global_) > 0.14
    assert np.abs(a["flow_forward"][..., 0][inside]).max() < 1e-4
    assert m["method"]["forward"]["max_row_residual"] < 1e-6


def test_cycles_vector_pass_convention(exports):
    """Cycles' Vector pass on a global-shutter pair: (Z, W) = -(forward flow) in y-up pixels, i.e.
    forward (u, v) = (-Z, +W); (X, Y) = motion to the previous frame, backward (u, v) = (X, -Y)."""
    import bpy

    from rowbeam.blender.cycles import cycles_setup as cs
    from rowbeam.blender.compat.scene_patch import ScenePatch

    e = _flow_exports(exports, "flow_van_small", flow_scenes.passing_van, 4)
    _, a = load_event(_flow_dir(e))
    bpy.ops.wm.open_mainfile(filepath=str(e.blend), use_scripts=False)
    scene = bpy.context.scene
    vectors = {}
    for frame in (1, 2):
        with ScenePatch() as p:
            cs.common_settings(p, scene)
            cs.label_settings(p, scene, scene.view_layers[0])
            p.set(scene.view_layers[0], "use_pass_vector", True)
            p.set(scene.render, "use_motion_blur", False)
            scene.frame_set(frame)
            vectors[frame] = cs.render_passes(scene, scene.view_layers[0])["vector"]
    fwd, bwd = a["flow_forward"], a["flow_backward"]
    ok_f = a["flow_forward_correspondence_defined"] == 1
    ok_b = a["flow_backward_correspondence_defined"] == 1
    vec1, vec2 = vectors[1], vectors[2]
    assert np.abs(fwd[..., 0] + vec1[..., 2])[ok_f].max() < 1e-3
    assert np.abs(fwd[..., 1] - vec1[..., 3])[ok_f].max() < 1e-3
    assert np.abs(bwd[..., 0] - vec2[..., 0])[ok_b].max() < 1e-3
    assert np.abs(bwd[..., 1] + vec2[..., 1])[ok_b].max() < 1e-3
    # and the Vector pass has no occlusion information: it is non-zero where dest_visible is 0
    hidden = ok_f & (a["flow_forward_dest_visible"] == 0)
    assert hidden.any() and np.abs(vec1[..., 2][hidden]).min() > 1.0


def test_checker_catches_flow_faults(van, tmp_path):
    e, _ = van
    root = tmp_path / "b"
    shutil.copytree(e.bundle, root)
    flow = root / "flows" / "camera_front" / "000000-000001"
    from rowbeam.bundle.arrays import write_exr

    _, a = load_event(flow)
    f = a["flow_forward"].copy()
    f[400, 600, 0] += 0.5
    write_exr(flow / "flow_forward.exr", f, ["u", "v"], "float32")
    rehash(flow, "flow_forward")
    assert_fails(root, "flow_matches_scene_flow", "projects up to")
    vis = a["flow_forward_dest_visible"].copy()
    vis[200, 300] = 1                                 # claims the covered point is visible
    write_exr(flow / "flow_forward_dest_visible.exr", vis, ["flow_forward_dest_visible"], "uint8")
    rehash(flow, "flow_forward_dest_visible")
    assert_fails(root, "flow_depth_warp", "disagrees with the moved point's z")
    # an endpoint event changed after the flow was made
    ev = root / "events" / "camera_front" / "000001" / "manifest.json"
    ev.write_text(ev.read_text().replace('"sample_id"', '"sample_id" ', 1))
    assert_fails(root, "endpoint:destination", "changed since the flow was made")


def test_adapters_round_trip_and_record_losses(van, tmp_path):
    """Every adapter file is read back by OpenCV, not by our own readers, so a row-order, W/H or channel
    mistake shared by our writer and reader fails. cv2 4.11 conventions: readOpticalFlow -> (H, W, 2)
    float32 (u, v), row 0 at the top; imread(PFM) -> (H, W, 3) float32 with rows turned top-first and
    channels in BGR order, i.e. (0, v, u); imread(16-bit PNG) -> (H, W, 3) uint16 BGR, i.e. (valid, v, u)."""
    import cv2

    _, flow = van
    _, a = load_event(flow)
    fwd = a["flow_forward"]
    vis = a["flow_forward_dest_visible"] == 1
    defined = a["flow_forward_correspondence_defined"] == 1
    assert fwd.shape[0] != fwd.shape[1] and vis.any() and (~vis).any()   # a W/H swap or flip cannot hide
    side = export_flow(flow, "flo", tmp_path / "f.flo", "valid")
    back = cv2.readOpticalFlow(str(tmp_path / "f.flo"))
    assert back.shape == fwd.shape and back.dtype == np.float32
    assert np.array_equal(back[vis], fwd[vis]) and np.all(back[~vis] == np.float32(1e10))
    assert side["max_rounding_error_px"] == float(np.abs(back[vis] - fwd[vis]).max())
    assert side["pixels_written_known"] == int(vis.sum()) and not schema_errors(side, "rowbeam/adapter_sidecar@1")
    assert np.array_equal(read_flo(tmp_path / "f.flo"), back)              # our reader agrees with OpenCV
    export_flow(flow, "flo", tmp_path / "g.flo", "geometric")
    geo = cv2.readOpticalFlow(str(tmp_path / "g.flo"))
    assert np.array_equal(geo[defined], fwd[defined]) and np.all(geo[~defined] == np.float32(1e10))
    side = export_flow(flow, "kitti", tmp_path / "k.png", "occ")
    bgr = cv2.imread(str(tmp_path / "k.png"), cv2.IMREAD_UNCHANGED)
    assert bgr.shape == fwd.shape[:2] + (3,) and bgr.dtype == np.uint16
    kf = (bgr[..., [2, 1]].astype(np.float64) - 2**15) / 64
    assert np.array_equal(bgr[..., 0] == 1, defined) and not bgr[..., 0][~defined].any()
    err = np.abs(kf[defined] - fwd[defined]).max()
    assert err <= 1 / 128 and side["max_rounding_error_px"] == pytest.approx(err, abs=1e-6)
    ours, ours_valid = read_kitti(tmp_path / "k.png")
    assert np.array_equal(ours, kf) and np.array_equal(ours_valid, defined)
    assert any("1/64 px" in x for x in side["lost"])
    side = export_flow(flow, "pfm", tmp_path / "f.pfm")
    pfm = cv2.imread(str(tmp_path / "f.pfm"), cv2.IMREAD_UNCHANGED)
    assert pfm.shape == fwd.shape[:2] + (3,) and pfm.dtype == np.float32
    uv = pfm[..., [2, 1]]
    assert np.array_equal(uv[defined], fwd[defined]) and np.isnan(uv[~defined]).all() and not pfm[..., 0].any()
    assert side["max_rounding_error_px"] == float(np.abs(uv[defined] - fwd[defined]).max())
    assert np.array_equal(read_pfm(tmp_path / "f.pfm"), pfm[..., ::-1], equal_nan=True)
    sidecar = json.loads((tmp_path / "f.pfm.json").read_text())
    assert sidecar["channels"][:2] == ["u (right)", "v (down)"]


def test_kitti_png_is_readable_by_an_independent_decoder(van, tmp_path):
    """Blender's own PNG loader reads the 16-bit PNG we write (no hand-made format)."""
    import bpy

    _, flow = van
    export_flow(flow, "kitti", tmp_path / "k.png", "noc")
    ours, _ = read_kitti(tmp_path / "k.png")
    img = bpy.data.images.load(str(tmp_path / "k.png"))
    img.colorspace_settings.name = "Non-Color"
    px = np.array(img.pixels[:], dtype=np.float64).reshape(img.size[1], img.size[0], 4)[::-1]
    theirs = (np.rint(px[..., :2] * 65535) - 2**15) / 64
    valid = px[..., 2] > 0
    assert np.abs(theirs[valid] - ours[valid]).max() < 1e-9


def test_kitti_refuses_flow_beyond_512_px(tmp_path, van):
    _, flow = van
    r = run_python("-m", "rowbeam", "adapt", "kitti", flow, tmp_path / "x.png", "--direction", "backward",
                   "--variant", "occ")
    assert r.returncode == 0, r.stderr                       # the van's 180 px backward flow fits
    from rowbeam.util.errors import RowbeamError
    from rowbeam.adapters.flow_formats import write_kitti

    big = np.zeros((4, 4, 2), np.float32)
    big[1, 2] = (600.0, 3.0)
    with pytest.raises(RowbeamError, match=r"refusing rather than clamping"):
        write_kitti(tmp_path / "y.png", big, np.ones((4, 4), bool))
    assert not (tmp_path / "y.png").exists()


def test_flow_pair_cli_errors(tmp_path):
    from rowbeam.blender.scenes import common

    _, rig = flow_scenes.plate_moving_down(scale=16)
    blend = common.save(tmp_path / "p.blend", rig)
    r = run_python(REPO / "render_export.py", blend, "--rig", blend.with_suffix(".rig.json"), "--out", tmp_path / "o",
                   "--flow-pairs", "0-1")
    assert r.returncode == 2 and "--flow-pairs: '0-1' is not SOURCE:DESTINATION" in r.stderr
    r = run_python(REPO / "render_export.py", blend, "--rig", blend.with_suffix(".rig.json"), "--out", tmp_path / "o",
                   "--flow-pairs", "3:1", "--count", "0")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o" / "flows" / "camera_front" / "000003-000001" / "manifest.json").is_file()
    assert check_bundle(tmp_path / "o")["status"] == "pass"
