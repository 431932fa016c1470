"""A production-like street of surfaces whose label needs the surface policy (bpy).

Seed camera (calibration.seed_pose: world (10, 2, 1) looking along +x), 1280x720 / scale, with a LiDAR and a radar on
the camera's position. World metres, z up:
- `road` (z = 0) and a `wall` at x = 30 with three `decal_*` logo planes 0.1 mm in front (Principled Alpha 0.3,
  0.6, 1.0);
- a `tree`: trunk and 48 alpha-cut `leaf_*` cards (Principled Alpha from an elliptical leaf mask, binary) around a
  crown at (20, -3.5, 3.5);
- a glass `shelter` (Glass BSDF panes, opaque roof) with two `person_*` boxes behind its front pane;
- ground `fog`: a volume-only box 0.4 m deep, 1 cm above the road;
- `point_cloud`: points on a sphere made by Geometry Nodes, without a material;
- a hair-covered `hedge` box: 400 upright `hedge_hair` curves (radius 4 mm, 0.3 m) on its top, without a material.
"""
from __future__ import annotations

import math

import bpy
import numpy as np
from mathutils import Euler

from rowbeam.blender.compat import blender_compat
from rowbeam.blender.scenes import calibration, common, surface_scenes

LEAF_CARDS = 48
LEAF_HALF = (0.25, 0.15)        # m: card half extents; the leaf is the inscribed ellipse (alpha 1 inside, 0 out)


def _box(name, size, location, rgb, object_id, tag):
    obj = common.add_box(name, size, location)
    common.add_material(obj, rgb)
    return common.tag(obj, object_id, tag)


def _quad_at(name, half, location, rotation, object_id, tag):
    obj = common.add_quad(name, *half)
    obj.location, obj.rotation_euler = location, Euler(rotation)
    return common.tag(obj, object_id, tag)


def _leaf_material() -> object:
    """Principled BSDF whose Alpha is 1 inside the ellipse inscribed in the card (UV (0.5, 0.5), radii 0.5)."""
    mat = blender_compat.new_material("leaf")
    nodes, links = mat.node_tree.nodes, mat.node_tree.links
    bsdf = next(n for n in nodes if n.bl_idname == "ShaderNodeBsdfPrincipled")
    bsdf.inputs["Base Color"].default_value = (0.1, 0.45, 0.08, 1.0)
    coords = nodes.new("ShaderNodeTexCoord")
    centre = nodes.new("ShaderNodeVectorMath")
    centre.operation = "SUBTRACT"
    centre.inputs[1].default_value = (0.5, 0.5, 0.0)
    length = nodes.new("ShaderNodeVectorMath")
    length.operation = "LENGTH"
    inside = nodes.new("ShaderNodeMath")
    inside.operation = "LESS_THAN"
    inside.inputs[1].default_value = 0.5
    links.new(coords.outputs["UV"], centre.inputs[0])
    links.new(centre.outputs["Vector"], length.inputs[0])
    links.new(length.outputs["Value"], inside.inputs[0])
    links.new(inside.outputs["Value"], bsdf.inputs["Alpha"])
    return mat


def _uv_unit(obj) -> None:
    """UV (0,0)..(1,1) over a common.add_quad card (vertex order: -x-y, +x-y, +x+y, -x+y)."""
    uv = obj.data.uv_layers.new(name="UVMap")
    for loop, (u, v) in zip(obj.data.loops, ((0, 0), (1, 0), (1, 1), (0, 1)), strict=True):
        uv.data[loop.index].uv = (u, v)


def _tree(rng) -> None:
    _box("tree_trunk", (0.4, 0.4, 3.0), (20.0, -3.5, 1.5), (0.3, 0.2, 0.1), 0x8101, "tree")
    mat = _leaf_material()
    for i in range(LEAF_CARDS):
        d = rng.normal(size=3)
        p = np.array([20.0, -3.5, 3.5]) + 1.2 * d / np.linalg.norm(d) * rng.uniform(0.4, 1.0)
        card = _quad_at(f"leaf_{i:02d}", LEAF_HALF, tuple(p), tuple(rng.uniform(0, math.pi, 3)), 0x8200 + i,
                        "vegetation")
        _uv_unit(card)
        card.data.materials.append(mat)


def _glass_material():
    mat = blender_compat.new_material("shelter_glass")
    out = next(n for n in mat.node_tree.nodes if n.bl_idname == "ShaderNodeOutputMaterial")
    glass = mat.node_tree.nodes.new("ShaderNodeBsdfGlass")
    mat.node_tree.links.new(glass.outputs["BSDF"], out.inputs["Surface"])
    return mat


def _shelter() -> None:
    glass = _glass_material()
    panes = {"front": ((1.5, 1.1), (16.0, 4.0, 1.2), (0, math.pi / 2, 0)),
             "side": ((0.75, 1.1), (16.75, 2.5, 1.2), (math.pi / 2, 0, 0))}
    for k, (name, (half, loc, rot)) in enumerate(panes.items()):
        pane = _quad_at(f"shelter_{name}", half, loc, rot, 0x8301 + k, "building")
        pane.data.materials.append(glass)
    _box("shelter_roof", (1.6, 3.2, 0.1), (16.75, 4.0, 2.35), (0.2, 0.2, 0.25), 0x8303, "building")
    _box("person_a", (0.3, 0.5, 1.75), (16.8, 3.4, 0.875), (0.6, 0.3, 0.2), 0x8401, "person")
    _box("person_b", (0.3, 0.5, 1.6), (17.1, 4.6, 0.8), (0.2, 0.3, 0.6), 0x8402, "person")


def _decals() -> None:
    for k, alpha in enumerate((0.3, 0.6, 1.0)):
        decal = _quad_at(f"decal_{k}", (0.8, 0.5), (30.0 - 1e-4, 1.5 - 2.0 * k, 2.0), (0, -math.pi / 2, 0),
                         0x8501 + k, "sign")
        mat = common.add_material(decal, (0.9, 0.8 * k / 2, 0.1))
        next(n for n in mat.node_tree.nodes if n.bl_idname == "ShaderNodeBsdfPrincipled").inputs["Alpha"] \
            .default_value = alpha


def _fog() -> None:
    fog = common.add_box("fog", (14.0, 14.0, 0.4), (22.0, 0.0, 0.21))    # 1 cm above the road: no coplanar faces
    common.tag(fog, 0x8601, None)
    surface_scenes._volume_only(fog, density=0.8)


def _point_cloud() -> None:
    obj = bpy.data.objects.new("point_cloud", bpy.data.meshes.new("point_cloud"))
    bpy.context.scene.collection.objects.link(obj)
    obj.location = (26.0, 1.0, 1.5)
    common.tag(obj, 0x8701, "sign")
    tree = bpy.data.node_groups.new("point_cloud", "GeometryNodeTree")
    tree.interface.new_socket("Geometry", in_out="OUTPUT", socket_type="NodeSocketGeometry")
    sphere = tree.nodes.new("GeometryNodeMeshUVSphere")
    sphere.inputs["Radius"].default_value = 0.8
    points = tree.nodes.new("GeometryNodeMeshToPoints")
    points.inputs["Radius"].default_value = 0.05
    tree.links.new(sphere.outputs["Mesh"], points.inputs["Mesh"])
    tree.links.new(points.outputs["Points"], tree.nodes.new("NodeGroupOutput").inputs[0])
    obj.modifiers.new("points", "NODES").node_group = tree


def _hedge(rng) -> None:
    _box("hedge", (1.2, 0.8, 0.6), (18.0, -0.5, 0.3), (0.15, 0.3, 0.1), 0x8801, "vegetation")
    n = 400
    base = np.column_stack([rng.uniform(-0.6, 0.6, n), rng.uniform(-0.4, 0.4, n), np.zeros(n)])
    tips = base + np.column_stack([rng.normal(0, 0.05, (n, 2)), np.full(n, 0.3)])
    curves = bpy.data.hair_curves.new("hedge_hair")
    curves.add_curves([2] * n)
    curves.position_data.foreach_set("vector", np.stack([base, tips], 1).astype(np.float32).ravel())
    radius = curves.attributes.get("radius") or curves.attributes.new("radius", "FLOAT", "POINT")
    radius.data.foreach_set("value", np.full(2 * n, 0.004, np.float32))
    obj = bpy.data.objects.new("hedge_hair", curves)
    bpy.context.scene.collection.objects.link(obj)
    obj.location = (18.0, -0.5, 0.6)
    common.tag(obj, 0x8802, "vegetation")


def street(scale: int = 4, seed: int = 7, policy: dict | None = None) -> dict:
    """Build the street; return its rig (camera with object labels, LiDAR, radar; each with `policy`)."""
    _, cam, T, K, size = calibration._base(scale)
    road = common.add_quad("road", 40.0, 20.0)
    road.location = (25.0, 0.0, 0.0)
    common.add_material(road, (0.25, 0.25, 0.25))
    common.tag(road, 0x8001, "road")
    wall = _quad_at("wall", (2.0, 12.0), (30.0, 0.0, 2.0), (0, -math.pi / 2, 0), 0x8002, "building")
    common.add_material(wall, (0.7, 0.65, 0.6))
    _decals()
    _tree(np.random.default_rng(seed))
    _shelter()
    _fog()
    _point_cloud()
    _hedge(np.random.default_rng(seed + 1))
    sun = bpy.data.objects.new("sun", bpy.data.lights.new("sun", "SUN"))
    bpy.context.scene.collection.objects.link(sun)
    sun.data.energy, sun.rotation_euler = 3.0, (0.3, -0.9, 0.4)
    common.add_empty("sensor_mount", calibration.SEED_POSITION)
    rig = surface_scenes.rig(cam.name, policy)
    rig["sensors"][0]["object_labels"] = True
    return rig
