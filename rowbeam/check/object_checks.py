"""Object-label conventions and checks (no bpy): amodal/modal masks, counts, boxes, fractions, assets,
and the amodal mask against an independent rasterisation (rowbeam.check.rasterize) of the exported asset
at the exported per-row poses and K.
"""
from __future__ import annotations

import numpy as np

from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import resolve_inside, sha256_file
from rowbeam.model.frames import invert_rigid, is_rigid
from rowbeam.model.instance_identity import instance_id
from rowbeam.model.lens import LensSpec, lens_from_calibration, make_lens
from rowbeam.check.rasterize import (
    UNIT_BOX,
    CanvasRays,
    canvas_rays,
    lens_canvas_box,
    rasterize_rays,
    rasterize_rows_box,
    read_ply,
    row_boxes,
)
from rowbeam.check.ray_cast import robust_hits

EDGE_MARGIN_PX = 0.02      # a mask pixel may differ from the rasterisation only within this of an edge
RAY_SAMPLES = 48           # pixel rays per object cast at its silhouette edge (plus a quarter as many anywhere)

DEFINITION = {
    "canvas": "BOP's 3x canvas: pixels u in [-W, 2W), v in [-H, 2H) on the image's OpenCV grid (centres at integers, "
              "row 0 = top image row); canvas row c = image row c - H keeps the rolling-shutter time the timing "
              "model extrapolates to it (canvas_row_time_ns); amodal_masks_canvas row c, column x <-> (u, v) = (x - W, c - H); "
              "through a lens (calibration.distortion) a pixel's ray is its rowbeam.model.lens.unproject ray and pixels "
              "without one (beyond the model's valid domain) are not part of the canvas (canvas.lens)",
    "amodal_mask": "pixel centres whose ray hits the object when every other object is removed (its own "
                   "self-occlusion kept), at the row's time, between the camera's clip planes (canvas.clip_m); "
                   "amodal_masks (in image) and amodal_masks_canvas (only "
                   "objects with pixels outside the image) are np.packbits(mask, axis=-1), bitorder big",
    "modal_mask": "instance_id == instance_id of the object",
    "px_count_all": "amodal pixels on the whole canvas (truncated part included; BOP px_count_all)",
    "px_count_in_image": "amodal pixels inside the image",
    "px_count_visib": "modal pixels (BOP px_count_visib)",
    "visib_fract": "px_count_visib / px_count_all (BOP)",
    "truncation_fraction": "1 - px_count_in_image / px_count_all",
    "occlusion_fraction": "1 - px_count_visib / px_count_in_image (external occlusion inside the image; 0 when "
                          "px_count_in_image = 0)",
    "boxes": "[x, y, w, h] of pixel indices: x, y = min column/row, w = x_max - x_min + 1, h = y_max - y_min + 1 "
             "(COCO-style inclusive extents; BOP's bbox = w - 1, h - 1); bbox_modal of the modal mask, "
             "bbox_amodal_clipped of the amodal mask in the image, bbox_amodal_unclipped of the canvas mask in image "
             "coordinates (x, y may be negative); null when empty",
    "box3d": "object_template_aabb: axis-aligned box of the asset's vertices in the object frame (scale baked in); "
             "centre_m and size_m (x, y, z extents)",
    "poses": "T_camera_object (4x4, rigid, metres; no quaternion) maps the asset's object frame into the camera frame "
             "(OpenCV optical): T_camera_object_reference at reference_time_ns (camera and object poses at that time), "
             "T_camera_object_centroid_row at the time of centroid_row (the row of the mean row of the modal pixels, "
             "rounded half up; null without visible pixels): row_T_world_camera[row]^-1 @ T_world_object(row time)",
    "per_row_poses": "canvas_row_T_world_camera[c] is the camera at canvas row c's time; object_row_T_world_object[i, c] "
                     "the rigid pose of the moving object with row_pose_index i at that time; a static object's pose is "
                     "T_camera_world^-1 @ T_camera_object_reference",
    "listed_objects": "objects of the object table whose silhouette has at least one pixel on the canvas (objects "
                      "with 0 visible pixels are kept); objects without mesh geometry are listed in `skipped`",
}


def tight_box(mask, x_offset: int = 0, y_offset: int = 0):
    """[x, y, w, h] (inclusive extents, w = x_max - x_min + 1) of a bool mask's pixels, offset added; None if empty."""
    mask = np.asarray(mask)
    cols, rows = np.flatnonzero(mask.any(axis=0)), np.flatnonzero(mask.any(axis=1))
    if cols.size == 0:
        return None
    return [int(cols[0]) + x_offset, int(rows[0]) + y_offset, int(cols[-1] - cols[0] + 1), int(rows[-1] - rows[0] + 1)]


def unpack(packed, width: int) -> np.ndarray:
    return np.unpackbits(np.asarray(packed, dtype=np.uint8), axis=-1, count=width).astype(bool)


def object_masks(block: dict, arrays: dict, W: int, H: int, o: dict):
    """(amodal in image (H, W), canvas (3H, 3W)) bool masks of one listed object."""
    img = unpack(arrays["amodal_masks"][o["mask_index"]], W) if o["mask_index"] is not None \
        else np.zeros((H, W), dtype=bool)
    if o.get("canvas_mask_index") is not None:
        canvas = unpack(arrays["amodal_masks_canvas"][o["canvas_mask_index"]], 3 * W)
    else:
        canvas = np.zeros((3 * H, 3 * W), dtype=bool)
        canvas[H:2 * H, W:2 * W] = img
    return img, canvas


def object_row_poses(manifest: dict, arrays: dict, o: dict) -> np.ndarray:
    """T_world_object (3H, 4, 4) of a listed object at every canvas row's time."""
    if o.get("row_pose_index") is not None:
        return arrays["object_row_T_world_object"][o["row_pose_index"]]
    T_cw = np.array(manifest["calibration"]["T_camera_world"]["matrix"], dtype=np.float64)
    T_wo = invert_rigid(T_cw) @ np.array(o["T_camera_object_reference"], dtype=np.float64)
    return np.broadcast_to(T_wo, arrays["canvas_row_T_world_camera"].shape)


def _row_T_co(manifest, arrays, o) -> np.ndarray:
    """T_camera_object (3H, 4, 4) of a listed object at every canvas row's time (exported poses)."""
    T_wc = arrays["canvas_row_T_world_camera"]
    return np.einsum("rij,rjk->rik", np.linalg.inv(T_wc), object_row_poses(manifest, arrays, o))


def _clip(manifest):
    clip = manifest["object_labels"]["canvas"].get("clip_m")     # camera rays start at z = near, end at z = far
    return (clip["near"], clip["far"]) if clip else (None, np.inf)


def rasterise_object(manifest, arrays, o, V, F, margin_px: float = 0.0) -> np.ndarray:
    """Independent canvas mask (3H, 3W) of the asset (V, F) at the exported per-row poses and K (pinhole)."""
    W, H = manifest["calibration"]["image_size_px"]
    return _paste(rasterise_object_box(manifest, arrays, o, V, F, margin_px), (0, 3 * H, 0, 3 * W))


def rasterise_object_box(manifest, arrays, o, V, F, margin_px: float = 0.0, T_cw=None):
    """`rasterise_object` as (first canvas row, first canvas column, bool block) holding every covered canvas pixel,
    or None when none is covered. T_cw: inverse of canvas_row_T_world_camera (3H, 4, 4), shared by all objects."""
    W, H = manifest["calibration"]["image_size_px"]
    K = np.array(manifest["calibration"]["K"], dtype=np.float64)
    if T_cw is None:
        T_cw = np.linalg.inv(arrays["canvas_row_T_world_camera"])
    T_co = np.einsum("rij,rjk->rik", T_cw, object_row_poses(manifest, arrays, o))
    rows = np.arange(-H, 2 * H)
    near, far = _clip(manifest)
    if (T_co == T_co[0]).all():                 # = allclose(atol=0, rtol=0), without its temporaries
        T_co = T_co[0]
    return rasterize_rows_box(V, F, K, T_co, rows, 3 * W, -W, margin_px, near=near, far=far)


def _paste(box, window) -> np.ndarray:
    """The part of a (row, column, block) box (None: empty) inside window (r0, r1, c0, c1), as a bool array."""
    r0, r1, c0, c1 = window
    out = np.zeros((r1 - r0, c1 - c0), dtype=bool)
    if box is not None:
        br, bc, block = box
        a, b = max(br, r0), min(br + block.shape[0], r1)
        c, d = max(bc, c0), min(bc + block.shape[1], c1)
        if a < b and c < d:
            out[a - r0:b - r0, c - c0:d - c0] = block[a - br:b - br, c - bc:d - bc]
    return out


def _extent(box):
    """(r0, r1, c0, c1) of a (row, column, block) box, or None."""
    return None if box is None else (box[0], box[0] + box[2].shape[0], box[1], box[1] + box[2].shape[1])


def _union(*extents):
    e = [x for x in extents if x is not None]
    return (min(x[0] for x in e), max(x[1] for x in e), min(x[2] for x in e), max(x[3] for x in e)) if e else None


def packed_extent(packed, width: int):
    """(r0, r1, c0, c1) holding every set pixel of a bit-packed mask (R, ceil(width / 8)) (np.packbits, axis -1,
    big bit order; pad bits ignored), or None when no pixel is set. Cheap: no full unpack."""
    packed = np.asarray(packed, dtype=np.uint8)
    rows = np.flatnonzero(packed.any(axis=1))
    if rows.size == 0:
        return None
    cols = np.flatnonzero(np.unpackbits(np.bitwise_or.reduce(packed[rows[0]:rows[-1] + 1], axis=0), count=width))
    return (int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1) if cols.size else None


def canvas_mask_box(arrays: dict, W: int, H: int, o: dict):
    """The amodal canvas mask of a listed object as a (row, column, block) box on the (3H, 3W) canvas, or None."""
    if o.get("canvas_mask_index") is not None:
        packed, width, dr, dc = arrays["amodal_masks_canvas"][o["canvas_mask_index"]], 3 * W, 0, 0
    elif o["mask_index"] is not None:
        packed, width, dr, dc = arrays["amodal_masks"][o["mask_index"]], W, H, W
    else:
        return None
    e = packed_extent(packed, width)
    if e is None:
        return None
    return e[0] + dr, e[2] + dc, unpack(packed[e[0]:e[1]], width)[:, e[2]:e[3]]


def rasterise_object_lens(manifest, arrays, o, V, F, lens, exported=None, margin_px: float = 0.0,
                          rays: CanvasRays | None = None, row_mesh=None) -> np.ndarray:
    """Canvas mask (3H, 3W) of the asset (V, F) through `lens` (a pinhole camera: its pinhole Lens, for a deforming
    object) at the exported per-row poses. margin_px != 0: the
    pixel is also tested at the 4 probe points margin_px away along u and v (each unprojected through the lens):
    covered at any of the 5 (> 0, outer band) or at all of them (< 0, inner band). Pixels are tested in the
    canvas box lens_canvas_box of the asset's axis-aligned box, grown to hold the `exported` mask's pixels;
    outside it the mask is empty. rays: the event's CanvasRays (pixel centres), shared by its objects.
    row_mesh: a deforming object's (first canvas row c0, world vertices (n, V, 3) of rows c0 .. c0 + n - 1, load_row_mesh),
    rasterised instead of (V, F) posed: rows outside that range are empty."""
    W, H = manifest["calibration"]["image_size_px"]
    near, far = _clip(manifest)
    if row_mesh is not None:
        c0, Vw = row_mesh
        T_cw = np.linalg.inv(arrays["canvas_row_T_world_camera"][c0:c0 + len(Vw)])
        P = Vw @ np.swapaxes(T_cw[:, :3, :3], 1, 2) + T_cw[:, None, :3, 3]          # (n, V, 3) camera frame
        box = lens_canvas_box(lens, UNIT_BOX, row_boxes(P), W, H, near if near is not None else 0.0)
        box = None if box is None else (box[0], box[1], box[2] + c0, box[3] + c0)
    else:
        T_co = _row_T_co(manifest, arrays, o)
        lo, hi = V.min(axis=0), V.max(axis=0)
        corners = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
        box = lens_canvas_box(lens, corners, T_co, W, H, near if near is not None else 0.0)
    tb = tight_box(exported) if exported is not None else None
    if tb is not None:
        t = (max(tb[0] - 1, 0), min(tb[0] + tb[2] + 1, 3 * W), max(tb[1] - 1, 0), min(tb[1] + tb[3] + 1, 3 * H))
        box = t if box is None else (min(box[0], t[0]), max(box[1], t[1]), min(box[2], t[2]), max(box[3], t[3]))
    out = np.zeros((3 * H, 3 * W), dtype=bool)
    if box is None:
        return out
    x0, x1, y0, y1 = box
    if row_mesh is not None:           # only rows with vertices can be covered; V per row, camera frame
        y0, y1 = max(y0, c0), min(y1, c0 + len(Vw))
        if y1 <= y0:
            return out
        V, T_rows = P[y0 - c0:y1 - c0], np.eye(4)
    else:
        T_rows = T_co[0] if np.allclose(T_co, T_co[0], atol=0, rtol=0) else T_co[y0:y1]
    e = abs(margin_px)
    probes = [(0.0, 0.0)] + ([(e, 0.0), (-e, 0.0), (0.0, e), (0.0, -e)] if e else [])
    rays = rays or CanvasRays(lens, W, H)
    masks = [rasterize_rays(V, F, rays.get(x0, x1, y0, y1) if (du, dv) == (0.0, 0.0)
                            else canvas_rays(lens, x0 - W, x1 - W, y0 - H, y1 - H, du, dv), T_rows, near, far)
             for du, dv in probes]
    out[y0:y1, x0:x1] = np.logical_or.reduce(masks) if margin_px > 0 else np.logical_and.reduce(masks)
    return out


def check_object_labels(manifest: dict, arrays: dict, add, root) -> None:
    """Every object-label invariant of a camera event with an `object_labels` block."""
    block = manifest["object_labels"]
    W, H = manifest["calibration"]["image_size_px"]
    needed = ("amodal_masks", "amodal_masks_canvas", "canvas_row_T_world_camera", "object_row_T_world_object",
              "instance_id", "canvas_row_time_ns", "row_T_world_camera")
    missing = [n for n in needed if n not in arrays]
    if missing:
        add("objects:payloads", False, f"object labels cannot be checked: {missing} not decoded")
        return
    inst = arrays["instance_id"]
    objs = block["objects"]
    listed = {o["instance_id"] for o in objs} | {s["instance_id"] for s in block.get("skipped", [])}
    seen = set(np.unique(inst[inst > 0]).tolist())
    add("objects:listed", seen <= listed, "every visible instance has an object-label entry" if seen <= listed
        else f"visible instances {sorted(seen - listed)[:5]} have no object-label entry")
    _check_instance_ids(manifest, add)
    if not _check_mask_rows(objs, arrays, add, H):
        return
    problems = {"subset": [], "counts": [], "boxes": [], "fractions": [], "poses": []}
    flat = np.asarray(inst).ravel()                  # visible pixels of every instance id, grouped once
    order = np.argsort(flat, kind="stable")
    ids, start, n = np.unique(flat[order], return_index=True, return_counts=True)
    visible = {int(i): order[a:a + c] for i, a, c in zip(ids, start, n, strict=True)}
    for o in objs:
        _object_problems(o, arrays, visible.get(o["instance_id"], np.zeros(0, dtype=np.int64)), W, H, problems)
    for key, what in (("subset", "modal within amodal; canvas agrees with image"), ("counts", "counts equal mask sums"),
                      ("boxes", "boxes are tight"), ("fractions", "fractions follow from the counts"),
                      ("poses", "poses rigid, centroid rows consistent")):
        p = problems[key]
        add(f"objects:{key}", not p, what if not p else f"{p[0]}" + (f" (+{len(p) - 1} more)" if len(p) > 1 else ""))
    _check_assets(manifest, arrays, objs, block, add, root)


def _check_mask_rows(objs: list, arrays: dict, add, H: int) -> bool:
    """objects:mask_index (mask indices map one-to-one onto the mask payloads' rows) and objects:canvas_rows (canvas
    rows H..2H-1 are the image rows' times and poses); False when the masks cannot be looked up."""
    index_rows = [o["mask_index"] for o in objs if o["mask_index"] is not None]
    canvas_rows = [o["canvas_mask_index"] for o in objs if o.get("canvas_mask_index") is not None]
    ok = (sorted(index_rows) == list(range(arrays["amodal_masks"].shape[0]))
          and sorted(canvas_rows) == list(range(arrays["amodal_masks_canvas"].shape[0])))
    add("objects:mask_index", ok, "mask indices cover the mask payloads once each" if ok
        else "mask_index / canvas_mask_index do not map one-to-one onto the mask payload rows")
    if not ok:
        return False
    cam_ok = np.allclose(arrays["canvas_row_T_world_camera"][H:2 * H], arrays["row_T_world_camera"], rtol=0.0,
                         atol=1e-9)
    t_ok = np.array_equal(arrays["canvas_row_time_ns"][H:2 * H], arrays["row_time_ns"]) if "row_time_ns" in arrays \
        else True
    add("objects:canvas_rows", bool(cam_ok and t_ok), "canvas rows H..2H-1 equal the image rows' times and poses"
        if cam_ok and t_ok else "canvas rows H..2H-1 differ from row_time_ns / row_T_world_camera")
    return True


def _object_problems(o: dict, arrays: dict, pix: np.ndarray, W: int, H: int, problems: dict) -> None:
    """Append to `problems` (by check) what is wrong with object entry `o` whose visible pixels are the flat indices
    `pix` of the (H, W) image."""
    name = f"object {o['instance_id']}"
    # the image mask in the window of its set pixels (packed_extent): sums, boxes and lookups cost its size
    packed = arrays["amodal_masks"][o["mask_index"]] if o["mask_index"] is not None else None
    ext = packed_extent(packed, W) if packed is not None else None
    r0, r1, c0, c1 = ext or (0, 0, 0, 0)
    img = unpack(packed[r0:r1], W)[:, c0:c1] if ext else np.zeros((0, 0), dtype=bool)
    canvas = unpack(arrays["amodal_masks_canvas"][o["canvas_mask_index"]], 3 * W) \
        if o.get("canvas_mask_index") is not None else None      # None: the silhouette is inside the image
    rows, cols = pix // W, pix % W
    inside = (rows >= r0) & (rows < r1) & (cols >= c0) & (cols < c1)
    covered = np.zeros(pix.size, dtype=bool)
    covered[inside] = img[rows[inside] - r0, cols[inside] - c0]
    outside = int(np.count_nonzero(~covered))
    if outside:
        problems["subset"].append(f"{name}: {outside} modal pixel(s) outside the amodal mask")
    if canvas is not None:
        full = np.zeros((H, W), dtype=bool)
        full[r0:r1, c0:c1] = img
        if not np.array_equal(canvas[H:2 * H, W:2 * W], full):
            problems["subset"].append(f"{name}: canvas mask differs from the image mask inside the image")
    n_img = int(np.count_nonzero(img))
    counts = {"px_count_all": int(np.count_nonzero(canvas)) if canvas is not None else n_img,
              "px_count_in_image": n_img, "px_count_visib": int(pix.size)}
    for key, value in counts.items():
        if o[key] != value:
            problems["counts"].append(f"{name}: {key} {o[key]} != mask sum {value}")
    modal_box = [int(cols.min()), int(rows.min()), int(cols.max() - cols.min() + 1),
                 int(rows.max() - rows.min() + 1)] if pix.size else None
    img_box = tight_box(img, c0, r0)
    boxes = {"bbox_modal": modal_box, "bbox_amodal_clipped": img_box,
             "bbox_amodal_unclipped": tight_box(canvas, -W, -H) if canvas is not None else img_box}
    for key, value in boxes.items():
        if o[key] != value:
            problems["boxes"].append(f"{name}: {key} {o[key]} is not the tight box {value}")
    _fraction_and_pose_problems(o, name, arrays, pix, W, H, problems)


def _fraction_and_pose_problems(o: dict, name: str, arrays: dict, pix: np.ndarray, W: int, H: int,
                                problems: dict) -> None:
    """Fractions that do not follow from the declared counts; poses that are not rigid; a centroid row (and its
    time) that is not the modal mask's rounded mean row."""
    n_all, n_img, n_vis = (o["px_count_all"], o["px_count_in_image"], o["px_count_visib"])
    expect = {"visib_fract": n_vis / n_all if n_all else 0.0,
              "truncation_fraction": 1 - n_img / n_all if n_all else 0.0,
              "occlusion_fraction": 1 - n_vis / n_img if n_img else 0.0}
    for key, value in expect.items():
        if abs(o[key] - value) > 1e-12:
            problems["fractions"].append(f"{name}: {key} {o[key]} != {value} from the counts")
    for key in ("T_camera_object_reference", "T_camera_object_centroid_row"):
        if o[key] is not None and not is_rigid(np.array(o[key], dtype=np.float64), 1e-6):
            problems["poses"].append(f"{name}: {key} is not rigid")
    if (o["centroid_row"] is None) != (n_vis == 0):
        problems["poses"].append(f"{name}: centroid_row must be null exactly when no pixel is visible")
    elif o["centroid_row"] is not None and not pix.size:
        problems["poses"].append(f"{name}: centroid_row given but none of its pixels is visible")
    elif o["centroid_row"] is not None:
        rows = pix // W
        if o["centroid_row"] != int(np.floor(rows.mean() + 0.5)) or \
                o["centroid_row_time_ns"] != int(arrays["canvas_row_time_ns"][H + o["centroid_row"]]):
            problems["poses"].append(f"{name}: centroid_row / centroid_row_time_ns do not match the modal mask")


def _check_instance_ids(manifest: dict, add) -> None:
    """objects:instance_ids: every instance of the object table has the id its instancer's id and persistent path
    give (rowbeam.model.instance_identity.INSTANCE_ID_RULE)."""
    rows = [o for o in manifest.get("objects", []) if "instance" in o]
    if not rows:
        return
    bad = [o["name"] for o in rows if "instancer_id" not in o["instance"] or o["id"] != instance_id(
        int(o["instance"]["instancer_id"]), o["instance"]["persistent_path"])]
    add("objects:instance_ids", not bad, f"{len(rows)} instance id(s) follow from instancer id and persistent path"
        if not bad else f"{len(bad)} instance id(s) do not follow from instancer id and persistent path: {bad[:3]}")


def _asset_bytes(root, asset: dict) -> bytes:
    path = resolve_inside(root, asset["uri"])
    if sha256_file(path) != asset["sha256"]:
        raise RowbeamError(f"asset {asset['uri']} does not match its sha256")
    return path.read_bytes()


def load_asset(root, asset: dict):
    return read_ply(_asset_bytes(root, asset))


def load_row_mesh(root, row_mesh: dict, n_vertices: int):
    """(first canvas row, world vertices (rows, V, 3) float64) of a deforming object's `row_mesh` (.npy, sha256
    checked, shape checked against the manifest and the asset's vertex count)."""
    import io

    a = np.load(io.BytesIO(_asset_bytes(root, row_mesh)), allow_pickle=False)
    if a.dtype != np.float64 or a.shape != (row_mesh["rows"], n_vertices, 3):
        raise RowbeamError(f"row_mesh {row_mesh['uri']}: shape {a.shape} {a.dtype}, expected "
                           f"({row_mesh['rows']}, {n_vertices}, 3) float64")
    return int(row_mesh["first_canvas_row"]), a


def _check_assets(manifest, arrays, objs, block, add, root) -> None:
    """box3d against the asset, and the amodal canvas mask against an independent rasterisation."""
    worst, worst_violation, checked, problems, skipped = 0, 0, 0, [], []
    rays = []
    try:
        lens = lens_from_calibration(manifest["calibration"])      # None: pinhole K
    except RowbeamError as exc:
        add("objects:rasterisation", False, f"the calibration's lens does not build: {exc}")
        return
    W, H = manifest["calibration"]["image_size_px"]
    T_cw = np.linalg.inv(arrays["canvas_row_T_world_camera"]) if lens is None else None   # once per event
    assets = {}
    canvas_rays_ = CanvasRays(lens, W, H) if lens is not None else None      # lens rays shared by the objects
    for o in objs:
        name = f"object {o['instance_id']}"
        try:
            key = (o["asset"].get("uri"), o["asset"].get("sha256"))
            if key not in assets:            # instances share meshes: each asset read and hashed once per event
                assets[key] = load_asset(root, o["asset"])
            V, F = assets[key]
        except (RowbeamError, OSError) as exc:
            problems.append(f"{name}: {exc}")
            continue
        lo, hi = V.min(axis=0), V.max(axis=0)
        if not (np.allclose(o["box3d"]["centre_m"], (lo + hi) / 2, atol=1e-9)
                and np.allclose(o["box3d"]["size_m"], hi - lo, atol=1e-9)):
            problems.append(f"{name}: box3d is not the asset's axis-aligned box")
        if not o.get("rasterisation_check", True):
            skipped.append(o["instance_id"])
            continue
        row_mesh = None
        if "row_mesh" in o:
            try:
                row_mesh = load_row_mesh(root, o["row_mesh"], len(V))
            except (RowbeamError, OSError, ValueError) as exc:
                problems.append(f"{name}: {exc}")
                continue
        try:
            if (lens is not None or row_mesh is not None) and canvas_rays_ is None:
                canvas_rays_ = CanvasRays(make_lens(LensSpec(), manifest["calibration"]["K"], W, H), W, H)
            m, window, mismatch, violation = _compare_rasterised(manifest, arrays, o, V, F, row_mesh,
                                                                 canvas_rays_ if lens is not None or row_mesh is not None
                                                                 else None, T_cw)
        except ValueError as exc:
            skipped.append(f"{o['instance_id']} ({exc})")
            continue
        checked += 1
        rays.append((o, *_ray_cast_edges(manifest, arrays, o, V, F, m, lens, window[::2], row_mesh=row_mesh)))
        worst, worst_violation = max(worst, mismatch), max(worst_violation, violation)
        if violation:
            problems.append(f"{name}: amodal mask differs from the rasterised asset by {mismatch} px, "
                            f"{violation} px farther than {EDGE_MARGIN_PX} px from an edge")
    _report_assets(objs, lens, add, checked, skipped, problems, rays, worst, worst_violation)


def _compare_rasterised(manifest, arrays, o, V, F, row_mesh, canvas_rays_, T_cw):
    """Object `o`'s exported canvas mask against its asset (V, F) rasterised independently: through per-pixel
    rays (`canvas_rays_`, a lens or a deforming object's row meshes) or the pinhole box rasteriser (T_cw). Compared
    in one window of the canvas (the mask's box + 2 px for the ray cast, and the rasterisation's); on a mismatch
    the rasterisations EDGE_MARGIN_PX outside and inside decide. Returns (mask in the window, window (r0, r1, c0,
    c1), mismatched px, px that differ farther than EDGE_MARGIN_PX from an edge). ValueError: not comparable."""
    W, H = manifest["calibration"]["image_size_px"]
    mbox = canvas_mask_box(arrays, W, H, o)
    if canvas_rays_ is not None:     # per-pixel rays (a deforming object: on any camera model); whole-canvas masks
        exported = _paste(mbox, (0, 3 * H, 0, 3 * W))
        band = lambda e, x=exported, cr=canvas_rays_: (  # noqa: E731
            0, 0, rasterise_object_lens(manifest, arrays, o, V, F, cr.lens, x, e, cr, row_mesh))
    else:
        band = lambda e: rasterise_object_box(manifest, arrays, o, V, F, e, T_cw=T_cw)  # noqa: E731
    nominal = band(0.0)
    m_ext = _extent(mbox)
    pad = None if m_ext is None else (max(m_ext[0] - 2, 0), min(m_ext[1] + 2, 3 * H),
                                      max(m_ext[2] - 2, 0), min(m_ext[3] + 2, 3 * W))
    window = _union(pad, _extent(nominal)) or (0, 0, 0, 0)
    m = _paste(mbox, window)
    mismatch, violation = int(np.count_nonzero(m ^ _paste(nominal, window))), 0
    if mismatch:          # inner <= nominal <= outer: only a mismatch needs the edge bands
        bands = [band(EDGE_MARGIN_PX), band(-EDGE_MARGIN_PX)]
        window = _union(window, *map(_extent, bands))
        m = _paste(mbox, window)
        outer, inner = (_paste(b, window) for b in bands)
        violation = int(np.count_nonzero(inner & ~m) + np.count_nonzero(m & ~outer))
    return m, window, mismatch, violation


def _report_assets(objs, lens, add, checked, skipped, problems, rays, worst, worst_violation) -> None:
    """Add objects:rasterisation and (when rays were cast) objects:ray_cast from _check_assets' findings."""
    n_rows = sum("row_mesh" in o and o["instance_id"] not in skipped for o in objs)
    msg = (f"{checked} object(s) re-rasterised from their assets at the exported per-row poses and K"
           + (f" ({n_rows} deforming, from their per-row meshes)" if n_rows else "")
           + (f" through the {lens.model} lens (per-pixel rays)" if lens is not None else "")
           + f": worst mismatch {worst} px, none farther than {EDGE_MARGIN_PX} px from an edge"
           + ("; not re-rasterised (deforming without row_mesh, or crossing the camera plane in a bundle without "
              f"canvas.clip_m): "
              f"{skipped}" if skipped else ""))
    add("objects:rasterisation", not problems, msg if not problems else
        problems[0] + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""),
        mismatch_px=worst, violation_px=worst_violation)
    if rays:
        cast, judged = sum(r[1] for r in rays), sum(r[2] for r in rays)
        bad = [(o, n) for o, _, _, n in rays if n]
        add("objects:ray_cast", not bad, f"{cast} pixel rays cast at the silhouette edges of {len(rays)} object(s) "
            f"(Möller–Trumbore at each row's pose, independent of the rasteriser): {judged} judged, all agree "
            f"with the amodal masks" if not bad else f"object {bad[0][0]['instance_id']}: {bad[0][1]} pixel ray(s) "
            f"disagree with its amodal mask (hit where the mask is empty or missed where it is set)"
            + (f" (+{len(bad) - 1} more objects)" if len(bad) > 1 else ""), rays=cast, judged=judged)


def _ray_cast_edges(manifest, arrays, o, V, F, canvas, lens=None, origin=(0, 0),
                    per_object: int = RAY_SAMPLES, row_mesh=None) -> tuple[int, int, int]:
    """(rays cast, judged, disagreeing) for pixels on both sides of the object's canvas silhouette edge (plus a
    few anywhere in its box), each ray cast at its canvas row's pose (through `lens` when given, else the pinhole
    K) and judged only away from edges. canvas: the (3H, 3W) canvas mask, or a window of it whose first pixel is
    canvas (row, column) `origin` holding the mask's box grown by 2 px (clipped to the canvas). row_mesh: a deforming
    object's (first canvas row, world vertices per row), each ray cast at its row's mesh (no mesh: a miss)."""
    W, H = manifest["calibration"]["image_size_px"]
    box = tight_box(canvas, origin[1], origin[0])
    if box is None:
        return 0, 0, 0
    r0, r1 = max(box[1] - 2, 0), min(box[1] + box[3] + 2, 3 * H)
    c0, c1 = max(box[0] - 2, 0), min(box[0] + box[2] + 2, 3 * W)
    w = canvas[r0 - origin[0]:r1 - origin[0], c0 - origin[1]:c1 - origin[1]]
    edge = np.zeros_like(w)
    for axis in (0, 1):
        for shift in (1, -1):
            edge |= w != np.roll(w, shift, axis)
    rng = np.random.default_rng(int(o["instance_id"]) & 0xFFFFFFFF)
    on_edge = np.flatnonzero(edge)
    pick = np.concatenate([rng.choice(on_edge, min(per_object, on_edge.size), replace=False),
                           rng.choice(w.size, min(per_object // 4, w.size), replace=False)])
    rows, cols = np.unravel_index(pick, w.shape)
    rows, cols = rows + r0, cols + c0
    T_wc = arrays["canvas_row_T_world_camera"][rows]
    clip = manifest["object_labels"]["canvas"].get("clip_m")
    near, far = (clip["near"], clip["far"]) if clip else (0.0, np.inf)
    K = lens if lens is not None else np.array(manifest["calibration"]["K"], dtype=np.float64)
    uv = np.stack([cols - W, rows - H], axis=1).astype(np.float64)
    if row_mesh is None:
        T_co = np.linalg.inv(T_wc) @ np.asarray(object_row_poses(manifest, arrays, o))[rows]
        inside, outside = robust_hits(V, F, K, T_co, uv, near, far)
    else:                              # world vertices of the ray's row, seen from the camera at that row
        c0, Vw = row_mesh
        inside, outside = np.zeros(len(rows), bool), np.ones(len(rows), bool)
        for r in np.unique(rows):
            at = np.flatnonzero(rows == r)
            if c0 <= r < c0 + len(Vw):
                inside[at], outside[at] = robust_hits(Vw[r - c0], F, K, np.linalg.inv(T_wc[at]), uv[at], near, far)
    mask = canvas[rows - origin[0], cols - origin[1]]
    return len(pick), int((inside | outside).sum()), int(((mask & outside) | (~mask & inside)).sum())
