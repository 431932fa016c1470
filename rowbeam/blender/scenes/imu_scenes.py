"""IMU calibration scenes with closed-form angular velocity and specific force (bpy).

Each builder returns an `ImuTruth` and a rig with one IMU ("imu", 200 Hz, 20 samples per event, on the empty
"imu_mount"). `truth.omega(t_s)` and `truth.force(t_s)` give the IMU-frame angular velocity (rad/s) and specific
force (m/s^2) at scene time t_s (seconds from frame_start) from the motion the builder declares, written down by hand,
not computed by rowbeam: static (+g up), constant yaw rate, uniform circular motion (centripetal), sinusoidal
translation, and a lever arm on a parent whose yaw is a cubic in time (tangential and centripetal terms).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rowbeam.blender.scenes import common

FPS = 30
G = 9.80665
FRAMES = 31                    # frames 1 .. 31: one second


@dataclass
class ImuTruth:
    omega: callable            # t_s -> (3,) rad/s, IMU frame
    force: callable            # t_s -> (3,) m/s^2, IMU frame


def imu_rig(**fields) -> dict:
    sensor = {"id": "imu", "type": "imu", "object": "imu_mount", "rate_hz": 200, "samples_per_event": 20}
    sensor.update(fields)
    return {"schema": "rowbeam/rig@1", "sensors": [sensor], "state_log": {"ego_object": "imu_mount"}}


def _scene():
    scene = common.new_scene(64, 48, fps=FPS, frame_start=1, frame_end=FRAMES)
    common.add_box("ground", (4.0, 4.0, 0.1), (0.0, 0.0, -1.0))
    return scene


def _rot(axis: int, a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    i, j = (axis + 1) % 3, (axis + 2) % 3
    R = np.eye(3)
    R[i, i], R[i, j], R[j, i], R[j, j] = c, -s, s, c
    return R


def _linear_keys(obj, path: str, index: int, points) -> None:
    for frame, value in points:
        getattr(obj, path)[index] = value
        obj.keyframe_insert(path, index=index, frame=frame)
    common._linear_extrapolation(obj)


def static(**fields):
    """An IMU at rest, rolled, pitched and yawed: omega = 0, f = R^T (0, 0, g)."""
    _scene()
    euler = (0.4, -0.3, 1.1)
    common.add_empty("imu_mount", (1.0, 2.0, 0.5), euler)
    R = _rot(2, euler[2]) @ _rot(1, euler[1]) @ _rot(0, euler[0])          # Blender XYZ: Rz Ry Rx
    return ImuTruth(lambda t: np.zeros(3), lambda t: R.T @ np.array([0.0, 0.0, G])), imu_rig(**fields)


def yaw_rate(rate: float = 1.5, tilt: float = 0.3, **fields):
    """Constant yaw rate about the IMU's own z, the mount tilted about world x (rotation mode ZXY: R = Rx(tilt)
    Rz(rate t), z applied first): omega = (0, 0, rate), f = R^T (0, 0, g)."""
    _scene()
    mount = common.add_empty("imu_mount", (0.0, 0.0, 1.0))
    mount.rotation_mode = "ZXY"
    mount.rotation_euler = (tilt, 0.0, 0.0)
    _linear_keys(mount, "rotation_euler", 2, [(1, 0.0), (1 + FPS, rate)])

    def force(t):
        R = _rot(0, tilt) @ _rot(2, rate * t)
        return R.T @ np.array([0.0, 0.0, G])
    return ImuTruth(lambda t: np.array([0.0, 0.0, rate]), force), imu_rig(**fields)


def circular(radius: float = 2.0, rate: float = 2.0, **fields):
    """Uniform circular motion: a parent turning at a constant yaw rate carries the IMU at (radius, 0, 0), IMU axes
    = the parent's: omega = (0, 0, rate), f = (-radius rate^2, 0, g) (centripetal toward the centre)."""
    _scene()
    arm = common.add_empty("arm", (0.5, -0.5, 1.0))
    _linear_keys(arm, "rotation_euler", 2, [(1, 0.0), (1 + FPS, rate)])
    mount = common.add_empty("imu_mount", (radius, 0.0, 0.0))
    mount.parent = arm
    mount.matrix_parent_inverse.identity()
    return (ImuTruth(lambda t: np.array([0.0, 0.0, rate]), lambda t: np.array([-radius * rate * rate, 0.0, G])),
            imu_rig(**fields))


def sinusoid(amplitude: float = 0.5, hz: float = 1.5, **fields):
    """x(t) = amplitude sin(2 pi hz t) (Built-In Function modifier on location x, frames -> seconds), IMU unrotated:
    omega = 0, f = (-amplitude (2 pi hz)^2 sin(2 pi hz t), 0, g)."""
    _scene()
    mount = common.add_empty("imu_mount", (0.0, 0.0, 1.0))
    mount.keyframe_insert("location", index=0, frame=1)
    fc = next(f for f in _fcurves(mount) if f.data_path == "location" and f.array_index == 0)
    fc.keyframe_points.remove(fc.keyframe_points[0])            # the modifier alone drives the channel
    mod = fc.modifiers.new("FNGENERATOR")
    mod.function_type, mod.amplitude, mod.use_additive = "SIN", amplitude, False
    w = 2 * math.pi * hz
    mod.phase_multiplier, mod.phase_offset = w / FPS, -w / FPS          # t = (frame - 1) / FPS
    return (ImuTruth(lambda t: np.zeros(3), lambda t: np.array([-amplitude * w * w * math.sin(w * t), 0.0, G])),
            imu_rig(**fields))


def lever_arm(radius: float = 1.5, coefficients=(0.2, 0.8, 1.2, -0.6), **fields):
    """A parent whose yaw is theta(t) = c0 + c1 t + c2 t^2 + c3 t^3 over frames 1 .. 31 (one Bezier segment with
    handles at 1/3 and 2/3 of it in time, so y(u) is exactly that cubic) carries the IMU at (radius, 0, 0), axes the
    parent's: omega = (0, 0, theta'), f = (-radius theta'^2, radius theta'', g)."""
    _scene()
    arm = common.add_empty("arm", (-0.5, 0.3, 1.0))
    c0, c1, c2, c3 = coefficients
    T = (FRAMES - 1) / FPS
    # Bernstein control values of the cubic over u = t / T
    b = [c0, c0 + c1 * T / 3, c0 + 2 * c1 * T / 3 + c2 * T * T / 3, c0 + c1 * T + c2 * T * T + c3 * T ** 3]
    for frame, value in ((1, b[0]), (FRAMES, b[3])):
        arm.rotation_euler[2] = value
        arm.keyframe_insert("rotation_euler", index=2, frame=frame)
    fc = next(f for f in _fcurves(arm) if f.data_path == "rotation_euler" and f.array_index == 2)
    fc.extrapolation = "LINEAR"             # along the end handles: no velocity kink at frame 1 for the state log
    k0, k1 = fc.keyframe_points
    for k in (k0, k1):
        k.interpolation = "BEZIER"
        k.handle_left_type = k.handle_right_type = "FREE"
    third = (FRAMES - 1) / 3
    k0.handle_right, k0.handle_left = (1 + third, b[1]), (1 - third, 2 * b[0] - b[1])          # straight through
    k1.handle_left, k1.handle_right = (FRAMES - third, b[2]), (FRAMES + third, 2 * b[3] - b[2])
    mount = common.add_empty("imu_mount", (radius, 0.0, 0.0))
    mount.parent = arm
    mount.matrix_parent_inverse.identity()

    def rate(t):
        return c1 + 2 * c2 * t + 3 * c3 * t * t

    def force(t):
        return np.array([-radius * rate(t) ** 2, radius * (2 * c2 + 6 * c3 * t), G])
    return ImuTruth(lambda t: np.array([0.0, 0.0, rate(t)]), force), imu_rig(**fields)


def _fcurves(obj):
    from rowbeam.blender.compat import blender_compat

    return list(blender_compat.fcurves(obj))


SCENES = {"static": static, "yaw_rate": yaw_rate, "circular": circular, "sinusoid": sinusoid, "lever_arm": lever_arm}
