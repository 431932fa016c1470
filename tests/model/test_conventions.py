"""Seed fixtures and convention functions (no Blender)."""
import math

import numpy as np
import pytest

from rowbeam.model.camera_model import (
    BlenderCameraParams,
    backproject,
    camera_z_from_range,
    intrinsics_from_blender,
    project,
    range_from_camera_z,
)
from rowbeam.model.frames import (
    T_BLENDER_CAMERA_OPENCV,
    Transform,
    apply,
    interpolate_rigid,
    invert_rigid,
    matrix_from_quat_wxyz,
    quat_wxyz_from_matrix,
    rigid_part,
    rigid_parts,
    world_from_opencv_camera,
)
from rowbeam.blender.scenes.calibration import seed_pose

SEED_K = np.array([[800.0, 0, 640], [0, 800.0, 360], [0, 0, 1]])


def test_seed_point_camera_z_range_and_pixel():
    X = np.array([1.0, -1.0, 8.0])
    uv, in_front = project(SEED_K, X)
    assert in_front
    assert uv == pytest.approx([740.0, 260.0], abs=1e-12)
    # the pixel's ray back to camera_z 8 m recovers the point; range is |X| = sqrt(66)
    assert backproject(SEED_K, 740.0, 260.0, 8.0) == pytest.approx(X, abs=1e-12)
    r = range_from_camera_z(SEED_K, 740.0, 260.0, 8.0)
    assert r == pytest.approx(math.sqrt(66), abs=1e-12)
    assert camera_z_from_range(SEED_K, 740.0, 260.0, r) == pytest.approx(8.0, abs=1e-12)
    # range is not z: the 1.5 % difference of the seed
    assert (r - 8.0) / 8.0 == pytest.approx(0.0155, abs=1e-4)


def test_seed_world_round_trip():
    """Worked projection example: camera at (10,2,1) looking along +x; (18,1,2) -> (740,260) -> back with z = 8."""
    T_world_camera = seed_pose((10.0, 2.0, 1.0))
    T_camera_world = invert_rigid(T_world_camera)
    X_c = apply(T_camera_world, [18.0, 1.0, 2.0])
    assert X_c == pytest.approx([1.0, -1.0, 8.0], abs=1e-12)
    uv, _ = project(SEED_K, X_c)
    assert uv == pytest.approx([740.0, 260.0], abs=1e-12)
    back = apply(T_world_camera, backproject(SEED_K, 740.0, 260.0, 8.0))
    assert back == pytest.approx([18.0, 1.0, 2.0], abs=1e-12)
    # the inverse mistake (using T_world_camera as T_camera_world) lands elsewhere
    assert apply(T_world_camera, [18.0, 1.0, 2.0]) != pytest.approx(X_c, abs=1.0)


def test_exercise_1_range_to_z():
    """x_n = 0.6, y_n = 0.8, range 10 m -> camera_z = 10/sqrt(2) = 7.071 m (41.4 % error if confused)."""
    K = np.eye(3)
    z = camera_z_from_range(K, 0.6, 0.8, 10.0)
    assert z == pytest.approx(7.0710678, abs=1e-6)
    assert (10.0 - z) / z == pytest.approx(0.414, abs=1e-3)


def test_point_behind_camera_does_not_project():
    uv, in_front = project(SEED_K, [1.0, -1.0, -8.0])
    assert not in_front and np.isnan(uv).all()


def test_blender_to_opencv_axes():
    """Blender camera looks down -z with +y up; OpenCV looks down +z with +y down."""
    R = np.eye(4)
    T = world_from_opencv_camera(R)
    assert apply(T, [0, 0, 1]) == pytest.approx([0, 0, -1])   # forward
    assert apply(T, [0, 1, 0]) == pytest.approx([0, -1, 0])   # down
    assert apply(T, [1, 0, 0]) == pytest.approx([1, 0, 0])    # right
    assert np.array_equal(T_BLENDER_CAMERA_OPENCV @ T_BLENDER_CAMERA_OPENCV, np.eye(4))


def test_scale_removed_from_camera_pose():
    M = np.diag([2.0, 2.0, 2.0, 1.0])
    M[:3, 3] = (1, 2, 3)
    T = rigid_part(M)
    assert np.allclose(T[:3, :3], np.eye(3)) and np.allclose(T[:3, 3], (1, 2, 3))


def test_rigid_parts_of_a_constant_rotation_are_those_of_each_matrix():
    """A stack whose 3x3 parts all have the same bits (rotation computed once) gives the bits of rigid_part of each
    matrix; -0.0 against 0.0 or one differing matrix takes the per-matrix path; a mirroring is refused either way."""
    rng = np.random.default_rng(5)
    M = np.tile(np.eye(4), (40, 1, 1))
    M[:, :3, :3] = np.linalg.qr(rng.normal(size=(3, 3)))[0] * np.array([1.5, 0.7, 2.0])
    if np.linalg.det(M[0, :3, :3]) < 0:
        M[:, :3, 0] *= -1
    M[:, :3, 3] = rng.normal(size=(40, 3))
    signed_zero = M.copy()
    signed_zero[:, 0, 1], signed_zero[9, 0, 1] = 0.0, -0.0
    one_off = M.copy()
    one_off[17, 1, 1] = np.nextafter(one_off[17, 1, 1], 9.0)
    for stack in (M, signed_zero, one_off):
        assert rigid_parts(stack).tobytes() == np.stack([rigid_part(m) for m in stack]).tobytes()
    mirrored = M.copy()
    mirrored[:, :3, 0] *= -1
    with pytest.raises(ValueError, match="mirroring"):
        rigid_parts(mirrored)


def _params(**kw):
    base = dict(lens_mm=22.5, sensor_width_mm=36.0, sensor_height_mm=24.0, sensor_fit="AUTO", shift_x=0.0,
                shift_y=0.0, resolution_x=1280, resolution_y=720)
    base.update(kw)
    return BlenderCameraParams(**base)


@pytest.mark.parametrize("kw, expected", [
    # unshifted: principal point at W/2 - 0.5 (pixel centres at integers), f = lens/sensor * W
    ({}, (800.0, 800.0, 639.5, 359.5)),
    # shift of -0.5/W moves the principal point right by half a pixel: the seed's K exactly
    (dict(shift_x=-0.5 / 1280, shift_y=0.5 / 1280), (800.0, 800.0, 640.0, 360.0)),
    # portrait image with AUTO fit: sensor_width spans the larger (vertical) side
    (dict(resolution_x=720, resolution_y=1280), (800.0, 800.0, 359.5, 639.5)),
    # VERTICAL fit uses sensor_height across the height
    (dict(sensor_fit="VERTICAL", sensor_height_mm=20.25), (800.0, 800.0, 639.5, 359.5)),
    # pixels twice as wide as tall, horizontal fit: twice as many rows per radian, f_y = 2 f_x
    (dict(pixel_aspect_x=2.0, pixel_aspect_y=1.0), (800.0, 1600.0, 639.5, 359.5)),
    # resolution percentage halves the image and the focal length in pixels
    (dict(resolution_percentage=50), (400.0, 400.0, 319.5, 179.5)),
    # shift_y on a vertical-fit camera: in units of the fitted (vertical) dimension
    (dict(sensor_fit="VERTICAL", sensor_height_mm=20.25, shift_y=0.1), (800.0, 800.0, 639.5, 359.5 + 72.0)),
])
def test_intrinsics_from_blender(kw, expected):
    K = intrinsics_from_blender(_params(**kw))
    fx, fy, cx, cy = expected
    assert K == pytest.approx(np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1]]), abs=1e-9)


def test_transform_typing():
    T_world_rig = Transform("world", "rig", np.eye(4))
    T_rig_camera = Transform("rig", "camera", np.eye(4))
    assert (T_world_rig @ T_rig_camera).source == "camera"
    with pytest.raises(ValueError, match="ill-typed"):
        T_rig_camera @ T_world_rig
    assert Transform.from_json(T_world_rig.to_json()).target == "world"


def test_quaternion_round_trip_and_slerp():
    a = math.radians(90)
    R = np.array([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]])
    q = quat_wxyz_from_matrix(R)
    assert q == pytest.approx([math.cos(a / 2), 0, 0, math.sin(a / 2)])
    assert matrix_from_quat_wxyz(q) == pytest.approx(R)
    T0, T1 = np.eye(4), np.eye(4)
    T1[:3, :3] = R
    T1[:3, 3] = (2, 0, 0)
    mid = interpolate_rigid(T0, T1, 0.5)
    b = math.radians(45)
    assert mid[:3, :3] == pytest.approx(np.array([[math.cos(b), -math.sin(b), 0], [math.sin(b), math.cos(b), 0],
                                                  [0, 0, 1]]))
    assert mid[:3, 3] == pytest.approx([1, 0, 0])
    # a matrix-entry lerp would not be a rotation
    assert abs(np.linalg.det(0.5 * (T0[:3, :3] + R)) - 1) > 0.1
