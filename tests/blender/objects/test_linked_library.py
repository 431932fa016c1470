"""Instances of linked-library data: a library .blend (written by the test) holds a collection `Kit` with a house
quad; the scene links it (relative and absolute library paths) and instances it twice by two empties, facing the
camera, whose projections are known pixel rectangles. Ids, masks, boxes and poses equal the closed form, ids are
identical across two exports; a missing library is one line naming the file, exit 2, nothing written."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from rowbeam.blender.scenes import calibration, common
from rowbeam.blender.scenes.object_scenes import _rect_matrix

from tests.blender.objects.test_instances import _empty, _rect_mask, _translation
from tests.helpers import failures, load_event

Z, W_PX, H_PX = 10.0, 8, 6                                          # the kit house: 8 x 6 px at camera z 10
LOTS = {"lot_1": (20.5, 15.5), "lot_2": (55.5, 28.5)}                # centres (u, v), half-integer px


def _write_library(path, K):
    """A library .blend holding collection `Kit` (a house quad tagged building, id 0xA100)."""
    import bpy

    common.new_scene(8, 8)
    _, hx, hy, _ = _rect_matrix(np.eye(4), K, 0, W_PX, 0, H_PX, Z)
    house = common.add_quad("kit_house", hx, hy, np.eye(4))
    common.tag(house, 0xA100, "building")
    kit = bpy.data.collections.new("Kit")
    for c in house.users_collection:
        c.objects.unlink(house)
    kit.objects.link(house)
    bpy.data.libraries.write(str(path), {kit}, fake_user=True)


def linked_kit(folder, relative: bool = True, scale: int = 16):
    """Truth {lot: rect} and rig of a scene (saved under `folder`/scene.blend) instancing the linked `Kit`."""
    import bpy

    lib = folder / "assets" / "kit.blend"
    lib.parent.mkdir(parents=True, exist_ok=True)
    _write_library(lib, calibration._base(scale)[3])      # a fresh file of its own, written first
    _, cam, T, K, size = calibration._base(scale)
    common.save(folder / "scene.blend")                   # saved first: a relative library path needs a home
    with bpy.data.libraries.load(str(lib), link=True, relative=relative) as (_, dst):
        dst.collections = ["Kit"]
    kit = dst.collections[0]
    common.tag(common.add_quad("ground", 40, 40, T @ _translation(0, 0, 20.0)), 0xA000, "road")
    rects = {}
    for i, (name, (u, v)) in enumerate(LOTS.items()):
        x, y = (u - K[0, 2]) * Z / K[0, 0], (v - K[1, 2]) * Z / K[1, 1]
        e = _empty(name, kit, T @ _translation(x, y, Z), kit, bpy.context.scene.collection)
        common.tag(e, 0xA001 + i, None)
        rects[name] = (u - W_PX / 2, u + W_PX / 2, v - H_PX / 2, v + H_PX / 2)
    rig = common.camera_rig("camera_front", cam.name, rgb_samples=0, verify_rows=2, object_labels=True)
    return {"rects": rects, "K": K, "size": size, "library": lib}, rig


def _export(tmp_path_factory, relative: bool):
    import bpy

    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export

    folder = tmp_path_factory.mktemp("relative" if relative else "absolute")
    truth, rig = linked_kit(folder, relative)
    blend = common.save(folder / "scene.blend", rig)
    stored = bpy.data.libraries[0].filepath
    assert stored.startswith("//") == relative, stored
    out = folder / "bundle"
    run_export(plan_export(ExportRequest(out=out, blend=blend, rig=blend.with_suffix(".rig.json"), sensors=None,
                                         first_event=1, count=2, device="cpu")))
    return truth, blend, out


@pytest.fixture(scope="module", params=[True, False], ids=["relative", "absolute"])
def linked(request, tmp_path_factory):
    return _export(tmp_path_factory, request.param)


def test_linked_instances_ids_masks_boxes_poses_vs_closed_form(linked):
    truth, _, out = linked
    W, H = truth["size"]
    K = truth["K"]
    events = sorted(out.glob("events/*/*"))
    m, a = load_event(events[0])
    insts = {o["instance"]["instancer"]: o for o in m["objects"] if "instance" in o}
    assert set(insts) == set(LOTS)
    assert all(o["class_tag"] == "building" and o["id_source"] == "instance_path" for o in insts.values())
    labels = {o["instance_id"]: o for o in m["object_labels"]["objects"]}
    errors, pose_err = {}, 0.0
    for name, rect in truth["rects"].items():
        o = insts[name]
        want = _rect_mask(rect, W, H)
        errors[name] = int((want != (a["instance_id"] == o["render_index"])).sum())
        lab = labels[o["render_index"]]
        box = [int(rect[0] + 0.5), int(rect[2] + 0.5), int(rect[1] - rect[0]), int(rect[3] - rect[2])]
        assert lab["bbox_modal"] == lab["bbox_amodal_unclipped"] == box, (name, lab)
        assert lab["px_count_visib"] == lab["px_count_all"] == int(want.sum())
        u, v = LOTS[name]
        want_T = _translation((u - K[0, 2]) * Z / K[0, 0], (v - K[1, 2]) * Z / K[1, 1], Z)
        pose_err = max(pose_err, float(np.abs(np.array(lab["T_camera_object_reference"]) - want_T).max()))
    print(f"linked-library instances: mask errors {errors}, pose error {pose_err:.2e} m")
    assert errors == {n: 0 for n in errors} and pose_err < 1e-5
    assert a["valid"].all() and m["method"]["derivation"]["unresolved_hit_pixels"] == 0
    ids = [sorted((o["name"], o["id"]) for o in json.loads((e / "manifest.json").read_text())["objects"])
           for e in events]
    assert len(ids) == 2 and ids[0] == ids[1]                        # stable across events
    report, failed = failures(out)
    assert report["status"] == "pass", [(f["check"], f["message"]) for f in failed]


def test_linked_instance_ids_identical_across_two_exports(linked, tmp_path):
    from tests.conftest import run_python

    _, blend, out = linked
    r = run_python("render_export.py", blend, "--out", tmp_path / "again", "--rig", blend.with_suffix(".rig.json"),
                   "--first-event", 1, "--count", 1, "-q")
    assert r.returncode == 0, r.stderr
    (again,) = (tmp_path / "again").glob("events/*/*/manifest.json")
    first = sorted(out.glob("events/*/*/manifest.json"))[0]
    key = lambda p: sorted((o["name"], o["id"]) for o in json.loads(p.read_text())["objects"])  # noqa: E731
    assert key(again) == key(first)


def test_missing_library_is_one_line_exit_2_nothing_written(linked, tmp_path):
    """The scene copied without its library (relative: the assets folder is not copied; absolute: the library file
    is moved away): one line naming the missing file, exit 2, no output folder."""
    from tests.conftest import run_python

    truth, blend, _ = linked
    folder = tmp_path / "copy"
    folder.mkdir()
    shutil.copy(blend, folder / "scene.blend")
    shutil.copy(blend.with_suffix(".rig.json"), folder / "scene.rig.json")
    lib = truth["library"]
    moved = lib.with_suffix(".away")
    lib.rename(moved)
    try:
        r = run_python("render_export.py", folder / "scene.blend", "--rig", folder / "scene.rig.json", "--out",
                       folder / "bundle", "--first-event", 1, "--count", 1, "-q")
    finally:
        moved.rename(lib)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and lines[0].startswith("rowbeam export: error: linked library"), r.stderr
    assert "kit.blend" in lines[0] and "Traceback" not in r.stderr
    assert not (folder / "bundle").exists()
