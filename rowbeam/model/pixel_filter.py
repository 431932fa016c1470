"""Cycles' pixel filter support, and the pixels of an rgb render that a camera ray can reach through it.

Cycles draws each camera sample's offset from the pixel centre, per axis, from a table of its pixel filter that
spans [-s, +s] px, s = filter_width x FILTER_HALF_SUPPORT[type] (Cycles scene/film.cpp filter_table: the width is
scaled by 1 (box), 3 (Gaussian), 2 (Blackman-Harris) and tabulated over +- half of it). A pixel's rgb therefore
gathers light only from camera rays through the square [u - s, u + s] x [v - s, v + s] (pixel centres at integer
(u, v), the `opencv` convention). A lens camera shoots no ray where the lens has none (a fisheye beyond its valid
domain, rowbeam.model.lens): a plain render leaves a pixel whose whole square lies there exactly 0.
"""
from __future__ import annotations

import math

import numpy as np

FILTER_HALF_SUPPORT = {"BOX": 0.5, "GAUSSIAN": 1.5, "BLACKMAN_HARRIS": 1.0}
# Relative slack on the domain radius: the render camera tests its domain in float32 (lens_camera.py), so a
# pixel within this of the boundary is counted as reached (kept, never zeroed).
DOMAIN_SLACK = 1e-6


def half_support_px(filter_type: str, filter_width_px: float) -> float:
    """Half-width s (px) of the square around a pixel centre that Cycles' `filter_type` of `filter_width_px`
    samples from."""
    return float(filter_width_px) * FILTER_HALF_SUPPORT[filter_type]


def pixels_reached(lens, half_support: float) -> np.ndarray | None:
    """(H, W) bool: pixels whose filter square (half-width `half_support` px) reaches the lens's valid domain, i.e.
    that some camera ray can light; None when every pixel is reached (no lens, pinhole, opencv: every pixel of the
    image lies inside the domain). For opencv_fisheye the domain is the ellipse ((u - c_x)/f_x)^2 + ((v - c_y)/f_y)^2
    <= max_distorted_radius^2 (the render camera's own test), met by the square iff its point nearest (c_x, c_y)
    is inside (axis-aligned square and ellipse: the nearest point in the normalized metric is the clamped centre)."""
    if lens is None or lens.model != "opencv_fisheye" or not math.isfinite(lens.max_distorted_radius):
        return None
    K, s = lens.K, float(half_support)
    u, v = np.arange(lens.width, dtype=np.float64), np.arange(lens.height, dtype=np.float64)
    dx = (np.clip(K[0, 2], u - s, u + s) - K[0, 2]) / K[0, 0]
    dy = (np.clip(K[1, 2], v - s, v + s) - K[1, 2]) / K[1, 1]
    limit = lens.max_distorted_radius * (1.0 + DOMAIN_SLACK)
    return dx[None, :] ** 2 + dy[:, None] ** 2 <= limit * limit
