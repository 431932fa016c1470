"""Object identity through a real export: a decimal `rowbeam_id` and a class tag in another case and with
spaces reach the object table and the id planes unchanged (ids are read as decimal or 0x-hex; tags match the
ontology case-insensitively)."""
from __future__ import annotations

import json

import numpy as np

from rowbeam.model.ontology import DEFAULT_ONTOLOGY
from rowbeam.blender.scenes import calibration

from tests.helpers import failures, load_event

DECIMAL_ID = "4097000000123"          # decimal text, > 2^32: not a Blender int, not hex


def _plane_with_decimal_id_and_odd_tag(scale):
    import bpy

    truth, rig = calibration.fronto_plane(scale=scale)
    plane = bpy.data.objects["plane_z8"]
    plane["rowbeam_id"] = DECIMAL_ID
    plane["rowbeam_class"] = "  Wall "
    rig["sensors"][0]["rgb_samples"] = 0
    return truth, rig


def test_decimal_id_and_mixed_case_tag_reach_the_object_table(exports):
    e = exports("fronto_decimal_id", _plane_with_decimal_id_and_odd_tag, scale=16)
    m, a = load_event(e.event)
    wall = next(c["id"] for c in json.loads(DEFAULT_ONTOLOGY.read_text())["classes"] if "wall" in c["tags"])
    (obj,) = m["objects"]
    assert obj["id"] == int(DECIMAL_ID) and obj["id_source"] == "object_property"
    assert obj["class_id"] == wall
    hit = a["valid"] == 1
    assert hit.all()                                   # the plane fills the 80x45 image
    assert np.all(a["instance_id"] == obj["render_index"]) and np.all(a["semantic_id"] == wall)
    report, failed = failures(e.bundle)
    assert report["status"] == "pass" and not failed


CATEGORY_IDS = {"truncated": 9, "back": 4, "front": 5, "box": 6, "mover": 77}     # 77: no class of the ontology


def _category_id_scene(tmp_path, extra_rules=()):
    """The object calibration scene the way another synthetic-data tool tags it: no rowbeam_class, an integer
    `category_id` per object, the rig's ontology = the street ontology + the category_id preset."""
    import bpy

    from rowbeam.blender.scenes import common, object_scenes

    _, rig = object_scenes.object_calibration()
    for name, cid in CATEGORY_IDS.items():
        obj = bpy.data.objects[name]
        del obj["rowbeam_class"]
        obj["category_id"] = cid
    onto = json.loads(DEFAULT_ONTOLOGY.read_text())
    onto["class_rules"] = [{"preset": "category_id"}, *extra_rules]
    (tmp_path / "onto.json").write_text(json.dumps(onto))
    rig["ontology"] = "onto.json"
    return common.save(tmp_path / "cat.blend", rig)


def _export_cli(blend, out):
    from tests.conftest import run_python

    return run_python("render_export.py", blend, "--rig", blend.with_suffix(".rig.json"), "--out", out,
                      "--first-event", 1, "--count", 1, "-q")


def test_category_id_preset_gives_coco_the_right_classes_and_names_the_unmapped_object(tmp_path):
    from tests.conftest import run_python

    blend = _category_id_scene(tmp_path)
    r = _export_cli(blend, tmp_path / "b")
    assert r.returncode == 0, r.stderr
    warn = [ln for ln in r.stderr.splitlines() if ln.startswith("rowbeam: warning:")]
    assert len(warn) == 1 and "1 of 5 object(s) have no class" in warn[0] and "'mover'" in warn[0], r.stderr
    (event,) = sorted((tmp_path / "b").glob("events/*/*/manifest.json"))
    m = json.loads(event.read_text())
    by_name = {o["name"]: o for o in m["objects"]}
    for name, cid in CATEGORY_IDS.items():
        want = cid if cid != 77 else 2**32 - 1
        assert by_name[name]["class_id"] == want, (name, by_name[name])
    assert by_name["back"]["class_source"] == "class_rules: property category_id (class_id): '4'"
    assert by_name["mover"]["class_source"].startswith("unclassified: no rowbeam_class; class_rules: property "
                                                       "category_id (class_id): '77' is no class of the ontology")
    assert m["ontology"]["class_rules"] == ["property category_id (class_id)"]
    a = load_event(event.parent)[1]
    for o in by_name.values():                          # the semantic plane carries the rule's class
        assert set(np.unique(a["semantic_id"][a["instance_id"] == o["render_index"]])) <= {o["class_id"]}
    out = tmp_path / "coco.json"
    r = run_python("-m", "rowbeam", "adapt", "coco", tmp_path / "b", out)
    assert r.returncode == 0, r.stderr
    assert "dropped 1 of 5 object label(s): 1 void class (no ontology class, no COCO category) ('mover')" in r.stdout
    doc = json.loads(out.read_text())
    names = {c["id"]: c["name"] for c in doc["categories"]}
    got = {next(n for n, o in by_name.items() if str(o["id"]) == a_["rowbeam_id"]): names[a_["category_id"]]
           for a_ in doc["annotations"]}
    assert got == {"truncated": "calibration_target", "back": "vehicle", "front": "pedestrian", "box": "pole"}


def test_two_class_rules_disagreeing_on_an_object_is_one_line_exit_2(tmp_path):
    blend = _category_id_scene(tmp_path, [{"name": "fr*", "class": "vegetation"}])
    r = _export_cli(blend, tmp_path / "b")
    assert r.returncode == 2 and not (tmp_path / "b").exists()
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("rowbeam export: error: object 'front': class rules disagree"), line
