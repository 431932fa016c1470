"""Independent numpy rasteriser for checking amodal masks (no Cycles, no bpy).

A pixel (u, v) (OpenCV grid: centres at integers) is covered by a triangle mesh when its centre
lies inside the perspective projection of some triangle (all three vertices in front of the camera).
Rows may each have their own pose (rolling shutter, moving objects): row r uses T_camera_object[r].
`margin_px` moves every triangle edge outward (> 0) or inward (< 0) by that many pixels, so a mask
m satisfies  rasterize(-e) <= m <= rasterize(+e)  when it differs only within e of an edge.
"""
from __future__ import annotations

import numpy as np

from .errors import RowbeamError

CHUNK = 4_000_000          # (row, triangle) pairs per vectorised step


def _clip_plane(tris, valid, sign: float, c: float):
    """Keep the part of each triangle (..., F, 3, 3) where sign * (z - c) >= 0: (..., 2F, 3, 3), valid."""
    d = sign * (tris[..., 2] - c)                                           # (..., F, 3) signed distance
    inside = d >= 0
    n_in = inside.sum(-1)
    # pivot: the lone inside vertex (n_in == 1) or the lone outside vertex (n_in == 2)
    pivot = np.where(n_in == 1, np.argmax(inside, -1), np.argmin(inside, -1))
    order = (pivot[..., None] + np.arange(3)) % 3
    q = np.take_along_axis(tris, order[..., None], axis=-2)                 # rolled vertices p0 p1 p2
    e = np.take_along_axis(d, order, axis=-1)
    p0, p1, p2 = q[..., 0, :], q[..., 1, :], q[..., 2, :]
    with np.errstate(divide="ignore", invalid="ignore"):                    # used only where signs differ
        t01 = np.nan_to_num(e[..., 0] / (e[..., 0] - e[..., 1]))[..., None]
        t02 = np.nan_to_num(e[..., 0] / (e[..., 0] - e[..., 2]))[..., None]
    i01, i02 = p0 + t01 * (p1 - p0), p0 + t02 * (p2 - p0)
    one, two = (n_in == 1)[..., None, None], (n_in == 2)[..., None, None]
    first = np.where(one, np.stack([p0, i01, i02], -2), np.where(two, np.stack([p1, p2, i02], -2), tris))
    second = np.where(two, np.stack([p1, i02, i01], -2), tris)
    return (np.concatenate([first, second], axis=-3),
            np.concatenate([valid & (n_in > 0), valid & (n_in == 2)], axis=-1))


def clip_triangles(P, near: float, far: float = np.inf):
    """Clip camera-frame triangles P (..., F, 3 vertices, 3) to the slab near <= z <= far (m).

    Returns (triangles (..., nF, 3, 3), valid (..., nF) bool), n = 2 (far infinite) or 4: per plane a
    triangle becomes a triangle or a quad (Sutherland-Hodgman), the quad split along a diagonal;
    invalid entries are placeholders. Winding is irrelevant to `rasterize_rows`.
    """
    tris = np.asarray(P, dtype=np.float64)
    tris, valid = _clip_plane(tris, np.ones(tris.shape[:-2], dtype=bool), 1.0, near)
    if np.isfinite(far):
        tris, valid = _clip_plane(tris, valid, -1.0, far)
    return tris, valid


def rasterize_rows(vertices, triangles, K, T_camera_object, rows, width: int, u0: int = 0,
                   margin_px: float = 0.0, near: float | None = None, far: float = np.inf) -> np.ndarray:
    """Coverage of pixel-centre rows by a mesh.

    vertices: (V, 3) m, object frame; triangles: (F, 3) int; K: 3x3; T_camera_object: (4, 4) or
    (R, 4, 4), one per entry of `rows`; rows: (R,) pixel-row coordinates v (may be negative);
    columns u0 .. u0 + width - 1. Returns bool (R, width). With `near` (m; and optionally `far`),
    triangles are clipped to the slab near <= camera z <= far first, as a camera whose rays start
    on the plane z = near sees them (Cycles: clip_start / clip_end). Without `near`, raises
    ValueError when a vertex is not in front of the camera (z <= 0) for some row.
    """
    rows = np.asarray(rows, dtype=np.float64)
    R = rows.shape[0]
    T = np.asarray(T_camera_object, dtype=np.float64)
    tris = np.asarray(triangles, dtype=np.int64).reshape(-1, 3)
    V = np.asarray(vertices, dtype=np.float64).reshape(-1, 3)
    out = np.zeros((R, width), dtype=bool)
    if R == 0 or tris.shape[0] == 0:
        return out
    per_row = T.ndim == 3
    P = V @ np.swapaxes(T[..., :3, :3], -1, -2) + T[..., None, :3, 3]          # (R?, V, 3)
    z = P[..., 2]
    clip = near is not None and (np.any(z < near) or np.any(z > far))
    if near is None and np.any(z <= 0):
        raise ValueError("a mesh vertex is not in front of the camera (z <= 0)")

    def project(Q):                                                          # (..., 3) -> (..., 2)
        return np.stack([K[0, 0] * Q[..., 0] / Q[..., 2] + K[0, 1] * Q[..., 1] / Q[..., 2] + K[0, 2],
                         K[1, 1] * Q[..., 1] / Q[..., 2] + K[1, 2]], axis=-1)

    uv = None if clip else project(P)                                        # (R?, V, 2)
    diff = np.zeros((R, width + 1), dtype=np.int32)
    r_lo, r_hi, c_lo, c_hi = R, 0, width + 1, 0                              # touched part of `diff`
    F = tris.shape[0] * ((4 if np.isfinite(far) else 2) if clip else 1)
    step = max(1, CHUNK // F)
    for r0 in range(0, R, step):
        r1 = min(R, r0 + step)
        y = rows[r0:r1, None]                                                # (r, 1)
        if clip:
            ct, valid = clip_triangles((P[r0:r1] if per_row else P[None])[:, tris], near, far)
            ct = np.where(valid[..., None, None], ct, 1.0)                  # placeholders: finite, z = 1
            p = project(ct)                                                  # (r|1, 4F, 3, 2)
        else:
            p = (uv[r0:r1] if per_row else uv[None])[:, tris]                # (r|1, F, 3, 2)
            valid = None
        x0, y0 = p[..., 0, 0], p[..., 0, 1]
        x1, y1 = p[..., 1, 0], p[..., 1, 1]
        x2, y2 = p[..., 2, 0], p[..., 2, 1]
        area = (x1 - x0) * (y2 - y0) - (y1 - y0) * (x2 - x0)
        s = np.sign(area)
        lo = np.full(np.broadcast_shapes(y.shape, area.shape), -np.inf)
        hi = np.full_like(lo, np.inf)
        ok = np.broadcast_to(s != 0 if valid is None else (s != 0) & valid, lo.shape).copy()
        for (xa, ya), (xb, yb) in (((x0, y0), (x1, y1)), ((x1, y1), (x2, y2)), ((x2, y2), (x0, y0))):
            # s * edge function at (u, y):  a * u + b ; inside where >= -margin * |edge|
            a = -s * (yb - ya)
            b = s * ((xb - xa) * (y - ya) + (yb - ya) * xa)
            t = -margin_px * np.hypot(xb - xa, yb - ya)
            with np.errstate(divide="ignore", invalid="ignore"):
                bound = (t - b) / a
            lo = np.where(a > 0, np.maximum(lo, bound), lo)
            hi = np.where(a < 0, np.minimum(hi, bound), hi)
            ok &= np.where(a == 0, b >= t, True)
        first = np.ceil(lo) - u0
        last = np.floor(hi) - u0
        first = np.clip(first, 0, width)
        last = np.clip(last, -1, width - 1)
        ok &= last >= first
        ri, fi = np.nonzero(ok)
        if ri.size == 0:
            continue
        start = first[ri, fi].astype(np.int64)
        stop = last[ri, fi].astype(np.int64) + 1
        np.add.at(diff, (ri + r0, start), 1)
        np.add.at(diff, (ri + r0, stop), -1)
        r_lo, r_hi = min(r_lo, int(ri.min()) + r0), max(r_hi, int(ri.max()) + r0 + 1)
        c_lo, c_hi = min(c_lo, int(start.min())), max(c_hi, int(stop.max()))
    if r_hi > r_lo:
        out[r_lo:r_hi, c_lo:c_hi] = np.cumsum(diff[r_lo:r_hi, c_lo:c_hi], axis=1) > 0
    return out


# ---- PLY assets (binary_little_endian 1.0: double x y z; list uchar int vertex_indices) ----

def ply_bytes(vertices, triangles) -> bytes:
    """Binary little-endian PLY of a triangle mesh: vertices (V, 3) float64 m, triangles (F, 3) int32."""
    V = np.ascontiguousarray(vertices, dtype="<f8").reshape(-1, 3)
    F = np.ascontiguousarray(triangles, dtype="<i4").reshape(-1, 3)
    header = ("ply\nformat binary_little_endian 1.0\ncomment rowbeam object asset: metres, object frame, scale baked in\n"
              f"element vertex {len(V)}\nproperty double x\nproperty double y\nproperty double z\n"
              f"element face {len(F)}\nproperty list uchar int vertex_indices\nend_header\n").encode()
    faces = np.zeros(len(F), dtype=[("n", "u1"), ("i", "<i4", (3,))])
    faces["n"], faces["i"] = 3, F
    return header + V.tobytes() + faces.tobytes()


def read_ply(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(vertices (V, 3) float64, triangles (F, 3) int64) from the bytes `ply_bytes` writes."""
    end = data.find(b"end_header\n")
    if not data.startswith(b"ply\n") or end < 0:
        raise RowbeamError("asset is not a PLY file")
    header = data[:end].decode("ascii", "replace").splitlines()
    if "format binary_little_endian 1.0" not in header:
        raise RowbeamError("asset PLY is not binary_little_endian 1.0")
    counts = {ln.split()[1]: int(ln.split()[2]) for ln in header if ln.startswith("element ")}
    nv, nf = counts.get("vertex", 0), counts.get("face", 0)
    body = data[end + len(b"end_header\n"):]
    if len(body) != nv * 24 + nf * 13:
        raise RowbeamError(f"asset PLY body is {len(body)} bytes, header declares {nv} vertices and {nf} triangles")
    V = np.frombuffer(body[:nv * 24], dtype="<f8").reshape(nv, 3).astype(np.float64)
    faces = np.frombuffer(body[nv * 24:], dtype=[("n", "u1"), ("i", "<i4", (3,))])
    if np.any(faces["n"] != 3):
        raise RowbeamError("asset PLY has a face that is not a triangle")
    F = faces["i"].astype(np.int64)
    if F.size and (F.min() < 0 or F.max() >= nv):
        raise RowbeamError("asset PLY has a vertex index out of range")
    return V, F

