"""Which folders rowbeam may delete or replace: only those an owner marker proves it created.

Every staging, trash, temporary, report and adapter output folder rowbeam creates holds a marker file
`.rowbeam-owner.json` (format `rowbeam/owner@1`) naming the run that made it: pid, host, start time
(s since the epoch) and a random token. A name pattern is never proof: a user's folder called `.staging`
or `rowbeam-run-1-x` has no marker and is left alone. A finished output folder (report, adapter folder,
schemas) lists the files rowbeam wrote in its marker; it is replaced only while it holds nothing else.
"""
from __future__ import annotations

import json
import os
import platform
import secrets
import shutil
import stat
import time
from pathlib import Path

from rowbeam.util.errors import RowbeamError

MARKER = ".rowbeam-owner.json"
FORMAT = "rowbeam/owner@1"
MAX_MARKER_BYTES = 1 << 22

_RUN = {"pid": os.getpid(), "host": platform.node(), "started": time.time(), "token": secrets.token_hex(8)}


def run_identity() -> dict:
    """This process's identity (pid, host, start time in s, random token); a forked child gets its own."""
    if _RUN["pid"] != os.getpid():
        _RUN.update(pid=os.getpid(), started=time.time(), token=secrets.token_hex(8))
    return dict(_RUN)


def mark(folder, kind: str, files: list[str] | None = None) -> None:
    """Write the owner marker into `folder` (which this run just created). `files`: the relative posix
    paths rowbeam wrote there (a finished output); None: the whole folder is rowbeam's (staging, trash)."""
    doc = {"format": FORMAT, "kind": kind, **run_identity()}
    if files is not None:
        doc["files"] = sorted(files)
    path = Path(folder) / MARKER
    with open(path, "w") as f:
        f.write(json.dumps(doc, sort_keys=True))
        f.flush()
        os.fsync(f.fileno())


def make_owned_dir(path, kind: str) -> Path:
    """Create `path` (it must not exist; parents are created) and mark it; returns it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir()
    try:
        mark(path, kind)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path


def marker(folder) -> dict | None:
    """The owner marker of a real folder (not a link), or None when there is none or it is not ours."""
    folder = Path(folder)
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return None
        st = os.lstat(folder / MARKER)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MARKER_BYTES:
            return None
        doc = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("pid"), int):
        return None
    files = doc.get("files")
    if files is not None and not (isinstance(files, list) and all(isinstance(f, str) for f in files)):
        return None
    return doc


def owned(folder) -> bool:
    return marker(folder) is not None


def pid_alive(pid: int) -> bool:
    """True when a process `pid` exists on this host (permission errors count as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_alive(doc: dict) -> bool:
    """True when the marker's run may still be running: this run, a live pid on this host, or another host."""
    if doc.get("token") == _RUN["token"] and doc.get("pid") == os.getpid():
        return True
    return doc.get("host") != platform.node() or pid_alive(doc["pid"])


def listing(folder) -> list[str]:
    """Relative posix paths of every file, link and empty folder under `folder` (the marker left out)."""
    folder = Path(folder)
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        rel = Path(dirpath).relative_to(folder)
        leaves = filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        if not dirnames and not filenames and rel != Path("."):
            leaves = [""]
        found += [(rel / name).as_posix() if name else rel.as_posix() for name in leaves]
    return sorted(f for f in found if f != MARKER)


def foreign_entries(folder) -> list[str]:
    """Relative paths under an owned output `folder` that its marker does not list (the user's files)."""
    doc = marker(folder) or {}
    listed = set(doc.get("files") or [])
    return [f for f in listing(folder) if f not in listed]


def check_replaceable(folder, what: str) -> None:
    """Refuse (one RowbeamError line) to replace an existing non-empty `folder` unless its marker proves
    rowbeam wrote every file in it."""
    folder = Path(folder)
    if not os.path.lexists(folder):
        return
    if os.path.islink(folder) or not folder.is_dir():
        raise RowbeamError(f"{what} {folder}: exists and is not a folder")
    if not any(folder.iterdir()):
        return
    doc = marker(folder)
    if doc is None or doc.get("files") is None:
        raise RowbeamError(f"{what} {folder}: folder is not empty and was not written by rowbeam "
                           f"(no {MARKER}); give a new or empty folder")
    extra = foreign_entries(folder)
    if extra:
        raise RowbeamError(f"{what} {folder}: holds files rowbeam did not write ({', '.join(extra[:3])}"
                           f"{' ...' if len(extra) > 3 else ''}); move them or give another folder")


def remove_owned(folder) -> bool:
    """Delete `folder` only when its marker proves rowbeam made it; True when removed."""
    if not owned(folder):
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


def reclaim_siblings(target, infix: str) -> list[Path]:
    """Remove `.NAME<infix>*` siblings of `target` that a dead rowbeam run left (owned, owner gone)."""
    target = Path(target).absolute()
    removed = []
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return removed
    for p in entries:
        if not p.name.startswith(f".{target.name}{infix}"):
            continue
        doc = marker(p)
        if doc is not None and not owner_alive(doc):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed
