"""Instances are objects: a city block of nested collection instances and a geometry-nodes scatter in front of a
ground plane, all facing the camera, whose projections are known pixel rectangles (edges on half-integer pixel
coordinates). Every instance gets its own stable id, class, render index, modal and amodal mask, boxes and pose,
and the pixel identity Cycles traced (Object Index + the Object Info Random AOV) equals the closed form."""
from __future__ import annotations

import json

import numpy as np
import pytest

from rowbeam.blender.scenes import calibration, common
from rowbeam.blender.scenes.object_scenes import _rect_matrix

from tests.helpers import failures, load_event

Z_BLOCK, Z_TREE, Z_GROUND = 10.0, 8.0, 20.0
LOT_W, LOT_H, LOT_DX = 8, 6, 12                       # px: lot rectangles and their offset inside a block
BLOCKS = {"block_1": (25.5, 12.5), "block_2": (45.5, 30.5)}      # block centres (u, v) px, half-integers
TREES_U, TREE_V, TREE_W, TREE_H = (8.5, 18.5, 28.5, 48.5, 58.5, 68.5), 21.5, 6, 4


def _translation(x, y, z):
    M = np.eye(4)
    M[:3, 3] = (x, y, z)
    return M


def _empty(name, collection, matrix, target, link):
    import bpy

    e = bpy.data.objects.new(name, None)
    e.instance_type, e.instance_collection = "COLLECTION", collection
    e.matrix_world = common.Matrix(matrix.tolist())
    link.objects.link(e)
    return e


def _scatter(T, K, f):
    """A mesh whose vertices are the tree centres (camera frame at Z_TREE) instancing, by geometry nodes, the
    geometry of a hidden quad `tree` (Object Info, not as instance)."""
    import bpy

    tree = common.add_quad("tree", TREE_W / 2 * Z_TREE / f, TREE_H / 2 * Z_TREE / f, np.eye(4))
    tree.hide_render = True
    common.tag(tree, 0xB001, "tree")
    pts = [((u - K[0, 2]) * Z_TREE / f, (TREE_V - K[1, 2]) * Z_TREE / f, 0.0) for u in TREES_U]
    me = bpy.data.meshes.new("scatter_points")
    me.from_pydata(pts, [], [])
    obj = bpy.data.objects.new("scatter", me)
    bpy.context.scene.collection.objects.link(obj)
    obj.matrix_world = common.Matrix((T @ _translation(0, 0, Z_TREE)).tolist())
    common.tag(obj, 0xB002, "vegetation")
    common.instance_on_points(obj, tree)
    return obj


def instanced_city(scale: int = 16):
    """Truth: {instance display name: pixel rectangle (u0, u1, v0, v1)} and the rig."""
    import bpy

    _, cam, T, K, size = calibration._base(scale)
    f = K[0, 0]
    ground = common.add_quad("ground", 40, 40, T @ _translation(0, 0, Z_GROUND))
    common.tag(ground, 0xB000, "road")
    house_c = bpy.data.collections.new("House")                  # not in the scene: instanced only
    _, hx, hy, _ = _rect_matrix(T, K, 0, LOT_W, 0, LOT_H, Z_BLOCK)
    house = common.add_quad("house", hx, hy, np.eye(4))
    for c in house.users_collection:
        c.objects.unlink(house)
    house_c.objects.link(house)
    common.tag(house, 0xB003, "building")
    block_c = bpy.data.collections.new("Block")
    dx = LOT_DX * Z_BLOCK / f
    for name, x in (("lot_a", -dx), ("lot_b", dx)):
        _empty(name, house_c, _translation(x, 0, 0), house_c, block_c)
    rects = {}
    for name, (u, v) in BLOCKS.items():
        xc, yc = (u - K[0, 2]) * Z_BLOCK / f, (v - K[1, 2]) * Z_BLOCK / f
        blk = _empty(name, block_c, T @ _translation(xc, yc, Z_BLOCK), block_c, bpy.context.scene.collection)
        common.tag(blk, {"block_1": 0xC001, "block_2": 0xC002}[name], None)
        for lot, du in (("lot_a", -LOT_DX), ("lot_b", LOT_DX)):
            rects[(name, lot)] = (u + du - LOT_W / 2, u + du + LOT_W / 2, v - LOT_H / 2, v + LOT_H / 2)
    _scatter(T, K, f)
    for i, u in enumerate(TREES_U):
        rects[("scatter", i)] = (u - TREE_W / 2, u + TREE_W / 2, TREE_V - TREE_H / 2, TREE_V + TREE_H / 2)
    rig = common.camera_rig("camera_front", cam.name, rgb_samples=0, verify_rows=2, object_labels=True)
    return {"rects": rects, "K": K, "size": size}, rig


def _rect_mask(rect, W, H):
    u0, u1, v0, v1 = rect
    u, v = np.meshgrid(np.arange(W), np.arange(H))
    return (u > u0) & (u < u1) & (v > v0) & (v < v1)


def _truth_key(o):
    inst = o["instance"]
    if inst["instancer"] == "scatter":
        return ("scatter", inst["persistent_path"][-1])
    lot = "lot_a" if 0 in inst["persistent_path"][1:] else "lot_b"
    return (inst["instancer"], lot)


@pytest.fixture(scope="module")
def city(exports):
    return exports("instanced_city", instanced_city, first_event=1, count=2)


def test_every_instance_is_an_object_with_exact_pixels_masks_and_boxes(city):
    truth, W, H = city.truth, *city.truth["size"]
    m, a = load_event(city.event)
    insts = [o for o in m["objects"] if "instance" in o]
    assert len(insts) == 4 + len(TREES_U)
    assert len({o["id"] for o in m["objects"]}) == len(m["objects"])          # unique 64-bit ids
    assert all(o["id_source"] == "instance_path" for o in insts)
    by_key = {_truth_key(o): o for o in insts}
    assert set(by_key) == set(truth["rects"])
    ground = next(o for o in m["objects"] if o["name"] == "ground")
    labels = {o["id"]: o for o in m["object_labels"]["objects"]}
    errors, pose_err = {}, 0.0
    K = truth["K"]
    for key, rect in truth["rects"].items():
        o = by_key[key]
        want = _rect_mask(rect, W, H)
        got = a["instance_id"] == o["render_index"]
        errors[key] = int((want != got).sum())
        lab = labels[str(o["id"])]
        u0, v0 = int(rect[0] + 0.5), int(rect[2] + 0.5)
        box = [u0, v0, int(rect[1] - rect[0]), int(rect[3] - rect[2])]
        assert lab["bbox_modal"] == box and lab["bbox_amodal_unclipped"] == box, (key, lab)
        assert lab["px_count_visib"] == lab["px_count_all"] == int(want.sum())
        assert o["class_id"] == (7 if key[0] == "scatter" else 3), (key, o)    # vegetation / building
        z = Z_TREE if key[0] == "scatter" else Z_BLOCK                     # closed-form pose: facing the camera
        want_T = _translation(((rect[0] + rect[1]) / 2 - K[0, 2]) * z / K[0, 0],
                              ((rect[2] + rect[3]) / 2 - K[1, 2]) * z / K[1, 1], z)
        pose_err = max(pose_err, float(np.abs(np.array(lab["T_camera_object_reference"]) - want_T).max()))
    print(f"instance mask errors vs closed form: {errors}; pose error {pose_err:.2e}")
    assert pose_err < 1e-5, pose_err                                             # float32 matrices in Blender
    assert errors == {k: 0 for k in errors}, errors
    union = np.zeros((H, W), bool)
    for rect in truth["rects"].values():
        union |= _rect_mask(rect, W, H)
    assert a["valid"].all()                                                      # no unresolved pixel
    assert np.all(a["instance_id"][~union] == ground["render_index"])
    assert m["method"]["derivation"]["unresolved_hit_pixels"] == 0
    report, failed = failures(city.bundle)
    assert report["status"] == "pass", [(f["check"], f["message"]) for f in failed]


def test_instance_ids_are_stable_across_events_and_exports(city, tmp_path):
    from tests.conftest import run_python

    events = sorted(city.bundle.glob("events/*/*/manifest.json"))
    ids = [sorted((o["name"], o["id"]) for o in json.loads(p.read_text())["objects"]) for p in events]
    assert len(ids) == 2 and ids[0] == ids[1]
    r = run_python("render_export.py", city.blend, "--rig", city.rig, "--out", tmp_path / "again",
                   "--first-event", 1, "--count", 2, "--flow", "-q")
    assert r.returncode == 0, r.stderr
    for again in sorted((tmp_path / "again").glob("events/*/*/manifest.json")):
        assert sorted((o["name"], o["id"]) for o in json.loads(again.read_text())["objects"]) == ids[0]
    assert len(list((tmp_path / "again").glob("flows/*/*/manifest.json"))) == 1       # flow over instances
    report, failed = failures(tmp_path / "again")
    assert report["status"] == "pass", [(f["check"], f["message"]) for f in failed]


def test_checker_fails_pixels_given_to_the_wrong_instance(city, tmp_path):
    """Two lots of one block swap their instance ids in the instance_id plane (hashes updated): each one's visible
    pixels then lie outside its amodal mask (rasterised from its asset at its pose) and its modal box is wrong."""
    import shutil

    from rowbeam.bundle.arrays import write_exr

    from tests.helpers import rehash

    root = tmp_path / "bundle"
    shutil.copytree(city.bundle, root)
    event = root / city.event.relative_to(city.bundle)
    m, a = load_event(event)
    lots = [o for o in m["objects"] if o.get("instance", {}).get("instancer") == "block_1"]
    ia, ib = (o["render_index"] for o in lots)
    inst = a["instance_id"].copy()
    inst[a["instance_id"] == ia], inst[a["instance_id"] == ib] = ib, ia
    entry = m["modalities"]["instance_id"]
    write_exr(event / entry["uri"], inst, entry["channels"], entry["dtype"])
    rehash(event, "instance_id")
    report, failed = failures(root)
    assert report["status"] == "fail"
    assert {"objects:subset", "objects:boxes"} <= {f["check"] for f in failed}, [(f["check"], f["message"])
                                                                                 for f in failed]


def particle_field(scale: int = 16):
    """A plane at camera z 12 whose hair particle system (6 particles, no children) instances a 0.6 m box `leaf`
    (hidden)."""

    _, cam, T, K, size = calibration._base(scale)
    f = K[0, 0]
    plane = common.add_quad("field", 6 * Z_BLOCK / f * 2, 4 * Z_BLOCK / f * 2, T @ _translation(0, 0, 12.0))
    common.tag(plane, 0xD001, "road")
    leaf = common.add_box("leaf", (0.6, 0.6, 0.6), (0, 0, 0))
    leaf.hide_render = True
    common.tag(leaf, 0xD002, "bush")
    mod = plane.modifiers.new("leaves", "PARTICLE_SYSTEM")
    ps = mod.particle_system.settings
    ps.type, ps.count, ps.hair_length = "HAIR", 6, 1.0
    ps.render_type, ps.instance_object = "OBJECT", leaf
    ps.particle_size, ps.use_rotation_instance = 1.0, True
    ps.child_type = "NONE"
    mod.particle_system.seed = 3
    rig = common.camera_rig("camera_front", cam.name, rgb_samples=0, verify_rows=2, object_labels=True)
    return {"K": K, "size": size}, rig


def test_particle_instances_resolve_and_pass_the_checker(exports):
    e = exports("particle_field", particle_field, first_event=1, count=1)
    m, a = load_event(e.event)
    insts = [o for o in m["objects"] if "instance" in o]
    assert len(insts) == 6 and len({o["id"] for o in insts}) == 6
    assert all(o["instance"]["instancer"] == "field" and o["class_tag"] == "bush" for o in insts)
    assert m["method"]["derivation"]["unresolved_hit_pixels"] == 0
    shown = set(np.unique(a["instance_id"]).tolist())
    labels = {o["instance_id"]: o for o in m["object_labels"]["objects"]}
    for o in insts:
        if o["render_index"] in shown:
            assert labels[o["render_index"]]["px_count_visib"] == int((a["instance_id"] == o["render_index"]).sum())
    report, failed = failures(e.bundle)
    assert report["status"] == "pass", [(f["check"], f["message"]) for f in failed]


def test_instances_beyond_the_declared_bound_are_one_line_exit_2(city, monkeypatch):
    from rowbeam.blender.export.run import ExportRequest, plan_export
    from rowbeam.blender.objects import instances
    from rowbeam.util.errors import RowbeamError

    monkeypatch.setattr(instances, "MAX_INSTANCES", 5)
    with pytest.raises(RowbeamError) as err:
        plan_export(ExportRequest(out=city.bundle.parent / "bound", blend=city.blend, rig=city.rig, sensors=None,
                                  first_event=1, count=1, device="cpu"))
    assert "more than 5 rendered instances" in str(err.value) and "\n" not in str(err.value)
    assert err.value.exit_code == 2 and not (city.bundle.parent / "bound").exists()


def lidar_in_instanced_room(steps: int = 256):
    """The LiDAR box room with a 1 m cube collection-instanced twice (nested: a block of two) in front of the
    mount."""
    import bpy

    from rowbeam.blender.scenes import lidar_calibration as lc

    truth, rig = lc.box_room(steps)
    cube_c, block_c = bpy.data.collections.new("Crate"), bpy.data.collections.new("Crates")
    crate = common.add_box("crate", (1.0, 1.0, 1.0), (0, 0, 0))
    for c in crate.users_collection:
        c.objects.unlink(crate)
    cube_c.objects.link(crate)
    common.tag(crate, 0xE001, "vehicle")
    for name, y in (("crate_a", -1.0), ("crate_b", 1.0)):
        _empty(name, cube_c, _translation(0, y, 0), cube_c, block_c)
    top = _empty("crates", block_c, _translation(2.5, 0.0, 1.2), block_c, bpy.context.scene.collection)
    common.tag(top, 0xE002, None)
    return truth, rig


def test_lidar_beams_on_instances_carry_each_instance_id(exports):
    """Each crate instance's beams carry its own render index; the verification's BVH ray casts (scene.ray_cast,
    hit object and instance matrix) name the same instance."""
    e = exports("lidar_instances", lidar_in_instanced_room)
    m, a = load_event(e.event)
    insts = {o["render_index"]: o for o in m["objects"] if "instance" in o}
    assert len(insts) == 2 and all(o["class_id"] == 4 for o in insts.values())
    ids, counts = np.unique(a["instance_id"], return_counts=True)
    hits = {int(i): int(n) for i, n in zip(ids, counts, strict=True) if int(i) in insts}
    assert set(hits) == set(insts), hits                                      # both crates are hit
    checked = [f["firing"] for f in m["method"]["verification"]["firings"]]
    on_instances = int(np.isin(a["instance_id"][checked], list(insts)).sum())
    assert on_instances > 0 and m["method"]["verification"]["id_mismatch_beams"] == 0   # BVH casts agree
    report, failed = failures(e.bundle)
    assert report["status"] == "pass", [(f["check"], f["message"]) for f in failed]
