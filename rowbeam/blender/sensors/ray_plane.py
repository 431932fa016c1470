"""A ray meeting the plane of the surface Cycles hit: moves a float32 hit onto the exact float64 ray (camera pixels
and LiDAR beams alike; numpy only)."""
from __future__ import annotations

import numpy as np

from rowbeam.model.camera_model import norm

MIN_REFINE_COS = 1e-2


def dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(...,) a . b of (..., 3) vectors (broadcasting), elementwise. Summed (a0 b0 + a2 b2) + a1 b1, then + 0.0 (a zero
    is +0): numpy's einsum over a contiguous axis of 3 gives the same bits, so labels are unchanged from the einsum
    version."""
    return ((a[..., 0] * b[..., 0] + a[..., 2] * b[..., 2]) + a[..., 1] * b[..., 1]) + 0.0


def on_exact_beam(hit: np.ndarray, normal: np.ndarray, origin: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """(..., 3) world points: where the ray origin + s*direction meets the plane through `hit` with `normal`
    (world frame, metres; `direction` unit). Hits whose plane the ray meets at |cos| < MIN_REFINE_COS, or
    without a finite normal, are returned unchanged."""
    with np.errstate(invalid="ignore", divide="ignore"):
        n_dot_d = dot(normal, direction)
        cos = n_dot_d / norm(normal)
        s = dot(normal, hit - origin) / n_dot_d
    refine = np.isfinite(s) & (np.abs(cos) >= MIN_REFINE_COS) & (s > 0)
    return np.where(refine[..., None], origin + s[..., None] * direction, hit)
