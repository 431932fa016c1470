"""`rowbeam report BUNDLE_OR_DATASET --out DIR [--baseline DIR]` (exit 0: report written, QA pass, no drift;
1: report written, a hard QA failure or a flagged drift; 2: unusable input, nothing written)."""
from __future__ import annotations

import argparse
import sys

from rowbeam.util.command_line import fail
from rowbeam.util.errors import RowbeamError

PROG = "rowbeam report"


def _progress(quiet: bool):
    """A progress line rewritten on a terminal (stderr), nothing when piped or quiet (rowbeam/util/progress.py)."""
    if quiet or not sys.stderr.isatty():
        return None, None
    try:
        from rowbeam.util.progress import Progress, TtySink
    except ImportError:
        return None, None
    sink = TtySink(sys.stderr)
    return Progress(sink), sink


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Write a static HTML visual QA report of a bundle (or a dataset: a folder of bundles): "
                          "overlays per camera event, flow and LiDAR sweep, residual distributions, dataset "
                          "statistics, report.json. Opens from file:// (no server, no network).")
    parser.add_argument("source", help="a bundle folder (holds bundle.json) or a folder of bundles")
    parser.add_argument("--out", required=True, help="report folder: new, empty or an earlier report (replaced "
                        "when the new one is complete)")
    parser.add_argument("--baseline", help="an earlier report folder: flag drift beyond the declared thresholds")
    parser.add_argument("--quiet", action="store_true", help="no progress line")


def run(args: argparse.Namespace) -> int:
    from rowbeam.report.build import build_report

    progress, sink = _progress(args.quiet)
    try:
        doc = build_report(args.source, args.out, args.baseline, progress)
    except RowbeamError as exc:
        if sink:
            sink.clear()
        return fail(PROG, exc)
    finally:
        if sink:
            sink.clear()
    items = [it for b in doc["bundles"] for it in b["items"]]
    failed = [it for it in items if it["qa_status"] == "fail"]
    quarantined = sum(len(b["quarantine"]) for b in doc["bundles"])
    lines = [f"{PROG}: {doc['status'].upper()} — {len(items)} folder(s), {len(failed)} failed QA, "
             f"{quarantined} quarantined; {args.out}/index.html ({doc['seconds']:.1f} s)"]
    drift = doc.get("drift")
    if drift:
        lines.append(f"  drift against {drift['baseline']}: {drift['status']} ({drift['flagged']} flagged)")
    print("\n".join(lines))
    return 1 if doc["status"] == "fail" or (drift and drift["status"] == "drift") else 0
