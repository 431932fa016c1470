"""A killed farm worker (Blender-free): its export child dies with it, and the shard shows as died, killed by the
signal, never as running."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from rowbeam.farm import engines
from rowbeam.farm.status import _alive, status_lines
from rowbeam.farm.worker import read_status

WORKER = textwrap.dedent("""
    import subprocess, sys, time
    from rowbeam.farm.worker import spawn_child
    child = spawn_child([sys.executable, "-c", "import time; time.sleep(120)"], ".", subprocess.DEVNULL)
    print(child.pid, flush=True)
    time.sleep(120)
""")


def _gone(pid, seconds=5.0) -> bool:
    end = time.time() + seconds
    while time.time() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_killing_a_worker_kills_its_export_child(tmp_path):
    worker = subprocess.Popen([sys.executable, "-c", WORKER], cwd=tmp_path, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=os.getcwd()))
    child = int(worker.stdout.readline())
    assert _alive(child)
    try:
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        assert _gone(child), "the export child outlived its killed worker"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


SELF_KILLING = textwrap.dedent("""
    import json, os, signal, sys
    from pathlib import Path
    plan_dir, shard = sys.argv[1], sys.argv[2]
    p = Path(plan_dir) / "status" / f"{shard}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"schema": "rowbeam/shard_status@1", "shard": shard, "state": "running",
                             "attempts": 1, "pid": os.getpid()}))
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_a_sigkilled_worker_is_recorded_as_died(tmp_path, monkeypatch):
    script = tmp_path / "worker.py"
    script.write_text(SELF_KILLING)
    monkeypatch.setattr(engines, "worker_argv", lambda plan_dir, sid: [sys.executable, str(script), str(plan_dir), sid])
    said = []
    rcs = engines.run_local({}, tmp_path, ["00001"], workers=1, retries=1, say=said.append)
    assert rcs == {"00001": -signal.SIGKILL}
    st = read_status(tmp_path, "00001")
    assert st["state"] == "died" and st["killed_by"] == "SIGKILL" and st["worker_exit_code"] == -9
    assert said and all("died (killed by SIGKILL)" in s for s in said) and not any("running" in s for s in said)
    row = {"id": "00001", "scenario": "s", "sensor": "cam", "events": 1, "state": "died", "seconds": None,
           "attempts": 1, "quarantined": [], "killed_by": "SIGKILL"}
    line = status_lines({"shards": [row], "counts": {"died": 1}, "events_done": 0, "events_total": 1,
                         "events_per_s_per_worker": None, "eta_s_one_worker": None})[0]
    assert "died (killed by SIGKILL)" in line


def test_a_zombie_worker_is_not_alive():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    time.sleep(0.5)                      # exited, not reaped: a zombie
    try:
        assert not _alive(p.pid)
    finally:
        p.wait()
