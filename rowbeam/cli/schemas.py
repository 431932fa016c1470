"""`rowbeam schemas OUT_DIR`: the published JSON Schemas of every rowbeam document, as files."""
from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from rowbeam.util.command_line import fail
from rowbeam.util.errors import RowbeamError

PROG = "rowbeam schemas"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("write every published schema as <name>.schema.json (their $refs name each other by $id; "
                     "validate with jsonschema + a referencing.Registry of these files, see docs/check.md).")
    p.add_argument("out", help="a new or empty folder, or one an earlier `rowbeam schemas` wrote (created if "
                   "missing; a folder holding other files is refused)")


def run(args: argparse.Namespace) -> int:
    from rowbeam.bundle import ownership
    from rowbeam.bundle.files import atomic_write_bytes
    from rowbeam.bundle.schema import SCHEMA_DIR, SCHEMA_FILES

    out = Path(args.out)
    created = not os.path.lexists(out)
    try:
        ownership.check_replaceable(out, "schemas folder")
        out.mkdir(parents=True, exist_ok=True)
        for name in SCHEMA_FILES.values():
            atomic_write_bytes(out / name, (SCHEMA_DIR / name).read_bytes())
        ownership.mark(out, "schemas", files=sorted(SCHEMA_FILES.values()))
    except RowbeamError as exc:
        return fail(PROG, exc)
    except OSError as exc:
        if created:
            shutil.rmtree(out, ignore_errors=True)      # this run made it: nothing half-written stays
        return fail(PROG, RowbeamError(f"{out}: cannot write ({exc.strerror or exc})"))
    for sid, name in SCHEMA_FILES.items():
        print(f"{sid:<28} {out / name}")
    return 0
