"""Surface policy options holdout, backface and alpha inside node groups (rowbeam/model/surface_policy.py,
rowbeam/blender/cycles/label_materials.py).

Closed-form scene (rowbeam/blender/scenes/policy_option_scenes.py, 320x180, f = 200 px, cx = 160, cy = 90, a wall
at camera z = 8 m): a holdout quad and a back-facing quad with Backface Culling (z = 5, 49 x 49 px each), two
alpha-cut cards whose shaders live in node groups (z = 4) and a quad whose material holds an OSL Script node.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from rowbeam.model.surface_policy import SurfacePolicy, parse_surface_policy, policy_from_manifest
from rowbeam.util.errors import RowbeamError

from tests.blender.sensors.test_surface_policy import card_mask, on_edge
from tests.helpers import build_blend, export_first_event, load_event, scene_script

OBJECTS = {"holdout_card": (0x7102, (-2.0, -1.0, 5.0), 0.6125), "back_card": (0x7103, (2.0, -1.0, 5.0), 0.6125),
           "group_leaf": (0x7104, (-1.6, 0.88, 4.0), 0.7), "mix_leaf": (0x7105, (1.2, 0.66, 4.0), 0.5),
           "osl_card": (0x7106, (0.03, 0.025, 6.0), 0.5)}
WALL = 0x7101
OPTIONS = {"holdout": "surface", "backface": "cull_if_material_culls"}


def test_options_parse_round_trip_and_refuse_unknown_values():
    p = parse_surface_policy(OPTIONS, "s")
    assert p == SurfacePolicy(0.5, "surface", "ignore", "surface", "cull_if_material_culls")
    assert policy_from_manifest({"method": {"surface_policy": p.manifest_block()}}) == p
    assert parse_surface_policy({}, "s").holdout == "no_label" and parse_surface_policy({}, "s").backface == "both_sides"
    for raw, field in (({"holdout": "see_through"}, "holdout"), ({"backface": "cull"}, "backface")):
        with pytest.raises(RowbeamError) as info:
            parse_surface_policy(raw, "rig.json: sensors[0]")
        assert str(info.value).startswith(f"rig.json: sensors[0].surface_policy.{field}: ")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{"default" | "options": (bundle folder, exporter stderr)} of event 0 of the camera."""
    d = tmp_path_factory.mktemp("policy_options")
    code = scene_script("policy_option_scenes", "policy_options",
                        "rig['sensors'][0]['surface_policy'] = json.loads(sys.argv[2])\n"
                        "open(sys.argv[1][:-6] + '.options.rig.json', 'w').write(json.dumps(rig))\n")
    blend = d / "p.blend"
    build_blend(code, blend, json.dumps(OPTIONS))
    out = {}
    for name, rig in (("default", d / "p.rig.json"), ("options", d / "p.options.rig.json")):
        out[name] = (d / name, export_first_event(blend, rig, d / name))
    return out


def _camera(bundle):
    manifest, a = load_event(bundle / "events" / "camera_front" / "000000")
    ids = {o["render_index"]: o["id"] for o in manifest["objects"]}
    return manifest, a, np.vectorize(lambda i: ids.get(int(i), 0))(a["instance_id"])


def _square(name):
    return card_mask(OBJECTS[name][1], OBJECTS[name][2], 0.0)


def _cards():
    """(ids, camera_z) of the node-group cards and the OSL quad over the wall, closed form at threshold 0.5."""
    group, mix = (card_mask(OBJECTS[n][1], OBJECTS[n][2], 0.5) for n in ("group_leaf", "mix_leaf"))
    osl = _square("osl_card")
    ids = np.where(group, 0x7104, np.where(mix, 0x7105, np.where(osl, 0x7106, WALL)))
    z = np.where(group, 4.0, np.where(mix, 4.0, np.where(osl, 6.0, 8.0)))
    return ids, z


def test_node_group_alpha_matches_the_closed_form_mask(exported):
    """Alpha inside nested node groups (Principled Alpha) and a Mix Shader factor inside a group: ids and depth equal
    the closed-form alpha mask pixel for pixel (no ties at 0.5 on these pixel centres); the cards' squares
    (opacity < 1 everywhere on them) are policy pixels. Without entering the groups, 528 of the cards' 7,501
    pixels were label holes (250 on the Principled card, 278 on the Mix Shader card)."""
    for name in OBJECTS:
        assert not on_edge(OBJECTS[name][1], OBJECTS[name][2], 0.5).any()
    _, a, oid = _camera(exported["default"][0])
    ids, z = _cards()
    assert (ids == 0x7104).sum() == 973 and (ids == 0x7105).sum() == 489
    sel = ~(_square("holdout_card") | _square("back_card"))
    assert int((oid != ids)[sel].sum()) == 0
    assert np.abs(a["camera_z"] - z)[sel].max() < 1e-5
    inside = [card_mask(OBJECTS[n][1], OBJECTS[n][2] - 1e-6, 0.0) for n in ("group_leaf", "mix_leaf")]
    cards = inside[0] | inside[1]                                  # squares without their edge pixels
    assert a["policy_mask"][cards].all() and cards.sum() == 69 * 69 + 49 * 49


def test_default_holdout_gives_no_label_and_both_sides_are_surfaces(exported):
    m, a, oid = _camera(exported["default"][0])
    holdout, back = _square("holdout_card"), _square("back_card")
    assert holdout.sum() == back.sum() == 49 * 49
    assert (a["valid"][holdout] == 0).all() and int((a["valid"] == 0).sum()) == 49 * 49
    assert (oid[back] == 0x7103).all() and np.abs(a["camera_z"][back] - 5.0).max() < 1e-5
    assert not a["policy_mask"][holdout | back].any()
    assert m["method"]["surface_policy"]["holdout"] == "no_label"


def test_holdout_surface_and_backface_culling_follow_the_option_rgb_unaffected(exported):
    m, a, oid = _camera(exported["options"][0])
    holdout, back = _square("holdout_card"), _square("back_card")
    assert (oid[holdout] == 0x7102).all() and np.abs(a["camera_z"][holdout] - 5.0).max() < 1e-5
    assert (oid[back] == WALL).all() and np.abs(a["camera_z"][back] - 8.0).max() < 1e-5
    assert a["policy_mask"][holdout | back].all()
    ids, _ = _cards()
    rest = ~(holdout | back)
    assert int((oid != ids)[rest].sum()) == 0 and int((a["valid"] == 0).sum()) == 0
    assert {k: m["method"]["surface_policy"][k] for k in OPTIONS} == OPTIONS
    _, b, _ = _camera(exported["default"][0])
    assert np.array_equal(a["rgb"], b["rgb"]) and np.array_equal(a["rgb_coverage"], b["rgb_coverage"])
    for name in ("default", "options"):
        report = json.loads((exported[name][0] / "events" / "camera_front" / "000000" / "qa_report.json").read_text())
        entry = next(c for c in report["checks"] if c["check"] == "label_coverage")
        assert entry["status"] == "pass" and entry["values"]["hole_pixels"] == 0, (name, entry)


def test_osl_material_is_warned_once_and_listed(exported):
    for bundle, stderr in exported.values():
        lines = [line for line in stderr.splitlines() if "osl_card_material" in line]
        assert len(lines) == 1 and lines[0].startswith("rowbeam: warning: material 'osl_card_material'"), stderr
        m, _, _ = _camera(bundle)
        assert m["method"]["surface_policy"]["unseen_materials"] == ["osl_card_material"]
