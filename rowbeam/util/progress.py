"""Progress inside an export: the current job, its stage, units done/total, elapsed time and ETA.

`Progress` is fed by the exporter (stage starts, counts) and by Cycles (`Sample a/b` from the
render_stats handler while a render runs); a sink turns updates into text. Sinks: `TtySink`
(one line rewritten in place), `LineSink` (plain lines, throttled, for pipes and logs) and no
sink (quiet). Times are wall-clock seconds.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass

SAMPLE = re.compile(r"\bSample (\d+)/(\d+)")


@dataclass
class StageState:
    job: str
    stage: str
    done: int
    total: int | None
    unit: str
    started: float

    def text(self, now: float) -> str:
        elapsed = now - self.started
        out = f"{self.job}: {self.stage}"
        if self.total:
            out += f" {self.done}/{self.total} {self.unit}".rstrip()
            if 0 < self.done < self.total:
                out += f", ETA {elapsed / self.done * (self.total - self.done):.0f} s"
        return out + f", {elapsed:.1f} s"


class Progress:
    """Receives stage updates; forwards them to `sink(state, final)` (None: silent)."""

    def __init__(self, sink=None, clock=time.monotonic):
        self.sink = sink
        self.clock = clock
        self.job = ""
        self.state: StageState | None = None

    def start_job(self, label: str) -> None:
        self.job = label
        self.state = None

    def stage(self, name: str, total: int | None = None, unit: str = "") -> None:
        """A new stage of the current job begins (`total` units of `unit` when countable)."""
        self.state = StageState(self.job, name, 0, total, unit, self.clock())
        self._emit()

    def advance(self, done: int) -> None:
        if self.state is not None and done != self.state.done:
            self.state.done = done
            self._emit()

    def render_stats(self, text: str) -> None:
        """Cycles' status text (bpy.app.handlers.render_stats): `Sample a/b` advances the stage."""
        m = SAMPLE.search(text or "")
        if m and self.state is not None and self.state.unit == "samples":
            self.state.total = int(m.group(2))
            self.advance(int(m.group(1)))

    def _emit(self) -> None:
        if self.sink is not None and self.state is not None:
            self.sink(self.state, self.clock())


class TtySink:
    """Rewrites one status line on a terminal (at most every `interval` s); `clear()` before other output."""

    def __init__(self, stream, interval: float = 0.1):
        self.stream, self.interval, self.last, self.width = stream, interval, -1e9, 0

    def __call__(self, state: StageState, now: float) -> None:
        if now - self.last < self.interval and state.done not in (0, state.total):
            return
        self.last = now
        text = state.text(now)
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)

    def clear(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


class LineSink:
    """Plain lines for pipes and logs: a heartbeat with the current stage at most every `interval` s
    (so a quick event prints nothing between its job lines)."""

    def __init__(self, stream, interval: float = 5.0, clock=time.monotonic):
        self.stream, self.interval, self.last = stream, interval, clock()

    def __call__(self, state: StageState, now: float) -> None:
        if now - self.last < self.interval:
            return
        self.last = now
        self.stream.write(f"rowbeam:   {state.text(now)}\n")
        self.stream.flush()

    def clear(self) -> None:
        pass
