"""`rowbeam view BUNDLE [OUT.rrd] [--sensor ID ...] [--spawn]`: a rerun recording of the bundle on its acquisition-time
timeline (rowbeam.view; docs/view.md)."""
from __future__ import annotations

import argparse
from pathlib import Path

from rowbeam.cli.output import emit
from rowbeam.util.command_line import fail
from rowbeam.util.errors import RowbeamError

PROG = "rowbeam view"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Write a rerun recording (.rrd) of a bundle on one timeline of acquisition times: camera images "
                     "and depth, LiDAR points at their firing times, radar returns at their chirp times, object boxes, "
                     "the state log's bodies and the ego trajectory (docs/view.md). Needs rerun-sdk.")
    p.add_argument("bundle", help="a rowbeam bundle folder (holds bundle.json)")
    p.add_argument("out", nargs="?", help="new .rrd file (default: BUNDLE.rrd beside the bundle folder)")
    p.add_argument("--sensor", action="append", help="sensor id (repeatable; default: every sensor)")
    p.add_argument("--spawn", action="store_true", help="also open the rerun viewer on it, where one can start")


def run(args: argparse.Namespace) -> int:
    from rowbeam.view import write_recording

    bundle = Path(args.bundle)
    out = args.out or str(bundle.resolve().with_suffix(".rrd") if bundle.name else bundle / "bundle.rrd")
    try:
        s = write_recording(bundle, out, args.sensor, args.spawn)
    except RowbeamError as exc:
        return fail(PROG, exc)
    viewer = f"; {s['viewer']}" if s["viewer"] else ""
    return emit([f"{PROG}: wrote {s['file']} ({s['events']} events on timeline acquisition_time){viewer}"], 0)
