"""Large meshes (more than CULL_MIN_TRIANGLES): the rasteriser keeps, per step of rows, only the triangles whose
(margin-grown) v-extent reaches them, and the ray cast tests each group of rays only against the triangles whose
bounding sphere the group's lines can meet. Both culls are exact: coverage and hits equal the unculled computation
bit for bit, for margins 0, inward and outward (the grown region of a triangle is its scaling about the incentre),
near/far clipping, and rays through vertices, edges and misses (in groups of 5 from one origin, close together as
a pixel's probes or far apart; some without a direction), on a noisy heightfield with zero-area and sliver
triangles."""
from __future__ import annotations

import numpy as np
import pytest

from rowbeam.check import rasterize as rz
from rowbeam.check import ray_cast as rc

K = np.array([[200.0, 0, 160], [0, 200, 90], [0, 0, 1]])


def heightfield(side: int = 110):
    """(V (N, 3) m, F (M, 3)): a noisy 24 m x 14 m heightfield at z 30 +- 2 m, plus 200 zero-area and 200 sliver
    triangles."""
    rng = np.random.default_rng(2)
    x, y = np.meshgrid(np.linspace(-12, 12, side + 1), np.linspace(-7, 7, side + 1), indexing="ij")
    V = np.stack([x, y, 30 + 2 * np.sin(x * 0.7) * np.cos(y * 0.9)], -1).reshape(-1, 3) + rng.normal(0, 0.02, (
        (side + 1) ** 2, 3))
    i, j = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
    a = (i * (side + 1) + j).ravel()
    s = rng.integers(0, len(V) - side - 2, 200)
    F = np.concatenate([np.stack([a, a + side + 1, a + side + 2], -1), np.stack([a, a + side + 2, a + 1], -1),
                        np.stack([s, s + 1, s + 1], -1), np.stack([s, s + 1, s + side + 1], -1)])
    return V, F


@pytest.mark.parametrize("margin", [0.0, 0.3, -0.3, 2.0])
def test_rasterise_cull_is_exact(margin, monkeypatch):
    V, F = heightfield()
    assert len(F) > rz.CULL_MIN_TRIANGLES
    rows = np.arange(-180, 360)
    kw = {"near": 0.1, "far": 29.0} if margin == 2.0 else {}
    culled = rz.rasterize_rows(V, F, K, np.eye(4), rows, 960, -320, margin)
    clipped = rz.rasterize_rows(V, F, K, np.eye(4), rows[::8], 960, -320, margin, **kw) if kw else None
    monkeypatch.setattr(rz, "CULL_MIN_TRIANGLES", 10**12)
    full = rz.rasterize_rows(V, F, K, np.eye(4), rows, 960, -320, margin)
    assert full.sum() > (100 if margin < 0 else 10_000) and np.array_equal(culled, full)
    if kw:
        assert np.array_equal(clipped, rz.rasterize_rows(V, F, K, np.eye(4), rows[::8], 960, -320, margin, **kw))


def test_ray_cast_cull_is_exact():
    V, F = heightfield(60)
    rng = np.random.default_rng(3)
    tri = V[F]
    targets = np.concatenate([V[rng.integers(0, len(V), 150)], tri[rng.integers(0, len(tri), 150), :2].mean(1),
                              rng.uniform([-13, -8, 25], [13, 8, 35], (150, 3))])
    near_targets = targets[:, None] + rng.normal(0, 0.01, (len(targets), 5, 3))   # a pixel's probes: one origin
    targets = np.concatenate([targets, near_targets.reshape(-1, 3)])               # first: 5 apart in each group
    origin = np.repeat(rng.normal(0, 0.01, (len(targets) // 5, 3)), 5, axis=0)    # groups of 5 rays
    d = targets - origin
    d = d / d[:, 2:]                                         # z = 1: the ray parameter is camera z
    d[::11] = np.nan                                         # no lens ray: hits nothing (its group's others may)
    for near, far in ((0.0, np.inf), (29.5, 30.5)):
        full = rc._hits(tri, origin, d, near, far)
        assert np.array_equal(rc._culled_hits(tri, origin, d, near, far), full)
        assert 100 < full.sum() < len(d) - 50
