"""Object identity through a real export: a decimal `rowbeam_id` and a class tag in another case and with
spaces reach the object table and the id planes unchanged (ids are read as decimal or 0x-hex; tags match the
ontology case-insensitively)."""
from __future__ import annotations

import json

import numpy as np

from rowbeam.model.ontology import DEFAULT_ONTOLOGY
from rowbeam.blender.scenes import calibration

from .helpers import failures, load_event

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
