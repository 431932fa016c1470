"""Big scenes for the bench and the scale tests (bpy): a geometry-nodes scatter of 10^4 instances and a
heightfield of 10^6 faces, in front of the seed camera (calibration.seed_pose) at 1/`scale` of 1280 x 720.

instance_scatter(count): `count` points on a grid in the camera frame, instanced by geometry nodes with a 0.4 m box
`crate` (hidden; class vehicle): half of them in front of the camera (z 15 .. 60 m, inside the field of view), the
other half behind it (never visible; they must cost no per-instance payload). A ground plane (road) at z 80.
big_mesh(faces): one heightfield mesh `terrain` of `faces` quads (a square grid, 10^6 faces = 1000 x 1000) facing
the camera at z 30 +- 2 m, spanning the field of view, built with foreach_set (no Python loop per face).
"""
from __future__ import annotations

import math

import numpy as np

from rowbeam.blender.scenes import calibration, common

CRATE_M = 0.4


def _base(scale: int):
    f, cx, cy, W, H = calibration.seed_K(scale)
    common.new_scene(W, H, fps=calibration.FPS, frame_start=1, frame_end=30)
    T = calibration.seed_pose()
    cam = common.add_camera("camera_front", T, f, cx, cy, W, H)
    return cam, T, np.array([[f, 0, cx], [0, f, cy], [0, 0, 1.0]]), (W, H)


def _grid_points(n: int, K, size, z0: float, z1: float) -> np.ndarray:
    """(n, 3) camera-frame points on a regular (u, v, z) grid inside the image (margin 5 %), depths z0..z1."""
    W, H = size
    side = max(int(math.ceil(n ** (1 / 3))), 1)
    u = np.linspace(0.05 * W, 0.95 * W, side)
    v = np.linspace(0.05 * H, 0.95 * H, side)
    z = np.linspace(z0, z1, side)
    uu, vv, zz = (a.ravel()[:n] for a in np.meshgrid(u, v, z, indexing="ij"))
    return np.stack([(uu - K[0, 2]) * zz / K[0, 0], (vv - K[1, 2]) * zz / K[1, 1], zz], -1)


def _point_mesh(name: str, pts_world: np.ndarray):
    import bpy

    me = bpy.data.meshes.new(name)
    me.vertices.add(len(pts_world))
    me.vertices.foreach_set("co", pts_world.astype(np.float32).ravel())
    me.update()
    obj = bpy.data.objects.new(name, me)
    bpy.context.scene.collection.objects.link(obj)
    return obj


def instance_scatter(count: int = 10_000, scale: int = 4, object_labels: bool = True):
    """The scatter scene (module docstring); returns ({"visible_instances", "hidden_instances", "K", "size"}, rig)."""
    cam, T, K, size = _base(scale)
    ground = common.add_quad("ground", 200, 200, T @ _at(0, 0, 80.0))
    common.tag(ground, 0xBE00, "road")
    crate = common.add_box("crate", (CRATE_M,) * 3, (0, 0, 0))
    crate.hide_render = True
    common.tag(crate, 0xBE01, "vehicle")
    front = _grid_points(count - count // 2, K, size, 15.0, 60.0)
    behind = _grid_points(count // 2, K, size, 15.0, 60.0) * [1, 1, -1]
    pts = np.concatenate([front, behind])
    world = (T[:3, :3] @ pts.T).T + T[:3, 3]
    scatter = _point_mesh("scatter", world)
    common.tag(scatter, 0xBE02, "vehicle")
    common.instance_on_points(scatter, crate)
    rig = common.camera_rig("camera_front", cam.name, rgb_samples=0, verify_rows=2, object_labels=object_labels)
    return {"visible_instances": len(front), "hidden_instances": len(behind), "K": K, "size": size}, rig


def _at(x, y, z) -> np.ndarray:
    M = np.eye(4)
    M[:3, 3] = (x, y, z)
    return M


def big_mesh(faces: int = 1_000_000, scale: int = 4, object_labels: bool = True):
    """The heightfield scene (module docstring); returns ({"faces", "K", "size"}, rig)."""
    import bpy

    cam, T, K, size = _base(scale)
    side = max(int(round(math.sqrt(faces))), 1)
    W, H = size
    half_x, half_y = 0.6 * W / K[0, 0] * 30.0, 0.6 * H / K[1, 1] * 30.0      # 20 % beyond the image at z 30
    x = np.linspace(-half_x, half_x, side + 1)
    y = np.linspace(-half_y, half_y, side + 1)
    xx, yy = np.meshgrid(x, y, indexing="ij")
    zz = 30.0 + 2.0 * np.sin(xx * 0.7) * np.cos(yy * 0.9)
    co = np.stack([xx, yy, zz], -1).reshape(-1, 3)
    i, j = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
    a = (i * (side + 1) + j).ravel()
    quads = np.stack([a, a + side + 1, a + side + 2, a + 1], -1)        # winding: normal toward the camera (-z)
    me = bpy.data.meshes.new("terrain")
    me.vertices.add(len(co))
    me.vertices.foreach_set("co", co.astype(np.float32).ravel())
    me.loops.add(quads.size)
    me.loops.foreach_set("vertex_index", quads.astype(np.int32).ravel())
    me.polygons.add(len(quads))
    me.polygons.foreach_set("loop_start", (np.arange(len(quads)) * 4).astype(np.int32))
    me.update(calc_edges=True)
    me.validate()
    obj = bpy.data.objects.new("terrain", me)
    bpy.context.scene.collection.objects.link(obj)
    obj.matrix_world = common.Matrix(T.tolist())
    common.tag(obj, 0xBF00, "road")
    rig = common.camera_rig("camera_front", cam.name, rgb_samples=0, verify_rows=2, object_labels=object_labels)
    return {"faces": len(quads), "K": K, "size": size}, rig
