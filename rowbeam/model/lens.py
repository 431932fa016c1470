"""Lens models in OpenCV conventions: projection, unprojection and the valid domain (float64 numpy).

Models (OpenCV names and coefficient order):
  pinhole         no distortion, D = ().
  opencv          Brown-Conrady, D = (k1, k2, p1, p2, k3[, k4, k5, k6]) (cv2.projectPoints):
                  x_d = x*R + 2 p1 x y + p2 (r^2 + 2 x^2),  y_d = y*R + p1 (r^2 + 2 y^2) + 2 p2 x y,
                  R = (1 + k1 r^2 + k2 r^4 + k3 r^6) / (1 + k4 r^2 + k5 r^4 + k6 r^6), (x, y) = (X/Z, Y/Z).
  opencv_fisheye  Kannala-Brandt, D = (k1, k2, k3, k4) (cv2.fisheye.projectPoints):
                  theta = atan2(sqrt(X^2 + Y^2), Z), theta_d = theta (1 + k1 theta^2 + k2 theta^4 + k3 theta^6
                  + k4 theta^8), (x_d, y_d) = theta_d (X, Y) / sqrt(X^2 + Y^2).
Then u = f_x x_d + c_x, v = f_y y_d + c_y (zero skew) in the `opencv` pixel convention of
rowbeam.model.camera_model (pixel centres at integer coordinates, row 0 at the top).

Valid domain: the undistorted radius r = sqrt(x^2 + y^2) (opencv) or the angle theta (fisheye) from 0
up to `Lens.max_radius` / `Lens.max_theta_rad`, where the radial map is strictly increasing (and, for
fisheye, theta <= 90 deg: OpenCV's model sees z > 0 only, and at most half the declared fov_deg).
Points outside it are not projected (NaN, invalid); pixels whose distorted radius the domain does
not reach are not unprojected (invalid, e.g. the corners of a circular fisheye). `make_lens` refuses
coefficients whose radial map turns back inside the image (two rays per pixel), names the coefficient.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import numpy as np

from rowbeam.model.camera_model import norm, pixel_grid
from rowbeam.util.errors import RowbeamError

MODELS = ("pinhole", "opencv", "opencv_fisheye")
COEFFICIENT_NAMES = {"pinhole": (), "opencv": ("k1", "k2", "p1", "p2", "k3", "k4", "k5", "k6"),
                     "opencv_fisheye": ("k1", "k2", "k3", "k4")}
ALLOWED_COUNTS = {"pinhole": (0,), "opencv": (4, 5, 8), "opencv_fisheye": (4,)}
MAX_ITERATIONS = 60
CONVERGED = 1e-15             # normalized-coordinate residual at which Newton stops
STALLED = 1e-13               # below it, a pixel whose residual stops decreasing stops (float64 rounding floor)
NEWTON_CHUNK = 1 << 14        # pixels iterated together (cache-sized)
MAX_UNPROJECT_RESIDUAL_PX = 1e-9   # a pixel whose inverse misses by more is invalid
RADIUS_SEARCH_MAX = 1e3       # opencv: undistorted radius searched for the first turning point (89.94 deg)
FISHEYE_MAX_THETA = math.pi / 2


@dataclass(frozen=True)
class Lens:
    """One camera's projection: model, K (3x3, px), D (OpenCV order), image size (W, H) px.

    max_radius (opencv; inf when the radial map never turns back) or max_theta_rad (fisheye) bound the
    valid domain; max_distorted_radius is the largest normalized distorted radius the domain reaches.
    """

    model: str
    K: np.ndarray
    D: tuple
    width: int
    height: int
    max_radius: float = math.inf
    max_theta_rad: float = FISHEYE_MAX_THETA
    max_distorted_radius: float = math.inf
    fov_deg: float | None = None
    notes: dict = field(default_factory=dict, compare=False)

    @property
    def is_pinhole(self) -> bool:
        return self.model == "pinhole"

    def coefficients(self) -> dict:
        return dict(zip(COEFFICIENT_NAMES[self.model], self.D, strict=False))

    def to_manifest(self) -> dict:
        """The manifest's calibration.distortion block (coefficients in OpenCV order)."""
        domain = {"undistorted_radius_max": _json_float(self.max_radius)} if self.model == "opencv" else \
            {"theta_max_rad": self.max_theta_rad} if self.model == "opencv_fisheye" else {}
        if self.model != "pinhole":
            domain["distorted_radius_max"] = _json_float(self.max_distorted_radius)
        return {"model": "none" if self.model == "pinhole" else self.model, "coefficients": [float(d) for d in self.D],
                "coefficient_names": list(COEFFICIENT_NAMES[self.model][:len(self.D)]),
                "valid_domain": {**domain, "definition": VALID_DOMAIN_TEXT[self.model],
                                 **({"fov_deg": self.fov_deg} if self.fov_deg is not None else {})}}


VALID_DOMAIN_TEXT = {
    "pinhole": "every point with z > 0; every pixel",
    "opencv": "points with z > 0 and undistorted radius sqrt((X/Z)^2+(Y/Z)^2) <= undistorted_radius_max (the radial "
              "map is strictly increasing there); every pixel of the image is inside (checked when the lens is made)",
    "opencv_fisheye": "points with theta = atan2(sqrt(X^2+Y^2), Z) <= theta_max_rad (radial map strictly increasing, "
                      "theta <= 90 deg, at most fov_deg/2 when declared); pixels whose normalized distorted radius "
                      "exceeds distorted_radius_max have no ray (invalid)",
}


def _json_float(x: float):
    return None if not math.isfinite(x) else float(x)


# ----- the models on normalized coordinates -----------------------------------------------------------------

def _opencv_coeffs(D):
    d = list(D) + [0.0] * (8 - len(D))
    return d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]


def _opencv_radial(D, s):
    """(R, dR/ds) of the rational radial factor at s = r^2."""
    k1, k2, _, _, k3, k4, k5, k6 = _opencv_coeffs(D)
    num = 1.0 + s * (k1 + s * (k2 + s * k3))
    dnum = k1 + s * (2.0 * k2 + 3.0 * s * k3)
    if k4 == k5 == k6 == 0.0:                 # the 5-coefficient model: no denominator
        return num, dnum
    den = 1.0 + s * (k4 + s * (k5 + s * k6))
    dden = k4 + s * (2.0 * k5 + 3.0 * s * k6)
    return num / den, (dnum * den - num * dden) / (den * den)


def opencv_distort(D, x, y):
    """Brown-Conrady: undistorted normalized (x, y) -> distorted normalized (x_d, y_d); arrays broadcast."""
    _, _, p1, p2, *_ = _opencv_coeffs(D)
    s = x * x + y * y
    R, _ = _opencv_radial(D, s)
    return (x * R + 2.0 * p1 * x * y + p2 * (s + 2.0 * x * x),
            y * R + p1 * (s + 2.0 * y * y) + 2.0 * p2 * x * y)


def _opencv_jacobian(D, x, y):
    _, _, p1, p2, *_ = _opencv_coeffs(D)
    R, dR = _opencv_radial(D, x * x + y * y)
    a = R + 2.0 * x * x * dR + 2.0 * p1 * y + 6.0 * p2 * x
    b = 2.0 * x * y * dR + 2.0 * p1 * x + 2.0 * p2 * y
    d = R + 2.0 * y * y * dR + 6.0 * p1 * y + 2.0 * p2 * x
    return a, b, b, d


def fisheye_theta_d(D, theta):
    """Kannala-Brandt: theta -> theta_d (both radians / normalized radius)."""
    k1, k2, k3, k4 = D
    t2 = theta * theta
    return theta * (1.0 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4))))


def _fisheye_dtheta_d(D, theta):
    k1, k2, k3, k4 = D
    t2 = theta * theta
    return 1.0 + t2 * (3.0 * k1 + t2 * (5.0 * k2 + t2 * (7.0 * k3 + t2 * 9.0 * k4)))


def _radial_map(model, D, r):
    """Distorted radius along a ray of undistorted radius r (opencv, tangential terms off) or theta (fisheye)."""
    if model == "opencv":
        return r * _opencv_radial(D, r * r)[0]
    return fisheye_theta_d(D, r)


# ----- projection and unprojection -------------------------------------------------------------------------

def project(lens: Lens, points_camera) -> tuple[np.ndarray, np.ndarray]:
    """Camera-frame points (..., 3) (OpenCV optical, m) -> ((..., 2) pixel coords, in-domain mask).

    Points behind the camera or outside the valid domain are NaN and False."""
    p = np.asarray(points_camera, dtype=np.float64)
    X, Y, Z = p[..., 0], p[..., 1], p[..., 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        if lens.model == "opencv_fisheye":
            rho = np.hypot(X, Y)
            theta = np.arctan2(rho, Z)
            ok = (theta <= lens.max_theta_rad) & np.isfinite(theta)
            scale = np.where(rho > 0, fisheye_theta_d(lens.D, theta) / np.where(rho > 0, rho, 1.0), 1.0 / Z)
            xd, yd = X * scale, Y * scale
        else:
            x, y = X / Z, Y / Z
            ok = Z > 0
            if lens.model == "opencv":
                ok &= x * x + y * y <= lens.max_radius ** 2
                xd, yd = opencv_distort(lens.D, x, y)
            else:
                xd, yd = x, y
    K = lens.K
    u = K[0, 0] * xd + K[0, 2]
    v = K[1, 1] * yd + K[1, 2]
    ok = ok & np.isfinite(u) & np.isfinite(v)
    return np.stack([np.where(ok, u, np.nan), np.where(ok, v, np.nan)], axis=-1), ok


def distorted_normalized(lens: Lens, u, v):
    """Pixel coords -> distorted normalized coordinates ((u - c_x)/f_x, (v - c_y)/f_y) (zero skew)."""
    K = lens.K
    return (np.asarray(u, np.float64) - K[0, 2]) / K[0, 0], (np.asarray(v, np.float64) - K[1, 2]) / K[1, 1]


def unproject(lens: Lens, u, v) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pixel coords (u, v) (any shape S) -> (rays (S, 3) = (x, y, 1), valid (S), residual_px (S)).

    x, y are undistorted normalized coordinates: the ray through the pixel is (x, y, 1) in the
    camera frame, so range = camera_z * |ray|. Inversion by Newton's method in float64;
    residual_px = |project(ray) - (u, v)| in pixels (achieved, per pixel). Invalid where the pixel
    is outside the valid domain or the inverse misses by more than MAX_UNPROJECT_RESIDUAL_PX. Computed in chunks of
    NEWTON_CHUNK pixels (guess, Newton and residual of a chunk stay in cache)."""
    u, v = np.broadcast_arrays(np.asarray(u, np.float64), np.asarray(v, np.float64))
    shape = u.shape
    u, v = u.ravel(), v.ravel()
    if u.size <= NEWTON_CHUNK:
        rays, ok, res = _unproject_flat(lens, u, v)
    else:
        rays, ok, res = np.empty((u.size, 3)), np.empty(u.size, bool), np.empty(u.size)
        for c0 in range(0, u.size, NEWTON_CHUNK):
            c = slice(c0, c0 + NEWTON_CHUNK)
            rays[c], ok[c], res[c] = _unproject_flat(lens, u[c], v[c])
    return rays.reshape(shape + (3,)), ok.reshape(shape), res.reshape(shape)


GRID_CACHE_BYTES = 256 << 20  # unproject_grid / unit_ray_grid keep their most recent results up to this many bytes
_grid_cache: dict = {}
_grid_lock = threading.Lock()  # the exporter solves a grid on a worker thread (lens_camera.start_pixel_rays)


def _lens_key(lens: Lens) -> tuple:
    return (lens.model, lens.K.tobytes(), tuple(lens.D), lens.width, lens.height, lens.max_radius,
            lens.max_theta_rad, lens.max_distorted_radius)


def _cached(key: tuple, compute) -> tuple:
    """compute()'s arrays, made read-only and kept under `key` (most recent last) up to GRID_CACHE_BYTES. Safe from
    several threads (compute runs outside the lock; two threads missing the same key both compute the same arrays)."""
    with _grid_lock:
        hit = _grid_cache.pop(key, None)
    if hit is None:
        hit = compute()
        for a in hit:
            a.flags.writeable = False
    with _grid_lock:
        _grid_cache[key] = hit
        kept = 0
        for k in reversed(list(_grid_cache)):
            kept += sum(a.nbytes for a in _grid_cache[k])
            if kept > GRID_CACHE_BYTES and k != key:
                del _grid_cache[k]
    return hit


def unproject_grid(lens: Lens) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`unproject` of every pixel centre of the lens's image: (rays (H, W, 3), valid (H, W), residual_px (H, W)),
    read-only. Computed once per (model, K, D, image size, domain) per process and shared by the exporter and the
    checker (a multi-event export solves each lens once); the most recent results are kept up to GRID_CACHE_BYTES."""
    def solve():
        u = np.arange(lens.width, dtype=np.float64)[None, :]     # pixel centres, broadcast by unproject
        v = np.arange(lens.height, dtype=np.float64)[:, None]
        return unproject(lens, u, v)
    return _cached(("rays",) + _lens_key(lens), solve)


def unit_rays(rays: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unit directions (..., 3), |ray| (...,)) of rays (..., 3) = (x, y, 1): the direction a pixel's labels are
    measured along (camera frame) and range / camera_z on it; NaN where the ray is NaN."""
    length = norm(rays)
    with np.errstate(invalid="ignore", divide="ignore"):
        return rays / length[..., None], length


def unit_ray_grid(lens: Lens) -> tuple[np.ndarray, np.ndarray]:
    """`unit_rays` of the `unproject_grid` rays, (H, W, 3) and (H, W), read-only, kept like the grid (exporter and
    checker share them)."""
    return _cached(("unit",) + _lens_key(lens), lambda: unit_rays(unproject_grid(lens)[0]))


def clear_grid_cache() -> None:
    """Forget every unproject_grid result (benchmarks measure a process's first event with it)."""
    with _grid_lock:
        _grid_cache.clear()


def _unproject_flat(lens: Lens, u, v):
    """unproject of 1D float64 arrays u, v (one chunk)."""
    xd, yd = distorted_normalized(lens, u, v)
    xd, yd = np.broadcast_arrays(xd, yd)
    if lens.model == "pinhole":
        x, y = xd.copy(), yd.copy()
        ok = np.ones(x.shape, bool)
    elif lens.model == "opencv":
        x, y = _invert_opencv(lens.D, xd, yd, lens.max_radius)
        ok = (x * x + y * y <= lens.max_radius ** 2)
    else:
        x, y, ok = _invert_fisheye(lens, xd, yd)
    rays = np.stack([x, y, np.ones_like(x)], axis=-1)
    uv, in_domain = project(lens, rays)
    res = np.hypot(uv[..., 0] - u, uv[..., 1] - v)
    res = np.where(np.isfinite(res), res, np.inf)
    ok = ok & in_domain & np.isfinite(x) & np.isfinite(y) & (res <= MAX_UNPROJECT_RESIDUAL_PX)
    return np.where(ok[..., None], rays, np.nan), ok, res


def _invert_opencv(D, xd, yd, r_max: float = math.inf):
    """Newton on (x, y), started from the inverse of the radial map alone (a 1D table, tangential terms
    ignored); pixels leave the iteration once converged."""
    with np.errstate(all="ignore"):
        x0, y0 = _radial_guess(D, xd, yd, r_max)
        return _newton_opencv(D, xd, yd, x0, y0)


def _radial_guess(D, xd, yd, r_max):
    rd = np.hypot(xd, yd)
    top = float(rd.max(initial=0.0))
    if not math.isfinite(top) or top == 0.0:
        return xd.astype(np.float64).copy(), yd.astype(np.float64).copy()
    hi = min(r_max, RADIUS_SEARCH_MAX)
    r = np.linspace(0.0, min(hi, 4.0 * top + 1.0), 4097)
    f = _radial_map("opencv", D, r)
    mono = np.concatenate([[True], np.cumprod(np.diff(f) > 0).astype(bool)])    # the increasing start only
    r, f = r[mono], f[mono]
    ru = np.interp(rd, f, r)
    scale = np.where(rd > 0, ru / np.where(rd > 0, rd, 1.0), 1.0)
    return xd * scale, yd * scale


def _newton_opencv(D, xd, yd, x, y):
    """Newton's method on the Brown-Conrady map from (x, y), in cache-sized chunks of NEWTON_CHUNK pixels; the radial
    factor and its derivative are computed once per step for both the residual and the Jacobian. A pixel stops once
    its normalized residual |e_x| + |e_y| <= CONVERGED, or once it is below STALLED and no longer decreases (the
    float64 rounding floor), or is not finite (fails the residual test later)."""
    k1, k2, p1, p2, k3, k4, k5, k6 = _opencv_coeffs(D)
    rational = (k4, k5, k6) != (0.0, 0.0, 0.0)

    def residual(xa, ya, xda, yda):
        s = xa * xa + ya * ya
        R = 1.0 + s * (k1 + s * (k2 + s * k3))
        dR = k1 + s * (2.0 * k2 + 3.0 * s * k3)
        if rational:
            den = 1.0 + s * (k4 + s * (k5 + s * k6))
            dR = (dR * den - R * (k4 + s * (2.0 * k5 + 3.0 * s * k6))) / (den * den)
            R = R / den
        xy = xa * ya
        ex = xa * R + 2.0 * p1 * xy + p2 * (s + 2.0 * xa * xa) - xda
        ey = ya * R + p1 * (s + 2.0 * ya * ya) + 2.0 * p2 * xy - yda
        return ex, ey, R, dR, xy

    def step(xa, ya, ex, ey, R, dR, xy):
        a = R + 2.0 * xa * xa * dR + 2.0 * p1 * ya + 6.0 * p2 * xa
        b = 2.0 * xy * dR + 2.0 * p1 * xa + 2.0 * p2 * ya
        d = R + 2.0 * ya * ya * dR + 6.0 * p1 * ya + 2.0 * p2 * xa
        det = a * d - b * b
        return xa - (d * ex - b * ey) / det, ya - (a * ey - b * ex) / det

    return _newton_chunked(residual, step, xd, yd, x, y)


def _newton_chunked(residual, step, xd, yd, x, y):
    """Run a 2D Newton iteration (residual(x, y, xd, yd) -> (e_x, e_y, *aux); step(x, y, e_x, e_y, *aux) -> next
    (x, y)) over arrays of any shape, chunk by chunk; converged, stalled or non-finite pixels leave the iteration."""
    shape = np.shape(xd)
    xd, yd = np.asarray(xd, np.float64).ravel(), np.asarray(yd, np.float64).ravel()
    x, y = np.array(x, np.float64).ravel(), np.array(y, np.float64).ravel()
    for c0 in range(0, x.size, NEWTON_CHUNK):
        c1 = min(c0 + NEWTON_CHUNK, x.size)
        xa, ya, xda, yda = x[c0:c1], y[c0:c1], xd[c0:c1], yd[c0:c1]      # views: in-place updates land in x, y
        idx = None                                                      # chunk positions of xa (None: all)
        prev = None
        frozen = None
        for _ in range(MAX_ITERATIONS):
            ex, ey, *aux = residual(xa, ya, xda, yda)
            e = np.abs(ex) + np.abs(ey)
            stop = ~(e > CONVERGED)                                     # NaN stops too
            if prev is not None:
                stop |= (e >= prev) & (e <= STALLED)
            if frozen is not None:
                stop |= frozen
            n = int(np.count_nonzero(stop))
            if n == stop.size:
                break
            if n * 8 > stop.size:                                       # compact: iterate the rest only
                if idx is not None:
                    x[c0:c1][idx], y[c0:c1][idx] = xa, ya
                keep = ~stop
                idx = np.flatnonzero(keep) if idx is None else idx[keep]
                xa, ya, xda, yda, ex, ey, e = (a[keep] for a in (xa, ya, xda, yda, ex, ey, e))
                aux = [a[keep] for a in aux]
                frozen = None
            else:
                frozen = stop if n else None
            nx, ny = step(xa, ya, ex, ey, *aux)
            if frozen is None:
                xa[...], ya[...] = nx, ny
            else:
                np.copyto(xa, nx, where=~frozen)
                np.copyto(ya, ny, where=~frozen)
            prev = e
        if idx is not None:
            x[c0:c1][idx], y[c0:c1][idx] = xa, ya
    return x.reshape(shape), y.reshape(shape)


def _invert_fisheye(lens: Lens, xd, yd):
    """theta from theta_d = |(x_d, y_d)| by Newton (bounded to [0, max_theta]; a pixel stops as in _newton_chunked);
    ray = tan(theta) (x_d, y_d)/theta_d."""
    D = lens.D
    td = np.hypot(xd, yd)
    ok = td <= lens.max_distorted_radius
    target = np.minimum(td, lens.max_distorted_radius)
    theta0 = np.minimum(target, lens.max_theta_rad)
    top = lens.max_theta_rad

    def residual(t, zero, tgt, _):
        return fisheye_theta_d(D, t) - tgt, zero

    def step(t, zero, e, _):
        return np.clip(t - e / _fisheye_dtheta_d(D, t), 0.0, top), zero

    zeros = np.zeros(np.shape(target))
    theta, _ = _newton_chunked(residual, step, target, zeros, theta0, zeros)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(td > 0, np.tan(theta) / np.where(td > 0, td, 1.0), 1.0)
    ok &= theta < FISHEYE_MAX_THETA
    return xd * scale, yd * scale, ok


def range_factor(lens: Lens, u, v) -> np.ndarray:
    """|ray| = range / camera_z along the ray through pixel (u, v); NaN outside the valid domain."""
    rays, _, _ = unproject(lens, u, v)
    return np.linalg.norm(rays, axis=-1)


# ----- making a lens: valid domain and refusals ------------------------------------------------------------

def lens_from_calibration(cal: dict) -> Lens | None:
    """The Lens a manifest's calibration declares (projection, distortion with its valid_domain.fov_deg, K,
    image_size_px); None for the plain pinhole (projection pinhole, distortion none). RowbeamError if the declared
    lens does not build."""
    dist = cal.get("distortion", {})
    if cal.get("projection", "pinhole") == "pinhole" and dist.get("model", "none") == "none":
        return None
    model = "pinhole" if dist.get("model") == "none" else dist.get("model")
    W, H = cal["image_size_px"]
    fov = dist.get("valid_domain", {}).get("fov_deg")       # a fisheye's declared field of view bounds its domain
    return make_lens(LensSpec(model, tuple(dist.get("coefficients", ())), fov_deg=fov), cal["K"], W, H,
                     where="calibration.distortion")


def pixel_rays(lens_or_K, u, v) -> np.ndarray:
    """Rays (..., 3) = (x, y, 1) through pixel coords (u, v): through `lens_or_K` (a Lens, NaN outside its
    valid domain) or a pinhole 3x3 K."""
    if isinstance(lens_or_K, Lens):
        return unproject(lens_or_K, u, v)[0]
    K = np.asarray(lens_or_K, np.float64)
    xn, yn = (np.asarray(u, np.float64) - K[0, 2]) / K[0, 0], (np.asarray(v, np.float64) - K[1, 2]) / K[1, 1]
    return np.stack([xn, yn, np.ones_like(xn)], axis=-1)


def image_rays(lens_or_K, width: int, height: int) -> np.ndarray:
    """`pixel_rays` of every pixel centre of a width x height image, (H, W, 3): through a Lens of that image size
    its `unproject_grid` rays (solved once per lens and process, read-only), else computed here."""
    if isinstance(lens_or_K, Lens) and (lens_or_K.width, lens_or_K.height) == (width, height):
        return unproject_grid(lens_or_K)[0]
    return pixel_rays(lens_or_K, *pixel_grid(width, height))


def project_uv(lens_or_K, points_camera) -> tuple[np.ndarray, np.ndarray]:
    """(u, v) pixel coords of camera-frame points (..., 3) through a Lens or a pinhole K; NaN behind the camera
    or outside the valid domain."""
    if isinstance(lens_or_K, Lens):
        uv, _ = project(lens_or_K, points_camera)
        return uv[..., 0], uv[..., 1]
    K = np.asarray(lens_or_K, np.float64)
    X = np.asarray(points_camera, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return K[0, 0] * X[..., 0] / X[..., 2] + K[0, 2], K[1, 1] * X[..., 1] / X[..., 2] + K[1, 2]


def _radial_slope(model, D, r):
    """d(distorted radius)/d(r) along a ray (opencv: tangential terms off; fisheye: r = theta), NaN where the
    rational denominator is not positive (the opencv map is undefined there)."""
    r = np.asarray(r, np.float64)
    if model == "opencv":
        k4, k5, k6 = _opencv_coeffs(D)[5:]
        s = r * r
        R, dR = _opencv_radial(D, s)
        return np.where(1.0 + s * (k4 + s * (k5 + s * k6)) > 0, R + 2.0 * s * dR, np.nan)
    return _fisheye_dtheta_d(D, r)


def _first_turn(model, D, r_max) -> float:
    """Smallest r in (0, r_max] where the radial map stops increasing (inf if none): a dense scan of its slope
    (analytic), then bisection on the slope's sign."""
    r = np.concatenate([np.linspace(0.0, 1.0, 20001)[1:], np.geomspace(1.0, max(r_max, 1.0), 20001)[1:]])
    r = r[r <= r_max]
    with np.errstate(all="ignore"):
        bad = ~(_radial_slope(model, D, r) > 0)
    if not bad.any():
        return math.inf
    i = int(np.argmax(bad))
    lo, hi = (r[i - 1] if i >= 1 else 0.0), r[i]
    with np.errstate(all="ignore"):
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if _radial_slope(model, D, mid) > 0:
                lo = mid
            else:
                hi = mid
    return lo


def _border_pixels(W: int, H: int, n: int = 64):
    """Pixel coordinates along the image's outer edge (-0.5 .. W-0.5, -0.5 .. H-0.5), corners included."""
    us = np.linspace(-0.5, W - 0.5, n)
    vs = np.linspace(-0.5, H - 0.5, n)
    u = np.concatenate([us, us, np.full(n, -0.5), np.full(n, W - 0.5)])
    v = np.concatenate([np.full(n, -0.5), np.full(n, H - 0.5), vs, vs])
    return u, v


@dataclass(frozen=True)
class LensSpec:
    """A rig's `lens` block: model, D (OpenCV order), K (3x3 px, or None: from the Blender camera), fov_deg."""

    model: str = "pinhole"
    D: tuple = ()
    K: tuple | None = None
    fov_deg: float | None = None

    @property
    def needs_custom_camera(self) -> bool:
        """Rendered through the generated OSL camera (distortion, or a K the Blender camera does not carry)."""
        return self.model != "pinhole" or self.K is not None

    def to_json(self) -> dict:
        return {"model": self.model, "D": list(self.D), **({"K": [list(r) for r in self.K]} if self.K else {}),
                **({"fov_deg": self.fov_deg} if self.fov_deg is not None else {})}


def parse_lens_spec(raw: dict | None, where: str = "lens") -> LensSpec:
    """Check a rig `lens` block without the image (coefficient count, finiteness, K form, fov); RowbeamError."""
    if raw is None:
        return LensSpec()
    model = raw.get("model", "pinhole")
    if model not in MODELS:
        raise RowbeamError(f"{where}.model: {model!r} is not one of {', '.join(MODELS)}")
    D = tuple(raw.get("D", ()))
    names = COEFFICIENT_NAMES[model]
    if len(D) not in ALLOWED_COUNTS[model]:
        raise RowbeamError(f"{where}.D: model {model} takes {' or '.join(map(str, ALLOWED_COUNTS[model]))} "
                           f"coefficients ({', '.join(names) or 'none'}), got {len(D)}")
    for i, d in enumerate(D):
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d):
            raise RowbeamError(f"{where}.D[{i}] ({names[i]}): {d!r} is not a finite number")
    K = raw.get("K")
    if K is not None:
        Ka = np.asarray(K, dtype=object)
        if Ka.shape != (3, 3) or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                         and math.isfinite(x) for x in Ka.ravel()):
            raise RowbeamError(f"{where}.K: must be a 3x3 matrix of finite numbers")
        Kf = np.asarray(K, dtype=np.float64)
        if Kf[0, 1] != 0 or Kf[1, 0] != 0 or list(Kf[2]) != [0.0, 0.0, 1.0] or Kf[0, 0] <= 0 or Kf[1, 1] <= 0:
            raise RowbeamError(f"{where}.K: must be [[fx, 0, cx], [0, fy, cy], [0, 0, 1]] with fx, fy > 0 (zero skew)")
        K = tuple(tuple(float(x) for x in row) for row in Kf)
    fov = raw.get("fov_deg")
    if fov is not None:
        if model != "opencv_fisheye":
            raise RowbeamError(f"{where}.fov_deg: only the opencv_fisheye model declares a field of view")
        if not (math.isfinite(fov) and 0 < fov <= 180):
            raise RowbeamError(f"{where}.fov_deg: {fov} deg is beyond what the model reaches: OpenCV's fisheye "
                               "model sees z > 0 only (at most 180 deg)")
        fov = float(fov)
    return LensSpec(model, tuple(float(d) for d in D), K, fov)


def make_lens(spec: LensSpec, K, width: int, height: int, where: str = "lens") -> Lens:
    """A validated Lens for an image of width x height px with intrinsics K (spec.K wins when given).

    RowbeamError naming `where`.<field> (one line) for coefficients whose radial map turns back before
    reaching every pixel of the image (opencv), before the declared fov (fisheye), or inside the image
    (fisheye): the inverse would be ambiguous.
    """
    spec = parse_lens_spec(spec.to_json(), where)
    K = np.asarray(spec.K if spec.K is not None else K, dtype=np.float64)
    lens = _domain(spec.model, K, spec.D, width, height, spec.fov_deg)
    problem = _problem(lens)
    if problem:
        raise RowbeamError(f"{where}.{_culprit(spec.model, K, spec.D, width, height, spec.fov_deg)}: {problem}")
    return lens


def _domain(model, K, D, W, H, fov_deg) -> Lens:
    if model == "pinhole":
        return Lens(model, K, D, W, H)
    if model == "opencv":
        r_max = _first_turn(model, D, RADIUS_SEARCH_MAX)
        rd = _radial_map(model, D, np.array([r_max]))[0] if math.isfinite(r_max) else math.inf
        return Lens(model, K, D, W, H, max_radius=r_max, max_distorted_radius=float(rd))
    limit = FISHEYE_MAX_THETA if fov_deg is None else math.radians(fov_deg) / 2
    turn = _first_turn(model, D, FISHEYE_MAX_THETA)
    theta = min(limit, turn)
    rd = float(fisheye_theta_d(D, theta))
    return Lens(model, K, D, W, H, max_theta_rad=theta, max_distorted_radius=rd, fov_deg=fov_deg,
                notes={"turn_rad": turn})


def _problem(lens: Lens) -> str | None:
    """Why the lens cannot render its image unambiguously (None: it can)."""
    if lens.model == "pinhole":
        return None
    with np.errstate(all="ignore"):
        return _problem_of(lens)


def _problem_of(lens: Lens) -> str | None:
    u, v = _border_pixels(lens.width, lens.height)
    xd, yd = distorted_normalized(lens, u, v)
    corner_rd = float(np.hypot(xd, yd).max())
    if lens.model == "opencv":
        if not math.isfinite(lens.max_radius) and _opencv_coeffs(lens.D)[2:4] == (0.0, 0.0):
            return None
        # every border pixel needs a preimage inside the monotonic radius (the radial map is then one-to-one
        # over the image); with tangential terms the 2D map must also keep a positive Jacobian there
        x, y = _invert_opencv(lens.D, xd, yd)
        fx, fy = opencv_distort(lens.D, x, y)
        res = np.hypot(fx - xd, fy - yd) * lens.K[0, 0]
        r = np.hypot(x, y)
        gu, gv = np.meshgrid(np.linspace(-0.5, lens.width - 0.5, 65), np.linspace(-0.5, lens.height - 0.5, 65))
        gx, gy = _invert_opencv(lens.D, *distorted_normalized(lens, gu, gv))
        a, b, c, d = _opencv_jacobian(lens.D, gx, gy)
        det = a * d - b * c
        if not (np.all(res < 1e-6) and np.all(r <= lens.max_radius) and np.all(np.isfinite(det) & (det > 0))):
            peak = lens.max_distorted_radius * lens.K[0, 0]
            return (f"the distortion is not monotonic inside the image: the radial map turns back at "
                    f"{peak:.6g} px from the principal point (undistorted radius {lens.max_radius:.6g}), the "
                    f"image reaches {corner_rd * lens.K[0, 0]:.6g} px; a pixel would have two rays")
        return None
    turn = lens.notes["turn_rad"]
    if lens.fov_deg is not None and turn < math.radians(lens.fov_deg) / 2:
        return (f"the fisheye map theta_d(theta) turns back at theta = {math.degrees(turn):.6g} deg, before "
                f"the declared fov_deg/2 = {lens.fov_deg / 2:.6g} deg: the model cannot reach that field of view")
    if turn < FISHEYE_MAX_THETA and corner_rd > lens.max_distorted_radius and lens.fov_deg is None:
        return (f"the fisheye map theta_d(theta) turns back at theta = {math.degrees(turn):.6g} deg inside the "
                f"image (distorted radius {lens.max_distorted_radius * lens.K[0, 0]:.6g} px < the image's "
                f"{corner_rd * lens.K[0, 0]:.6g} px); a pixel would have two rays")
    return None


def _culprit(model, K, D, W, H, fov_deg) -> str:
    """The coefficient whose removal makes the lens usable (first in OpenCV order), else `D`."""
    names = COEFFICIENT_NAMES[model]
    for i, d in enumerate(D):
        if d == 0.0:
            continue
        trial = D[:i] + (0.0,) + D[i + 1:]
        if _problem(_domain(model, K, trial, W, H, fov_deg)) is None:
            return f"D[{i}] ({names[i]})"
    return "D"
