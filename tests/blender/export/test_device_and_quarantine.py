"""Render device selection (GPU mocked: none here) and quarantine of events that fail hard QA."""
from __future__ import annotations

import json
from types import SimpleNamespace

import bpy
import pytest

from rowbeam.model import qa_profile
from rowbeam.util.errors import RowbeamError
from rowbeam.blender.cycles.cycles_setup import select_device
from rowbeam.blender.export.run import ExportRequest, plan_export, run_export
from rowbeam.blender.compat.scene_patch import ScenePatch
from rowbeam.blender.scenes import calibration, common

from tests.conftest import REPO, run_python


class FakeCyclesPrefs:
    """Stand-in for Cycles preferences on a machine with one CUDA GPU (no GPU can run here)."""

    def __init__(self, devices):
        self._devices = devices
        self.devices = []
        self.compute_device_type = "NONE"

    def __setattr__(self, name, value):
        if name == "compute_device_type" and value not in ("NONE", "CUDA"):
            raise TypeError(f"enum {value!r} not found")
        object.__setattr__(self, name, value)

    def refresh_devices(self):
        self.devices = [d for d in self._devices if d.type == self.compute_device_type]


def test_auto_device_prefers_a_gpu():
    scene = bpy.context.scene
    gpu = SimpleNamespace(type="CUDA", name="Fake H200", use=False)
    with ScenePatch() as p:
        desc = select_device(scene, p, "auto", FakeCyclesPrefs([gpu]))
        assert desc == "GPU:CUDA:Fake H200" and scene.cycles.device == "GPU" and gpu.use
    assert scene.cycles.device == "CPU"


def test_auto_falls_back_to_cpu_and_gpu_request_fails_clearly():
    scene = bpy.context.scene
    with ScenePatch() as p:
        assert select_device(scene, p, "auto", FakeCyclesPrefs([])) == "CPU"
        with pytest.raises(RowbeamError, match="no GPU compute device"):
            select_device(scene, p, "gpu", FakeCyclesPrefs([]))


def test_gpu_request_without_gpu_is_one_line_error(tmp_path):
    _, rig = calibration.fronto_plane(scale=16)
    blend = common.save(tmp_path / "a.blend", rig)
    r = run_python(REPO / "render_export.py", blend, "--rig", blend.with_suffix(".rig.json"), "--out", tmp_path / "out",
                   "--device", "gpu")
    assert r.returncode == 2 and "rowbeam export: error: --device gpu: no GPU compute device" in r.stderr
    assert not (tmp_path / "out").exists()


def test_hard_qa_failure_is_quarantined_with_evidence(tmp_path, monkeypatch):
    _, rig = calibration.fronto_plane(scale=16)
    rig["sensors"][0]["rgb_samples"] = 0
    blend = common.save(tmp_path / "a.blend", rig)
    monkeypatch.setattr(qa_profile, "VERIFY_MAX_RANGE_ERROR_M", -1.0)   # every event now fails exact_reference
    summary = run_export(plan_export(ExportRequest(out=tmp_path / "out", blend=blend,
                                                   rig=blend.with_suffix(".rig.json"), count=1)))
    assert not summary["published"] and len(summary["quarantined"]) == 1
    q = tmp_path / "out" / "quarantine" / "events" / "camera_front" / "000000"
    report = json.loads((q / "qa_report.json").read_text())
    assert report["status"] == "fail"
    assert any(c["check"] == "exact_reference" and c["status"] == "fail" for c in report["checks"])
    assert (q / "manifest.json").is_file() and (q / "camera_z.exr").is_file()
    assert not (tmp_path / "out" / "events").exists()


def test_lidar_renders_on_cpu_when_the_gpu_backend_has_no_osl(tmp_path):
    """Custom OSL cameras run on the GPU only with OptiX; on CUDA/HIP/Metal the sweep renders on the CPU."""
    from rowbeam.blender.scenes import lidar_calibration

    _, rig = lidar_calibration.box_room(steps=16)
    blend = common.save(tmp_path / "room.blend", rig)
    plan = plan_export(ExportRequest(out=tmp_path / "out", blend=blend, rig=blend.with_suffix(".rig.json"), count=1))
    plan.context.device = "GPU:CUDA:Fake H200"           # as if select_device had found a CUDA-only GPU
    summary = run_export(plan)
    manifest = json.loads((tmp_path / "out" / "events" / "lidar_top" / "000000" / "manifest.json").read_text())
    assert summary["published"]
    assert manifest["build"]["render_device"].startswith("CPU (custom OSL camera; GPU:CUDA:Fake H200")
