"""Associations paired by device timestamps: a camera whose clock runs 5 ms ahead of the master clock, paired with
an ideal-clock LiDAR by the stamps each sensor writes, gives pairs within the device tolerance whose true
(master-clock) skew is ~5 ms; the audit reports it, and under-reporting it fails the associations check."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rowbeam.bundle.associations import associate_bundle
from rowbeam.check.runner import check_bundle

OFFSET_NS = 5_000_000
MAX_SKEW_US = 800                      # firings are 1/640 s apart: every row has one within 782 us


def _camera_and_lidar(scale):
    from rowbeam.blender.scenes import calibration, common

    truth, rig = calibration.fronto_plane(scale=scale)
    rig["sensors"][0].update(rgb_samples=0, clock={"offset_ns": OFFSET_NS})
    common.add_empty("lidar_mount", (0, 0, 1))
    rig["sensors"] += common.lidar_rig("lidar_top", "lidar_mount", azimuth_steps=64)["sensors"]
    return truth, rig


@pytest.fixture(scope="module")
def pair(exports, tmp_path_factory):
    import shutil

    e = exports("clocked_camera_and_lidar", _camera_and_lidar, scale=16,
                events={"camera_front": (3, 1), "lidar_top": (1, 1)})
    root = tmp_path_factory.mktemp("device_assoc") / "b"
    shutil.copytree(e.bundle, root)
    return root


def _check(report) -> list[dict]:
    return [c for c in report["bundle"]["checks"] if c["check"].startswith("associations:")]


def test_device_pairing_reports_the_true_skew(pair):
    _, master = associate_bundle(pair, MAX_SKEW_US)
    path, device = associate_bundle(pair, MAX_SKEW_US, "device")
    assert Path(path).name == f"device_max_skew_{MAX_SKEW_US * 1000}ns.json" and device["pair_by"] == "device"
    m_bands = [b for p in master["pairs"] for b in p["bands"]]
    d_bands = [b for p in device["pairs"] for b in p["bands"]]
    assert m_bands and d_bands
    assert max(b["max_abs_skew_ns"] for b in m_bands) <= MAX_SKEW_US * 1000
    assert max(b["max_abs_skew_ns"] for b in d_bands) <= MAX_SKEW_US * 1000
    # the true skew is the camera's 5 ms offset, give or take the device skew: far beyond the tolerance
    true = np.array([b["max_abs_true_skew_ns"] for b in d_bands])
    assert (np.abs(true - OFFSET_NS) <= MAX_SKEW_US * 1000).all() and true.max() > 4_000_000
    for b in d_bands:       # recomputed by hand: master skew of the band's first row = camera time - partner time
        assert b["max_abs_true_skew_ns"] >= abs(b["camera_time_ns"][0] - b["other_time_ns"])
    report = check_bundle(pair)
    assert report["status"] == "pass"
    checks = {c["check"]: c for c in _check(report)}
    assert checks[f"associations:max_skew_{MAX_SKEW_US * 1000}ns.json"]["status"] == "pass"
    dev = checks[f"associations:{Path(path).name}"]
    assert dev["status"] == "pass" and dev["values"]["worst_true_skew_ns"] == int(true.max())
    assert "beyond the 800000 ns tolerance" in dev["message"]


def test_under_reported_true_skew_fails(pair, tmp_path):
    import shutil

    root = tmp_path / "b"
    shutil.copytree(pair, root)
    path, doc = associate_bundle(root, MAX_SKEW_US, "device")
    doc["pairs"][0]["bands"][0]["max_abs_true_skew_ns"] = doc["pairs"][0]["bands"][0]["max_abs_skew_ns"]
    Path(path).write_text(json.dumps(doc))
    bad = [c for c in _check(check_bundle(root)) if c["check"] == f"associations:{Path(path).name}"]
    assert bad[0]["status"] == "fail"
