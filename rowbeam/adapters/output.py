"""Adapter outputs: refuse unusable targets before reading anything, write files atomically and folders by
one rename of a staged sibling, so an interrupted or failed adapter leaves nothing half-written. An existing
output file (or its sidecar) is never overwritten; staging folders carry an owner marker
(rowbeam/bundle/ownership.py) and what a killed adapter left is removed by the next run on that target."""
from __future__ import annotations

import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path

from rowbeam.util.errors import RowbeamError
from rowbeam.bundle import ownership
from rowbeam.bundle.files import atomic_write_bytes, canonical_json, sha256_file

SIDECAR_SCHEMA = "rowbeam/adapter_sidecar@1"
FOLDER_SIDECAR = "rowbeam_adapter_sidecar.json"


def _inside_bundle(target: Path, source: Path) -> bool:
    """True when `target` lies in `source` or in the data folders (events/flows/quarantine) of its bundle."""
    resolved, src = target.resolve(), Path(source).resolve()
    if src == resolved or src in resolved.parents:
        return True
    for base in (src, *src.parents):
        if (base / "bundle.json").exists() or (base / "events").is_dir():
            if base in resolved.parents and resolved.relative_to(base).parts[0] in ("events", "flows", "quarantine"):
                return True
    return False


def check_output_file(target, source) -> Path:
    """Refuse a file target that exists, cannot be written or lies inside the source's bundle data; create nothing."""
    target = Path(target)
    if os.path.lexists(target) and not target.is_file():
        raise RowbeamError(f"{target}: exists and is not a regular file; give a file path")
    parent = target.parent
    if not parent.is_dir():
        raise RowbeamError(f"{target}: folder {parent} does not exist" if not os.path.lexists(parent)
                           else f"{target}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise RowbeamError(f"{target}: folder {parent} is not writable")
    if _inside_bundle(target, source):
        raise RowbeamError(f"{target}: inside the bundle's data folders; writing there would change the bundle; "
                           "write the adapter output elsewhere")
    if os.path.lexists(target):
        raise RowbeamError(f"{target}: exists; rowbeam never overwrites a file it cannot prove it wrote; "
                           "remove it or give a new name")
    return target


def check_output_dir(target, source) -> Path:
    """Refuse a folder target that exists non-empty, is not a folder, or lies inside the bundle data."""
    target = Path(target)
    if os.path.lexists(target):
        if not target.is_dir():
            raise RowbeamError(f"{target}: exists and is not a folder")
        if any(target.iterdir()):
            raise RowbeamError(f"{target}: folder exists and is not empty; give a new or empty folder")
    check_output_file(target.parent / (target.name + ".probe"), source)   # same parent checks
    if _inside_bundle(target, source):
        raise RowbeamError(f"{target}: inside the bundle's data folders; write the adapter output elsewhere")
    return target


@contextmanager
def staged_dir(target: Path):
    """Yield a staging folder beside `target`; on success it becomes `target` by one rename (an empty
    existing `target` is replaced), on any error it is removed."""
    target = Path(target)
    ownership.reclaim_siblings(target, ".tmp-")            # what killed adapter runs left (owned, owner gone)
    stage = target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(3)}")
    try:
        ownership.make_owned_dir(stage, "adapter-staging")
        yield stage
        ownership.mark(stage, "adapter-output", files=ownership.listing(stage))
        if target.is_dir():
            target.rmdir()                                  # only an empty folder: never one with files
        os.replace(stage, target)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def write_file(path: Path, data: bytes) -> None:
    """Atomic write; an OSError becomes one RowbeamError line naming the file."""
    try:
        atomic_write_bytes(path, data)
    except OSError as exc:
        raise RowbeamError(f"{path}: cannot write ({exc.strerror or exc})") from None


def folder_listing(folder: Path, skip=(FOLDER_SIDECAR, ownership.MARKER)) -> dict:
    """{relative posix path: sha256} of every file under `folder`."""
    return {p.relative_to(folder).as_posix(): sha256_file(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in skip}


def sidecar(fmt: str, file: str, source: dict, lost: list[str], max_rounding_error: dict, **extra) -> dict:
    """A rowbeam/adapter_sidecar@1 document (validated against its schema before it is written)."""
    from rowbeam.bundle.schema import schema_errors

    doc = {"schema": SIDECAR_SCHEMA, "format": fmt, "file": file, "source": source, "lost": lost,
           "max_rounding_error": {k: float(v) for k, v in max_rounding_error.items()}, **extra}
    errors = schema_errors(doc, SIDECAR_SCHEMA)
    if errors:
        raise RowbeamError(f"internal: adapter sidecar violates {SIDECAR_SCHEMA}: {errors[0]}")
    return doc


def sidecar_bytes(doc: dict) -> bytes:
    return canonical_json(doc)


def write_sidecar(out: Path, side: Path, make_doc) -> dict:
    """Write the sidecar `side` of the complete file `out` from make_doc() (called now, so it may hash `out`) and
    return it; if making or writing it fails, `out` is removed too: never a file without its sidecar."""
    try:
        doc = make_doc()
        write_file(side, sidecar_bytes(doc))
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    return doc
