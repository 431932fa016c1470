"""The production-like street (rowbeam/blender/scenes/street_surfaces.py): alpha-cut leaf cards, decals on a wall,
a glass shelter with people behind it, ground fog, a material-less Geometry Nodes point cloud and a hair-covered hedge,
exported with camera (object labels), LiDAR and radar under the default surface policy, then checked, reported and
adapted."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO, run_python
from tests.helpers import load_event

LEAF_HALF = (0.25, 0.15)


@pytest.fixture(scope="module")
def street(tmp_path_factory):
    d = tmp_path_factory.mktemp("street")
    code = ("import sys\nfrom rowbeam.blender.scenes import street_surfaces, common\n"
            "common.save(sys.argv[1], street_surfaces.street(scale=4))\n")
    blend = d / "street.blend"
    subprocess.run([sys.executable, "-c", code, str(blend)], cwd=REPO, check=True, capture_output=True)
    r = subprocess.run([sys.executable, str(REPO / "render_export.py"), str(blend), "--rig",
                        str(blend.with_suffix(".rig.json")), "--out", str(d / "b"), "--first-event", "0",
                        "--count", "1"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0 and "quarantined 0" in r.stdout, (r.stdout, r.stderr)
    return d / "b"


def test_street_checks_with_labels_where_the_rgb_saw_surfaces(street):
    r = run_python("-m", "rowbeam", "check", str(street), "--report", str(street.parent / "qa.json"))
    assert r.returncode == 0, r.stdout
    report = json.loads((street.parent / "qa.json").read_text())
    cam = next(e for e in report["events"] if "camera_front" in e["manifest"])
    entry = next(c for c in cam["checks"] if c["check"] == "label_coverage")
    assert entry["status"] == "pass" and entry["values"]["hole_pixels"] == entry["values"]["phantom_pixels"] == 0
    assert entry["values"]["policy_pixels"] > 10_000          # fog over the road, glass, decals, leaf cards


def test_leaf_card_labels_lie_inside_the_closed_form_leaf_mask(street):
    """Every pixel labelled with a leaf card hits its card plane inside the ellipse inscribed in the card (the
    alpha mask): card-local (x / 0.25)^2 + (y / 0.15)^2 <= 1 within float32, |z| ~ 0."""
    manifest, a = load_event(street / "events" / "camera_front" / "000000")
    K = np.array(manifest["calibration"]["K"])
    H, W = a["camera_z"].shape
    u, v = np.meshgrid(np.arange(W, dtype=np.float64), np.arange(H, dtype=np.float64))
    X = np.stack([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], np.ones_like(u)], -1) * a["camera_z"][..., None]
    leaves = [o for o in manifest["object_labels"]["objects"] if o["name"].startswith("leaf_")]
    labelled = outside = 0
    for o in leaves:
        sel = a["instance_id"] == o["instance_id"]
        T = np.linalg.inv(np.array(o["T_camera_object_reference"]))
        p = X[sel] @ T[:3, :3].T + T[:3, 3]
        labelled += int(sel.sum())
        outside += int(((p[:, 0] / LEAF_HALF[0]) ** 2 + (p[:, 1] / LEAF_HALF[1]) ** 2 > 1 + 1e-3).sum())
        assert np.abs(p[:, 2]).max(initial=0) < 1e-3
    assert labelled > 500 and outside == 0


def test_street_policy_decisions_and_returns(street):
    manifest, a = load_event(street / "events" / "camera_front" / "000000")
    names = {o["render_index"]: o["name"] for o in manifest["objects"]}
    seen = {names[int(i)] for i in np.unique(a["instance_id"]) if int(i)}
    assert "decal_0" not in seen and {"decal_1", "decal_2", "shelter_front", "point_cloud", "hedge_hair"} <= seen
    assert "fog" not in seen                                     # volumes: ignore
    for sensor in ("lidar_top", "radar_front"):
        m, _ = load_event(street / "events" / sensor / "000000")
        assert m["method"]["surface_policy"]["decided_beams"] > 0


@pytest.mark.parametrize("fmt", ["coco", "bop"])
def test_street_adapts_and_reports(street, fmt):
    out = street.parent / (f"{fmt}.json" if fmt == "coco" else fmt)
    r = run_python("-m", "rowbeam", "adapt", fmt, str(street), str(out))
    assert r.returncode == 0 and r.stdout.startswith("rowbeam adapt: wrote"), (r.stdout, r.stderr)
    if fmt == "bop":
        r = run_python("-m", "rowbeam", "report", str(street), "--out", str(street.parent / "report"))
        assert r.returncode in (0, 1), r.stderr
        overlay = street.parent / "report" / "img" / "bundle" / "events" / "camera_front" / "000000" / "surface_policy.png"
        assert overlay.stat().st_size > 0                            # where the policy decided, for a person to see
