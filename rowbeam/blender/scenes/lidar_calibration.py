"""LiDAR calibration scenes with closed-form ranges (bpy).

Each builder returns a `LidarTruth` (mount pose and planes as functions of scene time) and a rig.
The expected range of a beam is the nearest positive ray-plane intersection from the mount's
origin at the beam's time: exact for the convex rooms and the single moving wall built here.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rowbeam.model.frames import rigid_part

from rowbeam.blender.scenes import common

FPS = 30


@dataclass
class LidarTruth:
    pose: callable                       # t_ns -> T_world_lidar
    planes: list                         # [t_ns -> (n_world unit, d)] with n . x = d
    notes: dict = field(default_factory=dict)

    def expected_range(self, t_ns: float, direction_lidar) -> float:
        T = self.pose(t_ns)
        o, d = T[:3, 3], T[:3, :3] @ np.asarray(direction_lidar, dtype=np.float64)
        best = np.inf
        for plane in self.planes:
            n, dist = plane(t_ns)
            denom = n @ d
            if abs(denom) < 1e-12:
                continue
            t = (dist - n @ o) / denom
            if t > 0:
                best = min(best, t)
        return best


def _room(lo, hi):
    """Six inward-facing quads of the box [lo, hi]; returns their plane functions."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    centre, half = (lo + hi) / 2, (hi - lo) / 2
    planes = []
    for axis in range(3):
        for side, bound in ((-1, lo), (1, hi)):
            n_in = np.zeros(3)
            n_in[axis] = -side                      # normal pointing into the room
            c = centre.copy()
            c[axis] = bound[axis]
            extent = max(half) * 2.5
            quad = common.add_quad(f"wall_{'xyz'[axis]}{'-+'[side > 0]}", extent, extent,
                                   common.frame_with_normal(c, n_in))
            common.tag(quad, 0x7000 + 2 * axis + (side > 0), "wall")
            planes.append(lambda t, n=n_in, d=float(n_in @ c): (n, d))
    return planes


def _mount(name, location, yaw_rad=0.0):
    import bpy

    m = common.add_empty(name, location, (0.0, 0.0, yaw_rad))
    bpy.context.view_layer.update()          # matrix_world is stale until the depsgraph is evaluated
    return m


def _pose_of(obj):
    return rigid_part(np.array(obj.matrix_world))


def box_room(steps: int = 256, preset: str = "uniform_32"):
    """Static mount (yawed 20 deg) inside a closed 9 x 6.5 x 3 m room: every beam returns."""
    common.new_scene(4, 4, fps=FPS)
    planes = _room((-4.0, -3.0, 0.0), (5.0, 3.5, 3.0))
    mount = _mount("lidar_mount", (0.3, -0.2, 1.2), np.radians(20.0))
    T = _pose_of(mount)
    return LidarTruth(lambda t: T, planes), common.lidar_rig("lidar_top", mount.name, azimuth_steps=steps, preset=preset)


def moving_wall(steps: int = 256, speed: float = -20.0, x0: float = 12.0, preset: str = "uniform_32"):
    """Static mount at (0, 0, 1); a wall (normal -x) at x = x0 + speed * t: beams facing +x see it approach."""
    common.new_scene(4, 4, fps=FPS)
    # 30 m square: Cycles' hit positions on one huge triangle lose float32 precision (~6e-8 x its size)
    wall = common.add_quad("moving_wall", 15, 15, common.frame_with_normal((x0, 0, 1.0), (-1, 0, 0)))
    common.tag(wall, 0x7101, "wall")
    common.key_locations(wall, [(1, (x0, 0, 1.0)), (2, (x0 + speed / FPS, 0, 1.0))])
    mount = _mount("lidar_mount", (0.0, 0.0, 1.0))
    T = _pose_of(mount)
    n = np.array([-1.0, 0, 0])
    truth = LidarTruth(lambda t: T, [lambda t: (n, float(n @ np.array([x0 + speed * t * 1e-9, 0, 0])))],
                       notes={"x0": x0, "speed": speed})
    return truth, common.lidar_rig("lidar_top", mount.name, azimuth_steps=steps, preset=preset, max_range_m=200.0)


def ego_translating(steps: int = 256, speed: float = 15.0):
    """Mount moving along +x at `speed` inside a 70 m corridor: the origin of every beam moves."""
    common.new_scene(4, 4, fps=FPS)
    planes = _room((-30.0, -5.0, 0.0), (40.0, 5.0, 4.0))
    start = np.array([-5.0, 1.0, 1.8])
    mount = _mount("lidar_mount", tuple(start))
    common.key_locations(mount, [(1, tuple(start)), (2, tuple(start + [speed / FPS, 0, 0]))])

    def pose(t):
        P = np.eye(4)
        P[:3, 3] = start + np.array([speed * t * 1e-9, 0, 0])
        return P
    return LidarTruth(pose, planes, notes={"speed": speed}), common.lidar_rig("lidar_top", mount.name,
                                                                              azimuth_steps=steps)


SCENES = {f.__name__: f for f in (box_room, moving_wall, ego_translating)}
