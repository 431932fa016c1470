"""Invariants of a flow pair (`rowbeam/flow@1`) against its two endpoint camera events."""
from __future__ import annotations

import numpy as np

from rowbeam.model import qa_profile as tol
from rowbeam.util.blocks import BLOCK, blockwise
from rowbeam.util.errors import RowbeamError
from rowbeam.check.event_points import camera_points, world_points
from rowbeam.model.frames import apply_per_row
from rowbeam.model.lens import lens_from_calibration, project_uv
from rowbeam.model.pixel_sampling import bilinear_corners, camera_z_at
from rowbeam.model.modalities import FLAG_NAMES

ENDPOINT_NEEDS = ("camera_z", "valid", "instance_id", "normal_geometric", "row_T_world_camera")
# The flow payloads each invariant reads (a payload missing from `arrays` failed its modality contract).
REPROJECT_NEEDS = {"flow_forward", "scene_flow_world", "flow_forward_dest_visible",
                   "flow_forward_correspondence_defined"}
CYCLE_NEEDS = {"flow_forward", "flow_backward", "flow_forward_dest_visible", "flow_backward_dest_visible"}


def check_flow(manifest: dict, arrays: dict, src: dict, dst: dict, add) -> None:
    """`src`/`dst`: decoded ENDPOINT_NEEDS arrays of the source and destination events."""
    K = np.array(manifest["calibration"]["K"])
    try:
        lens = lens_from_calibration(manifest["calibration"])
    except (RowbeamError, TypeError, ValueError) as exc:
        add("flow_lens", False, f"the declared lens is unusable: {exc}")
        return
    K = K if lens is None else lens           # what projects: pinhole K or the lens (rowbeam.model.lens)
    for direction, source_event in (("forward", src), ("backward", dst)):
        _check_flags(direction, arrays, source_event, add)
    _check_object_reasons(manifest, arrays, src, dst, add)
    if not REPROJECT_NEEDS <= arrays.keys():      # a payload that failed its contract is reported, not re-used
        return
    moved_z, landing = _reproject(K, arrays, src, dst, add)
    _check_depth_warp(manifest, arrays, src, dst, moved_z, landing, add)
    if CYCLE_NEEDS <= arrays.keys():
        _check_cycle(K, arrays, src, dst, add)


def _check_object_reasons(manifest, arrays, src, dst, add):
    """An object declared undefined in method.objects (with its reason) has no defined pixel in either direction."""
    undefined = [o for o in manifest["method"].get("objects", []) if o.get("correspondence") == "undefined"]
    bad = []
    for o in undefined:
        for direction, event in (("forward", src), ("backward", dst)):
            name = f"flow_{direction}_correspondence_defined"
            if name in arrays and np.any(arrays[name].astype(bool) & (event["instance_id"] == o["render_index"])):
                bad.append(f"{o['name']} ({direction})")
    if undefined or bad:
        add("flow_undefined_objects", not bad,
            f"objects declared undefined have defined pixels: {', '.join(bad)}" if bad else
            f"{len(undefined)} objects declared undefined (reason recorded) have no defined pixel",
            objects=len(undefined))


def _check_flags(direction, arrays, source_event, add):
    names = [f"flow_{direction}_{f}" for f in FLAG_NAMES]
    if not all(n in arrays for n in names) or f"flow_{direction}" not in arrays:
        return
    valid, in_bounds, visible, defined = (arrays[n].astype(bool) for n in names)
    problems = []
    if not np.array_equal(valid, source_event["valid"] == 1):
        problems.append("source_valid differs from the source event's valid plane")
    for child, parent, text in ((visible, in_bounds, "dest_visible without dest_in_bounds"),
                                (in_bounds, defined, "dest_in_bounds without correspondence_defined"),
                                (defined, valid, "correspondence_defined without source_valid")):
        n = int(np.count_nonzero(child & ~parent))
        if n:
            problems.append(f"{n} pixels {text}")
    flow = arrays[f"flow_{direction}"]
    finite = np.isfinite(flow).all(axis=-1)
    if not np.array_equal(finite, defined):
        problems.append(f"flow finite at {int(np.count_nonzero(finite != defined))} pixels where "
                        "correspondence_defined says otherwise")
    H, W = flow.shape[:2]
    ud = np.arange(W, dtype=np.float64) + flow[..., 0]               # pixel centre + flow, (H, W) float64
    vd = np.arange(H, dtype=np.float64)[:, None] + flow[..., 1]
    inside = (ud >= -0.5) & (ud < W - 0.5) & (vd >= -0.5) & (vd < H - 0.5)
    n = int(np.count_nonzero(defined & (inside != in_bounds)))
    if n:
        problems.append(f"dest_in_bounds disagrees with the flow's landing point at {n} pixels")
    add(f"flow_{direction}_flags", not problems, "; ".join(problems) if problems else
        f"{direction} flags nest (visible => in bounds => defined => source valid) and match the flow",
        defined_fraction=float(defined.mean()), visible_fraction=float(visible.mean()))


def _reproject(K, arrays, src, dst, add):
    """Source point + scene flow, seen by the destination camera at the landing row, must land at p + flow
    (point by point over the defined pixels, in blocks: rowbeam.util.blocks)."""
    defined = arrays["flow_forward_correspondence_defined"].astype(bool)
    H, W = defined.shape
    idx = np.flatnonzero(defined.ravel())
    world = world_points(K, src["camera_z"], src["row_T_world_camera"]).reshape(-1, 3)
    scene_flow, flow_all = arrays["scene_flow_world"].reshape(-1, 3), arrays["flow_forward"].reshape(-1, 2)
    T_cw = np.linalg.inv(dst["row_T_world_camera"])
    frames = "scene_flow_source_camera" in arrays
    if frames:
        R_cw = np.transpose(src["row_T_world_camera"][:, :3, :3], (0, 2, 1))
        sfc = arrays["scene_flow_source_camera"].reshape(-1, 3)

    def at_pixels(at):
        """(err px, moved z, landing u, v[, |R_cw scene_flow_world - scene_flow_source_camera| m]) of pixels `at`."""
        v, u = (x.astype(np.float64) for x in np.divmod(at, W))          # pixel centres
        d = scene_flow[at].astype(np.float64)
        flow = flow_all[at].astype(np.float64)
        landing = np.clip(v + flow[:, 1], 0.0, H - 1.0)
        r0 = np.minimum(np.floor(landing).astype(np.int64), H - 1)
        X = apply_per_row(T_cw, world[at] + d, r0, landing - r0)
        uu, vv = project_uv(K, X)
        out = np.hypot(uu - (u + flow[:, 0]), vv - (v + flow[:, 1])), X[:, 2], uu, vv
        if not frames:
            return out
        rotated = rotate_per_row(R_cw, np.nan_to_num(d), at // W)            # NaN -> 0 (a no-op where finite)
        return *out, np.abs(rotated - sfc[at].astype(np.float64))
    per_pixel = blockwise(at_pixels, idx)
    err, z, uu, vv = per_pixel[:4]
    worst = float(err.max(initial=0.0))
    add("flow_matches_scene_flow", worst <= tol.FLOW_REPROJECTION_TOL_PX,
        f"source point + scene_flow_world projects up to {worst:.3g} px away from pixel + flow_forward"
        if worst > tol.FLOW_REPROJECTION_TOL_PX else
        "source point + scene_flow_world, seen at the landing row, lands at pixel + flow_forward", worst_px=worst)
    if frames:
        worst_c = float(per_pixel[4].max(initial=0.0))
        add("scene_flow_frames", worst_c <= tol.FLOW_SCENE_FLOW_TOL_M,
            f"scene_flow_source_camera differs from R_camera_world scene_flow_world by {worst_c:.3g} m"
            if worst_c > tol.FLOW_SCENE_FLOW_TOL_M
            else "scene_flow_source_camera = R_camera_world(t_src) scene_flow_world",
            worst_m=worst_c)
    moved_z = np.full(H * W, np.nan)
    moved_z[idx] = z
    land_uv = np.full((H * W, 2), np.nan)
    land_uv[idx] = np.stack([uu, vv], -1)
    return moved_z.reshape(H, W), land_uv.reshape(H, W, 2)


def rotate_per_row(R_rows, vectors, rows) -> np.ndarray:
    """R_rows[rows[i]] @ vectors[i]: (K, 3, 3), (N, 3), (N,) int -> (N, 3). Elementwise products summed in order,
    then + 0.0: the bits of einsum("hij,hwj->hwi", R_rows, grid) at those pixels, computed for them only."""
    R = np.asarray(R_rows, np.float64)
    out = np.empty(np.shape(vectors))
    x, y, z = (np.ascontiguousarray(vectors[:, k], np.float64) for k in range(3))     # contiguous columns, once
    for i in range(3):
        r0, r1, r2 = (np.ascontiguousarray(R[:, i, j]).take(rows) for j in range(3))
        r0 *= x
        r1 *= y
        r0 += r1
        r2 *= z
        r0 += r2
        r0 += 0.0
        out[:, i] = r0
    return out


def _check_depth_warp(manifest, arrays, src, dst, moved_z, landing, add):
    """Where dest_visible: the destination's camera_z at the landing point equals the moved point's z."""
    visible = arrays["flow_forward_dest_visible"].astype(bool)
    if not visible.any():
        add("flow_depth_warp", True, "no destination-visible pixels", severity="warn")
        return
    uv = landing[visible]
    z = moved_z[visible]
    warped, _ = blockwise(lambda u, v, o: camera_z_at(dst["camera_z"], dst["instance_id"], u, v, o),
                          uv[:, 0], uv[:, 1], src["instance_id"][visible].astype(np.int64))
    dt = manifest["method"]["depth_test"]
    err = np.abs(warped - z)
    limit = dt["abs_m"] + dt["rel"] * z + 1e-5          # 10 um slack for float32 storage
    bad = int(np.count_nonzero(~(err <= limit)))
    add("flow_depth_warp", bad == 0,
        f"destination camera_z disagrees with the moved point's z at {bad} dest_visible pixels" if bad else
        f"destination camera_z warped to the landing points agrees with the moved points (worst {err.max():.3g} m)",
        worst_m=float(err.max()))


def _check_cycle(K, arrays, src, dst, add):
    """Forward then backward (bilinear over four destination pixels on the source pixel's object and
    one planar face: same normal and same plane offset, so parallel faces of two limbs of an articulated
    object are not mixed) returns to the start where both directions are visible and the landing point lies
    between pixel centres."""
    err, pixels = cycle_residuals(arrays, src, dst, K)
    kinked = int(np.count_nonzero(non_smooth(arrays["flow_forward"], src["instance_id"],
                                             arrays["flow_forward_dest_visible"].astype(bool))
                                  & arrays["flow_forward_dest_visible"].astype(bool)))
    bad = int(np.count_nonzero(err > tol.FLOW_CYCLE_TOL_PX))
    add("flow_cycle_consistency", bad == 0,
        f"forward+backward misses the start by more than {tol.FLOW_CYCLE_TOL_PX} px at {bad} of {err.size} pixels "
        f"(worst {err.max():.3g} px)" if bad else
        f"forward+backward returns within {tol.FLOW_CYCLE_TOL_PX} px at all {err.size} mutually visible pixels "
        f"where the flow is smooth ({kinked} pixels beside a kink not compared)",
        pixels=int(err.size), worst_px=float(err.max(initial=0.0)), non_smooth_pixels=kinked)


def non_smooth(flow, instance_id, visible) -> np.ndarray:
    """(H, W) bool: pixels within NON_SMOOTH_REACH_PX of a kink of `flow` (H, W, 2) px, i.e. of a pixel whose second
    difference along u or v (three visible pixels of one object in a row or column) exceeds
    qa_profile.FLOW_CYCLE_KINK_PX. A skinned hinge or a mesh's triangle edges fold the flow field there (piecewise
    affine): bilinear interpolation of the return flow across such a fold is not exact, so the round trip is not
    compared. Object boundaries are no kinks (the stencil never spans two objects)."""
    f = np.nan_to_num(np.asarray(flow, np.float64))
    ok = np.asarray(visible, bool)
    ids = np.asarray(instance_id)
    kink = np.zeros(ok.shape, bool)
    for axis in (0, 1):
        a, b, c = (np.take(f, range(k, f.shape[axis] - 2 + k), axis=axis) for k in range(3))
        ma, mb, mc = (np.take(ok, range(k, ok.shape[axis] - 2 + k), axis=axis) for k in range(3))
        ia, ib, ic = (np.take(ids, range(k, ids.shape[axis] - 2 + k), axis=axis) for k in range(3))
        d2 = np.abs(a - 2 * b + c).max(axis=-1)
        hit = ma & mb & mc & (ia == ib) & (ib == ic) & (d2 > tol.FLOW_CYCLE_KINK_PX)
        index = [slice(None), slice(None)]
        index[axis] = slice(1, -1)
        kink[tuple(index)] |= hit
    return _dilate(kink, tol.FLOW_CYCLE_KINK_REACH_PX)


def _dilate(mask, reach: int) -> np.ndarray:
    """`mask` grown by `reach` pixels in u and v (a (2 reach + 1)^2 square)."""
    out = mask.copy()
    H, W = mask.shape
    for dv in range(-reach, reach + 1):
        for du in range(-reach, reach + 1):
            out[max(0, dv):H + min(0, dv), max(0, du):W + min(0, du)] |= \
                mask[max(0, -dv):H + min(0, -dv), max(0, -du):W + min(0, -du)]
    return out


def cycle_residuals(arrays, src, dst, K=None) -> tuple[np.ndarray, np.ndarray]:
    """(err (N,) px, pixels (H, W) bool): |p + forward + backward(p + forward) - p| at the N source pixels where
    forward is visible and smooth (not `non_smooth`), the landing point lies between pixel centres and the four
    destination pixels around it are backward-visible, on the source pixel's object and one planar face (the pixels
    marked in `pixels`).
    With K (pinhole 3x3 or Lens) and the destination's camera_z and row poses, one face also means one plane
    offset (`_plane_offsets`)."""
    vis_f, vis_b = arrays["flow_forward_dest_visible"].astype(bool), arrays["flow_backward_dest_visible"].astype(bool)
    H, W = vis_f.shape
    face = _face_keys(dst).ravel()
    plane = _plane_offsets(K, dst).ravel() if K is not None else np.zeros(face.shape, np.int64)
    bwd = np.nan_to_num(arrays["flow_backward"].reshape(-1, 2).astype(np.float64))    # NaN -> 0 once, per pixel
    bwd_u, bwd_v, vis_b = np.ascontiguousarray(bwd[:, 0]), np.ascontiguousarray(bwd[:, 1]), vis_b.ravel()
    flow_f, obj_src, obj_dst = arrays["flow_forward"].reshape(-1, 2), src["instance_id"].ravel(), dst["instance_id"].ravel()

    def residual(sel):
        """(usable, du, dv) px of forward-visible source pixels `sel` (flat index): p + forward + backward - p."""
        pv, pu = (x.astype(np.float64) for x in np.divmod(sel, W))
        fwd = flow_f[sel].astype(np.float64)
        qu, qv = pu + fwd[:, 0], pv + fwd[:, 1]
        corners = [(r * W + c, w) for r, c, w in bilinear_corners(qu, qv, W, H)]      # flat pixel index, weight
        first = face.take(corners[0][0])
        first_plane = plane.take(corners[0][0])
        usable = obj_dst.take(corners[0][0]) == obj_src.take(sel)
        # bilinear interpolates only between pixel centres; beyond the outer centres it would hold the edge value,
        # wrong by the flow's gradient (large near the corners of a distorted image)
        usable &= (qu >= 0) & (qu <= W - 1) & (qv >= 0) & (qv <= H - 1)
        back_u, back_v = np.zeros_like(qu), np.zeros_like(qv)
        for k, (f, w) in enumerate(corners):
            usable &= vis_b.take(f)
            if k:                                                    # the first corner is its own face and plane
                usable &= (face.take(f) == first) & (plane.take(f) == first_plane)
            back_u += w * bwd_u.take(f)
            back_v += w * bwd_v.take(f)
        return usable, qu + back_u - pu, qv + back_v - pv

    smooth = ~non_smooth(arrays["flow_forward"], src["instance_id"], vis_f)
    sel = np.flatnonzero(vis_f & smooth)             # the N forward-visible pixels away from a kink (flat index)
    usable, du, dv = blockwise(residual, sel)
    err = np.hypot(du[usable], dv[usable]) if usable.any() else np.zeros(0)
    pixels = np.zeros(H * W, dtype=bool)
    pixels[sel] = usable
    return err, pixels.reshape(H, W)


def _plane_offsets(K, event) -> np.ndarray:
    """(H, W) int64: the plane offset n_w . P_w of the pixel's surface (world frame, m, so a moving camera does
    not change it from row to row) quantised to 1 mm (-1 where invalid)."""
    X = camera_points(K, event["camera_z"], event["row_T_world_camera"])
    n = event["normal_geometric"].astype(np.float64)
    T = event["row_T_world_camera"]
    origin_c = np.einsum("hji,hj->hi", T[:, :3, :3], T[:, :3, 3])          # R^T t per row
    d = np.einsum("hwi,hwi->hw", n, X) + np.einsum("hwi,hi->hw", n, origin_c)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(np.isfinite(d), np.rint(d / 1e-3), -1).astype(np.int64)


def _face_keys(event) -> np.ndarray:
    """(H, W) int64 key of (object, geometric normal quantised to 2.5e-4): equal keys = one planar face (formed in
    blocks of image rows, rowbeam.util.blocks)."""
    rows_per_block = max(1, BLOCK // event["instance_id"].shape[1])
    return blockwise(_face_key, event["normal_geometric"], event["instance_id"], block=rows_per_block)


def _face_key(normal, instance_id) -> np.ndarray:
    n = np.nan_to_num(normal, nan=-2.0)
    q = np.clip(np.rint((n + 2.0) * 2000.0), 0, 8191).astype(np.int64)
    return (instance_id.astype(np.int64) << 39) | (q[..., 0] << 26) | (q[..., 1] << 13) | q[..., 2]
