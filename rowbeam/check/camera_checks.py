"""Per-event invariants of a camera event: calibration, timing, depth products, normals, IDs."""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from rowbeam.model import qa_profile as tol
from rowbeam.bundle.arrays import channel_planes
from rowbeam.model.camera_model import BlenderCameraParams, intrinsics_from_blender, normalized
from rowbeam.util.errors import RowbeamError
from rowbeam.model.frames import is_rigid, rigid_mask
from rowbeam.model.lens import LensSpec, lens_from_calibration, unit_ray_grid, unproject_grid
from rowbeam.check.coverage_checks import check_label_coverage
from rowbeam.check.layer_checks import check_surface_layers
from rowbeam.check.label_checks import check_ids, check_validity, row_blocks
from rowbeam.model.sample_identity import rgb_seed
from rowbeam.model.timing import RollingShutterTiming
from rowbeam.sensors import sensor_hook
from rowbeam.sensors.camera import CAMERA


@sensor_hook(CAMERA, "check_event")
def check_camera_event(manifest: dict, arrays: dict, add) -> None:
    """Run every camera invariant; `add(name, ok, message, **values)` records each result.

    `arrays` holds the decoded payloads that passed integrity checks; an invariant whose
    inputs are missing is not run (the missing payload already failed).
    """
    cal = manifest["calibration"]
    K = np.array(cal["K"], dtype=np.float64)
    W, H = cal["image_size_px"]
    _check_intrinsics(cal, K, add)
    _check_timing(manifest["event"], arrays, add)
    _check_poses(manifest, arrays, add)
    if not {"valid", "camera_z", "range"} <= arrays.keys():
        return
    valid = arrays["valid"]
    clean = check_validity(arrays, ("camera_z", "range", "normal_geometric", "normal_shading"), add)
    lens = _manifest_lens(cal, K, add)
    rays = ray_grid(K, W, H, lens)
    if lens is not None:
        outside = int(np.count_nonzero((valid == 1) & ~rays.in_domain))
        add("lens_valid_domain", outside == 0,
            f"{outside} valid pixels lie outside the lens's valid domain" if outside else
            f"no valid pixel outside the {lens.model} valid domain ({rays.outside} pixels outside)",
            pixels_outside_domain=rays.outside)
    clean = nan_skipping(clean, rays, valid)
    _check_z_range(rays.factor, valid, arrays, add, clean)
    _check_normals(rays.xn, rays.yn, rays.factor, valid, arrays, add, clean, rays.f32)
    check_ids(manifest, arrays, add)
    _check_verification(manifest, add)
    if "rgb" in arrays:
        finite = bool(np.isfinite(arrays["rgb"]).all())
        add("rgb_finite", finite, "rgb has non-finite values" if not finite else "rgb finite")
        _check_rgb_seed(manifest, add)
        check_label_coverage(manifest, arrays, add)
    check_surface_layers(manifest, arrays, add)


# The facing test of a clean normal image first runs in float32, then recomputes in float64 only the pixels that
# could decide its count or its maximum. Bound: the float32 n . ray / F (rays cast to float32, five rounded
# operations) differs from the float64 value by at most 6u (|n_x x_n| + |n_y y_n| + |n_z|) / F <= 6u |n| |ray| / F
# (Cauchy-Schwarz; u = 2^-24, the float64 value's own error ~1e-15 of that), and |n| <= sqrt(max |n|^2)(1 + 2u);
# F = |ray| (RayGrid.factor, float64, within a few 1e-16), so FACING_EPS = 16u sqrt(max |n|^2) bounds it with
# margin 2.6.
FACING_EPS_U = 16.0 * 2.0 ** -24
FACING_EPS_ABS = 2.0 ** -120      # float32 subnormal rounding, a few 2^-150 per operation (F = |ray| >= 1)
F32_SAFE = 2.0 ** 30              # |x_n|, |y_n| and |n| below this: no float32 product or sum overflows


@dataclass(frozen=True)
class RayGrid:
    """The ray through every pixel centre of one camera (K, size, lens), in the camera frame (x_n, y_n, 1).

    xn, yn: normalized coordinates, broadcastable to (H, W) ((1, W) and (H, 1) for a plain pinhole);
    factor: |(x_n, y_n, 1)| = range / camera_z, (H, W) float64; in_domain: (H, W) bool, the lens's valid
    domain (None for a plain pinhole); outside: pixels outside it; finite: every ray is finite (NaN rays lie
    outside a lens domain); f32: (x_n, y_n, factor) as float32 for the facing test's estimate (_normal_stats), None
    when a finite |x_n| or |y_n| exceeds F32_SAFE or one is infinite. Read-only: one grid is shared by every check
    of the same camera."""

    xn: np.ndarray
    yn: np.ndarray
    factor: np.ndarray
    in_domain: np.ndarray | None
    outside: int
    finite: bool
    f32: tuple | None = None


_RAY_GRID: dict = {}          # {camera key: RayGrid}, the last camera only (memory: 8-33 bytes per pixel)


def _camera_key(K: np.ndarray, W: int, H: int, lens) -> tuple:
    """Everything the ray grid depends on: K, image size and (for a lens) every compared field of the Lens."""
    lens_key = None if lens is None else tuple(
        (v.tobytes() if isinstance(v, np.ndarray) else v)
        for v in (getattr(lens, f.name) for f in fields(lens) if f.compare))
    return K.tobytes(), int(W), int(H), lens_key


def ray_grid(K: np.ndarray, W: int, H: int, lens=None) -> RayGrid:
    """The RayGrid of a W x H camera with intrinsics K (float64 3x3) and `lens` (None: plain pinhole), computed
    once per camera in this process (a multi-event export or check reuses it)."""
    key = _camera_key(K, W, H, lens)
    grid = _RAY_GRID.get(key)
    if grid is not None:
        return grid
    if lens is None:                                       # x_n (1, W) and y_n (H, 1) broadcast over the image
        xn, yn = normalized(K, np.arange(W, dtype=np.float64)[None, :], np.arange(H, dtype=np.float64)[:, None])
        factor = np.sqrt(1.0 + xn * xn + yn * yn)          # range / camera_z on each pixel-centre ray
        in_domain, outside = None, 0
    else:                                                  # the ray through the lens: (x, y, 1), NaN outside the domain
        rays, in_domain, _ = unproject_grid(lens)          # solved once per lens and process (rowbeam.model.lens)
        xn, yn = rays[..., 0], rays[..., 1]
        factor = unit_ray_grid(lens)[1]                    # |ray|, kept with the grid (shared with the exporter)
        outside = int((~in_domain).sum())
    safe = not any(np.count_nonzero(np.abs(a) > F32_SAFE) for a in (xn, yn))     # inf too; NaN compares False
    f32 = tuple(a.astype(np.float32) for a in (xn, yn, factor)) if safe else None
    for a in (xn, yn, factor, in_domain, *(f32 or ())):
        if a is not None:
            a.flags.writeable = False
    grid = RayGrid(xn, yn, factor, in_domain, outside, bool(np.isfinite(factor).all()), f32)
    _RAY_GRID.clear()
    _RAY_GRID[key] = grid
    return grid


def nan_skipping(clean: set, rays: RayGrid, valid: np.ndarray) -> set:
    """The labels of `clean` (NaN exactly off the valid pixels) whose NaN-skipping reductions are exact: all of them
    when the ray of every valid pixel is finite (NaN rays lie outside a lens domain), else none."""
    if rays.finite or (rays.in_domain is not None and not np.count_nonzero((valid == 1) & ~rays.in_domain)):
        return clean
    return set()


def manifest_lens(cal: dict):
    """The Lens a camera manifest's calibration declares (rowbeam.model.lens), None for a plain pinhole or an unusable
    lens (the checker reports that one)."""
    return _manifest_lens(cal, np.array(cal["K"], dtype=np.float64), lambda *a, **k: None)


def _manifest_lens(cal, K, add):
    """The Lens the manifest declares (None: plain pinhole); a lens that does not build is a failed check."""
    try:
        lens = lens_from_calibration(cal)
    except (RowbeamError, TypeError, ValueError) as exc:
        add("lens_model", False, f"the declared lens is unusable: {exc}")
        return None
    if lens is None:
        return None
    dist = cal["distortion"]
    model = lens.model
    declared = dist.get("valid_domain", {})
    want = lens.to_manifest()["valid_domain"]
    ok = cal.get("projection") == model and all(_same(declared.get(k), v) for k, v in want.items() if k != "definition")
    add("lens_model", ok, f"{model} lens: K, D and valid domain consistent" if ok else
        f"projection {cal.get('projection')!r} / valid domain {declared} disagree with the {model} lens "
        f"(expected {want})")
    return lens


def _same(a, b) -> bool:
    """Declared and recomputed domain values agree (None = unbounded); numbers to 1e-9 relative (another numpy
    may round the turning-point search differently in the last bits)."""
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return a == b
    return bool(np.isclose(a, b, rtol=1e-9, atol=0.0))


def check_lens_against_rig(manifest: dict, spec: LensSpec, add) -> None:
    """calibration model, D and (when the rig gives it) K equal the bundle rig's lens."""
    cal = manifest["calibration"]
    dist = cal.get("distortion", {})
    want_model = "none" if spec.model == "pinhole" else spec.model
    problems = []
    if cal.get("projection") != spec.model or dist.get("model") != want_model:
        problems.append(f"model {cal.get('projection')!r} / {dist.get('model')!r} vs the rig's {spec.model!r}")
    if list(dist.get("coefficients", [])) != list(spec.D):
        problems.append(f"D {dist.get('coefficients')} vs the rig's {list(spec.D)}")
    declared_fov = dist.get("valid_domain", {}).get("fov_deg")
    if declared_fov != spec.fov_deg:
        problems.append(f"fov_deg {declared_fov} vs the rig's {spec.fov_deg}")
    if spec.K is not None and np.abs(np.array(cal["K"], np.float64) - np.array(spec.K)).max() != 0:
        problems.append("K differs from the rig's lens.K")
    if spec.K is None and cal.get("blender_camera") is None:
        problems.append("K is not derived from a Blender camera and the rig gives none")
    add("lens_rig", not problems, "; ".join(problems) if problems else
        f"{spec.model} K/D as the bundle's rig says", model=spec.model)


def _check_rgb_seed(manifest, add):
    """The RGB render's Cycles seed is the one derived from the sample id (independent noise per event)."""
    declared = manifest.get("method", {}).get("rgb_render", {}).get("seed")
    expected = rgb_seed(manifest["sample_id"])
    add("rgb_seed", declared == expected,
        f"rgb seed {declared!r} is not {expected} derived from sample id {manifest['sample_id']!r}"
        if declared != expected else f"rgb seed {expected} derived from the sample id")


def _check_intrinsics(cal, K, add):
    bc = cal.get("blender_camera")
    if bc is None or cal.get("K_source") == "rig":
        return
    try:
        params = BlenderCameraParams.from_json(bc)
    except TypeError as exc:
        add("intrinsics", False, f"calibration.blender_camera is malformed ({exc})")
        return
    K_ref = intrinsics_from_blender(params)
    err = float(np.abs(K_ref - K).max())
    W, H = cal["image_size_px"]
    size_ok = [params.resolution_x * params.resolution_percentage // 100,
               params.resolution_y * params.resolution_percentage // 100] == [W, H]
    add("intrinsics", err < 1e-9 and size_ok,
        f"K differs from the Blender camera by {err:.3g} px" if err >= 1e-9 else
        ("image_size_px disagrees with the Blender resolution" if not size_ok else "K matches the Blender camera"),
        max_abs_error_px=err)


def _check_timing(event, arrays, add):
    if "row_time_ns" not in arrays:
        return
    timing = RollingShutterTiming.from_manifest(event)
    expected = timing.row_reference_times_ns()
    got = arrays["row_time_ns"]
    if got.shape != expected.shape:
        add("row_times", False, f"row_time_ns has shape {got.shape}, timing model gives {expected.shape}")
        return
    bad = np.flatnonzero(got != expected)
    add("row_times", bad.size == 0,
        f"row_time_ns differs from {event['timing_model']} at {bad.size} rows (first row {bad[0]}: "
        f"{int(got[bad[0]])} vs {int(expected[bad[0]])})" if bad.size else
        f"row times equal {event['timing_model']}", max_abs_error_ns=int(np.abs(got - expected).max()))
    ref_ok = event["reference_time_ns"] == timing.reference_time_ns()
    add("reference_time", ref_ok, "reference_time_ns equals the timing model" if ref_ok else
        f"reference_time_ns {event['reference_time_ns']} != {timing.reference_time_ns()}")


def _check_poses(manifest, arrays, add):
    T = manifest["calibration"]["T_camera_world"]
    ok = is_rigid(np.array(T["matrix"]), tol.RIGID_TOL) and T.get("time_ns") == manifest["event"]["reference_time_ns"]
    add("reference_pose", ok, "T_camera_world is rigid and stamped with the reference time" if ok else
        "calibration.T_camera_world is not rigid or not stamped with event.reference_time_ns")
    if "row_T_world_camera" in arrays:
        bad = np.flatnonzero(~rigid_mask(arrays["row_T_world_camera"], tol.RIGID_TOL))
        add("row_poses_rigid", bad.size == 0, f"{bad.size} row poses are not rigid (first row {bad[0]})" if bad.size
            else "every row pose is rigid")


def _rows(a: np.ndarray, rows: slice, H: int) -> np.ndarray:
    """Rows `rows` of an array broadcastable to (H, W): a (1, W) or (H, 1)-style array keeps its single row."""
    return a[rows] if a.shape[0] == H else a


def _check_z_range(factor, valid, arrays, add, clean=frozenset()):
    """range = camera_z * factor at every valid pixel (float64, block by block). clean: the float labels that are
    finite exactly where valid and NaN elsewhere (check_validity); when both inputs are, the residual is NaN exactly
    off the valid pixels and the NaN-skipping reductions give the masked ones' values without building the mask."""
    cz, rng = arrays["camera_z"], arrays["range"]
    H = cz.shape[0]
    fast = {"camera_z", "range"} <= clean
    n_bad, worsts = 0, []
    for rows in row_blocks(*cz.shape[:2]):
        expected = cz[rows] * _rows(factor, rows, H)
        resid = np.subtract(rng[rows], expected)
        np.abs(resid, out=resid)                           # |range - expected|
        np.abs(expected, out=expected)
        expected *= tol.Z_RANGE_REL_TOL
        excess = np.subtract(resid, expected, out=expected)    # resid - REL * |expected|
        if fast:                                           # NaN off the valid pixels compares False / is skipped
            n_bad += int(np.count_nonzero(excess > tol.Z_RANGE_ABS_TOL))
            worsts.append(np.fmax.reduce(resid, axis=None, initial=0.0))
        else:
            hit = (valid[rows] == 1) & np.isfinite(cz[rows]) & np.isfinite(rng[rows])
            n_bad += int(np.count_nonzero(hit & (excess > tol.Z_RANGE_ABS_TOL)))
            worsts.append(np.max(resid, where=hit, initial=0.0))
    worst = float(np.max(worsts, initial=0.0))             # a NaN residual on a valid pixel stays NaN
    add("camera_z_range", n_bad == 0,
        f"range != camera_z*sqrt(1+x_n^2+y_n^2) at {n_bad} pixels (worst {worst:.3g} m)" if n_bad else
        "range = camera_z*sqrt(1+x_n^2+y_n^2) at every valid pixel", worst_residual_m=worst)


def squared_norm(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """|n|^2 = (x^2 + y^2) + z^2 per pixel of the channel planes (x, y, z) of a float32 normal image, summed in that
    order in float32 (the order numpy's einsum("hwc,hwc->hw") takes on the stacked array; tested equal). sqrt is
    monotone: the worst | |n| - 1 | of an image is at the extremes of |n|^2."""
    sq = x * x
    sq += y * y
    sq += z * z
    return sq


def _facing_exact(xb, yb, zb, X, Y, F, idx) -> np.ndarray:
    """float64 n . (X, Y, 1) / F at the flat pixel indices idx of a block: the operations of the whole-block
    computation, element by element (the same bits)."""
    shape = xb.shape
    r, c = np.divmod(idx, shape[1])
    cos = xb.reshape(-1)[idx] * np.broadcast_to(X, shape)[r, c]
    cos += yb.reshape(-1)[idx] * np.broadcast_to(Y, shape)[r, c]
    cos += zb.reshape(-1)[idx]
    cos /= np.broadcast_to(F, shape)[r, c]
    return cos


def _facing_clean_block(xb, yb, zb, X, Y, F, f32, hi):
    """(pixels with cos > tol, max(-1, largest cos)) of one block of a clean normal image (NaN exactly off the valid
    pixels), cos = n . (X, Y, 1) / F in float64 as the plain computation gives it. f32: the block rows of
    RayGrid.f32; hi: the block's max |n|^2. Every pixel not recomputed has a float32 estimate below
    min(tol, top) - eps: its float64 cos is below tol and below the block's largest (within eps of the float32 top)."""
    X32, Y32, F32 = f32
    eps = FACING_EPS_U * float(np.sqrt(hi)) + FACING_EPS_ABS
    e = xb * X32
    e += yb * Y32
    e += zb
    e /= F32
    top = float(np.fmax.reduce(e, axis=None, initial=-np.inf))
    idx = np.flatnonzero(e >= min(tol.GEOMETRIC_FACING_TOL - eps, top - 2.0 * eps))
    cos = _facing_exact(xb, yb, zb, X, Y, F, idx)
    return int(np.count_nonzero(cos > tol.GEOMETRIC_FACING_TOL)), np.fmax.reduce(cos, axis=None, initial=-1.0)


def _normal_stats(planes, hit, clean: bool, rays=None, f32=None):
    """One read of the normal image with channel planes `planes` (x, y, z), row block by row block: ((min, max) of
    |n|^2 over the valid pixels where it is finite, None when there is none; facing), where facing, given
    rays = (x_n, y_n, |ray|), is (valid pixels whose n . ray / |ray| > tol, the largest n . ray / |ray| over valid
    pixels, float64) and None without rays. Contiguous planes (rowbeam.bundle.arrays.channel_planes of a DecodedArrays)
    are read at full speed; views of a stacked image's channels give the same values.
    clean: n is NaN exactly off the valid pixels (then the NaN-skipping reductions are the masked ones, unless
    |n|^2 overflowed to inf: then the masked extremes are computed). f32: RayGrid.f32 of the rays (then a clean
    image's facing is estimated in float32 and recomputed in float64 where it could decide; same results)."""
    x, y, z = planes
    H = x.shape[0]
    los, his, n_away, worsts = [], [], 0, []
    for rows in row_blocks(*x.shape[:2]):
        xb, yb, zb = x[rows], y[rows], z[rows]
        sq = squared_norm(xb, yb, zb)
        if clean:
            los.append(np.fmin.reduce(sq, axis=None))
            his.append(np.fmax.reduce(sq, axis=None))
        else:
            use = hit[rows] & np.isfinite(sq)
            los.append(np.min(sq, where=use, initial=np.inf))
            his.append(np.max(sq, where=use, initial=-np.inf))
        if rays is None:
            continue
        xn, yn, factor = rays
        if clean and f32 is not None and his[-1] <= F32_SAFE ** 2:          # float32 first, exact where it matters
            away, worst = _facing_clean_block(xb, yb, zb, _rows(xn, rows, H), _rows(yn, rows, H),
                                              _rows(factor, rows, H), [_rows(a, rows, H) for a in f32], his[-1])
            n_away += away
            worsts.append(worst)
            continue
        cos = xb * _rows(xn, rows, H)                       # (n . (x_n, y_n, 1)) / |(x_n, y_n, 1)|, float64
        cos += yb * _rows(yn, rows, H)
        cos += zb
        cos /= _rows(factor, rows, H)
        if clean:                                          # NaN exactly off the valid pixels
            n_away += int(np.count_nonzero(cos > tol.GEOMETRIC_FACING_TOL))
            worsts.append(np.fmax.reduce(cos, axis=None, initial=-1.0))
        else:
            n_away += int(np.count_nonzero(hit[rows] & (cos > tol.GEOMETRIC_FACING_TOL)))
            worsts.append(np.max(cos, where=hit[rows], initial=-1.0))
    facing = None if rays is None else (n_away, float(np.max(worsts, initial=-1.0)))
    if clean:
        lo, hi = np.fmin.reduce(los), np.fmax.reduce(his)
        if np.isfinite(hi):                                # no overflow to inf, at least one valid pixel
            return (lo, hi), facing
        return _normal_stats(planes, hit, False)[0], facing
    lo, hi = min(los), max(his)                            # finite values only: no NaN to propagate
    return (None if hi == -np.inf else (lo, hi)), facing


def _check_normals(xn, yn, factor, valid, arrays, add, clean=frozenset(), f32=None):
    """Unit length of both normals; the geometric normal faces the camera (n . ray <= tol) at every valid pixel.
    clean as in _check_z_range; f32: RayGrid.f32 of (xn, yn, factor), or None (float64 only)."""
    hit = valid == 1
    facing = None
    for name in ("normal_geometric", "normal_shading"):
        if name not in arrays:
            continue
        geometric = name == "normal_geometric"
        ext, stats = _normal_stats(channel_planes(arrays, name), hit, name in clean,
                                   (xn, yn, factor) if geometric else None, f32)
        facing = stats if geometric else facing
        worst = 0.0 if ext is None else float(max(np.sqrt(ext[1]) - 1.0, 1.0 - np.sqrt(ext[0]), 0.0))
        add(f"{name}_unit", worst <= tol.NORMAL_UNIT_TOL,
            f"{name} deviates from unit length by {worst:.3g}" if worst > tol.NORMAL_UNIT_TOL
            else f"{name} is unit length", worst_length_error=worst)
    if facing is not None:
        n_away, worst_cos = facing
        add("normal_geometric_facing", n_away == 0,
            f"geometric normal faces away from the camera at {n_away} pixels" if n_away else
            "geometric normal faces the camera at every valid pixel", worst_cos=worst_cos)


def _check_deformation(manifest, add):
    """Deforming objects: the recorded interpolation error between Cycles' motion steps is within tolerance."""
    block = manifest["method"].get("deformation")
    if not block:
        return
    over = [o["name"] for o in block["objects"] if not o.get("reason") and
            not (o["max_error_m"] <= tol.DEFORM_MAX_ERROR_M and o["max_error_px"] <= tol.DEFORM_MAX_ERROR_PX)]
    worst_m = max((o.get("max_error_m") or 0.0 for o in block["objects"]), default=0.0)
    worst_px = max((o.get("max_error_px") or 0.0 for o in block["objects"]), default=0.0)
    add("deformation_motion_steps", not over,
        f"deformation interpolated between motion steps exceeds {tol.DEFORM_MAX_ERROR_M} m / "
        f"{tol.DEFORM_MAX_ERROR_PX} px for {', '.join(over)}" if over else
        f"deformation between motion steps within {tol.DEFORM_MAX_ERROR_M} m / {tol.DEFORM_MAX_ERROR_PX} px "
        f"(worst {worst_m:.3g} m, {worst_px:.3g} px)", severity="warn", worst_m=worst_m, worst_px=worst_px)


def _check_verification(manifest, add):
    _check_deformation(manifest, add)
    ver = manifest["method"]["verification"]
    if ver.get("rows_checked", 0) == 0:
        add("exact_reference", True, "no rows were verified against an exact reference", severity="warn")
        return
    r = ver["worst_range_error_m"]
    px = ver["worst_silhouette_error_px"]
    ok = r <= tol.VERIFY_MAX_RANGE_ERROR_M and px <= tol.VERIFY_MAX_SILHOUETTE_ERROR_PX
    add("exact_reference", ok,
        f"labels vs exact per-row reference: worst range error {r:.3g} m, worst silhouette error {px:.3g} px"
        + ("" if ok else f" (limits {tol.VERIFY_MAX_RANGE_ERROR_M} m, {tol.VERIFY_MAX_SILHOUETTE_ERROR_PX} px)"),
        worst_range_error_m=r, worst_silhouette_error_px=px)


@sensor_hook(CAMERA, "check_rig_calibration")
def check_camera_rig(manifest: dict, sensor, add) -> None:
    """The event's lens calibration equals the bundle rig's camera `sensor` (check_lens_against_rig)."""
    check_lens_against_rig(manifest, sensor.lens, add)
