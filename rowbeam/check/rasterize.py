"""Independent numpy rasteriser for checking amodal masks (no Cycles, no bpy).

A pixel (u, v) (OpenCV grid: centres at integers) is covered by a triangle mesh when its centre
lies inside the perspective projection of some triangle (all three vertices in front of the camera).
Rows may each have their own pose (rolling shutter, moving objects): row r uses T_camera_object[r].
`margin_px` moves every triangle edge outward (> 0) or inward (< 0) by that many pixels, so a mask
m satisfies  rasterize(-e) <= m <= rasterize(+e)  when it differs only within e of an edge.

Through a lens (rowbeam.model.lens: opencv, opencv_fisheye) edges are curved in the image, so coverage is tested per
pixel instead (`rasterize_rays`): each pixel centre is unprojected to its normalized ray (x, y, 1) (`canvas_rays`),
the triangles are projected with the pinhole model in normalized coordinates (straight edges there) at the row's
pose, and each ray is tested against them (point in triangle). A pixel with no ray (outside the lens model's valid
domain) is not part of the canvas and never covered.
"""
from __future__ import annotations

import numpy as np

from rowbeam.model.lens import NEWTON_CHUNK, unproject
from rowbeam.util.errors import RowbeamError

CHUNK = 4_000_000          # (row, triangle) pairs per vectorised step
CULL_MIN_TRIANGLES = 20_000   # larger meshes at one pose: each step of rows keeps the triangles that can reach it
ROW_SLACK_PX = 1e-3        # rows farther than this outside a row's projected vertex v-range are skipped (margin <= 0)


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
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):     # used only where signs differ
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
    """Coverage of pixel-centre rows by a mesh: bool (R, width); see `rasterize_rows_box`."""
    out = np.zeros((len(rows), width), dtype=bool)
    box = rasterize_rows_box(vertices, triangles, K, T_camera_object, rows, width, u0, margin_px, near, far)
    if box is not None:
        r0, c0, block = box
        out[r0:r0 + block.shape[0], c0:c0 + block.shape[1]] = block
    return out


def rasterize_rows_box(vertices, triangles, K, T_camera_object, rows, width: int, u0: int = 0,
                       margin_px: float = 0.0, near: float | None = None, far: float = np.inf):
    """Coverage of pixel-centre rows by a mesh, as (first row index, first column index, bool block) holding
    every covered pixel (None when nothing is covered); the cost follows the covered box, not R x width.

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
    if R == 0 or tris.shape[0] == 0:
        return None
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
    sel = None
    if uv is not None and margin_px <= 0:     # a covered centre lies inside a triangle: only rows within its v-extent
        v = uv[..., 1]
        sel = np.flatnonzero((rows >= v.min(-1) - ROW_SLACK_PX) & (rows <= v.max(-1) + ROW_SLACK_PX))
        rows, R = rows[sel], sel.size
        if per_row:
            uv = uv[sel]
    spans = []                                                               # (row, first column, stop column)
    reach = None if uv is None or per_row or tris.shape[0] <= CULL_MIN_TRIANGLES else _v_reach(uv[None][:, tris],
                                                                                                margin_px)
    F = tris.shape[0] * ((4 if np.isfinite(far) else 2) if clip else 1)
    step = max(1, CHUNK // F)
    for r0 in range(0, R, step):
        r1 = min(R, r0 + step)
        if clip:
            ct, valid = clip_triangles((P[r0:r1] if per_row else P[None])[:, tris], near, far)
            ct = np.where(valid[..., None, None], ct, 1.0)                  # placeholders: finite, z = 1
            p = project(ct)                                                  # (r|1, 4F, 3, 2)
        else:
            valid = None
            if reach is not None:                      # a large mesh at one pose: the triangles reaching these rows
                p = uv[None][:, tris[_reaching(reach, rows[r0:r1])]]           # (1, F', 3, 2)
            else:
                p = (uv[r0:r1] if per_row else uv[None])[:, tris]            # (r|1, F, 3, 2)
        span = _row_spans(p, valid, rows[r0:r1, None], u0, width, margin_px)
        if span is not None:
            spans.append((span[0] + r0, span[1], span[2]))
    return None if not spans else _spans_block(spans, sel)


def _row_spans(p: np.ndarray, valid, y: np.ndarray, u0: int, width: int, margin_px: float):
    """The column span each projected triangle covers on each row: p (r|1, F, 3, 2) px triangle corners, `valid`
    (r|1, F) or None, y (r, 1) row coordinates v; a pixel centre (u, y) is covered where every edge function is
    >= -margin_px x |edge|. Returns (row indices, first columns, stop columns) relative to u0, within [0, width),
    or None when no row is covered."""
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
        return None
    return ri, first[ri, fi].astype(np.int64), last[ri, fi].astype(np.int64) + 1


def _spans_block(spans: list, sel) -> tuple:
    """(first row index, first column index, bool block) covering the union of `spans` [(row indices, first
    columns, stop columns)]; `sel` maps the row indices back to the caller's rows (None: identity)."""
    ri, start, stop = (np.concatenate(x) for x in zip(*spans, strict=True))
    if sel is not None:
        ri = sel[ri]
    r_lo, r_hi, c_lo, c_hi = int(ri.min()), int(ri.max()) + 1, int(start.min()), int(stop.max())
    w = c_hi - c_lo + 1                                                      # +1: the stop column of the widest span
    n = (r_hi - r_lo) * w
    diff = (np.bincount((ri - r_lo) * w + (start - c_lo), minlength=n)
            - np.bincount((ri - r_lo) * w + (stop - c_lo), minlength=n)).reshape(r_hi - r_lo, w)
    return r_lo, c_lo, np.cumsum(diff[:, :-1], axis=1) > 0


def _v_reach(p, margin_px: float):
    """(lo, hi) (r|1, F): the v-extent (px, + ROW_SLACK_PX, relative slack too) of the region rasterize_rows_box
    tests for each projected triangle p (r|1, F, 3, 2): the triangle, grown by margin_px > 0 (each edge moved out:
    the triangle scaled about its incentre by 1 + margin / inradius). Zero-area triangles cover nothing (its
    s == 0) and get NaN (never reached). A pixel centre of row v can be covered only where lo <= v <= hi, so
    dropping the other triangles changes no coverage."""
    x, y = p[..., 0], p[..., 1]                                              # (r|1, F, 3)
    area = (x[..., 1] - x[..., 0]) * (y[..., 2] - y[..., 0]) - (y[..., 1] - y[..., 0]) * (x[..., 2] - x[..., 0])
    lo, hi = y.min(-1), y.max(-1)
    if margin_px > 0:
        side = np.hypot(np.roll(x, -1, -1) - np.roll(x, 1, -1), np.roll(y, -1, -1) - np.roll(y, 1, -1))  # opposite
        perimeter = side.sum(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            centre = (side * y).sum(-1) / perimeter                           # incentre v
            grow = 1.0 + margin_px * perimeter / np.abs(area)                 # (r + m) / r, r = |area| / perimeter
            lo, hi = centre + (lo - centre) * grow, centre + (hi - centre) * grow
    wide = ~(np.isfinite(lo) & np.isfinite(hi))                              # a near-zero inradius: every row
    lo, hi = np.where(wide, 0.0, lo), np.where(wide, 0.0, hi)
    slack = ROW_SLACK_PX + 1e-9 * np.maximum(np.abs(lo), np.abs(hi))
    lo, hi = np.where(wide, -np.inf, lo - slack), np.where(wide, np.inf, hi + slack)
    gone = area == 0
    return np.where(gone, np.nan, lo), np.where(gone, np.nan, hi)


def _reaching(reach, rows) -> np.ndarray:
    """Indices of the triangles whose v-reach (lo, hi) (r|1, F) holds some row of `rows` (r,) (px)."""
    lo, hi = reach
    ys = np.asarray(rows, dtype=np.float64)[:, None]
    return np.flatnonzero(((ys >= lo) & (ys <= hi)).any(axis=0))


PAIR_CHUNK = 250_000       # (pixel, triangle) point tests per vectorised step of rasterize_rays (~150 bytes a test)
BAND_PX = 1 << 19          # pixels per band of rows in rasterize_rays (its sort keys: ~40 bytes a pixel)
BOX_EDGES = np.array([(i, i | b) for b in (1, 2, 4) for i in range(8) if not i & b])   # 12 edges of 8 box corners
BOUNDARY_SAMPLES = 1024    # samples per side of the normalized box (and of the domain circle) in lens_canvas_box
LENS_BOX_PAD_PX = 2        # pixels added around the projected samples in lens_canvas_box


def clipped_box_points(corners, T_co, near: float):
    """Camera-frame points bounding a box seen per row: corners (8, 3) (object frame, index bits = x, y, z) posed by
    T_co (R, 4, 4) (camera <- object), plus the crossings of its 12 edges with the plane z = near.
    Returns (points (R, 20, 3) m, ok (R, 20) bool: in front of the plane or on it); the box clipped to z >= near
    lies in the convex hull of the ok points of its row."""
    P = corners @ T_co[:, :3, :3].transpose(0, 2, 1) + T_co[:, None, :3, 3]               # (R, 8, 3)
    a, b = P[:, BOX_EDGES[:, 0]], P[:, BOX_EDGES[:, 1]]                                     # (R, 12, 3)
    za, zb = a[..., 2] - near, b[..., 2] - near
    cross = za * zb < 0
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(cross, za / (za - zb), 0.0)
    X = np.concatenate([P, a + t[..., None] * (b - a)], axis=1)                             # (R, 20, 3)
    return X, np.concatenate([P[..., 2] >= near, cross], axis=1)


UNIT_BOX = np.array([[x, y, z] for x in (0.0, 1.0) for y in (0.0, 1.0) for z in (0.0, 1.0)])  # index bits = x, y, z


def row_boxes(P) -> np.ndarray:
    """Affine maps (R, 4, 4) taking UNIT_BOX onto each row's axis-aligned box of the points P (R, V, 3) (camera
    frame, m): lens_canvas_box(lens, UNIT_BOX, row_boxes(P), ...) bounds a mesh that has its own vertices per row
    (a deforming object), the box clipped to z >= near holding the clipped mesh."""
    P = np.asarray(P, dtype=np.float64)
    lo, hi = P.min(axis=1), P.max(axis=1)
    A = np.zeros((len(P), 4, 4))
    A[:, [0, 1, 2], [0, 1, 2]] = hi - lo
    A[:, :3, 3] = lo
    A[:, 3, 3] = 1.0
    return A


def domain_radius(lens) -> float:
    """Largest undistorted normalized radius sqrt(x^2 + y^2) inside the lens's valid domain (inf: unbounded)."""
    if lens.model == "opencv":
        return float(lens.max_radius)
    if lens.model == "opencv_fisheye" and lens.max_theta_rad < np.pi / 2:
        return float(np.tan(lens.max_theta_rad))
    return np.inf


def _side_samples(a: float, b: float) -> np.ndarray:
    """Samples of [a, b] (normalized coordinate along a side) uniform in the coordinate and uniform in its angle
    atan: a side reaching far off axis (a box crossing the near plane spans ~1e6) still gets dense samples where
    it passes near the optical axis, where its image lies on the canvas."""
    t = np.linspace(0.0, 1.0, BOUNDARY_SAMPLES)
    phi = np.tan(np.arctan(a) + np.linspace(0.0, 1.0, 4 * BOUNDARY_SAMPLES) * (np.arctan(b) - np.arctan(a)))
    return np.concatenate([a + t * (b - a), np.clip(phi, a, b)])


def lens_canvas_box(lens, corners, T_co, W: int, H: int, near: float):
    """Canvas box [x0, x1) x [y0, y1) (canvas px, origin at image (-W, -H)) holding every canvas pixel whose ray can
    meet a mesh inside the box `corners` (8, 3, object frame) at any of the row poses T_co (R, 4, 4); None if none.

    The clipped box's points give a rectangle in normalized coordinates (union over rows); the pixels whose rays
    lie in it are the lens's image of (rectangle ∩ valid-domain disc), bounded by the image of that region's
    boundary: points on each rectangle side (uniform in the coordinate and in its angle, _side_samples) and on the
    domain circle, projected through the lens, padded by LENS_BOX_PAD_PX."""
    X, ok = clipped_box_points(np.asarray(corners, np.float64), np.asarray(T_co, np.float64), near)
    if not ok.any():
        return None
    z = X[..., 2][ok]
    xn, yn = X[..., 0][ok] / z, X[..., 1][ok] / z
    x0, x1, y0, y1 = xn.min(), xn.max(), yn.min(), yn.max()
    sx, sy = _side_samples(x0, x1), _side_samples(y0, y1)
    bx = np.concatenate([sx, sx, np.full_like(sy, x0), np.full_like(sy, x1)])
    by = np.concatenate([np.full_like(sx, y0), np.full_like(sx, y1), sy, sy])
    rmax = domain_radius(lens)
    if np.isfinite(rmax):
        keep = bx * bx + by * by <= rmax * rmax
        a = np.linspace(0.0, 2 * np.pi, 4 * BOUNDARY_SAMPLES, endpoint=False)
        cx, cy = rmax * (1 - 1e-12) * np.cos(a), rmax * (1 - 1e-12) * np.sin(a)
        inside = (cx >= x0) & (cx <= x1) & (cy >= y0) & (cy <= y1)
        bx, by = np.concatenate([bx[keep], cx[inside]]), np.concatenate([by[keep], cy[inside]])
    if bx.size == 0:
        return None
    from rowbeam.model.lens import project
    uv, seen = project(lens, np.stack([bx, by, np.ones_like(bx)], axis=-1))
    if not seen.any():
        return None
    u, v = uv[seen, 0], uv[seen, 1]
    cx0 = max(0, int(np.floor(u.min())) - LENS_BOX_PAD_PX + W)
    cx1 = min(3 * W, int(np.ceil(u.max())) + LENS_BOX_PAD_PX + 1 + W)
    cy0 = max(0, int(np.floor(v.min())) - LENS_BOX_PAD_PX + H)
    cy1 = min(3 * H, int(np.ceil(v.max())) + LENS_BOX_PAD_PX + 1 + H)
    if cx1 <= cx0 or cy1 <= cy0:
        return None
    return cx0, cx1, cy0, cy1


def canvas_rays(lens, u0: int, u1: int, v0: int, v1: int, du: float = 0.0, dv: float = 0.0) -> np.ndarray:
    """Normalized rays (v1 - v0, u1 - u0, 2) = (x, y) of the pixel centres u in [u0, u1), v in [v0, v1) (image px
    on the OpenCV grid; beyond the image on the canvas) through `lens` (rowbeam.model.lens.unproject, float64 Newton);
    NaN where the pixel has no ray (outside the valid domain, or the inverse misses by more than
    rowbeam.model.lens.MAX_UNPROJECT_RESIDUAL_PX): such pixels are not part of the canvas. du, dv (px): probe points
    offset from the pixel centres instead."""
    C = u1 - u0
    out = np.empty(((v1 - v0) * C, 2))
    for c0 in range(0, out.shape[0], NEWTON_CHUNK):      # unproject's own chunks: the same pixels solved together
        k = np.arange(c0, min(c0 + NEWTON_CHUNK, out.shape[0]))
        v, u = (k // C + v0).astype(np.float64), (k % C + u0).astype(np.float64)
        out[c0:c0 + len(k)] = unproject(lens, u + du, v + dv)[0][:, :2]
    return out.reshape(v1 - v0, C, 2)


class CanvasRays:
    """Canvas rays of one lens and image size, unprojected lazily in TILE x TILE pixel tiles and kept: objects of an
    event (and events of one camera) share them. `get(x0, x1, y0, y1)` (canvas px, origin at image (-W, -H))
    returns canvas_rays of that box, (y1 - y0, x1 - x0, 2), NaN where a pixel has no ray."""

    TILE = 64
    TILE_BATCH = 64             # x (unproject chunk / tile) tiles unprojected at once (1 Mpx: ~80 MB while solved)
    MAX_BYTES = 256 * 2**20     # tiles kept at most (float64 x, y: 64 KiB a tile); beyond, tiles not asked are dropped

    def __init__(self, lens, W: int, H: int):
        self.lens, self.W, self.H = lens, W, H
        self.tiles: dict = {}

    def get(self, x0: int, x1: int, y0: int, y1: int) -> np.ndarray:
        T = self.TILE
        keys = [(ty, tx) for ty in range(y0 // T, (y1 - 1) // T + 1) for tx in range(x0 // T, (x1 - 1) // T + 1)]
        missing = [k for k in keys if k not in self.tiles]
        if (len(self.tiles) + len(missing)) * T * T * 16 > self.MAX_BYTES:
            wanted = set(keys)
            self.tiles = {k: v for k, v in self.tiles.items() if k in wanted}
        vv, uu = np.mgrid[0:T, 0:T].astype(np.float64)
        batch = self.TILE_BATCH * max(1, NEWTON_CHUNK // (T * T))    # whole unproject chunks: each solved as in one call
        for b0 in range(0, len(missing), batch):        # vectorised unprojections of the missing tiles
            ty, tx = np.array(missing[b0:b0 + batch]).T
            u = uu[None] + (tx * T - self.W)[:, None, None]
            v = vv[None] + (ty * T - self.H)[:, None, None]
            rays = unproject(self.lens, u, v)[0][..., :2]
            for k, r in zip(missing[b0:b0 + batch], rays, strict=True):
                self.tiles[k] = r.copy()
        out = np.empty((y1 - y0, x1 - x0, 2))
        for ty, tx in keys:
            a, b = max(ty * T, y0), min((ty + 1) * T, y1)
            c, d = max(tx * T, x0), min((tx + 1) * T, x1)
            out[a - y0:b - y0, c - x0:d - x0] = self.tiles[ty, tx][a - ty * T:b - ty * T, c - tx * T:d - tx * T]
        return out


def band_x_range(xa, ya, ylo, yhi):
    """(x_min, x_max) (N,) of triangles (xa, ya: (N, 3) vertices) within the horizontal bands ylo <= y <= yhi (N,):
    the x extent of the triangle clipped to its band (its vertices in the band and its edges' crossings of the
    band's two lines), or the triangle's x extent where that is narrower. A pixel row's rays all lie in the band of
    their y range, so no covered pixel of a (row, triangle) pair lies outside it."""
    lo, hi = xa.min(-1), xa.max(-1)
    ylo, yhi = ylo[:, None], yhi[:, None]
    inb = (ya >= ylo) & (ya <= yhi)
    cand_lo = np.where(inb, xa, np.inf).min(-1)
    cand_hi = np.where(inb, xa, -np.inf).max(-1)
    xb, yb = np.roll(xa, -1, axis=-1), np.roll(ya, -1, axis=-1)                   # edge i: vertex i -> i + 1
    dy = yb - ya
    with np.errstate(divide="ignore", invalid="ignore"):
        for y in (ylo, yhi):
            t = (y - ya) / dy
            cross = (t >= 0) & (t <= 1) & (dy != 0)
            x = xa + t * (xb - xa)
            cand_lo = np.minimum(cand_lo, np.where(cross, x, np.inf).min(-1))
            cand_hi = np.maximum(cand_hi, np.where(cross, x, -np.inf).max(-1))
    span = np.maximum(hi - lo, 1e-300)
    pad = 1e-9 * span + 1e-12 * np.maximum(np.abs(lo), np.abs(hi))               # rounding of the crossings
    return np.maximum(lo, cand_lo - pad), np.minimum(hi, cand_hi + pad)


def rasterize_rays(vertices, triangles, rays, T_camera_object, near: float | None = None,
                   far: float = np.inf) -> np.ndarray:
    """Coverage of pixels given by their normalized rays by a mesh: bool (R, C).

    rays: (R, C, 2) normalized (x, y) of each pixel centre (camera ray (x, y, 1); NaN: no ray, never covered);
    vertices (V, 3) m, object frame, or (R, V, 3), one mesh per row of `rays` (a deforming object, the same
    triangles); triangles (F, 3) int; T_camera_object (4, 4) or (R, 4, 4), one pose per row of `rays`.
    A pixel is covered when its ray lies inside the pinhole projection (normalized coordinates, x = X/Z) of a
    triangle clipped to near <= camera z <= far (with `near`; without it every vertex must have z > 0, else
    ValueError). Candidate pixels of a (row, triangle) pair are found from the row's rays sorted by
    x; each is then tested against the three edges (vectorised, float64). Rows are processed in bands of at most
    BAND_PX pixels (the sort keys and candidate lists are per row), so the extra memory is that of one band."""
    rays = np.asarray(rays, dtype=np.float64)
    R, C = rays.shape[:2]
    out = np.zeros((R, C), dtype=bool)
    tris = np.asarray(triangles, dtype=np.int64).reshape(-1, 3)
    band = max(1, BAND_PX // max(C, 1))
    gx0, gx1 = np.inf, -np.inf                              # x range of every ray (one sort-key scale for all bands)
    for b0 in range(0, R, band):
        x, y = rays[b0:b0 + band, :, 0], rays[b0:b0 + band, :, 1]
        xf = x[np.isfinite(x) & np.isfinite(y)]
        if xf.size:
            gx0, gx1 = min(gx0, float(xf.min())), max(gx1, float(xf.max()))
    if R == 0 or C == 0 or tris.shape[0] == 0 or gx0 > gx1:
        return out
    T = np.asarray(T_camera_object, dtype=np.float64)
    V = np.asarray(vertices, dtype=np.float64)
    V = V if V.ndim == 3 else V.reshape(-1, 3)
    P = V @ np.swapaxes(T[..., :3, :3], -1, -2) + T[..., None, :3, 3]             # (R?, V, 3)
    z = P[..., 2]
    if near is None and np.any(z <= 0):
        raise ValueError("a mesh vertex is not in front of the camera (z <= 0)")
    clip = (near, far) if near is not None and (np.any(z < near) or np.any(z > far)) else None
    for b0 in range(0, R, band):
        _rasterize_band(P[b0:b0 + band] if P.ndim == 3 else P, tris, rays[b0:b0 + band], (gx0, gx1), clip,
                        out[b0:b0 + band])
    return out


def _projected_triangles(Q, clip):
    """Triangles Q (r|1, F, 3, 3) camera frame, clipped to `clip` (near, far) or None, in normalized coordinates:
    (xa, ya (r|1, F', 3), sign of their area, bounding boxes (x_min, x_max, y_min, y_max), usable)."""
    if clip is not None:
        ct, valid = clip_triangles(Q, *clip)
        ct = np.where(valid[..., None, None], ct, 1.0)
    else:
        ct, valid = Q, np.ones(Q.shape[:-2], dtype=bool)
    p = ct[..., :2] / ct[..., 2:3]                                                    # (r|1, F', 3, 2) normalized
    xa, ya = p[..., 0], p[..., 1]                                                     # (r|1, F', 3)
    area = ((xa[..., 1] - xa[..., 0]) * (ya[..., 2] - ya[..., 0])
            - (ya[..., 1] - ya[..., 0]) * (xa[..., 2] - xa[..., 0]))
    s = np.sign(area)
    return xa, ya, s, (xa.min(-1), xa.max(-1), ya.min(-1), ya.max(-1)), valid & (s != 0)


def _rasterize_band(P, tris, rays, gx: tuple, clip, out) -> None:
    """rasterize_rays on a band of rows: P (R, V, 3) per row or (V, 3) camera-frame vertices, rays (R, C, 2), gx
    (x_min, x_max) of every ray of the whole call (the sort keys' scale), clip (near, far) or None; sets `out`
    (R, C) bool in place."""
    R = rays.shape[0]
    x, y = rays[..., 0], rays[..., 1]
    has = np.isfinite(x) & np.isfinite(y)
    if not has.any():
        return
    per_row = P.ndim == 3
    # rays of each row sorted by x; one key array for the band: row r's keys in [4r, 4r + 1], no-ray pixels at 4r + 2
    gx0, gx1 = gx
    span = max(gx1 - gx0, 1e-300)
    xs = np.where(has, (np.where(has, x, gx0) - gx0) / span, 2.0)
    order = np.argsort(xs, axis=1, kind="stable")
    keys = (np.take_along_axis(xs, order, axis=1) + 4.0 * np.arange(R)[:, None]).ravel()
    order = order.ravel()
    del xs
    with np.errstate(invalid="ignore"):
        row_ylo = np.where(has.any(1), np.nanmin(np.where(has, y, np.inf), axis=1), np.inf)
        row_yhi = np.where(has.any(1), np.nanmax(np.where(has, y, -np.inf), axis=1), -np.inf)
    F = tris.shape[0] * ((4 if np.isfinite(clip[1]) else 2) if clip is not None else 1)
    step = max(1, CHUNK // F)
    static = None if per_row else _projected_triangles(P[None][:, tris], clip)
    for r0 in range(0, R, step):
        r1 = min(R, r0 + step)
        xa, ya, s, bb, usable = static or _projected_triangles(P[r0:r1][:, tris], clip)
        ok = (usable & (bb[3] >= row_ylo[r0:r1, None]) & (bb[2] <= row_yhi[r0:r1, None])
              & (bb[1] >= gx0) & (bb[0] <= gx1))
        ri, fi = np.nonzero(ok)                                                       # ri: row within the chunk
        if ri.size == 0:
            continue
        fr = ri if per_row else np.zeros_like(ri)                                     # row index into the triangles
        eps = 1e-9
        cx_lo, cx_hi = band_x_range(xa[fr, fi], ya[fr, fi], row_ylo[ri + r0], row_yhi[ri + r0])
        q_lo = np.clip((cx_lo - gx0) / span - eps, -0.5, 1.5) + 4.0 * (ri + r0)
        q_hi = np.clip((cx_hi - gx0) / span + eps, -0.5, 1.5) + 4.0 * (ri + r0)
        lo = np.searchsorted(keys, q_lo, side="left")
        n = np.maximum(np.searchsorted(keys, q_hi, side="right") - lo, 0)
        _test_candidates(x, y, order, (lo, n), (ri + r0, fr, fi), (xa, ya, s), out)


def _test_candidates(x, y, order, ranges: tuple, pairs: tuple, tri: tuple, out) -> None:
    """Edge tests of each (row, triangle) pair's candidate pixels, in batches of <= PAIR_CHUNK: ranges (lo, n) into
    the sorted keys, pairs (row, triangle row, triangle), tri (xa, ya, area sign); covered pixels set in `out`."""
    lo, n = ranges
    rows, fr, fi = pairs
    xa, ya, s = tri
    ends = np.cumsum(n)
    a = 0
    while a < len(n):                                                                 # batches of <= PAIR_CHUNK tests
        b = int(np.searchsorted(ends, (ends[a - 1] if a else 0) + PAIR_CHUNK, side="right"))
        b = max(b, a + 1)
        nb = n[a:b]
        N = int(nb.sum())
        a_prev, a = a, b
        if N == 0:
            continue
        pair = np.repeat(np.arange(a_prev, b), nb)
        pos = lo[pair] + np.arange(N) - np.repeat(np.cumsum(nb) - nb, nb)
        col = order[pos]
        row = rows[pair]
        px, py = x[row, col], y[row, col]
        tr, tf = fr[pair], fi[pair]
        X3, Y3, sg = xa[tr, tf], ya[tr, tf], s[tr, tf]                               # (N, 3)
        inside = np.ones(N, dtype=bool)
        for i in range(3):
            xa_, ya_ = X3[:, i], Y3[:, i]
            ex, ey = X3[:, (i + 1) % 3] - xa_, Y3[:, (i + 1) % 3] - ya_
            inside &= sg * (ex * (py - ya_) - ey * (px - xa_)) >= 0
        out[row[inside], col[inside]] = True


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

