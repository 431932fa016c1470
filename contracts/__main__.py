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
