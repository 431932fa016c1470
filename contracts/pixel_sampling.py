"""Sampling image labels at continuous pixel coordinates (`opencv` convention: centres at integers)."""
from __future__ import annotations

import numpy as np


def bilinear_corners(u, v, width: int, height: int) -> list:
    """The 2x2 pixel-centre neighbourhood of continuous (u, v), clamped to the image:
    [(rows, cols, weights)] for its four corners (non-finite coordinates sample the corner pixel)."""
    u = np.nan_to_num(np.asarray(u, dtype=np.float64))
    v = np.nan_to_num(np.asarray(v, dtype=np.float64))
    u0 = np.clip(np.floor(u), 0, width - 2).astype(np.int64)
    v0 = np.clip(np.floor(v), 0, height - 2).astype(np.int64)
    fu, fv = np.clip(u - u0, 0, 1), np.clip(v - v0, 0, 1)
    return [(v0, u0, (1 - fu) * (1 - fv)), (v0, u0 + 1, fu * (1 - fv)),
            (v0 + 1, u0, (1 - fu) * fv), (v0 + 1, u0 + 1, fu * fv)]


def nearest_pixel(u, v, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of the pixel whose centre is nearest to continuous (u, v), clamped to the image."""
    u = np.nan_to_num(np.asarray(u, dtype=np.float64))
    v = np.nan_to_num(np.asarray(v, dtype=np.float64))
    return (np.clip(np.rint(v), 0, height - 1).astype(np.int64), np.clip(np.rint(u), 0, width - 1).astype(np.int64))


def camera_z_at(camera_z, instance_id, u, v, object_ids) -> tuple[np.ndarray, np.ndarray]:
    """(camera_z at continuous (u, v), instance id of the nearest pixel).

    camera_z is interpolated bilinearly in 1/z (exact on planar faces) when all four surrounding
    pixels show `object_ids`; otherwise it is the nearest pixel's value.
    """
    H, W = camera_z.shape
    z_flat, id_flat = camera_z.ravel(), instance_id.ravel()          # gathers by flat index (r * W + c)
    rows, cols = nearest_pixel(u, v, W, H)
    nearest = rows * W + cols
    inv = np.zeros(np.shape(u))
    same = np.ones(np.shape(u), dtype=bool)
    for r, c, w in bilinear_corners(u, v, W, H):
        f = r * W + c
        same &= id_flat.take(f).astype(np.int64) == object_ids
        with np.errstate(divide="ignore", invalid="ignore"):
            inv += w / z_flat.take(f).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(same, 1.0 / inv, z_flat.take(nearest).astype(np.float64))
    return z, id_flat.take(nearest).astype(np.int64)
