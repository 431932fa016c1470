"""Material points on deforming meshes (numpy only): a surface point's rest-state identity and its position later.

A deforming object whose topology is constant over a flow pair is sampled as its evaluated mesh at every
row time of both events: world vertices V (H, V, 3) float64 and triangles F (T, 3) int (Blender's loop
triangles, which Cycles renders). A source pixel's surface point P (world, at its row's time) is identified
by the triangle of the mesh at that row nearest to P and P's barycentric coordinates in it (clamped into
the triangle); that (triangle, barycentric) pair is the material point. Anywhere else it is
sum_k b_k V[tri_k] — exact for skinning, shape keys and any deformation that is affine over a triangle, and
what Cycles itself renders (linear interpolation over each triangle).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CHUNK = 1 << 20          # point-triangle pairs per batch (bounded memory)


class MissingMeshRows(LookupError):
    """A DeformingMesh was asked for rows it was not sampled at: `rows` (sorted unique ints) of `mesh`."""

    def __init__(self, mesh: "DeformingMesh", rows: np.ndarray):
        super().__init__(f"deforming mesh not sampled at rows {rows.tolist()}")
        self.mesh, self.rows = mesh, rows


@dataclass(eq=False)
class DeformingMesh:
    """One deforming object sampled at an event's rows: vertices (H, V, 3) world metres (NaN at rows not sampled),
    triangles (T, 3), sampled (H,) bool (None: every row)."""

    vertices: np.ndarray
    triangles: np.ndarray
    sampled: np.ndarray | None = None

    def require(self, rows) -> None:
        """Raise MissingMeshRows unless every row in `rows` was sampled."""
        if self.sampled is not None:
            rows = np.asarray(rows, np.int64)
            missing = np.unique(rows[~self.sampled[rows]])
            if missing.size:
                raise MissingMeshRows(self, missing)

    def at(self, rows, tri, bary, frac=None) -> np.ndarray:
        """World points (N, 3) of material points (tri (N,), bary (N, 3)) at rows (N,) int, linearly
        interpolated toward the next row by `frac` (N,) in [0, 1) (the last row is used as is; the next row is
        read only where frac > 0)."""
        V = self.vertices
        self.require(rows)
        idx = self.triangles[tri]                                     # (N, 3)
        out = np.einsum("nk,nkj->nj", bary, V[rows[:, None], idx])
        if frac is not None:
            m = np.flatnonzero(frac > 0)
            nxt = np.minimum(rows[m] + 1, V.shape[0] - 1)
            self.require(nxt)
            out[m] += frac[m, None] * (np.einsum("nk,nkj->nj", bary[m], V[nxt[:, None], idx[m]]) - out[m])
        return out


def locate(mesh: DeformingMesh, rows, points) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tri (N,) int, bary (N, 3), distance (N,) m) of the nearest triangle of `mesh` at each point's row.

    The distance is to the clamped barycentric point (an upper bound of the true point-triangle distance,
    equal to it inside the triangle); for points on the rendered surface it measures how far the rendered
    surface is from the exactly evaluated one."""
    rows = np.asarray(rows, np.int64)
    points = np.asarray(points, np.float64)
    mesh.require(rows)
    n = len(points)
    tri = np.zeros(n, np.int64)
    bary = np.zeros((n, 3))
    dist = np.full(n, np.inf)
    F = mesh.triangles
    for r in np.unique(rows):
        sel = np.flatnonzero(rows == r)
        P = points[sel]
        A, B, C = (mesh.vertices[r][F[:, k]] for k in range(3))
        # triangles whose box (grown by 5 cm) holds any of the row's points
        lo, hi = np.minimum(np.minimum(A, B), C) - 0.05, np.maximum(np.maximum(A, B), C) + 0.05
        keep = np.flatnonzero(((hi >= P.min(0)) & (lo <= P.max(0))).all(1))
        if keep.size == 0:
            keep = np.arange(len(F))
        step = max(1, CHUNK // max(1, keep.size))
        for s in range(0, len(sel), step):
            part = sel[s:s + step]
            t, b, d = _nearest(points[part], A[keep], B[keep], C[keep])
            tri[part], bary[part], dist[part] = keep[t], b, d
    return tri, bary, dist


def _nearest(P, A, B, C):
    """Nearest of triangles (A, B, C) (T, 3) to each point of P (n, 3) by clamped barycentric projection."""
    e0, e1 = B - A, C - A                                          # (T, 3)
    d00, d01, d11 = (e0 * e0).sum(1), (e0 * e1).sum(1), (e1 * e1).sum(1)
    den = d00 * d11 - d01 * d01
    den = np.where(np.abs(den) > 1e-30, den, 1e-30)
    w = P[:, None, :] - A[None]                                    # (n, T, 3)
    d20, d21 = (w * e0).sum(2), (w * e1).sum(2)
    b1 = (d11 * d20 - d01 * d21) / den
    b2 = (d00 * d21 - d01 * d20) / den
    b = np.clip(np.stack([1.0 - b1 - b2, b1, b2], -1), 0.0, None)
    b /= np.maximum(b.sum(-1, keepdims=True), 1e-30)
    Q = b[..., 0:1] * A[None] + b[..., 1:2] * B[None] + b[..., 2:3] * C[None]
    d = np.linalg.norm(Q - P[:, None, :], axis=2)                  # (n, T)
    best = d.argmin(1)
    n = np.arange(len(P))
    return best, b[n, best], d[n, best]
