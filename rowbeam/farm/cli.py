"""Command lines of `rowbeam plan`, `rowbeam farm run|status|worker`, `rowbeam finalize` and `rowbeam replay`:
each an add_*_arguments(parser) and a run_*(args) (rowbeam.cli registers them). User errors: one line
`rowbeam <cmd>: error: ...` (`rowbeam farm run: error: ...`), exit 2."""
from __future__ import annotations

import argparse
import json
import os

from rowbeam.util.command_line import fail as _fail
from rowbeam.util.errors import RowbeamError


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Plan a dataset spec (rowbeam/dataset@1) into shards: DIR/plan.json (deterministic: the same "
                     "spec gives the same bytes).")
    p.add_argument("spec", help="dataset spec JSON (rowbeam/dataset@1)")
    p.add_argument("--out", required=True, help="plan folder (new or empty; or holding this same plan)")
    p.add_argument("--pack", metavar="PACK", help="first copy every scenario with its external files into this new "
                   "folder (paths rewritten, relative) and plan from the packed spec PACK/dataset.json")


def run_plan(args: argparse.Namespace) -> int:
    from .plan import make_plan, write_plan

    try:
        if args.pack:
            from .pack import pack_spec

            args.spec = pack_spec(args.spec, args.pack)
            print(f"rowbeam plan: packed scenarios and their dependencies into {args.pack} (spec {args.spec})")
        plan = make_plan(args.spec)
        path = write_plan(plan, args.out)
    except RowbeamError as exc:
        return _fail("rowbeam plan", exc)
    events = sum(s["count"] for s in plan["shards"])
    print(f"rowbeam plan: {len(plan['scenarios'])} scenario(s), {len(plan['shards'])} shard(s), {events} event(s) -> "
          f"{path} (plan {plan['plan_sha256'][:12]})")
    return 0


def add_farm_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Run a plan's shards on an engine and follow them."
    sub = p.add_subparsers(dest="verb", required=True)
    run = sub.add_parser("run", help="run every shard not yet done (local process pool, Slurm job array or Ray)")
    run.add_argument("plan", help="plan folder or its plan.json")
    run.add_argument("--engine", choices=("local", "slurm", "ray"), default="local",
                     help="local: a process pool (default); slurm: one sbatch job array; ray: Ray tasks")
    run.add_argument("--workers", type=int, help="local: worker processes at once (default: half the CPUs); slurm: "
                     "array tasks, each a persistent worker over every shard (default: one per shard); ray: persistent tasks "
                     "(default: the cluster's CPUs)")
    run.add_argument("--retries", type=int, default=2, help="retries of a failed or killed shard (default 2)")
    run.add_argument("--shards", help="comma-separated shard ids to (re)run, even when done")
    run.add_argument("--fresh-process", action="store_true", help="one export process per shard (bpy imported and "
                     "the .blend opened for each) instead of persistent workers")
    run.add_argument("--cpus", type=int, help="slurm: --cpus-per-task")
    run.add_argument("--mem", help="slurm: --mem (e.g. 4G)")
    run.add_argument("--gpus", type=int, help="slurm: --gpus")
    run.add_argument("--time", dest="time_limit", help="slurm: --time (e.g. 01:00:00)")
    run.add_argument("--partition", help="slurm: --partition")
    run.add_argument("--array-indices", help="slurm: resubmit these array indices (plan positions), e.g. 3,5")
    run.add_argument("--no-wait", action="store_true", help="slurm: submit and return")
    run.add_argument("--ray-address", default=os.environ.get("RAY_ADDRESS"), help="ray: cluster address HOST:PORT")
    run.set_defaults(handler=_run)
    st = sub.add_parser("status", help="per shard done/failed/quarantined, events/s, ETA")
    st.add_argument("plan", help="plan folder")
    st.add_argument("--json", action="store_true", help="print the status as JSON")
    st.set_defaults(handler=_status)
    wk = sub.add_parser("worker", help="run one shard, or many in one Blender session (what every engine runs)",
                        description="One shard in a fresh export process: `rowbeam farm worker DIR SHARD`; many "
                        "shards through one Blender session: `rowbeam farm worker DIR --serve` (what the engines run).")
    wk.add_argument("plan", help="plan folder (holds plan.json)")
    wk.add_argument("shard", nargs="?", help="shard id (e.g. 00003)")
    wk.add_argument("--index", type=int, help="shard by position in the plan (a Slurm array index); with --serve the "
                    "shard to start from")
    wk.add_argument("--serve", action="store_true", help="persistent worker: claim and run every pending shard (or "
                    "those of --shards) through one Blender session")
    wk.add_argument("--shards", help="--serve: comma-separated shard ids to serve (default: every shard)")
    wk.add_argument("--since", type=float, default=0.0, help="--serve: the farm run's start (unix s); shards "
                    "finished since then are skipped")
    wk.add_argument("--retries", type=int, default=2, help="--serve: retries of a failed shard in this run")
    wk.set_defaults(handler=_worker)


def _worker(args: argparse.Namespace) -> int:
    """`rowbeam farm worker PLAN [SHARD] [--index I] [--serve ...]` with parsed arguments (rowbeam.farm.cli declares
    them): one shard in a fresh export process, or with --serve many through one Blender session (persistent.py)."""
    import sys

    from .plan import load_plan
    from .worker import EXIT_REFUSED, run_shard

    try:
        plan, _ = load_plan(args.plan)
        if args.index is not None and not 0 <= args.index < len(plan["shards"]):
            raise RowbeamError(f"--index {args.index}: the plan has shards 0 .. {len(plan['shards']) - 1}")
        if getattr(args, "serve", False):
            from .persistent import run as serve

            unknown = sorted(set(args.shards.split(",") if args.shards else []) - {s["id"] for s in plan["shards"]})
            if unknown:
                raise RowbeamError(f"--shards: {unknown[0]!r} is not a shard of the plan")
            return serve(args)
        if args.shard is None:
            if args.index is None:
                raise RowbeamError(f"give a SHARD, --index (0 .. {len(plan['shards']) - 1}) or --serve")
            args.shard = plan["shards"][args.index]["id"]
        return run_shard(args.plan, args.shard)
    except RowbeamError as exc:
        print(f"rowbeam farm worker: error: {exc}", file=sys.stderr)
        return EXIT_REFUSED


def _status(args: argparse.Namespace) -> int:
    from .status import farm_status, status_lines

    try:
        s = farm_status(args.plan)
    except RowbeamError as exc:
        return _fail("rowbeam farm status", exc)
    print(json.dumps(s, indent=1) if args.json else "\n".join(status_lines(s)))
    return 0


def _run(args) -> int:
    from . import engines
    from .plan import load_plan, verify_inputs

    prog = "rowbeam farm run"
    say = lambda text: print(text, flush=True)      # noqa: E731
    try:
        if args.workers is not None and args.workers < 1:
            raise RowbeamError(f"--workers {args.workers}: at least 1")
        plan, plan_dir = load_plan(args.plan)
        verify_inputs(plan)
        only = args.shards.split(",") if args.shards else None
        if args.array_indices:
            try:
                only = [plan["shards"][int(i)]["id"] for i in args.array_indices.split(",")]
            except (ValueError, IndexError):
                raise RowbeamError(f"--array-indices {args.array_indices!r}: indices 0 .. "
                                   f"{len(plan['shards']) - 1}") from None
        unknown = sorted(set(only or []) - {s["id"] for s in plan["shards"]})
        if unknown:
            raise RowbeamError(f"--shards: {unknown[0]!r} is not a shard of the plan")
        ids = engines.pending_shards(plan, plan_dir, only)
        if not ids:
            say("rowbeam farm: every shard is done")
            return 0
        say(f"rowbeam farm: {len(ids)} shard(s) on {args.engine}")
        persistent = not args.fresh_process
        if args.engine == "local":
            local = engines.run_local_persistent if persistent else engines.run_local
            result = local(plan, plan_dir, ids, args.workers or max(1, (os.cpu_count() or 2) // 2), args.retries, say)
        elif args.engine == "slurm":
            result = engines.run_slurm(plan, plan_dir, ids, args.retries, say, args.cpus, args.mem, args.gpus,
                                       args.time_limit, args.partition, wait=not args.no_wait, persistent=persistent,
                                       workers=args.workers)
        else:
            result = engines.run_ray(plan, plan_dir, ids, args.retries, say, args.ray_address, persistent=persistent,
                                     workers=args.workers)
    except RowbeamError as exc:
        return _fail(prog, exc)
    failed = [i for i, rc in result.items() if rc != 0]
    say(f"rowbeam farm: {len(result) - len(failed)} shard(s) finished, {len(failed)} failed"
        + (f" ({', '.join(failed[:10])})" if failed else ""))
    return 1 if failed else 0


def add_finalize_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Write the dataset manifest, split lists, dataset hash, QA summary and leakage audit of a plan "
                     "folder. Exit 0 pass, 1 incomplete or an audit failed.")
    p.add_argument("plan", help="plan folder")


def run_finalize(args: argparse.Namespace) -> int:
    from .finalize import finalize, summary_lines

    try:
        doc = finalize(args.plan)
    except RowbeamError as exc:
        return _fail("rowbeam finalize", exc)
    print("\n".join(summary_lines(doc)))
    return 0 if doc["status"] == "pass" else 1


def add_replay_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Re-export one sample into a temporary folder and compare it with the published one under the "
                     "declared reproducibility levels; prints the first divergence.")
    p.add_argument("plan", help="plan folder")
    p.add_argument("sample_id", help="sample id (<scenario>.<sensor>.<reference_time_ns>)")


def run_replay(args: argparse.Namespace) -> int:
    from .replay import replay

    try:
        ok, lines = replay(args.plan, args.sample_id)
    except RowbeamError as exc:
        return _fail("rowbeam replay", exc)
    print("\n".join(lines))
    return 0 if ok else 1
