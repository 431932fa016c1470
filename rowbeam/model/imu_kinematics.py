"""IMU truth from motion: angular velocity and specific force of a body frame from its world pose and the pose's
first and second time derivatives (jets, `rowbeam.model.jets`), and the rotation conventions those poses use.

Frames: world = Blender world (right-handed, z up, metres); IMU frame = the mount object's local axes with scale
removed (columns of matrix_world's 3x3 part normalised). With R = R_world_imu(t), p = the IMU origin in world:
    angular velocity   omega_imu = vee(R^T dR/dt)                       (rad/s, IMU frame)
    specific force     f_imu     = R^T (d2p/dt2 - g_world)              (m/s^2, IMU frame)
g_world is the declared gravity vector (default (0, 0, -9.80665) m/s^2), so an IMU at rest reads +9.80665 m/s^2 on
the axis that points up. A lever arm on a rotating parent needs nothing special: p is the IMU origin's own world
position, whose second derivative holds the centripetal and tangential terms (d2(P L)/dt2 = P'' L + 2 P' L' + P L'').
"""
from __future__ import annotations

import numpy as np

from rowbeam.model import jets
from rowbeam.model.jets import Jet

STANDARD_GRAVITY_MPS2 = 9.80665
DEFAULT_GRAVITY_WORLD = (0.0, 0.0, -STANDARD_GRAVITY_MPS2)
EULER_ORDERS = ("XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX")
_AXIS = {"X": 0, "Y": 1, "Z": 2}


def axis_rotation(angle: Jet, axis: int) -> Jet:
    """(N, 3, 3) jet of the right-handed rotation by `angle` (N,) rad about coordinate axis 0, 1 or 2."""
    c, s = jets.cos(angle), jets.sin(angle)
    one, zero = Jet.constant(np.ones_like(angle.v)), Jet.constant(np.zeros_like(angle.v))
    i, j = (axis + 1) % 3, (axis + 2) % 3
    rows = [[zero] * 3 for _ in range(3)]
    rows[axis][axis] = one
    rows[i][i], rows[i][j] = c, s.scaled(-1.0)
    rows[j][i], rows[j][j] = s, c
    return jets.stack([jets.stack(r, -1) for r in rows], -2)


def euler_matrix(angles: Jet, order: str) -> Jet:
    """(N, 3, 3) jet of Blender's Euler rotation of `angles` (N, 3) (x, y, z in rad) in `order` (e.g. "XYZ": the
    rotation about X is applied first, R = Rz Ry Rx)."""
    R = None
    for letter in order:
        a = _AXIS[letter]
        step = axis_rotation(angles[:, a], a)
        R = step if R is None else jets.matmul(step, R)
    return R


def quaternion_matrix(q: Jet) -> Jet:
    """(N, 3, 3) jet of the rotation of quaternions (N, 4) (w, x, y, z), normalised first as Blender does."""
    sq = jets.product(q, q)
    norm2 = Jet(sq.v.sum(-1), sq.d1.sum(-1), sq.d2.sum(-1))
    u = jets.product(q, _broadcast_last(jets.inverse_sqrt(norm2), 4))
    return jets.product(u, u, _quaternion_bilinear)


def _broadcast_last(a: Jet, n: int) -> Jet:
    return Jet(*(np.repeat(x[..., None], n, -1) for x in (a.v, a.d1, a.d2)))


def _quaternion_bilinear(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Symmetric bilinear form B(a, b) with B(u, u) = the rotation matrix of a unit quaternion u (w, x, y, z)."""
    def sym(i, j):
        return (a[..., i] * b[..., j] + a[..., j] * b[..., i]) / 2

    ww, xx, yy, zz = (sym(k, k) for k in range(4))
    xy, xz, yz, wx, wy, wz = sym(1, 2), sym(1, 3), sym(2, 3), sym(0, 1), sym(0, 2), sym(0, 3)
    return np.stack([np.stack([ww + xx - yy - zz, 2 * (xy - wz), 2 * (xz + wy)], -1),
                     np.stack([2 * (xy + wz), ww - xx + yy - zz, 2 * (yz - wx)], -1),
                     np.stack([2 * (xz - wy), 2 * (yz + wx), ww - xx - yy + zz], -1)], -2)


def affine(linear: Jet, translation: Jet) -> Jet:
    """(N, 4, 4) jet of [[linear, translation], [0, 1]] from (N, 3, 3) and (N, 3) jets."""
    def part(L, t, last):
        M = np.zeros(L.shape[:-2] + (4, 4))
        M[..., :3, :3], M[..., :3, 3], M[..., 3, 3] = L, t, last
        return M
    return Jet(part(linear.v, translation.v, 1.0), part(linear.d1, translation.d1, 0.0),
               part(linear.d2, translation.d2, 0.0))


def rigid(world: Jet) -> tuple[Jet, Jet]:
    """(R (N, 3, 3), p (N, 3)) jets of a world matrix jet (N, 4, 4): its 3x3 columns normalised (scale removed; exact
    for rotation x per-axis scale, Blender's object transform without shear) and its translation."""
    A = world[..., :3, :3]
    sq = jets.product(A, A)
    norm2 = Jet(sq.v.sum(-2), sq.d1.sum(-2), sq.d2.sum(-2))                     # (N, 3): squared column lengths
    inv = jets.inverse_sqrt(norm2)
    R = jets.product(A, Jet(inv.v[..., None, :], inv.d1[..., None, :], inv.d2[..., None, :]))
    return R, world[..., :3, 3]


def imu_truth(world: Jet, gravity_world=DEFAULT_GRAVITY_WORLD) -> tuple[np.ndarray, np.ndarray]:
    """(angular velocity (N, 3) rad/s, specific force (N, 3) m/s^2), both in the IMU frame, of a mount whose
    matrix_world and its first two time derivatives (per s) are `world` (N, 4, 4)."""
    R, p = rigid(world)
    Rt = np.swapaxes(R.v, -1, -2)
    W = Rt @ R.d1
    W = (W - np.swapaxes(W, -1, -2)) / 2                    # skew part (exactly skew for an exact jet)
    omega = np.stack([W[..., 2, 1], W[..., 0, 2], W[..., 1, 0]], -1)
    force = np.einsum("nij,nj->ni", Rt, p.d2 - np.asarray(gravity_world, dtype=np.float64))
    return omega, force


def central_difference(before: np.ndarray, at: np.ndarray, after: np.ndarray, step_s: float) -> Jet:
    """The jet of sampled matrices by central differences with step h = step_s (s): d1 = (M(t+h) - M(t-h)) / 2h,
    d2 = (M(t+h) - 2 M(t) + M(t-h)) / h^2 (truncation O(h^2))."""
    return Jet(np.asarray(at, np.float64), (after - before) / (2 * step_s), (after - 2 * at + before) / step_s ** 2)
