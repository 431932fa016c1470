"""Work on the process's other cores (the exporter's post-render work, the report's images): a thread map for
numpy, OpenEXR/zlib and fsync calls, and OpenEXR's own thread pool.

These release the GIL for the length of each large call, so while Cycles is idle (after the render) a second
thread uses the second core. Results never depend on the threads: each item is computed by one call, whole, and
collected in item order. Never call bpy from these threads (Blender's API is not thread-safe).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

# At most 4: one camera event's post-render work has 7-11 payload files and ~30 derive bands at 1280x720, and each
# running item holds its own transient buffers (a large image's plane copies, a band's float64 temporaries).
# The cores this process may use (a Slurm or taskset allocation, not the whole node).
WORKERS = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)))


def thread_map(fn, items, workers: int = WORKERS) -> list:
    """[fn(item) for item in items], computed on up to `workers` threads; in item order. When calls fail, every
    call still finishes before the first failure (in item order) is raised."""
    items = list(items)
    workers = min(workers, len(items))
    if workers <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(workers, thread_name_prefix="rowbeam-worker") as pool:
        futures = [pool.submit(fn, item) for item in items]
    return [f.result() for f in futures]


@contextmanager
def openexr_threads(workers: int = WORKERS):
    """Inside: OpenEXR's own thread pool has `workers` threads, so one file's line blocks are decoded in parallel
    (the in-line check's payloads, the render's passes; the arrays are the same bit for bit); the previous size
    is restored after. A no-op where the binding has no global thread count."""
    import OpenEXR

    get, set_ = getattr(OpenEXR, "global_thread_count", None), getattr(OpenEXR, "set_global_thread_count", None)
    if get is None or set_ is None:
        yield
        return
    old = get()
    set_(workers)
    try:
        yield
    finally:
        set_(old)
