"""Command line of the exporter (render_export.py). User errors: one line, exit 2, nothing written."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from contracts.errors import RowbeamError

USAGE = """\
  blender -b scene.blend -P render_export.py -- --out DIR [--rig RIG.json] [options]
  python render_export.py scene.blend --out DIR [--rig RIG.json] [options]   (bpy wheel)"""


def parse_args(argv: list[str], blend_positional: bool) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="render_export.py", usage=USAGE,
                                description="Export rowbeam sensor events (labels + manifests) from a .blend.")
    if blend_positional:
        p.add_argument("blend", help=".blend file (opened with its scripts disabled)")
    p.add_argument("--rig", help="rig file (rowbeam/rig@1); default: the rig stored in the .blend")
    p.add_argument("--out", required=True, help="output bundle folder (new, empty, or this dataset's)")
    p.add_argument("--sensors", help="comma-separated sensor ids (default: every sensor in the rig)")
    p.add_argument("--first-event", type=int, default=0, help="first event index (default 0)")
    p.add_argument("--count", type=int, help="number of events per sensor (default: all inside the frame range)")
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                   help="Cycles device: GPU when available (auto), or force one")
    return p.parse_args(argv)


def main(argv: list[str], blend_positional: bool) -> int:
    args = parse_args(argv, blend_positional)
    try:
        from .run import ExportRequest, plan_export, run_export

        request = ExportRequest(
            out=Path(args.out), blend=Path(args.blend) if blend_positional else None,
            rig=Path(args.rig) if args.rig else None,
            sensors=[s for s in args.sensors.split(",") if s] if args.sensors else None,
            first_event=args.first_event, count=args.count, device=args.device)
        plan = plan_export(request)
        print(f"rowbeam: {len(plan.events)} event(s) -> {plan.writer.root} (device {plan.context.device})", flush=True)
        summary = run_export(plan, progress=lambda d, t, text: print(f"rowbeam: [{d}/{t}] {text}", flush=True))
    except RowbeamError as exc:
        print(f"rowbeam: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"rowbeam: published {len(summary['published'])}, quarantined {len(summary['quarantined'])}, "
          f"skipped {len(summary['skipped'])} -> {summary['out']}")
    return 1 if summary["quarantined"] else 0
