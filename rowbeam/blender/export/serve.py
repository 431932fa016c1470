"""A persistent export session: one Blender (bpy) process runs many export commands (a farm worker's shards).

`python -m rowbeam.blender.export.serve` reads requests on stdin, one JSON line each:
    {"argv": [export options, as `rowbeam export` takes them], "cwd": DIR, "log": PATH}
runs each as `rowbeam export` would in a fresh process (in DIR; Blender's and rowbeam's output appended to PATH)
and answers one JSON line on its stdout: {"rc": exit status, "reused": true when the .blend was not opened again,
"seconds": wall s}. bpy is imported once; a .blend is opened once and kept for the next request of the same file
while the file on disk is unchanged (same inode, size, mtime) and the session's data-blocks are the ones it loaded
(`inventory`: the export restores every setting it patches and removes what it adds; anything else makes the next
request open the file again). SIGINT/SIGTERM stop the session at the next safe point (between events, or between
requests) with 128 + signal number. End of stdin ends the session (exit 0).
"""
from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from rowbeam.util.interrupt import SIGNALS, defer


def file_key(path: Path) -> tuple:
    """What identifies a file's version on disk without reading it: (inode, device, size, mtime ns)."""
    st = os.stat(path)
    return st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns


def inventory() -> tuple:
    """Every data-block of the open session by collection: ((collection, (name_full, ...)), ...) (bpy)."""
    import bpy

    out = []
    for name in sorted(dir(bpy.data)):
        coll = getattr(bpy.data, name, None)
        if isinstance(coll, bpy.types.bpy_prop_collection):
            out.append((name, tuple(sorted(getattr(i, "name_full", "") for i in coll))))
    return tuple(out)


class Session:
    """The .blend this process holds open: its resolved path, file key and inventory when it was loaded."""

    def __init__(self):
        self.loaded: tuple | None = None

    def reusable(self, blend: Path) -> bool:
        """True when `blend` (resolved) is the open file, unchanged on disk and in memory."""
        if self.loaded is None:
            return False
        path, key, inv = self.loaded
        try:
            return path == blend and key == file_key(blend) and inv == inventory()
        except OSError:
            return False

    def remember(self, blend: Path) -> None:
        """After an export that opened `blend`: the state to come back to (None when it did not load)."""
        import bpy

        try:
            same = Path(bpy.data.filepath).resolve() == blend
            self.loaded = (blend, file_key(blend), inventory()) if same else None
        except OSError:
            self.loaded = None


@contextmanager
def output_to(log: str):
    """File descriptors 1 and 2 (Blender's C output, rowbeam's lines) appended to `log` inside the block."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = os.dup(1), os.dup(2)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def run_request(session: Session, request: dict) -> dict:
    """One export command in this process; returns the reply {rc, reused, seconds}."""
    from rowbeam.blender.export import cli as export_cli

    t0 = time.perf_counter()
    os.chdir(request["cwd"])
    with output_to(request["log"]):
        try:
            args = export_cli.parse_args(list(request["argv"]), blend_positional=True)
        except SystemExit as exc:               # argparse printed its one line into the log
            return {"rc": exc.code if isinstance(exc.code, int) else 2, "reused": False, "seconds": 0.0}
        blend = Path(args.blend).resolve()
        reused = session.reusable(blend)
        rc = export_cli.run(args, blend_positional=not reused)
    if not reused:
        session.remember(blend)
    return {"rc": rc, "reused": reused, "seconds": round(time.perf_counter() - t0, 3)}


def stop_signal() -> int | None:
    """A SIGINT/SIGTERM that arrived while blocked (between requests), or None."""
    import signal

    pending = signal.sigpending() & SIGNALS
    return min(pending) if pending else None


def serve(requests, reply) -> int:
    """Answer each JSON line of `requests` on `reply`; 0 at end of input, 128 + signal when stopped."""
    session = Session()
    for line in requests:
        if not line.strip():
            continue
        answer = run_request(session, json.loads(line))
        reply.write(json.dumps(answer) + "\n")
        reply.flush()
        sig = stop_signal()
        if answer["rc"] >= 128 or sig is not None:
            return answer["rc"] if answer["rc"] >= 128 else 128 + sig
    return 0


def main() -> int:
    """The session's process: signals deferred and the run's temp folder made before bpy loads; Blender's output
    goes to /dev/null between requests, the replies to the original stdout."""
    defer()
    from rowbeam.blender.export.allocator import keep_freed_memory
    from rowbeam.blender.export.run_temp import enter_process_temp
    from rowbeam.util.errors import quiet_numpy_float_warnings

    enter_process_temp()
    keep_freed_memory()
    quiet_numpy_float_warnings()
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    import bpy  # noqa: F401  (loaded once, before the first request)

    return serve(sys.stdin, reply)


if __name__ == "__main__":
    sys.exit(main())
