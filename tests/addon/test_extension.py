"""The Blender extension: build the zip, install it into bpy, drive it through its operators, export from
the UI operator and headlessly from the same saved .blend, compare, uninstall cleanly."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from rowbeam.blender.scenes import calibration, common

from tests.conftest import REPO, run_python

sys.path.insert(0, str(REPO / "tools"))
import build_extension  # noqa: E402


@pytest.fixture(scope="module")
def extension_zip(tmp_path_factory):
    return build_extension.build(["linux-x64"], tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def session(extension_zip, tmp_path_factory):
    d = tmp_path_factory.mktemp("ui")
    calibration.fronto_plane(scale=16)
    common.add_empty("lidar_mount", (10.0, 2.0, 1.0))
    import bpy

    stored = common.camera_rig("stored_cam", "camera_front")       # as a script would store it
    bpy.context.scene["rowbeam_rig"] = json.dumps(stored)
    blend = common.save(d / "scene.blend")
    (d / "specs").mkdir()
    args = {"blend": str(blend), "zip": str(extension_zip), "out_ui": str(d / "out_ui"), "rig_out": str(d / "rig.json"),
            "spec_out": str(d / "specs" / "dataset.json")}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["BLENDER_USER_RESOURCES"] = str(d / "user")              # isolated extension repository
    recorder = d / "browser.sh"                                    # the "browser": records the URLs it is given
    recorder.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$1\" >> {d / 'opened.txt'}\n")
    recorder.chmod(0o755)
    env["BROWSER"] = str(recorder)
    r = run_python(REPO / "tests" / "extension_session.py", json.dumps(args), cwd=d, env=env, timeout=900)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(line[len("RESULT"):]), blend, d


def test_zip_is_valid_and_bundles_its_dependencies(extension_zip):
    import zipfile

    names = zipfile.ZipFile(extension_zip).namelist()
    assert "blender_manifest.toml" in names and "__init__.py" in names
    wheels = {n.split("/")[1].split("-")[0].lower() for n in names if n.startswith("wheels/")}
    assert {"openexr", "jsonschema", "referencing", "rpds_py", "attrs", "rowbeam_core"} <= wheels


def test_zip_carries_wheels_for_every_python_blender_embeds(extension_zip):
    """cp311 (Blender 4.2-5.0) and cp313 (5.1-5.3) binary wheels, all listed in the manifest, from which
    Blender derives the extension's Python versions (bpy 5.3 refuses an all-cp311 extension)."""
    import tomllib
    import zipfile

    z = zipfile.ZipFile(extension_zip)
    manifest = tomllib.loads(z.read("blender_manifest.toml").decode())
    listed = {w.rsplit("/", 1)[1] for w in manifest["wheels"]}
    assert listed == {n.split("/", 1)[1] for n in z.namelist() if n.startswith("wheels/") and n.endswith(".whl")}
    for dist in ("openexr", "rpds_py"):
        tags = {w.split("-")[2] for w in listed if w.lower().startswith(dist + "-")}
        assert tags == {"cp311", "cp313"}, (dist, tags)
    assert manifest["blender_version_min"] == "4.2.0" and manifest["blender_version_max"] == "5.4.0"
    blender_ext = Path(build_extension.blender_ext()).parent
    sys.path.insert(0, str(blender_ext))
    from blender_ext import python_versions_from_wheels     # Blender's own reading of the wheel tags

    assert python_versions_from_wheels(sorted(listed)) >= {(3, 11), (3, 13)}


def test_extension_runs_its_bundled_code(session):
    res, _, d = session
    assert str(d / "user") in res["contracts_file"]           # not the checkout: the wheel inside the zip


def test_sensors_and_labels_through_the_ui(session):
    res, _, d = session
    assert res["adopted"] == ["stored_cam"]             # a rig stored without the add-on becomes editable
    assert res["order_after_move"] == ["lidar_top", "camera_front"]
    rig = res["stored_rig"]
    assert [s["id"] for s in rig["sensors"]] == ["camera_front", "lidar_top"]
    cam = rig["sensors"][0]
    assert (cam["readout_ns"], cam["exposure_ns"], cam["rate_hz"]) == (12_000_000, 4_000_000, 30.0)
    assert json.loads((d / "rig.json").read_text())["sensors"] == rig["sensors"]      # rig file export
    assert res["id_after_rename"] == res["id_before"]                 # renaming keeps the id
    assert res["plane_id_after_dup"] == res["id_before"]              # the original keeps it
    assert res["dup_id"] != res["id_before"]                          # the duplicate gets a new one


def test_ui_export_checks_clean(session):
    res, _, d = session
    assert res["export"] == ["FINISHED"]
    assert res["check_status"] == "pass", res["check_lines"]
    if tuple(res["blender"]) < (4, 5, 0):          # 4.2: the UI refuses the LiDAR in one line, names the minimum
        assert res["lidar_refused"].strip() == (f"Error: sensor 'lidar_top' (spinning_lidar) needs Blender >= 4.5 "
                                                f"(found {'.'.join(map(str, res['blender']))})")
    else:
        assert "lidar_refused" not in res
    assert Path(res["report_path"]).is_file()
    assert Path(res["report_html"]).is_file() and res["report_html"].endswith("out_ui_report/index.html")
    assert res["report_status"] == "pass"


def test_check_panel_shows_the_report_summary_and_opens_the_report(session):
    """The report operator opens index.html in the browser (Python's webbrowser through $BROWSER, a recorder here)
    and the Check panel draws its summary and the report's path."""
    res, _, d = session
    assert (d / "opened.txt").read_text().splitlines() == [Path(res["report_html"]).as_uri()]
    labels = res["check_panel_labels"]
    assert labels[0].startswith("report: PASS — ") and labels[0].endswith(" failed QA, 0 quarantined")
    n = int(labels[0].split("— ")[1].split(" folder")[0])
    doc = json.loads((Path(res["report_html"]).parent / "report.json").read_text())
    folders = 2 if tuple(res["blender"]) >= (4, 5, 0) else 1     # 4.2 refuses the LiDAR: the camera event only
    assert n == len(doc["bundles"][0]["items"]) >= folders
    assert f"Visual report: {res['report_html']}" in labels


def test_export_panel_writes_the_dataset_spec(session):
    """The Export panel writes a rowbeam/dataset@1 spec for the open .blend (path relative to the spec) that
    `rowbeam plan` accepts as it is: scenario, lineage group and split as the panel set them."""
    from rowbeam.farm.dataset import assign_splits, load_spec

    res, blend, d = session
    assert res["dataset_spec_op"] == ["FINISHED"]
    spec = json.loads((d / "specs" / "dataset.json").read_text())
    entry = spec["scenarios"][0]
    assert entry == {"blend": "../scene.blend", "scenario": "ui_test", "lineage_group": "ui_test/group",
                     "split": "val", **({} if tuple(res["blender"]) >= (4, 5, 0) else {"sensors": ["camera_front"]}),
                     "events": {"first": 1, "count": 1}}
    loaded = load_spec(d / "specs" / "dataset.json")
    assert loaded.scenarios[0].blend == blend.resolve() and assign_splits(loaded) == {"ui_test/group": "val"}


def test_headless_export_of_the_saved_file_is_identical(session):
    """render_export.py without --rig reads the rig stored in the .blend; same events, same manifests."""
    res, blend, d = session
    lidar = tuple(res["blender"]) >= (4, 5, 0)       # 4.2 has no custom camera: the camera alone
    r = run_python(REPO / "render_export.py", blend, "--out", d / "out_cli", "--first-event", "1", "--count", "1",
                   "--device", "cpu", *([] if lidar else ["--sensors", "camera_front"]))
    assert r.returncode == 0, r.stderr
    ui = sorted((d / "out_ui" / "events").glob("*/*/manifest.json"))
    cli = sorted((d / "out_cli" / "events").glob("*/*/manifest.json"))
    assert [p.relative_to(d / "out_ui") for p in ui] == [p.relative_to(d / "out_cli") for p in cli]
    assert len(ui) == (2 if lidar else 1)
    for a, b in zip(ui, cli, strict=True):
        ma, mb = json.loads(a.read_text()), json.loads(b.read_text())
        ma.pop("run"), mb.pop("run")                                   # declared run metadata: timings, host
        assert ma == mb, a
    assert {m["sha256"] for p in ui for m in json.loads(p.read_text())["modalities"].values()} == \
           {m["sha256"] for p in cli for m in json.loads(p.read_text())["modalities"].values()}


def test_panels_draw_what_exists(session):
    res, _, _ = session
    assert res["panels"] == ["ROWBEAM_PT_check", "ROWBEAM_PT_export", "ROWBEAM_PT_labels", "ROWBEAM_PT_main",
                             "ROWBEAM_PT_sensors"]
    assert res["panel_problems"] == []


def test_uninstall_leaves_nothing_registered(session):
    res, _, _ = session
    assert res["leftover_classes"] == [] and res["leftover_handlers"] == []
    assert not res["scene_attr"]
    assert not any("rowbeam" in a for a in res["addons"])
