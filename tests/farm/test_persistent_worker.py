"""Persistent farm workers (one Blender session, many shards) with real Cycles exports: every payload byte equals a
fresh-process run of the same plan, a 3-shard plan on one worker shows the per-shard overhead (printed, not
asserted), and a worker killed mid-plan is restarted and resumes. Scenes: 80x45, labels only (a plane; plates
through an opencv lens with object labels)."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def rowbeam(*args, timeout=900):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "rowbeam", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def _spec(root: Path, name: str, scenarios: list, max_cost: float) -> Path:
    p = root / f"{name}.json"
    p.write_text(json.dumps({"schema": "rowbeam/dataset@1", "name": name, "scenarios": scenarios,
                             "split": {"rule": "explicit", "map": {"ga": "train", "gp": "val"}},
                             "shards": {"max_cost": max_cost}}))
    return p


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    """a: fronto plane; p: plates through an opencv lens, object labels (80x45, labels only)."""
    from rowbeam.blender.scenes import calibration, common, lens_scenes

    root = tmp_path_factory.mktemp("persistent")
    for name, build in (("a", lambda: calibration.fronto_plane(scale=16)),
                        ("p", lambda: lens_scenes.lens_plates("opencv", scale=16))):
        rig = build()[1]                                    # each builds the open scene anew
        rig["sensors"][0]["rgb_samples"] = 0                # labels only (the lens plates' rig already is)
        common.save(root / f"{name}.blend", rig)
    return root


def _plan(root: Path, name: str, events: dict, per_shard: int | None) -> Path:
    scen = [{"blend": f"{s}.blend", "rig": f"{s}.rig.json", "scenario": s, "lineage_group": f"g{s}",
             "events": {"count": n}} for s, n in events.items()]
    spec = _spec(root, name, scen, 1e9 if per_shard is None else per_shard * 80 * 45)
    r = rowbeam("plan", spec, "--out", root / name)
    assert r.returncode == 0, r.stderr
    return root / name


def payload_hashes(plan_dir: Path) -> dict:
    """{bundle-relative payload path: sha256} of every EXR/npy payload under the plan's bundles."""
    return {str(f.relative_to(plan_dir / "bundles")): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted((plan_dir / "bundles").rglob("*")) if f.suffix in (".exr", ".npy", ".npz")
            and "/events/" in f.as_posix()}


def _serve(plan_dir: Path) -> float:
    t0 = time.perf_counter()
    r = rowbeam("farm", "worker", plan_dir, "--serve")
    assert r.returncode == 0, r.stdout + r.stderr
    return time.perf_counter() - t0


def test_one_worker_runs_a_three_shard_plan_bitwise_like_fresh_processes(scenes):
    root = scenes
    three = _plan(root, "three", {"a": 3, "p": 2}, per_shard=1)         # 5 one-event shards
    fresh = _plan(root, "fresh", {"a": 3, "p": 2}, per_shard=1)
    one = _plan(root, "one", {"a": 3}, per_shard=None)                 # the same 3 events in one shard
    r = rowbeam("farm", "run", fresh, "--workers", "1", "--fresh-process")
    assert r.returncode == 0, r.stdout + r.stderr
    _serve(one)                                    # warm the file cache like the runs measured below
    one_s = _serve(_plan(root, "one_b", {"a": 3}, per_shard=None))
    three_s = _serve(three)
    assert payload_hashes(three) == payload_hashes(fresh) and len(payload_hashes(three)) > 5 * 8
    status = {i: json.loads((three / f"status/{i}.json").read_text()) for i in ("00000", "00001", "00002", "00003")}
    assert all(s["state"] == "done" for s in status.values())
    assert len({s["pid"] for s in status.values()}) == 1 and len({s["child_pid"] for s in status.values()}) == 1
    # the scenario's .blend opened once: reused by its 2nd and 3rd shard; the next scenario opens its own
    assert [s["session"]["reused_blend"] for s in status.values()] == [False, True, True, False]
    a_shards_s = sum(s["seconds"] for s in list(status.values())[:3])
    one_shard_s = json.loads((root / "one_b/status/00000.json").read_text())["seconds"]
    print(f"\npersistent worker, scenario a: 3 one-event shards {a_shards_s:.2f} s vs one 3-event shard "
          f"{one_shard_s:.2f} s: overhead per shard after the first {(a_shards_s - one_shard_s) / 2:.3f} s "
          f"(worker wall: 5 shards {three_s:.2f} s, 1 shard of 3 events {one_s:.2f} s)")


def test_a_persistent_worker_killed_mid_plan_is_restarted_and_resumes(scenes):
    """One local worker over 3 shards of 2 events: killed (worker and its Blender session, SIGKILL) once the
    2nd shard's first event is published; the engine records the shard as died, restarts the worker, which
    resumes it (the published event kept) and finishes the plan with the payloads of an uninterrupted run."""
    root = scenes
    p = _plan(root, "killed", {"a": 6}, per_shard=2)
    ref = _plan(root, "unkilled", {"a": 6}, per_shard=2)
    _serve(ref)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    farm = subprocess.Popen([sys.executable, "-m", "rowbeam", "farm", "run", str(p), "--workers", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    first = p / "bundles/a/events/camera_front/000002/manifest.json"
    killed, deadline = None, time.time() + 600
    while time.time() < deadline and farm.poll() is None and killed is None:
        st_path = p / "status/00001.json"
        if first.exists() and st_path.exists():
            st = json.loads(st_path.read_text())
            if st["state"] != "running":
                break
            for pid in (st["pid"], st.get("child_pid")):
                if pid:
                    os.kill(pid, signal.SIGKILL)
            killed = (st["pid"], first.parent.stat().st_ino)
        time.sleep(0.02)
    out, _ = farm.communicate(timeout=900)
    assert farm.returncode == 0, out
    assert killed is not None, "the plan finished before the worker could be killed"
    st = json.loads((p / "status/00001.json").read_text())
    assert st["state"] == "done" and st["attempts"] == 2 and st["pid"] != killed[0], (st, out)
    assert "shard 00001 attempt 1: died (killed by SIGKILL)" in out and "shard 00001 attempt 2: done" in out, out
    assert (p / "bundles/a/events/camera_front/000002").stat().st_ino == killed[1]
    assert payload_hashes(p) == payload_hashes(ref)
