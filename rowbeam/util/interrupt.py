"""SIGINT and SIGTERM for the command lines: stop at the next safe point with one line, exit 130 / 143.

`guard` installs the handlers for a command and turns an interrupt into one line on stderr and the exit
status 128 + signal number (no traceback). A signal raises `Interrupted` (a KeyboardInterrupt, so every
`except BaseException` clean-up runs) where Python code is running -- except inside `deferred()`, where it
is only recorded and raised by `raise_pending()` at the caller's safe points (the exporter: between
events), so it is never raised, and swallowed, inside a Blender or Cycles callback.
"""
from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager

_state = {"pending": None, "deferred": 0}


class Interrupted(KeyboardInterrupt):
    """The run was stopped by SIGINT or SIGTERM; `exit_code` = 128 + signal number."""

    def __init__(self, signum: int, published: int | None = None):
        super().__init__(signum)
        self.signum = signum
        self.exit_code = 128 + signum
        self.published = published


def _handler(signum, frame):
    if _state["deferred"]:
        _state["pending"] = signum
        return
    raise Interrupted(signum)


def install() -> None:
    """Route SIGINT and SIGTERM to `Interrupted` (main thread only; a no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _handler)


def raise_pending() -> None:
    """A safe point: raise Interrupted when a signal arrived meanwhile."""
    if _state["pending"] is not None:
        raise Interrupted(_state["pending"])


@contextmanager
def deferred():
    """Record signals instead of raising them inside the block; raise at raise_pending() or on leaving."""
    _state["deferred"] += 1
    try:
        yield
    finally:
        _state["deferred"] -= 1
    raise_pending()


def message(exc: Interrupted) -> str:
    """The one line printed for an interrupt."""
    if exc.published is not None:
        return (f"interrupted: {exc.published} events published, resume with the same command "
                "(published folders are complete)")
    return "interrupted: nothing half-written was left, rerun the same command"


def guard(prog: str, run) -> int:
    """Run `run()` (returns an exit status) with the handlers installed; an interrupt prints one line and
    returns 130 (SIGINT) or 143 (SIGTERM)."""
    install()
    try:
        return run()
    except Interrupted as exc:
        _say(f"{prog}: {message(exc)}")
        return exc.exit_code
    except KeyboardInterrupt:
        _say(f"{prog}: {message(Interrupted(signal.SIGINT))}")
        return 128 + signal.SIGINT


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (BrokenPipeError, OSError):
        pass
