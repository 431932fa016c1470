"""What the exporter command prints: rowbeam's own lines and progress, without Blender's chatter.

Blender's C code logs to file descriptor 1 (`Read blend: …`, `Saved: '…rowbeam_render_….exr'`,
GPU-probe warnings). `export_console` gives rowbeam a stream on the original stdout and points
descriptor 1 at /dev/null for the run (kept with `verbose`). With `quiet`, descriptor 2 goes to
/dev/null too (Blender's "PyDriver" lines, OpenEXR's warnings), while rowbeam's own error lines still
reach the original stderr through `sys.stderr`. Progress goes to a rewritten line on a terminal, to
throttled plain lines on a pipe, and nowhere with `quiet`.
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager

from rowbeam.util.progress import LineSink, Progress, TtySink
from rowbeam.blender.cycles.render_stats import watch_cycles


class Console:
    def __init__(self, stream, quiet: bool):
        self.stream = stream
        self.quiet = quiet
        self.sink = None if quiet else (TtySink(stream) if stream.isatty() else LineSink(stream))
        self.progress = Progress(self.sink)

    def say(self, text: str) -> None:
        """One line of rowbeam's own output (not with --quiet)."""
        if self.quiet:
            return
        self.sink.clear()
        self.stream.write(text + "\n")
        self.stream.flush()

    def watch_cycles(self) -> None:
        """Forward Cycles' render status (`Sample a/b`) to the progress; needs bpy."""
        self._unwatch = watch_cycles(self.progress)

    def close(self) -> None:
        unwatch = getattr(self, "_unwatch", None)
        if unwatch:
            unwatch()
        if self.sink is not None:
            self.sink.clear()


@contextmanager
def export_console(quiet: bool = False, verbose: bool = False):
    """Yield a Console on the original stdout; Blender's stdout goes to /dev/null unless `verbose`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1)
    stream = os.fdopen(os.dup(saved), "w", buffering=1)
    saved_err, py_stderr = None, sys.stderr
    if not verbose:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        if quiet:                                   # Blender's and OpenEXR's C-level stderr lines too
            saved_err = os.dup(2)
            sys.stderr = os.fdopen(os.dup(saved_err), "w", buffering=1)
            os.dup2(devnull, 2)
        os.close(devnull)
    console = Console(stream, quiet)
    try:
        yield console
    finally:
        console.close()
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        stream.close()
        if saved_err is not None:
            sys.stderr.flush()
            os.dup2(saved_err, 2)
            os.close(saved_err)
            sys.stderr.close()
            sys.stderr = py_stderr
