"""Radar returns on instances: the approaching 40 m wall of the radar calibration made of two half-wall collection
instances (nested: a block of two lots) whose top instancer (an empty) moves toward the radar. Every return carries
the render index of the half it hit (beams with azimuth > 0 the left half y > 0), range and radial velocity equal
the closed form of the plain wall, the BVH verification names the same instances, and the checker passes."""
from __future__ import annotations

import numpy as np

from rowbeam.blender.scenes import common
from rowbeam.blender.scenes import radar_scenes as rs

from tests.helpers import load_event
from tests.sensors.test_radar import RANGE_TOL, VELOCITY_TOL, _compare

SPEED, X0 = 12.0, 15.0


def instanced_wall():
    """rs.wall_approaching's truth and rig, its wall replaced by two collection instances of a 20 x 40 m half wall
    (x 0, y 0..20, z -20..20 in its collection) at y 0 and y -20 inside a block instanced by `walls` (an empty at
    (X0, 0, 1) moving at -SPEED along x)."""
    import bpy

    truth, rig = rs.wall_approaching(SPEED, X0)
    bpy.data.objects.remove(bpy.data.objects["wall"])
    half_c, block_c = bpy.data.collections.new("HalfWall"), bpy.data.collections.new("Walls")
    half = common._mesh_object("half_wall", [(0, 0, -20), (0, 0, 20), (0, 20, 20), (0, 20, -20)], [(0, 1, 2, 3)])
    for c in half.users_collection:
        c.objects.unlink(half)
    half_c.objects.link(half)
    common.tag(half, 0x7301, "wall")
    for name, y in (("wall_left", 0.0), ("wall_right", -20.0)):
        e = bpy.data.objects.new(name, None)
        e.instance_type, e.instance_collection, e.location = "COLLECTION", half_c, (0.0, y, 0.0)
        block_c.objects.link(e)
    top = bpy.data.objects.new("walls", None)
    top.instance_type, top.instance_collection = "COLLECTION", block_c
    bpy.context.scene.collection.objects.link(top)
    common.tag(top, 0x7302, None)
    common.key_locations(top, [(1, (X0, 0, 1.0)), (2, (X0 - SPEED / rs.FPS, 0, 1.0))])
    return truth, rig


def test_radar_returns_on_moving_instances_carry_each_instance_id(exports):
    e = exports("radar_instanced_wall", instanced_wall)
    m, a, t, dirs, truth, valid, hit = _compare(e)
    insts = {o["render_index"]: o for o in m["objects"] if "instance" in o}
    assert len(insts) == 2 and all(o["motion"] == "moving" for o in insts.values())
    left = next(ri for ri, o in insts.items() if 0 in o["instance"]["persistent_path"][1:])
    right = next(ri for ri in insts if ri != left)
    assert valid.all()
    want = np.where(dirs[None, :, 1] > 0, left, right)
    assert np.array_equal(a["instance_id"], np.broadcast_to(want, a["instance_id"].shape))
    assert np.array_equal(a["points"]["instance_id"], a["instance_id"][a["valid"] == 1])
    range_err = np.abs(a["range"] - truth[..., 0]).max()
    v_err = np.abs(a["radial_velocity"] - truth[..., 1]).max()
    print(f"instanced wall: worst range error {range_err:.3g} m, worst radial velocity error {v_err:.3g} m/s")
    assert range_err < RANGE_TOL and v_err < VELOCITY_TOL
    ver = m["method"]["verification"]
    assert ver["beams_compared"] > 0 and ver["id_mismatch_beams"] == 0, ver


def test_radar_instance_ids_identical_across_two_exports(exports, tmp_path):
    import json

    from tests.conftest import run_python

    e = exports("radar_instanced_wall", instanced_wall)
    r = run_python("render_export.py", e.blend, "--rig", e.rig, "--out", tmp_path / "again", "--first-event", 1,
                   "--count", 1, "-q")
    assert r.returncode == 0, r.stderr
    (again,) = (tmp_path / "again").glob("events/*/*/manifest.json")
    first, _ = load_event(e.event)
    assert sorted((o["name"], o["id"]) for o in json.loads(again.read_text())["objects"]) == \
        sorted((o["name"], o["id"]) for o in first["objects"])
