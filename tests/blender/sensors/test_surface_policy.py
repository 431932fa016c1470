"""Surface policy (rowbeam/model/surface_policy.py) and the label-vs-rgb coverage check.

Closed-form scene (rowbeam/blender/scenes/surface_scenes.py, 320x180, f = 200 px, cx = 160, cy = 90): a wall at
camera z = 8 m behind a Principled decal with Alpha 0.3 (z = 5), a volume-only cube (centre z = 5), an alpha-cut
leaf card (z = 4, alpha = max(0, 1 - r / 0.7 m)) and a glass pane (z = 3). Each object's pixels follow from the
pixel-centre ray u = cx + f x / z, so ids and depth are compared pixel for pixel with the closed form.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from rowbeam.bundle.arrays import write_exr
from rowbeam.check.coverage_checks import check_label_coverage, coverage_disagreement
from rowbeam.model.surface_policy import DEFAULT_POLICY, SurfacePolicy, parse_surface_policy, policy_from_manifest
from rowbeam.util.errors import RowbeamError

from tests.helpers import build_blend, export_first_event, failures, load_event, rehash, scene_script

K = np.array([[200.0, 0, 160.0], [0, 200.0, 90.0], [0, 0, 1]])
SIZE = (320, 180)
WALL = (0x7001, (0.0, 0.0, 8.0), 30.0)
OBJECTS = {"decal": (0x7002, (-2.0, -1.0, 5.0), 0.6125), "fog_cube": (0x7003, (2.0, -1.0, 5.0), 0.6),
           "leaf_card": (0x7004, (-1.6, 0.88, 4.0), 0.7), "glass_pane": (0x7005, (1.2, 0.66, 3.0), 0.5),
           "gn_grid": (0x7006, (0.03, 0.025, 6.0), 0.5), "hair": (0x7007, (0.0, 1.0, 5.0), 0.3)}


def _card_coords(centre):
    """Card-plane coordinates (m) of every pixel-centre ray's hit on the fronto-parallel plane z = centre[2]."""
    W, H = SIZE
    u, v = np.meshgrid(np.arange(W, dtype=np.float64), np.arange(H, dtype=np.float64))
    return centre[2] * (u - K[0, 2]) / K[0, 0] - centre[0], centre[2] * (v - K[1, 2]) / K[1, 1] - centre[1]


def card_mask(centre, radius: float, threshold: float) -> np.ndarray:
    """(H, W) bool: pixel-centre rays meeting the fronto-parallel card where max(0, 1 - r / radius) >= threshold
    (threshold 0: the whole square of half size `radius`)."""
    x, y = _card_coords(centre)
    inside = (np.abs(x) <= radius) & (np.abs(y) <= radius)
    return inside & (np.clip(1.0 - np.hypot(x, y) / radius, 0.0, 1.0) >= threshold)


def on_edge(centre, radius: float, threshold: float, eps: float = 1e-9) -> np.ndarray:
    """(H, W) bool: rays whose closed-form answer is a tie (a square edge or alpha == threshold, within eps):
    float32 shading decides them either way."""
    x, y = _card_coords(centre)
    if threshold > 0:
        return np.abs(1.0 - np.hypot(x, y) / radius - threshold) < eps
    ax, ay = np.abs(x), np.abs(y)
    return ((np.abs(ax - radius) < eps) & (ay <= radius + eps)) | ((np.abs(ay - radius) < eps) & (ax <= radius + eps))


# ---- the policy document -------------------------------------------------------------------------------------

def test_default_policy_and_manifest_round_trip():
    assert parse_surface_policy(None, "s") == DEFAULT_POLICY == SurfacePolicy(0.5, "surface", "ignore")
    p = parse_surface_policy({"alpha_threshold": 1, "transmission": "see_through", "volumes": "surface"}, "s")
    assert p == SurfacePolicy(1.0, "see_through", "surface")
    assert policy_from_manifest({"method": {"surface_policy": p.manifest_block()}}) == p
    assert policy_from_manifest({"method": {}}) is None


@pytest.mark.parametrize("raw, field", [
    ({"alpha_threshold": 0}, "surface_policy.alpha_threshold"), ({"alpha_threshold": -0.1}, "surface_policy.alpha_threshold"),
    ({"alpha_threshold": 1.0001}, "surface_policy.alpha_threshold"),
    ({"alpha_threshold": True}, "surface_policy.alpha_threshold"),
    ({"transmission": "refract"}, "surface_policy.transmission"), ({"volumes": "fog"}, "surface_policy.volumes"),
    ({"hair": "ribbon"}, "surface_policy.hair"), ("glass", "surface_policy")])
def test_bad_policy_names_the_field(raw, field):
    with pytest.raises(RowbeamError) as info:
        parse_surface_policy(raw, "rig.json: sensors[0]")
    message = str(info.value)
    assert "\n" not in message and f"rig.json: sensors[0].{field}" in message


# ---- the coverage check on planted arrays --------------------------------------------------------------------

def _wall(H=40, W=60):
    """A wall over the whole image: labels valid everywhere, rgb coverage 1 everywhere."""
    return {"valid": np.ones((H, W), np.uint8), "rgb_coverage": np.ones((H, W), np.float32)}


def _status(manifest, arrays) -> dict:
    out = {}
    check_label_coverage(manifest, arrays, lambda name, ok, msg, severity=None, **v: out.update(
        {name: ("pass" if ok else ("warn" if severity == "warn" else "fail"), v)}))
    return out["label_coverage"]


def test_coverage_check_passes_a_wall_and_an_antialiased_silhouette():
    a = _wall()
    assert _status({}, a) == ("pass", {"hole_pixels": 0, "phantom_pixels": 0, "judged_pixels": 2400,
                                       "policy_pixels": 0, "radius_px": 1})
    # an object whose right edge lies at u = 30.3: labels (pixel centres) valid for u <= 30, rgb partial at 30, 31
    a["valid"][:, 31:] = 0
    a["rgb_coverage"][:, 31:] = 0.0
    a["rgb_coverage"][:, 30] = 0.8
    a["rgb_coverage"][:, 31] = 1.0          # few rgb samples: the pixel beyond the edge may read fully covered
    assert _status({}, a)[0] == "pass"


def test_planted_one_pixel_hole_in_a_wall_fails():
    a = _wall()
    a["valid"][20, 30] = 0
    status, values = _status({}, a)
    assert status == "fail" and values["hole_pixels"] == 1


def test_phantom_surface_where_rgb_saw_nothing_fails_and_policy_pixels_are_not_judged():
    a = _wall()
    a["rgb_coverage"][5:15, 5:15] = 0.0
    status, values = _status({}, a)
    assert status == "fail" and values["phantom_pixels"] == 8 * 8
    a["policy_mask"] = np.zeros((40, 60), np.uint8)
    a["policy_mask"][4:16, 4:16] = 1        # declared: a transparent surface decided these pixels
    assert _status({}, a)[0] == "pass"
    d = coverage_disagreement(a["valid"], a["rgb_coverage"], a["policy_mask"], 1)
    assert not d["judged"][4:16, 4:16].any()


def test_missing_coverage_is_a_warning():
    assert _status({}, {"valid": np.ones((4, 4), np.uint8)})[0] == "warn"


# ---- closed-form scene, exported with camera, LiDAR and radar -------------------------------------------------

POLICIES = {"default": None, "see_through": {"alpha_threshold": 0.2, "transmission": "see_through",
                                             "volumes": "surface"}}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{policy name: bundle folder} of the surface scene, event 0 of every sensor; "view_layer_0": the camera of the
    default policy on the same scene saved with its view layer Alpha Threshold at 0."""
    d = tmp_path_factory.mktemp("surfaces")
    code = scene_script("surface_scenes", "surfaces",
                        "for name, policy in json.loads(sys.argv[2]).items():\n"
                        "    rig = surface_scenes.rig(policy=policy)\n"
                        "    open(sys.argv[1][:-6] + '.' + name + '.rig.json', 'w').write(json.dumps(rig))\n"
                        "import bpy\nfor vl in bpy.context.scene.view_layers:\n    vl.pass_alpha_threshold = 0.0\n"
                        "common.save(sys.argv[1][:-6] + '_vl0.blend')\n")
    blend = d / "s.blend"
    build_blend(code, blend, json.dumps(POLICIES))
    out = {}
    for name, scene in [(name, blend) for name in POLICIES] + [("view_layer_0", d / "s_vl0.blend")]:
        out[name] = d / name
        rig = d / f"s.{'default' if name == 'view_layer_0' else name}.rig.json"
        export_first_event(scene, rig, out[name], *([] if name in POLICIES else ["--sensors", "camera_front"]))
    return out


def test_labels_ignore_the_view_layer_alpha_threshold(exported):
    """The policy sets the threshold: a user's view-layer Alpha Threshold of 0 (every layer gets the data passes:
    without the policy the card's whole 4900 px square, 3927 px of cut-out included) changes no label."""
    _, a, _ = _camera(exported["default"])
    _, b, _ = _camera(exported["view_layer_0"])
    for name in ("valid", "instance_id", "camera_z", "normal_geometric", "policy_mask"):
        assert np.array_equal(a[name], b[name], equal_nan=name not in ("valid", "instance_id", "policy_mask")), name


def _camera(bundle):
    manifest, a = load_event(bundle / "events" / "camera_front" / "000000")
    ids = {o["render_index"]: o["id"] for o in manifest["objects"]}
    object_id = np.vectorize(lambda i: ids.get(int(i), 0))(a["instance_id"])
    return manifest, a, object_id


def test_default_policy_labels_match_the_closed_form(exported):
    manifest, a, oid = _camera(exported["default"])
    assert manifest["method"]["surface_policy"]["alpha_threshold"] == 0.5
    assert int((a["valid"] == 0).sum()) == 0                       # before the policy: 2839 holes in this image
    card = card_mask(OBJECTS["leaf_card"][1], 0.7, 0.5)
    glass = card_mask(OBJECTS["glass_pane"][1], 0.5, 0.0)
    grid = card_mask(OBJECTS["gn_grid"][1], 0.5, 0.0)              # geometry nodes output without a material
    assert card.sum() == 973 and glass.sum() == 4489 and grid.sum() == 33 * 33
    hair = oid == 0x7007                                           # thin tubes: checked on their own below
    assert not (hair & ~card_mask(OBJECTS["hair"][1], 0.31, 0.0)).any() and hair.sum() > 200
    expected = np.where(glass, 0x7005, np.where(card, 0x7004, np.where(grid, 0x7006, 0x7001)))
    assert int(((oid != expected) & ~hair).sum()) == 0             # decal (alpha 0.3) and fog cube: the wall
    z = np.where(glass, 3.0, np.where(card, 4.0, np.where(grid, 6.0, 8.0)))
    assert np.abs(a["camera_z"] - z)[~hair].max() < 1e-5
    decal = card_mask(OBJECTS["decal"][1], 0.6125, 0.0)
    assert decal.sum() == 49 * 49 and a["policy_mask"][decal].all() and a["policy_mask"][glass].all()


def test_see_through_policy_labels_match_the_closed_form(exported):
    """alpha_threshold 0.2: the decal (alpha 0.3) is a surface, the card a disc r <= 0.8 R; the glass pane shows the
    wall; volumes "surface": the cube's faces."""
    manifest, a, oid = _camera(exported["see_through"])
    assert manifest["method"]["surface_policy"]["transmission"] == "see_through"
    card = card_mask(OBJECTS["leaf_card"][1], 0.7, 0.2)
    decal = card_mask(OBJECTS["decal"][1], 0.6125, 0.0)
    tie = on_edge(OBJECTS["leaf_card"][1], 0.7, 0.2)               # alpha == 0.2 exactly on 4 pixel centres
    assert card.sum() == 2450 and decal.sum() == 49 * 49 and tie.sum() == 4
    fog = oid == 0x7003
    assert int((a["valid"] == 0).sum()) == 0
    grid = card_mask(OBJECTS["gn_grid"][1], 0.5, 0.0)
    expected = np.where(card, 0x7004, np.where(decal, 0x7002, np.where(grid, 0x7006, 0x7001)))
    skip = fog | tie | (oid == 0x7007)
    assert int(((oid != expected) & ~skip).sum()) == 0
    assert int(((oid != expected) & tie).sum()) <= 4
    z = np.where(card, 4.0, np.where(decal, 5.0, np.where(grid, 6.0, 8.0)))
    assert np.abs(a["camera_z"] - z)[~skip].max() < 1e-5
    assert 2401 < fog.sum() < 4000                                 # the cube: front face z = 4.4, sides to 5.6
    assert a["camera_z"][fog].min() > 4.4 - 1e-5 and a["camera_z"][fog].max() < 5.6 + 1e-5


def test_hair_curves_are_labelled_with_the_declared_normals(exported):
    """A Curves object without a material (16 hairs of radius 1 cm at z = 5): labelled with its id, camera_z on the
    tube (|z - 5| <= 0.01), normal_geometric = the reversed ray direction (Cycles gives a curve
    no face normal), normal_shading = the tube's normal, perpendicular to the hair (along camera y)."""
    _, a, oid = _camera(exported["default"])
    hair = oid == 0x7007
    W, H = SIZE
    u, v = np.meshgrid(np.arange(W, dtype=np.float64), np.arange(H, dtype=np.float64))
    d = np.stack([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], np.ones_like(u)], -1)
    d /= np.linalg.norm(d, axis=-1, keepdims=True)
    assert np.abs(a["normal_geometric"][hair] + d[hair]).max() < 1e-6
    assert np.abs(a["normal_shading"][hair][:, 1]).max() < 1e-4           # no component along the hair
    z = a["camera_z"][hair]
    assert np.abs(z - 5.0).max() <= 0.01 + 1e-5                             # on the tube (measured: 4.9997..5.0005)


def test_labels_agree_with_rgb_coverage_and_rgb_is_policy_free(exported):
    for name, bundle in exported.items():
        if name not in POLICIES:
            continue
        report = json.loads((bundle / "events" / "camera_front" / "000000" / "qa_report.json").read_text())
        entry = next(c for c in report["checks"] if c["check"] == "label_coverage")
        assert entry["status"] == "pass" and entry["values"]["hole_pixels"] == 0, (name, entry)
        assert entry["values"]["phantom_pixels"] == 0
    _, a, _ = _camera(exported["default"])
    _, b, _ = _camera(exported["see_through"])
    assert np.array_equal(a["rgb"], b["rgb"]) and np.array_equal(a["rgb_coverage"], b["rgb_coverage"])


def test_lidar_and_radar_follow_the_policy(exported):
    for name in POLICIES:
        bundle = exported[name]
        for sensor in ("lidar_top", "radar_front"):
            manifest, a = load_event(bundle / "events" / sensor / "000000")
            ids = {o["render_index"]: o["name"] for o in manifest["objects"]}
            seen = {ids[int(i)] for i in np.unique(a["instance_id"]) if int(i)}
            default = name == "default"               # threshold 0.5: the decal (alpha 0.3) is passed; 0.2: a surface
            assert ("decal" in seen) != default and ("glass_pane" in seen) == default, (name, sensor, seen)
            assert ("fog_cube" in seen) == (name == "see_through"), (name, sensor, seen)
            assert manifest["method"]["surface_policy"]["decided_beams"] > 0
    _, radar = load_event(exported["default"] / "events" / "radar_front" / "000000")
    assert int((radar["valid"] == 0).sum()) == 0                    # every radar beam meets the wall or an object


def test_planted_label_hole_fails_label_coverage(exported, tmp_path):
    """valid, camera_z, range, normals and ids all say "nothing" at one pixel in the middle of the wall."""
    import shutil

    bundle = tmp_path / "b"
    shutil.copytree(exported["default"], bundle)
    event = bundle / "events" / "camera_front" / "000000"
    manifest, a = load_event(event)
    edits = {"valid": 0, "camera_z": np.nan, "range": np.nan, "normal_geometric": np.nan,
             "normal_shading": np.nan, "instance_id": 0, "semantic_id": 0}
    for name, value in edits.items():
        arr = a[name].copy()
        arr[150, 160] = value
        entry = manifest["modalities"][name]
        write_exr(event / entry["uri"], arr, entry["channels"], entry["dtype"])
        rehash(event, name)
    report, fails = failures(bundle)
    entry = next(c for e in report["events"] if "camera_front" in e["manifest"] for c in e["checks"]
                 if c["check"] == "label_coverage")
    assert entry["status"] == "fail" and entry["values"]["hole_pixels"] == 1
    assert {f["check"] for f in fails} == {"label_coverage"}      # every other invariant holds on the hole


def test_object_masks_are_geometry_where_the_policy_decided(tmp_path):
    """With object labels, the leaf card (nothing in front of it, so a candidate for amodal = modal) keeps its whole
    4900 px card as amodal mask while its label is the 973 px disc of alpha >= 0.5; the decal (passed at 0.5) has
    its 2401 px square and no visible pixel; the event publishes with objects:rasterisation passing (taking the
    card's label as its amodal mask quarantined it: 3927 px off the rasterised asset)."""
    code = scene_script("surface_scenes", "surfaces",
                        "rig = surface_scenes.rig()\nrig['sensors'] = rig['sensors'][:1]\n"
                        "rig['sensors'][0]['object_labels'] = True\n"
                        "open(sys.argv[1][:-6] + '.rig.json', 'w').write(json.dumps(rig))\n")
    build_blend(code, tmp_path / "s.blend")
    export_first_event(tmp_path / "s.blend", tmp_path / "s.rig.json", tmp_path / "b")
    event = tmp_path / "b" / "events" / "camera_front" / "000000"
    manifest, a = load_event(event)
    masks = np.unpackbits(a["amodal_masks"], axis=-1, bitorder="big")[..., :SIZE[0]].astype(bool)
    objects = {o["name"]: o for o in manifest["object_labels"]["objects"]}
    card, decal = objects["leaf_card"], objects["decal"]
    assert masks[card["mask_index"]].sum() == 70 * 70 and (a["instance_id"] == card["instance_id"]).sum() == 973
    assert (masks[decal["mask_index"]] == card_mask(*OBJECTS["decal"][1:], 0.0)).all()
    assert (a["instance_id"] == decal["instance_id"]).sum() == 0
    report = json.loads((event / "qa_report.json").read_text())
    assert {c["check"]: c["status"] for c in report["checks"]}["objects:rasterisation"] == "pass"


def test_report_overlay_marks_policy_pixels_and_holes():
    from rowbeam.report.overlays import HOLE_COLOUR, surface_policy_overlay

    a = _wall(8, 10)
    a["camera_z"] = np.full((8, 10), 8.0, np.float32)
    a["policy_mask"] = np.zeros((8, 10), np.uint8)
    a["policy_mask"][:, :3] = 1
    hole = np.zeros((8, 10), bool)
    hole[4, 6] = True
    img = surface_policy_overlay(a, hole)
    assert (img[4, 6] == HOLE_COLOUR).all()
    assert (img[:, :3, 0] > img[:, :3, 1]).all() and (img[:, 3:, 0] == img[:, 3:, 1])[~hole[:, 3:]].all()


@pytest.mark.parametrize("sensor, unit", [("lidar_top", "firings"), ("radar_front", "chirps")])
def test_planted_beam_hole_fails_beam_coverage(exported, tmp_path, sensor, unit):
    """One return dropped (valid 0, range and normal NaN, ids 0) on a beam whose BVH cast met the wall; the clean
    export passes the check with every verified beam judged."""
    import shutil

    from rowbeam.check.coverage_checks import BEAM_LISTS

    event = exported["default"] / "events" / sensor / "000000"
    report = json.loads((event / "qa_report.json").read_text())
    entry = next(c for c in report["checks"] if c["check"] == "beam_coverage")
    assert entry["status"] == "pass" and entry["values"]["judged_beams"] > 0, entry
    bundle = tmp_path / "b"
    shutil.copytree(exported["default"], bundle)
    event = bundle / "events" / sensor / "000000"
    manifest, a = load_event(event)
    key, hits, _ = BEAM_LISTS[unit]
    row = manifest["method"]["verification"][unit][0]
    k, b = row[key], row[hits][len(row[hits]) // 2]
    for name, value in {"valid": 0, "range": np.nan, "normal_geometric": np.nan, "cos_incidence": np.nan,
                        "instance_id": 0, "semantic_id": 0}.items():
        if name in a and a[name].shape[:2] == a["valid"].shape:
            arr = a[name].copy()
            arr[k, b] = value
            entry = manifest["modalities"][name]
            write_exr(event / entry["uri"], arr, entry["channels"], entry["dtype"])
            rehash(event, name)
    report, fails = failures(bundle)
    entry = next(c for e in report["events"] if sensor in e["manifest"] for c in e["checks"]
                 if c["check"] == "beam_coverage")
    assert entry["status"] == "fail" and entry["values"]["hole_beams"] == 1, entry
    assert "beam_coverage" in {f["check"] for f in fails}
