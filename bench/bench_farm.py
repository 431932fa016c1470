"""Farm section of `make bench`: the fixed cost of a shard on one persistent worker.

Per-shard overhead = (wall of six one-event shards - wall of one six-event shard) / 5, both on one worker over
the same six events (the running example's camera, labels only, small image): the worker's start-up and the
first open of the .blend are in both and cancel. Measured on the local engine (`rowbeam farm worker PLAN
--serve`), with fresh processes (`--fresh-process`, for comparison), and on a real local Slurm / Ray (one CPU,
so one worker at a time) when they are installed; a 3-shard plan shows the same overhead per shard.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EVENTS = 6
SIZE = (64, 36)                   # labels only: the shard's fixed cost is what is measured, not the render
TARGET_S = 0.2


def rowbeam_argv(*args) -> list:
    return [sys.executable, "-m", "rowbeam", *map(str, args)]


def _env(extra: dict | None = None) -> dict:
    return {**os.environ, **(extra or {}), "PYTHONPATH": str(REPO)}


def _children_cpu_s() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _call(argv: list, env: dict | None = None, timeout: float = 1800) -> tuple:
    """(wall s, CPU s of the command and the descendants it waited for) of a command that must succeed. Under
    Slurm or Ray the work runs in the cluster's processes: its CPU seconds are not counted here."""
    c0, t0 = _children_cpu_s(), time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=env or _env(), cwd=REPO, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[2:])} failed ({r.returncode}):\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
    return time.perf_counter() - t0, _children_cpu_s() - c0


def build_scene(work: Path) -> tuple:
    """The running example (labels only, SIZE, camera only) saved in `work`: (blend, rig)."""
    from rowbeam.blender.scenes import common, running_example

    running_example.build(*SIZE)
    blend = common.save(work / "farm_scene.blend", running_example.rig(lidar=False, rgb_samples=0,
                                                                         object_labels=False))
    return blend, blend.with_suffix(".rig.json")


def make_plan(work: Path, name: str, scene: tuple, events: int, one_shard: bool) -> Path:
    """A plan of `events` events of the scene: one shard each, or all in one shard."""
    spec = work / f"{name}.json"
    spec.write_text(json.dumps({
        "schema": "rowbeam/dataset@1", "name": name,
        "scenarios": [{"blend": str(scene[0]), "rig": str(scene[1]), "scenario": "farm", "lineage_group": "g",
                       "events": {"count": events}}],
        "split": {"rule": "explicit", "map": {"g": "train"}}, "shards": {"max_cost": 1e15 if one_shard else 1}}))
    _call(rowbeam_argv("plan", spec, "--out", work / name))
    return work / name


def shard_span(plan_dir: Path) -> float:
    """First shard's start to last shard's end (s), from the shards' status files (inside the worker)."""
    docs = [json.loads(p.read_text()) for p in (plan_dir / "status").glob("*.json")]
    if not docs or any(d.get("state") != "done" for d in docs):
        raise RuntimeError(f"{plan_dir}: not every shard is done: {[d.get('state') for d in docs]}")
    return max(d["started_unix"] + d["seconds"] for d in docs) - min(d["started_unix"] for d in docs)


def overhead_rounds(work: Path, scene: tuple, name: str, run, repeat: int, events: int = EVENTS) -> dict:
    """Interleaved rounds of (`events` one-event shards, one `events`-event shard) run by `run(plan_dir)` -> (wall
    s, CPU s); median per-shard overhead of the engine's wall and CPU seconds and of the in-worker span."""
    got = {key: {"many": [], "one": []} for key in ("wall", "cpu", "span")}
    for k in range(repeat):
        for kind in ("many", "one"):
            p = make_plan(work, f"{name}_{kind}_{k}", scene, events, kind == "one")
            wall, cpu = run(p)
            for key, value in (("wall", wall), ("cpu", cpu), ("span", shard_span(p))):
                got[key][kind].append(value)
            shutil.rmtree(p, ignore_errors=True)
    per = lambda d: statistics.median((a - b) / (events - 1) for a, b in zip(d["many"], d["one"], strict=True))  # noqa: E731
    return {"per_shard_s": per(got["wall"]), "per_shard_cpu_s": per(got["cpu"]), "per_shard_span_s": per(got["span"]),
            "many_s": statistics.median(got["wall"]["many"]), "one_s": statistics.median(got["wall"]["one"]),
            "events": events, "rounds": repeat}


def local_persistent(plan_dir: Path) -> tuple:
    return _call(rowbeam_argv("farm", "worker", plan_dir, "--serve"))


def local_fresh(plan_dir: Path) -> tuple:
    return _call(rowbeam_argv("farm", "run", plan_dir, "--workers", "1", "--fresh-process"))


def engine_runner(engine: str, env: dict, *extra):
    """A `farm run --engine ENGINE` runner (one worker: the cluster has one CPU)."""
    return lambda plan_dir: _call(rowbeam_argv("farm", "run", plan_dir, "--engine", engine, *extra), env=_env(env))


def farm_benchmark(work: Path, repeat: int) -> dict:
    """{engine: overhead_rounds result or {"unavailable": reason}}; 3-shard plan on the local engine too."""
    from tests.farm.clusters import ray_cluster, slurm_cluster

    scene = build_scene(work)
    _call(rowbeam_argv("farm", "worker", make_plan(work, "warm", scene, 2, False), "--serve"))   # warm file cache
    out = {"local": overhead_rounds(work, scene, "local", local_persistent, repeat),
           "local_3": overhead_rounds(work, scene, "local3", local_persistent, repeat, events=3),
           "fresh": overhead_rounds(work, scene, "fresh", local_fresh, max(1, repeat // 2))}
    for engine, cluster, args in (("slurm", slurm_cluster, lambda env: ("--partition", "rowbeam", "--workers", "1")),
                                  ("ray", ray_cluster, lambda env: ("--ray-address", env["RAY_ADDRESS"]))):
        with ExitStack() as stack:
            try:
                env = stack.enter_context(cluster(work / engine, cpus=1))
            except (RuntimeError, OSError) as exc:        # not installed here, or it did not come up
                out[engine] = {"unavailable": str(exc).splitlines()[0][:200]}
                continue
            out[engine] = overhead_rounds(work, scene, engine, engine_runner(engine, env, *args(env)), repeat)
    return out


LABELS = {"local": "local engine, persistent worker", "local_3": "local engine, 3-shard plan",
          "slurm": "Slurm (local, 1 CPU), persistent workers", "ray": "Ray (local, 1 CPU), persistent workers",
          "fresh": "local engine, --fresh-process"}
CLUSTER_REASON = {"slurm": "one array task (--workers 1)",
                  "ray": "one persistent Ray task (one per cluster CPU)"}


def report_farm(r: dict, figure) -> None:
    """Print the farm figures and record them with bench.figure: per engine the wall-clock overhead per shard and
    (local) its CPU seconds, (clusters) the overhead inside the worker, which excludes the scheduler."""
    print(f"Farm: fixed overhead per shard on one worker, running example {SIZE[0]}x{SIZE[1]} labels only:")
    for key, label in LABELS.items():
        x = r.get(key)
        if x is None:
            continue
        name = f"farm overhead per shard: {label}"
        if "unavailable" in x:
            print(f"    {label}: unmeasured ({x['unavailable']})")
            figure(name, float("nan"), "s", None, f"unmeasured: {x['unavailable']}")
            continue
        n, target = x["events"], None if key == "fresh" else f"<= {TARGET_S}"
        note = (f"{n} one-event shards {x['many_s']:.2f} s, one {n}-event shard {x['one_s']:.2f} s (median of "
                f"{x['rounds']}); inside the worker {x['per_shard_span_s']:.3f} s/shard")
        local = key in ("local", "local_3", "fresh")
        print(f"    {label}: {x['per_shard_s']:.3f} s per shard" + (f", CPU {x['per_shard_cpu_s']:.3f} s" if local
                                                                    else "") + f" ({note})")
        load, cores = os.getloadavg()[0], len(os.sched_getaffinity(0))
        busy = f"; wall seconds under a load of {load:.1f} on {cores} cores" if load > cores else ""
        figure(name + " (wall)", x["per_shard_s"], "s", target, (note if local else f"{note}; {CLUSTER_REASON[key]}") + busy)
        if local:
            figure(name + " (CPU)", x["per_shard_cpu_s"], "s", target, "CPU s of the worker and its Blender session")
        else:
            figure(name + " (inside the worker)", x["per_shard_span_s"], "s", target,
                   "first shard's start to last shard's end, from the shards' status files")
