"""Every Blender version difference in rowbeam/blender/compat/blender_compat.py: on the running Blender, the branch
taken matches bpy.app.version and the API that branch uses exists (make test-matrix runs this on
4.2, 4.5, 5.0 and 5.3, so each branch is exercised on a Blender that has it)."""
from __future__ import annotations

import os
import sys

import bpy
import numpy as np
import pytest

from rowbeam.util.errors import RowbeamError
from rowbeam.blender.compat import blender_compat as bc
from rowbeam.blender.cycles import cycles_setup as cs
from rowbeam.blender.compat.scene_patch import ScenePatch
from rowbeam.blender.scenes import common

from tests.conftest import REPO, run_python

V = tuple(bpy.app.version)


def test_running_blender_is_in_the_matrix():
    assert bc.VERSION == V
    assert bc.support_problem() is None
    bc.check_supported()


def test_multilayer_exr_output_setting():
    scene = common.new_scene(4, 4)
    im = scene.render.image_settings
    assert bc.HAS_MEDIA_TYPE == (V >= (5, 0, 0)) == hasattr(im, "media_type")
    assert bc.HAS_EXR_INTERLEAVE == (V >= (5, 0, 0)) == hasattr(im, "use_exr_interleave")
    with ScenePatch() as p:
        bc.set_multilayer_exr(p, im)
        assert im.file_format == "OPEN_EXR_MULTILAYER"
        if bc.HAS_MEDIA_TYPE:
            assert im.media_type == "MULTI_LAYER_IMAGE" and im.use_exr_interleave
    assert im.file_format != "OPEN_EXR_MULTILAYER"          # restored


def test_pass_channel_names_are_the_ones_cycles_writes():
    """A 4x4 render: the object-index and depth channels are found under this version's names."""
    common.new_scene(4, 4)
    common.add_camera("cam", np.eye(4), 4.0, 1.5, 1.5, 4, 4)
    quad = common.add_quad("wall", 20, 20, np.array([[1, 0, 0, 0], [0, -1, 0, 0], [0, 0, -1, 5.0], [0, 0, 0, 1]]))
    common.tag(quad, 1, "wall")
    assert bc.OBJECT_INDEX_PASS == ("Object Index" if V >= (5, 0, 0) else "IndexOB")
    scene = bpy.context.scene
    quad.pass_index = 7
    with ScenePatch() as p:
        cs.common_settings(p, scene)
        cs.label_settings(p, scene, scene.view_layers[0])
        passes = cs.render_passes(scene, scene.view_layers[0])
    assert {"depth", "index", "position", "normal"} <= set(passes)
    assert np.all(passes["index"] == 7) and np.allclose(passes["depth"], 5.0, atol=1e-4)


def test_fcurves_of_an_animated_object():
    common.new_scene(4, 4)
    obj = common.add_empty("mover")
    common.key_locations(obj, [(1, (0, 0, 0)), (11, (1, 2, 3))])
    from bpy_extras import anim_utils

    assert bc.HAS_LAYERED_ACTIONS == (V >= (4, 4, 0)) == hasattr(anim_utils, "action_get_channelbag_for_slot")
    assert ("fcurves" in bpy.types.Action.bl_rna.properties) == (V < (5, 0, 0))
    curves = bc.fcurves(obj)
    assert sorted((fc.data_path, fc.array_index) for fc in curves) == [("location", i) for i in range(3)]
    assert all(fc.extrapolation == "LINEAR" for fc in curves)          # set through the same helper
    bpy.context.scene.frame_set(21)                                     # linear extrapolation past the last key
    assert tuple(obj.matrix_world.translation) == pytest.approx((2, 4, 6))
    assert bc.fcurves(common.add_empty("still")) == []


def test_new_materials_render_their_node_tree():
    assert bc.ALWAYS_NODE_MATERIALS == (V >= (5, 0, 0))
    assert (bpy.data.materials.new("plain").node_tree is not None) == bc.ALWAYS_NODE_MATERIALS
    mat = bc.new_material("with_nodes")
    assert bc.ALWAYS_NODE_MATERIALS or mat.use_nodes
    assert any(n.bl_idname == "ShaderNodeBsdfPrincipled" for n in mat.node_tree.nodes)
    legacy = bpy.data.materials.new("legacy")
    if not bc.ALWAYS_NODE_MATERIALS:
        legacy.use_nodes = False
    with ScenePatch() as p:
        bc.ensure_node_tree(p, legacy)
        assert legacy.node_tree is not None and (bc.ALWAYS_NODE_MATERIALS or legacy.use_nodes)


def test_custom_camera_and_lidar_support():
    types = {i.identifier for i in bpy.types.Camera.bl_rna.properties["type"].enum_items}
    assert bc.HAS_CUSTOM_CAMERA == (V >= (4, 5, 0)) == ("CUSTOM" in types)
    bc.require_sensor_support("camera_front", "rolling_shutter_camera")
    if bc.HAS_CUSTOM_CAMERA:
        bc.require_sensor_support("lidar_top", "spinning_lidar")
    else:
        with pytest.raises(RowbeamError, match=r"needs Blender >= 4\.5"):
            bc.require_sensor_support("lidar_top", "spinning_lidar")
    with pytest.raises(RowbeamError) as e:
        bc.require_sensor_support("lidar_top", "spinning_lidar", version=(4, 2, 23))
    assert str(e.value) == "sensor 'lidar_top' (spinning_lidar) needs Blender >= 4.5 (found 4.2.23)"
    with pytest.raises(RowbeamError) as e:                 # the radar renders through the same OSL camera
        bc.require_sensor_support("radar_front", "radar", version=(4, 2, 23))
    assert str(e.value) == "sensor 'radar_front' (radar) needs Blender >= 4.5 (found 4.2.23)"
    if bc.HAS_CUSTOM_CAMERA:
        bc.require_sensor_support("radar_front", "radar")


@pytest.mark.skipif(bc.HAS_CUSTOM_CAMERA, reason="this Blender has custom (OSL) cameras")
def test_radar_export_on_a_blender_without_custom_cameras_is_one_line(tmp_path):
    from rowbeam.blender.scenes import radar_scenes as rs

    _, rig = rs.wall_approaching()
    blend = common.save(tmp_path / "wall.blend", rig)
    r = run_python(REPO / "render_export.py", blend, "--rig", blend.with_suffix(".rig.json"), "--out", tmp_path / "o")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("rowbeam export:")] == [
        f"rowbeam export: error: sensor 'radar_front' (radar) needs Blender >= 4.5 (found {bc.VERSION_STRING})"]
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(bc.HAS_CUSTOM_CAMERA, reason="this Blender has custom (OSL) cameras")
def test_lidar_export_on_a_blender_without_custom_cameras_is_one_line(tmp_path):
    from rowbeam.blender.scenes import lidar_calibration as lc

    _, rig = lc.box_room(steps=16)
    blend = common.save(tmp_path / "room.blend", rig)
    r = run_python(REPO / "render_export.py", blend, "--rig", blend.with_suffix(".rig.json"), "--out", tmp_path / "o")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("rowbeam export:")] == [
        f"rowbeam export: error: sensor 'lidar_top' (spinning_lidar) needs Blender >= 4.5 (found {bc.VERSION_STRING})"]
    assert not (tmp_path / "o").exists()


def test_oslquery_location_in_the_bpy_wheel():
    path = bc.oslquery_site_packages()
    assert f"{os.sep}{V[0]}.{V[1]}{os.sep}" in path
    assert path.endswith(os.path.join(f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages"))
    if not bc.HAS_CUSTOM_CAMERA:
        return                                     # no custom camera, nothing imports oslquery
    assert os.path.isdir(os.path.join(path, "oslquery"))
    bc.ensure_oslquery_importable()
    import oslquery  # noqa: F401


def test_python_and_numpy_of_this_blender():
    py = tuple(sys.version_info[:2])
    assert py == ((3, 13) if V >= (5, 1, 0) else (3, 11))
    assert int(np.__version__.split(".")[0]) == (2 if V >= (5, 1, 0) else 1)


@pytest.mark.parametrize(("version", "python", "numpy_version", "expected"), [
    ((5, 4, 0), (3, 13), "2.3.5", "Blender 5.4.0 is not supported (supported: Blender 4.2 to 5.3 (tested 4.2, 4.5, "
                                  "5.0, 5.3) with Python 3.11 (Blender < 5.1) or 3.13 (5.1 and later))"),
    ((4, 1, 1), (3, 11), "1.26.4", "Blender 4.1.1 is not supported (supported: Blender 4.2 to 5.3"),
    ((5, 0, 1), (3, 12), "1.26.4", "Python 3.12 with Blender 5.0.1 is not supported (Blender 5.0 needs Python 3.11; "),
    ((5, 3, 0), (3, 11), "2.3.5", "Python 3.11 with Blender 5.3.0 is not supported (Blender 5.3 needs Python 3.13"),
    ((5, 0, 1), (3, 11), "2.3.5", "numpy 2.3.5 with Blender 5.0.1 is not supported (it is built against numpy 1.x: "
                                  "install numpy<2)"),
    ((5, 3, 0), (3, 13), "1.26.4", "numpy 1.26.4 with Blender 5.3.0 is not supported (it is built against numpy 2.x: "
                                   "install numpy>=2)"),
    ((4, 2, 23), (3, 11), "1.26.4", None),
    ((4, 5, 15), (3, 11), "1.26.4", None),
    ((5, 3, 0), (3, 13), "2.3.5", None),
])
def test_outside_the_matrix_is_named(version, python, numpy_version, expected):
    problem = bc.support_problem(version, python, numpy_version)
    if expected is None:
        assert problem is None
    else:
        assert problem.startswith(expected) and "\n" not in problem

