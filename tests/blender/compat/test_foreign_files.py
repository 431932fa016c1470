"""Scenes from elsewhere: the running example built and saved by an older Blender (its file format) exports with
this one to labels bit-identical to the same scene built here; a scene set up for EEVEE renders with Cycles after
one note; (linked libraries: tests/blender/objects/test_linked_library.py)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, run_python
from tests.helpers import load_event

OLD = "4.2"
LABELS = ("instance_id", "semantic_id", "valid", "camera_z", "range", "normal_geometric", "normal_shading",
          "row_T_world_camera", "row_time_ns", "amodal_masks", "amodal_masks_canvas", "object_row_T_world_object")


def _old_python() -> Path:
    """The Python of the Blender OLD matrix venv (tools/test_matrix.sh builds it before `make test`)."""
    return Path(os.environ.get("ROWBEAM_OLD_BPY_PYTHON", REPO / f".venv-{OLD}" / "bin" / "python"))


def _build_and_export(python, folder: Path) -> Path:
    import subprocess

    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([str(python), "-m", "rowbeam", "scenes", "running_example", str(folder / "x.blend"),
                        "--scale", "8", "--rgb-samples", "2"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_python("render_export.py", folder / "x.blend", "--rig", folder / "x.rig.json", "--out", folder / "b",
                   "--sensors", "camera_front", "--first-event", 30, "--count", 1, "-q")
    assert r.returncode == 0, r.stderr
    (event,) = (folder / "b").glob("events/*/*")
    return event


def test_running_example_saved_by_an_older_blender_gives_identical_labels(tmp_path):
    import sys

    import bpy

    old = _old_python()
    if not old.exists():
        pytest.skip(f"no Blender {OLD} venv ({old}; tools/test_matrix.sh builds it)")
    here = _build_and_export(sys.executable, tmp_path / "here")
    there = _build_and_export(old, tmp_path / "old")
    mh, ah = load_event(here)
    mo, ao = load_event(there)
    assert mo["build"]["blender_version"] == bpy.app.version_string          # exported by this Blender
    assert [(o["name"], o["id"], o["class_id"]) for o in mo["objects"]] == \
        [(o["name"], o["id"], o["class_id"]) for o in mh["objects"]]
    differ = [k for k in LABELS if not np.array_equal(np.asarray(ah[k]), np.asarray(ao[k]), equal_nan=True)]
    assert differ == [], differ


def test_eevee_scene_renders_with_cycles_after_one_note(tmp_path):
    import bpy

    from rowbeam.blender.scenes import calibration, common

    truth, rig = calibration.fronto_plane(16)
    engines = [e.identifier for e in bpy.context.scene.render.bl_rna.properties["engine"].enum_items]
    eevee = next(e for e in engines if e.startswith("BLENDER_EEVEE"))
    bpy.context.scene.render.engine = eevee
    blend = common.save(tmp_path / "eevee.blend", rig)
    r = run_python("render_export.py", blend, "--rig", blend.with_suffix(".rig.json"), "--out", tmp_path / "b",
                   "--first-event", 1, "--count", 1, "-q")
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("rowbeam: note:") and eevee in lines[0] and "Cycles" in lines[0], \
        r.stderr
    (event,) = (tmp_path / "b").glob("events/*/*")
    m, a = load_event(event)
    assert a["valid"].all() and np.abs(a["camera_z"] - 8.0).max() < 1e-4          # the plane at camera z 8
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    assert bpy.context.scene.render.engine == eevee                                # the .blend is unchanged
