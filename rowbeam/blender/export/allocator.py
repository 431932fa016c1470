"""Process-level memory allocation settings for the exporter's numpy work after each render (glibc malloc, numpy).

The flow solve and the in-line checks make many short-lived arrays of 1-30 MB (one float64 value per pixel of a
1280x720 event is 7.4 MB). Two defaults made each of them cost kernel (system) time:
- numpy advises every array of >= 4 MB to be backed by transparent huge pages (madvise MADV_HUGEPAGE); with the
  kernel's THP `defrag` at `madvise` (the usual setting) a first touch of such memory compacts physical memory
  to find a free 2 MB page, in the faulting thread: ~1 s of system time in the first flow pair export at
  1280x720 (bench `--only flow`), ~0.2 s in later ones.
- glibc serves blocks above its mmap threshold with a fresh mmap (page-faulted in and zeroed by the kernel) and
  unmaps them when freed, and it hands free memory at the top of the heap back to the OS above its trim threshold.
`keep_freed_memory()` turns numpy's huge-page advice off and lets glibc keep freed blocks of up to MMAP_THRESHOLD
bytes (and up to TRIM_THRESHOLD bytes of free heap) for reuse. Values are unchanged (allocation only); blocks
above MMAP_THRESHOLD (e.g. the float64 arrays of a 3840x2160 event, 66 MB) are still mapped and unmapped.
Not glibc (macOS, Windows, musl): only the numpy setting applies.
Applied by the headless exporter process only (rowbeam.blender.export.cli: `render_export.py`, `rowbeam export`, farm jobs,
and the bench, which measures that process), never by the add-on: inside a user's interactive Blender these
process-wide settings are not ours to change.
`release_free_memory()` (glibc malloc_trim) hands the free heap back at the points where a stage's short-lived
arrays are done and the next stage's peak begins (before an event's object labels and before its in-line check), so
one stage's kept memory does not add to the next one's peak.
Cost: freed memory stays with the process (bench `--only flow` process peak RSS 982 -> 1166 MB with a 1 GB trim
threshold instead of 256 MB); the scale bench's camera event peaks stay in target (3840x2160 1581 MB <= 1744).
"""
from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np

M_TRIM_THRESHOLD = -1            # glibc <malloc.h> mallopt parameters
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20        # bytes: glibc's largest allowed mmap threshold on 64-bit (its dynamic maximum)
TRIM_THRESHOLD = 1 << 30         # bytes of free memory at the heap top kept for reuse before returning it

_done: dict | None = None


def keep_freed_memory() -> dict:
    """Apply the settings above to this process (once; later calls return the first result): {setting: applied}."""
    global _done
    if _done is None:
        _done = {"numpy_madvise_hugepage_off": _numpy_hugepage_off(), "glibc_mallopt": _mallopt()}
    return _done


def _numpy_hugepage_off() -> bool:
    core = getattr(np, "_core", None) or getattr(np, "core", None)        # numpy 2 / numpy 1.x
    setter = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if setter is None:
        return False
    setter(False)
    return True


def _glibc(name: str, argtypes: tuple):
    """glibc function `name` with its argument types (returns int), or None where the C library is not glibc."""
    try:
        fn = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):            # not glibc
        return None
    fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return fn


def _mallopt() -> bool:
    mallopt = _glibc("mallopt", (ctypes.c_int, ctypes.c_int))
    return (mallopt is not None and bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
            and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)))


def release_free_memory() -> bool:
    """Return free heap memory to the OS now (glibc malloc_trim(0); values unchanged); False where not glibc."""
    trim = _glibc("malloc_trim", (ctypes.c_size_t,))
    return trim is not None and bool(trim(0))
