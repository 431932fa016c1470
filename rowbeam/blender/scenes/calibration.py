"""Calibration scenes with closed-form ground truth (bpy).

Every builder makes a fresh scene, returns a `Truth` with the analytic quantities the tests
compare against, and a rig for one rolling-shutter camera. Camera intrinsics are the seed's
K = [[800,0,640],[0,800,360],[0,0,1]] at 1280x720, divided by `scale`; the default pose is the
seed's camera at world (10, 2, 1) looking along world +x (OpenCV optical axes: x = -y_w,
y = -z_w, z = +x_w), so world and camera frames differ by a rotation and a translation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rowbeam.model.frames import apply, invert_rigid

from rowbeam.blender.scenes import common

SEED_POSITION = (10.0, 2.0, 1.0)
FPS = 30


def seed_pose(position=SEED_POSITION) -> np.ndarray:
    return common.look_along(position, forward=(1, 0, 0), down=(0, 0, -1))


def seed_K(scale: int) -> tuple[float, float, float, int, int]:
    """(f, cx, cy, W, H) of the seed camera at 1/scale resolution."""
    return 800.0 / scale, 640.0 / scale, 360.0 / scale, 1280 // scale, 720 // scale


@dataclass
class Truth:
    """Closed-form truth of a calibration scene. Times are scene-clock ns."""

    K: np.ndarray
    size: tuple
    camera_pose: callable                 # t_ns -> T_world_camera (OpenCV optical)
    planes: list = field(default_factory=list)   # [(name, callable t_ns -> (n_world, d)) with n.x = d]
    notes: dict = field(default_factory=dict)

    def camera_z(self, u, v, t_ns, plane: int = 0) -> np.ndarray:
        """camera_z of plane `plane` on the pixel-centre ray of (u, v) at time t_ns."""
        T = self.camera_pose(t_ns)
        n_w, d = self.planes[plane][1](t_ns)
        R, C = T[:3, :3], T[:3, 3]
        ray_c = np.stack([(u - self.K[0, 2]) / self.K[0, 0], (v - self.K[1, 2]) / self.K[1, 1], np.ones_like(u)], -1)
        ray_w = ray_c @ R.T
        return (d - n_w @ C) / (ray_w @ n_w)

    def normal_camera(self, t_ns, plane: int = 0) -> np.ndarray:
        """Plane normal in the camera frame, oriented toward the camera."""
        T = self.camera_pose(t_ns)
        n_w, d = self.planes[plane][1](t_ns)
        n_c = T[:3, :3].T @ n_w
        side = n_w @ T[:3, 3] - d            # > 0 when the camera is on the normal's side
        return n_c if side > 0 else -n_c


def _plane_facing(T_world_camera, centre_camera, normal_camera, half=30.0):
    """Matrix of a quad centred at a camera-frame point with its +z normal along normal_camera."""
    z = np.asarray(normal_camera, float) / np.linalg.norm(normal_camera)
    helper = np.array([1.0, 0, 0]) if abs(z[0]) < 0.9 else np.array([0, 1.0, 0])
    x = np.cross(helper, z)
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    M = np.eye(4)
    M[:3, :3] = np.stack([x, y, z], 1)
    M[:3, 3] = centre_camera
    return T_world_camera @ M


def _static_plane(T_world_camera, point_camera, normal_camera):
    Tw = np.asarray(T_world_camera)
    n_w = Tw[:3, :3] @ (np.asarray(normal_camera, float) / np.linalg.norm(normal_camera))
    p_w = apply(Tw, point_camera)
    return lambda t: (n_w, float(n_w @ p_w))


def _base(scale: int, name: str = "camera_front"):
    f, cx, cy, W, H = seed_K(scale)
    scene = common.new_scene(W, H, fps=FPS, frame_start=1, frame_end=30)
    T = seed_pose()
    cam = common.add_camera(name, T, f, cx, cy, W, H)
    K = np.array([[f, 0, cx], [0, f, cy], [0, 0, 1.0]])
    return scene, cam, T, K, (W, H)


def fronto_plane(scale: int = 4):
    """Plane at camera z = 8 m, facing the camera: camera_z = 8 everywhere, range = 8*sqrt(1+x_n^2+y_n^2)."""
    _, cam, T, K, size = _base(scale)
    quad = common.add_quad("plane_z8", 30, 30, _plane_facing(T, (0, 0, 8.0), (0, 0, -1.0)))
    common.tag(quad, 0x1001, "wall")
    truth = Truth(K, size, lambda t: T, [("plane_z8", _static_plane(T, (0, 0, 8.0), (0, 0, -1.0)))])
    return truth, common.camera_rig("camera_front", cam.name, rgb_samples=4)


def marker(scale: int = 4):
    """A 0.095 m square marker centred at camera (1, -1, 8) (world (18, 1, 2)) before a backdrop at z = 12."""
    _, cam, T, K, size = _base(scale)
    backdrop = common.add_quad("backdrop", 30, 30, _plane_facing(T, (0, 0, 12.0), (0, 0, -1.0)))
    common.tag(backdrop, 0x2001, "wall")
    m = common.add_quad("marker", 0.0475, 0.0475, _plane_facing(T, (1.0, -1.0, 8.0), (0, 0, -1.0)))
    common.tag(m, 0x2002, "marker")
    common.add_material(m, (0.9, 0.1, 0.1))
    truth = Truth(K, size, lambda t: T, [("marker", _static_plane(T, (1.0, -1.0, 8.0), (0, 0, -1.0))),
                                         ("backdrop", _static_plane(T, (0, 0, 12.0), (0, 0, -1.0)))],
                  notes={"marker_world": (18.0, 1.0, 2.0), "marker_camera": (1.0, -1.0, 8.0),
                         "marker_half_size_m": 0.0475, "marker_id": 0x2002, "backdrop_id": 0x2001})
    return truth, common.camera_rig("camera_front", cam.name, rgb_samples=4)


def tilted_plane(scale: int = 4):
    """Plane through camera (0, 0.5, 9) with camera-frame normal ~ (0.35, -0.45, -1): off-axis z, range, normals."""
    _, cam, T, K, size = _base(scale)
    n_c = np.array([0.35, -0.45, -1.0])
    n_c /= np.linalg.norm(n_c)
    quad = common.add_quad("tilted", 40, 40, _plane_facing(T, (0, 0.5, 9.0), n_c))
    common.tag(quad, 0x3001, "wall")
    truth = Truth(K, size, lambda t: T, [("tilted", _static_plane(T, (0, 0.5, 9.0), n_c))])
    return truth, common.camera_rig("camera_front", cam.name, rgb_samples=0)


def moving_plane(scale: int = 4, speed: float = -40.0, z0: float = 10.0, direction: str = "top_to_bottom"):
    """Fronto-parallel plane moving along the optical axis: camera_z(t) = z0 + speed * t (static camera)."""
    _, cam, T, K, size = _base(scale)
    quad = common.add_quad("moving_plane", 30, 30, _plane_facing(T, (0, 0, z0), (0, 0, -1.0)))
    common.tag(quad, 0x4001, "wall")
    axis_w = T[:3, 2]
    start = quad.matrix_world.translation.copy()
    common.key_locations(quad, [(1, start), (2, start + type(start)(axis_w * speed / FPS))])

    def plane(t_ns):
        z = z0 + speed * t_ns * 1e-9
        return _static_plane(T, (0, 0, z), (0, 0, -1.0))(t_ns)
    truth = Truth(K, size, lambda t: T, [("moving_plane", plane)], notes={"z0": z0, "speed": speed})
    return truth, common.camera_rig("camera_front", cam.name, rgb_samples=0, readout_direction=direction)


def ego_forward(scale: int = 4, speed: float = 10.0, distance: float = 12.0):
    """Camera advancing along its optical axis at `speed` toward a static plane: camera_z(t) = distance - speed*t."""
    _, cam, T, K, size = _base(scale)
    quad = common.add_quad("wall", 40, 40, _plane_facing(T, (0, 0, distance), (0, 0, -1.0)))
    common.tag(quad, 0x5001, "wall")
    axis_w = T[:3, 2]
    loc0 = np.array(cam.matrix_world.translation)
    common.key_locations(cam, [(1, tuple(loc0)), (2, tuple(loc0 + axis_w * speed / FPS))])

    def pose(t_ns):
        P = T.copy()
        P[:3, 3] = T[:3, 3] + axis_w * speed * t_ns * 1e-9
        return P
    truth = Truth(K, size, pose, [("wall", _static_plane(T, (0, 0, distance), (0, 0, -1.0)))],
                  notes={"speed": speed, "distance": distance})
    return truth, common.camera_rig("camera_front", cam.name, rgb_samples=0)


def ego_yaw(scale: int = 4, rate_rad_s: float = 3.0):
    """Camera yawing about world z at `rate_rad_s` in front of a wall at world x = 18: per-row rotation."""
    _, cam, T, K, size = _base(scale)
    wall = common.add_quad("wall", 60, 60, _plane_facing(T, (0, 0, 8.0), (0, 0, -1.0)))
    common.tag(wall, 0x6001, "wall")
    e0 = cam.rotation_euler.copy()
    loc = cam.location.copy()
    cam.keyframe_insert("location", frame=1)
    common.key_rotations(cam, [(1, e0), (2, (e0.x, e0.y, e0.z + rate_rad_s / FPS))])
    cam.location = loc

    def pose(t_ns):
        a = rate_rad_s * t_ns * 1e-9
        Rz = np.array([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]])
        P = T.copy()
        P[:3, :3] = Rz @ T[:3, :3]
        return P
    truth = Truth(K, size, pose, [("wall", _static_plane(T, (0, 0, 8.0), (0, 0, -1.0)))],
                  notes={"rate_rad_s": rate_rad_s})
    return truth, common.camera_rig("camera_front", cam.name, rgb_samples=0)


SCENES = {f.__name__: f for f in (fronto_plane, marker, tilted_plane, moving_plane, ego_forward, ego_yaw)}


def world_to_camera(truth: Truth, t_ns, points_world):
    return apply(invert_rigid(truth.camera_pose(t_ns)), points_world)
