"""Farm runs on the local engine with real Cycles exports: plan determinism, 3 workers vs one, a worker killed
mid-shard, finalize (hash, splits, QA), a planted leak, replay, and refused inputs. Scenes: 80x45, rgb off."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent


def rowbeam(*args, cwd=None, timeout=900):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "rowbeam", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


def _write_spec(folder: Path, name: str, scenarios: list, split_map: dict, max_cost: float = 1e9) -> Path:
    p = folder / f"{name}.json"
    p.write_text(json.dumps({"schema": "rowbeam/dataset@1", "name": name, "scenarios": scenarios,
                             "split": {"rule": "explicit", "map": split_map}, "shards": {"max_cost": max_cost}}))
    return p


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    """a (fronto plane), b (tilted plane), c (moving plane): 80x45 labels-only .blend + rig files; d = a copy of a."""
    from scenes import calibration, common

    root = tmp_path_factory.mktemp("farm")
    for name, fn in (("a", calibration.fronto_plane), ("b", calibration.tilted_plane),
                     ("c", calibration.moving_plane)):
        _, rig = fn(scale=16)
        rig["sensors"][0]["rgb_samples"] = 0
        common.save(root / f"{name}.blend", rig)
    shutil.copyfile(root / "a.blend", root / "d.blend")
    shutil.copyfile(root / "a.rig.json", root / "d.rig.json")
    scen = [{"blend": "a.blend", "rig": "a.rig.json", "scenario": "a", "lineage_group": "ga", "events": {"count": 6}},
            {"blend": "b.blend", "rig": "b.rig.json", "scenario": "b", "lineage_group": "gb", "events": {"count": 1}},
            {"blend": "c.blend", "rig": "c.rig.json", "scenario": "c", "lineage_group": "gc", "events": {"count": 1}}]
    spec = _write_spec(root, "tiny", scen, {"ga": "train", "gb": "train", "gc": "val"})
    return root, spec


@pytest.fixture(scope="module")
def runs(scenes):
    """Plan the spec twice; P1 on 3 workers with the worker of shard 00000 (6 events) killed (SIGKILL, worker and
    its export) after its first event is published; P2 on one worker. Returns (root, p1, p2, timings)."""
    root, spec = scenes
    p1, p2 = root / "p1", root / "p2"
    t = {}
    for p in (p1, p2):
        t0 = time.perf_counter()
        r = rowbeam("plan", spec, "--out", p)
        t[f"plan {p.name}"] = time.perf_counter() - t0
        assert r.returncode == 0, r.stderr
    env = dict(os.environ, PYTHONPATH=str(REPO))
    t0 = time.perf_counter()
    farm = subprocess.Popen([sys.executable, "-m", "rowbeam", "farm", "run", str(p1), "--workers", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    first = p1 / "bundles/a/events/camera_front/000000/manifest.json"
    status = p1 / "status/00000.json"
    killed = None
    deadline = time.time() + 600
    while time.time() < deadline and farm.poll() is None:
        if first.exists() and status.exists():
            st = json.loads(status.read_text())
            if st.get("child_pid"):
                for pid in (st["pid"], st["child_pid"]):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                killed = (st["pid"], first.parent.stat().st_ino)
                break
        time.sleep(0.02)
    out, _ = farm.communicate(timeout=900)
    t["farm local 3 workers (with a kill)"] = time.perf_counter() - t0
    assert farm.returncode == 0, out
    assert killed is not None, "the shard finished before it could be killed"
    t0 = time.perf_counter()
    r = rowbeam("farm", "run", p2, "--workers", "1")
    t["farm local 1 worker"] = time.perf_counter() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    print("\nwall times (s):", {k: round(v, 1) for k, v in t.items()})
    return root, p1, p2, killed, out


def test_plan_is_deterministic_and_complete(runs):
    root, p1, p2, _, _ = runs
    assert (p1 / "plan.json").read_bytes() == (p2 / "plan.json").read_bytes()
    plan = json.loads((p1 / "plan.json").read_text())
    assert [(s["scenario"], s["first_event"], s["count"]) for s in plan["shards"]] == [("a", 0, 6), ("b", 0, 1),
                                                                                        ("c", 0, 1)]
    # sample ids: <scenario>.<sensor>.<reference time>; event k starts at k/30 s (ns, rounded half up) and its
    # reference time is the centre of readout (12 ms) + exposure (4 ms): start + 8 ms
    expected = [f"a.camera_front.{(2 * k * 10**9 + 30) // 60 + 8_000_000}" for k in range(6)]
    assert plan["shards"][0]["sample_ids"] == expected
    assert plan["shards"][0]["argv"][:3] == ["rowbeam", "export", str(root / "a.blend")]
    assert "--split train" in plan["shards"][0]["command"] and "--out bundles/a" in plan["shards"][0]["command"]
    assert plan["shards"][0]["cost"] == 6 * 80 * 45


def test_killed_worker_is_retried_and_resumes(runs):
    _, p1, _, (killed_pid, inode), out = runs
    st = json.loads((p1 / "status/00000.json").read_text())
    assert st["state"] == "done" and st["attempts"] == 2 and st["pid"] != killed_pid, (st, out)
    # the event published before the kill was kept (same folder), not rendered again
    assert (p1 / "bundles/a/events/camera_front/000000").stat().st_ino == inode
    assert "shard 00000 attempt 1" in out and "shard 00000 attempt 2: done" in out


def test_three_workers_and_one_give_one_dataset_hash(runs):
    _, p1, p2, _, _ = runs
    docs = []
    for p in (p1, p2):
        r = rowbeam("finalize", p)
        assert r.returncode == 0, r.stdout + r.stderr
        docs.append(json.loads((p / "dataset.json").read_text()))
    assert docs[0]["dataset_hash"] == docs[1]["dataset_hash"]
    assert [s["content_sha256"] for s in docs[0]["samples"]] == [s["content_sha256"] for s in docs[1]["samples"]]
    d = docs[0]
    assert d["status"] == "pass" and len(d["samples"]) == 8 and not d["missing"]
    assert (p1 / "splits/val.txt").read_text().split() == [s["sample_id"] for s in d["samples"] if s["scenario"] == "c"]
    assert len((p1 / "splits/train.txt").read_text().split()) == 7
    assert d["qa"]["status"] == "pass" and d["leakage"]["status"] == "pass"
    m = json.loads((p1 / d["samples"][0]["path"] / "manifest.json").read_text())
    assert m["lineage"]["split"] == "train" and m["lineage"]["lineage_group"] == "ga"
    r = rowbeam("farm", "status", p1)
    assert r.returncode == 0 and "shards: done 3; events 8/8" in r.stdout, r.stdout


def test_planted_leak_fails_finalize(scenes):
    """d.blend is a copy of a.blend declared as another lineage group in another split: finalize reports the
    identical payloads across splits and exits 1."""
    root, _ = scenes
    spec = _write_spec(root, "leaky", [
        {"blend": "a.blend", "rig": "a.rig.json", "scenario": "a", "lineage_group": "ga", "events": {"count": 1}},
        {"blend": "d.blend", "rig": "d.rig.json", "scenario": "d", "lineage_group": "gd", "events": {"count": 1}}],
        {"ga": "train", "gd": "test"})
    p = root / "leak"
    assert rowbeam("plan", spec, "--out", p).returncode == 0
    assert rowbeam("farm", "run", p, "--workers", "2").returncode == 0
    r = rowbeam("finalize", p)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "LEAK identical camera_z in a.camera_front." in r.stdout and "(test)" in r.stdout, r.stdout
    audit = json.loads((p / "dataset.json").read_text())["leakage"]
    assert audit["status"] == "fail" and not audit["lineage_groups_in_several_splits"]
    assert {x["modality"] for x in audit["identical_payloads_across_splits"]} == {"camera_z", "range"}


def test_replay_reproduces_and_names_the_first_divergence(runs):
    from tests.helpers import rehash

    _, p1, p2, _, _ = runs
    sid = json.loads((p2 / "plan.json").read_text())["shards"][1]["sample_ids"][0]
    r = rowbeam("replay", p2, sid)
    assert r.returncode == 0 and "reproduced" in r.stdout, r.stdout + r.stderr
    from contracts.arrays import write_exr

    event = p2 / "bundles/b/events/camera_front/000000"
    m = json.loads((event / "manifest.json").read_text())
    from contracts.bundle_reader import open_event

    z = open_event(event).array("camera_z", verify=False).copy()
    z[10, 20] += 0.001                                          # 1 mm: beyond camera_z's 1e-4 m tolerance
    write_exr(event / "camera_z.exr", z, ["camera_z"], "float32")
    rehash(event, "camera_z")
    r = rowbeam("replay", p2, sid)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "first divergence: camera_z[10, 20]: published" in r.stdout and "numeric, tol 0.0001" in r.stdout, r.stdout
    assert m["sample_id"] == sid


def test_changed_inputs_and_bad_specs_are_refused(scenes, runs, tmp_path):
    root, spec = scenes
    _, p1, _, _, _ = runs
    rig = root / "c.rig.json"
    original = rig.read_text()
    try:
        doc = json.loads(original)
        doc["sensors"][0]["exposure_ns"] = 3000000
        rig.write_text(json.dumps(doc))
        r = rowbeam("farm", "run", p1, "--shards", "00002")
        assert r.returncode == 2 and r.stderr.strip() == (
            f"rowbeam farm run: error: {rig}: changed since the plan was made (rig sha256); plan again"), r.stderr
        r = rowbeam("farm", "worker", p1, "00002")
        assert r.returncode == 2 and "changed since the plan was made" in r.stderr
    finally:
        rig.write_text(original)
    bad = json.loads(spec.read_text())
    bad["scenarios"][0]["events"] = {"first": 2, "count": 2}
    bad["scenarios"].append({**bad["scenarios"][0], "events": {"first": 3, "count": 1}})
    (root / "overlap.json").write_text(json.dumps(bad))
    r = rowbeam("plan", root / "overlap.json", "--out", tmp_path / "o")
    assert r.returncode == 2 and "scenarios[3].events: events 3..3 of scenario 'a' sensor 'camera_front' overlap " \
        "scenarios[0] (2..3)" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()
    r = rowbeam("plan", spec, "--out", p1 / "plan.json")
    assert r.returncode == 2 and "not an empty folder" in r.stderr


def test_missing_external_file_is_refused_before_rendering(tmp_path):
    """A texture the .blend uses but that is not on disk (traced by Blender Asset Tracer): plan refuses it."""
    import bpy

    from scenes import calibration, common

    _, rig = calibration.fronto_plane(scale=16)
    rig["sensors"][0]["rgb_samples"] = 0
    img = bpy.data.images.new("tex", 4, 4)
    img.filepath_raw = str(tmp_path / "tex.png")
    img.file_format = "PNG"
    img.save()
    mat = bpy.data.materials.new("textured")
    mat.use_nodes = True
    mat.node_tree.nodes.new("ShaderNodeTexImage").image = img
    bpy.data.objects["plane_z8"].data.materials.append(mat)
    common.save(tmp_path / "t.blend", rig)
    spec = _write_spec(tmp_path, "dep", [{"blend": "t.blend", "rig": "t.rig.json", "scenario": "t",
                                          "events": {"count": 1}}], {"t": "train"})
    (tmp_path / "tex.png").rename(tmp_path / "moved.png")
    r = rowbeam("plan", spec, "--out", tmp_path / "p")
    assert r.returncode == 2 and r.stderr.strip().endswith(f"uses missing external file(s): {tmp_path / 'tex.png'}"), \
        r.stderr
    (tmp_path / "moved.png").rename(tmp_path / "tex.png")
    assert rowbeam("plan", spec, "--out", tmp_path / "p").returncode == 0
    plan = json.loads((tmp_path / "p/plan.json").read_text())
    dep = plan["scenarios"][0]["dependencies"]
    assert [d["path"] for d in dep] == [str(tmp_path / "tex.png")]
    assert plan["scenarios"][0]["dependency_tracer"].startswith("blender-asset-tracer")
    assert np.isclose(len(dep[0]["sha256"]), 64)
