"""`rowbeam associate BUNDLE --max-skew-us N [--pair-by device]`.

For each camera event and each LiDAR or radar event overlapping it,
pair every camera row with the nearest firing group / chirp and keep the pair only when the skew is at most
--max-skew-us; writes BUNDLE/associations/max_skew_<ns>ns.json (rowbeam/associations@1) with each band's rows,
times, skew and state-log pose support. With --pair-by device the pairing uses each sensor's device timestamps
(device_max_skew_<ns>ns.json) and every band also records its true master-clock skew. The checker verifies it."""
from __future__ import annotations

import argparse

from rowbeam.cli.output import emit
from rowbeam.util.command_line import fail
from rowbeam.util.errors import RowbeamError

PROG = "rowbeam associate"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = __doc__.split("\n\n", 1)[1]
    p.add_argument("bundle", help="a rowbeam bundle folder (holds bundle.json)")
    p.add_argument("--max-skew-us", type=float, required=True, help="largest |t_row - t_beam| of a pair, microseconds")
    p.add_argument("--pair-by", choices=("master", "device"), default="master",
                   help="pair on the master (scene) clock, or by each sensor's device timestamps (the report then "
                        "gives each pair's true master-clock skew)")


def run(args: argparse.Namespace) -> int:
    from rowbeam.bundle.associations import associate_bundle

    try:
        path, doc = associate_bundle(args.bundle, args.max_skew_us, args.pair_by)
    except RowbeamError as exc:
        return fail(PROG, exc)
    bands = sum(len(p["bands"]) for p in doc["pairs"])
    return emit([f"{PROG}: wrote {path} ({len(doc['pairs'])} event pairs, {bands} row bands, "
                 f"max skew {doc['max_skew_ns']} ns)"], 0)
