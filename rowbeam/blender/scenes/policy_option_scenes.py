"""Closed-form scene for the surface policy's holdout, backface and node-group options (bpy).

Seed camera (calibration.seed_pose, K of calibration.seed_K at 1/scale) in front of a wall at camera z = 8 m;
fronto-parallel objects, each in its own part of the image (camera-frame centres, metres):
- `holdout_card`: an opaque quad at (-2, -1, 5), half size 0.6125, with the object's Holdout on;
- `back_card`: an opaque quad at (2, -1, 5), half size 0.6125, turned away from the camera (the camera sees its
  back face), material Backface Culling on;
- `group_leaf`: an alpha-cut card at (-1.6, 0.88, 4), R = 0.7, alpha = max(0, 1 - r / R), its Principled BSDF and
  alpha inside a node group nested in another node group;
- `mix_leaf`: an alpha-cut card at (1.2, 0.66, 4), R = 0.5, a Mix Shader of a Transparent BSDF and a Diffuse BSDF by
  the same radial opacity, inside a node group;
- `osl_card`: an opaque quad at (0.03, 0.025, 6), half size 0.5, whose material holds an OSL Script node.
"""
from __future__ import annotations

import bpy

from rowbeam.blender.compat import blender_compat
from rowbeam.blender.scenes import calibration, common

WALL_Z = 8.0
OBJECTS = {   # name: (object id, camera-frame centre (m), half size or card radius (m))
    "wall": (0x7101, (0.0, 0.0, WALL_Z), 30.0),
    "holdout_card": (0x7102, (-2.0, -1.0, 5.0), 0.6125),
    "back_card": (0x7103, (2.0, -1.0, 5.0), 0.6125),
    "group_leaf": (0x7104, (-1.6, 0.88, 4.0), 0.7),
    "mix_leaf": (0x7105, (1.2, 0.66, 4.0), 0.5),
    "osl_card": (0x7106, (0.03, 0.025, 6.0), 0.5),
}


def _quad(T, name, facing=(0, 0, -1.0)):
    object_id, centre, half = OBJECTS[name]
    quad = common.add_quad(name, half, half, calibration._plane_facing(T, centre, facing))
    return common.tag(quad, object_id, name)


def _radial_opacity(tree, radius: float):
    """Output socket (in `tree`) of max(0, 1 - |object-space point| / radius)."""
    coords = tree.nodes.new("ShaderNodeTexCoord")
    length = tree.nodes.new("ShaderNodeVectorMath")
    length.operation = "LENGTH"
    scale = tree.nodes.new("ShaderNodeMath")
    scale.operation, scale.use_clamp = "MULTIPLY_ADD", True
    scale.inputs[1].default_value, scale.inputs[2].default_value = -1.0 / radius, 1.0
    tree.links.new(coords.outputs["Object"], length.inputs[0])
    tree.links.new(length.outputs["Value"], scale.inputs[0])
    return scale.outputs["Value"]


def _shader_group(name: str):
    """A new shader node group with one Shader output; returns (tree, its Group Output node)."""
    tree = bpy.data.node_groups.new(name, "ShaderNodeTree")
    tree.interface.new_socket("Shader", in_out="OUTPUT", socket_type="NodeSocketShader")
    return tree, tree.nodes.new("NodeGroupOutput")


def _material_with_group(obj, tree):
    """A material whose Surface is fed by a group node of `tree`."""
    mat = blender_compat.new_material(f"{obj.name}_material")
    nodes = mat.node_tree.nodes
    for n in [n for n in nodes if n.bl_idname != "ShaderNodeOutputMaterial"]:
        nodes.remove(n)
    node = nodes.new("ShaderNodeGroup")
    node.node_tree = tree
    out = next(n for n in nodes if n.bl_idname == "ShaderNodeOutputMaterial")
    mat.node_tree.links.new(node.outputs[0], out.inputs["Surface"])
    obj.data.materials.append(mat)
    return mat


def _group_leaf(T) -> None:
    """Principled BSDF with the radial alpha in group `leaf_bsdf`, wrapped in group `leaf_card_shader`."""
    inner, inner_out = _shader_group("leaf_bsdf")
    bsdf = inner.nodes.new("ShaderNodeBsdfPrincipled")
    bsdf.inputs["Base Color"].default_value = (0.1, 0.6, 0.1, 1.0)
    inner.links.new(_radial_opacity(inner, OBJECTS["group_leaf"][2]), bsdf.inputs["Alpha"])
    inner.links.new(bsdf.outputs[0], inner_out.inputs[0])
    outer, outer_out = _shader_group("leaf_card_shader")
    wrapped = outer.nodes.new("ShaderNodeGroup")
    wrapped.node_tree = inner
    outer.links.new(wrapped.outputs[0], outer_out.inputs[0])
    _material_with_group(_quad(T, "group_leaf"), outer)


def _mix_leaf(T) -> None:
    """Mix Shader (factor = radial opacity; input 1 a Transparent BSDF, input 2 a Diffuse BSDF) in group `mix_leaf`."""
    tree, out = _shader_group("mix_leaf_shader")
    mix = tree.nodes.new("ShaderNodeMixShader")
    tree.links.new(_radial_opacity(tree, OBJECTS["mix_leaf"][2]), mix.inputs[0])
    tree.links.new(tree.nodes.new("ShaderNodeBsdfTransparent").outputs[0], mix.inputs[1])
    tree.links.new(tree.nodes.new("ShaderNodeBsdfDiffuse").outputs[0], mix.inputs[2])
    tree.links.new(mix.outputs[0], out.inputs[0])
    _material_with_group(_quad(T, "mix_leaf"), tree)


def policy_options(scale: int = 4):
    """Build the scene; return (truth, rig) (camera only)."""
    _, cam, T, K, size = calibration._base(scale)
    common.add_material(_quad(T, "wall"), (0.6, 0.6, 0.6))
    holdout = _quad(T, "holdout_card")
    common.add_material(holdout, (0.9, 0.1, 0.1))
    holdout.is_holdout = True
    back = _quad(T, "back_card", facing=(0, 0, 1.0))
    common.add_material(back, (0.1, 0.1, 0.9)).use_backface_culling = True
    _group_leaf(T)
    _mix_leaf(T)
    osl = _quad(T, "osl_card")
    mat = common.add_material(osl, (0.8, 0.8, 0.2), name="osl_card_material")
    mat.node_tree.nodes.new("ShaderNodeScript")
    light = bpy.data.objects.new("sun", bpy.data.lights.new("sun", "SUN"))
    bpy.context.scene.collection.objects.link(light)
    light.data.energy = 3.0
    truth = calibration.Truth(K, size, lambda t: T, [
        ("wall", calibration._static_plane(T, (0, 0, WALL_Z), (0, 0, -1.0)))], notes={"objects": OBJECTS})
    return truth, common.camera_rig("camera_front", cam.name, rgb_samples=16)
