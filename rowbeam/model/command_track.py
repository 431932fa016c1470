"""Command tracks (`rowbeam/command_track@1`): what a controller commanded, when it issued each command and when
the command took effect on the scene's motion. Carried into the state log (`commands`) with SEMANTICS.

Sources: JSON files named by the rig (`state_log.command_tracks`, paths relative to the rig file) and the
custom property COMMAND_PROPERTY (the same JSON as text) on any scene object; `controller` defaults to the
object holding the property. Both times are master (scene clock) ns; a command applies no earlier than it is
issued and commands are listed in issue order.
"""
from __future__ import annotations

from rowbeam.bundle.schema import loads_user_json, schema_errors
from rowbeam.util.errors import RowbeamError

SCHEMA = "rowbeam/command_track@1"
COMMAND_PROPERTY = "rowbeam_command_track"
SEMANTICS = ("command_ns: when the controller issued the command (master ns); application_ns: when it took effect "
             "on the scene's motion (master ns, >= command_ns): the animation (state log) from application_ns on "
             "reflects it; a policy's action belongs at command_ns, its consequence appears from application_ns")


def parse_command_track(document, source: str, default_controller: str | None = None) -> dict:
    """A validated track {controller, source, commands}: schema, a controller named, application_ns >= command_ns,
    commands in issue order. RowbeamError naming the source and the first bad field otherwise."""
    if not isinstance(document, dict):
        raise RowbeamError(f"{source}: a command track must be a JSON object")
    errors = schema_errors(document, SCHEMA)
    if errors:
        raise RowbeamError(f"{source}: invalid command track: {errors[0]}")
    controller = document.get("controller", default_controller)
    if controller is None:
        raise RowbeamError(f"{source}: controller: name the object the commands drive")
    commands = document["commands"]
    for i, c in enumerate(commands):
        if c["application_ns"] < c["command_ns"]:
            raise RowbeamError(f"{source}: commands[{i}].application_ns: {c['application_ns']} is before its "
                               f"command_ns {c['command_ns']} (a command cannot apply before it is issued)")
        if i and c["command_ns"] < commands[i - 1]["command_ns"]:
            raise RowbeamError(f"{source}: commands[{i}].command_ns: {c['command_ns']} is before the previous "
                               f"command's; list commands in issue order")
    return {"controller": controller, "source": source, "commands": commands}


def parse_command_track_text(text, source: str, default_controller: str | None = None) -> dict:
    """parse_command_track of JSON text (bounded, finite numbers)."""
    return parse_command_track(loads_user_json(text, source, "command track"), source, default_controller)


def check_command_tracks(log: dict, add) -> None:
    """command_track: every command of the state log's tracks applies at or after it was issued, in issue order,
    with the declared semantics (a log without commands: nothing to check)."""
    tracks = log.get("commands")
    if not tracks:
        return
    problems = []
    for track in tracks:
        try:
            parse_command_track({"schema": SCHEMA, "controller": track["controller"],
                                 "commands": track["commands"]}, track["controller"])
        except RowbeamError as exc:
            problems.append(str(exc))
    if log.get("command_semantics") != SEMANTICS:
        problems.append("command_semantics is not the declared one")
    n = sum(len(t["commands"]) for t in tracks)
    add("command_track", not problems, "; ".join(problems[:3]) or
        f"{len(tracks)} tracks, {n} commands, each applied at or after it was issued", commands=n)
