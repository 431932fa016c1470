"""One shard on one worker: `rowbeam farm worker DIR SHARD` (every engine runs this same command).

Refuses a changed .blend/rig/dependency (exit 2, nothing rendered), runs the shard's export command in DIR
(the exporter publishes each event atomically, skips events already complete and tolerates a second
writer on the same shard), then records DIR/status/<shard>.json: done, quarantined (with each event's
minimal replay command) or failed. Exit status: 0 done or quarantined, 2 refused (do not retry),
3 failed (an engine retries).
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import atomic_write_json, load_json

from .plan import load_plan, shard_by_id, verify_inputs

EXIT_REFUSED, EXIT_RETRY = 2, 3
STATUS_SCHEMA = "rowbeam/shard_status@1"


def python_argv(argv: list) -> list:
    """A plan command (`rowbeam ...`) as this interpreter runs it: sys.executable -m rowbeam ..."""
    return [sys.executable, "-m", "rowbeam", *argv[1:]] if argv and argv[0] == "rowbeam" else list(argv)


def child_env() -> dict:
    """The environment of a child: rowbeam's source root first on PYTHONPATH (engines start from anywhere)."""
    root = str(Path(__file__).resolve().parents[2])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))


def status_path(plan_dir: Path, shard_id: str) -> Path:
    return Path(plan_dir) / "status" / f"{shard_id}.json"


def read_status(plan_dir: Path, shard_id: str) -> dict | None:
    p = status_path(plan_dir, shard_id)
    return load_json(p, "shard status") if p.exists() else None


def _write_status(plan_dir: Path, shard_id: str, doc: dict) -> None:
    p = status_path(plan_dir, shard_id)
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(p, {"schema": STATUS_SCHEMA, "shard": shard_id, **doc})


def shard_outcome(plan_dir: Path, plan: dict, shard: dict) -> dict:
    """What the bundle holds for a shard: {published: [ids], quarantined: [{sample_id, folder, replay}], missing}."""
    bundle = Path(plan_dir) / next(sc["bundle"] for sc in plan["scenarios"] if sc["scenario"] == shard["scenario"])
    out = {"published": [], "quarantined": [], "missing": []}
    ids = zip(range(shard["first_event"], shard["first_event"] + shard["count"]), shard["sample_ids"], strict=True)
    for k, sid in ids:
        loc = f"events/{shard['sensor']}/{k:06d}"
        for top, kind in ((bundle, "published"), (bundle / "quarantine", "quarantined")):
            m = top / loc / "manifest.json"
            if m.is_file() and json.loads(m.read_text()).get("sample_id") == sid:
                if kind == "published":
                    out["published"].append(sid)
                else:
                    out["quarantined"].append({"sample_id": sid, "folder": str(m.parent.relative_to(plan_dir)),
                                               "replay": replay_command(plan_dir, sid),
                                               "export": export_command(shard, k)})
                break
        else:
            out["missing"].append(sid)
    return out


def export_command(shard: dict, index: int, out: str | None = None) -> str:
    """The minimal export command of one event of `shard` (run in the plan folder), into `out` if given."""
    argv = list(shard["argv"])
    argv[argv.index("--first-event") + 1] = str(index)
    argv[argv.index("--count") + 1] = "1"
    if out is not None:
        argv[argv.index("--out") + 1] = out
    return shlex.join(argv)


def replay_command(plan_dir, sid: str) -> str:
    return shlex.join(["rowbeam", "replay", str(Path(plan_dir).resolve()), sid])


PR_SET_PDEATHSIG = 1        # linux/prctl.h


def _die_with_parent(parent_pid: int):
    """preexec_fn of a worker's child (Linux): the kernel sends it SIGKILL when the worker dies (killed with
    SIGKILL or otherwise), so a killed worker leaves no export running beside its retry."""
    def arm() -> None:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent_pid:          # the worker died before the request was armed
            os._exit(137)
    return arm


def spawn_child(argv: list, cwd, stdout, stdin=None, stderr=subprocess.STDOUT) -> subprocess.Popen:
    """Start a worker's child process (stderr into `stdout` unless given) that dies with the worker (Linux:
    parent-death signal; elsewhere a plain child)."""
    preexec = _die_with_parent(os.getpid()) if sys.platform.startswith("linux") else None
    return subprocess.Popen(argv, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, env=child_env(),
                            preexec_fn=preexec)


def mark_died(plan_dir: Path, shard_id: str, worker_rc: int) -> dict | None:
    """After a worker exited without recording an outcome (killed: `worker_rc` < 0 is the signal), its shard's
    status still says running: record `died` with the worker's exit status. Returns the new status (None: the
    worker had recorded its outcome)."""
    st = read_status(plan_dir, shard_id)
    if not st or st.get("state") != "running":
        return None
    doc = {k: v for k, v in st.items() if k not in ("schema", "shard")}
    doc.update(state="died", worker_exit_code=worker_rc)
    if worker_rc < 0:
        import signal

        doc["killed_by"] = signal.Signals(-worker_rc).name if -worker_rc in signal.valid_signals() else str(-worker_rc)
    _write_status(plan_dir, shard_id, doc)
    return read_status(plan_dir, shard_id)


def fresh_process(shard: dict, plan_dir: Path, log_file, started) -> int:
    """Run a shard's export command in a new child process (output into `log_file`); `started(pid)` once it runs.
    Returns its exit status (negative: killed by that signal)."""
    child = spawn_child(python_argv(shard["argv"]), cwd=plan_dir, stdout=log_file)
    started(child.pid)
    return child.wait()


def run_shard(plan_dir, shard_id: str, runner=fresh_process, since: float = 0.0) -> int:
    """Run one shard with `runner(shard, plan_dir, log_file, started)` (default: a fresh export process; a
    persistent worker passes its Blender session) and record its status. `since`: the farm run this attempt
    belongs to (its start, unix s): `run_attempt` counts the attempts since then."""
    plan, plan_dir = load_plan(plan_dir)
    shard = shard_by_id(plan, shard_id)
    previous = read_status(plan_dir, shard_id) or {}
    attempt = int(previous.get("attempts", 0)) + 1
    run_attempt = int(previous.get("run_attempt", 0)) + 1 if previous.get("since") == since else 1
    base = {"scenario": shard["scenario"], "sensor": shard["sensor"], "events": shard["count"], "attempts": attempt,
            "since": since, "run_attempt": run_attempt, "host": platform.node(), "pid": os.getpid(),
            "command": shard["command"]}
    try:
        verify_inputs(plan, shard["scenario"])
    except RowbeamError as exc:
        _write_status(plan_dir, shard_id, {**base, "state": "refused", "error": str(exc)})
        print(f"rowbeam farm worker: error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    t0 = time.time()
    running = {**base, "state": "running", "started_unix": round(t0, 3)}
    _write_status(plan_dir, shard_id, running)

    def started(pid: int) -> None:
        base["child_pid"] = pid
        _write_status(plan_dir, shard_id, {**running, "child_pid": pid})

    log = plan_dir / "logs" / f"{shard_id}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        f.write(f"--- attempt {attempt} pid {os.getpid()} host {platform.node()}: {shard['command']}\n".encode())
        f.flush()
        rc = runner(shard, plan_dir, f, started)
    seconds = time.time() - t0
    outcome = shard_outcome(plan_dir, plan, shard)
    state = ("failed" if outcome["missing"] or rc not in (0, 1)
             else "quarantined" if outcome["quarantined"] else "done")
    tail = log.read_text(errors="replace").strip().splitlines()[-1:] if state == "failed" else []
    session = getattr(runner, "details", None)        # a persistent worker's session: {reused_blend, seconds}
    _write_status(plan_dir, shard_id, {**base, "state": state, "exit_code": rc, "started_unix": round(t0, 3),
                                       "seconds": round(seconds, 3), **outcome, **({"session": session} if session else {}),
                                       **({"error": tail[0][:300]} if tail else {})})
    return 0 if state in ("done", "quarantined") else (EXIT_REFUSED if rc == 2 else EXIT_RETRY)
