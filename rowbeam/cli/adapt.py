"""`rowbeam adapt FORMAT ...`: one-way export into an external format, with a loss sidecar. The formats and their
arguments come from rowbeam.adapters.registry (each adapter module declares its own)."""
from __future__ import annotations

import argparse

from rowbeam.cli.output import emit
from rowbeam.util.command_line import fail
from rowbeam.util.errors import RowbeamError

PROG = "rowbeam adapt"
DESCRIPTION = ("One-way adapters. Each writes its output plus a rowbeam/adapter_sidecar@1 JSON listing what "
               "the format loses and the largest rounding error (OUT.json beside a file output, "
               "OUT_DIR/rowbeam_adapter_sidecar.json inside a folder output). Nothing is half-written: files "
               "are renamed into place, folders are staged beside OUT_DIR and renamed.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from rowbeam.adapters.registry import adapter_formats

    p.description = DESCRIPTION
    formats = p.add_subparsers(dest="format", required=True, metavar="format",
                               help="the output format; `adapt FORMAT --help` explains its arguments")
    for fmt in adapter_formats().values():
        sub = formats.add_parser(fmt.name, help=fmt.help, description=fmt.description)
        fmt.add_arguments(sub)
        sub.set_defaults(adapter=fmt)


def run(args: argparse.Namespace) -> int:
    fmt = args.adapter
    try:
        s = fmt.run(args)
    except RowbeamError as exc:
        return fail(f"{PROG} {fmt.name}", exc)
    if fmt.line is not None:
        return emit([fmt.line(args, s)], 0)
    err = ", ".join(f"{v:.4g} {k}" for k, v in s["max_rounding_error"].items())
    dropped = f"; {s['dropped']}" if s.get("dropped") else ""
    return emit([f"{PROG}: wrote {s['file']} ({s['format']}; max rounding error {err}); {len(s['lost'])} losses in "
                 f"the sidecar{dropped}"], 0)
