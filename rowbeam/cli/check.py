"""`rowbeam check BUNDLE [--report FILE]`: exit 0 pass, 1 a hard QA failure, 2 unusable input."""
from __future__ import annotations

import argparse

from rowbeam.cli.output import emit
from rowbeam.util.command_line import fail
from rowbeam.util.errors import RowbeamError

PROG = "rowbeam check"


DESCRIPTION = ("Check a bundle (or one event/flow folder) against its contracts: JSON Schema of every document, "
               "sha256 of every payload, conventions, timing models and cross-modal invariants. Exit 0 publishable, 1 a "
               "hard QA failure, 2 unusable input.")
EPILOG = ("The schemas are published: `rowbeam schemas DIR` writes them; docs/check.md shows how to validate with plain "
          "jsonschema + referencing.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description, p.epilog = DESCRIPTION, EPILOG
    p.add_argument("bundle", help="bundle folder (holds bundle.json), or one event/flow folder, or its manifest.json")
    p.add_argument("--report", help="also write the JSON QA report (rowbeam/qa_report@1) to this file")


def run(args: argparse.Namespace) -> int:
    from rowbeam.check.runner import check_bundle, check_report_path, summary_lines, write_report

    try:
        if args.report:
            check_report_path(args.report)      # before the (long) check: nothing is written if it cannot be
        report = check_bundle(args.bundle)
        if args.report:
            write_report(args.report, report)
    except RowbeamError as exc:
        return fail(PROG, exc)
    lines = summary_lines(report) + ([f"  report: {args.report}"] if args.report else [])
    return emit(lines, 1 if report["status"] == "fail" else 0)
