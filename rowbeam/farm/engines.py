"""Farm engines: each runs persistent workers (`rowbeam farm worker DIR --serve`: many shards through one Blender
session, rowbeam/farm/persistent.py) -- or, with `fresh_process`, `rowbeam farm worker DIR SHARD` once per shard --
and retries a failed or killed one.

local  a pool of worker processes on this machine (the default); a killed worker is restarted;
slurm  one `sbatch` job array (array index -> the shard its worker starts from), the job script retries a task in
       place; indices that still failed can be resubmitted (`--array-indices`);
ray    one Ray task per shard (the shard its worker starts from; `max_retries`: a killed worker process is
       retried by Ray), on an existing cluster (`--ray-address`).
A persistent worker that finds every shard finished or held by another worker exits at once (without Blender).
An engine that cannot be reached (no sbatch, no Ray cluster) is refused in one line before anything runs.
"""
from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rowbeam.util.errors import RowbeamError

from .worker import EXIT_REFUSED, EXIT_RETRY, child_env, mark_died, read_status

WORKER = ["-m", "rowbeam", "farm", "worker"]


def worker_argv(plan_dir: Path, shard_id: str) -> list:
    return [sys.executable, *WORKER, str(plan_dir), shard_id]


def serve_argv(plan_dir: Path, shard_ids: list, since: float, retries: int) -> list:
    """A persistent worker over `shard_ids` for the farm run `since` (add `--index I` for where it starts)."""
    return [sys.executable, *WORKER, str(plan_dir), "--serve", "--shards", ",".join(shard_ids), "--since",
            repr(since), "--retries", str(retries)]


def final_codes(plan_dir: Path, shard_ids: list) -> dict:
    """{shard: 0 done or quarantined, 2 refused, the killed worker's exit status when it died, else 3}."""
    out = {}
    for i in shard_ids:
        st = read_status(plan_dir, i) or {}
        state = st.get("state")
        out[i] = (0 if state in ("done", "quarantined") else EXIT_REFUSED if state == "refused"
                  else st.get("worker_exit_code", EXIT_RETRY) if state == "died" else EXIT_RETRY)
    return out


def pending_shards(plan: dict, plan_dir: Path, only: list | None = None) -> list[str]:
    """Shard ids not yet done or quarantined (all of `only` when given)."""
    ids = [s["id"] for s in plan["shards"]]
    if only is not None:
        return [i for i in ids if i in set(only)]
    return [i for i in ids if (read_status(plan_dir, i) or {}).get("state") not in ("done", "quarantined")]


def run_local(plan: dict, plan_dir: Path, shard_ids: list, workers: int, retries: int, say) -> dict:
    """Run shards on `workers` processes at a time; a shard whose worker fails (or is killed) is retried up
    to `retries` times; a refused shard (exit 2) is not. {shard: final exit status}."""
    def one(shard_id: str) -> int:
        rc = 1
        for attempt in range(max(0, retries) + 1):
            rc = subprocess.run(worker_argv(plan_dir, shard_id), env=child_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE).returncode
            died = mark_died(plan_dir, shard_id, rc)           # killed before it could record an outcome
            state = (read_status(plan_dir, shard_id) or {}).get("state", "?")
            how = f"killed by {died['killed_by']}" if died and "killed_by" in died else f"exit {rc}"
            say(f"rowbeam farm: shard {shard_id} attempt {attempt + 1}: {state} ({how})")
            if rc in (0, EXIT_REFUSED):
                return rc
        return rc

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return dict(zip(shard_ids, pool.map(one, shard_ids), strict=True))


def _record_death(plan_dir: Path, shard_ids: list, pid: int, rc: int, say) -> None:
    """A persistent worker `pid` ended with `rc` < 0 (killed): its running shard is recorded as died."""
    for i in shard_ids:
        st = read_status(plan_dir, i) or {}
        if st.get("state") == "running" and st.get("pid") == pid:
            died = mark_died(plan_dir, i, rc)
            say(f"rowbeam farm: shard {i} attempt {died.get('attempts', '?')}: died (killed by "
                f"{died.get('killed_by', rc)})")


def run_local_persistent(plan: dict, plan_dir: Path, shard_ids: list, workers: int, retries: int, say) -> dict:
    """`workers` persistent workers over `shard_ids` at once; a worker that was killed (or crashed) is restarted
    while its run has shards left; each relays its workers' lines. {shard: final exit status}."""
    since = round(time.time(), 3)

    def slot(k: int) -> None:
        for _ in range((max(0, retries) + 1) * len(shard_ids)):
            argv = serve_argv(plan_dir, shard_ids, since, retries) + ["--index", str(index[shard_ids[k]])]
            proc = subprocess.Popen(argv, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
            for line in proc.stdout:
                say(line.rstrip("\n"))
            rc = proc.wait()
            if rc in (0, EXIT_REFUSED, EXIT_RETRY) or rc >= 128:     # finished, or interrupted on purpose
                return
            _record_death(plan_dir, shard_ids, proc.pid, rc, say)

    index = {s["id"]: i for i, s in enumerate(plan["shards"])}
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(slot, range(min(max(1, workers), len(shard_ids)))))
    return final_codes(plan_dir, shard_ids)


# ------------------------------------------------------------------------------------------------- Slurm

SLURM_SCRIPT = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --output={log_dir}/slurm-%A_%a.out
{directives}
# rowbeam farm: array index -> shard (plan order); Slurm does not retry a task that exits non-zero,
# so the task retries its worker here ({retries} retries; exit 2 = refused input, not retried).
for attempt in $(seq 0 {retries}); do
  {worker} --index "$SLURM_ARRAY_TASK_ID"
  rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 2 ]; then exit "$rc"; fi
done
exit "$rc"
"""


def slurm_script(plan_dir: Path, retries: int, cpus: int | None, mem: str | None, gpus: int | None,
                 time_limit: str | None, partition: str | None, serve: list | None = None) -> str:
    """The job-array script (array indices given to sbatch): resources as #SBATCH directives. `serve`: the
    persistent worker's argv (serve_argv) instead of one fresh worker per array index."""
    directives = [f"#SBATCH --{k}={v}" for k, v in (("cpus-per-task", cpus), ("mem", mem), ("gpus", gpus),
                                                     ("time", time_limit), ("partition", partition)) if v]
    worker = shlex.join(serve or [sys.executable, *WORKER, str(plan_dir.resolve())])
    env = child_env()
    return SLURM_SCRIPT.format(name=f"rowbeam-{plan_dir.name}"[:64], log_dir=str((plan_dir / "logs").resolve()),
                               directives="\n".join(directives), retries=retries,
                               worker=f"PYTHONPATH={shlex.quote(env['PYTHONPATH'])} {worker}")


def queue_poll_interval(elapsed_s: float, poll_s: float) -> float:
    """Seconds to wait before asking squeue again, `elapsed_s` after submitting: 5 % of the time waited so far,
    between 0.05 s and `poll_s`, so a short job is not rounded up to a whole `poll_s` and a long one costs one
    squeue call per `poll_s`."""
    return min(poll_s, max(0.05, 0.05 * elapsed_s))


def run_slurm(plan: dict, plan_dir: Path, shard_ids: list, retries: int, say, cpus=None, mem=None, gpus=None,
              time_limit=None, partition=None, wait: bool = True, poll_s: float = 1.0, persistent: bool = True,
              workers: int | None = None) -> dict:
    """Submit one job array over `shard_ids` (their plan positions; with `persistent` each task is a persistent
    worker over all of them, starting from its own, and `workers` caps the tasks: the first `workers` shards'
    indices), wait for it to leave the queue (squeue; sacct needs slurmdbd), then read each shard's status.
    {shard: 0 done/quarantined, 1 not}."""
    sbatch = shutil.which("sbatch")
    if sbatch is None or shutil.which("squeue") is None:
        raise RowbeamError("engine slurm: sbatch/squeue not found on PATH (install Slurm's client or use "
                           "--engine local)")
    index = {s["id"]: i for i, s in enumerate(plan["shards"])}
    script = plan_dir / "farm" / "slurm_job.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    (plan_dir / "logs").mkdir(exist_ok=True)
    serve = serve_argv(plan_dir.resolve(), shard_ids, round(time.time(), 3), retries) if persistent else None
    script.write_text(slurm_script(plan_dir, retries, cpus, mem, gpus, time_limit, partition, serve))
    tasks = shard_ids[:workers] if persistent and workers else shard_ids
    array = ",".join(str(index[i]) for i in tasks)
    proc = subprocess.run([sbatch, "--parsable", f"--array={array}", str(script)], capture_output=True, text=True,
                          cwd=plan_dir)
    if proc.returncode != 0:
        raise RowbeamError(f"engine slurm: sbatch refused the job array ({(proc.stderr or proc.stdout).strip()[:300]})")
    job = proc.stdout.strip().split(";")[0]
    say(f"rowbeam farm: submitted Slurm job array {job} (indices {array}); script {script}")
    if not wait:
        return {}
    t0 = time.monotonic()
    while True:
        q = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i %T"], capture_output=True, text=True)
        if q.returncode != 0 or not q.stdout.strip():
            break
        time.sleep(queue_poll_interval(time.monotonic() - t0, poll_s))
    result = {}
    for i in shard_ids:
        state = (read_status(plan_dir, i) or {}).get("state")
        result[i] = 0 if state in ("done", "quarantined") else 1
        if result[i]:
            say(f"rowbeam farm: shard {i} (array index {index[i]}) {state or 'did not run'}; resubmit with "
                f"--engine slurm --array-indices {index[i]}")
    return result


# --------------------------------------------------------------------------------------------------- Ray


def ray_workers(workers: int | None, cluster_cpus: float, cpus_per_task: float, shards: int) -> int:
    """Persistent Ray tasks to start: `workers` when given, else as many as `cluster_cpus` hold at `cpus_per_task`
    each (at least one); never more than `shards`."""
    n = workers if workers else max(1, int(cluster_cpus // cpus_per_task))
    return max(1, min(n, shards))


def run_ray(plan: dict, plan_dir: Path, shard_ids: list, retries: int, say, address: str | None = None,
            cpus_per_task: float = 1.0, persistent: bool = True, workers: int | None = None) -> dict:
    """Ray tasks on the cluster at `address`, each running the worker with sys.executable: with `persistent`,
    `workers` tasks (default: as many as the cluster's CPUs hold, at most one per shard), each a persistent worker
    over every shard starting from its own; else one fresh worker per shard. Ray retries a task whose process died
    up to `retries` times, the task itself retries a failed worker."""
    try:
        import ray
    except ImportError:
        raise RowbeamError("engine ray: the ray package is not installed (pip install 'ray==2.52.1')") from None
    if not address:
        raise RowbeamError("engine ray: no Ray cluster given (--ray-address HOST:PORT, or RAY_ADDRESS)")
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except Exception as exc:            # ConnectionError, RuntimeError, ValueError: not reachable
        raise RowbeamError(f"engine ray: no Ray cluster at {address!r} ({str(exc).splitlines()[0][:200]})") from None
    try:
        env = child_env()

        @ray.remote(num_cpus=cpus_per_task, max_retries=retries, retry_exceptions=False)
        def task(argv, env):
            import subprocess as sp

            rc = 1
            for _ in range(retries + 1):
                rc = sp.run(argv, env=env, stdout=sp.DEVNULL, stderr=sp.DEVNULL).returncode
                if rc in (0, 2):
                    break
            return rc

        index = {s["id"]: k for k, s in enumerate(plan["shards"])}
        serve = serve_argv(plan_dir.resolve(), shard_ids, round(time.time(), 3), retries)
        starts = shard_ids[:ray_workers(workers, ray.cluster_resources().get("CPU", 1.0), cpus_per_task,
                                        len(shard_ids))] if persistent else shard_ids
        refs = {i: task.remote(serve + ["--index", str(index[i])] if persistent else worker_argv(plan_dir.resolve(), i),
                               env) for i in starts}
        result = {}
        for i, ref in refs.items():
            try:
                result[i] = ray.get(ref)
            except Exception as exc:       # the task's process died more often than max_retries
                say(f"rowbeam farm: shard {i}: Ray task failed ({type(exc).__name__})")
                result[i] = 1
        for i, rc in final_codes(plan_dir, shard_ids).items():     # a persistent task may have run any shard
            result[i] = rc if persistent else result[i]
            say(f"rowbeam farm: shard {i}: {(read_status(plan_dir, i) or {}).get('state', '?')}")
        return result
    finally:
        ray.shutdown()
