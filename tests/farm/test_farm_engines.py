"""Farm runs with real Cycles exports on the local engine, a real single-node Slurm and a real local Ray cluster:
plan determinism, 3 workers vs one, a worker killed mid-shard, finalize (hash, splits, QA), a planted leak,
replay, resubmission by array index, and refused inputs. Scenes: 80x45, rgb off, 1-6 events each."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rowbeam.farm.dataset import dataset_hash
from tests.farm.clusters import ray_cluster as ray_cluster_of
from tests.farm.clusters import slurm_cluster

REPO = Path(__file__).resolve().parents[2]


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
    from rowbeam.blender.scenes import calibration, common

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
    from rowbeam.bundle.arrays import write_exr

    event = p2 / "bundles/b/events/camera_front/000000"
    m = json.loads((event / "manifest.json").read_text())
    from rowbeam.bundle.reader import open_event

    saved = {n: (event / n).read_bytes() for n in ("camera_z.exr", "manifest.json")}
    try:
        z = open_event(event).array("camera_z", verify=False).copy()
        z[10, 20] += 0.001                                      # 1 mm: beyond camera_z's 1e-4 m tolerance
        write_exr(event / "camera_z.exr", z, ["camera_z"], "float32")
        rehash(event, "camera_z")
        r = rowbeam("replay", p2, sid)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "first divergence: camera_z[10, 20]: published" in r.stdout and "numeric, tol 0.0001" in r.stdout, \
            r.stdout
    finally:
        for n, data in saved.items():                           # P2 is the single-worker reference of later tests
            (event / n).write_bytes(data)
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

    from rowbeam.blender.scenes import calibration, common

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
    assert dep[0]["sha256"] == hashlib.sha256((tmp_path / "tex.png").read_bytes()).hexdigest()
    # --pack: the .blend and its texture copied, the path rewritten (relative); the plan hashes the copies and
    # no longer needs the artist's files
    r = rowbeam("plan", spec, "--out", tmp_path / "pp", "--pack", tmp_path / "pack")
    assert r.returncode == 0, r.stderr
    (tmp_path / "tex.png").rename(tmp_path / "gone.png")
    (tmp_path / "t.blend").rename(tmp_path / "gone.blend")
    plan = json.loads((tmp_path / "pp/plan.json").read_text())
    sc = plan["scenarios"][0]
    copy = tmp_path / "pack/t/deps" / f"{dep[0]['sha256'][:16]}-tex.png"
    assert sc["blend"] == str(tmp_path / "pack/t/t.blend") and sc["rig"] == str(tmp_path / "pack/t/t.rig.json")
    assert [d["path"] for d in sc["dependencies"]] == [str(copy)] and sc["dependencies"][0]["sha256"] == dep[0]["sha256"]
    assert rowbeam("plan", tmp_path / "pack/dataset.json", "--out", tmp_path / "pp2").returncode == 0
    r = rowbeam("plan", spec, "--out", tmp_path / "pp3", "--pack", tmp_path / "pack2")
    assert r.returncode == 2 and "t.blend does not exist" in r.stderr and not (tmp_path / "pack2").exists()


# ----------------------------------------------------------------------------------- Slurm and Ray engines


def _small_plan(root: Path, name: str) -> Path:
    """One event of each of a, b, c (3 shards): every sample is also in the single-worker run P2."""
    spec = _write_spec(root, f"small_{name}", [
        {"blend": f"{x}.blend", "rig": f"{x}.rig.json", "scenario": x, "lineage_group": f"g{x}", "events": {"count": 1}}
        for x in "abc"], {"ga": "train", "gb": "train", "gc": "val"})
    p = root / name
    r = rowbeam("plan", spec, "--out", p)
    assert r.returncode == 0, r.stderr
    return p


@pytest.fixture(scope="module")
def reference(runs):
    """{sample_id: content hash} of the single-worker run P2 (finalized here)."""
    _, _, p2, _, _ = runs
    assert rowbeam("finalize", p2).returncode == 0
    return {s["sample_id"]: s["content_sha256"] for s in json.loads((p2 / "dataset.json").read_text())["samples"]}


def _finalized_hash_matches(p: Path, reference: dict) -> dict:
    r = rowbeam("finalize", p)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((p / "dataset.json").read_text())
    ids = [s["sample_id"] for s in doc["samples"]]
    assert len(ids) == 3 and doc["dataset_hash"] == dataset_hash({i: reference[i] for i in ids})
    return doc


def _skip_or_fail(reason: str):
    if os.environ.get("CI") == "true":            # CI installs them (.ci/run): there the test must run
        pytest.fail(f"{reason}; CI must provide it")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A real single-node Slurm on localhost (3 CPUs; tests/farm/clusters.py). Yields the environment for sbatch."""
    try:
        with slurm_cluster(tmp_path_factory.mktemp("slurm") / "cluster", cpus=3) as env:
            yield env
    except RuntimeError as exc:
        _skip_or_fail(str(exc))


def test_slurm_job_array_gives_the_single_process_hash_and_resubmits_by_index(scenes, reference, slurm):
    root, _ = scenes
    p = _small_plan(root, "slurm")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "rowbeam", "farm", "run", str(p), "--engine", "slurm", "--cpus", "1",
                        "--mem", "500M", "--time", "00:10:00", "--partition", "rowbeam"], capture_output=True,
                       text=True, env={**slurm, "PYTHONPATH": str(REPO)}, timeout=900)
    print(f"\nslurm, 3 shards: {time.perf_counter() - t0:.1f} s")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "submitted Slurm job array" in r.stdout and "(indices 0,1,2)" in r.stdout
    script = (p / "farm/slurm_job.sh").read_text()
    for line in ("#SBATCH --cpus-per-task=1", "#SBATCH --mem=500M", "#SBATCH --time=00:10:00",
                 "#SBATCH --partition=rowbeam", '--index "$SLURM_ARRAY_TASK_ID"'):
        assert line in script, line
    first = _finalized_hash_matches(p, reference)
    # a task lost on the cluster: its status and events are gone; resubmit array index 1 only
    shutil.rmtree(p / "bundles/b/events")
    (p / "status/00001.json").unlink()
    assert "00001  b/camera_front  1 event(s)  pending" in rowbeam("farm", "status", p).stdout
    r = subprocess.run([sys.executable, "-m", "rowbeam", "farm", "run", str(p), "--engine", "slurm",
                        "--array-indices", "1"], capture_output=True, text=True,
                       env={**slurm, "PYTHONPATH": str(REPO)}, timeout=900)
    assert r.returncode == 0 and "(indices 1)" in r.stdout, r.stdout + r.stderr
    assert _finalized_hash_matches(p, reference)["dataset_hash"] == first["dataset_hash"]


def test_slurm_workers_caps_the_array_tasks(scenes, reference, slurm):
    """--workers 1 on Slurm: one array task (the first shard's index), a persistent worker that runs all three
    shards (the single-process hash); no task is started only to find every shard taken."""
    root, _ = scenes
    p = _small_plan(root, "slurm_one")
    r = subprocess.run([sys.executable, "-m", "rowbeam", "farm", "run", str(p), "--engine", "slurm", "--workers", "1",
                        "--partition", "rowbeam"], capture_output=True, text=True,
                       env={**slurm, "PYTHONPATH": str(REPO)}, timeout=900)
    assert r.returncode == 0 and "(indices 0)" in r.stdout, r.stdout + r.stderr
    assert len(list((p / "logs").glob("slurm-*_*.out"))) == 1
    _finalized_hash_matches(p, reference)


def test_unreachable_engines_are_refused_in_one_line(scenes, runs):
    _, p1, _, _, _ = runs
    env = dict(os.environ, PYTHONPATH=str(REPO), PATH=str(Path(sys.executable).parent))
    r = subprocess.run([sys.executable, "-m", "rowbeam", "farm", "run", str(p1), "--engine", "slurm", "--shards",
                        "00001"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "sbatch/squeue not found" in r.stderr, r.stderr
    env.pop("RAY_ADDRESS", None)
    r = subprocess.run([sys.executable, "-m", "rowbeam", "farm", "run", str(p1), "--engine", "ray", "--shards",
                        "00001"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "engine ray: " in r.stderr, r.stderr


@pytest.fixture(scope="module")
def ray_cluster():
    """A real local Ray cluster (3 CPUs, token auth; tests/farm/clusters.py). Yields (address, environment)."""
    try:
        with ray_cluster_of(cpus=3) as env:
            yield env["RAY_ADDRESS"], env
    except RuntimeError as exc:
        _skip_or_fail(str(exc))


def test_ray_tasks_give_the_single_process_hash(scenes, reference, ray_cluster):
    root, _ = scenes
    address, env = ray_cluster
    p = _small_plan(root, "ray")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "rowbeam", "farm", "run", str(p), "--engine", "ray", "--ray-address",
                        address], capture_output=True, text=True, env={**env, "PYTHONPATH": str(REPO)}, timeout=900)
    print(f"\nray, 3 shards: {time.perf_counter() - t0:.1f} s")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(": done") == 3, r.stdout
    _finalized_hash_matches(p, reference)


def test_quarantined_events_carry_their_replay_command(runs, tmp_path):
    """An event the exporter quarantined (moved here by hand: events/... -> quarantine/events/...): the shard
    outcome lists it with `rowbeam replay DIR SAMPLE` and its one-event export command; finalize keeps it out of
    the splits and the hash and reports it."""
    from rowbeam.farm.plan import load_plan
    from rowbeam.farm.worker import shard_outcome

    _, p1, _, _, _ = runs
    p = tmp_path / "q"
    shutil.copytree(p1, p, ignore=shutil.ignore_patterns("dataset.json", "splits", "qa_summary.json"))
    (p / "bundles/a/quarantine/events/camera_front").mkdir(parents=True)
    (p / "bundles/a/events/camera_front/000003").rename(p / "bundles/a/quarantine/events/camera_front/000003")
    plan, _ = load_plan(p)
    shard = plan["shards"][0]
    out = shard_outcome(p, plan, shard)
    sid = shard["sample_ids"][3]
    assert out["missing"] == [] and sid not in out["published"] and len(out["published"]) == 5
    (q,) = out["quarantined"]
    assert q["sample_id"] == sid and q["folder"] == "bundles/a/quarantine/events/camera_front/000003"
    assert q["replay"] == f"rowbeam replay {p.resolve()} {sid}"
    assert "--first-event 3 --count 1 " in q["export"] and "--out bundles/a " in q["export"]
    rowbeam("finalize", p)
    doc = json.loads((p / "dataset.json").read_text())
    assert doc["qa"]["quarantined"] == [sid] and sid not in (p / "splits/train.txt").read_text().split()
    assert [s["quarantined"] for s in doc["samples"] if s["sample_id"] == sid] == [True]


def test_two_workers_on_one_shard_publish_each_event_once(scenes, reference):
    """Two workers given the same shard at the same time: both succeed, every event is published once and the
    content equals the single-worker run's."""
    root, _ = scenes
    spec = _write_spec(root, "twice", [{"blend": "c.blend", "rig": "c.rig.json", "scenario": "c",
                                        "lineage_group": "gc", "events": {"count": 1}}], {"gc": "val"})
    p = root / "twice"
    assert rowbeam("plan", spec, "--out", p).returncode == 0
    env = dict(os.environ, PYTHONPATH=str(REPO))
    workers = [subprocess.Popen([sys.executable, "-m", "rowbeam", "farm", "worker", str(p), "00000"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outs
    events = sorted(q.relative_to(p).as_posix() for q in (p / "bundles/c/events").rglob("manifest.json"))
    assert events == ["bundles/c/events/camera_front/000000/manifest.json"]
    assert not [q for q in (p / "bundles/c").rglob("*") if q.name.startswith(".") and q.name != ".staging"]
    assert rowbeam("finalize", p).returncode == 0
    (sample,) = json.loads((p / "dataset.json").read_text())["samples"]
    assert sample["content_sha256"] == reference[sample["sample_id"]]


def test_slurm_queue_poll_interval_is_proportionate():
    """A short job is polled at 0.05 s steps (not rounded up to whole seconds); waits grow with the time waited
    (5 %) and never exceed poll_s."""
    from rowbeam.farm.engines import queue_poll_interval

    assert queue_poll_interval(0.0, 1.0) == 0.05
    assert queue_poll_interval(2.0, 1.0) == pytest.approx(0.1)
    assert queue_poll_interval(10.0, 1.0) == pytest.approx(0.5)
    assert queue_poll_interval(3600.0, 1.0) == 1.0
    assert queue_poll_interval(3600.0, 5.0) == 5.0
    waits = [queue_poll_interval(t, 1.0) for t in (0, 1, 5, 19, 20, 100)]
    assert waits == sorted(waits)


def test_ray_starts_one_persistent_task_per_cluster_cpu():
    """Persistent Ray tasks: --workers when given, else the cluster's CPUs over the CPUs per task, at least one and
    never more than there are shards (each extra task would only start a Python process that finds no shard)."""
    from rowbeam.farm.engines import ray_workers

    assert ray_workers(None, 3.0, 1.0, 6) == 3
    assert ray_workers(None, 16.0, 1.0, 6) == 6
    assert ray_workers(None, 4.0, 2.0, 6) == 2
    assert ray_workers(None, 0.5, 1.0, 6) == 1
    assert ray_workers(2, 16.0, 1.0, 6) == 2
    assert ray_workers(9, 16.0, 1.0, 6) == 6
