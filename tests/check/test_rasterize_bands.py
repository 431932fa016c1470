"""Memory-bounded rasterisation gives the same bits: rasterize_rays in bands of rows (down to one row) equals one
band over all rows; canvas_rays solved chunk by chunk equals one unproject call over the box, and CanvasRays' tiles
solved a few at a time equal all missing tiles solved in one call."""
from __future__ import annotations

import numpy as np
import pytest

from rowbeam.check import rasterize
from rowbeam.model.lens import LensSpec, make_lens, unproject


def _case(seed: int):
    rng = np.random.default_rng(seed)
    R, C = 40, 70
    v, u = np.mgrid[0:R, 0:C]
    rays = np.stack([u / C * 2.4 - 1.2, v / R * 1.8 - 0.9], -1) + rng.normal(0, 1e-3, (R, C, 2))
    rays[rng.random((R, C)) < 0.1] = np.nan
    V, F = rng.normal(0, 1, (30, 3)), rng.integers(0, 30, (40, 3))
    T = np.tile(np.eye(4), (R, 1, 1))
    T[:, 2, 3], T[:, 0, 3] = np.linspace(2.0, 3.5, R), np.linspace(0.0, 0.3, R)
    return rays, V, F, T


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("per_row", [False, True])
def test_rasterize_rays_in_bands_equals_one_band(monkeypatch, seed, per_row):
    rays, V, F, T = _case(seed)
    T = T if per_row else T[0]
    whole = rasterize.rasterize_rays(V, F, rays, T, near=0.8, far=3.3)       # clipped by near and far
    assert 0 < whole.sum() < whole.size
    for band_px in (3 * rays.shape[1] + 5, rays.shape[1], 1):                   # 3 rows, 1 row
        monkeypatch.setattr(rasterize, "BAND_PX", band_px)
        monkeypatch.setattr(rasterize, "PAIR_CHUNK", 1000)
        assert np.array_equal(rasterize.rasterize_rays(V, F, rays, T, near=0.8, far=3.3), whole)


def test_canvas_rays_chunk_by_chunk_equal_one_unproject(monkeypatch):
    W, H = 120, 90
    K = np.array([[100.0, 0, W / 2], [0, 100.0, H / 2], [0, 0, 1]])
    lens = make_lens(LensSpec(model="opencv", D=(-0.28, 0.07, 1e-3, -5e-4, 0.0)), K, W, H)
    monkeypatch.setattr(rasterize, "NEWTON_CHUNK", 1 << 14)
    v, u = np.mgrid[-H:2 * H, -W:2 * W].astype(np.float64)
    direct = unproject(lens, u + 0.25, v)[0][..., :2]                           # one call over the box
    assert np.array_equal(rasterize.canvas_rays(lens, -W, 2 * W, -H, 2 * H, 0.25, 0.0), direct, equal_nan=True)
    # tiles: a pixel's ray depends (in its last bits) on the pixels solved in its chunk, so batches of whole chunks
    monkeypatch.setattr(rasterize.CanvasRays, "TILE_BATCH", 10**6)              # every missing tile in one call
    one_call = rasterize.CanvasRays(lens, W, H).get(0, 3 * W, 0, 3 * H)
    monkeypatch.setattr(rasterize.CanvasRays, "TILE_BATCH", 1)                 # 4 tiles (one chunk) at a time
    assert np.array_equal(rasterize.CanvasRays(lens, W, H).get(0, 3 * W, 0, 3 * H), one_call, equal_nan=True)
