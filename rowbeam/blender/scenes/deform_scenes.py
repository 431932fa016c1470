"""Deforming calibration scene with closed-form material-point motion (bpy).

One static rolling-shutter seed camera (K / `scale`, seed pose) sees, in front of a static backdrop at
camera z = 12:
  * a two-bone bar (skinned to an armature): a flat 4 m x 0.6 m strip at camera z = 8, row y = -1.5,
    x from -1.7 to 2.3; the root bone (x < 0.3) is static, the tip bone (x > 0.3) rotates about the joint
    J = camera (0.3, -1.5, 8) at `omega` rad/s about the camera +z axis (right-handed, in world terms the
    axis R_world_camera e_z). The tip bone's weight w ramps linearly from 0 at x = 0.3 to 1 at x = 0.8 (the
    root's is 1 - w): points with rest x <= 0.3 are static, points with rest x >= 0.8 rotate rigidly, the
    hinge between them blends (linear-blend skinning);
  * a shape-key plate: a 3 m x 2 m plate at camera z = 8 centred at (-3, 1.5) blended linearly in time
    from its basis to a key that stretches local x by 1.5 about local x = 0.3 and shifts local y by 0.2 m:
    local (x0, y0) -> (x0 + k 0.5 (x0 - 0.3), y0 + 0.2 k), k = (t - t_frame1) * FPS (k = 0 at frame 1,
    1 at frame 2, linear beyond); the plate's local axes are the camera's x and y;
  * a topology-changing grid (Build modifier: faces appear over time) at camera z = 8 centred at (3, 1.5):
    its correspondence is undefined.
Times: t = 0 at frame 1; events of the 30 Hz rig start at 0 and 33.3 ms.
"""
from __future__ import annotations

import numpy as np

from rowbeam.blender.scenes import calibration, common

FPS = calibration.FPS
JOINT_CAMERA = np.array([0.3, -1.5, 8.0])
BAR_COLUMNS = (-1.7, -1.2, -0.7, -0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.3, 1.8, 2.3)   # camera x of vertex columns
HINGE = (0.3, 0.8)           # camera x where the tip bone's weight ramps linearly from 0 to 1
BAR_HALF_HEIGHT = 0.3
PLATE_CENTRE_CAMERA = np.array([-3.0, 1.5, 8.0])
PLATE_HALF = (1.5, 1.0)
STRETCH, STRETCH_ABOUT, SHIFT_Y = 0.5, 0.3, 0.2
GRID_CENTRE_CAMERA = np.array([3.0, 1.5, 8.0])


def _triangle_strip(xs, ys):
    """Vertices (x, y, 0) on the grid xs x ys and its triangles (two per cell, counter-clockwise in xy)."""
    verts = [(x, y, 0.0) for y in ys for x in xs]
    n = len(xs)
    tris = []
    for j in range(len(ys) - 1):
        for i in range(n - 1):
            a, b, c, d = j * n + i, j * n + i + 1, (j + 1) * n + i + 1, (j + 1) * n + i
            tris += [(a, b, c), (a, c, d)]
    return verts, tris


def _camera_facing(T, centre_camera) -> np.ndarray:
    """Object matrix whose local x, y are the camera's x, y and whose origin is `centre_camera`; local +z points
    at the camera (faces are seen from their front)."""
    M = np.eye(4)
    M[:3, :3] = np.diag([1.0, -1.0, -1.0])            # x = camera x, y = -camera y, z = -camera z (toward it)
    M[:3, 3] = centre_camera
    return T @ M


def rotation(axis, angle) -> np.ndarray:
    """3x3 right-handed rotation by `angle` rad about unit `axis` (Rodrigues)."""
    a = np.asarray(axis, float) / np.linalg.norm(axis)
    k = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * (k @ k)


def _two_bone_bar(T, omega):
    import bpy

    # mesh in camera-aligned local coordinates (x = camera x, y = -camera y) placed at the camera origin's depth 0
    M = _camera_facing(T, np.zeros(3))
    ys = (-BAR_HALF_HEIGHT, BAR_HALF_HEIGHT)
    verts, tris = _triangle_strip(BAR_COLUMNS, [-(JOINT_CAMERA[1]) + y for y in ys])
    verts = [(x, y, -JOINT_CAMERA[2]) for x, y, _ in verts]      # local z = -camera z
    bar = common._mesh_object("bar", verts, tris, M)
    common.tag(bar, 0x9001, "pedestrian")
    common.add_material(bar, (0.8, 0.3, 0.2))
    arm_data = bpy.data.armatures.new("bar_armature")
    arm = bpy.data.objects.new("bar_armature", arm_data)
    bpy.context.scene.collection.objects.link(arm)
    bpy.context.view_layer.objects.active = arm
    bpy.ops.object.mode_set(mode="EDIT")
    world = lambda x: (T[:3, :3] @ np.array([x, JOINT_CAMERA[1], JOINT_CAMERA[2]]) + T[:3, 3]).tolist()  # noqa: E731
    up = (T[:3, :3] @ np.array([0.0, -1.0, 0.0])).tolist()          # bone roll reference: camera up
    for name, x0, x1, parent in (("root", BAR_COLUMNS[0], JOINT_CAMERA[0], None),
                                 ("tip", JOINT_CAMERA[0], BAR_COLUMNS[-1], "root")):
        b = arm_data.edit_bones.new(name)
        b.head, b.tail = world(x0), world(x1)
        b.align_roll(up)
        if parent:
            b.parent = arm_data.edit_bones[parent]
            b.use_connect = True
    bpy.ops.object.mode_set(mode="OBJECT")
    groups = {n: bar.vertex_groups.new(name=n) for n in ("root", "tip")}
    for i, (x, _, _) in enumerate(verts):
        w = float(np.clip((x - HINGE[0]) / (HINGE[1] - HINGE[0]), 0.0, 1.0))
        for name, weight in (("root", 1.0 - w), ("tip", w)):
            if weight > 0:
                groups[name].add([i], weight, "REPLACE")
    mod = bar.modifiers.new("armature", "ARMATURE")
    mod.object = arm
    axis_world = T[:3, :3] @ np.array([0.0, 0.0, 1.0])
    bone_rest = np.array(arm_data.bones["tip"].matrix_local, dtype=np.float64)[:3, :3]
    axis_bone = bone_rest.T @ axis_world
    pb = arm.pose.bones["tip"]
    pb.rotation_mode = "AXIS_ANGLE"
    for frame in (1, 2):
        pb.rotation_axis_angle = (omega * (frame - 1) / FPS, *axis_bone.tolist())
        pb.keyframe_insert("rotation_axis_angle", frame=frame)
    common._linear_extrapolation(arm)
    return bar, axis_world


def _shape_key_plate(T):
    hx, hy = PLATE_HALF
    verts, tris = _triangle_strip(np.linspace(-hx, hx, 5), np.linspace(-hy, hy, 4))
    plate = common._mesh_object("blend_plate", verts, tris, _camera_facing(T, PLATE_CENTRE_CAMERA))
    common.tag(plate, 0x9002, "target")
    common.add_material(plate, (0.2, 0.6, 0.3))
    plate.shape_key_add(name="basis")
    key = plate.shape_key_add(name="stretched")
    key.slider_min, key.slider_max = -10.0, 10.0
    for i, (x, y, z) in enumerate(verts):
        key.data[i].co = (x + STRETCH * (x - STRETCH_ABOUT), y + SHIFT_Y, z)
    for frame in (1, 2):
        key.value = float(frame - 1)
        key.keyframe_insert("value", frame=frame)
    common._linear_extrapolation(plate.data.shape_keys)
    return plate


def _built_grid(T):
    verts, tris = _triangle_strip(np.linspace(-1.2, 1.2, 9), np.linspace(-0.9, 0.9, 7))
    grid = common._mesh_object("built_grid", verts, tris, _camera_facing(T, GRID_CENTRE_CAMERA))
    common.tag(grid, 0x9003, "target")
    common.add_material(grid, (0.3, 0.3, 0.8))
    mod = grid.modifiers.new("build", "BUILD")
    mod.frame_start, mod.frame_duration = -30.0, 60.0        # half the faces at frame 1, more every frame
    mod.use_random_order = False
    return grid


def deforming_actors(scale: int = 4, omega: float = 3.0):
    """The scene above; returns (truth dict, rig). Truth (world frame, metres, seconds):
    T (T_world_camera), K, omega, joint_world, axis_world, plate_matrix (plate local -> world)."""
    _, cam, T, K, size = calibration._base(scale)
    backdrop = common.add_quad("backdrop", 30, 30, calibration._plane_facing(T, (0, 0, 12.0), (0, 0, -1.0)))
    common.tag(backdrop, 0x9000, "wall")
    bar, axis_world = _two_bone_bar(T, omega)
    plate = _shape_key_plate(T)
    _built_grid(T)
    truth = {"T": T, "K": K, "size": size, "omega": omega, "joint_world": T[:3, :3] @ JOINT_CAMERA + T[:3, 3],
             "axis_world": axis_world, "plate_matrix": np.array(plate.matrix_world, dtype=np.float64)}
    return truth, common.camera_rig("camera_front", cam.name, rgb_samples=0, verify_rows=3)


def plate_local(k: float, rest_xy) -> np.ndarray:
    """Shape-key plate: local (x, y, 0) of the rest point `rest_xy` (..., 2) at blend value k."""
    rest = np.asarray(rest_xy, float)
    x = rest[..., 0] + k * STRETCH * (rest[..., 0] - STRETCH_ABOUT)
    y = rest[..., 1] + k * SHIFT_Y
    return np.stack([x, y, np.zeros_like(x)], -1)


def plate_rest(k: float, local_xy) -> np.ndarray:
    """Inverse of `plate_local`: rest (x0, y0) of the local point (..., 2) seen at blend value k."""
    p = np.asarray(local_xy, float)
    x0 = (p[..., 0] + k * STRETCH * STRETCH_ABOUT) / (1 + k * STRETCH)
    return np.stack([x0, p[..., 1] - k * SHIFT_Y], -1)
