"""Radar calibration scenes with closed-form range and radial velocity (bpy).

Each builder returns a `RadarTruth` and a rig. `truth.expected(t_ns, d_radar)` gives (range m, radial velocity m/s,
positive = receding) of the beam with unit direction d_radar (radar frame) at scene time t_ns, from the scene's
analytic motion (not from Blender): rays against planes moving rigidly, and the sensor's own velocity.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rowbeam.blender.scenes import common

FPS = 30


@dataclass
class RadarTruth:
    pose: callable                         # t_ns -> T_world_radar (4x4)
    velocity: callable                     # t_ns -> radar origin velocity (world, m/s)
    surfaces: list                         # [t_ns -> (n_world unit, d, point_velocity(P) -> v, inside(P) -> bool)]
    notes: dict = field(default_factory=dict)

    def expected(self, t_ns: float, d_radar) -> tuple[float, float]:
        """(range, radial velocity) of the nearest surface hit along the beam at t_ns; (inf, nan) on a miss."""
        T = self.pose(t_ns)
        o, d = T[:3, 3], T[:3, :3] @ np.asarray(d_radar, dtype=np.float64)
        best, v_r = np.inf, np.nan
        for surface in self.surfaces:
            n, dist, velocity, inside = surface(t_ns)
            denom = n @ d
            if abs(denom) < 1e-12:
                continue
            s = (dist - n @ o) / denom
            P = o + s * d
            if 0 < s < best and inside(P):
                best, v_r = s, float((velocity(P) - self.velocity(t_ns)) @ d)
        return best, v_r


def _mount(name, location, yaw_rad=0.0):
    import bpy

    m = common.add_empty(name, location, (0.0, 0.0, yaw_rad))
    bpy.context.view_layer.update()
    return m


def radar_rig(sensor_id: str, mount_name: str, ego: str | None = None, **fields) -> dict:
    """One radar (16 chirps x 32 beams at 20 Hz) and a 200 Hz state log with `ego` (default: the mount) as ego body."""
    sensor = {"id": sensor_id, "type": "radar", "object": mount_name, "rate_hz": 20, "first_frame_ns": 0,
              "chirps": 16, "chirp_period_ns": 500_000, "azimuth_fov_deg": [-40.0, 40.0],
              "elevation_fov_deg": [-6.0, 6.0], "azimuth_beams": 16, "elevation_beams": 2,
              "min_range_m": 0.5, "max_range_m": 200.0, "max_radial_velocity_mps": 80.0}
    sensor.update(fields)
    return {"schema": "rowbeam/rig@1", "sensors": [sensor], "state_log": {"ego_object": ego or mount_name}}


def _static(T):
    return lambda t: T


def _still(t):
    return np.zeros(3)


def wall_approaching(speed: float = 12.0, x0: float = 15.0, **rig_fields):
    """Static radar at (0, 0, 1) facing +x; a 40 m wall (normal -x) at x = x0 - speed*t approaches:
    v_r = -speed * cos(angle between the beam and +x) = -speed * cos(el) cos(az)."""
    common.new_scene(4, 4, fps=FPS)
    wall = common.add_quad("wall", 20, 20, common.frame_with_normal((x0, 0, 1.0), (-1, 0, 0)))
    common.tag(wall, 0x7201, "wall")
    common.key_locations(wall, [(1, (x0, 0, 1.0)), (2, (x0 - speed / FPS, 0, 1.0))])
    mount = _mount("radar_mount", (0.0, 0.0, 1.0))
    T = common_pose(mount)
    n, v = np.array([-1.0, 0, 0]), np.array([-speed, 0.0, 0.0])
    surface = lambda t: (n, float(-(x0 - speed * t * 1e-9)), lambda P: v, lambda P: True)  # noqa: E731
    return RadarTruth(_static(T), _still, [surface], notes={"speed": speed, "x0": x0}), radar_rig("radar_front",
                                                                                                 mount.name, **rig_fields)


def _disc_mesh(name: str, radius: float, segments: int = 96):
    verts = [(radius * math.cos(2 * math.pi * i / segments), radius * math.sin(2 * math.pi * i / segments), 0.0)
             for i in range(segments)]
    return common._mesh_object(name, verts, [tuple(range(segments))])


def spinning_disc(omega: float = 2 * math.pi, centre=(8.0, 2.0, 1.0), radius: float = 3.0, **rig_fields):
    """Static radar at (0, 0, 1) facing +x; a disc of `radius` in the plane x = 8 (facing the radar), centred off the
    line of sight at (8, 2, 1), spinning in its own plane about +x at `omega` rad/s. Range is constant over time;
    radial velocity varies across the disc: v_r = (omega e_x x (P - c)) . d."""
    import bpy

    common.new_scene(4, 4, fps=FPS)
    disc = _disc_mesh("disc", radius)
    common.tag(disc, 0x7202, "wall")
    c = np.array(centre, float)
    disc.location = tuple(c)
    disc.rotation_mode = "ZYX"            # R = Rx(spin) Ry(-90 deg): local z (the normal) along -x, then spin about x
    base = (0.0, -math.pi / 2, 0.0)
    disc.rotation_euler = base
    bpy.context.view_layer.update()
    common.key_rotations(disc, [(1, base), (2, (omega / FPS, -math.pi / 2, 0.0))])
    mount = _mount("radar_mount", (0.0, 0.0, 1.0))
    T = common_pose(mount)
    n, w = np.array([-1.0, 0, 0]), np.array([omega, 0.0, 0.0])

    def surface(t):
        return (n, float(-c[0]), lambda P: np.cross(w, P - c), lambda P: np.linalg.norm(P - c) < radius * 0.995)
    return RadarTruth(_static(T), _still, [surface], notes={"omega": omega, "centre": c, "radius": radius}), \
        radar_rig("radar_front", mount.name, **rig_fields)


def ego_past_poles(speed: float = 10.0, y_poles: float = 4.0, **rig_fields):
    """Radar (child of the ego body, 1 m ahead of it) driving along +x at `speed` (start (-6, 0, 1), facing +x) past
    static 1 m wide x 6 m tall pole faces in the
    plane y = y_poles (normal -y) at x = -2, 2, 6, 10, 14: v_r = -speed * d_x (= -v cos theta)."""
    common.new_scene(4, 4, fps=FPS)
    xs = (-2.0, 2.0, 6.0, 10.0, 14.0)
    for i, x in enumerate(xs):
        # local x = world -z: 6 m tall, 1 m wide
        pole = common.add_quad(f"pole_{i}", 3.0, 0.5, common.frame_with_normal((x, y_poles, 2.0), (0, -1, 0)))
        common.tag(pole, 0x7210 + i, "pole")
    start = np.array([-6.0, 0.0, 1.0])              # the radar; the ego body (its parent) is 1 m behind it
    import bpy

    ego = common.add_empty("ego_body", tuple(start - [1.0, 0, 0]))
    common.key_locations(ego, [(1, tuple(start - [1.0, 0, 0])), (2, tuple(start - [1.0, 0, 0] + [speed / FPS, 0, 0]))])
    mount = common.add_empty("radar_mount", (1.0, 0.0, 0.0))
    mount.parent = ego
    bpy.context.view_layer.update()

    def pose(t):
        P = np.eye(4)
        P[:3, 3] = start + np.array([speed * t * 1e-9, 0, 0])
        return P
    n = np.array([0.0, -1.0, 0.0])

    def on_pole(P):
        return any(abs(P[0] - x) < 0.5 * 0.99 for x in xs) and abs(P[2] - 2.0) < 3.0 * 0.99
    surface = lambda t: (n, -y_poles, lambda P: np.zeros(3), on_pole)  # noqa: E731
    return RadarTruth(pose, lambda t: np.array([speed, 0.0, 0.0]), [surface], notes={"speed": speed}), \
        radar_rig("radar_front", mount.name, ego="ego_body", **{"azimuth_fov_deg": [0.0, 80.0], **rig_fields})


def common_pose(obj) -> np.ndarray:
    from rowbeam.model.frames import rigid_part

    return rigid_part(np.array(obj.matrix_world))


SCENES = {f.__name__: f for f in (wall_approaching, spinning_disc, ego_past_poles)}
