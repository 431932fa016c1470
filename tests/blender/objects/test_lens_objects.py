"""Object labels through a lens: the per-pixel lens rasteriser (rowbeam.check.rasterize.rasterize_rays)
against OpenCV as the independent oracle, exported plates through opencv / opencv_fisheye, the checker's lens
re-rasterisation and ray cast, planted faults, adapters."""
from __future__ import annotations

import json
from pathlib import Path

import cv2  # the OpenCV oracle: requirements.txt; a missing cv2 is an error, never a skip
import numpy as np
import pytest

from rowbeam.model.lens import LensSpec, make_lens
from rowbeam.check.rasterize import canvas_rays, lens_canvas_box, rasterize_rays, rasterize_rows


W, H = 320, 180
PROBE = 0.02                # px: pixels whose centre and 4 probes this far away disagree lie on an edge (not judged)
LENSES = {
    "opencv": ("opencv", [[200.0, 0.0, 159.5], [0.0, 201.0, 90.25]], (-0.25, 0.06, 1.0e-3, -5.0e-4, 0.0)),
    "opencv_rational": ("opencv", [[200.0, 0.0, 161.0], [0.0, 200.0, 88.5]], (0.08, -0.01, 0, 0, 0, 0.05, 0, 0)),
    "opencv_fisheye": ("opencv_fisheye", [[110.0, 0.0, 159.5], [0.0, 110.0, 89.5]], (-0.02, 0.01, -0.004, 0.0005)),
}
# fronto-parallel plate per lens: normalized x0, x1, y0, y1 at depth d (partly beyond the image), moving along
# camera x by vx metres per canvas row (rolling shutter: each row its own pose)
PLATES = {"opencv": ((0.6, 1.3, -0.3, 0.35), 4.0, 0.002), "opencv_rational": ((0.6, 1.3, -0.3, 0.35), 4.0, 0.002),
          "opencv_fisheye": ((1.2, 40.0, -1.0, 0.8), 0.5, 0.001)}


def _lens(name):
    model, k, d = LENSES[name]
    return make_lens(LensSpec(model, d), np.array(k + [[0.0, 0.0, 1.0]]), W, H, where=name)


def _cv_rays(lens, u, v):
    """OpenCV's undistorted normalized (x, y) of pixels (u, v) (any shape), NaN where OpenCV's inverse does not
    reproject onto the pixel within 1e-6 px (cv2.projectPoints) or, fisheye, theta >= 90 deg (OpenCV clamps)."""
    pts = np.stack([u.ravel(), v.ravel()], -1)[:, None, :].astype(np.float64)
    crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 100, 1e-15)
    D = np.array(lens.D)
    if lens.model == "opencv_fisheye":
        xy = cv2.fisheye.undistortPoints(pts, lens.K, D, criteria=crit).reshape(-1, 2)
        P = np.concatenate([xy, np.ones((len(xy), 1))], 1)
        back, _ = cv2.fisheye.projectPoints(P[:, None, :], np.zeros(3), np.zeros(3), lens.K, D)
        k1, k2, k3, k4 = lens.D
        t = np.pi / 2
        td_max = t * (1 + k1 * t**2 + k2 * t**4 + k3 * t**6 + k4 * t**8)       # the model's reach at 90 deg
        td = np.hypot((u.ravel() - lens.K[0, 2]) / lens.K[0, 0], (v.ravel() - lens.K[1, 2]) / lens.K[1, 1])
        ok = td < td_max
    else:
        xy = cv2.undistortPointsIter(pts, lens.K, D, None, None, crit).reshape(-1, 2)
        P = np.concatenate([xy, np.ones((len(xy), 1))], 1)
        back, _ = cv2.projectPoints(P, np.zeros(3), np.zeros(3), lens.K, D)
        ok = np.ones(len(xy), bool)
    ok &= np.hypot(*(back.reshape(-1, 2) - pts[:, 0]).T) < 1e-6
    xy[~ok] = np.nan
    return xy.reshape(u.shape + (2,))


def _cv_plate_mask(lens, u, v, rect, depth, shift):
    """Pixels (u, v) whose OpenCV ray meets the plate rect (X0, X1, Y0, Y1 m at camera z = depth) moved by shift
    (m along camera x, per pixel); NaN-ray pixels are outside."""
    xy = _cv_rays(lens, u, v) * depth
    X0, X1, Y0, Y1 = rect
    with np.errstate(invalid="ignore"):
        return (xy[..., 0] - shift >= X0) & (xy[..., 0] - shift <= X1) & (xy[..., 1] >= Y0) & (xy[..., 1] <= Y1)


def _robust_expected(lens, u, v, rect, depth, shift):
    """(expected, judged): the OpenCV mask and the pixels whose centre and 4 probes PROBE px away agree (probes
    only where the centre mask is not uniform over a 5 x 5 neighbourhood: elsewhere no edge is near)."""
    centre = _cv_plate_mask(lens, u, v, rect, depth, shift)
    pad = np.pad(centre, 2, mode="edge")
    win = np.lib.stride_tricks.sliding_window_view(pad, (5, 5))
    edgy = win.any((-1, -2)) & ~win.all((-1, -2))
    judged = np.ones_like(centre)
    uu, vv, ss = u[edgy], v[edgy], np.broadcast_to(shift, u.shape)[edgy]
    c = centre[edgy]
    for du, dv in ((PROBE, 0), (-PROBE, 0), (0, PROBE), (0, -PROBE)):
        judged[edgy] &= _cv_plate_mask(lens, uu + du, vv + dv, rect, depth, ss) == c
    return centre, judged


def _plate_mesh(rect):
    X0, X1, Y0, Y1 = rect
    V = np.array([[X0, Y0, 0.0], [X1, Y0, 0.0], [X1, Y1, 0.0], [X0, Y1, 0.0]])
    return V, np.array([[0, 1, 2], [0, 2, 3]])


@pytest.mark.parametrize("name", list(LENSES))
def test_lens_rasteriser_matches_opencv(name):
    """A plate moving along camera x (its own pose per canvas row) through each lens: the canvas mask from
    rasterize_rays (rays from rowbeam.model.lens.unproject) equals the set of pixels whose OpenCV ray
    (cv2.undistortPoints, reprojected by cv2.projectPoints within 1e-6 px) meets the plate at the row's pose,
    0 px mismatch away from 0.02 px of an edge; the pinhole rasteriser with the same K does not."""
    lens = _lens(name)
    (x0, x1, y0, y1), d, vx = PLATES[name]
    rect = (x0 * d, x1 * d, y0 * d, y1 * d)
    V, F = _plate_mesh(rect)
    rows = np.arange(-H, 2 * H)
    T = np.repeat(np.eye(4)[None], 3 * H, 0)
    T[:, 0, 3] = vx * (rows + H)
    T[:, 2, 3] = d
    corners = np.array([[x, y, 0.0] for x in rect[:2] for y in rect[2:] for _ in (0, 1)])
    box = lens_canvas_box(lens, corners, T, W, H, 1e-6)
    assert box is not None
    cx0, cx1, cy0, cy1 = box
    mask = np.zeros((3 * H, 3 * W), bool)
    rays = canvas_rays(lens, cx0 - W, cx1 - W, cy0 - H, cy1 - H)
    mask[cy0:cy1, cx0:cx1] = rasterize_rays(V, F, rays, T[cy0:cy1], near=1e-6)
    # the oracle over the canvas box grown by 20 px (nothing may be covered beyond the box)
    gx0, gx1, gy0, gy1 = max(cx0 - 20, 0), min(cx1 + 20, 3 * W), max(cy0 - 20, 0), min(cy1 + 20, 3 * H)
    v, u = np.mgrid[gy0 - H:gy1 - H, gx0 - W:gx1 - W].astype(np.float64)
    shift = vx * (v + H)
    expected, judged = _robust_expected(lens, u, v, rect, d, shift)
    got = mask[gy0:gy1, gx0:gx1]
    mismatch = (got != expected) & judged
    assert expected.sum() > 2000 and mismatch.sum() == 0, (int(mismatch.sum()), int(expected.sum()))
    assert (~judged).sum() < 0.01 * expected.sum()
    in_image = expected[max(H - gy0, 0):2 * H - gy0, max(W - gx0, 0):2 * W - gx0].sum()
    assert 0 < in_image < expected.sum(), "the plate is partly outside the image"
    if lens.model == "opencv_fisheye":       # part of the plate lies beyond the valid domain: no canvas pixel there
        assert np.isnan(rays[..., 0]).any() and not mask[cy0:cy1, cx0:cx1][np.isnan(rays[..., 0])].any()
    pin = rasterize_rows(V, F, lens.K, T, rows, 3 * W, -W, near=1e-6)[gy0:gy1, gx0:gx1]
    assert ((pin != expected) & judged).sum() > 100, "a pinhole rasterisation misses through the lens"
    print(f"{name}: {int(expected.sum())} canvas px ({int(in_image)} in image), 0 mismatch "
          f"({int((~judged).sum())} edge px not judged); pinhole misses {int(((pin != expected) & judged).sum())} px")


def test_lens_rasteriser_with_pinhole_lens_equals_scanline():
    """rasterize_rays with a pinhole lens (rays K^-1 (u, v, 1)) equals the scanline rasteriser rasterize_rows on
    random meshes crossing the near and far planes, per-row poses, every pixel of the canvas."""
    lens = make_lens(LensSpec("pinhole", ()), np.array([[150.0, 0, 40.3], [0, 152.0, 30.7], [0, 0, 1]]), 80, 60)
    rng = np.random.default_rng(3)
    Wc, Hc = 80, 60
    rays = canvas_rays(lens, -Wc, 2 * Wc, -Hc, 2 * Hc)
    rows = np.arange(-Hc, 2 * Hc)
    for trial in range(4):
        V = rng.normal(0, 1.0, (30, 3)) + [0, 0, 2.0]
        F = rng.integers(0, 30, (40, 3))
        T = np.repeat(np.eye(4)[None], 3 * Hc, 0)
        T[:, 0, 3] = np.linspace(-0.3, 0.3, 3 * Hc) * (trial % 2)
        a = rasterize_rays(V, F, rays, T, near=0.5, far=3.0)
        b = rasterize_rows(V, F, lens.K, T, rows, 3 * Wc, -Wc, near=0.5, far=3.0)
        assert a.sum() > 500 and np.array_equal(a, b), (trial, int((a != b).sum()))




def test_canvas_ray_tiles_equal_direct_unprojection():
    """CanvasRays (tiles unprojected once, shared; tiles not asked dropped beyond its memory budget) returns the
    rays canvas_rays gives for any box (Newton from a different batch: within 2e-15 relative), NaN alike."""
    from rowbeam.check.rasterize import CanvasRays

    for name in ("opencv", "opencv_fisheye"):
        lens = _lens(name)
        tiles = CanvasRays(lens, W, H)
        tiles.MAX_BYTES = 40 * 64 * 64 * 16
        for box in ((10, 300, 5, 200), (250, 700, 100, 400), (0, 3 * W, 0, 3 * H), (10, 300, 5, 200)):
            a = tiles.get(*box)
            b = canvas_rays(lens, box[0] - W, box[1] - W, box[2] - H, box[3] - H)
            assert np.array_equal(np.isnan(a), np.isnan(b))
            rel = np.abs(a - b) / np.maximum(np.abs(b), 1.0)
            assert np.where(np.isnan(rel), 0.0, rel).max() < 2e-15, (name, box)
            assert len(tiles.tiles) <= max(40, len(range(box[2] // 64, (box[3] - 1) // 64 + 1))
                                           * len(range(box[0] // 64, (box[1] - 1) // 64 + 1)))

# ----- exported plates through each lens (real Cycles, 320x180) --------------------------------------------------

def _plates(exports, lens):
    from rowbeam.blender.scenes import lens_scenes

    return exports(f"lens_plates_{lens}", lens_scenes.lens_plates, lens=lens)


def _event_lens(m):
    from rowbeam.model.lens import lens_from_calibration

    return lens_from_calibration(m["calibration"])


@pytest.mark.parametrize("lens_name", ["opencv", "opencv_fisheye"])
def test_plate_object_labels_through_lens(exports, lens_name):
    """Plates at known depths through each lens, the big one leaving the image: each canvas amodal mask equals the
    pixels whose OpenCV ray (cv2.undistortPoints of the pixel centre) meets the plate (0 px mismatch away from
    0.02 px of an edge) and its bbox holds the plate's outline projected by cv2.projectPoints; px counts, visib_fract
    and truncation follow from the OpenCV masks and the rendered ids; box3d and the pose are the plate's closed
    form; the manifest declares the lens canvas; `rowbeam check` passes."""
    from rowbeam.check.runner import check_bundle
    from rowbeam.check.object_checks import object_masks

    from tests.helpers import load_event

    e = _plates(exports, lens_name)
    m, a = load_event(e.event)
    lens = _event_lens(m)
    assert lens is not None and lens.model == LENSES[lens_name][0]
    block = m["object_labels"]
    assert "lens" in block["canvas"] and block["canvas"]["lens"]["model"] == lens.model
    assert block["method"]["amodal"].startswith("rasterised_through_lens") and block["method"]["renders"] == 0
    v, u = np.mgrid[-H:2 * H, -W:2 * W].astype(np.float64)
    by_name = {o["name"]: o for o in block["objects"]}
    assert set(by_name) == {"plate", "occluder"}, [o["name"] for o in block["objects"]]
    expected_all = {}
    for name, _oid, rect, d, M in e.truth.notes["plates"]:
        o = by_name[name]
        _, canvas = object_masks(block, a, W, H, o)
        expected, judged = _robust_expected(lens, u, v, rect, d, 0.0)
        mismatch = int(((canvas != expected) & judged).sum())
        assert mismatch == 0 and (~judged).sum() < 0.01 * expected.sum(), (name, mismatch)
        expected_all[name] = expected
        # the exported unclipped box lies inside the box of the plate's outline projected by cv2.projectPoints and
        # misses it by < 1.5 px on each side (the outline's extremes may fall between pixel centres)
        X0, X1, Y0, Y1 = rect
        t = np.linspace(0, 1, 400)
        outline = np.concatenate([np.stack([X0 + t * (X1 - X0), np.full_like(t, Y0)], 1),
                                  np.stack([X0 + t * (X1 - X0), np.full_like(t, Y1)], 1),
                                  np.stack([np.full_like(t, X0), Y0 + t * (Y1 - Y0)], 1),
                                  np.stack([np.full_like(t, X1), Y0 + t * (Y1 - Y0)], 1)])
        P = np.concatenate([outline, np.full((len(outline), 1), d)], 1)
        if lens.model == "opencv_fisheye":
            uv, _ = cv2.fisheye.projectPoints(P[:, None, :], np.zeros(3), np.zeros(3), lens.K, np.array(lens.D))
        else:
            uv, _ = cv2.projectPoints(P, np.zeros(3), np.zeros(3), lens.K, np.array(lens.D))
        uv = uv.reshape(-1, 2)
        bx, by, bw, bh = o["bbox_amodal_unclipped"]
        lo, hi = np.array([bx, by]), np.array([bx + bw - 1, by + bh - 1])
        assert (uv.min(0) <= lo).all() and (hi <= uv.max(0)).all(), (name, o["bbox_amodal_unclipped"], uv.min(0))
        assert (lo - uv.min(0) < 1.5).all() and (uv.max(0) - hi < 1.5).all(), (name, lo, hi, uv.min(0), uv.max(0))
        # counts and fractions: amodal from OpenCV, visible from the rendered ids
        n_all, n_img = int(expected.sum()), int(expected[H:2 * H, W:2 * W].sum())
        visible = int((a["instance_id"] == o["instance_id"]).sum())
        assert (o["px_count_all"], o["px_count_in_image"], o["px_count_visib"]) == (n_all, n_img, visible)
        assert o["visib_fract"] == visible / n_all and o["truncation_fraction"] == 1 - n_img / n_all
        # box3d: the quad's local box (half extents along local x = camera y, local y = camera x); pose: closed form
        assert np.allclose(o["box3d"]["size_m"], [Y1 - Y0, X1 - X0, 0.0], atol=1e-6)
        assert np.allclose(o["box3d"]["centre_m"], 0.0, atol=1e-6)
        assert np.abs(np.array(o["T_camera_object_reference"]) - M).max() < 1e-5, name
    plate, occ = by_name["plate"], by_name["occluder"]
    assert 0 < plate["px_count_in_image"] < plate["px_count_all"], "the plate is truncated by the image border"
    assert plate["visib_fract"] < plate["px_count_in_image"] / plate["px_count_all"], "the occluder hides some of it"
    assert (expected_all["plate"] & expected_all["occluder"])[H:2 * H, W:2 * W].sum() > 20
    assert occ["truncation_fraction"] == 0.0
    print(f"{lens_name}: plate {plate['px_count_all']} canvas px, {plate['px_count_in_image']} in image, "
          f"{plate['px_count_visib']} visible (visib_fract {plate['visib_fract']:.4f}); 0 px mismatch vs OpenCV; "
          f"object labels {m['run']['seconds'].get('object_labels', float('nan')):.3f} s")
    report = check_bundle(e.bundle)
    assert report["status"] == "pass", [c for ev in report["events"] for c in ev["checks"] if c["status"] != "pass"]
    checks = {c["check"]: c for ev in report["events"] for c in ev["checks"]}
    assert "through the" in checks["objects:rasterisation"]["message"] and checks["objects:ray_cast"]["status"] == "pass"


def test_pinhole_rasterisation_through_a_lens_is_caught(exports, tmp_path, monkeypatch):
    """Planted fault: the exporter rasterises a lens camera's objects with the pinhole model (same K): the checker's
    lens re-rasterisation and its ray cast both fail."""
    from rowbeam.check import rasterize
    from rowbeam.blender.objects import object_labels
    from rowbeam.blender.scenes import lens_scenes

    from tests.conftest import build_and_export

    class PinholeRays(rasterize.CanvasRays):
        def get(self, x0, x1, y0, y1):
            v, u = np.mgrid[y0 - self.H:y1 - self.H, x0 - self.W:x1 - self.W].astype(np.float64)
            K = self.lens.K
            return np.stack([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1]], -1)

    monkeypatch.setattr(object_labels, "CanvasRays", PinholeRays)
    object_labels._RAYS.clear()
    e = build_and_export(tmp_path, "fault", lens_scenes.lens_plates, lens="opencv")
    monkeypatch.undo()
    object_labels._RAYS.clear()
    # the exporter's own checks quarantine the event; the checker, run on that folder, names both failures
    assert not e.summary["published"] and len(e.summary["quarantined"]) == 1
    report = json.loads((Path(e.summary["quarantined"][0]) / "qa_report.json").read_text())
    fails = {c["check"]: c["message"] for c in report["checks"] if c["status"] == "fail"}
    assert "farther than 0.02 px from an edge" in fails.get("objects:rasterisation", ""), fails
    assert "disagree with its amodal mask" in fails.get("objects:ray_cast", ""), fails


def test_object_adapters_with_a_lens(exports, tmp_path):
    """BOP (cam_K only) and KITTI (P2 = [K | 0]) have no distortion model: a lens camera is refused in one line,
    exit 2, nothing written; COCO (image-space masks, no camera model) exports the distorted image's masks as they
    are (areas = px_count_visib)."""
    from tests.conftest import run_python

    e = _plates(exports, "opencv")
    for fmt in ("bop", "kitti-object"):
        r = run_python("-m", "rowbeam", "adapt", fmt, e.bundle, tmp_path / fmt)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"rowbeam adapt {fmt}: error:"), r.stderr
        assert "lens model opencv" in lines[0] and not (tmp_path / fmt).exists(), lines
    r = run_python("-m", "rowbeam", "adapt", "coco", e.bundle, tmp_path / "c.json")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "c.json").read_text())
    from tests.helpers import load_event

    m, _ = load_event(e.event)
    visib = {str(o["id"]): o["px_count_visib"] for o in m["object_labels"]["objects"]}
    assert {a["rowbeam_id"]: a["area"] for a in doc["annotations"]} == visib


@pytest.mark.parametrize("lens_name", ["opencv_fisheye"])
def test_running_example_through_a_lens_exports_object_labels(tmp_path, lens_name):
    """The running example's camera (event 30, 160x90) with each scene lens (`rowbeam scenes running_example --lens
    MODEL`: D from SCENE_LENSES, K from the Blender camera) exports object labels through the lens: rigid objects
    rasterised, the walking pedestrian (armature-deformed) too, from its evaluated mesh at each row's time (row_mesh);
    `rowbeam check` passes and re-rasterises the pedestrian from its per-row meshes (lens ray cast included)."""
    from rowbeam.check.runner import check_bundle
    from rowbeam.blender.scenes import lens_scenes, running_example

    from tests.conftest import build_and_export
    from tests.helpers import load_event

    def builder():
        running_example.build(160, 90)
        rig = running_example.rig(lidar=False, rgb_samples=0, verify_rows=2, object_labels=True,
                                  lens=lens_scenes.SCENE_LENSES[lens_name])
        return None, rig

    e = build_and_export(tmp_path, f"dusk_{lens_name}", builder, events={"camera_front": (30, 1)})
    assert e.summary["published"] and not e.summary["quarantined"], e.summary
    m, _ = load_event(e.event)
    block = m["object_labels"]
    assert block["method"]["renders"] == 0 and block["method"]["objects_rasterised"] >= len(block["objects"]) >= 3
    ped = next(o for o in block["objects"] if o["name"] == "pedestrian")
    assert "row_mesh" in ped and ped["rasterisation_check"] and ped["px_count_visib"] > 0, ped
    assert not any(s["name"] == "pedestrian" for s in block["skipped"]), block["skipped"]
    report = check_bundle(e.bundle)
    assert report["status"] == "pass", [c for ev in report["events"] for c in ev["checks"] if c["status"] != "pass"]
    checks = {c["check"]: c for ev in report["events"] for c in ev["checks"]}
    assert "1 deforming, from their per-row meshes" in checks["objects:rasterisation"]["message"], checks
    print(f"{lens_name}: {len(block['objects'])} objects rasterised through the lens, "
          f"{len(block['skipped'])} skipped; {checks['objects:rasterisation']['message']}")


def test_checker_catches_a_mask_pixel_beyond_the_fisheye_domain(exports, tmp_path):
    """Planted fault: one canvas pixel beyond the fisheye's valid domain (no ray: not part of the canvas) set in the
    plate's amodal canvas mask, counts and box updated to match: the lens re-rasterisation fails it."""
    from rowbeam.model.lens import unproject
    from rowbeam.check.object_checks import unpack

    from tests.helpers import assert_fails, load_event
    from tests.check.test_checker_faults import _copy, _edit_manifest, _replace

    e = _plates(exports, "opencv_fisheye")
    root, ev = _copy(e, tmp_path)
    m, a = load_event(ev)
    lens = _event_lens(m)
    o = next(o for o in m["object_labels"]["objects"] if o["name"] == "plate")
    i = o["canvas_mask_index"]
    canvas = unpack(a["amodal_masks_canvas"][i], 3 * W)
    c, x = H + 90, W + 340                       # image pixel (340, 90): right of the domain's edge (~327 px)
    assert not unproject(lens, float(x - W), float(c - H))[1] and not canvas[c, x]
    canvas[c, x] = True
    packed = a["amodal_masks_canvas"].copy()
    packed[i] = np.packbits(canvas, axis=-1)
    _replace(ev, "amodal_masks_canvas", packed)
    from rowbeam.check.object_checks import tight_box

    def edit(mm):
        p = next(p for p in mm["object_labels"]["objects"] if p["name"] == "plate")
        p["px_count_all"] += 1
        p["visib_fract"] = p["px_count_visib"] / p["px_count_all"]
        p["truncation_fraction"] = 1 - p["px_count_in_image"] / p["px_count_all"]
        p["bbox_amodal_unclipped"] = tight_box(canvas, -W, -H)
    _edit_manifest(ev, edit)
    assert_fails(root, "objects:rasterisation", "farther than 0.02 px from an edge")


# ----- deforming and part-time-hidden objects through a lens (real Cycles, 320x180) ------------------------------

def _robust_mask(lens, u, v, inside):
    """(expected, judged) of pixels (u, v): inside(xy (..., 2) OpenCV normalized ray, v) for the pixel centre; judged
    where the centre and its 4 probes PROBE px away agree (the probes keep the pixel's row, hence its time)."""
    centre = inside(_cv_rays(lens, u, v), v)
    judged = np.ones_like(centre)
    for du, dv in ((PROBE, 0), (-PROBE, 0), (0, PROBE), (0, -PROBE)):
        judged &= inside(_cv_rays(lens, u + du, v + dv), v) == centre
    return centre, judged


def _rect_inside(X0, X1, Y0, Y1, d):
    """inside() of a fronto-parallel rectangle at camera z = d; X0 may depend on the row: X0(v)."""
    def inside(xy, v):
        x0 = X0(v) if callable(X0) else X0
        with np.errstate(invalid="ignore"):
            return (xy[..., 0] * d >= x0) & (xy[..., 0] * d <= X1) & (xy[..., 1] * d >= Y0) & (xy[..., 1] * d <= Y1)
    return inside


def _tight(mask, x0=0, y0=0):
    """[u_min, v_min, u_max, v_max] (image px) of a canvas-window mask whose first pixel is canvas (y0, x0)."""
    rows, cols = np.nonzero(mask)
    return np.array([cols.min() + x0 - W, rows.min() + y0 - H, cols.max() + x0 - W, rows.max() + y0 - H])


@pytest.mark.parametrize("lens_name", ["opencv", "opencv_fisheye"])
def test_deforming_and_hidden_objects_through_lens(exports, lens_name):
    """Through each lens, a plate stretched by an animated shape key (its edge X0 moves off axis, across the image
    border, with the rolling shutter: each canvas row sees its own shape) and two plates with animated hide_render.
    The deforming plate's canvas mask equals the pixels whose OpenCV ray (cv2.undistortPoints) meets the rectangle
    with X0 at the row's closed-form shape-key value (0 mismatch away from 0.02 px of an edge) and its unclipped box
    is that oracle's within 1 px; a fixed shape (any one row time) misses many pixels. The plate shown at the label
    render's time (hidden in the first canvas rows) is labelled in every row, its mask the static rectangle's; the
    one hidden then is skipped (and has no rendered pixel). `rowbeam check` passes and re-rasterises the deforming
    plate from its per-row meshes."""
    from rowbeam.check.runner import check_bundle
    from rowbeam.check.object_checks import object_masks
    from rowbeam.blender.scenes import lens_scenes

    from tests.helpers import load_event

    e = exports(f"lens_changing_{lens_name}", lens_scenes.lens_changing_plates, lens=lens_name)
    m, a = load_event(e.event)
    lens = _event_lens(m)
    block = m["object_labels"]
    by_name = {o["name"]: o for o in block["objects"]}
    assert set(by_name) == {"stretching", "appearing"}, (list(by_name), block["skipped"])
    # canvas row times from the rig's timing model (event 1 at 30 Hz, readout 12 ms, exposure 4 ms)
    c = np.arange(3 * H)
    t = 1e9 / 30 + 12e6 * (c - H + 0.5) / H + 2e6
    assert np.abs(a["canvas_row_time_ns"] - t).max() <= 1.0
    f0, f1 = lens_scenes.SHAPE_KEY_FRAMES
    key = (1 + t * 30 / 1e9 - f0) / (f1 - f0)                     # shape-key value per canvas row (linear fcurve)
    plates = {n: (rect, d) for n, _, rect, d in e.truth.notes["plates"]}
    checks = {}
    for name, o in by_name.items():
        (X0, X1, Y0, Y1), d = plates[name]
        x0 = (lambda vv, X0=X0: X0 + e.truth.notes["stretch_m"] * key[vv.astype(int) + H]) if name == "stretching" \
            else X0
        _, canvas = object_masks(block, a, W, H, o)
        bx, by, bw, bh = o["bbox_amodal_unclipped"]      # the oracle over the exported box grown by 20 px
        gx0, gx1 = max(bx + W - 20, 0), min(bx + bw + W + 20, 3 * W)
        gy0, gy1 = max(by + H - 20, 0), min(by + bh + H + 20, 3 * H)
        v, u = np.mgrid[gy0 - H:gy1 - H, gx0 - W:gx1 - W].astype(np.float64)
        expected, judged = _robust_mask(lens, u, v, _rect_inside(x0, X1, Y0, Y1, d))
        ring = np.ones_like(expected)
        ring[1:-1, 1:-1] = False
        ring &= ~((v == -H) | (v == 2 * H - 1) | (u == -W) | (u == 2 * W - 1))     # the canvas border may be covered
        assert not expected[ring].any(), (name, "the oracle's silhouette reaches beyond the exported box + 20 px")
        got = canvas[gy0:gy1, gx0:gx1]
        mismatch = int(((got != expected) & judged).sum())
        assert canvas.sum() == got.sum() and mismatch == 0 and (~judged).sum() < 0.02 * expected.sum(), \
            (name, mismatch, int((~judged).sum()))
        box_err = np.abs(np.array([bx, by, bx + bw - 1, by + bh - 1]) - _tight(expected, gx0, gy0)).max()
        assert box_err <= 1, (name, o["bbox_amodal_unclipped"], _tight(expected, gx0, gy0))
        assert abs(o["px_count_all"] - int(expected.sum())) <= int((~judged).sum())
        assert o["px_count_visib"] == int((a["instance_id"] == o["instance_id"]).sum()) > 0
        checks[name] = (int(expected.sum()), int((~judged).sum()), int(box_err))
        if name == "stretching":
            assert "row_mesh" in o and o["rasterisation_check"]
            assert 0 < o["px_count_in_image"] < o["px_count_all"], "the plate leaves the image"
            for rows_at in (H, 2 * H - 1):              # one shape for all rows (the mesh at one time) is wrong
                fixed = _rect_inside(X0 + e.truth.notes["stretch_m"] * key[rows_at], X1, Y0, Y1, d)(
                    _cv_rays(lens, u, v), v)
                assert ((fixed != expected) & judged).sum() > 50
        else:
            assert any("hidden (hide_render)" in n for n in o["notes"]), o["notes"]
    vanishing = next(s for s in block["skipped"] if s["name"] == "vanishing")
    assert "hidden at the label render's time" in vanishing["reason"]
    vid = next(oid for n, oid, _, _ in e.truth.notes["plates"] if n == "vanishing")
    assert not (a["instance_id"] == vid).any()
    report = check_bundle(e.bundle)
    assert report["status"] == "pass", [c for ev in report["events"] for c in ev["checks"] if c["status"] != "pass"]
    got = {c["check"]: c for ev in report["events"] for c in ev["checks"]}
    assert "2 object(s) re-rasterised" in got["objects:rasterisation"]["message"]
    assert "1 deforming, from their per-row meshes" in got["objects:rasterisation"]["message"]
    assert got["objects:ray_cast"]["status"] == "pass"
    print(f"{lens_name}: (canvas px, edge px not judged, box error px) {checks}; "
          f"{got['objects:rasterisation']['message']}")


@pytest.mark.parametrize("lens_name", ["opencv_fisheye", "pinhole"])
def test_wrong_deforming_rows_are_caught(tmp_path, monkeypatch, lens_name):
    """Planted fault: the exporter rasterises the deforming plate (fisheye: its moving edge inside the image; pinhole:
    the plain camera, no lens) at every row from the mesh of the first canvas row's time (and exports those per-row
    meshes): Cycles' visible pixels of the stretched plate fall outside that silhouette, and the checker's
    re-rasterisation from the exported per-row meshes fails them."""
    from rowbeam.blender.objects import object_labels
    from rowbeam.blender.scenes import lens_scenes

    from tests.conftest import build_and_export

    real, first = object_labels.deforming_row_meshes, []

    def first_row_only(scene, clock, objects, times):      # the first evaluation's first time (canvas row 0)
        first.append(times[0])
        return {k: (np.repeat(V, len(times), axis=0), F)
                for k, (V, F) in real(scene, clock, objects, first[:1]).items()}

    monkeypatch.setattr(object_labels, "deforming_row_meshes", first_row_only)
    e = build_and_export(tmp_path, "fault", lens_scenes.lens_changing_plates, lens=lens_name)
    monkeypatch.undo()
    assert first, "the planted fault was not exercised"
    assert not e.summary["published"] and len(e.summary["quarantined"]) == 1
    report = json.loads((Path(e.summary["quarantined"][0]) / "qa_report.json").read_text())
    fails = {c["check"]: c["message"] for c in report["checks"] if c["status"] == "fail"}
    assert "farther than 0.02 px from an edge" in fails.get("objects:rasterisation", ""), fails


def test_band_x_range_bounds_the_triangle_in_its_band():
    """band_x_range (the candidate x range of a (row, triangle) pair in rasterize_rays) holds every point of the
    triangle whose y lies in the band (dense barycentric samples) and is tight: within 0.03 (about the sampling step) of
    the samples' extremes, where the triangle's own x extent would not be."""
    from rowbeam.check.rasterize import band_x_range

    rng = np.random.default_rng(7)
    n = 400
    xa, ya = rng.normal(0, 1, (n, 3)), rng.normal(0, 1, (n, 3))
    ya[:40, 1] = ya[:40, 0]                                    # horizontal edges
    c = rng.normal(0, 1, n)
    ylo, yhi = c - rng.uniform(0, 0.3, n), c + rng.uniform(0, 0.3, n)
    lo, hi = band_x_range(xa, ya, ylo, yhi)
    g = np.linspace(0, 1, 301)
    b0, b1 = np.meshgrid(g, g)
    keep = b0 + b1 <= 1
    w = np.stack([b0[keep], b1[keep], 1 - b0[keep] - b1[keep]], 1)           # (S, 3) barycentric
    px, py = xa @ w.T, ya @ w.T                                                  # (n, S)
    inb = (py >= ylo[:, None]) & (py <= yhi[:, None])
    some = inb.any(1)
    assert some.sum() > 100
    sx_lo = np.where(inb, px, np.inf).min(1)
    sx_hi = np.where(inb, px, -np.inf).max(1)
    assert (lo[some] <= sx_lo[some]).all() and (hi[some] >= sx_hi[some]).all()
    assert (sx_lo[some] - lo[some]).max() < 0.03 and (hi[some] - sx_hi[some]).max() < 0.03
    assert (sx_lo[some] - xa[some].min(1)).max() > 0.5, "the bands cut the triangles (the test can tell)"


# ----- a deforming object on the plain pinhole camera (no lens): the same per-row mesh path -----------------------

def _pinhole_stretching(exports, readout="top_to_bottom"):
    from rowbeam.blender.scenes import lens_scenes

    return exports(f"pinhole_changing_{readout}", lens_scenes.lens_changing_plates, lens="pinhole",
                   readout_direction=readout)


@pytest.mark.parametrize("readout", ["top_to_bottom", "bottom_to_top"])
def test_deforming_object_on_a_pinhole_camera(exports, readout):
    """The plain pinhole camera (no lens in the rig): the plate stretched by an animated shape key (its edge X0 moves
    off axis, across the image border, with the rolling shutter) is rasterised from its evaluated mesh at each canvas
    row's time and exported with row_mesh; its canvas mask equals the analytic silhouette (pixel centre (u, v) of
    row v inside the rectangle with X0 at the row's closed-form shape-key value, ray ((u - cx) / fx, (v - cy) / fy)
    from the scene's K) with 0 mismatch away from 0.02 px of an edge, its unclipped box within 1 px, while any one
    row's shape for all rows misses many pixels. `rowbeam check` passes and re-rasterises it from the per-row meshes
    (not skipped)."""
    from rowbeam.check.runner import check_bundle
    from rowbeam.check.object_checks import object_masks
    from rowbeam.blender.scenes import lens_scenes

    from tests.helpers import load_event

    e = _pinhole_stretching(exports, readout)
    m, a = load_event(e.event)
    assert m["calibration"].get("distortion", {}).get("model", "none") == "none"
    K = np.asarray(e.truth.K, dtype=np.float64)
    block = m["object_labels"]
    o = next(o for o in block["objects"] if o["name"] == "stretching")
    assert "row_mesh" in o and o["rasterisation_check"], o
    assert 0 < o["row_mesh"]["rows"] < 3 * H, "mesh evaluated over the rows of its canvas box only"
    c = np.arange(3 * H)
    vr = c - H if readout == "top_to_bottom" else 2 * H - 1 - c   # readout order of canvas row c's image row
    t = 1e9 / 30 + 12e6 * (vr + 0.5) / H + 2e6                    # canvas row times (event 1, 30 Hz, 12 ms, 4 ms)
    assert np.abs(a["canvas_row_time_ns"] - t).max() <= 1.0
    f0, f1 = lens_scenes.SHAPE_KEY_FRAMES
    key = (1 + t * 30 / 1e9 - f0) / (f1 - f0)
    (X0, X1, Y0, Y1), d = next((rect, d) for n, _, rect, d in e.truth.notes["plates"] if n == "stretching")
    stretch = e.truth.notes["stretch_m"]

    def inside(u, v, x0_of_row):
        x, y = (u - K[0, 2]) / K[0, 0] * d, (v - K[1, 2]) / K[1, 1] * d
        return (x >= x0_of_row) & (x <= X1) & (y >= Y0) & (y <= Y1)

    v, u = np.mgrid[-H:2 * H, -W:2 * W].astype(np.float64)
    x0_rows = X0 + stretch * key[v.astype(int) + H]
    expected = inside(u, v, x0_rows)
    judged = np.ones_like(expected)
    for du, dv in ((PROBE, 0), (-PROBE, 0), (0, PROBE), (0, -PROBE)):
        judged &= inside(u + du, v + dv, x0_rows) == expected       # probes keep the row (its time)
    _, canvas = object_masks(block, a, W, H, o)
    mismatch = int(((canvas != expected) & judged).sum())
    assert mismatch == 0 and (~judged).sum() < 0.02 * expected.sum(), (mismatch, int((~judged).sum()))
    bx, by, bw, bh = o["bbox_amodal_unclipped"]
    box_err = np.abs(np.array([bx, by, bx + bw - 1, by + bh - 1]) - _tight(expected)).max()
    assert box_err <= 1, (o["bbox_amodal_unclipped"], _tight(expected))
    assert 0 < o["px_count_in_image"] < o["px_count_all"], "the plate leaves the image"
    for rows_at in (H, 2 * H - 1):                  # one shape for all rows (the mesh at one time) is wrong
        fixed = inside(u, v, X0 + stretch * key[rows_at])
        assert ((fixed != expected) & judged).sum() > 50
    report = check_bundle(e.bundle)
    assert report["status"] == "pass", [c for ev in report["events"] for c in ev["checks"] if c["status"] != "pass"]
    got = {c["check"]: c for ev in report["events"] for c in ev["checks"]}
    msg = got["objects:rasterisation"]["message"]
    assert "1 deforming, from their per-row meshes" in msg and "not re-rasterised" not in msg, msg
    assert got["objects:ray_cast"]["status"] == "pass"
    print(f"pinhole {readout}: canvas px {int(expected.sum())}, edge px not judged {int((~judged).sum())}, box error "
          f"{int(box_err)} px; row_mesh rows {o['row_mesh']['rows']} of {3 * H}; {msg}")


def test_pinhole_deforming_mask_shifted_one_pixel_is_caught(exports, tmp_path):
    """Planted fault: the pinhole stretching plate's amodal masks (canvas and image) shifted 1 px right: the
    re-rasterisation from its per-row meshes fails it."""
    from rowbeam.check.object_checks import unpack

    from tests.helpers import assert_fails, load_event
    from tests.check.test_checker_faults import _copy, _replace

    root, ev = _copy(_pinhole_stretching(exports), tmp_path)
    m, a = load_event(ev)
    o = next(o for o in m["object_labels"]["objects"] if o["name"] == "stretching")
    for name, i, width in (("amodal_masks_canvas", o["canvas_mask_index"], 3 * W), ("amodal_masks", o["mask_index"], W)):
        mask = unpack(a[name][i], width)
        shifted = np.zeros_like(mask)
        shifted[:, 1:] = mask[:, :-1]
        packed = a[name].copy()
        packed[i] = np.packbits(shifted, axis=-1)
        _replace(ev, name, packed)
    assert_fails(root, "objects:rasterisation", "farther than 0.02 px from an edge")


def test_canvas_rays_kept_between_events_of_a_camera_released_after_its_last(tmp_path, monkeypatch):
    """The exporter's canvas-ray cache is kept from one event of a lens camera to its next planned event (reused)
    and released after the camera's last planned event, before the in-line check rasterises with its own rays."""
    import rowbeam.blender.export.run as run_module
    from rowbeam.blender.objects import object_labels
    from rowbeam.blender.scenes import lens_scenes

    from tests.conftest import build_and_export

    held, check_path = [], run_module.check_path

    def recording_check_path(*a, **k):
        held.append(len(object_labels._RAYS))
        return check_path(*a, **k)

    monkeypatch.setattr(run_module, "check_path", recording_check_path)
    object_labels.release_canvas_rays()
    e = build_and_export(tmp_path, "rays", lens_scenes.lens_plates, count=2, lens="opencv")
    assert len(e.summary["published"]) == 2, e.summary
    assert held == [1, 0], held
    assert not object_labels._RAYS
