"""A scene that animates a controller supplies command tracks (a JSON file named by the rig and a custom property
on an object); the export carries their command and application times into the state log, the checker passes
them, a planted command applied before it was issued fails command_track, and a bad track stops the export
with one line before anything is written."""
from __future__ import annotations

import hashlib
import json

import pytest

from rowbeam.model.command_track import COMMAND_PROPERTY, SCHEMA, SEMANTICS
from rowbeam.util.errors import RowbeamError

FILE_TRACK = {"schema": SCHEMA, "controller": "plane_z8", "commands": [
    {"name": "throttle", "command_ns": 0, "application_ns": 40_000_000, "value": 0.25}]}
PROPERTY_TRACK = {"schema": SCHEMA, "commands": [
    {"name": "steer", "command_ns": 5_000_000, "application_ns": 25_000_000, "value": [0.0, 0.1]}]}


PROPERTY_TEXT = json.dumps(PROPERTY_TRACK)


def _scene(tmp_path, file_track=FILE_TRACK, prop=PROPERTY_TEXT):
    from rowbeam.blender.scenes import calibration, common

    _, rig = calibration.fronto_plane(scale=16)
    rig["sensors"][0]["rgb_samples"] = 0
    controller = common.add_empty("controller")
    if prop is not None:
        controller[COMMAND_PROPERTY] = prop
    rig["state_log"] = {"ego_object": rig["sensors"][0]["object"], "command_tracks": ["throttle.json"]}
    blend = common.save(tmp_path / "cmd.blend", rig)
    (tmp_path / "throttle.json").write_text(json.dumps(file_track))
    return blend


def _plan(tmp_path, blend):
    from rowbeam.blender.export.run import ExportRequest, plan_export

    return plan_export(ExportRequest(out=tmp_path / "b", blend=blend, rig=blend.with_suffix(".rig.json"),
                                     first_event=1, count=1, device="cpu"))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from rowbeam.blender.export.run import run_export

    tmp = tmp_path_factory.mktemp("command_track")
    run_export(_plan(tmp, _scene(tmp)))
    return tmp / "b"


def _log(root):
    m = json.loads(next((root / "events").glob("*/*/manifest.json")).read_text())
    return m["state"], json.loads((root / m["state"]["log"]).read_text())


def _checks(root, name) -> set:
    from rowbeam.check.runner import check_bundle

    return {c["status"] for c in check_bundle(root)["bundle"]["checks"] if c["check"] == name}


def test_command_and_application_times_reach_the_state_log(exported):
    _, log = _log(exported)
    assert log["command_semantics"] == SEMANTICS
    by = {t["controller"]: t for t in log["commands"]}
    assert by["plane_z8"]["commands"] == FILE_TRACK["commands"] and by["plane_z8"]["source"].endswith("throttle.json")
    assert by["controller"]["commands"] == PROPERTY_TRACK["commands"]
    assert COMMAND_PROPERTY in by["controller"]["source"]
    assert _checks(exported, "command_track") == {"pass"}


def test_command_applied_before_issued_fails_command_track(exported, tmp_path):
    import shutil

    root = tmp_path / "b"
    shutil.copytree(exported, root)
    pointer, log = _log(root)
    command = log["commands"][0]["commands"][0]
    command["command_ns"] = command["application_ns"] + 1            # issued 1 ns after it took effect
    from rowbeam.bundle.files import canonical_json

    data = canonical_json(log)
    sha = hashlib.sha256(data).hexdigest()
    (root / pointer["log"]).unlink()
    (root / f"state/state_log_{sha}.json").write_bytes(data)
    for path in (root / "events").glob("*/*/manifest.json"):
        m = json.loads(path.read_text())
        m["state"] = {"log": f"state/state_log_{sha}.json", "sha256": sha}
        path.write_text(json.dumps(m))
    assert _checks(root, "command_track") == {"fail"}


@pytest.mark.parametrize("file_track, prop, fragment", [
    ({**FILE_TRACK, "commands": [{**FILE_TRACK["commands"][0], "application_ns": 0, "command_ns": 7}]}, None,
     "throttle.json: commands[0].application_ns: 0 is before its command_ns 7"),
    (FILE_TRACK, '{"schema": "rowbeam/command_track@1", "commands": [{"name": "x"}]}',
     "object 'controller' property 'rowbeam_command_track': invalid command track: commands[0]"),
    ({**FILE_TRACK, "controller": "nobody"}, None, "controller: object 'nobody' is not in scene"),
])
def test_bad_command_track_stops_the_export_before_anything_is_written(tmp_path, file_track, prop, fragment):
    blend = _scene(tmp_path, file_track, prop)
    with pytest.raises(RowbeamError) as info:
        _plan(tmp_path, blend)
    assert fragment in str(info.value) and "\n" not in str(info.value), str(info.value)
    assert not (tmp_path / "b").exists()
