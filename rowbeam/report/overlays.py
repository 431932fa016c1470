"""Overlay images of the visual QA report, one function per overlay. Inputs are decoded bundle arrays
(rowbeam.bundle.reader) and manifests; outputs are (H, W, 3) uint8 images on the event's pixel grid
(OpenCV: pixel (u, v) centred at integers, row 0 at the top) plus the numbers their legends need.
Projection and LiDAR/camera pairing come from rowbeam.model.camera_model and rowbeam.check.cross_modal (row of projection,
through rowbeam.model.lens when the camera has a lens)."""
from __future__ import annotations

import numpy as np

from rowbeam.model import qa_profile as tol
from rowbeam.check.camera_checks import manifest_lens
from rowbeam.model.camera_model import pixel_grid, project
from rowbeam.check.cross_modal import lidar_camera_pairs, row_of_projection
from rowbeam.model.lens import lens_from_calibration, project_uv
from rowbeam.model.lens import project as lens_project
from rowbeam.check.object_checks import packed_extent, unpack
from rowbeam.model.pixel_sampling import bilinear_corners
from rowbeam.report import colour, png

AXIS_COLOURS = {"x": (255, 40, 40), "y": (40, 230, 40), "z": (60, 120, 255)}
# 20 distinct colours (Trubetskoy's list) for semantic classes 1, 2, ... (cycling)
CLASS_PALETTE = np.array([(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180),
                          (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212), (0, 128, 128),
                          (220, 190, 255), (170, 110, 40), (255, 250, 200), (128, 0, 0), (170, 255, 195),
                          (128, 128, 0), (255, 215, 180), (0, 0, 128), (128, 128, 128)], dtype=np.uint8)
MODAL_COLOUR, AMODAL_COLOUR = (0, 230, 255), (255, 210, 0)
# flag nesting of a flow pixel: visible => in bounds => defined => source valid (rowbeam/check/flow_checks.py)
FLAG_LEVELS = (("no source surface", (0, 0, 0)), ("source_valid only", (90, 90, 90)),
               ("correspondence_defined", (200, 40, 40)), ("dest_in_bounds (occluded)", (255, 160, 0)),
               ("dest_visible", (40, 200, 80)))


def scalar(values, valid=None, log: bool = False, lo=None, hi=None) -> tuple[np.ndarray, dict]:
    """Colourised scalar image and its legend {lo, hi, log} (scalar_legend: range = robust 1..99 % of the valid
    values unless given)."""
    v = np.asarray(values)
    mask = None if valid is None else np.asarray(valid, dtype=bool)
    legend = scalar_legend(v, mask, log, lo, hi)
    return colour.colourise(v, legend["lo"], legend["hi"], log, mask), legend


def scalar_legend(values, valid=None, log: bool = False, lo=None, hi=None, is_sorted: bool = False) -> dict:
    """The legend {lo, hi, log} of scalar(): lo and hi as given, else the robust 1..99 % range (colour.robust_range)
    of the valid values; is_sorted: `values` are already the valid values in ascending order (valid is None)."""
    if lo is None or hi is None:                    # the percentiles only when the caller did not give them
        v = np.asarray(values)
        rlo, rhi = colour.robust_range(v if valid is None else v[valid], log, is_sorted=is_sorted)
        lo, hi = (rlo if lo is None else lo), (rhi if hi is None else hi)
    return {"lo": lo, "hi": hi, "log": log}


def greyscale(image_u8: np.ndarray, dim: float = 0.6) -> np.ndarray:
    """A dimmed grey copy of an RGB image: the backdrop of point overlays."""
    g = np.rint(colour.luminance(image_u8) * dim).astype(np.uint8)
    return np.repeat(g[..., None], 3, axis=-1)


def backdrop(arrays: dict) -> np.ndarray:
    """Grey backdrop of a camera event: its RGB when exported, else camera_z (log)."""
    if "rgb" in arrays:
        return greyscale(colour.srgb(arrays["rgb"]))
    return greyscale(scalar(arrays["camera_z"], arrays["valid"] == 1, log=True)[0])


POLICY_COLOUR = np.array([255, 0, 255], np.uint8)      # pixels decided by transparency or the surface policy
HOLE_COLOUR = np.array([255, 40, 0], np.uint8)          # label_coverage disagreements (holes and phantom labels)


def surface_policy_overlay(arrays: dict, disagree=None) -> np.ndarray:
    """(H, W, 3) uint8: the grey backdrop with pixels of `policy_mask` in magenta and `disagree` ((H, W) bool, the
    label_coverage holes and phantom labels) in red."""
    img = backdrop(arrays).copy()
    if "policy_mask" in arrays:
        sel = arrays["policy_mask"] > 0
        img[sel] = (img[sel] // 2 + POLICY_COLOUR // 2)
    if disagree is not None:
        img[disagree] = HOLE_COLOUR
    return img


def id_image(instance_id, objects: list[dict]) -> np.ndarray:
    """instance_id (render index) -> colours of the stable 64-bit ids (same object, same colour in every event)."""
    return id_indexed(instance_id, objects).rgb()


def id_indexed(instance_id, objects: list[dict]) -> png.Indexed:
    """id_image as an Indexed image: index = the render index, palette = the colour of each render index's id."""
    ids = np.asarray(instance_id)
    table = np.zeros(int(ids.max(initial=0)) + 1, dtype=np.uint64)
    for o in objects:
        if 0 <= int(o["render_index"]) < len(table):
            table[int(o["render_index"])] = int(o["id"]) & 0xFFFFFFFFFFFFFFFF
    return png.Indexed(ids, colour.id_colours(table))     # colour each render index once, then look up


def semantic_image(semantic_id) -> np.ndarray:
    """semantic_id -> one colour per class (background 0 black, void 0xFFFFFFFF white)."""
    return semantic_indexed(semantic_id).rgb()


def semantic_indexed(semantic_id) -> png.Indexed:
    """semantic_image as an Indexed image (a palette of the class colours)."""
    s = np.asarray(semantic_id)
    top = int(s.max(initial=0))
    if s.dtype.kind == "u" and top < 1 << 16:       # small ids (no void): a table row for every id up to the largest
        return png.Indexed(s, _class_colours(np.arange(top + 1)))
    present = np.unique(s)                          # colour each class once, then look every pixel up
    return png.Indexed(np.searchsorted(present, s), _class_colours(present))


def _class_colours(ids) -> np.ndarray:
    """(N, 3) uint8 colours of semantic ids (N,)."""
    table = CLASS_PALETTE[(ids.astype(np.int64) - 1) % len(CLASS_PALETTE)]
    table[ids == 0] = 0
    table[ids == 0xFFFFFFFF] = 255
    return table


def semantic_colour(class_id: int) -> tuple[int, int, int]:
    """The legend colour of one semantic id (as semantic_image draws it)."""
    return tuple(int(c) for c in semantic_image(np.array([class_id], dtype=np.uint32))[0])


def timing_band(row_time_ns, exposure_ns: int, width: int = 240) -> tuple[np.ndarray, dict]:
    """Rolling-shutter timing: image (H, width, 3), row v of it = image row v; x = scene time from the first
    exposure start (left) to the last exposure end (right); each row's exposure window [t - e/2, t + e/2] drawn
    light, its reference time t dark. Legend: {t0_ns, t1_ns}."""
    t = np.asarray(row_time_ns, dtype=np.int64)
    H = len(t)
    t0, t1 = int(t.min() - exposure_ns // 2), int(t.max() + (exposure_ns + 1) // 2)
    span = max(t1 - t0, 1)
    img = np.full((H, width, 3), 250, dtype=np.uint8)
    x = lambda ns: (np.asarray(ns, dtype=np.float64) - t0) / span * (width - 1)  # noqa: E731
    a = np.floor(x(t - exposure_ns / 2)).astype(int)
    b = np.ceil(x(t + exposure_ns / 2)).astype(int)
    cols = np.arange(width)[None, :]
    img[(cols >= a[:, None]) & (cols <= b[:, None])] = (170, 200, 255)
    c = np.clip(np.rint(x(t)).astype(int), 0, width - 1)
    img[np.arange(H), c] = (10, 40, 160)
    return img, {"t0_ns": t0, "t1_ns": t1}


def lidar_in_camera(lidar_manifest, lidar_arrays, camera_manifest, camera_arrays, base: np.ndarray):
    """LiDAR returns projected into the camera row whose time matches (rowbeam.check.cross_modal pairing): two images
    on `base` (H, W, 3): coloured by |camera_z residual| (m, log) and by time skew (ns); unpaired returns inside the
    image grey. None when no static return falls in the camera's time span. Legend numbers in the dict."""
    pairs = lidar_camera_pairs(lidar_manifest, lidar_arrays, camera_manifest, camera_arrays)
    if pairs is None:
        return None
    ok, uv = pairs["paired"], pairs["uv"]
    H, W = base.shape[:2]
    inside = np.isfinite(uv).all(-1) & (uv[:, 0] >= 0) & (uv[:, 0] <= W - 1) & (uv[:, 1] >= 0) & (uv[:, 1] <= H - 1)
    res = np.abs(pairs["residual_m"][ok])
    skew = pairs["skew_ns"][ok].astype(np.float64)
    res_lo, res_hi = 1e-5, max(1e-2, float(res.max(initial=0)))
    sk_hi = max(float(skew.max(initial=0)), 1.0)
    out = []
    for values, lo, hi, log in ((res, res_lo, res_hi, True), (skew, 0.0, sk_hi, False)):
        img = base.copy()
        colour.draw_points(img, uv[inside & ~ok], (150, 150, 150))
        cols = colour.colourise(np.maximum(values, res_lo) if log else values, lo, hi, log)
        colour.draw_points(img, uv[ok], cols)
        out.append(img)
    return {"residual": out[0], "skew": out[1], "pairs": int(ok.sum()), "inside": int(inside.sum()),
            "residual_legend": {"lo": res_lo, "hi": res_hi, "log": True},
            "skew_legend": {"lo": 0.0, "hi": sk_hi, "log": False}, "pairs_data": pairs}


def object_overlay(event, arrays: dict, base: np.ndarray) -> tuple[np.ndarray, list[dict]]:
    """Modal (cyan) and amodal (yellow) contours and boxes, and each object's axes (x red, y green, z blue; length
    half its template box diagonal) at T_camera_object_reference projected with K. Rows for the legend table."""
    m = event.manifest
    K = np.array(m["calibration"]["K"], dtype=np.float64)
    lens = manifest_lens(m["calibration"])
    img = base.copy()
    rows = []
    W = int(m["calibration"]["image_size_px"][0])
    inst = np.asarray(arrays["instance_id"])
    flat = inst.ravel()                       # visible pixels of every instance id, grouped once
    order = np.argsort(flat, kind="stable")
    ids, start, count = np.unique(flat[order], return_index=True, return_counts=True)
    visible = {int(i): order[a:a + c] for i, a, c in zip(ids, start, count, strict=True)}
    for o in event.object_labels:             # each mask and contour in the window of its pixels (a window holding
        if o.get("mask_index") is not None:   # a mask's tight box gives the same contour as the whole image)
            packed = arrays["amodal_masks"][o["mask_index"]]
            e = packed_extent(packed, W)
            if e is not None:
                r0, r1, c0, c1 = e
                img[r0:r1, c0:c1][colour.contour(unpack(packed[r0:r1], W)[:, c0:c1])] = AMODAL_COLOUR
        pix = visible.get(int(o["instance_id"]))
        if pix is not None and pix.size:
            r, c = pix // W, pix % W
            r0, r1, c0, c1 = int(r.min()), int(r.max()) + 1, int(c.min()), int(c.max()) + 1
            modal = inst[r0:r1, c0:c1] == np.uint32(o["instance_id"])
            img[r0:r1, c0:c1][colour.contour(modal)] = MODAL_COLOUR
        for key, col in (("bbox_amodal_clipped", AMODAL_COLOUR), ("bbox_modal", MODAL_COLOUR)):
            if o.get(key):
                colour.draw_box(img, o[key], col)
        draw_axes(img, K, np.array(o["T_camera_object_reference"], dtype=np.float64), axis_length(o), lens)
        rows.append({"id": o.get("id"), "name": o.get("name", ""), "class": o.get("class", ""),
                     "px_count_visib": o.get("px_count_visib"), "px_count_all": o.get("px_count_all"),
                     "visib_fract": o.get("visib_fract"), "truncation_fraction": o.get("truncation_fraction"),
                     "occlusion_fraction": o.get("occlusion_fraction")})
    return img, rows


def axis_length(o: dict, cap_m: float = 3.0) -> float:
    """Half the diagonal of the object's template box (m), at most cap_m (roads and buildings are huge)."""
    size = (o.get("box3d") or {}).get("size_m")
    return min(0.5 * float(np.linalg.norm(size)), cap_m) if size else 1.0


def draw_axes(img: np.ndarray, K, T_camera_object, length: float, lens=None) -> None:
    """Project the object's origin and its x, y, z axis ends (object frame, m) with K (or the manifest's lens,
    rowbeam.model.lens) and draw the three segments (straight between the projected ends)."""
    pts = np.array([[0, 0, 0], [length, 0, 0], [0, length, 0], [0, 0, length]], dtype=np.float64)
    cam = pts @ T_camera_object[:3, :3].T + T_camera_object[:3, 3]
    uv, front = project(K, cam) if lens is None else lens_project(lens, cam)
    if not front[0]:
        return
    for i, name in enumerate("xyz", start=1):
        if front[i]:
            colour.draw_line(img, uv[0], uv[i], AXIS_COLOURS[name], width=1)


def flag_levels(flow_arrays: dict, direction: str = "forward") -> np.ndarray:
    """(H, W) int 0..4: how far a pixel gets along the nested flags (see FLAG_LEVELS)."""
    p = f"flow_{direction}_"
    level = np.zeros(flow_arrays[p + "source_valid"].shape, dtype=np.int64)
    for i, name in enumerate(("source_valid", "correspondence_defined", "dest_in_bounds", "dest_visible"), start=1):
        level = np.where(flow_arrays[p + name] == 1, i, level)
    return level


def flag_image(levels) -> np.ndarray:
    table = np.array([c for _, c in FLAG_LEVELS], dtype=np.uint8)
    return table[np.asarray(levels)]


def warp_back(dest_image, flow, mask=None) -> np.ndarray:
    """Destination image sampled (bilinear between pixel centres) at p + flow(p) for every source pixel p:
    (Hd, Wd, C), (H, W, 2) px -> (H, W, C) float64; NaN where flow is not finite or ~mask."""
    dest = np.asarray(dest_image, dtype=np.float64)
    if dest.ndim == 2:
        dest = dest[..., None]
    f = np.asarray(flow, dtype=np.float64)
    H, W = f.shape[:2]
    Hd, Wd = dest.shape[:2]
    u, v = pixel_grid(W, H)
    qu, qv = u + f[..., 0], v + f[..., 1]
    ok = np.isfinite(qu) & np.isfinite(qv) & (qu >= 0) & (qu <= Wd - 1) & (qv >= 0) & (qv <= Hd - 1)
    if mask is not None:
        ok &= np.asarray(mask, dtype=bool)
    out = np.full((H, W, dest.shape[-1]), np.nan)
    acc = np.zeros((int(ok.sum()), dest.shape[-1]))
    for r, c, w in bilinear_corners(qu[ok], qv[ok], Wd, Hd):
        acc += w[:, None] * dest[r, c]
    out[ok] = acc
    return out


def warp_residual(source_image, dest_image, flow, mask) -> np.ndarray:
    """Per-pixel |source - destination warped back by flow| (max over channels), NaN outside `mask`."""
    warped = warp_back(dest_image, flow, mask)
    src = np.asarray(source_image, dtype=np.float64)
    if src.ndim == 2:
        src = src[..., None]
    return np.abs(src - warped).max(axis=-1)


def lidar_range_image(arrays: dict, elevations_deg) -> tuple[np.ndarray, dict]:
    """Sweep range image: rows = channels ordered by elevation (highest at the top), each repeated so the image is
    about a quarter as high as wide; columns = firings."""
    order = np.argsort(-np.asarray(elevations_deg, dtype=np.float64), kind="stable")
    rng = arrays["range"][:, order].T
    img, legend = scalar(rng, arrays["valid"][:, order].T == 1, log=True)
    F, C = arrays["range"].shape
    return np.repeat(img, max(1, round(F / (4 * C))), axis=0), legend


def top_down(xy_sets, colours_sets, size: int = 480, extent_m: float | None = None, radius: int = 0):
    """Bird's-eye plots (x forward = up, y left = left) of point sets sharing one extent: list of (size, size, 3)
    images and the extent (m, half width); the sensor (origin) as a black square. Pixel (u, v) <-> y = (c - u) * s,
    x = (c - v) * s, c = (size - 1) / 2, s = extent / c; points drawn as (2 radius + 1) squares."""
    allxy = np.concatenate([np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in xy_sets])
    if extent_m is None:
        extent_m = float(np.percentile(np.abs(allxy), 99)) * 1.05 if allxy.size else 1.0
    extent_m = max(extent_m, 1e-3)
    c = (size - 1) / 2
    s = extent_m / c
    out = []
    for xy, cols in zip(xy_sets, colours_sets, strict=True):
        img = np.full((size, size, 3), 255, dtype=np.uint8)
        xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
        uv = np.stack([c - xy[:, 1] / s, c - xy[:, 0] / s], -1)
        colour.draw_points(img, uv, cols, radius=radius)
        colour.draw_points(img, np.array([[c, c]]), (0, 0, 0), radius=2)
        out.append(img)
    return out, extent_m


def beams_in_camera(points, camera_manifest: dict, camera_arrays: dict,
                    max_skew_ns: int = tol.LIDAR_CAMERA_MAX_SKEW_NS) -> dict:
    """World points with times (a LiDAR or radar point table: x_world, y_world, z_world m, t_ns) projected into the
    camera row whose time matches: each point with the pose of the row it lands on (rowbeam.check.cross_modal
    .row_of_projection, through the camera's lens when it has one). Returns uv (N, 2) px, z (N,) m camera frame,
    row (N,), skew_ns (N,) |t_row - t_point|, inside (N,) in front and within the image, matched (N,) inside and
    skew_ns <= max_skew_ns."""
    world = np.stack([points["x_world"], points["y_world"], points["z_world"]], -1).astype(np.float64)
    lens = lens_from_calibration(camera_manifest["calibration"])
    K = np.array(camera_manifest["calibration"]["K"], dtype=np.float64) if lens is None else lens
    H, W = camera_arrays["camera_z"].shape
    if len(world) == 0:
        e = np.zeros(0)
        return {"uv": np.zeros((0, 2)), "z": e, "row": e.astype(np.int64), "skew_ns": e.astype(np.int64),
                "inside": e.astype(bool), "matched": e.astype(bool)}
    uv, z, row = row_of_projection(world, camera_arrays["row_T_world_camera"], K)
    skew = np.abs(np.asarray(camera_arrays["row_time_ns"], dtype=np.int64)[row] - np.asarray(points["t_ns"], np.int64))
    inside = (z > 0) & np.isfinite(uv).all(-1)
    inside &= (uv[:, 0] >= -0.5) & (uv[:, 0] < W - 0.5) & (uv[:, 1] >= -0.5) & (uv[:, 1] < H - 0.5)
    return {"uv": uv, "z": z, "row": row, "skew_ns": skew, "inside": inside, "matched": inside & (skew <= max_skew_ns)}


def radar_in_camera(radar_manifest: dict, points, camera_manifest: dict, camera_arrays: dict, base: np.ndarray,
                    v_max: float, max_skew_ns: int = tol.LIDAR_CAMERA_MAX_SKEW_NS, radius: int = 1) -> dict:
    """Radar returns (point table: x_world, y_world, z_world m, t_ns, chirp, radial_velocity m/s, positive =
    receding) in the camera rows whose time matches their chirp: the rowbeam/associations@1 rule
    (rowbeam.bundle.associations.associate_pair) pairs camera rows with chirps within max_skew_ns; a return of a paired
    chirp is projected with the pose of its chirp's nearest paired row (through the lens when the camera has one)
    and drawn on `base` (H, W, 3) in colour.velocity_colour over [-v_max, v_max] as a (2 radius + 1) square; returns
    of unpaired chirps are projected with the pose of the row they land on (beams_in_camera) and drawn grey, one
    pixel, underneath. {image, matched, inside, chirp_row {chirp: row}, uv (N, 2) px (NaN where not matched)}."""
    from rowbeam.bundle.associations import associate_pair

    rec = associate_pair(camera_manifest, radar_manifest, max_skew_ns)
    row_t = np.asarray(camera_arrays["row_time_ns"], dtype=np.int64)
    chirp_row: dict[int, int] = {}
    for band in (rec or {}).get("bands", []):
        v0, v1 = sorted(band["rows"])
        rows = np.arange(v0, v1 + 1)
        chirp_row[int(band["other"]["chirp"])] = int(rows[np.argmin(np.abs(row_t[rows] - band["other_time_ns"]))])
    chirp = np.asarray(points["chirp"], dtype=np.int64)
    row = np.array([chirp_row.get(int(j), -1) for j in chirp], dtype=np.int64)
    paired = row >= 0
    world = np.stack([points["x_world"], points["y_world"], points["z_world"]], -1).astype(np.float64)
    lens = lens_from_calibration(camera_manifest["calibration"])
    K = np.array(camera_manifest["calibration"]["K"], dtype=np.float64) if lens is None else lens
    T_cw = np.linalg.inv(camera_arrays["row_T_world_camera"][row[paired]])
    X = np.einsum("nij,nj->ni", T_cw[:, :3, :3], world[paired]) + T_cw[:, :3, 3]
    uv = np.full((len(world), 2), np.nan)
    uv[paired] = np.stack(project_uv(K, X), -1)
    z = np.full(len(world), np.nan)
    z[paired] = X[:, 2]
    H, W = camera_arrays["camera_z"].shape
    with np.errstate(invalid="ignore"):
        matched = paired & (z > 0) & (uv[:, 0] >= -0.5) & (uv[:, 0] < W - 0.5) & (uv[:, 1] >= -0.5) & (uv[:, 1] < H - 0.5)
    img = base.copy()
    rest = beams_in_camera(points[~paired], camera_manifest, camera_arrays, max_skew_ns)
    colour.draw_points(img, rest["uv"][rest["inside"]], (150, 150, 150))
    vr = np.asarray(points["radial_velocity"], dtype=np.float64)[matched]
    colour.draw_points(img, uv[matched], colour.velocity_colour(vr, v_max), radius=radius)
    uv[~matched] = np.nan
    return {"image": img, "matched": int(matched.sum()), "inside": int(matched.sum() + rest["inside"].sum()),
            "chirp_row": chirp_row, "uv": uv, "rows_paired": rec["rows_paired"] if rec else 0}


def _cells(rows, cols, n_rows: int, n_cols: int, values=None):
    """(counts, sums) (n_rows, n_cols) of samples at integer (row, col) (out-of-range samples dropped)."""
    rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    ok = (rows >= 0) & (rows < n_rows) & (cols >= 0) & (cols < n_cols)
    counts = np.zeros((n_rows, n_cols))
    np.add.at(counts, (rows[ok], cols[ok]), 1.0)
    sums = np.zeros((n_rows, n_cols))
    if values is not None:
        np.add.at(sums, (rows[ok], cols[ok]), np.asarray(values, dtype=np.float64)[ok])
    return counts, sums


def range_row(r, r_max: float, n_range: int) -> np.ndarray:
    """Image row of a range (m) in the radar plots: bin floor(r / r_max * n_range), near at the bottom row."""
    return n_range - 1 - np.floor(np.asarray(r, dtype=np.float64) / r_max * n_range).astype(np.int64)


def radar_range_azimuth(rng, azimuth_deg, radial_velocity, valid, r_max: float, v_max: float, n_range: int = 96,
                        col_px: int = 8) -> tuple[np.ndarray, dict]:
    """Range-azimuth image of a radar frame: (K chirps, B beams) range m and radial velocity m/s, (B,) beam azimuths.
    Columns = the distinct beam azimuths, +azimuth (left of the sensor) on the left, each col_px wide; rows = range
    bins of r_max / n_range m (range_row: near at the bottom); a cell shows the mean radial velocity of the returns
    in it (velocity_colour over [-v_max, v_max]), empty cells white. Legend {azimuths_deg (left to right), r_max}."""
    az = np.asarray(azimuth_deg, dtype=np.float64)
    order = np.unique(az)[::-1]
    ok = np.asarray(valid) == 1
    k, b = np.nonzero(ok)
    col = np.searchsorted(-order, -az[b])
    counts, sums = _cells(range_row(np.asarray(rng)[k, b], r_max, n_range), col, n_range, len(order),
                          np.asarray(radial_velocity)[k, b])
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(counts > 0, sums / counts, np.nan)
    img = colour.velocity_colour(mean, v_max)
    img[counts == 0] = 255
    return np.repeat(img, col_px, axis=1), {"azimuths_deg": order.tolist(), "r_max": r_max}


def radar_range_doppler(rng, radial_velocity, valid, r_max: float, v_max: float, n_range: int = 96,
                        n_velocity: int = 96) -> tuple[np.ndarray, dict]:
    """Range-Doppler image of a radar frame: columns = radial velocity bins over [-v_max, v_max) (approaching on the
    left), rows = range bins (range_row: near at the bottom); colour = number of returns in the cell (log scale),
    empty cells NO_DATA. Legend {lo, hi, log} of the counts."""
    ok = np.asarray(valid) == 1
    r, v = np.asarray(rng, dtype=np.float64)[ok], np.asarray(radial_velocity, dtype=np.float64)[ok]
    col = np.floor((v + v_max) / (2 * v_max) * n_velocity).astype(np.int64)
    counts, _ = _cells(range_row(r, r_max, n_range), col, n_range, n_velocity)
    hi = max(float(counts.max(initial=0)), 2.0)
    return colour.colourise(np.where(counts > 0, counts, np.nan), 1.0, hi, log=True), {"lo": 1.0, "hi": hi, "log": True}
