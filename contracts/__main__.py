"""rowbeam contracts command line.

  python -m contracts check BUNDLE [--report FILE]      exit 0 pass, 1 hard QA failure, 2 unusable input
  python -m contracts adapt {flo,kitti,pfm} FLOW_DIR OUT [--variant V] [--direction forward|backward]
"""
from __future__ import annotations

import argparse
import os
import sys

from .check import check_bundle, check_report_path, summary_lines, write_report
from .errors import RowbeamError


def main(argv=None, prog: str = "python -m contracts") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    chk = sub.add_parser("check", help="check a bundle (or one event folder) against its contracts",
                         description="Check a bundle (or one event/flow folder) against its contracts: JSON Schema "
                         "of every document, sha256 of every payload, conventions, timing models and cross-modal "
                         "invariants. Exit 0 publishable, 1 a hard QA failure, 2 unusable input.",
                         epilog="The schemas are published: `rowbeam schemas DIR` writes them; the README shows "
                         "how to validate with plain jsonschema + referencing.")
    chk.add_argument("bundle", help="bundle folder (holds bundle.json), or one event/flow folder, or its manifest.json")
    chk.add_argument("--report", help="also write the JSON QA report (rowbeam/qa_report@1) to this file")
    ad = sub.add_parser("adapt", help="write a flow folder in an external format, with a JSON sidecar of what is lost",
                        description="Write one direction of a rowbeam flow folder as .flo (Middlebury), a KITTI 2015 "
                        "flow PNG or PFM, plus OUT.json (rowbeam/adapter_sidecar@1) listing what is lost.")
    ad.add_argument("format", choices=("flo", "kitti", "pfm"), metavar="format", help="one of flo, kitti, pfm. "
                    "flo: float32, unknown=1e10; kitti: 16-bit PNG, "
                    "1/64 px, |flow| <= 512 px; pfm: float32 (u, v, 0), NaN kept")
    ad.add_argument("flow_dir", help="a flow folder of a bundle: flows/<sensor>/<i0>-<i1>")
    ad.add_argument("out", help="output file (its sidecar is written to OUT.json)")
    ad.add_argument("--variant", help="flo: valid (dest_visible pixels, default) | geometric (every defined "
                    "correspondence); kitti: noc (non-occluded: dest_visible, default) | occ (all defined pixels)")
    ad.add_argument("--direction", choices=("forward", "backward"), default="forward",
                    help="flow_forward (source grid, default) or flow_backward (destination grid)")
    args = parser.parse_args(argv)
    if args.command == "adapt":
        return _adapt(args)
    try:
        if args.report:
            check_report_path(args.report)      # before the (long) check: nothing is written if it cannot be
        report = check_bundle(args.bundle)
        if args.report:
            write_report(args.report, report)
    except RowbeamError as exc:
        return _error("rowbeam check", exc)
    lines = summary_lines(report) + ([f"  report: {args.report}"] if args.report else [])
    return _emit(lines, 1 if report["status"] == "fail" else 0)


def _error(prog: str, exc: RowbeamError) -> int:
    """One line on stderr, the error's exit status."""
    try:
        print(f"{prog}: error: {exc}", file=sys.stderr)
    except BrokenPipeError:
        pass
    return exc.exit_code


def _emit(lines: list[str], status: int) -> int:
    """Print to stdout; a reader that closed the pipe early (`| head`) is not an error: keep `status`."""
    try:
        print("\n".join(lines))
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return status


def _adapt(args) -> int:
    from .flow_formats import export_flow

    try:
        sidecar = export_flow(args.flow_dir, args.format, args.out, args.variant, args.direction)
    except RowbeamError as exc:
        return _error("rowbeam adapt", exc)
    return _emit([f"rowbeam adapt: wrote {args.out} ({sidecar['format']}, {sidecar['variant']}, max rounding error "
                  f"{sidecar['max_rounding_error_px']:.4g} px); sidecar {args.out}.json"], 0)


if __name__ == "__main__":
    sys.exit(main())
