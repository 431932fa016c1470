"""Sampling image labels at continuous pixel coordinates (`opencv` convention: centres at integers)."""
from __future__ import annotations

import numpy as np


def _finite(x) -> np.ndarray:
    """float64 pixel coordinates with NaN -> 0 and +-inf -> +-max float (np.nan_to_num): non-finite coordinates
    sample a corner pixel. Coordinates already float64 and finite are returned as they are (not copied)."""
    x = np.asarray(x, dtype=np.float64)
    return x if np.isfinite(x).all() else np.nan_to_num(x)


def _corner_terms(u, v, width: int, height: int):
    """(u0, v0 int64 top-left pixel-centre column and row, clamped; fu, fv, 1 - fu, 1 - fv float64) of finite (u, v)."""
    u0 = np.clip(np.floor(u), 0, width - 2).astype(np.int64)
    v0 = np.clip(np.floor(v), 0, height - 2).astype(np.int64)
    fu, fv = np.clip(u - u0, 0, 1), np.clip(v - v0, 0, 1)
    return u0, v0, fu, fv, 1 - fu, 1 - fv


def bilinear_corners(u, v, width: int, height: int) -> list:
    """The 2x2 pixel-centre neighbourhood of continuous (u, v), clamped to the image:
    [(rows, cols, weights)] for its four corners (non-finite coordinates sample the corner pixel)."""
    u0, v0, fu, fv, gu, gv = _corner_terms(_finite(u), _finite(v), width, height)
    return [(v0, u0, gu * gv), (v0, u0 + 1, fu * gv), (v0 + 1, u0, gu * fv), (v0 + 1, u0 + 1, fu * fv)]


def _nearest(u, v, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """nearest_pixel of finite (u, v)."""
    return (np.clip(np.rint(v), 0, height - 1).astype(np.int64), np.clip(np.rint(u), 0, width - 1).astype(np.int64))


def nearest_pixel(u, v, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of the pixel whose centre is nearest to continuous (u, v), clamped to the image."""
    return _nearest(_finite(u), _finite(v), width, height)


def camera_z_at(camera_z, instance_id, u, v, object_ids) -> tuple[np.ndarray, np.ndarray]:
    """(camera_z at continuous (u, v), instance id of the nearest pixel).

    camera_z is interpolated bilinearly in 1/z (exact on planar faces) when all four surrounding
    pixels show `object_ids`; otherwise it is the nearest pixel's value. The coordinates are made finite once
    and the four corners gathered by flat index (r * W + c) from the top-left one: the values of
    bilinear_corners and nearest_pixel, without their second pass over (u, v).
    """
    H, W = camera_z.shape
    z_flat, id_flat = camera_z.ravel(), instance_id.ravel()
    u, v = _finite(u), _finite(v)
    rows, cols = _nearest(u, v, W, H)
    nearest = rows * W + cols
    u0, v0, fu, fv, gu, gv = _corner_terms(u, v, W, H)
    top_left = v0 * W + u0
    inv = np.zeros(np.shape(u))
    same = np.ones(np.shape(u), dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        for offset, a, b in ((0, gu, gv), (1, fu, gv), (W, gu, fv), (W + 1, fu, fv)):
            f = top_left + offset if offset else top_left
            same &= id_flat.take(f) == object_ids           # uint32 vs int64 ids compare as int64
            inv += (a * b) / z_flat.take(f)                 # float32 z promoted to float64 exactly
        z = np.where(same, 1.0 / inv, z_flat.take(nearest).astype(np.float64))
    return z, id_flat.take(nearest).astype(np.int64)
