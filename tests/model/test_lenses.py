"""Lens models (rowbeam/model/lens.py) against OpenCV as the independent oracle; refusals; renders through each model."""
from __future__ import annotations

import copy
import math

import cv2  # the OpenCV oracle: requirements.txt; a missing cv2 is an error, never a skip
import numpy as np
import pytest

from rowbeam.util.errors import RowbeamError
from rowbeam.model.lens import LensSpec, make_lens, parse_lens_spec, project, unproject, unproject_grid
from rowbeam.model.lens import distorted_normalized as unproject_distorted
from rowbeam.model.rig import parse_rig


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


def test_grid_unprojection_is_unproject_of_every_pixel_solved_once_per_lens(monkeypatch):
    """unproject_grid (shared by the exporter and the checker) = unproject of every pixel centre, bit for bit,
    read-only; a second call for an equal lens is the cached result, a lens differing in one coefficient or in K
    is solved anew, and the oldest results leave the cache beyond its byte budget."""
    import rowbeam.model.lens as lens_module
    monkeypatch.setattr(lens_module, "_grid_cache", {})
    lens = _lens("opencv5")
    v, u = np.mgrid[0:H, 0:W].astype(np.float64)
    rays, ok, res = unproject_grid(lens)
    want = unproject(lens, u, v)
    for got, ref in zip((rays, ok, res), want, strict=True):
        assert np.array_equal(got, ref, equal_nan=got.dtype != bool) and not got.flags.writeable
    same = make_lens(LensSpec("opencv", LENSES["opencv5"][2]), K.copy(), W, H)
    assert unproject_grid(same)[0] is rays
    d = list(LENSES["opencv5"][2])
    d[3] += 1e-6
    other = unproject_grid(make_lens(LensSpec("opencv", tuple(d)), K, W, H))
    assert not np.array_equal(other[0], rays)
    k2 = K.copy()
    k2[0, 2] += 0.5
    moved = unproject_grid(make_lens(LensSpec("opencv", LENSES["opencv5"][2]), k2, W, H))
    assert not np.array_equal(moved[0], rays)
    monkeypatch.setattr(lens_module, "GRID_CACHE_BYTES", sum(a.nbytes for a in want))
    unproject_grid(lens)
    assert len(lens_module._grid_cache) == 1


def test_image_rays_are_the_grid_rays_of_the_lens_or_k():
    """image_rays (flow, its checks and the report): through a lens of the image's size the cached unproject_grid
    rays themselves; for a pinhole K or a lens of another image size, pixel_rays of every pixel centre."""
    from rowbeam.model.camera_model import pixel_grid
    from rowbeam.model.lens import image_rays, pixel_rays

    lens = _lens("opencv5")
    assert image_rays(lens, W, H) is unproject_grid(lens)[0]
    for lens_or_K, (w, h) in ((lens, (W // 2, H // 2)), (K, (W, H))):
        want = pixel_rays(lens_or_K, *pixel_grid(w, h))
        assert want.shape == (h, w, 3) and np.array_equal(image_rays(lens_or_K, w, h), want, equal_nan=True)


def test_unit_ray_grid_is_the_normalised_grid_kept_with_it():
    """unit_ray_grid (the exporter's label rays, the checker's range / camera_z factor): the grid rays over
    np.linalg.norm's |ray|, bit for bit, NaN exactly off the valid domain, read-only and solved once."""
    from rowbeam.model.lens import unit_ray_grid

    lens = _lens("fisheye")                                  # corners beyond its domain: NaN rays there
    rays, ok, _ = unproject_grid(lens)
    unit, length = unit_ray_grid(lens)
    want = np.linalg.norm(rays, axis=-1)
    with np.errstate(invalid="ignore"):
        assert np.array_equal(unit, rays / want[..., None], equal_nan=True)
    assert np.array_equal(length, want, equal_nan=True) and np.array_equal(np.isnan(length), ~ok)
    assert (~ok).any() and not unit.flags.writeable and not length.flags.writeable
    assert unit_ray_grid(lens)[0] is unit


def test_rays_started_on_a_worker_thread_are_the_main_threads(monkeypatch):
    """rowbeam.blender.cycles.lens_camera.start_pixel_rays (solved while Cycles renders) gives the rays, lengths and largest
    residual that pixel_rays gives on the main thread, bit for bit, for the whole image and from a cold cache; the
    cache may be hit from several threads at once and every caller gets the same arrays."""
    from concurrent.futures import ThreadPoolExecutor

    import rowbeam.model.lens as lens_module
    from rowbeam.blender.cycles.lens_camera import pixel_rays, start_pixel_rays

    lens = _lens("fisheye")                                  # NaN rays off the domain too
    monkeypatch.setattr(lens_module, "_grid_cache", {})
    rays, residual, seconds = start_pixel_rays(lens).result()
    monkeypatch.setattr(lens_module, "_grid_cache", {})
    want, want_residual = pixel_rays(lens)
    assert rays.unit is not want.unit and seconds > 0.0
    assert rays.unit.shape == (H, W, 3) and residual == want_residual > 0.0
    assert np.array_equal(rays.unit, want.unit, equal_nan=True) and np.array_equal(rays.length, want.length, equal_nan=True)
    monkeypatch.setattr(lens_module, "_grid_cache", {})
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: pixel_rays(lens)[0], range(8)))
    for g in got:
        assert np.array_equal(g.unit, want.unit, equal_nan=True)
    assert len(lens_module._grid_cache) == 2                 # one grid and one unit-ray entry for the lens


def test_unprojection_stops_at_the_rounding_floor(monkeypatch):
    """Far out on the 3x object-label canvas of a 1280x720 lens (f 800 px), ~0.5 % of pixels never reach
    CONVERGED (float64 rounding floor): they stop once their residual stops decreasing. So 8 Newton steps give the
    same rays, bit for bit, as 60 (the old loop oscillated there for all 60), and the rays still equal OpenCV's
    (1e-6 px) and reproject onto the pixel (<= 1e-9 px)."""
    import rowbeam.model.lens as lens_module
    k = np.array([[800.0, 0.0, 640.0], [0.0, 800.0, 360.0], [0.0, 0.0, 1.0]])
    d = (-0.28, 0.07, 1e-3, -5e-4, 0.0)
    lens = make_lens(LensSpec("opencv", d), k, 1280, 720, where="canvas")
    v, u = np.mgrid[-720:1440:7, -1280:2560:7].astype(np.float64)
    rays, ok, residual = unproject(lens, u, v)
    monkeypatch.setattr(lens_module, "MAX_ITERATIONS", 8)
    capped, ok8, _ = unproject(lens, u, v)
    assert ok.all() and ok8.all() and np.array_equal(rays, capped)
    assert residual.max() <= 1e-9
    pts = np.stack([u.ravel(), v.ravel()], -1)[:, None, :]
    crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 300, 1e-15)
    ref = cv2.undistortPointsIter(pts, k, np.array(d), None, None, crit).reshape(-1, 2)
    back, _ = cv2.projectPoints(np.c_[ref, np.ones(len(ref))], np.zeros(3), np.zeros(3), k, np.array(d))
    cmp = np.hypot(*(back.reshape(-1, 2) - pts[:, 0]).T) <= 1e-9     # OpenCV's fixed point diverges far out
    assert cmp.mean() > 0.3
    err_px = (np.abs(ref[cmp] - rays.reshape(-1, 3)[cmp, :2]) * 800.0).max()
    assert err_px <= TOL_PX, err_px


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


def test_ray_and_hit_norm_has_numpy_norm_bits():
    """camera_model.norm (the |ray|, |hit| and |normal| of every label on a lens ray, exact_ray_depths) gives
    np.linalg.norm's bits, NaN and inf included; the data is one where another summation order differs."""
    from rowbeam.model.camera_model import norm

    rng = np.random.default_rng(9)
    a = rng.normal(size=(200, 300, 3)) * 10.0 ** rng.integers(-4, 4, size=(200, 300, 1))
    a[0, :3] = [[np.nan, 1.0, 2.0], [np.inf, 0.0, 1.0], [0.0, 0.0, 0.0]]
    assert np.array_equal(norm(a), np.linalg.norm(a, axis=-1), equal_nan=True)
    assert np.array_equal(norm([a[..., c].copy() for c in range(3)]), norm(a), equal_nan=True)   # its components
    other = np.sqrt(a[..., 0] ** 2 + (a[..., 1] ** 2 + a[..., 2] ** 2))
    assert not np.array_equal(other, np.linalg.norm(a, axis=-1), equal_nan=True)


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


def test_custom_camera_blender_refused(monkeypatch):
    """A lens renders through a custom (OSL) camera: on Blender 4.2 (no CUSTOM camera) the sensor is refused in one
    line naming the version needed, like the LiDAR."""
    from rowbeam.blender.compat import blender_compat
    from rowbeam.blender.cycles.lens_camera import sensor_lens

    sensor = parse_rig({**RIG, "sensors": [{**RIG["sensors"][0], "lens": {"model": "opencv", "D": [0.1, 0, 0, 0]}}]}
                       ).sensors[0]
    refusal = r"sensor 'cam': lens model opencv renders through a custom \(OSL\) camera: needs Blender >= 4.5"
    if not blender_compat.HAS_CUSTOM_CAMERA:            # the real 4.2
        with pytest.raises(RowbeamError, match=refusal):
            sensor_lens(sensor, K, W, H)
        return
    monkeypatch.setattr(blender_compat, "HAS_CUSTOM_CAMERA", False)
    monkeypatch.setattr(blender_compat, "VERSION_STRING", "4.2.23")
    with pytest.raises(RowbeamError, match=refusal + r" \(found 4.2.23\)"):
        sensor_lens(sensor, K, W, H)
    monkeypatch.undo()
    assert sensor_lens(sensor, K, W, H).model == "opencv"
    assert sensor_lens(parse_rig(RIG).sensors[0], K, W, H) is None


def test_good_lens_accepted():
    rig = copy.deepcopy(RIG)
    rig["sensors"][0]["lens"] = {"model": "opencv", "D": [-0.28, 0.07, 0, 0, 0], "K": KL}
    spec = parse_rig(rig, "rig.json").sensors[0].lens
    assert spec == parse_lens_spec(spec.to_json()) and spec.needs_custom_camera
    assert parse_rig(RIG).sensors[0].lens == LensSpec() and not LensSpec().needs_custom_camera


# ----- renders through each model (real Cycles, 320x180) ----------------------------------------------------

Z_TOL = 1e-4            # m
CENTROID_TOL_PX = 0.01


def _board(exports, lens, **kw):
    from rowbeam.blender.scenes import lens_scenes

    return exports(f"lens_board_{lens}_{'_'.join(f'{k}{v}' for k, v in kw.items())}", lens_scenes.marker_board,
                   lens=lens, **kw)


def _event_lens(m):
    from rowbeam.check.camera_checks import _manifest_lens

    cal = m["calibration"]
    return _manifest_lens(cal, np.array(cal["K"], np.float64), lambda *a, **k: None)


def _cv_rays(lens, u, v):
    """OpenCV's undistorted rays (x, y, 1) of pixels (u, v) (arrays of one shape): the oracle's unprojection."""
    pts = np.stack([u.ravel(), v.ravel()], -1)[:, None, :].astype(np.float64)
    crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 300, 1e-15)
    if lens.model == "opencv_fisheye":
        xy = cv2.fisheye.undistortPoints(pts, lens.K, np.array(lens.D), criteria=crit)
    else:
        xy = cv2.undistortPointsIter(pts, lens.K, np.array(lens.D) if lens.D else np.zeros(5), None, None, crit)
    xy = xy.reshape(u.shape + (2,))
    return np.concatenate([xy, np.ones(u.shape + (1,))], -1)


def _cv_project_lens(lens, P):
    if lens.model == "opencv_fisheye":
        uv, _ = cv2.fisheye.projectPoints(P.reshape(-1, 1, 3), np.zeros(3), np.zeros(3), lens.K, np.array(lens.D))
    else:
        uv, _ = cv2.projectPoints(P.reshape(-1, 3), np.zeros(3), np.zeros(3), lens.K,
                                  np.array(lens.D) if lens.D else None)
    return uv.reshape(P.shape[:-1] + (2,))


@pytest.mark.parametrize("lens_name", ["opencv", "opencv_rational", "opencv_fisheye"])
def test_marker_board_through_lens(exports, lens_name):
    """Every marker's rendered mask is the set of pixels whose OpenCV ray hits the marker (centroids <= 0.01 px);
    every valid pixel's 3D label point lies on the board (closed form) and projects onto its pixel through OpenCV;
    the checker passes; the manifest carries the rig's K and D and the valid domain."""
    from rowbeam.check.runner import check_bundle
    from rowbeam.blender.scenes.lens_scenes import LENS_PRESETS

    from tests.helpers import load_event

    e = _board(exports, lens_name)
    m, a = load_event(e.event)
    lens = _event_lens(m)
    spec = LENS_PRESETS[lens_name]
    assert m["calibration"]["distortion"]["coefficients"] == spec["D"] and lens.model == spec["model"]
    if "K" in spec:
        assert m["calibration"]["K"] == spec["K"]
    W, H = e.truth.size
    v, u = np.mgrid[0:H, 0:W].astype(np.float64)
    rays, in_domain, _ = unproject(lens, u, v)
    valid = a["valid"] == 1
    assert np.array_equal(valid, in_domain & np.isfinite(a["camera_z"])), "valid = hit inside the valid domain"
    if lens.model == "opencv_fisheye":
        assert not in_domain[0, 0] and not valid[0, 0] and valid.mean() > 0.5   # corners beyond 90 deg
    else:
        assert valid.all()
    # depth labels: the point camera_z * ray lies on the known plane and OpenCV projects it onto its pixel
    X = a["camera_z"][..., None].astype(np.float64) * rays
    d = e.truth.notes["markers_camera"][0][2]
    on_board = np.isin(a["instance_id"], [o["render_index"] for o in m["objects"] if o["id"] == e.truth.notes["board_id"]])
    plane_z = np.where(on_board, d + 0.01, d)
    assert np.abs(X[..., 2] - plane_z)[valid].max() < Z_TOL
    assert np.abs(np.linalg.norm(X, axis=-1) - a["range"])[valid].max() < Z_TOL
    reproj = np.abs(_cv_project_lens(lens, X[valid]) - np.stack([u[valid], v[valid]], -1)).max()
    assert reproj < 1e-6, reproj
    # normals of the fronto-parallel board and markers, in the camera frame of each row
    for name in ("normal_geometric", "normal_shading"):
        assert np.abs(a[name][valid] - [0.0, 0.0, -1.0]).max() < 1e-5
    # rgb goes through the same lens camera: pixels without a ray (2 px beyond the fisheye domain, past the rgb
    # pixel filter's reach) stay black
    assert a["rgb"].shape == (H, W, 3) and np.isfinite(a["rgb"]).all() and (a["rgb"][in_domain] > 0).any()
    if lens.model == "opencv_fisheye":
        rd_px = np.hypot(u - lens.K[0, 2], v - lens.K[1, 2])
        far = rd_px > lens.max_distorted_radius * lens.K[0, 0] + 2.0
        assert far.sum() > 100 and (a["rgb"][far] == 0).all()
    # markers: rendered masks vs the OpenCV-predicted pixel sets (OpenCV rays meeting each marker square)
    near = (lens.model != "opencv_fisheye") | (np.hypot(*[(c - k) / f for c, k, f in ((u, lens.K[0, 2], lens.K[0, 0]),
                                                                                    (v, lens.K[1, 2], lens.K[1, 1]))])
                                              < math.pi / 2 - 1e-6)      # cv2.fisheye.undistortPoints clamps beyond
    cv_rays = np.full(u.shape + (3,), np.nan)
    cv_rays[near] = _cv_rays(lens, u[near], v[near])
    half = e.truth.notes["marker_half_m"]
    worst = 0.0
    for i, (mx, my, mz) in enumerate(e.truth.notes["markers_camera"]):
        obj = next(o for o in m["objects"] if o["id"] == e.truth.notes["marker_id0"] + i)
        rendered = a["instance_id"] == obj["render_index"]
        hit = cv_rays[..., :2] * mz
        with np.errstate(invalid="ignore"):
            expected = (np.abs(hit[..., 0] - mx) <= half) & (np.abs(hit[..., 1] - my) <= half)
        assert rendered.sum() > 20
        mismatch = int((rendered != expected).sum())
        cr = np.array([u[rendered].mean(), v[rendered].mean()])
        ce = np.array([u[expected].mean(), v[expected].mean()])
        worst = max(worst, float(np.abs(cr - ce).max()))
        assert mismatch == 0 and np.abs(cr - ce).max() <= CENTROID_TOL_PX, (i, mismatch, cr, ce)
        # OpenCV's projection of the marker centre falls inside the rendered marker
        cu, cv_ = _cv_project_lens(lens, np.array([[mx, my, mz]]))[0]
        assert rendered[int(round(cv_)), int(round(cu))]
    print(f"{lens_name}: worst marker centroid difference {worst:.3g} px; depth reprojection {reproj:.3g} px; "
          f"refinement {m['method']['derivation']['max_refinement_shift_m']:.3g} m")
    report = check_bundle(e.bundle)
    assert report["status"] == "pass", [c for ev in report["events"] for c in ev["checks"] if c["status"] != "pass"]
    names = {c["check"] for ev in report["events"] for c in ev["checks"]}
    assert {"lens_model", "lens_rig", "lens_valid_domain"} <= names


@pytest.mark.parametrize("denoise", [False, True])
def test_fisheye_rgb_is_black_where_no_ray_reaches(exports, denoise):
    """Plain render: every lit pixel's pixel-filter square reaches the fisheye's valid domain (so the filter's
    support is Cycles' own, +- width for Blackman-Harris); denoised: the pixels no ray reaches are exactly 0 as in
    the plain render (OpenImageDenoise spreads light into them), declared with their count, and the labels are
    the plain export's bit for bit."""
    from rowbeam.model.pixel_filter import half_support_px, pixels_reached

    from tests.helpers import load_event

    from rowbeam.check.runner import check_bundle

    e = _board(exports, "opencv_fisheye", **({"rgb_denoise": True} if denoise else {}))
    assert check_bundle(e.bundle)["status"] == "pass"
    m, a = load_event(e.event)
    lens, render = _event_lens(m), m["method"]["rgb_render"]
    reached = pixels_reached(lens, half_support_px(render["pixel_filter"], render["filter_width_px"]))
    lit = (a["rgb"] != 0).any(-1)
    assert (~reached).sum() > 100 and lit[reached].mean() > 0.9
    assert not (lit & ~reached).any()
    if denoise:
        assert render["denoising"]["pixels_without_rays"]["count"] == int((~reached).sum())
        _, plain = load_event(_board(exports, "opencv_fisheye").event)
        for name in ("camera_z", "range", "instance_id", "valid", "normal_geometric"):
            assert plain[name].tobytes() == a[name].tobytes(), name
    else:
        assert render["denoising"] is False


def test_pinhole_lens_camera_equals_blender_camera(exports):
    """The lens camera with model pinhole and K = the Blender camera's renders the same labels as Cycles' own
    perspective camera (ids identical, camera_z within 1e-5 m): the OSL path's pixel convention is the native one."""
    from tests.helpers import load_event

    e_lens = _board(exports, "pinhole_k")
    _, a_lens = load_event(e_lens.event)

    def native(**kw):
        truth, rig = _board_builder()(lens="pinhole_k", **kw)
        del rig["sensors"][0]["lens"]
        return truth, rig
    e_native = exports("lens_board_native", native)
    m_native, a_native = load_event(e_native.event)
    assert m_native["calibration"]["distortion"]["model"] == "none"
    assert np.array_equal(a_lens["instance_id"], a_native["instance_id"])
    assert np.abs(a_lens["camera_z"] - a_native["camera_z"]).max() < 1e-5
    assert np.abs(np.array(m_native["calibration"]["K"]) - np.array(e_lens.truth.notes["lens"]["K"])).max() < 1e-4


@pytest.mark.parametrize("lens_name", ["opencv", "opencv_fisheye"])
def test_lens_camera_newton_exit_changes_no_label(exports, monkeypatch, tmp_path, lens_name):
    """Each pixel leaves the OSL camera's Newton loop at its first zero step (a float32 fixed point, where every
    later step is zero too): the same event exported again with the loop running all its steps has every payload
    (labels and rgb) equal bit for bit."""
    import re

    from rowbeam.blender.cycles import lens_camera
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export

    from tests.helpers import load_event

    e = _board(exports, lens_name)
    exit_rule = re.compile(r"\n *if \([^\n]*\)\n *break;[^\n]*")
    every_step = {m: exit_rule.sub("", body) for m, body in lens_camera.BODY.items()}
    assert every_step[lens_name] != lens_camera.BODY[lens_name] and "break" not in every_step[lens_name]
    monkeypatch.setattr(lens_camera, "BODY", every_step)
    summary = run_export(plan_export(ExportRequest(out=tmp_path / "bundle", blend=e.blend, rig=e.rig, first_event=1,
                                                   count=1, device="cpu")))
    (_, a), (_, a_all) = load_event(e.event), load_event(summary["published"][0])
    assert a.keys() == a_all.keys() and {"rgb", "camera_z", "instance_id"} <= a.keys()
    for k in a:
        assert np.array_equal(a[k], a_all[k], equal_nan=a[k].dtype.kind == "f"), k


def _board_builder():
    from rowbeam.blender.scenes import lens_scenes

    return lens_scenes.marker_board


def test_rolling_shutter_rows_through_lens(exports):
    """A camera yawing at 3 rad/s, bottom_to_top readout, opencv lens: every row's camera_z equals the closed form on
    the OpenCV ray with the pose at that row's reference time (half-row correction, flip and timing as pinhole)."""
    from rowbeam.model.timing import RollingShutterTiming

    from tests.helpers import load_event

    e = _board(exports, "opencv", yaw_rate_rad_s=3.0, direction="bottom_to_top")
    m, a = load_event(e.event)
    lens = _event_lens(m)
    W, H = e.truth.size
    v, u = np.mgrid[0:H, 0:W].astype(np.float64)
    rays = _cv_rays(lens, u, v)
    t_rows = RollingShutterTiming.from_manifest(m["event"]).row_reference_times_ns()
    assert t_rows[-1] < t_rows[0]                      # bottom row first
    n_w, dist = e.truth.planes[0][1](0)
    on_board = a["instance_id"] == next(o["render_index"] for o in m["objects"] if o["id"] == e.truth.notes["board_id"])
    errs = []
    for r in range(H):
        T = e.truth.camera_pose(int(t_rows[r]))
        ray_w = rays[r] @ T[:3, :3].T
        z = (dist - n_w @ T[:3, 3]) / (ray_w @ n_w)
        errs.append(np.abs(a["camera_z"][r] - z)[on_board[r]])
    worst = float(max(x.max(initial=0.0) for x in errs))
    assert worst < Z_TOL, worst
    # the row-time model matters here: the same rows evaluated at the frame's reference time are off by far more
    T_ref = e.truth.camera_pose(m["event"]["reference_time_ns"])
    z_ref = (dist - n_w @ T_ref[:3, 3]) / ((rays[0] @ T_ref[:3, :3].T) @ n_w)
    assert np.abs(a["camera_z"][0] - z_ref)[on_board[0]].max() > 10 * Z_TOL
    print(f"yaw through opencv lens: worst per-row camera_z error {worst:.3g} m")


def test_cli_refuses_non_monotonic_lens(tmp_path):
    """rowbeam export with a lens whose distortion turns back inside the image: exit 2, one line naming the
    coefficient, nothing written."""
    import json
    import os

    from rowbeam.blender.scenes import common

    from tests.conftest import REPO, run_python

    truth, rig = _board_builder()(lens="opencv")
    rig["sensors"][0]["lens"] = {"model": "opencv", "D": [-0.7, 0.0, 0.0, 0.0, 0.0]}   # K from the Blender camera
    blend = common.save(tmp_path / "bad_lens.blend")
    (tmp_path / "rig.json").write_text(json.dumps(rig))
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    r = run_python(REPO / "render_export.py", blend, "--rig", tmp_path / "rig.json", "--out", tmp_path / "out",
                   env={**os.environ, "TMPDIR": str(tmpdir)}, timeout=120)
    errors = [line for line in r.stderr.splitlines() if line.startswith("rowbeam export: error:")]
    assert r.returncode == 2 and len(errors) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "sensor 'camera_front': lens.D[0] (k1)" in errors[0] and "not monotonic inside the image" in errors[0]
    assert not (tmp_path / "out").exists() and not any(tmpdir.iterdir())


def test_flow_through_lens_matches_an_independent_solution(exports):
    """Yawing camera (3 rad/s) with the opencv lens, events 0 -> 1: forward flow equals a separate solver built on
    OpenCV (undistortPointsIter for the source ray, projectPoints for the destination, fixed point over the
    destination row times) within 2e-3 px; the flow bundle passes the checker (reprojection through the lens)."""
    from rowbeam.check.runner import check_bundle
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export

    from tests.helpers import load_event

    e = exports("lens_board_opencv_flow", _board_builder(), lens="opencv", yaw_rate_rad_s=3.0,
                events={"camera_front": (0, 2)})
    run_export(plan_export(ExportRequest(out=e.bundle, blend=e.blend, rig=e.rig, first_event=0, count=2, flow=True)))
    flow_dir = e.bundle / "flows" / "camera_front" / "000000-000001"
    fm, fa = load_event(flow_dir)
    assert fm["calibration"]["distortion"]["model"] == "opencv"
    (m0, a0), (m1, a1) = (load_event(e.bundle / "events" / "camera_front" / f"{i:06d}") for i in (0, 1))
    lens = _event_lens(m0)
    board = next(o["render_index"] for o in m0["objects"] if o["id"] == e.truth.notes["board_id"])
    n_w, dist = e.truth.planes[0][1](0)
    t_src, t_dst = a0["row_time_ns"], a1["row_time_ns"]
    H = len(t_dst)
    worst, checked = 0.0, 0
    for v in range(3, H, 11):
        for u in range(4, 320, 17):
            if a0["instance_id"][v, u] != board or not fa["flow_forward_dest_in_bounds"][v, u]:
                continue
            T0 = e.truth.camera_pose(int(t_src[v]))
            ray = _cv_rays(lens, np.array([float(u)]), np.array([float(v)]))[0] @ T0[:3, :3].T
            P = T0[:3, 3] + ray * (dist - n_w @ T0[:3, 3]) / (ray @ n_w)
            vd = float(v)
            for _ in range(60):
                r0 = min(int(np.floor(np.clip(vd, 0, H - 1))), H - 2)
                a = np.clip(vd, 0, H - 1) - r0
                T = e.truth.camera_pose(int(round(t_dst[r0] + a * (t_dst[r0 + 1] - t_dst[r0]))))
                X = T[:3, :3].T @ (P - T[:3, 3])
                ud, vn = _cv_project_lens(lens, X[None])[0]
                if abs(vn - vd) < 1e-9:
                    break
                vd = vn
            err = float(np.abs(fa["flow_forward"][v, u] - [ud - u, vn - v]).max())
            worst = max(worst, err)
            checked += 1
    assert checked > 100 and worst < 2e-3, (checked, worst)
    print(f"flow through the opencv lens: {checked} pixels, worst difference from the OpenCV solver {worst:.3g} px")
    report = check_bundle(e.bundle)
    assert report["status"] == "pass", [c for ev in report["events"] for c in ev["checks"] if c["status"] != "pass"]


@pytest.mark.parametrize("lens_name", ["opencv", "opencv_fisheye"])
def test_rectified_pinhole_view(exports, tmp_path, lens_name):
    """`rowbeam adapt rectify`: the pinhole view of a distorted board export has the closed-form camera_z (board at
    4 m, markers at 3.99 m) and the closed-form marker ids except within 1 px of a marker edge (nearest neighbour);
    its sidecar records what is lost and the nearest-neighbour distance; pixels the lens does not see are invalid."""
    import json

    from rowbeam.cli import main

    e = _board(exports, lens_name)
    out = tmp_path / "rect"
    fx = 150.0 if lens_name == "opencv_fisheye" else 120.0       # opencv: wider than the distorted image
    assert main(["adapt", "rectify", str(e.bundle), str(out), "--K", f"{fx},{fx},159.5,89.5", "--size", "320x180",
                 "--format", "npy"]) == 0
    side = json.loads((out / "rowbeam_adapter_sidecar.json").read_text())
    assert side["format"] == "rectified_pinhole" and len(side["lost"]) >= 4
    assert 0 < side["max_rounding_error"]["nearest_neighbour_px"] <= 0.7072
    folder = out / "camera_front" / "000001"
    a = {n: np.load(folder / f"{n}.npy") for n in ("camera_z", "range", "instance_id", "valid", "source_row")}
    valid = a["valid"] == 1
    v, u = np.mgrid[0:180, 0:320].astype(np.float64)
    x, y = (u - 159.5) / fx, (v - 89.5) / fx
    marker = np.zeros(u.shape, int)
    edge = np.zeros(u.shape, bool)
    half = e.truth.notes["marker_half_m"]
    m, _ = _load(e)
    for i, (mx, my, mz) in enumerate(e.truth.notes["markers_camera"]):
        dx, dy = np.abs(x * mz - mx), np.abs(y * mz - my)
        marker[(dx <= half) & (dy <= half)] = next(o["render_index"] for o in m["objects"]
                                                   if o["id"] == e.truth.notes["marker_id0"] + i)
        edge |= (np.abs(dx - half) < mz / fx) & (dy < half + mz / fx) | (np.abs(dy - half) < mz / fx) & (dx < half + mz / fx)
    board = next(o["render_index"] for o in m["objects"] if o["id"] == e.truth.notes["board_id"])
    expected = np.where(marker > 0, marker, board)
    wrong = valid & (a["instance_id"] != expected) & ~edge
    assert not wrong.any(), int(wrong.sum())
    z = np.where(marker > 0, 3.99, 4.0)
    inner = valid & ~edge
    assert np.abs(a["camera_z"] - z)[inner].max() < 1e-3
    assert np.abs(a["range"] - a["camera_z"] * np.sqrt(1 + x * x + y * y))[valid].max() < 1e-5
    assert (a["source_row"][valid] >= 0).all() and (a["source_row"][~valid] == -1).all()
    if lens_name == "opencv":        # the wide pinhole's corners lie outside what the distorted image saw
        assert not valid[0, 0] and 0.3 < valid.mean() < 1
    else:
        assert valid.all()
    print(f"rectify {lens_name}: valid {valid.mean():.3f}, worst inner camera_z error "
          f"{np.abs(a['camera_z'] - z)[inner].max():.3g} m, nearest neighbour "
          f"{side['max_rounding_error']['nearest_neighbour_px']:.3f} px")


def _load(e):
    from tests.helpers import load_event

    return load_event(e.event)


UI_SCRIPT = """
import json, sys
sys.path.insert(0, {repo!r})
import bpy
import addon
from addon import rig_props
from rowbeam.model.rig import parse_rig
addon.register()
scene = bpy.context.scene
cam = bpy.data.objects.new("cam", bpy.data.cameras.new("cam"))
scene.collection.objects.link(cam)
s = scene.rowbeam.sensors.add()
s.sensor_id, s.target = "camera_front", cam
s.lens_model, s.lens_D = "opencv", "-0.25, 0.06, 0.001, -0.0005, 0"
s.lens_given_K, s.lens_K = True, "200, 201, 159.5, 89.5"
rig_props.sync_rig(s, bpy.context)
doc = json.loads(scene["rowbeam_rig"])
lens = parse_rig(doc).sensors[0].lens
s.lens_model, s.lens_D, s.lens_fov_deg, s.lens_given_K = "opencv_fisheye", "0.1, 0, 0, 0", 170.0, False
rig_props.sync_rig(s, bpy.context)
doc2 = json.loads(scene["rowbeam_rig"])
rig_props.load_rig_document(scene, doc)
back = json.loads(scene["rowbeam_rig"])
print("RESULT" + json.dumps({{"doc": doc["sensors"][0]["lens"], "spec": [lens.model, list(lens.D), lens.K],
                              "doc2": doc2["sensors"][0]["lens"], "back": back["sensors"][0]["lens"]}}), flush=True)
addon.unregister()
import os
os._exit(0)       # bpy 4.5 can loop in its leak report at interpreter exit after an add-on registered
"""


def test_ui_lens_fields_round_trip(tmp_path):
    """The add-on's lens fields write the rig's lens (parsed by the rig reader) and a loaded rig fills them back."""
    import json

    from tests.conftest import REPO, run_python

    script = tmp_path / "ui_lens.py"
    script.write_text(UI_SCRIPT.format(repo=str(REPO)))
    r = run_python(script, timeout=300)
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT")), None)
    assert line, r.stdout[-2000:] + r.stderr[-2000:]
    res = json.loads(line[len("RESULT"):])
    assert res["doc"] == {"model": "opencv", "D": [-0.25, 0.06, 0.001, -0.0005, 0.0],
                          "K": [[200.0, 0.0, 159.5], [0.0, 201.0, 89.5], [0.0, 0.0, 1.0]]}
    assert res["spec"] == ["opencv", [-0.25, 0.06, 0.001, -0.0005, 0.0], [[200.0, 0.0, 159.5], [0.0, 201.0, 89.5],
                                                                          [0.0, 0.0, 1.0]]]
    assert res["doc2"] == {"model": "opencv_fisheye", "D": [0.1, 0.0, 0.0, 0.0], "fov_deg": 170.0}
    assert res["back"] == res["doc"]


def test_checker_catches_lens_faults(exports, tmp_path):
    """Planted faults in a fisheye export: D that differs from the rig, a manifest claiming a pinhole camera, a
    declared valid domain the lens does not have, a valid pixel outside the domain, a range off the unprojected ray."""
    from tests.helpers import assert_fails, load_event
    from tests.check.test_checker_faults import _copy, _edit_manifest, _replace

    e = _board(exports, "opencv_fisheye")
    cases = {
        "D": lambda m: m["calibration"]["distortion"]["coefficients"].__setitem__(0, -0.021),
        "pinhole": lambda m: (m["calibration"].update(projection="pinhole"),
                              m["calibration"]["distortion"].update(model="none", coefficients=[])),
    }
    for name, edit in cases.items():
        root, ev = _copy(e, tmp_path / name)
        _edit_manifest(ev, edit)
        assert_fails(root, "lens_rig", "vs the rig's")
        if name == "pinhole":
            assert_fails(root, "camera_z_range")       # range/camera_z on the pinhole ray, not the fisheye's
    root, ev = _copy(e, tmp_path / "declared_domain")
    _edit_manifest(ev, lambda m: m["calibration"]["distortion"]["valid_domain"].update(theta_max_rad=1.4))
    assert_fails(root, "lens_model", "disagree with the opencv_fisheye lens")
    root, ev = _copy(e, tmp_path / "domain")
    _, a = load_event(ev)
    valid, z, r = a["valid"].copy(), a["camera_z"].copy(), a["range"].copy()
    valid[0, 0], z[0, 0], r[0, 0] = 1, 1.0, 5.0
    for name, arr in (("valid", valid), ("camera_z", z), ("range", r)):
        _replace(ev, name, arr)
    assert_fails(root, "lens_valid_domain", "1 valid pixels lie outside")
    root, ev = _copy(e, tmp_path / "range")
    _, a = load_event(ev)
    r = a["range"].copy()
    r[90, 160] *= 1.001
    _replace(ev, "range", r)
    assert_fails(root, "camera_z_range", "at 1 pixels")


def test_calibration_scene_through_fisheye_with_blender_k(tmp_path):
    """`rowbeam scenes ego_yaw --lens opencv_fisheye` (K derived from the Blender camera): the exported yawing-camera
    event has, on every row, the closed-form camera_z on the OpenCV fisheye ray at that row's time; checks pass."""
    import json

    from rowbeam.check.runner import check_bundle
    from rowbeam.model.timing import RollingShutterTiming
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export
    from rowbeam.blender.scenes import calibration
    from rowbeam.blender.scenes.build import main as build

    from tests.conftest import skip_without_custom_camera
    from tests.helpers import load_event

    blend = tmp_path / "yaw.blend"
    assert build(["ego_yaw", str(blend), "--scale", "8", "--lens", "opencv_fisheye", "--rgb-samples", "0"]) == 0
    rig = json.loads(blend.with_suffix(".rig.json").read_text())
    assert rig["sensors"][0]["lens"]["model"] == "opencv_fisheye" and "K" not in rig["sensors"][0]["lens"]
    skip_without_custom_camera(rig)
    run_export(plan_export(ExportRequest(out=tmp_path / "b", blend=blend, rig=blend.with_suffix(".rig.json"),
                                         first_event=1, count=1, device="cpu")))
    report = check_bundle(tmp_path / "b")
    assert report["status"] == "pass", [c for ev in report["events"] for c in ev["checks"] if c["status"] != "pass"]
    m, a = load_event(next((tmp_path / "b" / "events" / "camera_front").iterdir()))
    lens = _event_lens(m)
    assert np.abs(lens.K - [[100, 0, 80], [0, 100, 45], [0, 0, 1]]).max() < 1e-4      # seed K / 8, from Blender
    W, H = m["calibration"]["image_size_px"]
    v, u = np.mgrid[0:H, 0:W].astype(np.float64)
    rays = _cv_rays(lens, u, v)
    t_rows = RollingShutterTiming.from_manifest(m["event"]).row_reference_times_ns()
    T0 = calibration.seed_pose()
    n_w = T0[:3, :3] @ np.array([0, 0, -1.0])
    d = float(n_w @ (T0[:3, :3] @ np.array([0, 0, 8.0]) + T0[:3, 3]))
    worst = 0.0
    for r in range(H):
        a_ = 3.0 * t_rows[r] * 1e-9
        Rz = np.array([[math.cos(a_), -math.sin(a_), 0], [math.sin(a_), math.cos(a_), 0], [0, 0, 1]])
        R = Rz @ T0[:3, :3]
        z = (d - n_w @ T0[:3, 3]) / ((rays[r] @ R.T) @ n_w)
        ok = a["valid"][r] == 1
        worst = max(worst, float(np.abs(a["camera_z"][r] - z)[ok].max(initial=0.0)))
    assert a["valid"].all() and worst < Z_TOL, worst
    print(f"ego_yaw through the fisheye (Blender K): worst per-row camera_z error {worst:.3g} m")


@pytest.mark.parametrize("name", ["opencv5", "fisheye"])
def test_lidar_returns_pair_with_the_camera_row_through_the_lens(name):
    """The cross-modal pairing (rowbeam.check.cross_modal.row_of_projection) projects through the declared lens: on a
    camera whose row r is translated by 1 mm x r, each world point lands where OpenCV projects it with the pose of
    the row it lands on (a pinhole projection misses by up to tens of px near the corners)."""
    from rowbeam.check.cross_modal import row_of_projection
    rng = np.random.default_rng(7)
    rows = np.tile(np.eye(4), (H, 1, 1))
    rows[:, 0, 3] = 1e-3 * np.arange(H)
    u, v = _pixels(rng, 400)
    inner = (u > 2) & (u < W - 3) & (v > 2) & (v < H - 3)
    rays, valid, _ = unproject(_lens(name), u[inner], v[inner])
    rays = rays[valid]
    world = rays * rng.uniform(4.0, 30.0, (len(rays), 1)) + [1e-3 * H / 2, 0, 0]
    uv, zc, row = row_of_projection(world, rows, _lens(name), iterations=8)
    expect = _cv_project(name, world - rows[row, :3, 3])
    assert np.abs(uv - expect).max() < TOL_PX
    assert np.array_equal(row, np.clip(np.rint(uv[:, 1]), 0, H - 1).astype(int))
    pinhole_uv, _, _ = row_of_projection(world, rows, _lens(name).K)
    assert np.abs(pinhole_uv - expect).max() > 1.0
