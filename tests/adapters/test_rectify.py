"""`rowbeam adapt rectify` (rowbeam/adapters/rectify.py) against OpenCV and closed forms.

Oracles: cv2.getOptimalNewCameraMatrix / cv2.fisheye.estimateNewCameraMatrixForUndistortRectify for the --alpha
intrinsics; cv2.initUndistortRectifyMap + cv2.remap(INTER_NEAREST) for every nearest-neighbour pixel; the marker
board's plane and the yawing camera's poses (rowbeam/blender/scenes/lens_scenes.py) with OpenCV rays for camera_z and flow.
"""
from __future__ import annotations

import json

import cv2  # the OpenCV oracle: requirements.txt; a missing cv2 is an error, never a skip
import numpy as np
import pytest

from rowbeam.adapters.rectify import RectMap, opencv_alpha_K, rectified_K
from rowbeam.util.errors import RowbeamError
from rowbeam.model.lens import LensSpec, make_lens


W, H = 640, 480
K = np.array([[520.0, 0.0, 322.25], [0.0, 515.5, 236.75], [0.0, 0.0, 1.0]])
LENSES = {      # strong barrel (cv2's 5-iteration undistortPoints has not converged), mild rational, fisheye
    "opencv5": ("opencv", K, (-0.28, 0.071, 1.3e-3, -8e-4, -0.012)),
    "opencv8_rational": ("opencv", K, (0.08, -0.01, 2e-4, -1e-4, 0.0, 0.05, 0.0, 0.0)),
    "fisheye": ("opencv_fisheye", np.array([[300.0, 0.0, 318.5], [0.0, 290.0, 241.5], [0.0, 0.0, 1.0]]),
                (-0.013, 0.021, -0.006, 0.0011)),
}
SIZES = [(W, H), (800, 450)]


def _lens(name):
    model, k, d = LENSES[name]
    return make_lens(LensSpec(model, d), k, W, H, where=name)


def _cv_grid(lens, iterate: bool):
    """OpenCV's undistorted normalized coordinates of the 9x9 grid getOptimalNewCameraMatrix samples: its own
    undistortPoints (5 iterations, as inside getOptimalNewCameraMatrix) or iterated to convergence."""
    g = np.arange(9.0)
    u, v = np.meshgrid(g * (lens.width - 1) / 8, g * (lens.height - 1) / 8)
    pts = np.stack([u.ravel(), v.ravel()], -1)[:, None, :]
    if iterate:
        crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 300, 1e-15)
        xy = cv2.undistortPointsIter(pts, lens.K, np.array(lens.D), None, None, crit)
    else:
        xy = cv2.undistortPoints(pts, lens.K, np.array(lens.D))
    xy = xy.reshape(9, 9, 2)
    return xy[..., 0], xy[..., 1]


@pytest.mark.parametrize("name", ["opencv5", "opencv8_rational"])
@pytest.mark.parametrize("alpha", [0.0, 0.35, 1.0])
@pytest.mark.parametrize("size", SIZES)
def test_alpha_K_matches_getOptimalNewCameraMatrix(name, alpha, size):
    """Our alpha rule on OpenCV's own undistorted grid reproduces cv2.getOptimalNewCameraMatrix to 1e-6 px; our K
    (converged unprojection) equals that rule on OpenCV's converged grid, and equals cv2's K outright where cv2's
    5 undistortPoints iterations have converged (the mild rational lens)."""
    lens = _lens(name)
    ref, _ = cv2.getOptimalNewCameraMatrix(lens.K, np.array(lens.D), (W, H), alpha, size)
    assert np.abs(opencv_alpha_K(*_cv_grid(lens, False), alpha, size) - ref).max() < 1e-6
    ours = rectified_K(lens, alpha, size)
    assert np.abs(ours - opencv_alpha_K(*_cv_grid(lens, True), alpha, size)).max() < 1e-6
    diff = float(np.abs(ours - ref).max())
    if name == "opencv8_rational":
        assert diff < 1e-6, diff
    else:
        assert 1e-3 < diff < 2.0, diff      # cv2's K carries its unconverged undistortPoints (5 iterations)
    print(f"{name} alpha {alpha} size {size}: |K - cv2.getOptimalNewCameraMatrix| = {diff:.3g} px")


@pytest.mark.parametrize("balance", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("size", SIZES)
def test_alpha_K_matches_fisheye_estimateNewCameraMatrix(balance, size):
    """Fisheye: --alpha is cv2.fisheye.estimateNewCameraMatrixForUndistortRectify's balance (fx != fy lens)."""
    lens = _lens("fisheye")
    ref = cv2.fisheye.estimateNewCameraMatrixForUndistortRectify(lens.K, np.array(lens.D), (W, H), np.eye(3),
                                                                 balance=balance, new_size=size)
    ours = rectified_K(lens, balance, size)
    assert np.abs(ours - ref).max() < 1e-6, np.abs(ours - ref).max()


def test_alpha_semantics():
    """alpha 0: every rectified pixel has a source pixel; alpha 1: every source pixel centre lies in the rectified
    image (opencv lenses, measured on the full grids, independent of OpenCV's 9x9 sampling)."""
    for name in ("opencv5", "opencv8_rational"):
        lens = _lens(name)
        m0 = RectMap(lens, rectified_K(lens, 0.0, (W, H)), (W, H))
        assert m0.inside.all(), (name, int((~m0.inside).sum()))
        m1 = RectMap(lens, rectified_K(lens, 1.0, (W, H)), (W, H))
        v, u = np.mgrid[0:H, 0:W].astype(np.float64)
        ur, vr = m1.rectify_positions(u, v)
        assert ((ur >= -0.5) & (ur < W - 0.5) & (vr >= -0.5) & (vr < H - 0.5)).all(), name
        assert not m1.inside.all()          # and the wider view has pixels without a source


def test_alpha_refused_outside_the_fisheye_domain():
    """A fisheye whose edge midpoint lies beyond 90 deg has no OpenCV balance K: one line naming the pixel."""
    lens = make_lens(LensSpec("opencv_fisheye", (-0.013, 0.021, -0.006, 0.0011)),
                     np.array([[190.0, 0.0, 318.5], [0.0, 190.0, 241.5], [0.0, 0.0, 1.0]]), W, H)
    with pytest.raises(RowbeamError, match=r"--alpha: source pixel \(640, 240\) .* outside the opencv_fisheye lens's "
                                           r"valid domain; give --K"):
        rectified_K(lens, 1.0, (W, H))


# ----- renders (tests/model/test_lenses.py fixtures, 320x180) ------------------------------------------------------

def _board(exports, lens, **kw):
    from tests.model.test_lenses import _board as board

    return board(exports, lens, **kw)


def _rectify(bundle, out, *args) -> dict:
    from rowbeam.cli import main

    assert main(["adapt", "rectify", str(bundle), str(out), *args]) == 0
    return json.loads((out / "rowbeam_adapter_sidecar.json").read_text())


def _read(folder, name, entry=None):
    """An output array (.npy, or .exr decoded with the bundle entry's channels and dtype)."""
    from rowbeam.bundle.arrays import decode_exr, read_exr_channels

    if (folder / f"{name}.npy").exists():
        return np.load(folder / f"{name}.npy")
    if entry is None:
        ch, _ = read_exr_channels(folder / f"{name}.exr")
        return np.stack([ch["u"], ch["v"]], -1) if "u" in ch else ch[name]
    return decode_exr(folder / f"{name}.exr", entry["channels"], entry["dtype"])


def _cv_maps(lens, K_rect, size):
    if lens.model == "opencv_fisheye":
        return cv2.fisheye.initUndistortRectifyMap(lens.K, np.array(lens.D), np.eye(3), K_rect, size, cv2.CV_32FC1)
    return cv2.initUndistortRectifyMap(lens.K, np.array(lens.D), None, K_rect, size, cv2.CV_32FC1)


def _remap(a, maps):
    a = np.asarray(a)
    src = a.astype(np.float64) if a.dtype.kind in "ui" else a
    out = cv2.remap(src, maps[0], maps[1], cv2.INTER_NEAREST, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    return out.astype(a.dtype) if a.dtype.kind in "ui" else out


@pytest.mark.parametrize("lens_name, alpha", [("opencv", "0"), ("opencv_rational", "1"), ("opencv_fisheye", "0.5")])
def test_nearest_view_equals_cv2_remap(exports, tmp_path, lens_name, alpha):
    """--interpolation nearest: ids, camera_z, range, normals and valid equal cv2.initUndistortRectifyMap + cv2.remap
    (INTER_NEAREST) at every pixel (0 mismatches); EXR outputs carry the bundle's channels and dtypes; object boxes
    equal the boxes of the remapped ids; the BOP depth PNG holds camera_z; rgb keeps its scene-linear values."""
    from rowbeam.adapters.objects import mask_box
    from rowbeam.adapters.rectify import LOST

    from tests.helpers import load_event
    from tests.model.test_lenses import _cv_project_lens, _event_lens

    e = _board(exports, lens_name)
    m, a = load_event(e.event)
    lens = _event_lens(m)
    side = _rectify(e.bundle, tmp_path / "r", "--alpha", alpha, "--interpolation", "nearest", "--png")
    cam = side["pinhole"]["camera_front"]
    K_rect, size = np.array(cam["K"]), tuple(cam["image_size_px"])
    assert cam["alpha"] == float(alpha) and side["lost"] == LOST and side["events"][0]["mixed_id_pixels"] > 0
    folder = tmp_path / "r" / "camera_front" / e.event.name
    maps = _cv_maps(lens, K_rect, size)
    # cv2's maps are float32: where a map coordinate lies within 1e-4 px of a rounding tie (x.5) its nearest pixel is
    # float32 noise; there the oracle is cv2.projectPoints in float64 (the source pixel we chose must be its nearest)
    tie = (np.abs(maps[0] % 1 - 0.5) < 1e-4) | (np.abs(maps[1] % 1 - 0.5) < 1e-4)
    vt, ut = np.nonzero(tie)
    rays = np.linalg.solve(K_rect, np.stack([ut, vt, np.ones(len(ut))]).astype(np.float64)).T
    q = _cv_project_lens(lens, rays)
    cols, rows = np.load(folder / "source_col.npy")[tie], np.load(folder / "source_row.npy")[tie]
    has = cols >= 0                                 # -1: invalid (no surface or no source)
    assert has.sum() > 5 and np.array_equal(cols[has], np.rint(q[has, 0])) and np.array_equal(rows[has], np.rint(q[has, 1]))
    mism = {}
    for name in ("instance_id", "semantic_id", "valid", "camera_z", "range", "normal_geometric", "normal_shading"):
        entry = m["modalities"][name]
        got = _read(folder, name, entry)
        assert got.dtype == a[name].dtype and got.shape[:2] == (size[1], size[0])
        ref = _remap(a[name], maps)
        if name not in ("instance_id", "semantic_id", "valid"):
            ref = np.where((_remap(a["valid"], maps) == 1)[(...,) + (None,) * (ref.ndim - 2)], ref, np.nan)
        same = (got == ref) | (np.isnan(got) & np.isnan(ref)) if got.dtype.kind == "f" else got == ref
        mism[name] = int((~same.reshape(same.shape[:2] + (-1,)).all(-1) & ~tie).sum())
    assert not any(mism.values()), mism
    valid = _read(folder, "valid", m["modalities"]["valid"]) == 1
    assert 0.3 < valid.mean() and (valid.all() if lens_name == "opencv" else not valid.all())
    # camera_z is the source camera frame's z: the board (4 m) and markers (3.99 m) are fronto-parallel
    z = _read(folder, "camera_z", m["modalities"]["camera_z"])
    assert np.minimum(np.abs(z - 3.99), np.abs(z - 4.0))[valid].max() < 1e-5
    # objects: boxes of the rectified modal masks == boxes of OpenCV's remapped ids
    ids = _remap(a["instance_id"], maps)
    objects = json.loads((folder / "objects.json").read_text())["objects"]
    assert {o["render_index"] for o in objects} == set(np.unique(ids).tolist()) - {0}
    for o in objects:
        x0, y0, x1, y1 = mask_box(ids == o["render_index"])
        assert o["bbox_visib"] == [x0, y0, x1 - x0 + 1, y1 - y0 + 1]
        assert o["px_count_visib"] == int((ids == o["render_index"]).sum())
    # BOP 16-bit depth PNG
    depth = _read_png16_grey(folder / "depth.png")
    scale = side["png"]["depth_scale_mm"][f"camera_front/{e.event.name}"]
    assert np.array_equal(depth, np.where(valid, np.rint(np.nan_to_num(z.astype(np.float64)) * 1000 / scale), 0))
    # rgb (nearest): the source's scene-linear values, 0 where a pixel has no source
    rgb = _read(folder, "rgb", m["modalities"]["rgb"])
    assert rgb.dtype == np.float32 and np.array_equal(rgb[~tie], _remap(a["rgb"], maps)[~tie])
    print(f"rectify {lens_name} alpha {alpha}: 0 mismatches vs cv2.remap over {size[0]}x{size[1]} px ({int(tie.sum())} "
          f"float32 map ties judged by cv2.projectPoints); valid "
          f"{valid.mean():.3f}; K' f = {K_rect[0, 0]:.3f}")


def _read_png16_grey(path):
    import struct
    import zlib

    data = path.read_bytes()
    w, h, depth, colour = struct.unpack(">IIBB", data[16:26])
    assert depth == 16 and colour == 0
    pos, idat = 8, b""
    while pos < len(data):
        length = struct.unpack(">I", data[pos:pos + 4])[0]
        if data[pos + 4:pos + 8] == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + 2 * w)
    assert not rows[:, 0].any()
    return np.frombuffer(rows[:, 1:].tobytes(), ">u2").reshape(h, w).astype(np.float64)


def _flow_export(exports):
    """The yawing (3 rad/s) opencv-lens board, events 0 and 1 with their flow (tests/model/test_lenses.py's export)."""
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export

    from tests.model.test_lenses import _board_builder

    e = exports("lens_board_opencv_flow", _board_builder(), lens="opencv", yaw_rate_rad_s=3.0,
                events={"camera_front": (0, 2)})
    if not (e.bundle / "flows" / "camera_front" / "000000-000001" / "manifest.json").exists():
        run_export(plan_export(ExportRequest(out=e.bundle, blend=e.blend, rig=e.rig, first_event=0, count=2,
                                             flow=True)))
    return e


def _closed_form_destination(e, lens, P, t_dst, H_):
    """Distorted pixel where world point P lands in the destination event (fixed point over its row times,
    OpenCV projection)."""
    from tests.model.test_lenses import _cv_project_lens

    vd = float(H_) / 2
    for _ in range(60):
        r0 = min(int(np.floor(np.clip(vd, 0, H_ - 1))), H_ - 2)
        f = np.clip(vd, 0, H_ - 1) - r0
        T = e.truth.camera_pose(int(round(t_dst[r0] + f * (t_dst[r0 + 1] - t_dst[r0]))))
        X = T[:3, :3].T @ (P - T[:3, 3])
        ud, vn = _cv_project_lens(lens, X[None])[0]
        if abs(vn - vd) < 1e-10:
            break
        vd = vn
    return ud, vn


def test_rectified_flow_and_camera_z_closed_form(exports, tmp_path):
    """Yawing camera, opencv lens, flow 0 -> 1 rectified with --alpha 0: at sampled board pixels the flow's start
    is K' (OpenCV ray of the source pixel) and start + flow is where the board point seen by that source pixel
    (OpenCV ray at its row's pose) lands in the destination event (row solve through OpenCV's projection),
    rectified with K': both within 1e-4 px, forward and backward. camera_z (nearest) is that point's z in the source
    camera frame and range its distance (1e-4 m); camera_z (bilinear) is the plane's z on the rectified pixel's
    own ray (tilted plane: z varies) at a time between its two source rows' (1e-5 m). The KITTI PNG holds the
    rectified flow to 1/128 px."""
    from rowbeam.adapters.flow_formats import read_kitti

    from tests.helpers import load_event
    from tests.model.test_lenses import _cv_project_lens, _cv_rays, _event_lens

    e = _flow_export(exports)
    out_n = tmp_path / "n"
    side = _rectify(e.bundle, out_n, "--alpha", "0", "--interpolation", "nearest", "--png")
    side_b = _rectify(e.bundle, tmp_path / "b", "--alpha", "0", "--format", "npy")
    assert side["flows"] and side["flows"][0]["folder"] == "camera_front/000000-000001"
    K_rect = np.array(side["pinhole"]["camera_front"]["K"])
    assert np.array_equal(K_rect, np.array(side_b["pinhole"]["camera_front"]["K"]))
    ev = [load_event(e.bundle / "events" / "camera_front" / f"{i:06d}") for i in (0, 1)]
    lens = _event_lens(ev[0][0])
    board = next(o["render_index"] for o in ev[0][0]["objects"] if o["id"] == e.truth.notes["board_id"])
    n_w, dist = e.truth.planes[0][1](0)
    fdir = out_n / "camera_front" / "000000-000001"
    fm = json.loads((e.bundle / "flows" / "camera_front" / "000000-000001" / "manifest.json").read_text())
    worst = {"start": 0.0, "dest": 0.0, "z_nearest": 0.0, "range": 0.0, "z_bilinear": 0.0, "kitti": 0.0}
    checked, spread = 0, 0.0
    for direction, (i_src, i_dst) in (("forward", (0, 1)), ("backward", (1, 0))):
        (m_s, a_s), (_, a_d) = ev[i_src], ev[i_dst]
        folder = out_n / "camera_front" / f"{i_src:06d}"
        flow = _read(fdir, f"flow_{direction}")
        start = _read(fdir, f"flow_{direction}_start")
        defined = _read(fdir, f"flow_{direction}_correspondence_defined",
                        fm["modalities"][f"flow_{direction}_correspondence_defined"])
        rows, cols = np.load(folder / "source_row.npy"), np.load(folder / "source_col.npy")
        ids = _read(folder, "instance_id", m_s["modalities"]["instance_id"])
        z_n = _read(folder, "camera_z", m_s["modalities"]["camera_z"])
        r_n = _read(folder, "range", m_s["modalities"]["range"])
        z_b = np.load(tmp_path / "b" / "camera_front" / f"{i_src:06d}" / "camera_z.npy")
        kitti, known = read_kitti(fdir / f"flow_{direction}.png")
        ok = known & np.isfinite(flow).all(-1)
        worst["kitti"] = max(worst["kitti"], float(np.abs(kitti[ok] - flow[ok]).max()))
        t_src, t_dst = a_s["row_time_ns"], a_d["row_time_ns"]
        Hs = len(t_dst)
        for vr in range(2, 180, 9):
            for ur in range(3, 320, 13):
                if ids[vr, ur] != board or not defined[vr, ur] or not np.isfinite(flow[vr, ur]).all():
                    continue
                s = np.array([float(cols[vr, ur]), float(rows[vr, ur])])
                T0 = e.truth.camera_pose(int(t_src[rows[vr, ur]]))
                ray = _cv_rays(lens, s[:1], s[1:])[0]
                depth = (dist - n_w @ T0[:3, 3]) / ((T0[:3, :3] @ ray) @ n_w)
                P = T0[:3, 3] + (T0[:3, :3] @ ray) * depth
                worst["z_nearest"] = max(worst["z_nearest"], abs(float(z_n[vr, ur]) - depth))
                worst["range"] = max(worst["range"], abs(float(r_n[vr, ur]) - depth * np.linalg.norm(ray)))
                s_rect = K_rect @ ray
                worst["start"] = max(worst["start"], float(np.abs(start[vr, ur] - s_rect[:2]).max()))
                ud, vd = _closed_form_destination(e, lens, P, t_dst, Hs)
                d_ray = _cv_rays(lens, np.array([ud]), np.array([vd]))[0]
                d_rect = (K_rect @ d_ray)[:2]
                worst["dest"] = max(worst["dest"], float(np.abs(start[vr, ur] + flow[vr, ur] - d_rect).max()))
                checked += 1
                # bilinear camera_z: the plane's z on the rectified pixel's own ray, between its values at the poses
                # of the two source rows around q = OpenCV's projection of that ray (a rectified pixel mixes rows)
                ray_p = np.linalg.solve(K_rect, [ur, vr, 1.0])
                qu, qv = _cv_project_lens(lens, ray_p[None])[0]
                u0, v0 = int(np.floor(qu)), int(np.floor(qv))
                if not (a_s["instance_id"][v0:v0 + 2, u0:u0 + 2] == board).all():
                    continue        # across an object edge the nearest pixel's z is taken (declared)
                zs = []
                for r in (int(np.floor(qv)), int(np.floor(qv)) + 1):
                    T = e.truth.camera_pose(int(t_src[min(max(r, 0), Hs - 1)]))
                    zs.append((dist - n_w @ T[:3, 3]) / ((T[:3, :3] @ ray_p) @ n_w))
                off = max(min(zs) - float(z_b[vr, ur]), float(z_b[vr, ur]) - max(zs), 0.0)
                worst["z_bilinear"] = max(worst["z_bilinear"], off)
                spread = max(spread, abs(zs[1] - zs[0]))
    assert checked > 400, checked
    print("rectified flow/camera_z vs closed form: " + ", ".join(f"{k} {v:.3g}" for k, v in worst.items())
          + f" ({checked} pixels; z between adjacent rows' poses differs by up to {spread:.3g} m)")
    assert worst["start"] < 1e-4 and worst["dest"] < 1e-4, worst
    assert worst["z_nearest"] < 1e-4 and worst["range"] < 1e-4 and worst["z_bilinear"] < 1e-5, worst
    assert spread > 1e-4        # the rows' poses differ: the bracket is not trivial
    assert worst["kitti"] <= 1 / 128 + 1e-6


def test_bad_input_one_line_nothing_written(exports, tmp_path, capsys):
    """A pinhole bundle, a missing payload, a bad --alpha (and --alpha with --K): exit 2, one line, no output folder
    and no staging litter."""
    from rowbeam.cli import main

    from tests.check.test_checker_faults import _copy, _edit_manifest

    e = _board(exports, "opencv")

    def refused(bundle, *args, fragment):
        out = tmp_path / "out"
        capsys.readouterr()
        assert main(["adapt", "rectify", str(bundle), str(out), *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("rowbeam adapt rectify: error: ") and fragment in err, err
        assert not out.exists() and not any(p.name.startswith(".out.tmp") for p in tmp_path.iterdir())

    for alpha, fragment in (("x", "--alpha 'x': not a number"), ("-0.1", "must lie in [0, 1]"),
                            ("nan", "must lie in [0, 1]"), ("1.5", "must lie in [0, 1]")):
        refused(e.bundle, "--alpha", alpha, fragment=fragment)
    refused(e.bundle, "--alpha", "1", "--K", "100,100,160,90", fragment="--alpha and --K")
    root, ev = _copy(e, tmp_path / "pinhole")
    _edit_manifest(ev, lambda m: (m["calibration"].update(projection="pinhole"),
                                  m["calibration"]["distortion"].update(model="none", coefficients=[])))
    refused(root, fragment="no camera event with a lens model")
    root, ev = _copy(e, tmp_path / "missing")
    (ev / "rgb.exr").unlink()
    refused(root, fragment="rgb.exr")


def test_amodal_masks_rectified(exports, tmp_path):
    """Object labels (planted on a lens export: amodal masks = closed-form squares through OpenCV rays, one reaching
    past the image corner): rectified amodal masks equal cv2.remap(INTER_NEAREST) of the planted masks (--alpha 1:
    pixels with no source are 0), their counts and boxes are recomputed from the rectified masks."""
    from rowbeam.bundle.arrays import write_npy

    from tests.helpers import load_event, rehash
    from tests.check.test_checker_faults import _copy, _edit_manifest
    from tests.model.test_lenses import _cv_project_lens, _cv_rays, _event_lens

    e = _board(exports, "opencv")
    root, ev = _copy(e, tmp_path / "labels")
    m, a = load_event(ev)
    lens = _event_lens(m)
    Hs, Ws = a["valid"].shape
    v, u = np.mgrid[0:Hs, 0:Ws].astype(np.float64)
    ray = _cv_rays(lens, u, v)
    squares = [(0.0, 0.0, 0.4), (-3.6, -2.0, 0.8)]          # centre x, y on the plane z = 4 m, half side (m)
    masks = [(np.abs(ray[..., 0] * 4 - x) <= h) & (np.abs(ray[..., 1] * 4 - y) <= h) for x, y, h in squares]
    assert masks[1][0, 0] and 0 < masks[1].mean() < 0.2
    write_npy(ev / "amodal_masks.npy", np.packbits(np.stack(masks), axis=-1))
    objs = [o for o in m["objects"]][:3]

    def plant(doc):
        doc["modalities"]["amodal_masks"] = {"uri": "amodal_masks.npy", "format": "npy", "dtype": "uint8",
                                             "shape": [2, Hs, (Ws + 7) // 8], "sha256": "0" * 64, "bytes": 0}
        doc["object_labels"] = {"objects": [
            {"id": objs[0]["id"], "instance_id": objs[0]["render_index"], "mask_index": 0},
            {"id": objs[1]["id"], "instance_id": objs[1]["render_index"], "mask_index": 1},
            {"id": objs[2]["id"], "instance_id": objs[2]["render_index"], "mask_index": None}]}
    _edit_manifest(ev, plant)
    rehash(ev, "amodal_masks")
    side = _rectify(root, tmp_path / "r", "--alpha", "1", "--interpolation", "nearest")
    K_rect, size = np.array(side["pinhole"]["camera_front"]["K"]), tuple(side["pinhole"]["camera_front"]["image_size_px"])
    assert side["events"][0]["no_source_pixels"] > 1000
    folder = tmp_path / "r" / "camera_front" / ev.name
    packed = np.load(folder / "amodal_masks.npy")
    got = np.unpackbits(packed, axis=-1, count=size[0]).astype(bool)
    maps = _cv_maps(lens, K_rect, size)
    tie = (np.abs(maps[0] % 1 - 0.5) < 1e-4) | (np.abs(maps[1] % 1 - 0.5) < 1e-4)
    objects = {o["id"]: o for o in json.loads((folder / "objects.json").read_text())["objects"]}
    for k, mask in enumerate(masks):
        ref = _remap(mask.astype(np.uint8), maps) == 1
        assert not (got[k] != ref)[~tie].any(), int((got[k] != ref).sum())
        vt, ut = np.nonzero(tie & (got[k] != ref))          # float32 ties: judged by cv2.projectPoints in float64
        if len(vt):
            q = _cv_project_lens(lens, np.linalg.solve(K_rect, np.stack([ut, vt, np.ones(len(ut))])).T)
            assert all(mask[int(np.rint(b)), int(np.rint(a_))] == got[k][y, x]
                       for (a_, b), y, x in zip(q, vt, ut, strict=True))
        o = objects[objs[k]["id"]]
        ys, xs = np.nonzero(got[k])
        assert o["mask_index"] == k and o["px_count_in_image"] == int(got[k].sum())
        assert o["bbox_in_image"] == [xs.min(), ys.min(), xs.max() - xs.min() + 1, ys.max() - ys.min() + 1]
    assert got[1][0, 0] and got[0].sum() > 500     # alpha 1 keeps the source corner the second square covers
    assert "mask_index" not in objects.get(objs[2]["id"], {})


def test_plate_amodal_masks_closed_form(exports, tmp_path):
    """Object labels exported through the opencv lens (test_lens_objects.py's plates; the big plate leaves the
    image): rectified with --alpha 1, each amodal mask is the set of rectified pixels whose pinhole ray K'^-1 p meets
    the plate (closed form), beyond the source image too (from the 3x canvas), except within the nearest-neighbour
    band around the plate's edges; the rectified modal ids equal cv2.remap's; boxes and counts follow the masks."""
    from rowbeam.blender.scenes import lens_scenes

    from tests.helpers import load_event
    from tests.model.test_lenses import _event_lens

    e = exports("lens_plates_opencv", lens_scenes.lens_plates, lens="opencv")
    m, a = load_event(e.event)
    lens = _event_lens(m)
    side = _rectify(e.bundle, tmp_path / "r", "--alpha", "1", "--interpolation", "nearest")
    K_rect, size = np.array(side["pinhole"]["camera_front"]["K"]), tuple(side["pinhole"]["camera_front"]["image_size_px"])
    folder = tmp_path / "r" / "camera_front" / e.event.name
    got = np.unpackbits(np.load(folder / "amodal_masks.npy"), axis=-1, count=size[0]).astype(bool)
    objects = {o["id"]: o for o in json.loads((folder / "objects.json").read_text())["objects"]}
    v, u = np.mgrid[0:size[1], 0:size[0]].astype(np.float64)
    x, y = (u - K_rect[0, 2]) / K_rect[0, 0], (v - K_rect[1, 2]) / K_rect[1, 1]
    band = 1.5 / lens.K[0, 0] * 1.6            # 0.71 source px of nearest neighbour, x <= 1.6 undistortion stretch
    ids = _remap(a["instance_id"], _cv_maps(lens, K_rect, size))
    rect_ids = _read(folder, "instance_id", m["modalities"]["instance_id"])
    no_source = ~np.isfinite(_read(folder, "camera_z", m["modalities"]["camera_z"])) & (rect_ids == 0)
    beyond = 0
    for name, oid, (X0, X1, Y0, Y1), d, _ in e.truth.notes["plates"]:
        o = objects[oid]
        x0, x1, y0, y1 = X0 / d, X1 / d, Y0 / d, Y1 / d
        expected = (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)
        near_edge = ((np.abs(x - x0) < band) | (np.abs(x - x1) < band)) & (y > y0 - band) & (y < y1 + band) | \
                    ((np.abs(y - y0) < band) | (np.abs(y - y1) < band)) & (x > x0 - band) & (x < x1 + band)
        mask = got[o["mask_index"]]
        wrong = (mask != expected) & ~near_edge
        assert not wrong.any(), (name, int(wrong.sum()))
        beyond += int((mask & no_source).sum())
        ys, xs = np.nonzero(mask)
        assert o["px_count_in_image"] == int(mask.sum())
        assert o["bbox_in_image"] == [xs.min(), ys.min(), xs.max() - xs.min() + 1, ys.max() - ys.min() + 1]
        assert o["px_count_visib"] == int((ids == o["render_index"]).sum()) == int((rect_ids == o["render_index"]).sum())
    assert beyond > 50, beyond          # amodal pixels with no source pixel: they came from the canvas
    print(f"rectified plates: amodal masks = closed form outside a {band * K_rect[0, 0]:.2f} px edge band; {beyond} "
          "amodal pixels beyond the source image")


def test_bilinear_rgb_equals_cv2_remap_linear(exports, tmp_path):
    """--interpolation bilinear (default): rgb equals cv2.remap(INTER_LINEAR) on the float32 radiance within cv2's
    1/32 px weight quantisation (bound: 1/16 of the 2x2 neighbourhood's spread, + 1e-6); still scene-linear float32,
    0 where a pixel has no source; the sidecar declares the interpolation."""
    from tests.helpers import load_event
    from tests.model.test_lenses import _event_lens

    e = _board(exports, "opencv_fisheye")
    m, a = load_event(e.event)
    lens = _event_lens(m)
    side = _rectify(e.bundle, tmp_path / "r", "--alpha", "0.5")
    assert side["interpolation"] == "bilinear"
    K_rect, size = np.array(side["pinhole"]["camera_front"]["K"]), tuple(side["pinhole"]["camera_front"]["image_size_px"])
    rgb = _read(tmp_path / "r" / "camera_front" / e.event.name, "rgb", m["modalities"]["rgb"])
    maps = _cv_maps(lens, K_rect, size)
    ref = cv2.remap(a["rgb"], maps[0], maps[1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    m_ = RectMap(lens, K_rect, size)
    spread = np.zeros(ref.shape, np.float64)
    for r, c, _ in m_.corners:
        for r2, c2, _ in m_.corners:
            spread = np.maximum(spread, np.abs(a["rgb"][r, c].astype(np.float64) - a["rgb"][r2, c2]))
    inside = m_.inside
    err = np.abs(rgb.astype(np.float64) - ref)[inside]
    assert rgb.dtype == np.float32 and (rgb[~inside] == 0).all() and (~inside).sum() > 0
    assert (err <= spread[inside] / 16 + 1e-6).all(), float((err - spread[inside] / 16).max())
    assert np.abs(rgb.astype(np.float64) - _remap(a["rgb"], maps))[inside].max() > 1e-3    # not the nearest pixel
    print(f"bilinear rgb vs cv2.remap INTER_LINEAR: worst {err.max():.3g} (radiance), spread-bound held")
