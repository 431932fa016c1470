"""`python -m contracts check BUNDLE [--report FILE]` — exit 0 pass, 1 hard QA failure, 2 unusable input."""
from __future__ import annotations

import argparse
import sys

from .check import check_bundle, summary_lines
from .errors import RowbeamError
from .files import atomic_write_json


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m contracts", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    chk = sub.add_parser("check", help="check a bundle (or one event folder) against its contracts")
    chk.add_argument("bundle")
    chk.add_argument("--report", help="write the JSON QA report here")
    args = parser.parse_args(argv)
    try:
        report = check_bundle(args.bundle)
        if args.report:
            atomic_write_json(args.report, report)
    except RowbeamError as exc:
        print(f"rowbeam check: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print("\n".join(summary_lines(report)))
    if args.report:
        print(f"  report: {args.report}")
    return 1 if report["status"] == "fail" else 0


if __name__ == "__main__":
    sys.exit(main())
