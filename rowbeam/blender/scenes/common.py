"""Scene-building helpers: cameras from K, primitives with ids and classes, linear motion (bpy)."""
from __future__ import annotations

import json
from pathlib import Path

import bpy
import numpy as np
from mathutils import Matrix

from rowbeam.model.frames import T_BLENDER_CAMERA_OPENCV
from rowbeam.blender.compat import blender_compat
from rowbeam.blender.objects.object_table import CLASS_PROPERTY, ID_PROPERTY, format_object_id

SENSOR_WIDTH_MM = 36.0


def new_scene(width: int, height: int, fps: int = 30, frame_start: int = 1, frame_end: int = 30):
    """Empty factory scene rendering with Cycles on the CPU."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    scene.cycles.device = "CPU"
    scene.render.resolution_x, scene.render.resolution_y = width, height
    scene.render.resolution_percentage = 100
    scene.render.fps, scene.render.fps_base = fps, 1.0
    scene.frame_start, scene.frame_end = frame_start, frame_end
    scene.cycles.samples = 16
    bpy.context.preferences.edit.keyframe_new_interpolation_type = "LINEAR"
    world = bpy.data.worlds.new("world")
    world.color = (0.05, 0.05, 0.08)
    scene.world = world
    return scene


def blender_matrix_from_opencv_pose(T_world_camera) -> Matrix:
    """matrix_world of a Blender camera whose OpenCV optical pose is T_world_camera."""
    return Matrix((np.asarray(T_world_camera, dtype=np.float64) @ T_BLENDER_CAMERA_OPENCV).tolist())


def look_along(position, forward, down) -> np.ndarray:
    """T_world_camera (OpenCV optical) at `position` with z along `forward` and y along `down`."""
    z = np.asarray(forward, float) / np.linalg.norm(forward)
    y = np.asarray(down, float) - np.dot(down, z) * z
    y /= np.linalg.norm(y)
    x = np.cross(y, z)
    T = np.eye(4)
    T[:3, 0], T[:3, 1], T[:3, 2], T[:3, 3] = x, y, z, position
    return T


def add_camera(name: str, T_world_camera, f_px: float, cx: float, cy: float, width: int, height: int):
    """Perspective camera with square pixels whose K is [[f,0,cx],[0,f,cy],[0,0,1]] at width x height."""
    data = bpy.data.cameras.new(name)
    data.sensor_fit = "HORIZONTAL"
    data.sensor_width = SENSOR_WIDTH_MM
    data.lens = f_px * SENSOR_WIDTH_MM / width
    data.shift_x = (width / 2.0 - 0.5 - cx) / width
    data.shift_y = (cy - height / 2.0 + 0.5) / width
    data.clip_start, data.clip_end = 0.05, 1000.0
    obj = bpy.data.objects.new(name, data)
    bpy.context.scene.collection.objects.link(obj)
    obj.matrix_world = blender_matrix_from_opencv_pose(T_world_camera)
    bpy.context.scene.camera = obj
    return obj


def tag(obj, object_id: int, class_tag: str | None):
    obj[ID_PROPERTY] = format_object_id(object_id)
    if class_tag:
        obj[CLASS_PROPERTY] = class_tag
    return obj


def _mesh_object(name: str, verts, faces, matrix=None):
    mesh = bpy.data.meshes.new(name)
    mesh.from_pydata([tuple(v) for v in verts], [], [tuple(f) for f in faces])
    mesh.update()
    obj = bpy.data.objects.new(name, mesh)
    bpy.context.scene.collection.objects.link(obj)
    if matrix is not None:
        obj.matrix_world = Matrix(np.asarray(matrix, dtype=np.float64).tolist())
    return obj


def add_quad(name: str, half_x: float, half_y: float, matrix=None):
    """Flat rectangle in its local xy plane, normal +z (counter-clockwise winding)."""
    verts = [(-half_x, -half_y, 0), (half_x, -half_y, 0), (half_x, half_y, 0), (-half_x, half_y, 0)]
    return _mesh_object(name, verts, [(0, 1, 2, 3)], matrix)


def add_box(name: str, size, location, rotation_z: float = 0.0):
    """Axis-aligned box (size = (x, y, z) metres) with outward normals, resting on its centre."""
    sx, sy, sz = (s / 2.0 for s in size)
    verts = [(x, y, z) for z in (-sz, sz) for y in (-sy, sy) for x in (-sx, sx)]
    faces = [(0, 2, 3, 1), (4, 5, 7, 6), (0, 1, 5, 4), (2, 6, 7, 3), (0, 4, 6, 2), (1, 3, 7, 5)]
    obj = _mesh_object(name, verts, faces)
    obj.location = location
    obj.rotation_euler = (0.0, 0.0, rotation_z)
    return obj


def add_material(obj, rgb, name=None):
    mat = blender_compat.new_material(name or f"{obj.name}_mat")
    bsdf = next(n for n in mat.node_tree.nodes if n.bl_idname == "ShaderNodeBsdfPrincipled")
    bsdf.inputs["Base Color"].default_value = (*rgb, 1.0)
    obj.data.materials.append(mat)
    return mat


def key_locations(obj, frames_and_locations) -> None:
    """Linear location keys (linear extrapolation) at the given frames."""
    for frame, loc in frames_and_locations:
        obj.location = loc
        obj.keyframe_insert("location", frame=frame)
    _linear_extrapolation(obj)


def key_rotations(obj, frames_and_eulers) -> None:
    for frame, rot in frames_and_eulers:
        obj.rotation_euler = rot
        obj.keyframe_insert("rotation_euler", frame=frame)
    _linear_extrapolation(obj)


def _linear_extrapolation(obj) -> None:
    for fc in blender_compat.fcurves(obj):
        fc.extrapolation = "LINEAR"
        for kp in fc.keyframe_points:
            kp.interpolation = "LINEAR"


def save(path, rig: dict | None = None) -> Path:
    """Save the .blend (and its rig JSON beside it as <name>.rig.json)."""
    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    bpy.ops.wm.save_as_mainfile(filepath=str(path), compress=False)
    if rig is not None:
        path.with_suffix(".rig.json").write_text(json.dumps(rig, indent=1) + "\n")
    return path


def camera_rig(sensor_id: str, camera_name: str, **overrides) -> dict:
    sensor = {"id": sensor_id, "type": "rolling_shutter_camera", "object": camera_name, "rate_hz": 30,
              "first_event_ns": 0, "readout_ns": 12_000_000, "exposure_ns": 4_000_000,
              "readout_direction": "top_to_bottom"}
    sensor.update(overrides)
    return {"schema": "rowbeam/rig@1", "sensors": [sensor]}


def frame_with_normal(centre, normal) -> np.ndarray:
    """4x4 placing a local xy quad at `centre` with its +z normal along `normal` (world)."""
    z = np.asarray(normal, float) / np.linalg.norm(normal)
    helper = np.array([1.0, 0, 0]) if abs(z[0]) < 0.9 else np.array([0, 1.0, 0])
    x = np.cross(helper, z)
    x /= np.linalg.norm(x)
    M = np.eye(4)
    M[:3, :3] = np.stack([x, np.cross(z, x), z], 1)
    M[:3, 3] = centre
    return M


def instance_on_points(obj, proto, name: str = "scatter") -> None:
    """Geometry nodes on mesh object `obj` (modifier and node group `name`): `proto`'s geometry instanced on every
    vertex of `obj` (Mesh to Points, Instance on Points, Object Info)."""
    tree = bpy.data.node_groups.new(name, "GeometryNodeTree")
    tree.interface.new_socket("Geometry", in_out="INPUT", socket_type="NodeSocketGeometry")
    tree.interface.new_socket("Geometry", in_out="OUTPUT", socket_type="NodeSocketGeometry")
    n = tree.nodes
    gin, gout = n.new("NodeGroupInput"), n.new("NodeGroupOutput")
    m2p, iop, info = n.new("GeometryNodeMeshToPoints"), n.new("GeometryNodeInstanceOnPoints"), \
        n.new("GeometryNodeObjectInfo")
    info.inputs["Object"].default_value = proto
    tree.links.new(gin.outputs[0], m2p.inputs["Mesh"])
    tree.links.new(m2p.outputs[0], iop.inputs["Points"])
    tree.links.new(info.outputs["Geometry"], iop.inputs["Instance"])
    tree.links.new(iop.outputs[0], gout.inputs[0])
    obj.modifiers.new(name, "NODES").node_group = tree


def add_empty(name: str, location=(0, 0, 0), rotation=(0, 0, 0)):
    obj = bpy.data.objects.new(name, None)
    bpy.context.scene.collection.objects.link(obj)
    obj.location, obj.rotation_euler = location, rotation
    return obj


def lidar_rig(sensor_id: str, mount_name: str, **fields) -> dict:
    sensor = {"id": sensor_id, "type": "spinning_lidar", "object": mount_name, "rotation_hz": 10,
              "azimuth_steps": 512, "preset": "uniform_32", "first_sweep_ns": 0, "min_range_m": 0.3,
              "max_range_m": 120.0}
    sensor.update(fields)
    if "elevations_deg" in fields:
        sensor.pop("preset")
    return {"schema": "rowbeam/rig@1", "sensors": [sensor]}
