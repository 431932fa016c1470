"""Speed settings of the label render leave every label pass bit-identical (real Cycles renders, 80x45)."""
from __future__ import annotations

import bpy
import numpy as np

from rowbeam.blender.compat import blender_compat
from rowbeam.blender.cycles import cycles_setup as cs
from rowbeam.blender.compat.scene_patch import ScenePatch
from rowbeam.blender.scenes import common, running_example

LABEL_PASSES = ("position", "normal", "true_normal", "depth", "index")


def _shaded_scene():
    """Camera at the origin looking down -z (Blender camera axes) at: a moving box, a fully transparent quad
    in front of its left half (must be passed through), a half-alpha quad (alpha-blended shading), an
    emissive quad, a sun and a world colour: everything that shades, bounces or lights differently."""
    scene = common.new_scene(80, 45, frame_end=4)
    common.add_camera("cam", common.look_along((0, 0, 0), forward=(0, 0, -1), down=(0, -1, 0)), 60.0, 39.5, 22.0,
                      80, 45)
    box = common.add_box("box", (4, 3, 2), (0, 0, -10))
    common.add_material(box, (0.8, 0.3, 0.2))
    common.key_locations(box, [(1, (0, 0, -10)), (3, (1.5, 0.5, -9))])
    common.tag(box, 1, None)
    clear = common.add_quad("clear", 1.2, 1.5, np.array([[1, 0, 0, -1.0], [0, 1, 0, 0], [0, 0, 1, -6], [0, 0, 0, 1]]))
    mat = blender_compat.new_material("clear")
    nodes = mat.node_tree.nodes
    nodes.remove(nodes["Principled BSDF"])
    mat.node_tree.links.new(nodes.new("ShaderNodeBsdfTransparent").outputs[0], nodes["Material Output"].inputs[0])
    clear.data.materials.append(mat)
    common.tag(clear, 2, None)
    half = common.add_quad("half", 1.0, 1.0, np.array([[1, 0, 0, 1.5], [0, 1, 0, 0.5], [0, 0, 1, -7], [0, 0, 0, 1]]))
    common.add_material(half, (0.1, 0.9, 0.1))
    half.active_material.node_tree.nodes["Principled BSDF"].inputs["Alpha"].default_value = 0.5
    common.tag(half, 3, None)
    glow = common.add_quad("glow", 1.0, 1.0, np.array([[1, 0, 0, -3], [0, 1, 0, 1.5], [0, 0, 1, -8], [0, 0, 0, 1]]))
    common.add_material(glow, (1, 1, 1))
    glow.active_material.node_tree.nodes["Principled BSDF"].inputs["Emission Strength"].default_value = 5.0
    common.tag(glow, 4, None)
    sun = bpy.data.objects.new("sun", bpy.data.lights.new("sun", "SUN"))
    scene.collection.objects.link(sun)
    scene.world.color = (0.3, 0.3, 0.4)
    return scene, [box, clear, half, glow]


def _label_render(scene, objects, fast: bool) -> dict:
    view_layer = scene.view_layers[0]
    with ScenePatch() as p:
        cs.common_settings(p, scene)
        cs.label_settings(p, scene, view_layer)
        if fast:
            cs.data_pass_settings(p, scene, view_layer)
        cs.add_true_normal_aov(p, objects)
        for o in objects:
            p.set(o, "pass_index", int(o["rowbeam_id"], 0))
        p.set(scene.render, "use_motion_blur", True)
        p.set(scene.render, "motion_blur_shutter", 1.0)
        p.set(scene.cycles, "rolling_shutter_type", "TOP")
        p.set(scene.cycles, "rolling_shutter_duration", 0.0)
        scene.frame_set(2)
        return cs.render_passes(scene, view_layer)


def test_data_pass_settings_keep_label_passes_bit_identical():
    scene, objects = _shaded_scene()
    world, sun = scene.world, bpy.data.objects["sun"]
    full = _label_render(scene, objects, fast=False)
    fast = _label_render(scene, objects, fast=True)
    for name in LABEL_PASSES:
        assert np.array_equal(full[name], fast[name], equal_nan=True), name
    index = np.rint(full["index"]).astype(int)
    assert {1, 3, 4} <= set(np.unique(index)) and 2 not in index      # the clear quad is passed through
    assert not np.array_equal(full["combined"], fast["combined"])     # lighting really was switched off
    assert scene.world == world and not sun.hide_render and scene.view_layers[0].use_pass_combined
    assert scene.cycles.max_bounces == 12


def _moving(scene, objects, force: bool) -> set:
    from rowbeam.blender.compat import scene_clock
    from rowbeam.blender.objects.object_table import moving_objects

    scene_clock.FORCE_FRAME_SET = force
    try:
        return moving_objects(scene, objects)
    finally:
        scene_clock.FORCE_FRAME_SET = False


def test_moving_object_detection_direct_equals_frame_set():
    """The object table's motion flag from direct pose evaluation equals the frame_set sweep, on objects where
    a wrong shortcut disagrees: keyed but constant, moving only through a parent, moving only between two frames,
    a constraint (frame_set fallback), a deforming modifier, and the running example's parent chain + walker."""
    running_example.build(64, 36, frames=8)
    scene = bpy.context.scene
    keyed_still = common.add_box("keyed_still", (1, 1, 1), (0, 5, 1))
    common.key_locations(keyed_still, [(1, (0, 5, 1)), (5, (0, 5, 1))])
    child = common.add_box("child_of_shuttle", (1, 1, 1), (0, 0, 3))
    child.parent = bpy.data.objects["shuttle"]
    blip = common.add_box("blip", (1, 1, 1), (0, -5, 1))      # moves away and back between frames 3 and 4
    common.key_locations(blip, [(3, (0, -5, 1)), (3.5, (0, -5, 2)), (4, (0, -5, 1))])
    follower = common.add_box("follower", (1, 1, 1), (3, 3, 1))
    follower.constraints.new("COPY_LOCATION").target = bpy.data.objects["cyclist"]
    objects = [o for o in scene.objects if o.type == "MESH"]
    direct, swept = _moving(scene, objects, False), _moving(scene, objects, True)
    assert direct == swept
    assert {"child_of_shuttle", "blip", "follower", "cyclist", "pedestrian"} <= direct
    assert "keyed_still" not in direct and "delivery_van" not in direct


def _vertices_over(scene, clock, objects, times, guard=()):
    from rowbeam.blender.compat.isolated_eval import world_vertices, mesh_evaluator

    with mesh_evaluator(scene, clock, objects, guard) as (depsgraph_at, how):
        return [[world_vertices(o, depsgraph_at(t)) for o in objects] for t in times], how


def test_isolated_mesh_evaluation_equals_the_whole_scene():
    """The walker (armature child, keyed parent motion, sine F-curve modifiers on the bones) evaluated in the
    scratch scene equals frame_set on the whole scene bit for bit at 40 subframe times; a driver reading the
    scene's own frame (which the scratch scene does not advance) is caught by the guard and falls back."""
    from fractions import Fraction

    from rowbeam.blender.compat.isolated_eval import METHOD_ISOLATED, METHOD_SCENE, world_vertices
    from rowbeam.blender.compat.scene_clock import scene_clock, set_time

    running_example.build(64, 36, frames=10)
    scene = bpy.context.scene
    clock = scene_clock(scene)
    walker = bpy.data.objects["pedestrian"]
    times = [Fraction(33_333_333 * 4, 1) + Fraction(10**7, 39) * k for k in range(40)]
    isolated, how = _vertices_over(scene, clock, [walker], times, guard=(times[0], times[-1]))
    assert how == METHOD_ISOLATED
    whole = []
    for t in times:
        set_time(scene, clock, t)
        whole.append(world_vertices(walker, bpy.context.evaluated_depsgraph_get()))
    assert all(np.array_equal(a[0], b) for a, b in zip(isolated, whole, strict=True))
    assert np.abs(whole[-1] - whole[0]).max() > 0.01                      # it really deforms and moves
    assert "rowbeam_isolated_eval" not in bpy.data.scenes

    # a shape key driven by the scene's frame_current (an ID property the scratch scene never changes)
    walker.shape_key_add(name="Basis")
    key = walker.shape_key_add(name="grow")
    for v in key.data:
        v.co.z += 0.5
    fc = key.driver_add("value")
    var = fc.driver.variables.new()
    var.targets[0].id_type, var.targets[0].id = "SCENE", scene
    var.targets[0].data_path = "frame_current"
    fc.driver.expression = f"{var.name} / 10"
    scene.frame_set(1)
    _, how = _vertices_over(scene, clock, [walker], times[:2], guard=(times[0], times[-1]))
    assert how.startswith(METHOD_SCENE) and "guard" in how
    geo = walker.modifiers.new("nodes", "NODES")
    _, how = _vertices_over(scene, clock, [walker], times[:2], guard=(times[0],))
    assert how == METHOD_SCENE + " (pedestrian: modifier NODES)"
    walker.modifiers.remove(geo)


def test_lidar_beam_passes_bit_identical_without_shading(tmp_path, monkeypatch):
    """The LiDAR beam render (OSL beam camera, per-firing times) gives the same beam passes with the data-pass-only
    settings as with a sun and the scene's bounces, on the moving-wall calibration scene plus a box."""
    from rowbeam.blender.sensors import lidar_event
    from rowbeam.blender.sensors.lidar_layout import sweep_layout
    from rowbeam.blender.sensors.lidar_osl import lidar_shader_source
    from rowbeam.blender.export.run import ExportRequest, plan_export
    from rowbeam.blender.scenes import lidar_calibration

    _, rig = lidar_calibration.moving_wall(steps=64)
    common.add_box("room_box", (2, 2, 2), (-6, 3, 1))
    bpy.data.objects.new("sun", bpy.data.lights.new("sun", "SUN"))
    bpy.context.scene.collection.objects.link(bpy.data.objects["sun"])
    blend = common.save(tmp_path / "wall.blend", rig)
    plan = plan_export(ExportRequest(out=tmp_path / "o", blend=blend, rig=blend.with_suffix(".rig.json"), count=1,
                                     device="cpu"))
    ctx, sensor = plan.context, plan.jobs[0].sensor
    timing = sensor.timing(0)
    layout = sweep_layout(sensor.azimuth_steps, timing.firing_period_ns, sensor.time_offsets_ns)
    fast, _ = lidar_event.render_beam_layout(ctx, sensor, timing, layout, lidar_shader_source)
    monkeypatch.setattr(cs, "data_pass_settings", lambda *a: None)
    full, _ = lidar_event.render_beam_layout(ctx, sensor, timing, layout, lidar_shader_source)
    assert set(fast) == set(full) and (np.rint(full["index"]) > 0).sum() > 100
    for name in full:
        assert np.array_equal(full[name], fast[name], equal_nan=True), name
