"""Coordinate frames and typed rigid transforms.

World = Blender world (right-handed, z up, metres).
Camera = OpenCV optical (x right, y down, z forward, metres).
Blender's camera object looks down its local -z with +y up; `T_blender_camera_opencv` is
the one conversion between the two, used everywhere.
LiDAR = x forward, y left, z up.
`T_a_b` maps homogeneous coordinates from frame b into frame a (4x4, metres).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Maps OpenCV-optical coordinates into Blender-camera coordinates (and back: it is its own inverse).
T_BLENDER_CAMERA_OPENCV = np.diag([1.0, -1.0, -1.0, 1.0])


def rigid_part(matrix) -> np.ndarray:
    """Rigid (rotation + translation) part of a 4x4 that may carry scale or shear.

    The rotation is the orthonormal polar factor (nearest rotation), so a scaled
    Blender object's pose keeps its orientation and origin.
    """
    m = np.asarray(matrix, dtype=np.float64)
    u, _, vt = np.linalg.svd(m[:3, :3])
    r = u @ vt
    if np.linalg.det(r) < 0:
        raise ValueError("transform has a mirroring (negative determinant) rotation part")
    out = np.eye(4)
    out[:3, :3] = r
    out[:3, 3] = m[:3, 3]
    return out


def rigid_parts(matrices) -> np.ndarray:
    """`rigid_part` of each of (N, 4, 4) matrices in one batched SVD: (N, 4, 4) float64. When every 3x3 part has the
    bits of the first (a translating rig sampled at many times) its rotation is computed once and repeated: the SVD
    and product of each matrix are independent of the others, so the result is the same."""
    m = np.asarray(matrices, dtype=np.float64)
    linear = m[:, :3, :3]
    bits = linear.view(np.uint64)
    if m.shape[0] > 1 and (bits == bits[:1]).all():
        u, _, vt = np.linalg.svd(linear[:1])
        r = np.repeat(u @ vt, m.shape[0], axis=0)
    else:
        u, _, vt = np.linalg.svd(linear)
        r = u @ vt
    if m.shape[0] and (np.linalg.det(r) < 0).any():
        raise ValueError("transform has a mirroring (negative determinant) rotation part")
    out = np.zeros_like(m)
    out[:, :3, :3] = r
    out[:, :3, 3] = m[:, :3, 3]
    out[:, 3, 3] = 1.0
    return out


def world_from_opencv_camera(T_world_blender_camera) -> np.ndarray:
    """T_world_camera (OpenCV optical) from a Blender camera's matrix_world (scale removed)."""
    return rigid_part(T_world_blender_camera) @ T_BLENDER_CAMERA_OPENCV


def invert_rigid(T) -> np.ndarray:
    T = np.asarray(T, dtype=np.float64)
    out = np.eye(4)
    r = T[:3, :3].T
    out[:3, :3] = r
    out[:3, 3] = -r @ T[:3, 3]
    return out


def apply(T, points) -> np.ndarray:
    """Apply 4x4 transform(s) to points (..., 3). T may be (4,4) or broadcastable (..., 4, 4)."""
    T = np.asarray(T, dtype=np.float64)
    p = np.asarray(points, dtype=np.float64)
    return np.einsum("...ij,...j->...i", T[..., :3, :3], p) + T[..., :3, 3]


def rotate(T, vectors) -> np.ndarray:
    """Rotate direction vectors (..., 3) by the rotation part of T (no translation)."""
    T = np.asarray(T, dtype=np.float64)
    return np.einsum("...ij,...j->...i", T[..., :3, :3], np.asarray(vectors, dtype=np.float64))


def rigid_mask(T, tol: float = 1e-9) -> np.ndarray:
    """Per-matrix test of (..., 4, 4): orthonormal rotation with det +1 and last row (0, 0, 0, 1)."""
    T = np.asarray(T, dtype=np.float64)
    r = T[..., :3, :3]
    ortho = np.abs(np.einsum("...ji,...jk->...ik", r, r) - np.eye(3)).max(axis=(-2, -1)) <= tol
    det = np.abs(np.linalg.det(r) - 1.0) < tol
    last = np.abs(T[..., 3, :] - [0, 0, 0, 1]).max(axis=-1) <= tol
    return ortho & det & last


def is_rigid(T, tol: float = 1e-9) -> bool:
    T = np.asarray(T)
    return T.shape == (4, 4) and bool(rigid_mask(T, tol))


@dataclass(frozen=True)
class Transform:
    """T_target_source: maps coordinates from `source` frame into `target` frame."""

    target: str
    source: str
    matrix: np.ndarray = field(repr=False)
    time_ns: int | None = None

    def __matmul__(self, other: "Transform") -> "Transform":
        if self.source != other.target:
            raise ValueError(f"ill-typed composition T_{self.target}_{self.source} @ "
                             f"T_{other.target}_{other.source}: '{self.source}' != '{other.target}'")
        if self.time_ns is not None and other.time_ns is not None and self.time_ns != other.time_ns:
            raise ValueError("composing transforms evaluated at different times")
        t = self.time_ns if self.time_ns is not None else other.time_ns
        return Transform(self.target, other.source, np.asarray(self.matrix) @ np.asarray(other.matrix), t)

    def inverse(self) -> "Transform":
        return Transform(self.source, self.target, invert_rigid(self.matrix), self.time_ns)

    def apply(self, points) -> np.ndarray:
        return apply(self.matrix, points)

    def to_json(self) -> dict:
        out = {"target": self.target, "source": self.source,
               "matrix": [[float(x) for x in row] for row in np.asarray(self.matrix)]}
        if self.time_ns is not None:
            out["time_ns"] = int(self.time_ns)
        return out

    @classmethod
    def from_json(cls, d: dict) -> "Transform":
        return cls(d["target"], d["source"], np.array(d["matrix"], dtype=np.float64), d.get("time_ns"))


def quat_wxyz_from_matrix(R) -> np.ndarray:
    """Unit quaternion (w, x, y, z), w >= 0, of a 3x3 rotation matrix."""
    R = np.asarray(R, dtype=np.float64)
    tr = np.trace(R)
    if tr > 0:
        s = 2.0 * np.sqrt(tr + 1.0)
        q = [0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s]
    else:
        i = int(np.argmax(np.diag(R)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(1.0 + R[i, i] - R[j, j] - R[k, k])
        q = [0.0] * 4
        q[0] = (R[k, j] - R[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (R[j, i] + R[i, j]) / s
        q[1 + k] = (R[k, i] + R[i, k]) / s
    q = np.array(q)
    q /= np.linalg.norm(q)
    return q if q[0] >= 0 else -q


def matrix_from_quat_wxyz(q) -> np.ndarray:
    w, x, y, z = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def slerp(q0, q1, a: float) -> np.ndarray:
    """Spherical interpolation of unit quaternions (w,x,y,z), shortest arc, a in [0, 1]."""
    q0 = np.asarray(q0, dtype=np.float64)
    q1 = np.asarray(q1, dtype=np.float64)
    d = float(np.dot(q0, q1))
    if d < 0:
        q1, d = -q1, -d
    if d > 0.9999999:
        q = q0 + a * (q1 - q0)
        return q / np.linalg.norm(q)
    theta = np.arccos(d)
    return (np.sin((1 - a) * theta) * q0 + np.sin(a * theta) * q1) / np.sin(theta)


def interpolate_rigid(T0, T1, a: float) -> np.ndarray:
    """Rigid pose between T0 (a=0) and T1 (a=1): lerp translation, slerp rotation."""
    out = np.eye(4)
    out[:3, :3] = matrix_from_quat_wxyz(slerp(quat_wxyz_from_matrix(T0[:3, :3]),
                                              quat_wxyz_from_matrix(T1[:3, :3]), a))
    out[:3, 3] = (1 - a) * np.asarray(T0)[:3, 3] + a * np.asarray(T1)[:3, 3]
    return out


def apply_per_row(T_rows, points, rows, frac=None) -> np.ndarray:
    """T_rows[rows[i]] applied to points[i]: (K, 4, 4), (N, 3), (N,) int -> (N, 3).

    With `frac`, the pose is linearly interpolated toward the next row: T[r] + frac * (T[r+1] - T[r])
    (the last row has no successor and is used as is). Rolling-shutter data has one pose per row;
    each of the 12 matrix entries is gathered per point and the product formed elementwise, summed
    (T0 x + T2 z) + (T1 y + T3), then + 0.0 (a zero is +0): the bits numpy's batched matmul gives, without its cost.
    """
    T_rows = np.asarray(T_rows, dtype=np.float64)
    rows = np.asarray(rows, dtype=np.intp)
    points = np.asarray(points, dtype=np.float64)
    x, y, z = (np.ascontiguousarray(points[:, k]) for k in range(3))
    frac = None if frac is None else np.asarray(frac, dtype=np.float64)
    out = np.empty((rows.size, 3))
    for i in range(3):
        out[:, i] = _affine_row(T_rows[:, i, :], rows, x, y, z)
        if frac is not None:
            D = np.zeros((T_rows.shape[0], 4))
            D[:-1] = T_rows[1:, i, :] - T_rows[:-1, i, :]
            out[:, i] += frac * _affine_row(D, rows, x, y, z)
    return out


def _affine_row(M, rows, x, y, z) -> np.ndarray:
    """(N,) M[rows] . (x, y, z, 1) for one matrix row per point, M (K, 4)."""
    c0, c1, c2, c3 = (np.ascontiguousarray(M[:, k]).take(rows) for k in range(4))
    c0 *= x
    c2 *= z
    c0 += c2
    c1 *= y
    c1 += c3
    c0 += c1
    c0 += 0.0
    return c0


def apply_rows_grid(T_rows, grid, rotate_only: bool = False) -> np.ndarray:
    """Row h's transform applied to every point (or, with rotate_only, vector) of image row h:
    (H, 4, 4), (H, W, 3) -> (H, W, 3). No gather: image rows are already grouped; elementwise products summed
    (R0 g0 + R2 g2) + R1 g1, then + 0.0 (a zero is +0): the bits numpy's einsum over the contiguous axis gives."""
    T_rows = np.asarray(T_rows, dtype=np.float64)
    g = np.asarray(grid, dtype=np.float64)
    out = np.empty(g.shape)
    for i in range(3):
        R = T_rows[:, None, i, :]                                   # (H, 1, 4)
        o = ((R[..., 0] * g[..., 0] + R[..., 2] * g[..., 2]) + R[..., 1] * g[..., 1]) + 0.0
        out[..., i] = o if rotate_only else o + R[..., 3]
    return out
