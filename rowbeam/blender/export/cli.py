"""Command line of the exporter: `rowbeam export BLEND --out DIR ...` and render_export.py (the same options).
User errors: one line `rowbeam export: error: ...`, exit 2, nothing written. Importing this module needs no bpy
(`rowbeam export --help` works without Blender)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rowbeam.util.command_line import Parser, error_line, fail
from rowbeam.util.errors import RowbeamError, quiet_numpy_float_warnings
from rowbeam.util.interrupt import defer, deferred, guard
from rowbeam.model.instance_identity import MAX_INSTANCES
from rowbeam.model.timing import MAX_EVENT_INDEX

from rowbeam.blender.export.console import export_console

PROG = "rowbeam export"
DESCRIPTION = "Export rowbeam sensor events (labels + manifests) from a .blend."
USAGE = """\
  blender -b scene.blend -P render_export.py -- --out DIR [--rig RIG.json] [options]
  python render_export.py scene.blend --out DIR [--rig RIG.json] [options]   (bpy wheel)"""


def add_arguments(p: argparse.ArgumentParser, blend_positional: bool = True) -> None:
    """The exporter's options (the .blend is a positional argument unless Blender already has it open)."""
    p.description = DESCRIPTION
    if blend_positional:
        p.add_argument("blend", help=".blend file (opened with its scripts disabled)")
    p.add_argument("--rig", help="rig file (rowbeam/rig@1); default: the rig stored in the .blend")
    p.add_argument("--out", required=True, help="output bundle folder (new, empty, or this dataset's)")
    p.add_argument("--sensors", help="comma-separated sensor ids (default: every sensor in the rig)")
    p.add_argument("--first-event", type=_bounded_int(MAX_EVENT_INDEX), default=0,
                   help=f"first event index, 0 .. {MAX_EVENT_INDEX} (default 0)")
    p.add_argument("--count", type=_bounded_int(MAX_EVENT_INDEX + 1),
                   help="number of events per sensor (default: all inside the frame range)")
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                   help="Cycles device: GPU when available (auto), or force one")
    p.add_argument("--flow", action="store_true",
                   help="also export optical/scene flow between consecutive exported events of each camera")
    p.add_argument("--flow-pairs", metavar="I:J,...",
                   help="flow between these event pairs of each camera (exported first when missing)")
    p.add_argument("--scenario", help="scenario token (a dataset plan sets it; default: rig lineage, scene "
                   "property rowbeam_scenario, else the .blend's name)")
    p.add_argument("--lineage-group", help="lineage group (with --scenario; default: the scenario)")
    p.add_argument("--split", help="dataset split of these events (a dataset plan assigns it before rendering); "
                   "written into every manifest's lineage")
    p.add_argument("--max-instances", type=_bounded_int(MAX_INSTANCES), default=MAX_INSTANCES, metavar="N",
                   help=f"refuse a scene where one instancer makes more than N rendered instances (default and "
                   f"most {MAX_INSTANCES})")
    talk = p.add_mutually_exclusive_group()
    talk.add_argument("-q", "--quiet", action="store_true", help="print errors only (no progress, no summary)")
    talk.add_argument("-v", "--verbose", action="store_true",
                      help="also show Blender's own output (render temp files, device probes)")


def parse_args(argv: list[str], blend_positional: bool) -> argparse.Namespace:
    """render_export.py's arguments (its usage names both ways to run it)."""
    p = Parser(prog=PROG, usage=USAGE)
    add_arguments(p, blend_positional)
    return p.parse_args(argv)


def _bounded_int(largest: int):
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
        if not 0 <= value <= largest:
            raise argparse.ArgumentTypeError(f"{value} is outside 0 .. {largest}")
        return value
    return parse


def parse_sensors(text: str | None) -> list | None:
    """--sensors ID,...: None (every sensor) when absent; empty entries and repeats are refused."""
    if text is None:
        return None
    ids = text.split(",")
    if "" in ids:
        raise RowbeamError(f"--sensors: {text[:80]!r} has an empty entry")
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise RowbeamError(f"--sensors: {repeated[0][:80]!r} is named twice")
    return ids


def parse_pairs(text: str | None) -> list | None:
    """--flow-pairs I:J,...: pairs of event indices, each 0 .. MAX_EVENT_INDEX."""
    if text is None:
        return None
    pairs = []
    for item in text.split(","):
        try:
            a, b = (_bounded_int(MAX_EVENT_INDEX)(x) for x in item.split(":"))
        except (ValueError, argparse.ArgumentTypeError):
            raise RowbeamError(f"--flow-pairs: {item[:80]!r} is not SOURCE:DESTINATION event indices "
                               f"(0 .. {MAX_EVENT_INDEX})") from None
        pairs.append((a, b))
    return pairs


def parse_lineage(scenario: str | None, group: str | None) -> dict | None:
    """--scenario/--lineage-group: None when neither is given (the rig or the scene decides)."""
    if scenario is None:
        if group is not None:
            raise RowbeamError("--lineage-group needs --scenario")
        return None
    return {"scenario": scenario, "lineage_group": scenario if group is None else group}


def main(argv: list[str], blend_positional: bool) -> int:
    """render_export.py: parse, then export."""
    quiet_numpy_float_warnings()
    return run(parse_args(argv, blend_positional), blend_positional)


def run(args: argparse.Namespace, blend_positional: bool = True) -> int:
    """Export with parsed options (`rowbeam export`, render_export.py)."""
    with export_console(args.quiet, args.verbose) as console:
        return guard(PROG, lambda: _export(args, blend_positional, console))


def _warn_unclassified(table) -> None:
    """One warning line on stderr naming the objects that have no class (void)."""
    from rowbeam.blender.objects.object_table import unclassified_summary

    line = unclassified_summary(table)
    if line:
        print(f"rowbeam: warning: {line}", file=sys.stderr)


def _warn_unseen_materials(ctx) -> None:
    """One warning line on stderr per material whose OSL Script node the surface policy cannot see."""
    from rowbeam.blender.cycles.label_materials import label_materials, unseen_materials

    for name in unseen_materials(label_materials(ctx.render_objects())):
        print(f"rowbeam: warning: material {name!r}: an OSL Script node's output (an alpha perhaps) is not seen by "
              "the surface policy; labels follow Cycles' own alpha threshold there", file=sys.stderr)


def _note_engine(scene) -> None:
    """One note on stderr when the scene is set up for another render engine (EEVEE, Workbench): every rowbeam
    render uses Cycles (the .blend is not changed)."""
    engine = scene.render.engine
    if engine != "CYCLES":
        print(f"rowbeam: note: scene {scene.name!r} is set up for {engine}; rowbeam renders it with Cycles (labels and "
              "RGB; materials as Cycles shades them, the .blend unchanged)", file=sys.stderr)


def _export(args, blend_positional: bool, console) -> int:
    """Plan and run the export; rowbeam's lines go to `console`, user errors to stderr (one line, exit 2)."""
    try:
        defer()                     # before bpy loads: Blender's and Cycles' threads inherit the blocked signals
        from rowbeam.blender.export.allocator import keep_freed_memory
        from rowbeam.blender.export.run_temp import enter_process_temp

        enter_process_temp()        # before bpy loads, so Blender's own temp folder is created inside it
        keep_freed_memory()         # process-wide allocator settings: ours to set in a headless export process only
        from rowbeam.blender.export.run import ExportRequest, plan_export, run_export

        request = ExportRequest(
            out=Path(args.out), blend=Path(args.blend) if blend_positional else None,
            rig=Path(args.rig) if args.rig else None,
            sensors=parse_sensors(args.sensors),
            first_event=args.first_event, count=args.count, device=args.device, flow=args.flow,
            flow_pairs=parse_pairs(args.flow_pairs), lineage=parse_lineage(args.scenario, args.lineage_group),
            split=args.split, max_instances=args.max_instances)
        with deferred():        # a signal stops the export between events, never inside a Cycles callback
            plan = plan_export(request)
            _warn_unclassified(plan.context.table)
            _warn_unseen_materials(plan.context)
            _note_engine(plan.context.scene)
            flows = sum(j.is_flow for j in plan.jobs)
            console.say(f"rowbeam: {len(plan.jobs) - flows} event(s), {flows} flow pair(s) -> {plan.writer.root} "
                        f"(device {plan.context.device})")
            plan.context.progress = console.progress
            console.watch_cycles()
            summary = run_export(plan, progress=lambda d, t, text: console.say(f"rowbeam: [{d}/{t}] {text}"))
    except RowbeamError as exc:
        return fail(PROG, exc)
    except OSError as exc:          # disk full, read-only or not permitted: one line naming the path
        from rowbeam.blender.export.bundle import write_error

        error = write_error(exc, args.out, "export stopped")
        if error is None:
            raise
        print(error_line(PROG, error), file=sys.stderr)
        return error.exit_code
    console.say(f"rowbeam: published {len(summary['published'])}, quarantined {len(summary['quarantined'])}, "
                f"skipped {len(summary['skipped'])} -> {summary['out']}")
    return 1 if summary["quarantined"] else 0
