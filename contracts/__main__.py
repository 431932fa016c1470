"""rowbeam contracts command line.

  python -m contracts check BUNDLE [--report FILE]      exit 0 pass, 1 hard QA failure, 2 unusable input
  python -m contracts adapt {flo,kitti,pfm} FLOW_DIR OUT [--variant V] [--direction forward|backward]
"""
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
    ad = sub.add_parser("adapt", help="write a flow folder in an external format, with a JSON sidecar of what is lost")
    ad.add_argument("format", choices=("flo", "kitti", "pfm"))
    ad.add_argument("flow_dir")
    ad.add_argument("out")
    ad.add_argument("--variant", help="flo: valid|geometric; kitti: noc|occ")
    ad.add_argument("--direction", choices=("forward", "backward"), default="forward")
    args = parser.parse_args(argv)
    if args.command == "adapt":
        return _adapt(args)
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


def _adapt(args) -> int:
    from .flow_formats import export_flow

    try:
        sidecar = export_flow(args.flow_dir, args.format, args.out, args.variant, args.direction)
    except RowbeamError as exc:
        print(f"rowbeam adapt: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"rowbeam adapt: wrote {args.out} ({sidecar['format']}, {sidecar['variant']}, max rounding error "
          f"{sidecar['max_rounding_error_px']:.4g} px); sidecar {args.out}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
