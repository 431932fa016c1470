"""Regressions found from outside that need a real export (Cycles through bpy), each failing before its fix."""
from __future__ import annotations

import copy
import json
import math

import pytest

from tests.helpers import failures
from tests.check.test_checker_faults import _copy, _edit_manifest

FISHEYE_85 = {"model": "opencv_fisheye", "D": [-0.02, 0.01, -0.004, 0.0005], "fov_deg": 85.0,
              "K": [[55.0, 0.0, 79.5], [0.0, 55.0, 44.5], [0.0, 0.0, 1.0]]}


def _fisheye_85_board(scale=8):
    """The lens marker board at 160x90 through an 85 deg fisheye (f = 55 px: the image corners lie beyond 42.5 deg)."""
    from rowbeam.blender.scenes import lens_scenes

    truth, rig = lens_scenes.marker_board("opencv_fisheye", scale=scale)
    rig = copy.deepcopy(rig)
    rig["sensors"][0]["lens"] = dict(FISHEYE_85)
    return truth, rig


@pytest.fixture(scope="module")
def fisheye_85(exports):
    return exports("lens_board_fisheye_fov85", _fisheye_85_board)


def _status(root, name):
    report, _ = failures(root)
    return {c["status"] for e in report["events"] for c in e["checks"] if c["check"] == name}


def test_fisheye_below_180_deg_publishes(fisheye_85):
    """An 85 deg fisheye export is published (the in-line check uses the declared domain) and checks clean."""
    assert fisheye_85.summary["published"] and not fisheye_85.summary["quarantined"]
    report, fails = failures(fisheye_85.bundle)
    assert report["status"] == "pass", [(f["check"], f["message"]) for f in fails]
    m = json.loads((fisheye_85.event / "manifest.json").read_text())
    dom = m["calibration"]["distortion"]["valid_domain"]
    assert dom["fov_deg"] == 85.0 and dom["theta_max_rad"] == pytest.approx(math.radians(42.5))
    assert _status(fisheye_85.bundle, "lens_model") == {"pass"}


def test_fisheye_planted_wrong_domain_fails(fisheye_85, tmp_path):
    """fov_deg 90 with theta_max left at 42.5 deg: lens_model fails; a consistent 90 deg domain: lens_rig fails."""
    root, ev = _copy(fisheye_85, tmp_path / "inconsistent")
    _edit_manifest(ev, lambda m: m["calibration"]["distortion"]["valid_domain"].update(fov_deg=90.0))
    assert "fail" in _status(root, "lens_model")
    root, ev = _copy(fisheye_85, tmp_path / "rig")
    _edit_manifest(ev, lambda m: m["calibration"]["distortion"]["valid_domain"].update(
        fov_deg=90.0, theta_max_rad=math.radians(45.0),
        distorted_radius_max=_theta_d(FISHEYE_85["D"], math.radians(45.0))))
    assert _status(root, "lens_model") == {"pass"}
    assert "fail" in _status(root, "lens_rig")


def _theta_d(D, theta):
    from rowbeam.model.lens import fisheye_theta_d

    return float(fisheye_theta_d(D, theta))


@pytest.mark.parametrize("scale", [8, 4])
def test_skinned_hinge_flow_is_published_and_its_fold_not_round_trip_compared(exports, scale):
    """The two-bone bar (tip bone at 3 rad/s): its flow is exact, so the pair is published; the fold of the flow
    field at the hinge is not round-trip compared (flow_cycle_consistency reports those pixels) and every other
    mutually visible pixel returns within 0.1 px."""
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export
    from rowbeam.blender.scenes import deform_scenes as ds

    e = exports(f"deforming_actors_hinge_s{scale}", ds.deforming_actors, scale=scale, omega=3.0,
                events={"camera_front": (0, 2)})
    flow = e.bundle / "flows" / "camera_front" / "000000-000001"
    if not flow.exists():
        summary = run_export(plan_export(ExportRequest(out=e.bundle, blend=e.blend, rig=e.rig, first_event=0,
                                                       count=2, flow=True, device="cpu")))
        assert not summary["quarantined"], summary["quarantined"]
    assert flow.exists() and not (e.bundle / "quarantine").exists()
    report, fails = failures(e.bundle)
    assert not fails, [(f["check"], f["message"]) for f in fails]
    (cycle,) = [c for ev in report["events"] for c in ev["checks"] if c["check"] == "flow_cycle_consistency"]
    assert cycle["status"] == "pass" and cycle["values"]["non_smooth_pixels"] > 0
