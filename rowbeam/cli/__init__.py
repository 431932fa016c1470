"""The `rowbeam` console command: one argparse tree, one subparser per command in COMMANDS.

Each command module contributes `add_arguments(parser)` and a run function (`run(args) -> exit status`); nested
commands (`farm run|status|worker`, `adapt FORMAT`) set their own run function as the `handler` default of their
subparser. Only the chosen command's arguments are added, so `rowbeam check` never imports another command's code
(the Blender side included). User errors, argparse's included: one line `rowbeam SUBCOMMAND: error: MESSAGE` on
stderr, exit 2 (rowbeam.util.command_line; docs/cli.md).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from dataclasses import dataclass
from typing import Callable

from rowbeam.cli import adapt, associate, blender_commands, check, schemas, view
from rowbeam.farm import cli as farm_cli
from rowbeam.report import cli as report_cli
from rowbeam.util.command_line import USAGE_ERROR, Parser, error_line
from rowbeam.util.errors import quiet_numpy_float_warnings
from rowbeam.util.interrupt import defer, guard
from rowbeam.version import ROWBEAM_VERSION


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int] | None     # None: its nested subcommands set their own handler
    needs_bpy: bool = False                              # refused in one line when bpy is not installed


COMMANDS = {c.name: c for c in (
    Command("export", "render sensor events of a .blend into a bundle (needs bpy or Blender)",
            blender_commands.add_export_arguments, blender_commands.run_export, needs_bpy=True),
    Command("check", "check a bundle or one event folder against its contracts (no Blender needed)",
            check.add_arguments, check.run),
    Command("adapt", "one-way export with a loss sidecar: flow (.flo, kitti-flow, pfm), LiDAR (kitti-lidar, ply), "
            "objects (coco, bop, kitti-object), lenses (rectify), ROS 2 (mcap)", adapt.add_arguments, adapt.run),
    Command("associate", "pair camera row bands with LiDAR beams / radar chirps within --max-skew-us (no Blender "
            "needed)", associate.add_arguments, associate.run),
    Command("scenes", "build a calibration scene or the running example as .blend + rig (needs bpy)",
            blender_commands.add_scenes_arguments, blender_commands.run_scenes, needs_bpy=True),
    Command("schemas", "write the published JSON Schemas of every rowbeam document into a folder",
            schemas.add_arguments, schemas.run),
    Command("report", "static HTML visual QA report of a bundle or dataset: overlays, residual distributions, "
            "statistics", report_cli.add_arguments, report_cli.run),
    Command("view", "a rerun recording (.rrd) of a bundle on its acquisition-time timeline (needs rerun-sdk)",
            view.add_arguments, view.run),
    Command("plan", "plan a dataset spec (rowbeam/dataset@1) into deterministic shards: DIR/plan.json",
            farm_cli.add_plan_arguments, farm_cli.run_plan),
    Command("farm", "run a plan's shards (farm run PLAN --engine local|slurm|ray) or follow them (farm status DIR)",
            farm_cli.add_farm_arguments, None),
    Command("finalize", "dataset manifest, split lists, dataset hash, QA summary and leakage audit of a plan folder",
            farm_cli.add_finalize_arguments, farm_cli.run_finalize),
    Command("replay", "re-export one sample of a plan folder and compare it under the declared reproducibility levels",
            farm_cli.add_replay_arguments, farm_cli.run_replay),
)}


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The whole command line. chosen: the command whose arguments are added (None: every command's; a name that is
    no command, e.g. "": none, for the top-level help and errors). `leaf` (the deepest parser reached) names the
    subcommand in an error line."""
    parser = Parser(prog="rowbeam", description=f"rowbeam {ROWBEAM_VERSION}: authoritative sensor ground truth from "
                    "Blender scenes", epilog="`rowbeam SUBCOMMAND --help` explains each option. Exit status: 0 "
                    "success, 1 a hard QA failure, 2 unusable input. User errors: one line `rowbeam SUBCOMMAND: "
                    "error: ...` on stderr.")
    parser.add_argument("--version", action="version", version=f"rowbeam {ROWBEAM_VERSION}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND", title="subcommands")
    for command in COMMANDS.values():
        sp = sub.add_parser(command.name, help=command.help)
        sp.set_defaults(handler=command.run, needs_bpy=command.needs_bpy, leaf=sp)
        if chosen is None or chosen == command.name:
            command.add_arguments(sp)
            for nested in _subparsers(sp):
                nested.set_defaults(leaf=nested)
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser nested under `parser` (farm run, adapt coco, ...)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for nested in dict.fromkeys(action.choices.values()):
                found += [nested, *_subparsers(nested)]
    return found


def _needs_bpy(command: str) -> int | None:
    """None when bpy is installed (found, not imported: importing it here would let Blender talk before the
    exporter silences it); else print one line and return exit status 2."""
    if importlib.util.find_spec("bpy") is None:
        print(error_line(f"rowbeam {command}", "needs Blender's Python module: pip install 'rowbeam[blender]' (bpy), "
                         "or run inside Blender: blender -b scene.blend -P render_export.py -- ..."), file=sys.stderr)
        return USAGE_ERROR
    return None


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand; SIGINT / SIGTERM stop it with one line and exit 130 / 143 (rowbeam/util/interrupt.py)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["export"]:
        defer()        # before numpy or bpy start threads: the export takes signals between events only
    return guard(f"rowbeam {argv[0]}" if argv and argv[0] in COMMANDS else "rowbeam", lambda: _dispatch(argv))


def _dispatch(argv: list[str]) -> int:
    quiet_numpy_float_warnings()
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        print(error_line("rowbeam", f"unknown subcommand {argv[0]!r} (one of: {', '.join(COMMANDS)})"),
              file=sys.stderr)
        return USAGE_ERROR
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else "")
    if not argv:
        parser.print_help()
        return USAGE_ERROR
    args, extra = parser.parse_known_args(argv)
    if extra:
        args.leaf.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.needs_bpy:
        missing = _needs_bpy(args.command)
        if missing is not None:
            return missing
    return args.handler(args)
