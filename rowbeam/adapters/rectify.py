"""Rectified (undistorted) pinhole view of distorted camera events and their flows, for tools without lens models.

The rectified camera K' (3x3 px, zero skew) sees through the source camera's optical frame (no rectifying rotation:
camera_z, range, normals and scene flow keep their values and frame). K' is the event's K (default), given (--K), or
chosen by --alpha in [0, 1] with OpenCV's rule (`rectified_K`). For every rectified pixel p' = (u', v') the ray
K'^-1 (u', v', 1) is projected through the event's lens (rowbeam.model.lens.project) to the continuous source pixel q;
s = the nearest source pixel centre (rowbeam.model.pixel_sampling.nearest_pixel). A rectified pixel has a source when q
lies inside the source image (-0.5 <= q < W - 0.5, same for v) and is valid when, in addition, s is valid.

Per event (OUT_DIR/<sensor>/<index:06d>/, arrays (H', W') or (H', W', C)):
  instance_id, semantic_id, valid, normal_geometric, normal_shading: s's value (nearest neighbour; normals in the
      camera frame, unchanged: same rotation); invalid pixels: ids 0, normals NaN.
  camera_z, range: `bilinear` (default): camera_z inverse-depth bilinear over q's 2x2 source pixels when all four show
      s's object, else s's (pixel_sampling.camera_z_at), range = camera_z * |K'^-1 p'|; `nearest`: s's camera_z and
      range (the point s sees). Metres, NaN invalid.
  rgb: scene-linear float (the bundle's colourspace, untouched): bilinear over q's 2x2 source pixels (`bilinear`)
      or s's value (`nearest`); 0 where the rectified pixel has no source.
  source_row, source_col (int32 .npy): s; -1 where invalid. source_row carries the pixel's row time.
  objects.json: per object of the event's table seen in the rectified view: its modal mask is instance_id ==
      render_index (nearest neighbour), its box [x, y, w, h] (w = x_max - x_min + 1, px) and pixel count recomputed
      from that mask; with object labels, amodal_masks.npy (O, H', ceil(W'/8) packbits) holds the amodal masks
      resampled the same way from the objects' 3x canvas masks (rectify_amodal), and the amodal count and box come
      from them.
Per flow (OUT_DIR/<sensor>/<i0:06d>-<i1:06d>/, on the rectified grid of the source (forward) or destination
(backward) event): flow = d' - s', where s' = K' unproject(s) and d' = K' unproject(s + flow(s)) (both pixel
positions rectified through rowbeam.model.lens); flow_<dir>_start (H', W', 2) = s' (the flow vector's start: the
rectified position of s, which lies within nearest_neighbour_px source pixels of q); the four flags of s carried,
dest_in_bounds re-judged in the rectified image (dest_visible requires it); scene flow of s unchanged.
Formats: EXR with the bundle payload's channels and dtype (--format exr, default) or .npy; --png adds 16-bit PNGs
in the BOP depth and KITTI flow encodings.
"""
from __future__ import annotations

import io
import json
import math

import numpy as np

from rowbeam.adapters.adapter import AdapterFormat, bundle_to_folder
from rowbeam.bundle.arrays import write_exr
from rowbeam.bundle.reader import Bundle
from rowbeam.util.errors import RowbeamError
from rowbeam.sensors import sensor_type
from rowbeam.model.lens import Lens, lens_from_calibration, pixel_rays, project, project_uv, unproject
from rowbeam.model.modalities import FLAG_NAMES
from rowbeam.model.pixel_sampling import bilinear_corners, camera_z_at, nearest_pixel
from rowbeam.adapters.output import FOLDER_SIDECAR, check_output_dir, folder_listing, sidecar, sidecar_bytes
from rowbeam.adapters.output import staged_dir, write_file

INTERPOLATIONS = ("bilinear", "nearest")
FORMATS = ("exr", "npy")
EVENT_NEEDED = ("camera_z", "instance_id", "semantic_id", "valid")
EVENT_OPTIONAL = ("range", "normal_geometric", "normal_shading", "rgb")
OPENCV_GRID = 9           # cv2.getOptimalNewCameraMatrix samples a 9 x 9 grid over the source image

ALPHA_RULE = {
    "opencv": "cv2.getOptimalNewCameraMatrix(K, D, size, alpha, new_size, centerPrincipalPoint=False): the 9x9 grid "
              "of source pixels (i (W-1)/8, j (H-1)/8) unprojected (converged, rowbeam.model.lens); alpha 0 maps the "
              "inscribed rectangle of the unprojected grid onto the rectified pixel centres 0..W'-1, 0..H'-1 (every "
              "rectified pixel has a source), alpha 1 the circumscribed one (every source pixel kept); linear between",
    "opencv_fisheye": "cv2.fisheye.estimateNewCameraMatrixForUndistortRectify(K, D, size, I, balance=alpha, new_size, "
                      "fov_scale=1): the four source edge midpoints (W/2, 0), (W, H/2), (W/2, H), (0, H/2) unprojected; "
                      "alpha 0 the longest focal length of the four (zoomed in), alpha 1 the shortest (all four kept)",
}

LOST = [
    "sub-pixel geometry of ids, normals and object masks: each rectified pixel takes the nearest source pixel's value "
    "(up to 0.71 px away; max_rounding_error.nearest_neighbour_px, per event in events[].nearest_neighbour_px); "
    "silhouettes move by up to half a source pixel; events[].mixed_id_pixels counts the rectified pixels whose 2x2 "
    "source neighbourhood holds more than one instance id (the resampled edges)",
    "camera_z between pixels (bilinear): inverse-depth bilinear on the distorted grid (exact where the surface is planar "
    "and the distortion locally affine), the nearest pixel's value across object edges; nearest: the nearest source "
    "pixel's point, whose ray is not the rectified pixel's",
    "rolling-shutter time per pixel: a rectified row mixes source rows; source_row.npy keeps the row (and so the "
    "time, row_time_ns of the event) each pixel came from; row_T_world_camera is not rewritten",
    "pixels with no source: rectified pixels whose ray lands outside the source image or the lens's valid domain "
    "(events[].no_source_pixels; valid 0, rgb 0)",
    "source pixels outside the rectified frame (events[].cropped_source_pixels: valid source pixels whose ray "
    "K' projects outside the rectified image; alpha 0 crops, alpha 1 keeps the source image)",
    "rgb: resampled (bilinear or nearest) on the distorted grid: the pixel filter and exposure are the source's",
    "flow: vectors of the nearest source pixel, their start rectified (flow_<dir>_start, not the pixel centre); "
    "destinations outside the rectified frame have dest_in_bounds 0",
    "object labels: amodal masks resampled (nearest neighbour) from the 3x canvas, so beyond the source image too, "
    "but not beyond the canvas or the lens's valid domain; object poses are not rewritten; boxes and counts are "
    "recomputed from the rectified masks",
]


# ----- the rectified camera ----------------------------------------------------------------------------------

def parse_pinhole(text: str | None, what: str) -> list[float] | None:
    if text is None:
        return None
    try:
        values = [float(x) for x in text.replace("x", ",").split(",")]
    except ValueError:
        raise RowbeamError(f"{what} {text!r}: not a list of numbers") from None
    if not all(np.isfinite(values)) or any(v <= 0 for v in values[:2]):
        raise RowbeamError(f"{what} {text!r}: needs finite numbers, the first two > 0")
    return values


def parse_alpha(text) -> float | None:
    """--alpha: a number in [0, 1] (0 keeps only pixels with a source, 1 keeps the whole source image)."""
    if text is None:
        return None
    try:
        alpha = float(text)
    except (TypeError, ValueError):
        raise RowbeamError(f"--alpha {text!r}: not a number; give 0 (crop to pixels with a source) .. 1 (keep the "
                           "whole source image)") from None
    if not (math.isfinite(alpha) and 0.0 <= alpha <= 1.0):
        raise RowbeamError(f"--alpha {text!r}: must lie in [0, 1] (0 crops to pixels with a source, 1 keeps the whole "
                           "source image)")
    return alpha


def opencv_alpha_K(x: np.ndarray, y: np.ndarray, alpha: float, size_out: tuple[int, int]) -> np.ndarray:
    """cv2.getOptimalNewCameraMatrix's interpolation (centerPrincipalPoint=False) from the undistorted normalized
    coordinates (x, y) of its 9x9 source grid ((9, 9) arrays, row j = grid row): K' (3x3 px)."""
    Wo, Ho = size_out
    inner = (x[:, 0].max(), y[0].max(), x[:, -1].min(), y[-1].min())      # x0, y0, x1, y1
    outer = (x.min(), y.min(), x.max(), y.max())

    def fit(rect):
        fx, fy = (Wo - 1) / (rect[2] - rect[0]), (Ho - 1) / (rect[3] - rect[1])
        return np.array([fx, fy, -fx * rect[0], -fy * rect[1]])
    fx, fy, cx, cy = fit(inner) * (1.0 - alpha) + fit(outer) * alpha
    return np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])


def fisheye_balance_K(x: np.ndarray, y: np.ndarray, aspect: float, balance: float, size_in, size_out) -> np.ndarray:
    """cv2.fisheye.estimateNewCameraMatrixForUndistortRectify (R = I, fov_scale = 1), step by step as OpenCV does
    it, from the undistorted normalized coordinates of the edge midpoints (W/2, 0), (W, H/2), (W/2, H), (0, H/2)
    (arrays of 4); aspect = f_x / f_y."""
    W, H = size_in
    cn = np.array([np.mean(x), np.mean(y) * aspect])
    px, py = np.asarray(x, np.float64), np.asarray(y, np.float64) * aspect
    fs = (W * 0.5 / (cn[0] - px.min()), W * 0.5 / (px.max() - cn[0]),
          H * 0.5 * aspect / (cn[1] - py.min()), H * 0.5 * aspect / (py.max() - cn[1]))
    f = balance * min(fs) + (1.0 - balance) * max(fs)
    c = -cn * f + np.array([W, H * aspect]) * 0.5
    rx, ry = size_out[0] / W, size_out[1] / H
    return np.array([[f * rx, 0.0, c[0] * rx], [0.0, f / aspect * ry, c[1] / aspect * ry], [0.0, 0.0, 1.0]])


def alpha_grid(lens: Lens) -> tuple[np.ndarray, np.ndarray]:
    """The source pixel coordinates OpenCV's rule samples for this lens model ((9, 9) grid or the 4 edge midpoints)."""
    W, H = lens.width, lens.height
    if lens.model == "opencv_fisheye":
        return np.array([W / 2, W, W / 2, 0.0]), np.array([0.0, H / 2, H, H / 2])
    g = np.arange(OPENCV_GRID, dtype=np.float64)
    u, v = np.meshgrid(g * (W - 1) / (OPENCV_GRID - 1), g * (H - 1) / (OPENCV_GRID - 1))
    return u, v


def rectified_K(lens: Lens, alpha: float, size_out: tuple[int, int], where: str = "") -> np.ndarray:
    """K' (3x3 px) that OpenCV's rule (ALPHA_RULE[lens.model]) gives for `alpha`, from converged unprojection.
    RowbeamError when a sampled source pixel has no ray (outside the lens's valid domain)."""
    u, v = alpha_grid(lens)
    rays, ok, _ = unproject(lens, u, v)
    if not ok.all():
        i = np.flatnonzero(~ok.ravel())[0]
        raise RowbeamError(f"--alpha: {where}source pixel ({u.ravel()[i]:g}, {v.ravel()[i]:g}) that OpenCV's rule "
                           f"samples lies outside the {lens.model} lens's valid domain; give --K fx,fy,cx,cy instead")
    x, y = rays[..., 0], rays[..., 1]
    if lens.model == "opencv_fisheye":
        return fisheye_balance_K(x, y, lens.K[0, 0] / lens.K[1, 1], alpha, (lens.width, lens.height), size_out)
    return opencv_alpha_K(x, y, alpha, size_out)


# ----- resampling maps ---------------------------------------------------------------------------------------

class RectMap:
    """Where each rectified pixel (H', W') looks in the source image: q (continuous source px), inside (q in the
    source image and the lens's domain), s = (rows, cols) nearest source pixel, rays (H', W', 3) = K'^-1 p'."""

    def __init__(self, lens: Lens, K_out: np.ndarray, size_out: tuple[int, int]):
        W, H = lens.width, lens.height
        Wo, Ho = size_out
        v, u = np.mgrid[0:Ho, 0:Wo].astype(np.float64)
        self.rays = pixel_rays(K_out, u, v)
        q, seen = project(lens, self.rays)
        self.qu, self.qv = q[..., 0], q[..., 1]
        with np.errstate(invalid="ignore"):
            self.inside = seen & (self.qu >= -0.5) & (self.qu < W - 0.5) & (self.qv >= -0.5) & (self.qv < H - 0.5)
        self.rows, self.cols = nearest_pixel(self.qu, self.qv, W, H)
        self.lens, self.K_out, self.size_out = lens, np.asarray(K_out, np.float64), size_out
        self._source = None
        self.corners = bilinear_corners(self.qu, self.qv, W, H)

    def nearest(self, a: np.ndarray) -> np.ndarray:
        return a[self.rows, self.cols]

    def bilinear(self, a: np.ndarray) -> np.ndarray:
        """Bilinear over q's 2x2 source pixel centres (clamped at the border); float64."""
        out = 0.0
        for r, c, w in self.corners:
            out = out + (w[..., None] if a.ndim == 3 else w) * a[r, c].astype(np.float64)
        return out

    def source_rectified(self) -> tuple[np.ndarray, np.ndarray]:
        """Rectified positions (u', v') ((H, W) each, NaN without a ray) of every source pixel centre (computed once)."""
        if self._source is None:
            v, u = np.mgrid[0:self.lens.height, 0:self.lens.width].astype(np.float64)
            self._source = self.rectify_positions(u, v)
        return self._source

    def kept(self) -> np.ndarray:
        """(H, W) bool: source pixel centres whose ray lands inside the rectified image."""
        ur, vr = self.source_rectified()
        Wo, Ho = self.size_out
        with np.errstate(invalid="ignore"):
            return (ur >= -0.5) & (ur < Wo - 0.5) & (vr >= -0.5) & (vr < Ho - 0.5)

    def rectify_positions(self, u, v) -> tuple[np.ndarray, np.ndarray]:
        """Distorted source pixel positions (u, v) -> rectified positions K' unproject(u, v); NaN without a ray."""
        return project_uv(self.K_out, pixel_rays(self.lens, u, v))


def rectify_event(m: RectMap, arrays: dict, interpolation: str = "bilinear") -> tuple[dict, dict]:
    """(rectified arrays, stats) of one distorted camera event through the map `m` of its lens; arrays:
    EVENT_NEEDED and any of EVENT_OPTIONAL."""
    lens = m.lens
    valid = m.inside & (m.nearest(arrays["valid"]) == 1)
    ids = np.where(valid, m.nearest(arrays["instance_id"]), 0).astype(np.uint32)
    if interpolation == "bilinear":
        z, _ = camera_z_at(arrays["camera_z"], arrays["instance_id"], m.qu, m.qv, ids.astype(np.int64))
        rng = z * np.linalg.norm(m.rays, axis=-1)
    else:
        z = m.nearest(arrays["camera_z"]).astype(np.float64)
        rng = m.nearest(arrays["range"]).astype(np.float64) if "range" in arrays else \
            z * np.linalg.norm(pixel_rays(lens, m.cols.astype(np.float64), m.rows.astype(np.float64)), axis=-1)
    valid &= np.isfinite(z)
    nan = np.float32(np.nan)
    out = {
        "camera_z": np.where(valid, z, nan).astype(np.float32),
        "range": np.where(valid, rng, nan).astype(np.float32),
        "instance_id": np.where(valid, ids, 0).astype(np.uint32),
        "semantic_id": np.where(valid, m.nearest(arrays["semantic_id"]), 0).astype(np.uint32),
        "valid": valid.astype(np.uint8),
        "source_row": np.where(valid, m.rows, -1).astype(np.int32),
        "source_col": np.where(valid, m.cols, -1).astype(np.int32),
    }
    for name in ("normal_geometric", "normal_shading"):
        if name in arrays:
            out[name] = np.where(valid[..., None], m.nearest(arrays[name]), nan).astype(np.float32)
    if "rgb" in arrays:
        rgb = m.bilinear(arrays["rgb"]) if interpolation == "bilinear" else m.nearest(arrays["rgb"])
        out["rgb"] = np.where(m.inside[..., None], rgb, 0.0).astype(arrays["rgb"].dtype)
    mixed = np.zeros(valid.shape, bool)
    corners = m.corners
    for r, c, _ in corners[1:]:
        mixed |= arrays["instance_id"][r, c] != arrays["instance_id"][corners[0][0], corners[0][1]]
    nn = np.hypot(m.qu - m.cols, m.qv - m.rows)[valid]
    stats = {"valid_fraction": float(valid.mean()), "no_source_pixels": int((~m.inside).sum()),
             "cropped_source_pixels": cropped_source_pixels(m, arrays["valid"]),
             "mixed_id_pixels": int((mixed & valid).sum()), "nearest_neighbour_px": float(nn.max(initial=0.0))}
    return out, stats


def cropped_source_pixels(m: RectMap, source_valid: np.ndarray) -> int:
    """Valid source pixels whose ray K' projects outside the rectified image (or that have no ray)."""
    return int(((source_valid == 1) & ~m.kept()).sum())


def _box(mask: np.ndarray) -> list[int] | None:
    from rowbeam.adapters.objects import mask_box

    b = mask_box(mask)
    return None if b is None else [b[0], b[1], b[2] - b[0] + 1, b[3] - b[1] + 1]


def rectify_amodal(m: RectMap, canvases: list[np.ndarray]) -> np.ndarray:
    """Rectified amodal masks (O, H', W') bool from the objects' 3x canvas masks ((3H, 3W) each, canvas pixel
    (c, x) <-> source pixel (u, v) = (x - W, c - H)): the bit of the canvas pixel nearest to q, so rectified pixels
    beyond the source image keep the amodal silhouette the canvas holds; False where q has no ray or lies beyond
    the canvas."""
    W, H = m.lens.width, m.lens.height
    with np.errstate(invalid="ignore"):
        on = (m.qu >= -W - 0.5) & (m.qu < 2 * W - 0.5) & (m.qv >= -H - 0.5) & (m.qv < 2 * H - 0.5)
    rc, cc = nearest_pixel(m.qu + W, m.qv + H, 3 * W, 3 * H)
    return np.stack([on & c[rc, cc] for c in canvases]) if canvases else np.zeros((0,) + m.inside.shape, bool)


def object_boxes(instance_id: np.ndarray, objects: list[dict], amodal: dict | None = None) -> list[dict]:
    """Per object of the table seen in the rectified instance_id (or with a rectified amodal mask): modal pixel count
    and box [x, y, w, h] (px, w = x_max - x_min + 1) of its rectified modal mask (instance_id == render_index);
    `amodal` {render index: (mask_index, rectified amodal mask)} adds the amodal count and box."""
    out = []
    present = set(np.unique(instance_id).tolist()) - {0}
    amodal = amodal or {}
    for o in objects:
        if o["render_index"] not in present and o["render_index"] not in amodal:
            continue
        mask = instance_id == o["render_index"]
        row = {"id": o["id"], "render_index": o["render_index"], "class_id": o.get("class_id"),
               "class_tag": o.get("class_tag"), "name": o.get("name"), "px_count_visib": int(mask.sum()),
               "bbox_visib": _box(mask)}
        if o["render_index"] in amodal:
            index, am = amodal[o["render_index"]]
            row.update(mask_index=index, px_count_in_image=int(am.sum()), bbox_in_image=_box(am))
        out.append(row)
    return out


def rectify_flow(m: RectMap, arrays: dict, direction: str) -> dict:
    """Rectified flow of one direction (arrays: the flow folder's `flow_<direction>` and its four flags; scene flow
    when forward): flow = K' unproject(s + flow(s)) - K' unproject(s) at the nearest source pixel s."""
    size_out = m.size_out
    pre = f"flow_{direction}"
    flow = m.nearest(arrays[pre]).astype(np.float64)
    su, sv = m.cols.astype(np.float64), m.rows.astype(np.float64)
    s_u, s_v = (p[m.rows, m.cols] for p in m.source_rectified())
    d_u, d_v = m.rectify_positions(su + flow[..., 0], sv + flow[..., 1])
    Wo, Ho = size_out
    flags = {f: m.inside & (m.nearest(arrays[f"{pre}_{f}"]) == 1) for f in FLAG_NAMES}
    with np.errstate(invalid="ignore"):
        landed = np.isfinite(d_u) & np.isfinite(d_v)
        flags["dest_in_bounds"] = m.inside & landed & (d_u >= -0.5) & (d_u < Wo - 0.5) & (d_v >= -0.5) & (d_v < Ho - 0.5)
    flags["dest_visible"] &= flags["dest_in_bounds"]
    ok = m.inside & landed & np.isfinite(flow).all(axis=-1)
    nan = np.float32(np.nan)
    out = {pre: np.where(ok[..., None], np.stack([d_u - s_u, d_v - s_v], -1), nan).astype(np.float32),
           f"{pre}_start": np.where(m.inside[..., None], np.stack([s_u, s_v], -1), nan).astype(np.float32)}
    out.update({f"{pre}_{f}": flags[f].astype(np.uint8) for f in FLAG_NAMES})
    if direction == "forward":
        for name in ("scene_flow_world", "scene_flow_source_camera"):
            if name in arrays:
                out[name] = np.where(m.inside[..., None], m.nearest(arrays[name]), nan).astype(np.float32)
    return out


# ----- writing -----------------------------------------------------------------------------------------------

XY_CHANNELS = ["u", "v"]
OBJECTS_BOX_TEXT = ("[x, y, w, h] px, w = x_max - x_min + 1: bbox_visib of the rectified modal mask instance_id == "
                    "render_index; bbox_in_image and px_count_in_image of the rectified amodal mask (amodal_masks.npy "
                    "row mask_index, np.packbits(axis=-1)), when the event has object labels; null when empty")
PNG_ENCODINGS = {"depth.png": "BOP: uint16 = camera_z in mm / depth_scale_mm (per event), 0 = invalid",
                 "flow_<dir>.png": "KITTI 2015: uint16 R, G = flow * 64 + 2^15, B = 1 where the flow is defined "
                                   "(correspondence_defined; destinations outside the image included)"}


def _write_arrays(folder, arrays: dict, entries: dict, fmt: str) -> None:
    """Each array as EXR (the bundle entry's channels and dtype; new float planes FLOAT) or .npy; ints without a
    bundle entry (source_row, source_col) always .npy."""
    folder.mkdir(parents=True)
    for name, a in arrays.items():
        entry = entries.get(name)
        if fmt == "exr" and (entry is not None and entry.get("format") == "openexr" or a.dtype == np.float32):
            channels = entry["channels"] if entry else ([name] if a.ndim == 2 else XY_CHANNELS)
            dtype = entry["dtype"] if entry else "float32"
            try:
                write_exr(folder / f"{name}.exr", a, channels, dtype)
            except OSError as exc:
                raise RowbeamError(f"{folder / (name + '.exr')}: cannot write ({exc.strerror or exc})") from None
        else:
            buf = io.BytesIO()
            np.save(buf, a.astype(a.dtype.newbyteorder("<"), copy=False), allow_pickle=False)
            write_file(folder / f"{name}.npy", buf.getvalue())


def _depth_png(folder, camera_z, valid) -> tuple[float, float]:
    """depth.png in the BOP encoding (uint16 camera_z mm / depth_scale, 0 invalid): (depth_scale mm, rounding mm)."""
    from rowbeam.adapters.bop import DEPTH_SCALES, depth_png
    from rowbeam.adapters.png import png_bytes

    deepest = float(np.nanmax(np.where(valid == 1, camera_z, 0.0), initial=0.0)) * 1000.0
    scale = next((s for s in DEPTH_SCALES if deepest / s <= 65535), DEPTH_SCALES[-1])
    depth, err = depth_png(camera_z, valid, scale)
    write_file(folder / "depth.png", png_bytes(depth, 16))
    return scale, err


def _lens_key(cal: dict) -> str:
    """The part of a calibration the rectification depends on (K, distortion, image size), comparable."""
    d = cal.get("distortion", {})
    return json.dumps([cal["K"], d.get("model"), d.get("coefficients"), cal["image_size_px"]])


def _json(doc) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()


def export_rectified(bundle_path, out_dir, sensor: str | None = None, K: str | None = None, size: str | None = None,
                     alpha=None, fmt: str = "exr", png: bool = False, interpolation: str = "bilinear") -> dict:
    """Rectified pinhole views of every distorted camera event (one sensor, or every camera with a lens) and of
    the flows between them; one staged folder renamed into place (nothing half-written)."""
    choice = _intrinsics_choice(K, size, alpha, fmt, interpolation)
    bundle = Bundle.open(bundle_path)
    out_dir = check_output_dir(out_dir, bundle.path)
    events = [e for e in bundle.events(sensor) if sensor_type(e.sensor_type).has_rows
              and lens_from_calibration(e.manifest["calibration"]) is not None]
    if not events:
        raise RowbeamError(f"{bundle.path}: no camera event with a lens model (a pinhole bundle has nothing to "
                           "rectify)" + (f" for sensor {sensor!r}" if sensor else ""))
    cameras: dict[str, dict] = {}
    worst, per_event, rounding, png_info = 0.0, [], {}, {}
    with staged_dir(out_dir) as stage:
        for e in events:
            cam = _event_camera(e, cameras, choice)
            row = _rectify_event(e, cam, stage, fmt, interpolation, png, png_info, rounding)
            worst = max(worst, row["nearest_neighbour_px"])
            per_event.append(row)
        per_flow = _rectify_flows(bundle, sensor, cameras, {(e.sensor, e.index) for e in events}, stage, fmt, png,
                                  rounding)
        pinhole = {s: {k: v for k, v in c.items() if k not in ("lens", "key", "map")} for s, c in cameras.items()}
        doc = sidecar("rectified_pinhole", out_dir.name, {"bundle": str(bundle.path), "sensor": events[0].sensor,
                                                          "events": [e.sample_id for e in events],
                                                          "flows": [f["flow_id"] for f in per_flow]},
                      LOST, {"nearest_neighbour_px": worst, **rounding}, files=folder_listing(stage),
                      pinhole=pinhole, events=per_event, flows=per_flow, interpolation=interpolation, array_format=fmt,
                      **({"png": {**png_info, **PNG_ENCODINGS}} if png else {}),
                      camera_frame="the source camera's optical frame (no rectifying rotation): camera_z, range, "
                                   "normals and scene flow keep their values and frame",
                      grid="opencv pixel convention of the rectified K (pixel centres at integers)")
        write_file(stage / FOLDER_SIDECAR, sidecar_bytes(doc))
    return doc


def _intrinsics_choice(K, size, alpha, fmt: str, interpolation: str) -> dict:
    """The parsed options that choose the rectified camera: {"f": (fx, fy, cx, cy) or None, "wh": (W, H) or None,
    "alpha": float or None}; RowbeamError (one line) for a malformed or conflicting option."""
    fx_fy_cx_cy, wh, alpha = parse_pinhole(K, "--K"), parse_pinhole(size, "--size"), parse_alpha(alpha)
    if fx_fy_cx_cy is not None and len(fx_fy_cx_cy) != 4:
        raise RowbeamError(f"--K {K!r}: give fx,fy,cx,cy")
    if wh is not None and (len(wh) != 2 or any(int(x) != x or not 4 <= x <= 16384 for x in wh)):
        raise RowbeamError(f"--size {size!r}: give WxH, whole numbers 4 .. 16384")
    if alpha is not None and fx_fy_cx_cy is not None:
        raise RowbeamError("--alpha and --K both choose the rectified intrinsics; give one")
    if fmt not in FORMATS or interpolation not in INTERPOLATIONS:
        raise RowbeamError(f"--format {fmt!r} / --interpolation {interpolation!r}: choose {'|'.join(FORMATS)} / "
                           f"{'|'.join(INTERPOLATIONS)}")
    return {"f": fx_fy_cx_cy, "wh": wh, "alpha": alpha}


def _event_camera(e, cameras: dict, choice: dict) -> dict:
    """The rectified camera of event `e`'s sensor (made from its first event and kept in `cameras`): K, image size,
    the source lens and its RectMap; RowbeamError when a later event's calibration differs."""
    cal = e.manifest["calibration"]
    lens, f, wh, alpha = lens_from_calibration(cal), choice["f"], choice["wh"], choice["alpha"]
    size_out = tuple(cal["image_size_px"]) if wh is None else (int(wh[0]), int(wh[1]))
    if f is not None:
        K_out = np.array([[f[0], 0, f[2]], [0, f[1], f[3]], [0, 0, 1.0]])
    elif alpha is not None:
        K_out = rectified_K(lens, alpha, size_out, where=f"{e.sample_id}: ")
    else:
        K_out = np.array(cal["K"], np.float64)
    cam = cameras.setdefault(e.sensor, {"K": K_out.tolist(), "image_size_px": list(size_out),
                                        "alpha": alpha, "lens": lens, "key": _lens_key(cal),
                                        "map": RectMap(lens, K_out, size_out),
                                        "source_K": cal["K"],
                                        "rule": ALPHA_RULE.get(lens.model, ALPHA_RULE["opencv"]) if alpha is not None else
                                        ("given --K" if f is not None else "the event's K")})
    if cam["key"] != _lens_key(cal) or cam["K"] != K_out.tolist() or cam["image_size_px"] != list(size_out):
        raise RowbeamError(f"{e.path}: calibration differs from the sensor's first event; rectify one event "
                           "range of constant calibration at a time")
    return cam


def _rectify_event(e, cam: dict, stage, fmt: str, interpolation: str, png: bool, png_info: dict,
                   rounding: dict) -> dict:
    """Write event `e` rectified through `cam` under stage/SENSOR/INDEX (arrays, amodal masks, objects.json, and
    with `png` a depth PNG); returns its row of the sidecar's events list."""
    cal = e.manifest["calibration"]
    names = [n for n in EVENT_NEEDED + EVENT_OPTIONAL if n in EVENT_NEEDED or n in e.names]
    arrays, stats = rectify_event(cam["map"], e.arrays(names), interpolation)
    folder = stage / e.sensor / f"{e.index:06d}"
    _write_arrays(folder, arrays, e.manifest["modalities"], fmt)
    amodal = {}
    if e.object_labels and "amodal_masks" in e.names:
        labels = [lb for lb in e.object_labels if lb.get("mask_index") is not None]
        rect = rectify_amodal(cam["map"], [e.canvas_mask(lb) for lb in labels])
        amodal = {int(lb["instance_id"]): (k, rect[k]) for k, lb in enumerate(labels)}
        buf = io.BytesIO()
        np.save(buf, np.packbits(rect, axis=-1), allow_pickle=False)
        write_file(folder / "amodal_masks.npy", buf.getvalue())
    boxes = object_boxes(arrays["instance_id"], e.objects, amodal)
    write_file(folder / "objects.json", _json({"objects": boxes, "box": OBJECTS_BOX_TEXT}))
    if png:
        scale, err = _depth_png(folder, arrays["camera_z"], arrays["valid"])
        png_info.setdefault("depth_scale_mm", {})[f"{e.sensor}/{e.index:06d}"] = scale
        rounding["depth_png_mm"] = max(rounding.get("depth_png_mm", 0.0), err)
    return {"sample_id": e.sample_id, "folder": f"{e.sensor}/{e.index:06d}", "lens": cal["distortion"]["model"],
            "objects": len(boxes), **stats}


def _rectify_flows(bundle, sensor, cameras: dict, rectified: set, stage, fmt: str, png: bool, rounding: dict) -> list:
    """Rectify every flow of the bundle (of `sensor`) whose two events were rectified ({(sensor, index)}) under
    stage/SENSOR/SRC-DST (with `png` KITTI flow PNGs too); returns the sidecar's flows list."""
    per_flow = []
    for fl in bundle.flows(sensor):
        if fl.sensor not in cameras:
            continue
        src, dst = (int(fl.manifest["endpoints"][r]["index"]) for r in ("source", "destination"))
        if (fl.sensor, src) not in rectified or (fl.sensor, dst) not in rectified:
            continue
        cam = cameras[fl.sensor]
        if _lens_key(fl.manifest["calibration"]) != cam["key"]:
            raise RowbeamError(f"{fl.path}: the flow's calibration differs from its events'")
        out = {}
        for direction in ("forward", "backward"):
            names = [f"flow_{direction}"] + [f"flow_{direction}_{f}" for f in FLAG_NAMES] + (
                [n for n in ("scene_flow_world", "scene_flow_source_camera") if n in fl.names]
                if direction == "forward" else [])
            out.update(rectify_flow(cam["map"], fl.arrays(names), direction))
        folder = stage / fl.sensor / f"{src:06d}-{dst:06d}"
        _write_arrays(folder, out, fl.manifest["modalities"], fmt)
        if png:
            from rowbeam.adapters.flow_formats import write_kitti

            for direction in ("forward", "backward"):
                f = out[f"flow_{direction}"]
                known = np.isfinite(f).all(-1) & (out[f"flow_{direction}_correspondence_defined"] == 1)
                err = write_kitti(folder / f"flow_{direction}.png", f, known)
                rounding["kitti_flow_png_px"] = max(rounding.get("kitti_flow_png_px", 0.0), err)
        per_flow.append({"flow_id": fl.flow_id, "folder": f"{fl.sensor}/{src:06d}-{dst:06d}",
                         "forward_defined_fraction": float(np.isfinite(out["flow_forward"]).all(-1).mean()),
                         "backward_defined_fraction": float(np.isfinite(out["flow_backward"]).all(-1).mean())})
    return per_flow


def _arguments(p) -> None:
    bundle_to_folder(p, "camera sensor id (default: every camera with a lens)")
    p.add_argument("--K", help="pinhole intrinsics fx,fy,cx,cy in px (default: the event's K)")
    p.add_argument("--size", help="pinhole image size WxH (default: the event's)")
    p.add_argument("--alpha", help="choose K like cv2.getOptimalNewCameraMatrix (opencv lenses) or "
                   "cv2.fisheye.estimateNewCameraMatrixForUndistortRectify balance (fisheye): 0 = every pixel has "
                   "a source, 1 = the whole source image kept (0..1; not with --K)")
    p.add_argument("--format", default="exr", choices=("exr", "npy"), dest="array_format",
                   help="image arrays as EXR with the bundle's channels and dtypes (default) or .npy")
    p.add_argument("--png", action="store_true", help="also depth.png (16-bit, BOP) and flow_*.png (16-bit, KITTI)")
    p.add_argument("--interpolation", default="bilinear", choices=("bilinear", "nearest"),
                   help="camera_z (inverse depth) and rgb: bilinear (default) or nearest; ids, normals, flow "
                   "always nearest")


def _run(a) -> dict:
    return export_rectified(a.bundle, a.out_dir, a.sensor, a.K, a.size, a.alpha, a.array_format, a.png,
                            a.interpolation)


ADAPTER_FORMATS = (AdapterFormat(
    "rectify", "rectified (undistorted) pinhole view of distorted camera events: camera_z, range, ids (nearest "
    "neighbour), validity, source row", _arguments, _run,
    description="OUT_DIR/<sensor>/<index:06d>/ (camera_z, range, instance_id, semantic_id, valid, normals, rgb, "
    "source_row/col, objects.json) for every camera event with a lens model and OUT_DIR/<sensor>/<i0>-<i1>/ for the "
    "flows between them (rowbeam/adapters/rectify.py)."),)
