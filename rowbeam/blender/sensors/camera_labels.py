"""Derive camera labels from Cycles' world-space passes and per-row camera poses (numpy only).

Every label row is expressed in the camera frame at that row's reference time:
X_c = R_cw(t_row) (P_world - C(t_row)). range = |X_c|; camera_z is derived on the
pixel-centre ray, camera_z = range / sqrt(1 + x_n^2 + y_n^2), so the two are one surface
point. Normals are rotated with the same per-row pose and renormalised.
"""
from __future__ import annotations

import numpy as np

from rowbeam.model.camera_model import norm, range_factor
from rowbeam.model.ontology import BACKGROUND_ID, VOID_ID

from rowbeam.util.worker_threads import thread_map
from rowbeam.blender.sensors.ray_plane import on_exact_beam

BACKGROUND_DEPTH = 1e9  # Cycles' Depth pass reads 1e10 where nothing was hit


def semantic_lut(table) -> np.ndarray:
    """render index -> class id (uint32); index 0 = background."""
    lut = np.full(max((e.render_index for e in table), default=0) + 1, VOID_ID, dtype=np.uint32)
    lut[0] = BACKGROUND_ID
    for e in table:
        lut[e.render_index] = e.class_id
    return lut


def to_camera_frame(row_T_world_camera: np.ndarray, world_points: np.ndarray) -> np.ndarray:
    """World points (H, W, 3) -> camera frame of each row (H, W, 3), float64."""
    R = row_T_world_camera[:, :3, :3]
    C = row_T_world_camera[:, :3, 3]
    d = world_points.astype(np.float64)
    d -= C[:, None, :]
    return np.matmul(d, R)            # row h: X_c = R_wc^T (P - C), as a batched (W,3) @ (3,3) per row


def rotate_to_camera(row_T_world_camera: np.ndarray, world_vectors: np.ndarray) -> np.ndarray:
    """World vectors (H, W, 3) rotated into each row's camera frame and normalised, float64 (NaN where zero)."""
    v = np.matmul(world_vectors.astype(np.float64), row_T_world_camera[:, :3, :3])
    n = np.sqrt(np.einsum("hwi,hwi->hw", v, v))[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
        v /= n
    return v


def all_finite(a: np.ndarray) -> np.ndarray:
    """(...,) True where every component of a (..., C) array is finite: `np.isfinite(a).all(axis=-1)` per
    component, without numpy's slow reduction over a short last axis."""
    out = np.isfinite(a[..., 0])
    for c in range(1, a.shape[-1]):
        out &= np.isfinite(a[..., c])
    return out


def resolve_hits(depth, index_pass, position, lut_size: int):
    """(render indices, surface hit, hit on an object outside the table) from Cycles' data passes."""
    index = np.rint(index_pass).astype(np.int64)
    surface = (depth < BACKGROUND_DEPTH) & all_finite(position)
    return index, surface, surface & ((index <= 0) | (index >= lut_size))


# Rows derived at once: the float64 temporaries (~200 B/px) stay within BAND_PIXELS pixels, whatever the image size.
BAND_PIXELS = 1 << 15
LABEL_DTYPES = {"camera_z": np.float32, "range": np.float32, "valid": np.uint8, "normal_geometric": np.float32,
                "normal_shading": np.float32, "instance_id": np.uint32, "semantic_id": np.uint32}


def empty_labels(h: int, w: int) -> dict:
    """Uninitialised label arrays (LABEL_DTYPES) of an (h, w) image: normals (h, w, 3), the rest (h, w)."""
    return {k: np.empty((h, w, 3) if k.startswith("normal_") else (h, w), dtype=dt) for k, dt in LABEL_DTYPES.items()}


def derive_labels(passes: dict, row_T_world_camera: np.ndarray, K: np.ndarray, lut: np.ndarray,
                  first_row: int = 0, rays: np.ndarray | None = None) -> tuple[dict, dict]:
    """Label arrays for rows first_row.. of an image (passes may hold a band of rows), derived in bands of
    about BAND_PIXELS pixels straight into the final float32/uint arrays (`derive_band` per band, on worker
    threads: numpy releases the GIL; the result does not depend on the banding or the threads: every label is
    per pixel, each band is written by one call, and the stats are merged in band order).

    Returns (arrays, stats) as `derive_band`.
    """
    h, w = passes["depth"].shape
    step = max(1, BAND_PIXELS // max(w, 1))
    if h <= step:
        return derive_band(passes, row_T_world_camera, K, lut, first_row, rays)
    arrays = empty_labels(h, w)

    def band(r0: int) -> dict:
        r1 = min(h, r0 + step)
        return derive_band({k: v[r0:r1] for k, v in passes.items()}, row_T_world_camera[r0:r1], K, lut,
                           first_row + r0, None if rays is None else rays[r0:r1],
                           out={k: a[r0:r1] for k, a in arrays.items()})[1]

    stats: dict = {}
    for st in thread_map(band, range(0, h, step)):
        merge_stats(stats, st)
    return arrays, stats


def merge_stats(stats: dict, band: dict) -> dict:
    """Fold one band's derive stats into `stats` (max_* by maximum, NaN kept as np.max keeps it; counts summed,
    text kept); returns stats."""
    for k, v in band.items():
        if k.startswith("max_"):
            prev = stats.get(k)
            stats[k] = v if prev is None or v != v or v > prev else prev
        elif isinstance(v, (int, float)):
            stats[k] = stats.get(k, 0) + v
        else:
            stats[k] = v
    return stats


def derive_band(passes: dict, row_T_world_camera: np.ndarray, K: np.ndarray, lut: np.ndarray,
                first_row: int = 0, rays: np.ndarray | None = None, out: dict | None = None) -> tuple[dict, dict]:
    """Label arrays for rows first_row.. of an image (passes hold this band of rows; all at once).

    rays: None for the pinhole Blender camera; else the exact rays of the band's pixels through the lens
    (rowbeam.blender.cycles.lens_camera.PixelRays; NaN outside the valid domain): each hit is moved onto its exact ray
    (`exact_ray_depths`) and pixels outside the domain are invalid.
    out: label arrays of this band's shape (`empty_labels`) to write into, else new ones.
    Returns (arrays, stats): arrays keyed by modality name; stats count unresolved hits and
    the largest departure of the hit from the exact pixel-centre ray (filter jitter).
    """
    depth = passes["depth"]
    h, w = depth.shape
    arrays = empty_labels(h, w) if out is None else out
    position = passes["position"]
    index, hit_surface, unresolved = resolve_hits(depth, passes["index"], position, lut.size)
    valid = hit_surface & ~unresolved
    u = np.arange(w, dtype=np.float64)[None, :]           # pixel centres, broadcast over (h, w)
    v = np.arange(first_row, first_row + h, dtype=np.float64)[:, None]
    X = to_camera_frame(row_T_world_camera, position)
    n_geo = rotate_to_camera(row_T_world_camera, passes["true_normal"])
    lens_stats = {}
    if rays is None:
        rng = np.einsum("hwi,hwi->hw", X, X)
        np.sqrt(rng, out=rng)
        factor = range_factor(K, u, v)
    else:
        valid &= np.isfinite(rays.length)
        rng, factor, lens_stats = exact_ray_depths(X, n_geo, rays, valid)
    camera_z = rng / factor
    del factor
    # How far the Cycles sample strayed from the pixel-centre ray: |X.z - camera_z| on valid pixels.
    jitter = np.subtract(X[..., 2], camera_z)
    del X
    np.abs(jitter, out=jitter)
    max_jitter = float(jitter.max(initial=0.0, where=valid))
    del jitter
    n_sh = rotate_to_camera(row_T_world_camera, passes["normal"])
    bad_normal = valid & ~(all_finite(n_geo) & all_finite(n_sh))
    valid &= ~bad_normal
    invalid = ~valid
    nan = np.float32(np.nan)
    for name, value in (("camera_z", camera_z), ("range", rng), ("normal_geometric", n_geo), ("normal_shading", n_sh)):
        a = arrays[name]
        np.copyto(a, value, casting="same_kind")        # float64 -> float32, as astype
        a[invalid] = nan
    np.copyto(arrays["valid"], valid, casting="unsafe")
    instance = arrays["instance_id"]
    np.copyto(instance, index, casting="unsafe")        # render indices: small non-negative integers where valid
    instance[invalid] = 0
    np.take(lut, instance, out=arrays["semantic_id"])
    stats = {"unresolved_hit_pixels": int(unresolved.sum()), "normal_missing_pixels": int(bad_normal.sum()),
             "max_centre_ray_departure_m": max_jitter, **lens_stats}
    return arrays, stats


def exact_ray_depths(X: np.ndarray, normal: np.ndarray, rays, valid: np.ndarray):
    """(range (h, w), |ray| (h, w), stats) of camera-frame hits X (h, w, 3) moved onto their exact rays
    (lens_camera.PixelRays): the ray meets the plane through X with the true normal (ray_plane.on_exact_beam;
    grazing hits kept)."""
    P = on_exact_beam(X, normal, np.zeros(3), rays.unit)
    rng = norm(P)
    P -= X                                              # the shift of each hit onto its ray
    shift = norm(P)
    return rng, rays.length, {"hit_refinement": "each hit moved along its surface plane (true normal) onto the exact "
                                           "float64 ray of its pixel through the lens",
                         "max_refinement_shift_m": float(shift.max(initial=0.0, where=valid))}
