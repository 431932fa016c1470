"""The `rowbeam` console command: one entry point that hands each subcommand to its own parser.

Every subcommand's own `--help` documents its options (`rowbeam export --help`, …). User errors
print one line and exit 2.
"""
from __future__ import annotations

import sys

from rowbeam.util.errors import quiet_numpy_float_warnings

SUBCOMMANDS = {
    "export": "render sensor events of a .blend into a bundle (needs bpy or Blender)",
    "check": "check a bundle or one event folder against its contracts (no Blender needed)",
    "adapt": "one-way export with a loss sidecar: flow (.flo, kitti-flow, pfm), LiDAR (kitti-lidar, ply), "
             "objects (coco, bop, kitti-object), lenses (rectify)",
    "associate": "pair camera row bands with LiDAR beams / radar chirps within --max-skew-us (no Blender needed)",
    "scenes": "build a calibration scene or the running example as .blend + rig (needs bpy)",
    "schemas": "write the published JSON Schemas of every rowbeam document into a folder",
    "report": "static HTML visual QA report of a bundle or dataset: overlays, residual distributions, statistics",
    "plan": "plan a dataset spec (rowbeam/dataset@1) into deterministic shards: DIR/plan.json",
    "farm": "run a plan's shards (farm run PLAN --engine local|slurm|ray) or follow them (farm status DIR)",
    "finalize": "dataset manifest, split lists, dataset hash, QA summary and leakage audit of a plan folder",
    "replay": "re-export one sample of a plan folder and compare it under the declared reproducibility levels",
}

USAGE = "usage: rowbeam {" + ",".join(SUBCOMMANDS) + "} ... [--help]"


def _top_help() -> str:
    from rowbeam.version import ROWBEAM_VERSION

    rows = "\n".join(f"  {name:<9} {text}" for name, text in SUBCOMMANDS.items())
    return (f"rowbeam {ROWBEAM_VERSION}: authoritative sensor ground truth from Blender scenes\n\n{USAGE}\n\n"
            f"subcommands:\n{rows}\n\n`rowbeam SUBCOMMAND --help` explains each option. "
            "Exit status: 0 success, 1 a hard QA failure, 2 unusable input.")


def _needs_bpy(command: str) -> int | None:
    """None when bpy is installed (found, not imported: importing it here would let Blender talk before the
    exporter silences it); else print one line and return exit status 2."""
    import importlib.util

    if importlib.util.find_spec("bpy") is None:
        print(f"rowbeam {command}: error: needs Blender's Python module: pip install 'rowbeam[blender]' "
              "(bpy), or run inside Blender: blender -b scene.blend -P render_export.py -- ...", file=sys.stderr)
        return 2
    return None


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand; SIGINT / SIGTERM stop it with one line and exit 130 / 143 (rowbeam/util/interrupt.py)."""
    from rowbeam.util.interrupt import guard

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["export"]:
        from rowbeam.util.interrupt import defer

        defer()        # before numpy or bpy start threads: the export takes signals between events only
    return guard(f"rowbeam {argv[0]}" if argv and argv[0] in SUBCOMMANDS else "rowbeam", lambda: _dispatch(argv))


def _dispatch(argv: list[str]) -> int:
    quiet_numpy_float_warnings()
    if not argv or argv[0] in ("-h", "--help"):
        print(_top_help())
        return 0 if argv else 2
    if argv[0] == "--version":
        from rowbeam.version import ROWBEAM_VERSION

        print(f"rowbeam {ROWBEAM_VERSION}")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in SUBCOMMANDS:
        print(f"rowbeam: error: unknown subcommand {command!r} (one of: {', '.join(SUBCOMMANDS)})", file=sys.stderr)
        return 2
    if command in ("check", "adapt", "associate"):
        from rowbeam.cli.bundle_commands import main as contracts_main

        return contracts_main([command, *rest], prog="rowbeam")
    if command == "report":
        from rowbeam.report.cli import main as report_main

        return report_main(rest, prog="rowbeam report")
    if command == "schemas":
        from rowbeam.bundle.schema import schemas_main

        return schemas_main(rest)
    if command in ("plan", "farm", "finalize", "replay"):
        from rowbeam.farm import cli as farm_cli

        return getattr(farm_cli, f"{command}_main")(rest)
    if command == "export" and "-h" not in rest and "--help" not in rest:
        missing = _needs_bpy(command)
        if missing is not None:
            return missing
    if command == "export":
        from rowbeam.blender.export.cli import main as export_main

        return export_main(rest, blend_positional=True, prog="rowbeam export")
    missing = _needs_bpy(command)
    if missing is not None:
        return missing
    from rowbeam.blender.scenes.build import main as scenes_main

    return scenes_main(rest, prog="rowbeam scenes")
