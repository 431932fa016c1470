"""IMU truth from pose jets (rowbeam.model.imu_kinematics) against closed forms, without Blender.

Fixtures where the wrong readings disagree: a tilted spinning frame (world vs IMU frame), a lever arm on a parent
with angular acceleration (centripetal and tangential terms, their signs), gravity's sign (+g up at rest), Blender's
Euler orders (R = Rz Ry Rx for "XYZ", not its transpose) and quaternions normalised before use.
"""
import math

import numpy as np
import pytest

from rowbeam.model import imu_kinematics as kin
from rowbeam.model import jets
from rowbeam.model.jets import Jet

G = 9.80665


def _rz(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


def _rx(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[1.0, 0, 0], [0, c, -s], [0, s, c]])


def _angle(v, d1, d2) -> Jet:
    return Jet(np.array([v], float), np.array([d1], float), np.array([d2], float))


def _pose(R: Jet, p: Jet) -> Jet:
    return kin.affine(R, p)


def test_static_reads_plus_g_on_the_up_axis():
    R = kin.euler_matrix(Jet.constant(np.array([[0.4, -0.3, 1.1]])), "XYZ")
    world = _pose(R, Jet.constant(np.array([[1.0, 2.0, 3.0]])))
    omega, force = kin.imu_truth(world)
    assert np.abs(omega).max() == 0
    np.testing.assert_allclose(force[0], R.v[0].T @ [0, 0, G], atol=1e-12)
    # an unrotated IMU at rest: +g on z (a - g with g = (0, 0, -g))
    omega, force = kin.imu_truth(_pose(Jet.constant(np.eye(3)[None]), Jet.constant(np.zeros((1, 3)))))
    np.testing.assert_allclose(force[0], [0, 0, G], atol=1e-12)


def test_tilted_spin_is_in_the_imu_frame():
    """R = Rx(tilt) Rz(w t): the body rate is (0, 0, w) in the IMU frame; in the world it would be tilted."""
    tilt, w, t = 0.5, 1.7, 0.3
    Rz = kin.axis_rotation(_angle(w * t, w, 0.0), 2)
    R = jets.matmul(Jet.constant(_rx(tilt)[None]), Rz)
    omega, force = kin.imu_truth(_pose(R, Jet.constant(np.zeros((1, 3)))))
    np.testing.assert_allclose(omega[0], [0, 0, w], atol=1e-12)
    np.testing.assert_allclose(force[0], (_rx(tilt) @ _rz(w * t)).T @ [0, 0, G], atol=1e-12)


def test_lever_arm_on_an_accelerating_parent():
    """Parent yaw theta with rate w and acceleration al carries the IMU at (r, 0, 0), axes the parent's:
    f = (-r w^2, r al, g) (centripetal inward, tangential along +y for al > 0), omega = (0, 0, w)."""
    theta, w, al, r = 0.7, 2.0, 3.0, 1.5
    parent = _pose(kin.axis_rotation(_angle(theta, w, al), 2), Jet.constant(np.array([[0.3, -0.2, 1.0]])))
    child = Jet.constant(np.array([[[1, 0, 0, r], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.0]]]))
    omega, force = kin.imu_truth(jets.matmul(parent, child))
    np.testing.assert_allclose(omega[0], [0, 0, w], atol=1e-12)
    np.testing.assert_allclose(force[0], [-r * w * w, r * al, G], atol=1e-12)


def test_scale_is_removed_from_the_frame():
    """A parent scaled 2x: the IMU frame is the normalised axes; position (and its derivatives) keep the scale."""
    w = 1.2
    S = Jet.constant(np.diag([2.0, 2.0, 2.0])[None])
    R = jets.matmul(kin.axis_rotation(_angle(0.4, w, 0.0), 2), S)
    omega, force = kin.imu_truth(_pose(R, Jet.constant(np.zeros((1, 3)))))
    np.testing.assert_allclose(omega[0], [0, 0, w], atol=1e-12)
    np.testing.assert_allclose(force[0], [0, 0, G], atol=1e-12)


def test_declared_gravity_is_used():
    omega, force = kin.imu_truth(_pose(Jet.constant(np.eye(3)[None]), Jet.constant(np.zeros((1, 3)))), (0, 0, -1.62))
    np.testing.assert_allclose(force[0], [0, 0, 1.62])


@pytest.mark.parametrize("order", kin.EULER_ORDERS)
def test_euler_orders_compose_first_letter_first(order):
    angles = np.array([[0.3, -0.7, 1.2]])
    axes = {"X": (0, _rx), "Y": (1, None), "Z": (2, _rz)}
    R = np.eye(3)
    for letter in order:
        i = axes[letter][0]
        R = kin.axis_rotation(Jet.constant(angles[:, i]), i).v[0] @ R
    np.testing.assert_allclose(kin.euler_matrix(Jet.constant(angles), order).v[0], R, atol=1e-15)
    # "XYZ" = Rz Ry Rx, checked with explicit matrices
    if order == "XYZ":
        c, s = math.cos(-0.7), math.sin(-0.7)
        Ry = np.array([[c, 0, s], [0, 1.0, 0], [-s, 0, c]])
        np.testing.assert_allclose(R, _rz(1.2) @ Ry @ _rx(0.3), atol=1e-15)


@pytest.mark.parametrize("order", kin.EULER_ORDERS + ("QUATERNION",))
def test_rotation_jets_match_differences(order):
    """d1 and d2 of the rotation jets equal central differences of their values (h = 1e-4 s)."""
    def at(t):
        if order == "QUATERNION":
            q = np.stack([1.3 + 0.2 * t, 0.4 * np.sin(t), -0.3 + t * t, 0.2 * t], -1)
            dq = np.stack([0.2 + 0 * t, 0.4 * np.cos(t), 2 * t, 0.2 + 0 * t], -1)
            d2q = np.stack([0 * t, -0.4 * np.sin(t), 2 + 0 * t, 0 * t], -1)
            return kin.quaternion_matrix(Jet(q, dq, d2q))
        e = np.stack([0.3 + 1.1 * t, -0.2 + 0.7 * np.sin(2 * t), 0.5 * t ** 3], -1)
        de = np.stack([1.1 + 0 * t, 1.4 * np.cos(2 * t), 1.5 * t * t], -1)
        d2e = np.stack([0 * t, -2.8 * np.sin(2 * t), 3 * t], -1)
        return kin.euler_matrix(Jet(e, de, d2e), order)
    t, h = np.array([0.37]), 1e-4
    J, before, after = at(t), at(t - h).v, at(t + h).v
    np.testing.assert_allclose(J.d1, (after - before) / (2 * h), atol=1e-7)
    np.testing.assert_allclose(J.d2, (after - 2 * J.v + before) / h ** 2, atol=1e-5)
    np.testing.assert_allclose(J.v[0] @ J.v[0].T, np.eye(3), atol=1e-12)       # normalised quaternion


def test_central_difference_of_a_parabola_is_exact():
    t = np.array([-0.01, 0.0, 0.01])
    M = np.zeros((3, 1, 4, 4))
    M[:, 0, 0, 3] = 3 + 2 * t + 4 * t * t
    j = kin.central_difference(M[0], M[1], M[2], 0.01)
    assert j.d1[0, 0, 3] == pytest.approx(2.0) and j.d2[0, 0, 3] == pytest.approx(8.0)
