"""Rectified (undistorted) pinhole view of distorted camera events, for tools without lens models.

For every pixel (u', v') of a pinhole camera K' (default: the event's K and image size; same optical frame, no
rotation) the ray K'^-1 (u', v', 1) is projected through the event's lens (contracts.lens.project) to a
continuous source pixel q. ids (instance, semantic) are the nearest source pixel's (never interpolated);
camera_z is inverse-depth bilinear over the four source pixels when they all show that object, else the
nearest pixel's (contracts.pixel_sampling.camera_z_at), and range = camera_z * |ray'|. A rectified pixel is
valid when q lies inside the source image and its nearest source pixel is valid. Written per event:
OUT_DIR/<sensor>/<index:06d>/{camera_z,range}.npy (float32, NaN invalid), {instance_id,semantic_id}.npy
(uint32), valid.npy (uint8), source_row.npy (int32: the source row whose time the pixel carries, -1 invalid).
"""
from __future__ import annotations

import io

import numpy as np

from ..bundle_reader import Bundle
from ..errors import RowbeamError
from ..lens import lens_from_calibration, pixel_rays, project
from ..pixel_sampling import camera_z_at, nearest_pixel
from .output import FOLDER_SIDECAR, check_output_dir, folder_listing, sidecar, sidecar_bytes, staged_dir, write_file

LOST = [
    "sub-pixel geometry of ids: each rectified pixel takes the nearest source pixel's id (up to 0.71 px away; "
    "max_rounding_error.nearest_neighbour_px), so silhouettes move by up to half a pixel",
    "camera_z between pixels: inverse-depth bilinear on the distorted grid (exact only where the surface is planar "
    "and the distortion locally affine), the nearest pixel's value across object edges",
    "rolling-shutter time per pixel: a rectified row mixes source rows; source_row.npy keeps the row (and so the "
    "time, row_time_ns of the event) each pixel came from; row_T_world_camera is not rewritten",
    "pixels the lens does not see: rectified pixels whose ray lands outside the source image or its valid domain "
    "are invalid",
    "normals, rgb, object labels and flow are not rectified",
]


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


def rectify_event(manifest: dict, arrays: dict, K_out: np.ndarray, size_out: tuple[int, int]) -> tuple[dict, dict]:
    """(rectified arrays, stats) of one distorted camera event (arrays: camera_z, instance_id, semantic_id, valid)."""
    cal = manifest["calibration"]
    lens = lens_from_calibration(cal)
    W, H = cal["image_size_px"]
    if lens is None:
        raise RowbeamError(f"event {manifest['sample_id']}: pinhole camera without a lens; nothing to rectify")
    Wo, Ho = size_out
    v, u = np.mgrid[0:Ho, 0:Wo].astype(np.float64)
    rays = pixel_rays(K_out, u, v)
    q, seen = project(lens, rays)
    inside = seen & (q[..., 0] >= -0.5) & (q[..., 0] < W - 0.5) & (q[..., 1] >= -0.5) & (q[..., 1] < H - 0.5)
    rows, cols = nearest_pixel(q[..., 0], q[..., 1], W, H)
    valid = inside & (arrays["valid"][rows, cols] == 1)
    ids = np.where(valid, arrays["instance_id"][rows, cols], 0).astype(np.uint32)
    z, _ = camera_z_at(arrays["camera_z"], arrays["instance_id"], q[..., 0], q[..., 1], ids.astype(np.int64))
    valid &= np.isfinite(z)
    nan = np.float32(np.nan)
    out = {
        "camera_z": np.where(valid, z, nan).astype(np.float32),
        "range": np.where(valid, z * np.linalg.norm(rays, axis=-1), nan).astype(np.float32),
        "instance_id": np.where(valid, ids, 0).astype(np.uint32),
        "semantic_id": np.where(valid, arrays["semantic_id"][rows, cols], 0).astype(np.uint32),
        "valid": valid.astype(np.uint8),
        "source_row": np.where(valid, rows, -1).astype(np.int32),
    }
    nn = np.hypot(q[..., 0] - cols, q[..., 1] - rows)[valid]
    stats = {"valid_fraction": float(valid.mean()), "outside_source_pixels": int((~inside).sum()),
             "nearest_neighbour_px": float(nn.max(initial=0.0))}
    return out, stats


def export_rectified(bundle_path, out_dir, sensor: str | None = None, K: str | None = None,
                     size: str | None = None) -> dict:
    """Rectified pinhole views of every distorted camera event (one sensor, or every camera with a lens)."""
    bundle = Bundle.open(bundle_path)
    out_dir = check_output_dir(out_dir, bundle.path)
    fx_fy_cx_cy, wh = parse_pinhole(K, "--K"), parse_pinhole(size, "--size")
    if fx_fy_cx_cy is not None and len(fx_fy_cx_cy) != 4:
        raise RowbeamError(f"--K {K!r}: give fx,fy,cx,cy")
    if wh is not None and (len(wh) != 2 or any(int(x) != x or not 4 <= x <= 16384 for x in wh)):
        raise RowbeamError(f"--size {size!r}: give WxH, whole numbers 4 .. 16384")
    events = [e for e in bundle.events(sensor) if e.sensor_type == "rolling_shutter_camera"
              and lens_from_calibration(e.manifest["calibration"]) is not None]
    if not events:
        raise RowbeamError(f"{bundle.path}: no camera event with a lens model"
                           + (f" for sensor {sensor!r}" if sensor else ""))
    worst, per_event, K_used = 0.0, [], None
    with staged_dir(out_dir) as stage:
        for e in events:
            cal = e.manifest["calibration"]
            K_out = np.array(cal["K"], np.float64) if fx_fy_cx_cy is None else np.array(
                [[fx_fy_cx_cy[0], 0, fx_fy_cx_cy[2]], [0, fx_fy_cx_cy[1], fx_fy_cx_cy[3]], [0, 0, 1.0]])
            size_out = tuple(cal["image_size_px"]) if wh is None else (int(wh[0]), int(wh[1]))
            arrays, stats = rectify_event(e.manifest, e.arrays(["camera_z", "instance_id", "semantic_id", "valid"]),
                                          K_out, size_out)
            folder = stage / e.sensor / f"{e.index:06d}"
            folder.mkdir(parents=True)
            for name, a in arrays.items():
                buf = io.BytesIO()
                np.save(buf, a, allow_pickle=False)
                write_file(folder / f"{name}.npy", buf.getvalue())
            worst = max(worst, stats["nearest_neighbour_px"])
            per_event.append({"sample_id": e.sample_id, "folder": f"{e.sensor}/{e.index:06d}",
                              "lens": cal["distortion"]["model"], **stats})
            K_used = K_used or {"K": K_out.tolist(), "image_size_px": list(size_out)}
        doc = sidecar("rectified_pinhole", out_dir.name, {"bundle": str(bundle.path), "sensor": events[0].sensor,
                                                          "events": [e.sample_id for e in events]},
                      LOST, {"nearest_neighbour_px": worst}, files=folder_listing(stage), pinhole=K_used,
                      events=per_event, camera_frame="the source camera's optical frame (no rectifying rotation)",
                      grid="opencv pixel convention of the pinhole K (pixel centres at integers)")
        write_file(stage / FOLDER_SIDECAR, sidecar_bytes(doc))
    return doc
