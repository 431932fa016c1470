"""Pixels a camera ray can reach through Cycles' pixel filter (rowbeam.model.pixel_filter), against a brute-force
sampling of each pixel's filter square with the render camera's own domain test."""
from __future__ import annotations

import numpy as np
import pytest

from rowbeam.model.lens import Lens
from rowbeam.model.pixel_filter import half_support_px, pixels_reached


def _fisheye(W=48, H=36, fx=9.0, fy=12.0, cx=22.3, cy=18.6, rd=1.2):
    K = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1.0]])
    return Lens("opencv_fisheye", K, (0.0, 0.0, 0.0, 0.0), W, H, max_distorted_radius=rd)


def _brute(lens, s, n=81):
    """Reached pixels by sampling each filter square on an n x n grid (its edges included), the OSL camera's test
    hypot((u - cx)/fx, (v - cy)/fy) <= max_rd on every sample."""
    K = lens.K
    off = np.linspace(-s, s, n)
    u = np.arange(lens.width)[None, :, None, None] + off[None, None, :, None]
    v = np.arange(lens.height)[:, None, None, None] + off[None, None, None, :]
    inside = np.hypot((u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1]) <= lens.max_distorted_radius
    return inside.any(axis=(2, 3))


def test_filter_support_is_cycles_table_span():
    """Blackman-Harris spans +- width (not width/2), Gaussian +- 1.5 width, box +- width/2."""
    assert half_support_px("BLACKMAN_HARRIS", 1.5) == 1.5
    assert half_support_px("GAUSSIAN", 1.5) == 2.25
    assert half_support_px("BOX", 1.0) == 0.5


@pytest.mark.parametrize("s", [0.5, 1.5, 2.25])
def test_reached_pixels_match_brute_force(s):
    """Off-centre principal point, f_x != f_y (an ellipse in pixels): equal to the sampled squares except where
    the boundary passes within one sampling step of a square (there the exact test may only add pixels)."""
    lens = _fisheye()
    exact, brute = pixels_reached(lens, s), _brute(lens, s)
    assert exact.shape == (36, 48) and not exact.all() and exact.any()
    assert (exact | ~brute).all(), "a pixel some sample reaches is never dropped"
    K, step = lens.K, 2 * s / 80
    u, v = np.arange(48.0), np.arange(36.0)
    dx = np.maximum(np.abs(u - K[0, 2]) - s - step, 0)[None, :] / K[0, 0]
    dy = np.maximum(np.abs(v - K[1, 2]) - s - step, 0)[:, None] / K[1, 1]
    near_boundary = np.hypot(dx, dy) <= lens.max_distorted_radius
    assert not (exact & ~brute & ~near_boundary).any()


def test_wrong_interpretations_disagree():
    """Half the support (width/2 for Blackman-Harris), a circle in pixels (f_x for both axes) or the domain of the
    pixel centres alone each drop pixels a ray reaches."""
    lens = _fisheye()
    right = pixels_reached(lens, 1.5)
    assert (right & ~pixels_reached(lens, 0.75)).any()
    circle = _fisheye(fy=9.0)
    assert (right != pixels_reached(circle, 1.5)).any()
    assert (right & ~pixels_reached(lens, 0.0)).any()


def test_every_pixel_is_reached_without_a_fisheye_domain():
    K = np.array([[30.0, 0, 20], [0, 30.0, 15], [0, 0, 1]])
    assert pixels_reached(None, 1.5) is None
    assert pixels_reached(Lens("pinhole", K, (), 40, 30), 1.5) is None
    assert pixels_reached(Lens("opencv", K, (0.1, 0.0, 0.0, 0.0), 40, 30, max_distorted_radius=2.0), 1.5) is None
    assert pixels_reached(_fisheye(rd=float("inf")), 1.5) is None
