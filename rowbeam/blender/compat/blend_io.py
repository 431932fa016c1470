"""Open .blend files safely and describe the build (bpy)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import bpy

from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import open_regular

REPO_ROOT = Path(__file__).resolve().parent.parent


def open_blend(path) -> None:
    """Load a .blend with its embedded scripts (drivers, registered text blocks) disabled."""
    path = Path(path)
    with open_regular(path) as f:      # a folder or a FIFO is refused unopened (a FIFO would block)
        magic = f.read(7)
    if magic != b"BLENDER" and magic[:2] not in (b"\x1f\x8b", b"\x28\xb5"):  # plain, gzip, zstd
        raise RowbeamError(f"{path}: not a .blend file")
    try:
        bpy.ops.wm.open_mainfile(filepath=str(path), load_ui=False, use_scripts=False)
    except RuntimeError as exc:
        raise RowbeamError(f"{path}: Blender could not open it ({str(exc).strip().splitlines()[-1]})") from None


def check_linked_libraries() -> None:
    """Refuse (one line naming the file) a .blend whose linked library files are missing: Blender opens it anyway
    with empty placeholders, whose objects and instances would silently vanish from every label. Paths are
    resolved like Blender's (relative to the linking file, nested libraries to theirs); packed libraries pass."""
    import os

    for lib in bpy.data.libraries:
        if lib.packed_file is not None:
            continue
        path = os.path.normpath(bpy.path.abspath(lib.filepath, library=lib.parent))
        if not os.path.isfile(path):
            raise RowbeamError(f"linked library {lib.filepath!r} ({path}) is missing; restore it or relink "
                               f"library {lib.name!r}")


def git_revision() -> str:
    """Revision of the rowbeam source: git when run from a checkout, else the one recorded at build time."""
    if not (REPO_ROOT / ".git").exists():
        try:
            from rowbeam._build_info import GIT_REVISION  # written into the extension's wheel by tools/build_extension.py
            return GIT_REVISION
        except ImportError:
            return "unknown"
    try:
        rev = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
