"""The surface-layer stack (rig surface_policy.layers; rowbeam/blender/cycles/label_materials.py peel renders),
against closed forms on three scenes: the surface scene (tests/blender/sensors/test_surface_policy.py: a wall at
z = 8 behind a decal of alpha 0.3 at z = 5, a volume-only cube centred at z = 5 (edge 1.2), a leaf card at z = 4
with alpha max(0, 1 - r / 0.7 m), a glass pane at z = 3 and a Geometry Nodes grid at z = 6); two veils of alpha
0.3 (z = 4) and 0.4 (z = 6) over the wall (surface_scenes.alpha_layers); the policy-option scene with holdouts and
a culled back face (tests/blender/sensors/test_surface_policy_options.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.blender.sensors.test_surface_policy import K, OBJECTS, SIZE, _card_coords, card_mask
from tests.helpers import build_blend, export_first_event, load_event, scene_script

LAYERS = 3


def _export(d, builder: str, policy: dict, camera: dict | None = None):
    """Build surface_scenes.`builder` at scale 4 into d / s.blend, export event 0 of its camera with `policy` (and
    the rig fields `camera`); returns _load's answer."""
    code = scene_script("surface_scenes", builder,
                        "rig = surface_scenes.rig(policy=json.loads(sys.argv[2]))\nrig['sensors'] = rig['sensors'][:1]\n"
                        "rig['sensors'][0].update(json.loads(sys.argv[3]))\n"
                        "open(sys.argv[1][:-6] + '.rig.json', 'w').write(json.dumps(rig))\n")
    build_blend(code, d / "s.blend", json.dumps(policy), json.dumps(camera or {}))
    return _load(d)


def _load(d):
    """Export event 0 of d / s.blend with d / s.rig.json into d / b; returns (manifest, arrays, object id per layer
    (H, W, L), object id of the label (H, W), qa report, event folder)."""
    export_first_event(d / "s.blend", d / "s.rig.json", d / "b")
    event = d / "b" / "events" / "camera_front" / "000000"
    manifest, a = load_event(event)
    ids = {o["render_index"]: o["id"] for o in manifest["objects"]}
    to_id = np.vectorize(lambda i: ids.get(int(i), 0))
    return manifest, a, to_id(a["layer_instance_id"]), to_id(a["instance_id"]), \
        json.loads((event / "qa_report.json").read_text()), event


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """_export of the surface scene, 3 layers, default policy."""
    return _export(tmp_path_factory.mktemp("layers"), "surfaces", {"layers": LAYERS})


@pytest.fixture(scope="module")
def layered(tmp_path_factory):
    """_export of the two-veil scene (surface_scenes.alpha_layers), 3 layers, threshold 0.5."""
    return _export(tmp_path_factory.mktemp("veils"), "alpha_layers", {"layers": LAYERS, "alpha_threshold": 0.5})


def _inside(name):
    """Pixels strictly inside an object's square (no pixel centre on an edge)."""
    _, centre, half = OBJECTS[name]
    return card_mask(centre, half - 1e-6, 0.0)


def test_stack_is_declared_and_passes_its_check(stack):
    manifest, a, _, _, report, _ = stack
    assert manifest["method"]["surface_policy"]["layers"] == LAYERS
    for name in ("layer_camera_z", "layer_instance_id", "layer_opacity"):
        assert a[name].shape == (SIZE[1], SIZE[0], LAYERS) and manifest["modalities"][name]["shape"] == [180, 320, 3]
    entry = next(c for c in report["checks"] if c["check"] == "surface_layers")
    assert entry["status"] == "pass" and set(entry["values"].values()) == {0}, entry


def test_leaf_card_layer_opacity_is_the_closed_form_alpha(stack):
    """On every pixel inside the card's square: layer 0 is the card at z = 4 with opacity max(0, 1 - r / R) of the
    pixel-centre ray's hit (cut-out pixels: opacity 0), layer 1 the wall; the label is the card exactly where that
    opacity reaches 0.5 (the closed-form mask, 973 px)."""
    _, a, lid, oid, _, _ = stack
    card = _inside("leaf_card")
    x, y = _card_coords(OBJECTS["leaf_card"][1])
    alpha = np.clip(1.0 - np.hypot(x, y) / 0.7, 0.0, 1.0)
    assert card.sum() == 69 * 69
    assert (lid[..., 0][card] == 0x7004).all() and (lid[..., 1][card] == 0x7001).all()
    assert np.abs(a["layer_camera_z"][..., 0][card] - 4.0).max() < 1e-5
    assert np.abs(a["layer_camera_z"][..., 1][card] - 8.0).max() < 1e-5
    assert np.abs(a["layer_opacity"][..., 0][card] - alpha[card]).max() < 1e-5    # measured: ~6e-7
    assert ((oid == 0x7004) == (card & (alpha >= 0.5))).all() and (oid == 0x7004).sum() == 973


def test_decal_glass_fog_and_wall_layers(stack):
    """Decal: (decal 5 m 0.3, wall 8 m 1); glass: (pane 3 m 1, wall); fog cube (volumes ignore): front and back
    faces with opacity 0, then the wall; the wall alone: one layer, the rest empty."""
    _, a, lid, _, _, _ = stack
    z, o = a["layer_camera_z"], a["layer_opacity"]
    decal, glass, fog = _inside("decal"), _inside("glass_pane"), _inside("fog_cube")
    assert (lid[decal][:, :2] == [0x7002, 0x7001]).all() and np.abs(o[decal][:, 0] - 0.3).max() < 1e-6
    assert np.abs(z[decal][:, :2] - [5.0, 8.0]).max() < 1e-5 and np.isnan(z[decal][:, 2]).all()
    assert (lid[glass][:, :2] == [0x7005, 0x7001]).all() and (o[glass][:, :2] == 1.0).all()
    assert (lid[fog] == [0x7003, 0x7003, 0x7001]).all() and (o[fog][:, :2] == 0.0).all()
    assert (z[fog][:, 0] >= 4.4 - 1e-5).all() and (z[fog][:, 1] <= 5.6 + 1e-5).all()
    W, H = SIZE
    corner = np.zeros((H, W), bool)
    corner[:10, -10:] = True                                    # only the wall there
    assert (lid[corner][:, 0] == 0x7001).all() and (lid[corner][:, 1:] == 0).all()
    assert np.isnan(o[corner][:, 1:]).all()
    assert K[0, 0] == 200.0


def _veil_truth():
    """Closed form of the two-veil scene: (ids (H, W, L), camera_z (H, W, L), opacity (H, W, L)) of the stack, each
    veil's pixels from its square (surface_scenes.LAYERED; no pixel centre on an edge), NaN / 0 where none."""
    from rowbeam.blender.scenes.surface_scenes import LAYERED

    W, H = SIZE
    ids, z, o = np.zeros((H, W, LAYERS), np.int64), np.full((H, W, LAYERS), np.nan), np.full((H, W, LAYERS), np.nan)
    depth = np.zeros((H, W), np.int64)
    for object_id, centre, half, alpha in sorted(LAYERED.values(), key=lambda row: row[1][2]):
        hit = card_mask(centre, half, 0.0)
        rows, cols = np.nonzero(hit)
        ids[rows, cols, depth[hit]], z[rows, cols, depth[hit]], o[rows, cols, depth[hit]] = object_id, centre[2], alpha
        depth[hit] += 1
    return ids, z, o


def test_two_alpha_layers_match_the_closed_form(layered):
    """Every pixel's stack is the closed form: near veil (4 m, alpha 0.3), far veil (6 m, 0.4), wall (8 m, 1) where
    they cover it (561 px under both veils). The label is the first layer whose own opacity reaches 0.5: the wall
    everywhere (accumulated coverage, 0.3 + 0.7 * 0.4 = 0.58 under both, would have labelled the far veil)."""
    manifest, a, lid, oid, report, _ = layered
    ids, z, o = _veil_truth()
    both = (ids[..., 2] != 0)
    assert both.sum() == 11 * 51
    assert (lid == ids).all()
    assert np.array_equal(np.isnan(a["layer_camera_z"]), np.isnan(z))
    assert np.nanmax(np.abs(a["layer_camera_z"] - z)) < 1e-5
    assert np.nanmax(np.abs(a["layer_opacity"] - o)) < 1e-6
    oo = np.nan_to_num(a["layer_opacity"]).astype(np.float64)             # w_l = o_l prod_{j<l} (1 - o_j)
    through = np.cumprod(np.concatenate([np.ones_like(oo[..., :1]), 1.0 - oo[..., :-1]], -1), -1)
    assert np.abs((oo * through)[both] - [0.3, 0.7 * 0.4, 0.7 * 0.6]).max() < 1e-6
    weights = (oo * through).sum(-1)
    assert np.abs(weights - 1.0).max() < 1e-6          # every ray ends on the opaque wall
    assert (oid == 0x7101).all() and (a["valid"] == 1).all() and np.abs(a["camera_z"] - 8.0).max() < 1e-5
    assert ((a["policy_mask"] == 1) == (ids[..., 1] != 0)).all()
    assert {c["check"]: c["status"] for c in report["checks"]}["surface_layers"] == "pass"


def test_planted_layer_fault_fails_surface_layers(layered, tmp_path):
    """The far veil's opacity raised to 0.6 at one pixel under both veils: the stack now says the label there is
    the far veil at 6 m, the exported label is the wall; only `surface_layers` fails, on that one pixel."""
    import shutil

    from tests.helpers import failures, save_payload

    bundle = tmp_path / "b"
    shutil.copytree(layered[5].parents[2], bundle)
    event = bundle / "events" / "camera_front" / "000000"
    manifest, a = load_event(event)
    opacity = a["layer_opacity"].copy()
    opacity[90, 155, 1] = 0.6
    save_payload(event, "layer_opacity", opacity)
    report, fails = failures(bundle)
    entry = next(c for e in report["events"] for c in e["checks"] if c["check"] == "surface_layers")
    assert entry["status"] == "fail" and entry["values"]["label_pixels"] == 1
    assert {f["check"] for f in fails} == {"surface_layers"}


HOLDOUT_SHADER = (0x7107, (0.0, -1.5, 5.0), 0.3125)     # columns 148..172, rows 18..42 (625 px)
_OPTION_SCENE = """
import sys, json
import bpy
from rowbeam.blender.scenes import policy_option_scenes as s, common, calibration
_, rig = s.policy_options(scale=4)
object_id, centre, half = json.loads(sys.argv[3])
quad = common.tag(common.add_quad('holdout_shader', half, half, calibration._plane_facing(
    calibration.seed_pose(), centre, (0, 0, -1.0))), object_id, 'holdout_shader')
mat = common.add_material(quad, (0.5, 0.5, 0.5))
out = next(n for n in mat.node_tree.nodes if n.bl_idname == 'ShaderNodeOutputMaterial')
mat.node_tree.links.new(mat.node_tree.nodes.new('ShaderNodeHoldout').outputs[0], out.inputs['Surface'])
common.save(sys.argv[1], rig)
rig['sensors'][0]['surface_policy'] = json.loads(sys.argv[2])
open(sys.argv[1][:-6] + '.rig.json', 'w').write(json.dumps(rig))
"""


def _export_options(d, policy: dict):
    """The policy-option scene (holdout object, culled back face, node-group cards) plus a quad whose material is a
    Holdout shader (HOLDOUT_SHADER), exported with `policy`; returns _load's answer."""
    build_blend(_OPTION_SCENE, d / "s.blend", json.dumps(policy), json.dumps(HOLDOUT_SHADER))
    return _load(d)


@pytest.mark.parametrize("options", [False, True], ids=["default", "holdout_surface_backface_cull"])
def test_holdouts_back_faces_and_group_cards_in_the_stack(tmp_path, options):
    """Default policy: a held-out object and a Holdout-shader material end the stack (no layer, no label).
    holdout surface + cull_if_material_culls: both are layer 0 at 5 m (opacity 1, the label); the culled back
    face is layer 0 with opacity 0 and the wall layer 1. The node-group card's layer-0 opacity is its closed-form
    alpha either way, and `surface_layers` passes."""
    from tests.blender.sensors.test_surface_policy_options import OBJECTS as OPT

    policy = {"layers": 2, **({"holdout": "surface", "backface": "cull_if_material_culls"} if options else {})}
    _, a, lid, oid, report, _ = _export_options(tmp_path, policy)
    assert {c["check"]: c["status"] for c in report["checks"]}["surface_layers"] == "pass"
    z, o = a["layer_camera_z"], a["layer_opacity"]
    held = card_mask(OPT["holdout_card"][1], OPT["holdout_card"][2] - 1e-6, 0.0)
    shader = card_mask(HOLDOUT_SHADER[1], HOLDOUT_SHADER[2] - 1e-6, 0.0)
    back = card_mask(OPT["back_card"][1], OPT["back_card"][2] - 1e-6, 0.0)
    assert held.sum() == 49 * 49 and shader.sum() == 25 * 25
    if options:
        for mask, object_id in ((held, 0x7102), (shader, 0x7107)):
            assert (lid[mask][:, 0] == object_id).all() and (o[mask][:, 0] == 1.0).all()
            assert (oid[mask] == object_id).all() and np.abs(z[mask][:, 0] - 5.0).max() < 1e-5
        assert (lid[back] == [0x7103, 0x7101]).all() and (o[back][:, 0] == 0.0).all() and (oid[back] == 0x7101).all()
    else:
        for mask in (held, shader):
            assert np.isnan(z[mask]).all() and (lid[mask] == 0).all() and (a["valid"][mask] == 0).all()
        assert (lid[back][:, 0] == 0x7103).all() and (o[back][:, 0] == 1.0).all()
    _, centre, radius = OPT["group_leaf"]
    card = card_mask(centre, radius - 1e-6, 0.0)
    x, y = _card_coords(centre)
    alpha = np.clip(1.0 - np.hypot(x, y) / radius, 0.0, 1.0)
    assert (lid[card][:, 0] == 0x7104).all() and np.abs(o[..., 0][card] - alpha[card]).max() < 1e-5


def test_stack_through_a_lens(tmp_path):
    """Through an OpenCV lens (OSL lens camera) the peel renders see the same rays as the label: `surface_layers`
    passes, and the decal, leaf card, glass and fog pixels have two layers (measured: 14,520 px, 5,288 of them with a
    partial layer-0 opacity)."""
    from tests.conftest import skip_without_custom_camera

    lens = {"lens": {"model": "opencv", "D": [-0.2, 0.05, 0.0, 0.0, 0.0]}}
    skip_without_custom_camera({"sensors": [lens]})
    manifest, a, _, _, report, _ = _export(tmp_path, "surfaces", {"layers": 2}, lens)
    assert manifest["calibration"]["distortion"]["coefficients"] == lens["lens"]["D"]
    assert {c["check"]: c["status"] for c in report["checks"]}["surface_layers"] == "pass"
    two = np.isfinite(a["layer_camera_z"]).sum(-1) == 2
    partial = (a["layer_opacity"][..., 0] > 0) & (a["layer_opacity"][..., 0] < 1)
    assert two.sum() > 10_000 and partial.sum() > 5_000 and (partial <= two).all()


def test_report_draws_every_layer_of_the_stack(layered, tmp_path):
    """`rowbeam report` of the two-veil export: for each of the 3 layers the camera_z and opacity images are the
    colour maps of that layer's exported values (opacity over [0, 1]), NO_DATA exactly where the ray crossed fewer
    surfaces; the page names the section."""
    import subprocess
    import sys

    import cv2

    from rowbeam.report import colour
    from tests.conftest import REPO

    manifest, a, *_, event = layered
    out = tmp_path / "report"
    r = subprocess.run([sys.executable, "-m", "rowbeam", "report", str(event.parents[2]), "--out", str(out)], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    img_dir = out / "img" / "bundle" / "events" / "camera_front" / "000000"
    page = next(p for p in out.rglob("*.html") if "layer_0_opacity" in p.read_text())
    assert "Surface layers" in page.read_text()
    for k in range(LAYERS):
        z, op = a["layer_camera_z"][..., k], a["layer_opacity"][..., k]
        present = np.isfinite(z)
        assert present.any()
        opacity = cv2.imread(str(img_dir / f"layer_{k}_opacity.png"))[..., ::-1]
        assert (opacity[~present] == colour.NO_DATA).all()
        assert np.array_equal(opacity[present], colour.colourise(op, 0.0, 1.0)[present])
        depth = cv2.imread(str(img_dir / f"layer_{k}_camera_z.png"))[..., ::-1]
        assert (depth[~present] == colour.NO_DATA).all() and (depth[present] != colour.NO_DATA).any(-1).all()
        assert (img_dir / f"layer_{k}_instance_id.png").exists()
