"""`rowbeam replay DIR SAMPLE_ID`: re-export one planned event into a temporary folder and compare it with the
published (or quarantined) one under the declared reproducibility levels (rowbeam.farm.dataset), printing the
first divergence. Exit 0 reproduced, 1 diverged, 2 unusable input."""
from __future__ import annotations

import shlex
import subprocess
import tempfile
from pathlib import Path

from rowbeam.bundle.reader import Event
from rowbeam.farm.dataset import first_divergence, manifest_content
from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import canonical_json

from .plan import load_plan, verify_inputs
from .worker import child_env, python_argv


def _locate(plan: dict, sid: str) -> tuple[dict, int]:
    for sh in plan["shards"]:
        if sid in sh["sample_ids"]:
            return sh, sh["first_event"] + sh["sample_ids"].index(sid)
    raise RowbeamError(f"sample {sid!r} is not in the plan")


def _first_manifest_difference(a, b, path="manifest") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: {'missing in the published' if k not in a else 'missing in the replayed'}"
            d = _first_manifest_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = _first_manifest_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if canonical_json(a) == canonical_json(b) else f"{path}: published {a!r:.80} vs replayed {b!r:.80}"


def replay(plan_dir, sid: str, keep: str | None = None) -> tuple[bool, list[str]]:
    """(reproduced, report lines)."""
    plan, plan_dir = load_plan(plan_dir)
    shard, index = _locate(plan, sid)
    verify_inputs(plan, shard["scenario"])
    bundle = plan_dir / next(sc["bundle"] for sc in plan["scenarios"] if sc["scenario"] == shard["scenario"])
    loc = f"events/{shard['sensor']}/{index:06d}"
    published_dir = bundle / loc if (bundle / loc / "manifest.json").is_file() else bundle / "quarantine" / loc
    if not (published_dir / "manifest.json").is_file():
        raise RowbeamError(f"sample {sid!r}: not exported yet ({bundle / loc} missing); run the farm first")
    published = Event(published_dir, bundle)
    with tempfile.TemporaryDirectory(prefix="rowbeam-replay-", dir=keep) as tmp:
        out = Path(tmp) / "bundle"
        argv = shlex.split(shard["command"])
        argv[argv.index("--first-event") + 1], argv[argv.index("--count") + 1] = str(index), "1"
        argv[argv.index("--out") + 1] = str(out)
        proc = subprocess.run(python_argv(argv), cwd=plan_dir, env=child_env(), capture_output=True, text=True)
        replay_dir = out / loc if (out / loc / "manifest.json").is_file() else out / "quarantine" / loc
        if not (replay_dir / "manifest.json").is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            return False, [f"replay of {sid}: the re-export produced nothing (exit {proc.returncode}: {tail[0][:200]})"]
        replayed = Event(replay_dir, out)
        lines = [f"replay of {sid}: {shlex.join(argv)}"]
        diff = _first_manifest_difference(manifest_content(published.manifest), manifest_content(replayed.manifest))
        if diff:
            return False, lines + [f"first divergence (manifest, bitwise): {diff}"]
        for name in sorted(published.names):
            d = first_divergence(name, published.array(name), replayed.array(name))
            if d:
                return False, lines + [f"first divergence: {d}"]
        return True, lines + [f"reproduced: {len(published.names)} modalities and the manifest agree at their "
                              "declared levels"]
