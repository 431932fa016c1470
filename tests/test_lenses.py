"""Lens models (contracts/lens.py) against OpenCV as the independent oracle; refusals; renders through each model."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from contracts.errors import RowbeamError
from contracts.lens import LensSpec, make_lens, parse_lens_spec, project, unproject
from contracts.lens import distorted_normalized as unproject_distorted
from contracts.rig import parse_rig

cv2 = pytest.importorskip("cv2")

W, H = 640, 480
K = np.array([[520.0, 0.0, 322.25], [0.0, 515.5, 236.75], [0.0, 0.0, 1.0]])     # off-centre, fx != fy
K_FISH = np.array([[190.0, 0.0, 318.5], [0.0, 190.0, 241.5], [0.0, 0.0, 1.0]])   # corners beyond 90 deg
LENSES = {
    "opencv5": ("opencv", K, (-0.28, 0.071, 1.3e-3, -8e-4, -0.012)),
    "opencv4": ("opencv", K, (0.12, -0.03, -2e-3, 1.1e-3)),
    "opencv8_rational": ("opencv", K, (0.35, -0.04, 1e-3, 5e-4, 0.01, 0.42, -0.03, 0.02)),
    "fisheye": ("opencv_fisheye", K_FISH, (-0.013, 0.021, -0.006, 0.0011)),
    "pinhole": ("pinhole", K, ()),
}
TOL_PX = 1e-6


def _lens(name):
    model, k, d = LENSES[name]
    return make_lens(LensSpec(model, d), k, W, H, where=name)


def _pixels(rng, n=3000):
    """Random pixel coordinates over the whole image plus the four outer corners and the corner pixel centres."""
    u = np.concatenate([rng.uniform(-0.5, W - 0.5, n), [-0.5, W - 0.5, -0.5, W - 0.5, 0, W - 1, 0, W - 1]])
    v = np.concatenate([rng.uniform(-0.5, H - 0.5, n), [-0.5, -0.5, H - 0.5, H - 0.5, 0, 0, H - 1, H - 1]])
    return u, v


def _cv_project(name, P):
    model, k, d = LENSES[name]
    if model == "opencv_fisheye":
        uv, _ = cv2.fisheye.projectPoints(P[:, None, :], np.zeros(3), np.zeros(3), k, np.array(d))
    else:
        uv, _ = cv2.projectPoints(P, np.zeros(3), np.zeros(3), k, np.array(d) if d else None)
    return uv.reshape(-1, 2)


def _cv_undistort(name, u, v):
    """OpenCV's undistorted normalized coordinates of pixels (iterated to convergence)."""
    model, k, d = LENSES[name]
    pts = np.stack([u, v], -1)[:, None, :]
    crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 300, 1e-15)
    if model == "opencv_fisheye":
        return cv2.fisheye.undistortPoints(pts, k, np.array(d), criteria=crit).reshape(-1, 2)
    return cv2.undistortPointsIter(pts, k, np.array(d) if d else np.zeros(5), None, None, crit).reshape(-1, 2)


@pytest.mark.parametrize("name", LENSES)
def test_projection_matches_opencv(name):
    """Points on the rays of random pixels (and the corners) at random depths project where OpenCV puts them."""
    lens = _lens(name)
    rng = np.random.default_rng(1)
    u, v = _pixels(rng)
    rays, ok, _ = unproject(lens, u, v)
    P = rays[ok] * rng.uniform(0.3, 80.0, ok.sum())[:, None]
    uv, in_domain = project(lens, P)
    assert in_domain.all()
    err = np.abs(uv - _cv_project(name, P)).max()
    assert err <= TOL_PX, err
    # and a second, independent set: random 3D points in front of the camera inside the domain
    Q = np.stack([rng.uniform(-1.5, 1.5, 2000), rng.uniform(-1.2, 1.2, 2000), rng.uniform(1.0, 3.0, 2000)], -1)
    uv, ok = project(lens, Q)
    assert ok.mean() > 0.5
    assert np.abs(uv[ok] - _cv_project(name, Q[ok])).max() <= TOL_PX


@pytest.mark.parametrize("name", LENSES)
def test_unprojection_matches_opencv(name):
    """Our inverse equals OpenCV's undistortPoints (in pixels of f_x) and reprojects onto the pixel (declared residual)."""
    lens = _lens(name)
    u, v = _pixels(np.random.default_rng(2))
    rays, ok, residual = unproject(lens, u, v)
    if name == "fisheye":       # the corners of this circular fisheye lie beyond 90 deg: outside the valid domain
        assert not ok[[-8, -7, -6, -5]].any() and ok.mean() > 0.8
    else:
        assert ok.all()
    # cv2.fisheye.undistortPoints clamps theta_d to pi/2 (OpenCV source): compare where it does not; beyond,
    # our rays are checked through cv2.fisheye.projectPoints in test_projection_matches_opencv
    cmp = ok & (np.hypot(*unproject_distorted(lens, u, v)) < math.pi / 2 - 1e-9) if name == "fisheye" else ok
    ref = _cv_undistort(name, u[cmp], v[cmp])
    err_px = (np.abs(ref - rays[cmp][:, :2]) * lens.K[0, 0]).max()
    assert err_px <= TOL_PX, err_px
    assert residual[ok].max() <= 1e-9
    back, _ = project(lens, rays[ok] * 7.0)
    assert np.abs(back - np.stack([u[ok], v[ok]], -1)).max() <= 1e-9


def test_wrong_interpretations_disagree():
    """Swapped tangential terms, fx for fy, or the fisheye model on Brown-Conrady coefficients move pixels by > 0.1 px."""
    rng = np.random.default_rng(3)
    P = np.stack([rng.uniform(-1, 1, 500), rng.uniform(-0.8, 0.8, 500), np.full(500, 1.6)], -1)
    right, _ = project(_lens("opencv5"), P)
    _, k, d = LENSES["opencv5"]
    swapped = make_lens(LensSpec("opencv", (d[0], d[1], d[3], d[2], d[4])), k, W, H)
    fisheye = make_lens(LensSpec("opencv_fisheye", d[:4]), k, W, H)
    for wrong in (swapped, fisheye):
        assert np.nanmax(np.abs(project(wrong, P)[0] - right)) > 0.1


def test_valid_domain_declared():
    """Beyond the turning radius OpenCV folds points back into the image; we refuse to project them."""
    lens = _lens("opencv5")
    assert math.isfinite(lens.max_radius)
    r = lens.max_radius * 1.5
    P = np.array([[r, 0.0, 1.0]])
    uv_cv = _cv_project("opencv5", P)[0]
    assert -0.5 <= uv_cv[0] <= W - 0.5, "OpenCV folds the point back inside the image"
    uv, ok = project(lens, P)
    assert not ok[0] and np.isnan(uv).all()
    fish = _lens("fisheye")
    block = fish.to_manifest()
    assert block["valid_domain"]["theta_max_rad"] == pytest.approx(math.pi / 2)
    assert not project(fish, np.array([[1.0, 0.0, -0.01]]))[1][0]          # behind 90 deg
    assert project(fish, np.array([[1.0, 0.0, 0.01]]))[1][0]


RIG = {"schema": "rowbeam/rig@1", "sensors": [{
    "id": "cam", "type": "rolling_shutter_camera", "object": "Camera", "rate_hz": 10, "first_event_ns": 0,
    "readout_ns": 1000000, "exposure_ns": 100000, "readout_direction": "top_to_bottom", "image_size_px": [W, H]}]}
KL = [[300.0, 0.0, 319.5], [0.0, 300.0, 239.5], [0.0, 0.0, 1.0]]


@pytest.mark.parametrize("lens, fragments", [
    ({"model": "opencv", "D": [-0.6, 0, 0, 0, 0], "K": KL}, ["lens.D[0] (k1)", "not monotonic inside the image"]),
    ({"model": "opencv", "D": [0.1, -0.2, 0, 0, 0], "K": KL}, ["lens.D[1] (k2)", "not monotonic"]),
    ({"model": "opencv", "D": [0.0, 0.0, 0, 0, 0, 0.0, 0.0, 2.0], "K": KL}, ["lens.D[7] (k6)"]),
    ({"model": "opencv", "D": [0.0, 0.0, 0.0]}, ["lens.D", "4 or 5 or 8", "got 3"]),
    ({"model": "opencv", "D": [float("nan"), 0, 0, 0]}, ["lens.D[0]", "finite"]),
    ({"model": "opencv", "D": [0, float("inf"), 0, 0]}, ["lens.D[1]", "finite"]),
    ({"model": "opencv_fisheye", "D": [0, 0, 0, 0], "fov_deg": 200}, ["lens.fov_deg", "180"]),
    ({"model": "opencv_fisheye", "D": [-0.3, 0, 0, 0], "fov_deg": 180, "K": KL},
     ["lens.D[0] (k1)", "cannot reach that field of view"]),
    ({"model": "opencv_fisheye", "D": [0.0, -0.2, 0, 0], "K": [[100, 0, 319.5], [0, 100, 239.5], [0, 0, 1]]},
     ["lens.D[1] (k2)", "turns back", "inside the image"]),
    ({"model": "opencv", "D": [0, 0, 0, 0], "K": [[300, 0.5, 319.5], [0, 300, 239.5], [0, 0, 1]]}, ["lens.K", "skew"]),
    ({"model": "opencv", "D": [0, 0, 0, 0], "fov_deg": 90}, ["lens.fov_deg", "only the opencv_fisheye"]),
    ({"model": "pinhole", "D": [0.1]}, ["lens.D", "got 1"]),
    ({"model": "kb8", "D": []}, ["lens.model"]),
])
def test_bad_coefficients_refused(lens, fragments):
    """One line naming the rig file, the sensor and the coefficient (RowbeamError: exit 2 in the CLI)."""
    rig = copy.deepcopy(RIG)
    rig["sensors"][0]["lens"] = lens
    with pytest.raises(RowbeamError) as e:
        parse_rig(rig, "rig.json")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("rig.json: ") and "sensors[0]" in msg
    for f in fragments:
        assert f in msg, (f, msg)


def test_good_lens_accepted():
    rig = copy.deepcopy(RIG)
    rig["sensors"][0]["lens"] = {"model": "opencv", "D": [-0.28, 0.07, 0, 0, 0], "K": KL}
    spec = parse_rig(rig, "rig.json").sensors[0].lens
    assert spec == parse_lens_spec(spec.to_json()) and spec.needs_custom_camera
    assert parse_rig(RIG).sensors[0].lens == LensSpec() and not LensSpec().needs_custom_camera
