"""Command tracks (rowbeam.model.command_track): validation (application never before command, issue order, one
line naming the field) and the state log's command_track check on correct and planted-wrong logs."""
from __future__ import annotations

import pytest

from rowbeam.model.command_track import SCHEMA, SEMANTICS, check_command_tracks, parse_command_track
from rowbeam.util.errors import RowbeamError

TRACK = {"schema": SCHEMA, "controller": "shuttle", "commands": [
    {"name": "throttle", "command_ns": 0, "application_ns": 40_000_000, "value": 0.5},
    {"name": "steer", "command_ns": 10_000_000, "application_ns": 10_000_000, "value": [0.1, -0.2]}]}


def test_a_valid_track_parses():
    t = parse_command_track(TRACK, "t.json")
    assert t["controller"] == "shuttle" and len(t["commands"]) == 2 and t["source"] == "t.json"
    assert parse_command_track({k: v for k, v in TRACK.items() if k != "controller"}, "p", "obj")["controller"] == "obj"


@pytest.mark.parametrize("edit, fragment", [
    (lambda t: t["commands"][0].update(application_ns=-1), "commands[0].application_ns"),
    (lambda t: t["commands"][1].update(application_ns=9_999_999), "commands[1].application_ns: 9999999 is before"),
    (lambda t: t["commands"][1].update(command_ns=0, application_ns=0) or t["commands"][0].update(command_ns=5),
     "commands[1].command_ns"),
    (lambda t: t["commands"][0].update(command_ns=1.5), "commands[0].command_ns"),
    (lambda t: t.pop("controller"), "controller"),
    (lambda t: t["commands"][0].pop("value"), "value"),
])
def test_bad_tracks_are_one_line_naming_the_field(edit, fragment):
    import copy

    t = copy.deepcopy(TRACK)
    edit(t)
    with pytest.raises(RowbeamError) as info:
        parse_command_track(t, "t.json")
    msg = str(info.value)
    assert msg.startswith("t.json: ") and fragment in msg and "\n" not in msg, msg


def _results(log) -> dict:
    got = {}
    check_command_tracks(log, lambda name, ok, msg, **kw: got.setdefault(name, ok))
    return got


def test_state_log_command_track_check():
    good = {"command_semantics": SEMANTICS, "commands": [parse_command_track(TRACK, "t.json")]}
    assert _results(good) == {"command_track": True}
    assert _results({"commands": []}) == {}
    import copy

    early = copy.deepcopy(good)
    early["commands"][0]["commands"][1]["application_ns"] = 9_999_999          # 1 ns before its command
    assert _results(early) == {"command_track": False}
    vague = {**good, "command_semantics": "times"}
    assert _results(vague) == {"command_track": False}
