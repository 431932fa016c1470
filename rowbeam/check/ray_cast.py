"""Ray casting of pixel-centre rays against a triangle mesh (Möller–Trumbore, float64, no bpy): the checker's
second, independent path for amodal masks (the first is the scanline rasteriser of rowbeam.check.rasterize, which
the exporter also uses for rigid objects).

A pixel (u, v) (OpenCV grid: centres at integers, px) sees the mesh when the ray from the camera centre through
K^-1 (u, v, 1) (pinhole K) or the lens ray (rowbeam.model.lens.unproject: (x, y, 1), a rowbeam.model.lens.Lens) meets a
triangle at camera depth near <= z <= far (m), the camera's clip distances. A pixel without a lens ray (outside
the valid domain) hits nothing.
"""
from __future__ import annotations

import numpy as np

from rowbeam.model.lens import Lens, pixel_rays

CHUNK = 400_000          # (ray, triangle) pairs per vectorised step
CULL_MIN_TRIANGLES = 20_000   # larger meshes: each ray is tested against the triangles near its line only
CULL_GROUP = 5            # rays culled together (the 5 probes of a pixel share one origin)
CULL_SLACK = 1e-6         # relative slack of that cull (>> the float64 cancellation of |w|^2 - (w.d)^2)
PROBE_PX = 0.02            # a pixel is judged only when its centre and the 4 points PROBE_PX away agree


def ray_hits(vertices, triangles, K, T_camera_object, uv, near: float = 0.0, far: float = np.inf) -> np.ndarray:
    """bool (N,): does the ray through pixel uv[n] (px) hit the mesh (vertices (V, 3) m in the object frame,
    triangles (F, 3) int) posed by T_camera_object[n] (N, 4, 4) at camera depth in [near, far] m? K: a pinhole
    3x3 K or a rowbeam.model.lens.Lens."""
    uv = np.asarray(uv, dtype=np.float64).reshape(-1, 2)
    T = np.broadcast_to(np.asarray(T_camera_object, dtype=np.float64), (len(uv), 4, 4))
    if isinstance(K, Lens):
        d_cam = pixel_rays(K, uv[:, 0], uv[:, 1])                                 # (N, 3), z = 1; NaN: no ray
    else:
        d_cam = np.concatenate([uv, np.ones((len(uv), 1))], axis=1) @ np.linalg.inv(np.asarray(K, np.float64)).T
    R, t = T[:, :3, :3], T[:, :3, 3]
    origin = -np.einsum("nji,nj->ni", R, t)                                        # camera centre, object frame
    direction = np.einsum("nji,nj->ni", R, d_cam)                                  # R^T d: camera z of a hit = s
    tri = np.asarray(vertices, dtype=np.float64)[np.asarray(triangles, dtype=np.int64).reshape(-1, 3)]
    if len(tri) > CULL_MIN_TRIANGLES:
        return _culled_hits(tri, origin, direction, near, far)
    return _hits(tri, origin, direction, near, far)


def _hits(tri, origin, direction, near: float, far: float) -> np.ndarray:
    """Möller–Trumbore of every ray (origin, direction (N, 3), object frame) against every triangle (F, 3, 3)."""
    p0, e1, e2 = tri[:, 0], tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]          # (F, 3)
    hit = np.zeros(len(origin), dtype=bool)
    step = max(1, CHUNK // max(1, len(tri)))
    for a in range(0, len(origin), step):
        o, d = origin[a:a + step, None], direction[a:a + step, None]             # (n, 1, 3)
        pvec = np.cross(d, e2)                                                     # (n, F, 3)
        det = np.einsum("nfk,fk->nf", pvec, e1)
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = 1.0 / det
            tvec = o - p0
            b1 = np.einsum("nfk,nfk->nf", tvec, pvec) * inv
            qvec = np.cross(tvec, e1)
            b2 = np.einsum("nk,nfk->nf", d[:, 0], qvec) * inv
            s = np.einsum("fk,nfk->nf", e2, qvec) * inv                            # ray parameter = camera z
            inside = (det != 0) & (b1 >= 0) & (b2 >= 0) & (b1 + b2 <= 1) & (s >= near) & (s <= far)
        hit[a:a + step] = inside.any(axis=1)
    return hit


def _culled_hits(tri, origin, direction, near: float, far: float) -> np.ndarray:
    """`_hits` for a large mesh. Rays are taken in groups (consecutive rays from one origin, at most CULL_GROUP: the
    probes of a pixel); a group is tested only against the triangles whose bounding sphere (centroid c, farthest
    vertex r) lies within r + |c - o| sin(alpha) of the group's axis (its first ray; alpha its widest ray's angle to
    it), plus CULL_SLACK (relative). A ray that meets a sphere passes within r of c, and its line is within alpha
    of the axis, so the culled triangles cannot be hit and the result is `_hits`'s. A ray without a direction (NaN)
    hits nothing, as in `_hits`."""
    centre = tri.mean(axis=1)                                                      # (F, 3)
    radius = np.sqrt(((tri - centre[:, None]) ** 2).sum(-1).max(-1))              # (F,)
    hit = np.zeros(len(origin), dtype=bool)
    unit = direction / np.linalg.norm(direction, axis=1, keepdims=True)            # (N, 3); NaN: no ray
    rays = np.flatnonzero(np.isfinite(unit).all(axis=1))
    for group in _groups(origin, rays):
        axis = unit[group[0]]
        sin_alpha = np.linalg.norm(np.cross(unit[group], axis), axis=1).max()       # line angles: sign-free
        w = centre - origin[group[0]]
        dist = np.sqrt(np.einsum("fk,fk->f", w, w))
        along = w @ axis
        slack = radius + dist * sin_alpha + CULL_SLACK * (dist + radius)
        keep = np.flatnonzero(dist * dist - along * along <= slack * slack)
        if keep.size:
            hit[group] = _hits(tri[keep], origin[group], direction[group], near, far)
    return hit


def _groups(origin, rays) -> list:
    """Runs of consecutive indices `rays` whose origins are equal, at most CULL_GROUP long."""
    out, run = [], []
    for n in rays:
        if run and (len(run) == CULL_GROUP or not np.array_equal(origin[n], origin[run[0]])):
            out.append(np.array(run))
            run = []
        run.append(n)
    return out + ([np.array(run)] if run else [])


def robust_hits(vertices, triangles, K, T_camera_object, uv, near: float = 0.0, far: float = np.inf):
    """(inside, outside) bool (N,): the pixel centre and the four points PROBE_PX away all hit / all miss.
    A pixel that is neither lies within PROBE_PX of a silhouette edge and is not judged."""
    offsets = np.array([[0, 0], [PROBE_PX, 0], [-PROBE_PX, 0], [0, PROBE_PX], [0, -PROBE_PX]])
    uv = np.asarray(uv, dtype=np.float64).reshape(-1, 2)
    T = np.broadcast_to(np.asarray(T_camera_object, dtype=np.float64), (len(uv), 4, 4))
    probes = (uv[:, None, :] + offsets).reshape(-1, 2)
    h = ray_hits(vertices, triangles, K, np.repeat(T, len(offsets), axis=0), probes, near, far)
    h = h.reshape(len(uv), len(offsets))
    return h.all(axis=1), ~h.any(axis=1)
