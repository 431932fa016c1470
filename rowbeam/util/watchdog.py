"""A watchdog for stages that can block in C code (Blender reading a file): after a bound, one line and exit 2.

A Python signal handler cannot interrupt a blocking read inside Blender, so a timer thread ends the process
(os._exit) after printing which stage did not finish. The bound is ROWBEAM_STAGE_TIMEOUT_S (s; default 300).
"""
from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager

DEFAULT_TIMEOUT_S = 300.0


def stage_timeout_s() -> float:
    try:
        return max(float(os.environ.get("ROWBEAM_STAGE_TIMEOUT_S", DEFAULT_TIMEOUT_S)), 0.1)
    except ValueError:
        return DEFAULT_TIMEOUT_S


@contextmanager
def watchdog(stage: str, seconds: float | None = None):
    """Bound the block to `seconds` (default stage_timeout_s()); past it, print
    `rowbeam: error: <stage> did not finish in N s ...` on stderr and exit 2 at once."""
    limit = stage_timeout_s() if seconds is None else seconds

    def expire():
        try:
            sys.stderr.write(f"rowbeam: error: {stage} did not finish in {limit:g} s (blocked reading a file? "
                             "a FIFO, a device or a hung network mount); stopped\n")
            sys.stderr.flush()
        finally:
            os._exit(2)

    timer = threading.Timer(limit, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
