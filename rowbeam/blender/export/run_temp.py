"""One private temporary folder per export run, removed on exit; folders of dead runs are reclaimed.

Everything rowbeam and Blender put in the temporary directory while exporting -- Cycles render
files (`rowbeam_render_*.exr`), the OSL camera shaders Blender's Cycles add-on compiles
(`tmp*.oso`, which it never deletes) and Blender's own session folder (`blender_*`) -- lands in
`$TMPDIR/rowbeam-run-<pid>-<random>/`. The folder holds a lock file that its process keeps
locked (fcntl.flock) for its whole life, so a later run knows a folder whose lock is free and
whose pid is gone belongs to a killed run and removes it -- only when its owner marker
(rowbeam/bundle/ownership.py) proves rowbeam made it. No bpy at import time (the CLI creates
the folder before bpy is imported, so Blender's session folder starts inside it).
"""
from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from rowbeam.bundle.ownership import mark, owned, pid_alive

__all__ = ["PREFIX", "RunTemp", "enter_process_temp", "lock_is_free", "pid_alive", "reclaim_dead_runs", "run_temp"]

PREFIX = "rowbeam-run-"
LOCK_NAME = ".lock"


def lock_is_free(path: Path) -> bool:
    """True when nobody holds an flock on `path` (a missing file counts as free)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def owner_pid(name: str, prefix: str) -> int | None:
    """The pid in a folder name `<prefix><pid>-<random>`, or None when the name is not ours."""
    if not name.startswith(prefix):
        return None
    head = name[len(prefix):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def reclaim_dead_runs(base: Path) -> list[Path]:
    """Remove `rowbeam-run-*` folders under `base` whose process is gone; return what was removed."""
    removed = []
    try:
        entries = list(Path(base).iterdir())
    except OSError:
        return removed
    for d in entries:
        pid = owner_pid(d.name, PREFIX)
        if pid is None or pid == os.getpid() or not d.is_dir() or d.is_symlink() or not owned(d):
            continue                # no owner marker: not ours, whatever its name
        if pid_alive(pid) or not lock_is_free(d / LOCK_NAME):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


class RunTemp:
    """The current process's private temporary folder (see module docstring)."""

    def __init__(self):
        self.base = Path(tempfile.gettempdir())
        self.reclaimed = reclaim_dead_runs(self.base)
        self.path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=self.base))
        mark(self.path, "run-temp")
        self._lock_fd = os.open(self.path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        self._saved_tempdir = tempfile.tempdir
        self._saved_env = os.environ.get("TMPDIR")
        self._saved_blender = None          # (preference value, preferences dirty flag) once moved
        tempfile.tempdir = str(self.path)
        os.environ["TMPDIR"] = str(self.path)

    def steer_blender(self) -> None:
        """Move Blender's session temp folder into ours (when bpy is loaded and it is elsewhere)."""
        bpy = sys.modules.get("bpy")
        if bpy is None or self._saved_blender is not None:
            return
        try:
            if Path(bpy.app.tempdir).resolve().is_relative_to(self.path.resolve()):
                return
            prefs = bpy.context.preferences
            self._saved_blender = (prefs.filepaths.temporary_directory, prefs.is_dirty)
            prefs.filepaths.temporary_directory = str(self.path)
            prefs.is_dirty = self._saved_blender[1]
        except (AttributeError, TypeError, ValueError):    # a bpy without preferences: leave it
            self._saved_blender = None

    def remove(self) -> None:
        """Restore the temp settings and delete the folder (idempotent)."""
        if self._lock_fd is None:
            return
        tempfile.tempdir = self._saved_tempdir          # first: Blender re-creates its folder under TMPDIR
        if self._saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = self._saved_env
        if self._saved_blender is not None:
            try:
                import bpy

                prefs = bpy.context.preferences
                prefs.filepaths.temporary_directory = self._saved_blender[0]
                prefs.is_dirty = self._saved_blender[1]
            except (AttributeError, TypeError, ValueError, ImportError):
                pass
            self._saved_blender = None
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._lock_fd)
        self._lock_fd = None


_process_temp: RunTemp | None = None
_depth = 0


def enter_process_temp() -> RunTemp:
    """For command-line runs: one folder for the whole process, removed at exit. Call before bpy is
    imported so Blender's own session folder is created inside it."""
    global _process_temp
    if _process_temp is None:
        _process_temp = RunTemp()
        atexit.register(_process_temp.remove)
    return _process_temp


@contextmanager
def run_temp():
    """The run's temporary folder for the duration of an export: the process-wide one when the CLI
    made it, else a new one removed when the block exits (normally, on error or on a cancel)."""
    global _process_temp, _depth
    own = _process_temp is None
    if own:
        _process_temp = RunTemp()
    _depth += 1
    try:
        _process_temp.steer_blender()
        yield _process_temp
    finally:
        _depth -= 1
        if own and _depth == 0:
            _process_temp.remove()
            _process_temp = None
