"""Closed-form scene of surfaces whose "first surface" needs a policy (bpy).

Seed camera (calibration.seed_pose, K of calibration.seed_K at 1/scale) in front of a wall at camera z = 8 m.
Four fronto-parallel objects, each in its own quarter of the image (camera-frame centres, metres):
- `decal`: a Principled BSDF quad with Alpha 0.3 at (-2, -1, 5), half size 0.6125 (49 x 49 px);
- `fog_cube`: a volume-only cube (Principled Volume, no surface) centred at (2, -1, 5), edge 1.2;
- `leaf_card`: an alpha-cut card at (-1.6, 0.88, 4), half size R = 0.7, alpha = max(0, 1 - r / R) with r the
  distance from the card centre in the card plane: at threshold t the opaque part is the disc r <= R (1 - t);
- `glass_pane`: a Glass BSDF quad at (1.2, 0.66, 3), half size 0.5;
- `gn_grid`: a 1 m grid made by a Geometry Nodes modifier without any material, centred at (0.03, 0.025, 6);
- `hair`: a Curves object without a material, 16 straight hairs of radius 1 cm along camera y in the plane z = 5,
  within the square of half size 0.3 m centred at (0, 1.0, 5).
`alpha_layers` builds a second scene: two partially transparent quads at 4 m and 6 m before the wall (LAYERED).
"""
from __future__ import annotations

import bpy
import numpy as np
from mathutils import Matrix

from rowbeam.blender.compat import blender_compat
from rowbeam.blender.scenes import calibration, common

WALL_Z = 8.0
OBJECTS = {   # name: (object id, camera-frame centre (m), half size (m))
    "wall": (0x7001, (0.0, 0.0, WALL_Z), 30.0),
    "decal": (0x7002, (-2.0, -1.0, 5.0), 0.6125),      # edges half-way between pixel centres
    "fog_cube": (0x7003, (2.0, -1.0, 5.0), 0.6),
    "leaf_card": (0x7004, (-1.6, 0.88, 4.0), 0.7),
    "glass_pane": (0x7005, (1.2, 0.66, 3.0), 0.5),
    "gn_grid": (0x7006, (0.03, 0.025, 6.0), 0.5),     # off the optical axis: no beam meets a vertex exactly
    "hair": (0x7007, (0.0, 1.0, 5.0), 0.3),
}
HAIR_RADIUS = 0.01
DECAL_ALPHA = 0.3


def _quad(T, name):
    object_id, centre, half = OBJECTS[name]
    quad = common.add_quad(name, half, half, calibration._plane_facing(T, centre, (0, 0, -1.0)))
    return common.tag(quad, object_id, name)


def _principled(obj, rgb, alpha=1.0):
    mat = common.add_material(obj, rgb)
    bsdf = next(n for n in mat.node_tree.nodes if n.bl_idname == "ShaderNodeBsdfPrincipled")
    bsdf.inputs["Alpha"].default_value = alpha
    return mat, bsdf


def _leaf_alpha(mat, bsdf, radius: float) -> None:
    """Alpha = max(0, 1 - sqrt(x^2 + y^2) / radius) of the object-space point (the card's own plane)."""
    nodes, links = mat.node_tree.nodes, mat.node_tree.links
    coords = nodes.new("ShaderNodeTexCoord")
    length = nodes.new("ShaderNodeVectorMath")
    length.operation = "LENGTH"
    scale = nodes.new("ShaderNodeMath")
    scale.operation, scale.use_clamp = "MULTIPLY_ADD", True
    scale.inputs[1].default_value, scale.inputs[2].default_value = -1.0 / radius, 1.0
    links.new(coords.outputs["Object"], length.inputs[0])
    links.new(length.outputs["Value"], scale.inputs[0])
    links.new(scale.outputs["Value"], bsdf.inputs["Alpha"])


def _volume_only(obj, density: float = 5.0) -> None:
    mat = blender_compat.new_material(f"{obj.name}_volume")
    nodes = mat.node_tree.nodes
    for n in list(nodes):
        if n.bl_idname != "ShaderNodeOutputMaterial":
            nodes.remove(n)
    out = next(n for n in nodes if n.bl_idname == "ShaderNodeOutputMaterial")
    vol = nodes.new("ShaderNodeVolumePrincipled")
    vol.inputs["Density"].default_value = density
    mat.node_tree.links.new(vol.outputs["Volume"], out.inputs["Volume"])
    obj.data.materials.append(mat)


def _glass(obj, ior: float = 1.45) -> None:
    mat = blender_compat.new_material(f"{obj.name}_glass")
    nodes = mat.node_tree.nodes
    out = next(n for n in nodes if n.bl_idname == "ShaderNodeOutputMaterial")
    glass = nodes.new("ShaderNodeBsdfGlass")
    glass.inputs["IOR"].default_value = ior
    glass.inputs["Roughness"].default_value = 0.0
    mat.node_tree.links.new(glass.outputs["BSDF"], out.inputs["Surface"])
    obj.data.materials.append(mat)


def _node_grid(T) -> None:
    """An object whose only geometry is a Geometry Nodes Grid (no Set Material: it renders without a material)."""
    object_id, centre, half = OBJECTS["gn_grid"]
    obj = bpy.data.objects.new("gn_grid", bpy.data.meshes.new("gn_grid"))
    bpy.context.scene.collection.objects.link(obj)
    obj.matrix_world = Matrix(calibration._plane_facing(T, centre, (0, 0, -1.0)).tolist())
    common.tag(obj, object_id, "gn_grid")
    tree = bpy.data.node_groups.new("gn_grid", "GeometryNodeTree")
    tree.interface.new_socket("Geometry", in_out="OUTPUT", socket_type="NodeSocketGeometry")
    grid = tree.nodes.new("GeometryNodeMeshGrid")
    grid.inputs["Size X"].default_value = grid.inputs["Size Y"].default_value = 2 * half
    tree.links.new(grid.outputs["Mesh"], tree.nodes.new("NodeGroupOutput").inputs[0])
    obj.modifiers.new("grid", "NODES").node_group = tree


def _hair(T, count: int = 16) -> None:
    """Straight hairs (Curves data, two points each) along the object's x, spread evenly over its y."""
    object_id, centre, half = OBJECTS["hair"]
    curves = bpy.data.hair_curves.new("hair")
    curves.add_curves([2] * count)
    ys = np.linspace(-half, half, count)
    pos = np.array([[(-half, y, 0.0), (half, y, 0.0)] for y in ys], np.float32)
    curves.position_data.foreach_set("vector", pos.ravel())
    radius = curves.attributes.get("radius") or curves.attributes.new("radius", "FLOAT", "POINT")
    radius.data.foreach_set("value", np.full(2 * count, HAIR_RADIUS, np.float32))
    obj = bpy.data.objects.new("hair", curves)
    bpy.context.scene.collection.objects.link(obj)
    obj.matrix_world = Matrix(calibration._plane_facing(T, centre, (0, 0, -1.0)).tolist())
    common.tag(obj, object_id, "hair")


def surfaces(scale: int = 4):
    """Build the scene; return (truth, rig). truth.notes holds OBJECTS and the leaf card's radius."""
    _, cam, T, K, size = calibration._base(scale)
    _principled(_quad(T, "wall"), (0.6, 0.6, 0.6))
    _principled(_quad(T, "decal"), (0.9, 0.1, 0.1), DECAL_ALPHA)
    mat, bsdf = _principled(_quad(T, "leaf_card"), (0.1, 0.6, 0.1))
    _leaf_alpha(mat, bsdf, OBJECTS["leaf_card"][2])
    _glass(_quad(T, "glass_pane"))
    _node_grid(T)
    _hair(T)
    _, centre, half = OBJECTS["fog_cube"]
    cube = common.add_box("fog_cube", (2 * half,) * 3, (0, 0, 0))
    cube.matrix_world = Matrix(calibration._plane_facing(T, centre, (0, 0, -1.0)).tolist())
    common.tag(cube, OBJECTS["fog_cube"][0], "fog_cube")
    _volume_only(cube)
    light = bpy.data.objects.new("sun", bpy.data.lights.new("sun", "SUN"))
    bpy.context.scene.collection.objects.link(light)
    light.data.energy = 3.0
    light.rotation_euler = (0.0, -1.2, 0.3)         # light travels mostly along world +x, onto the wall
    common.add_empty("sensor_mount", calibration.SEED_POSITION)      # LiDAR / radar frame: x forward (world +x), z up
    truth = calibration.Truth(K, size, lambda t: T, [
        ("wall", calibration._static_plane(T, (0, 0, WALL_Z), (0, 0, -1.0)))],
        notes={"objects": OBJECTS, "decal_alpha": DECAL_ALPHA})
    return truth, rig(cam.name)


LAYERED = {   # name: (object id, camera-frame centre (m), half size (m), alpha); edges half-way between pixel centres
    "wall": (0x7101, (0.0, 0.0, WALL_Z), 30.0, 1.0),
    "near_veil": (0x7102, (-0.5, 0.0, 4.0), 0.51, 0.3),        # at scale 4: columns 110..160, rows 65..115
    "far_veil": (0x7103, (0.6, 0.0, 6.0), 0.915, 0.4),         # columns 150..210, rows 60..120
}


def alpha_layers(scale: int = 4):
    """Two partially transparent Principled quads in front of the wall (LAYERED): where both cover a pixel its
    surface-layer stack is (near 4 m 0.3, far 6 m 0.4, wall 8 m 1). Returns (truth, rig) like `surfaces`."""
    _, cam, T, K, size = calibration._base(scale)
    for name, (object_id, centre, half, alpha) in LAYERED.items():
        quad = common.tag(common.add_quad(name, half, half, calibration._plane_facing(T, centre, (0, 0, -1.0))),
                          object_id, name)
        _principled(quad, (0.6, 0.6, 0.6) if alpha == 1.0 else (0.8, 0.2, 0.1), alpha)
    light = bpy.data.objects.new("sun", bpy.data.lights.new("sun", "SUN"))
    bpy.context.scene.collection.objects.link(light)
    truth = calibration.Truth(K, size, lambda t: T, [
        ("wall", calibration._static_plane(T, (0, 0, WALL_Z), (0, 0, -1.0)))], notes={"objects": LAYERED})
    return truth, common.camera_rig("camera_front", cam.name, rgb_samples=4)


def rig(camera_name: str = "camera_front", policy: dict | None = None, rgb_samples: int = 16) -> dict:
    """Camera, LiDAR (31 channels, -15..15 deg) and radar on the seed camera's position, each with `policy`
    (a rig `surface_policy` object; None: the default)."""
    doc = common.camera_rig("camera_front", camera_name, rgb_samples=rgb_samples)
    doc["sensors"].append(common.lidar_rig("lidar_top", "sensor_mount", azimuth_steps=360,
                                           elevations_deg=[float(e) for e in range(-15, 16)],
                                           verify_firings=4)["sensors"][0])
    doc["sensors"].append({"id": "radar_front", "type": "radar", "object": "sensor_mount", "rate_hz": 20,
                           "first_frame_ns": 0, "chirps": 4, "chirp_period_ns": 500_000,
                           "azimuth_fov_deg": [-40.0, 40.0], "elevation_fov_deg": [-15.0, 15.0],
                           "azimuth_beams": 32, "elevation_beams": 12, "min_range_m": 0.5, "max_range_m": 200.0,
                           "max_radial_velocity_mps": 80.0, "verify_chirps": 2})
    if policy is not None:
        for sensor in doc["sensors"]:
            sensor["surface_policy"] = dict(policy)
    return doc


def card_mask(K, centre, radius: float, threshold: float, size) -> np.ndarray:
    """(H, W) bool: pixel-centre rays that hit the fronto-parallel leaf card where its alpha >= threshold.

    The card lies at camera z = centre[2]; the ray of pixel (u, v) meets it at x = z (u - cx) / f.
    """
    W, H = size
    u, v = np.meshgrid(np.arange(W, dtype=np.float64), np.arange(H, dtype=np.float64))
    z = centre[2]
    x = z * (u - K[0, 2]) / K[0, 0] - centre[0]
    y = z * (v - K[1, 2]) / K[1, 1] - centre[1]
    inside = (np.abs(x) <= radius) & (np.abs(y) <= radius)
    alpha = np.clip(1.0 - np.hypot(x, y) / radius, 0.0, 1.0)
    return inside & (alpha >= threshold)


def square_mask(K, centre, half: float, size) -> np.ndarray:
    """(H, W) bool: pixel-centre rays inside a fronto-parallel square of half size `half` at `centre`."""
    return card_mask(K, centre, half, 0.0, size)
