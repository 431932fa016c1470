"""Per-event invariants of a camera event: calibration, timing, depth products, normals, IDs."""
from __future__ import annotations

import numpy as np

from . import qa_profile as tol
from .camera_model import BlenderCameraParams, intrinsics_from_blender, normalized, pixel_grid
from .frames import is_rigid, rigid_mask
from .ontology import BACKGROUND_ID, VOID_ID
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
    _check_validity(arrays, add)
    u, v = pixel_grid(W, H)
    xn, yn = normalized(K, u, v)
    factor = np.sqrt(1.0 + xn * xn + yn * yn)          # range / camera_z on each pixel-centre ray
    _check_z_range(factor, valid, arrays, add)
    _check_normals(xn, yn, factor, valid, arrays, add)
    _check_ids(manifest, arrays, add)
    _check_verification(manifest, add)
    if "rgb" in arrays:
        finite = bool(np.isfinite(arrays["rgb"]).all())
        add("rgb_finite", finite, "rgb has non-finite values" if not finite else "rgb finite")


def _check_intrinsics(cal, K, add):
    bc = cal.get("blender_camera")
    if bc is None:
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


def _finite_nan(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(every channel finite, every channel NaN) per pixel."""
    if a.ndim == 2:
        return np.isfinite(a), np.isnan(a)
    finite, nan = np.isfinite(a[..., 0]), np.isnan(a[..., 0])
    for c in range(1, a.shape[-1]):
        finite &= np.isfinite(a[..., c])
        nan &= np.isnan(a[..., c])
    return finite, nan


def _check_validity(arrays, add):
    valid = arrays["valid"]
    values_ok = bool((valid <= 1).all())
    add("valid_values", values_ok, "valid holds values other than 0 and 1" if not values_ok else "valid is 0/1")
    hit = valid == 1
    miss = ~hit
    problems = []
    for name in ("camera_z", "range", "normal_geometric", "normal_shading"):
        if name not in arrays:
            continue
        a = arrays[name]
        finite, nan = _finite_nan(a)
        n_bad_valid = int(np.count_nonzero(hit & ~finite))
        n_bad_invalid = int(np.count_nonzero(miss & ~nan))
        if n_bad_valid:
            problems.append(f"{name}: {n_bad_valid} non-finite values where valid")
        if n_bad_invalid:
            problems.append(f"{name}: {n_bad_invalid} values where invalid (declared fill is NaN)")
        if a.ndim == 2:
            n_nonpos = int(np.count_nonzero(hit & finite & (a <= 0)))
            if n_nonpos:
                problems.append(f"{name}: {n_nonpos} non-positive distances where valid")
    if "instance_id" in arrays:
        background = arrays["instance_id"] == BACKGROUND_ID
        n_hit_invalid = int(np.count_nonzero(miss & ~background))
        n_valid_bg = int(np.count_nonzero(hit & background))
        if n_hit_invalid:
            problems.append(f"instance_id: {n_hit_invalid} pixels hit an object but are marked invalid")
        if n_valid_bg:
            problems.append(f"instance_id: {n_valid_bg} valid pixels have the background id")
    add("validity_consistency", not problems, "; ".join(problems) if problems else
        "depth, normals and ids agree with the validity plane", valid_fraction=float(hit.mean()))


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
        length_err = np.abs(np.sqrt(np.einsum("hwc,hwc->hw", n, n)) - 1.0)
        worst = float(np.max(length_err, where=hit & np.isfinite(length_err), initial=0.0))
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


def _check_ids(manifest, arrays, add):
    objects = manifest["objects"]
    by_index = {o["render_index"]: o for o in objects}
    ids = [o["id"] for o in objects]
    table_ok = len(by_index) == len(objects) and len(set(ids)) == len(ids)
    add("object_table", table_ok, "object table ids and render indices are unique" if table_ok else
        "object table has duplicate ids or render indices")
    if "instance_id" not in arrays:
        return
    instance = arrays["instance_id"]
    top = int(instance.max(initial=0))
    present = np.flatnonzero(np.bincount(instance.ravel())) if top < 1 << 24 else np.unique(instance)
    missing = [int(x) for x in present if x != BACKGROUND_ID and int(x) not in by_index]
    add("instance_ids_known", not missing, f"instance ids {missing[:5]} are not in the object table"
        if missing else "every instance id is in the object table")
    if "semantic_id" not in arrays:
        return
    size = max(by_index, default=0) + 1
    lut = np.full(size + 1, VOID_ID, dtype=np.uint32)      # last slot: ids outside the table
    lut[BACKGROUND_ID] = BACKGROUND_ID
    for idx, o in by_index.items():
        lut[idx] = o["class_id"]
    semantic = arrays["semantic_id"]
    n_bad = int(np.count_nonzero(lut[np.minimum(instance, size)] != semantic))
    add("semantic_matches_instance", n_bad == 0,
        f"semantic_id disagrees with the object table's class at {n_bad} pixels" if n_bad else
        "semantic_id equals the class of the instance at every pixel")
    known = {c["id"] for c in manifest["ontology"]["classes"]} | {BACKGROUND_ID, VOID_ID}
    classes = {o["class_id"] for o in objects} if n_bad == 0 else {int(c) for c in np.unique(semantic)}
    bad_cls = sorted(c for c in classes if c not in known)
    add("semantic_ids_known", not bad_cls, f"semantic ids {bad_cls[:5]} are not in the ontology"
        if bad_cls else "every semantic id is in the ontology")


def _check_verification(manifest, add):
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
