"""SIGINT and SIGTERM for the command lines: stop at the next safe point with one line, exit 130 / 143.

`guard` installs the handlers for a command and turns an interrupt into one line on stderr and the exit
status 128 + signal number (no traceback). A signal raises `Interrupted` (a KeyboardInterrupt, so every
`except BaseException` clean-up runs) where Python code is running -- except after `deferred()`: there the
two signals are blocked (pthread_sigmask, inherited by every thread created later, Blender's and Cycles'
included), stay pending whatever handler Blender installs meanwhile, and are taken by `raise_pending()` at
the caller's safe points (the exporter: between events). So an interrupt is never raised, and swallowed,
inside a Blender or Cycles callback, and never meets Blender's own signal disposition.
"""
from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager

SIGNALS = {signal.SIGINT, signal.SIGTERM}
_state = {"pending": None, "blocked": False}


class Interrupted(KeyboardInterrupt):
    """The run was stopped by SIGINT or SIGTERM; `exit_code` = 128 + signal number."""

    def __init__(self, signum: int, published: int | None = None):
        super().__init__(signum)
        self.signum = signum
        self.exit_code = 128 + signum
        self.published = published


def _handler(signum, frame):
    raise Interrupted(signum)


def install() -> None:
    """Route SIGINT and SIGTERM to `Interrupted` (main thread only; a no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _handler)


def raise_pending() -> None:
    """A safe point: raise Interrupted when SIGINT or SIGTERM arrived while blocked (the signal is taken)."""
    if _state["pending"] is None and _state["blocked"] and signal.sigpending() & SIGNALS:
        info = signal.sigtimedwait(SIGNALS, 0)
        if info is not None:
            _state["pending"] = info.si_signo
    if _state["pending"] is not None:
        raise Interrupted(_state["pending"])


def defer() -> None:
    """Block SIGINT and SIGTERM from here on (main thread; threads created later inherit it, so call it before
    bpy is imported): they are raised only at raise_pending(). They stay blocked, so one arriving when the work
    is done (or inside Blender's teardown) is ignored instead of meeting Blender's own disposition."""
    if threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        _state["blocked"] = True


@contextmanager
def deferred():
    """defer() for the block; a signal that arrived inside it is raised on leaving it."""
    defer()
    yield
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
