"""Per-event invariants of a camera event: calibration, timing, depth products, normals, IDs."""
from __future__ import annotations

import numpy as np

from . import qa_profile as tol
from .camera_model import BlenderCameraParams, intrinsics_from_blender, normalized
from .errors import RowbeamError
from .frames import is_rigid, rigid_mask
from .lens import LensSpec, lens_from_calibration, unproject_grid
from .label_checks import check_ids, check_validity
from .sample_identity import rgb_seed
from .timing import RollingShutterTiming


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
    check_validity(arrays, ("camera_z", "range", "normal_geometric", "normal_shading"), add)
    lens = _manifest_lens(cal, K, add)
    if lens is None:                                       # x_n (1, W) and y_n (H, 1) broadcast over the image
        xn, yn = normalized(K, np.arange(W, dtype=np.float64)[None, :], np.arange(H, dtype=np.float64)[:, None])
        factor = np.sqrt(1.0 + xn * xn + yn * yn)          # range / camera_z on each pixel-centre ray
    else:                                                  # the ray through the lens: (x, y, 1), NaN outside the domain
        rays, in_domain, _ = unproject_grid(lens)          # solved once per lens and process (contracts.lens)
        xn, yn = rays[..., 0], rays[..., 1]
        factor = np.linalg.norm(rays, axis=-1)
        outside = int(np.count_nonzero((valid == 1) & ~in_domain))
        add("lens_valid_domain", outside == 0,
            f"{outside} valid pixels lie outside the lens's valid domain" if outside else
            f"no valid pixel outside the {lens.model} valid domain ({int((~in_domain).sum())} pixels outside)",
            pixels_outside_domain=int((~in_domain).sum()))
    _check_z_range(factor, valid, arrays, add)
    _check_normals(xn, yn, factor, valid, arrays, add)
    check_ids(manifest, arrays, add)
    _check_verification(manifest, add)
    if "rgb" in arrays:
        finite = bool(np.isfinite(arrays["rgb"]).all())
        add("rgb_finite", finite, "rgb has non-finite values" if not finite else "rgb finite")
        _check_rgb_seed(manifest, add)


def manifest_lens(cal: dict):
    """The Lens a camera manifest's calibration declares (contracts.lens), None for a plain pinhole or an unusable
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


def _check_z_range(factor, valid, arrays, add):
    hit = (valid == 1) & np.isfinite(arrays["camera_z"]) & np.isfinite(arrays["range"])
    expected = arrays["camera_z"] * factor
    resid = np.abs(arrays["range"] - expected)
    excess = resid - tol.Z_RANGE_REL_TOL * np.abs(expected)
    n_bad = int(np.count_nonzero(hit & (excess > tol.Z_RANGE_ABS_TOL)))
    worst = float(np.max(resid, where=hit, initial=0.0))
    add("camera_z_range", n_bad == 0,
        f"range != camera_z*sqrt(1+x_n^2+y_n^2) at {n_bad} pixels (worst {worst:.3g} m)" if n_bad else
        "range = camera_z*sqrt(1+x_n^2+y_n^2) at every valid pixel", worst_residual_m=worst)


def _check_normals(xn, yn, factor, valid, arrays, add):
    hit = valid == 1
    for name in ("normal_geometric", "normal_shading"):
        if name not in arrays:
            continue
        n = arrays[name]
        sq = np.einsum("hwc,hwc->hw", n, n)         # |n|^2; sqrt is monotone: the worst | |n| - 1 | is at its extremes
        use = hit & np.isfinite(sq)
        lo, hi = np.min(sq, where=use, initial=np.inf), np.max(sq, where=use, initial=-np.inf)
        worst = float(max(np.sqrt(hi) - 1.0, 1.0 - np.sqrt(lo), 0.0)) if use.any() else 0.0
        add(f"{name}_unit", worst <= tol.NORMAL_UNIT_TOL,
            f"{name} deviates from unit length by {worst:.3g}" if worst > tol.NORMAL_UNIT_TOL
            else f"{name} is unit length", worst_length_error=worst)
    if "normal_geometric" in arrays:
        n = arrays["normal_geometric"]
        cos = (n[..., 0] * xn + n[..., 1] * yn + n[..., 2]) / factor
        away = hit & (cos > tol.GEOMETRIC_FACING_TOL)
        n_away = int(np.count_nonzero(away))
        add("normal_geometric_facing", n_away == 0,
            f"geometric normal faces away from the camera at {n_away} pixels" if n_away else
            "geometric normal faces the camera at every valid pixel",
            worst_cos=float(np.max(cos, where=hit, initial=-1.0)))


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
