"""Geometric optical flow and scene flow between two rolling-shutter camera events (numpy only).

A source pixel's surface point P (world, at the source row's time) is fixed in its object's
frame: X_o = M_o(t_src)^-1 P, with M_o the object's matrix_world (affine, so scaled objects are
exact). On a deforming object (`material_points`) it is fixed as (triangle, barycentric) of the
evaluated mesh at the source row's time instead, and re-evaluated on the mesh at other rows.
At the destination it is M_o(t) X_o seen by the destination camera at time t, where t is
the time of the destination row the point lands on: row v_d solves
    v_d = v of project(T_camera_world(t(v_d)) M_o(t(v_d)) X_o)
by fixed-point iteration over the destination's per-row poses (interpolated linearly between
adjacent rows; rows are one row period apart). The final |v_d - v| is the recorded residual.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rowbeam.check.flow_checks import rotate_per_row
from rowbeam.util.blocks import blockwise
from rowbeam.check.event_points import world_points
from rowbeam.model.frames import apply_per_row
from rowbeam.model.lens import project_uv
from rowbeam.model.ontology import BACKGROUND_ID
from rowbeam.model.pixel_sampling import camera_z_at

from rowbeam.blender.flow.material_points import DeformingMesh, locate

MAX_ITERATIONS = 20
CONVERGED_ROWS = 1e-4       # a row error of 1e-4 moves the flow by (image speed x row period) x 1e-4: ~1e-5 px


@dataclass
class EventGeometry:
    """What flow needs from one exported camera event (arrays as decoded from its payloads)."""

    K: np.ndarray
    camera_z: np.ndarray          # (H, W) float32, NaN where invalid
    instance_id: np.ndarray       # (H, W) uint32 render indices
    row_T_world_camera: np.ndarray  # (H, 4, 4)
    object_matrices: np.ndarray   # (S, H, 4, 4) matrix_world of each tracked object at each row's time
    object_slot: np.ndarray       # render index -> tracked-object slot (-1: static, untracked)
    undefined: np.ndarray         # render index -> 1 where correspondence cannot be defined (topology changes, ...)
    deform_slot: np.ndarray | None = None   # render index -> index into `meshes` (-1: not deforming)
    meshes: tuple[DeformingMesh, ...] = ()   # each deforming object sampled at this event's rows
    lens: object = None           # rowbeam.model.lens.Lens of a distorted / lens-camera event (None: pinhole K)

    @property
    def camera(self):
        """What projects and unprojects this event's pixels: its Lens, or K (rowbeam.model.lens.pixel_rays / project_uv)."""
        return self.K if self.lens is None else self.lens

    @property
    def shape(self):
        return self.camera_z.shape


@dataclass
class FlowResult:
    flow: np.ndarray                  # (H, W, 2) float32 px, NaN where correspondence undefined
    source_valid: np.ndarray          # uint8 planes (H, W)
    dest_in_bounds: np.ndarray
    dest_visible: np.ndarray
    correspondence_defined: np.ndarray
    scene_flow_world: np.ndarray | None      # (H, W, 3) float32 m (None: not asked for)
    scene_flow_source_camera: np.ndarray | None
    stats: dict


def source_points(src: EventGeometry):
    """(pixel indices (N,), u, v, world points (N, 3)) of every valid source pixel."""
    H, W = src.shape
    world = world_points(src.camera, src.camera_z, src.row_T_world_camera).reshape(-1, 3)
    idx = np.flatnonzero(np.isfinite(src.camera_z).ravel())
    v, u = np.divmod(idx, W)
    return idx, u.astype(np.float64), v.astype(np.float64), world[idx]


def geometric_flow(src: EventGeometry, dst: EventGeometry, depth_abs_m: float, depth_rel: float,
                   scene_flow: bool = True) -> FlowResult:
    """Flow from `src`'s pixel grid to `dst` (and, with scene_flow, the scene flow on `src`'s grid; a pair writes
    the forward direction's only, so the backward solve leaves it None)."""
    H, W = src.shape
    idx, u, v, P = source_points(src)
    rows = v.astype(np.int64)
    render = src.instance_id.ravel()[idx].astype(np.int64)
    motion = source_motion(src, P, rows, render)
    vd, iterations, (Pd, Xc, ud, vn) = solve_landing_rows(Landing(dst, motion, P, H), v, H)
    defined, in_bounds, visible, resid = _flags(src, dst, render, Xc, ud, vn, vd, depth_abs_m, depth_rel)
    kept = np.flatnonzero(defined)
    at = idx[kept]                                 # flat pixel index of each defined source pixel
    flow = np.full((H * W, 2), np.nan, np.float32)
    flow[at, 0] = ud[kept] - u[kept]
    flow[at, 1] = vn[kept] - v[kept]
    sf, sfc = _scene_flows(src, Pd[kept] - P[kept], at, rows[kept]) if scene_flow else (None, None)

    def plane(mask_pixels):
        out = np.zeros(H * W, np.uint8)
        out[idx[mask_pixels]] = 1
        return out.reshape(H, W)
    stats = {"iterations": iterations, "max_row_residual": float(resid.max(initial=0.0)),
             "defined_pixels": int(defined.sum()), "visible_pixels": int(visible.sum())}
    if motion.deforming:
        stats["deforming_pixels"] = int(sum(sel.size for _, sel in motion.deforming))
        stats["max_material_point_distance_m"] = motion.worst_locate
    source_valid = np.isfinite(src.camera_z).astype(np.uint8)      # = plane(every valid source pixel)
    return FlowResult(flow.reshape(H, W, 2), source_valid, plane(in_bounds), plane(visible),
                      plane(defined), sf, sfc, stats)


@dataclass
class SourceMotion:
    """How each valid source point (N of them) moves with its object: `slot` (N,) its tracked object's slot (-1:
    static), `X_o` (N, 3) its coordinates in that object's frame (world for the others), `dslot` (N,) its deforming
    mesh (-1: none), `deforming` [(mesh, selected point indices)], `material` {mesh: (triangle, barycentric)} at the
    source row, `worst_locate` the largest point-to-mesh distance of that location (m)."""
    slot: np.ndarray
    X_o: np.ndarray
    dslot: np.ndarray
    deforming: list
    material: dict
    worst_locate: float


def source_motion(src: EventGeometry, P: np.ndarray, rows: np.ndarray, render: np.ndarray) -> SourceMotion:
    """Material coordinates of the source points P (N, 3) world m, on rows `rows` (N,), of render indices `render`."""
    H = src.shape[0]
    slot = src.object_slot[render]
    moving = slot >= 0
    X_o = P.copy()
    dslot = src.deform_slot[render] if src.deform_slot is not None else np.full(render.size, -1)
    deforming = [(d, np.flatnonzero(dslot == d)) for d in np.unique(dslot[dslot >= 0])]
    material, worst_locate = {}, 0.0
    for d, sel in deforming:                    # rest-state identity: (triangle, barycentric) at the source row
        tri, bary, dist = locate(src.meshes[d], rows[sel], P[sel])
        material[d] = (tri, bary)
        worst_locate = max(worst_locate, float(dist.max(initial=0.0)))
    if moving.any():
        S = src.object_matrices.shape[0]
        M_inv = np.linalg.inv(src.object_matrices.reshape(S * H, 4, 4))
        X_o[moving] = apply_per_row(M_inv, P[moving], slot[moving] * H + rows[moving])
    return SourceMotion(slot, X_o, dslot, deforming, material, worst_locate)


class Landing:
    """Where the source points land in `dst` when evaluated at (fractional) destination rows vd (N,): calling it
    gives (the row each lands on (N,) -- its current row where it projects behind the camera or off the lens --,
    (world points at those times (N, 3) m, destination camera-frame points (N, 3) m, u (N,), v (N,) px)).
    Rows outside [0, H - 1] use the edge row's time."""

    def __init__(self, dst: EventGeometry, motion: SourceMotion, P: np.ndarray, H: int):
        self.dst, self.motion, self.H = dst, motion, H
        self.T_cw = np.linalg.inv(dst.row_T_world_camera)           # (H, 4, 4)
        S = dst.object_matrices.shape[0]
        self.moving_idx = np.flatnonzero(motion.slot >= 0)
        # points whose world position depends on the destination time; every other point is P itself, so its
        # camera-frame terms are kept from one iteration to the next (RowTerms)
        self.dynamic = np.flatnonzero((motion.slot >= 0) | (motion.dslot >= 0))
        self.fixed_in_camera = RowTerms(self.T_cw, P)
        # per tracked object and destination row, one matrix: flatten (slot, row) into one row index
        self.M_rows = dst.object_matrices.reshape(S * H, 4, 4) if S else np.zeros((0, 4, 4))
        self.Pd = P.copy()      # world points at the destination time: the dynamic ones are rewritten each call

    def _row_and_fraction(self, vd):
        vc = np.clip(vd, 0.0, self.H - 1.0)
        r0 = np.floor(vc).astype(np.int64)                   # <= H - 1: vc is clipped
        return r0, vc - r0

    def destination(self, vd):
        """(world points (N, 3), destination camera-frame points (N, 3), u (N,), v (N,)) at rows vd."""
        motion, Pd = self.motion, self.Pd
        r0, a = blockwise(self._row_and_fraction, vd)
        if self.moving_idx.size:
            m = self.moving_idx
            # a slot's last row (r0 = H - 1) has a == 0, so interpolation never reaches the next slot
            Pd[m] = apply_per_row(self.M_rows, motion.X_o[m], motion.slot[m] * self.H + r0[m], a[m])
        for d, sel in motion.deforming:
            Pd[sel] = self.dst.meshes[d].at(r0[sel], *motion.material[d], a[sel])
        Xc = self.fixed_in_camera.at(r0, a)
        if self.dynamic.size:
            dyn = self.dynamic
            Xc[dyn] = apply_per_row(self.T_cw, Pd[dyn], r0[dyn], a[dyn])
        ud, vn = blockwise(lambda X: project_uv(self.dst.camera, X), Xc)
        return Pd, Xc, ud, vn

    def __call__(self, vd):
        Pd, Xc, ud, vn = self.destination(vd)
        g = blockwise(lambda n, z, d: np.where(np.isfinite(n) & (z > 0), n, d), vn, Xc[:, 2], vd)  # behind: keep the row
        return g, (Pd, Xc, ud, vn)


def _row_change(g, v, H: int):
    return np.abs(np.clip(g, 0.0, H - 1.0) - np.clip(v, 0.0, H - 1.0))


def _secant_step(v0, g0, v1, g1):
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(np.abs(v1 - v0) > 1e-12, (g1 - g0) / (v1 - v0), 0.0)
    if not np.isfinite(slope).all():
        slope = np.nan_to_num(slope)
    return v1 + (g1 - v1) / (1.0 - np.clip(slope, -0.9, 0.9))


def solve_landing_rows(landing: Landing, v: np.ndarray, H: int):
    """Secant iteration on v = g(v) from the source rows `v` (N,): g is nearly affine in v (slope = image speed x
    row period), so two evaluations predict the fixed point. Returns (rows used (N,), iterations, landing's
    outputs at those rows); stops when no row moves by CONVERGED_ROWS or after MAX_ITERATIONS."""
    v0, (g0, _) = v, landing(v)
    v1, (g1, out) = g0, landing(g0)
    iterations = 2
    while True:
        if blockwise(lambda g, x: _row_change(g, x, H), g1, v1).max(initial=0.0) < CONVERGED_ROWS \
                or iterations >= MAX_ITERATIONS:
            break
        v2 = blockwise(_secant_step, v0, g0, v1, g1)
        v0, g0 = v1, g1
        v1, (g1, out) = v2, landing(v2)
        iterations += 1
    return v1, iterations, out


def _flags(src: EventGeometry, dst: EventGeometry, render, Xc, ud, vn, vd, depth_abs_m: float, depth_rel: float):
    """Per source point (N,) bool: correspondence defined, destination in bounds, destination visible (depth test
    inside the image); and the row residual |v_landed - v_used| of the in-bounds points."""
    H, W = src.shape
    if src.undefined.shape == dst.undefined.shape:
        undefined = (src.undefined.astype(bool) | dst.undefined.astype(bool))[render]
    else:
        undefined = dst.undefined[render].astype(bool) | src.undefined[render].astype(bool)
    in_front = (Xc[:, 2] > 0) & np.isfinite(ud) & np.isfinite(vn)     # a lens projects only inside its domain
    defined = ~undefined & (render != BACKGROUND_ID) & in_front
    in_bounds = defined & (ud >= -0.5) & (ud < W - 0.5) & (vn >= -0.5) & (vn < H - 0.5)
    visible = in_bounds.copy()
    tested = np.flatnonzero(in_bounds)             # the depth test decides only inside the image
    visible[tested] = _depth_test(dst, ud[tested], vn[tested], Xc[tested, 2], render[tested], depth_abs_m, depth_rel)
    # residual, where it is reported (in bounds: vn finite): rows between the row whose time was used and the row
    # the point lands on
    resid = np.abs(np.clip(vn[tested], 0.0, H - 1.0) - np.clip(vd[tested], 0.0, H - 1.0))
    return defined, in_bounds, visible, resid


def _scene_flows(src: EventGeometry, d: np.ndarray, at: np.ndarray, rows: np.ndarray):
    """Scene flow images (H, W, 3) float32 m, NaN elsewhere: the world displacement `d` (K, 3) of the defined source
    pixels at flat indices `at` (K,), and the same rotated into the source camera frame of each pixel's row."""
    H, W = src.shape
    sf = np.full((H * W, 3), np.nan, np.float32)
    sfc = np.full((H * W, 3), np.nan, np.float32)
    sf[at] = d
    R_cw = np.transpose(src.row_T_world_camera[:, :3, :3], (0, 2, 1))          # camera <- world, per row
    sfc[at] = blockwise(lambda x, r: rotate_per_row(R_cw, x, r), d, rows)
    return sf.reshape(H, W, 3), sfc.reshape(H, W, 3)


class RowTerms:
    """apply_per_row(T_rows, points, rows, frac) of fixed points, bit for bit, for a solve that asks again and again
    with rows that mostly repeat: T[r] X and (T[r+1] - T[r]) X are kept per point with the row r they were formed
    at, and formed again only for the points whose row changed since they were formed. The step term is formed
    only where frac != 0: where frac == 0 the sum is T[r] X itself (apply_per_row's T[r] X ends in + 0.0, so it is
    never -0, and adding frac * step = +-0 to it keeps its bits; the terms of finite points are finite)."""

    def __init__(self, T_rows: np.ndarray, points: np.ndarray):
        self.T = np.asarray(T_rows, np.float64)                     # (K, 4, 4)
        self.D = np.zeros_like(self.T)                              # next row minus this row; the last row has none
        self.D[:-1] = self.T[1:] - self.T[:-1]
        self.points = np.asfortranarray(points, np.float64)        # (N, 3), columns contiguous (apply_per_row)
        n = len(points)
        self.base, self.base_rows = np.zeros((n, 3)), np.full(n, -1, np.int64)   # T[r] X and its r (-1: none yet)
        self.step, self.step_rows = np.zeros((n, 3)), np.full(n, -1, np.int64)   # (T[r+1] - T[r]) X and its r

    def at(self, rows: np.ndarray, frac: np.ndarray) -> np.ndarray:
        """(N, 3): T[rows] X + frac (T[rows + 1] - T[rows]) X, as apply_per_row sums it."""
        _refresh(self.T, self.points, self.base, self.base_rows, rows, None)
        stepped = frac != 0
        if not stepped.any():
            return self.base.copy()
        _refresh(self.D, self.points, self.step, self.step_rows, rows, stepped)
        return blockwise(lambda base, f, step: base + f[:, None] * step, self.base, frac, self.step)


def _refresh(M, points, kept, kept_rows, rows, needed) -> None:
    """Make kept[i] = apply_per_row(M, points, rows)[i] wherever `needed` (None: everywhere), in place: formed
    again only where kept_rows differs from rows (all at once, without a gather of the points, when that is most
    of them)."""
    stale = rows != kept_rows
    if needed is not None:
        stale &= needed
    changed = np.flatnonzero(stale)
    if changed.size > rows.size // 2:
        kept[:] = blockwise(lambda X, r: apply_per_row(M, X, r), points, rows)
        kept_rows[:] = rows
    elif changed.size:
        kept[changed] = apply_per_row(M, points[changed], rows[changed])
        kept_rows[changed] = rows[changed]


def _depth_test(dst: EventGeometry, ud, vd, z, render, abs_m, rel) -> np.ndarray:
    """The moved point wins the destination's visibility: the nearest destination pixel shows the same
    object and its camera_z (`camera_z_at`: inverse-depth bilinear when all four neighbours show that
    object) is within abs_m + rel * z of the point's z."""
    z_dst, seen = blockwise(lambda u, v, r: camera_z_at(dst.camera_z, dst.instance_id, u, v, r), ud, vd, render)
    ok = np.isfinite(ud) & np.isfinite(vd) & (seen == render)
    return ok & (np.abs(z_dst - z) <= abs_m + rel * np.abs(z))
