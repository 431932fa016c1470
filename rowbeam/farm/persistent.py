"""A persistent farm worker: `rowbeam farm worker DIR --serve [--shards IDS] [--index I] [--since T] [--retries R]`.

One worker runs many shards through one Blender session: its export child (`python -m
rowbeam.blender.export.serve`, started at its first shard and kept) imports bpy once and opens a scenario's .blend
once, running each shard's export command as a fresh process would (same bytes). Shards are claimed one at a time
with a lock on DIR/farm/claims/<shard>.lock (flock, released by the kernel when the worker dies), so any number of
workers -- local processes, Slurm array tasks, Ray tasks -- serve one list: each takes the next shard (from `--index`'s
onwards) that is neither finished nor held, until none is left. A worker or session that is killed loses nothing
published; the next worker takes its shard again (the exporter skips complete events). `--since` names the farm run
(its start, unix s): a shard finished in it is skipped; one that failed or died in it is retried while it has had
fewer than 1 + `--retries` attempts in it; one finished before it (an explicit rerun) runs again.
"""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from .plan import load_plan
from .worker import EXIT_REFUSED, EXIT_RETRY, fresh_process, read_status, run_shard, spawn_child

SERVE_MODULE = "rowbeam.blender.export.serve"       # started by command (python -m), never imported here
FINISHED = ("done", "quarantined", "refused")


class ExportSession:
    """The worker's Blender session: a `rowbeam.blender.export.serve` child, (re)started when needed; called as a
    run_shard runner. Its own stderr goes to DIR/logs/worker-<pid>.log."""

    def __init__(self, plan_dir: Path):
        self.plan_dir, self.proc, self.details = Path(plan_dir), None, None

    def _start(self) -> None:
        (self.plan_dir / "logs").mkdir(parents=True, exist_ok=True)
        with open(self.plan_dir / "logs" / f"worker-{os.getpid()}.log", "ab") as err:
            self.proc = spawn_child([sys.executable, "-m", SERVE_MODULE], cwd=self.plan_dir, stdout=subprocess.PIPE,
                                    stdin=subprocess.PIPE, stderr=err)

    def __call__(self, shard: dict, plan_dir: Path, log_file, started) -> int:
        """Run `shard`'s export command in the session (a non-export command in a fresh process); its exit status
        (negative: the session was killed by that signal; it is restarted for the next shard)."""
        if shard["argv"][:2] != ["rowbeam", "export"]:
            return fresh_process(shard, plan_dir, log_file, started)
        self.details = None
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        started(self.proc.pid)
        log_file.flush()
        request = {"argv": shard["argv"][2:], "cwd": str(Path(plan_dir).resolve()), "log": log_file.name}
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = b""
        if not line:                                   # the session died
            rc, self.proc = self.proc.wait(), None
            return rc
        reply = json.loads(line)
        self.details = {"reused_blend": bool(reply["reused"]), "export_seconds": reply["seconds"]}
        return int(reply["rc"])

    def close(self) -> None:
        """End the session (end of its input); killed if it does not exit within 30 s."""
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.proc = None


@contextmanager
def claim(plan_dir: Path, shard_id: str):
    """Yield True while this process holds the shard's claim lock, False when another process holds it."""
    path = Path(plan_dir) / "farm" / "claims" / f"{shard_id}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def runnable(plan_dir: Path, shard_id: str, since: float, retries: int) -> bool:
    """Whether a worker of the farm run `since` should (still) run the shard (see the module docstring)."""
    st = read_status(plan_dir, shard_id) or {}
    if st.get("since") != since:
        return not (since == 0.0 and st.get("state") in FINISHED)
    return st.get("state") not in FINISHED and int(st.get("run_attempt", 0)) < 1 + max(0, retries)


def serve(plan_dir, ids: list, first: int = 0, since: float = 0.0, retries: int = 2, say=print) -> int:
    """Run every shard of `ids` (from position `first` onwards, wrapping) this worker can claim, each retried in
    place while runnable, through one export session. Exit status: 0, EXIT_REFUSED when a shard it ran was refused,
    EXIT_RETRY when one failed, 128 + signal when its session was interrupted."""
    plan_dir = Path(plan_dir)
    order = ids[first % len(ids):] + ids[:first % len(ids)] if ids else []
    session, worst = ExportSession(plan_dir), 0
    try:
        for sid in order:
            while True:
                with claim(plan_dir, sid) as mine:
                    if not mine or not runnable(plan_dir, sid, since, retries):
                        break
                    rc = run_shard(plan_dir, sid, session, since)
                st = read_status(plan_dir, sid) or {}
                code = st.get("exit_code", rc)
                say(f"rowbeam farm: shard {sid} attempt {st.get('attempts', '?')}: {st.get('state', '?')} "
                    f"(exit {code})")
                if isinstance(code, int) and code >= 128:       # interrupted: stop serving
                    return code
                if rc in (0, EXIT_REFUSED):
                    worst = max(worst, rc)
                    break
                worst = EXIT_RETRY
    finally:
        session.close()
    return worst


def run(args) -> int:
    """`rowbeam farm worker PLAN --serve` with parsed arguments: every pending shard of the plan, or `--shards`."""
    plan, plan_dir = load_plan(args.plan)
    ids = args.shards.split(",") if args.shards else [s["id"] for s in plan["shards"]]
    first = 0
    if args.index is not None:
        position = plan["shards"][args.index]["id"]
        first = ids.index(position) if position in ids else 0
    return serve(plan_dir, ids, first, float(args.since), args.retries, say=lambda t: print(t, flush=True))
