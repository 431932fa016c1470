"""`rowbeam plan DATASET.json --out DIR`: a deterministic plan (plan.json) of shards for a dataset spec.

Each shard is one (scenario, sensor, event range) with the exact export command line (run in DIR), the
sample ids it must produce, and its cost under the declared cost model. Inputs are hashed (.blend
sha256, rig canonical sha256 as the exporter computes them, dependency sha256s) so a run against a
changed input is refused. The same spec gives byte-identical plan.json (paths in commands are absolute
for inputs and relative to DIR for outputs; no timestamps).
"""
from __future__ import annotations

import hashlib
import os
import shlex
import shutil
from pathlib import Path

from rowbeam.farm.dataset import assign_splits, check_ranges, load_spec
from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import atomic_write_json, canonical_json, canonical_sha256, load_json, sha256_file
from rowbeam.model.rig import load_rig, parse_rig_text
from rowbeam.sensors import sensor_type
from rowbeam.model.sample_identity import sample_id
from rowbeam.bundle.schema import schema_errors
from rowbeam.model.timing import MAX_EVENT_INDEX, SceneClock, periodic_event_count

PLAN_FILE = "plan.json"
PLAN_SCHEMA = "rowbeam/plan@1"
COST_MODEL = {"unit": "pixel-sample (camera) or beam (LiDAR)",
              "camera_event": "image width x height x (1 label sample + rgb_samples)",
              "lidar_sweep": "azimuth_steps x channels",
              "radar_frame": "chirps x beams",
              "shard": "consecutive events of one scenario and sensor, total cost <= max_cost (at least one event)"}


def event_cost(sensor, size_px) -> int:
    """Declared cost of one event of `sensor` (COST_MODEL); size_px = (W, H) of a camera."""
    return sensor.event_cost(size_px)


def reference_time_ns(sensor, index: int, size_px) -> int:
    """Reference time (ns) of event `index`: the timing model's, as the exporter writes it."""
    if sensor_type(sensor.type).has_rows:
        return sensor.timing(index, int(size_px[1])).reference_time_ns()
    return sensor.timing(index).reference_time_ns()


def make_plan(spec_path, probe=None) -> dict:
    """The plan document of a dataset spec (nothing written). `probe(blends) -> {blend: info}` reads the
    .blend files (default: rowbeam.farm.probe.probe_blends, a bpy child process)."""
    if probe is None:
        from .probe import probe_blends as probe
    spec = load_spec(spec_path)
    splits = assign_splits(spec)
    blends = sorted({str(s.blend) for s in spec.scenarios})
    info = probe(blends)
    scenarios, shards, ranges, seen = [], [], [], {}
    for s in spec.scenarios:
        p = info[str(s.blend)]
        missing = [d["path"] for d in p["dependencies"] if not d["exists"]]
        if missing:
            raise RowbeamError(f"{spec.source}: {s.where}.blend: {s.blend} uses missing external file(s): "
                               f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
        if s.rig is not None:
            rig, rig_src = load_rig(s.rig), str(s.rig)
        elif p["stored_rig"]:
            rig, rig_src = parse_rig_text(p["stored_rig"], f"{s.blend}: stored rig"), None
        else:
            raise RowbeamError(f"{spec.source}: {s.where}.rig: not given and {s.blend} stores no rig")
        sensors = [rig.sensor(i) for i in s.sensors] if s.sensors else list(rig.sensors)
        clock = SceneClock(p["fps"], p["fps_base"], p["frame_start"])
        end_ns = clock.ns_of(p["frame_end"])
        if s.scenario not in seen:
            seen[s.scenario] = {
                "scenario": s.scenario, "lineage_group": s.lineage_group, "split": splits[s.lineage_group],
                "seed": s.seed, "blend": str(s.blend), "blend_sha256": sha256_file(s.blend),
                "rig": rig_src, "rig_sha256": canonical_sha256(rig.document), "bundle": f"bundles/{s.scenario}",
                "dependency_tracer": p["tracer"],
                "dependencies": [{"path": d["path"], "sha256": sha256_file(d["path"])} for d in p["dependencies"]]}
            scenarios.append(seen[s.scenario])
        for sensor in sensors:
            size = tuple(sensor.image_size_px or p["size_px"]) if sensor_type(sensor.type).has_rows else None
            available = periodic_event_count(sensor.first_event_ns, sensor.rate_hz, sensor.event_duration_ns(), end_ns)
            count = s.count if s.count is not None else available - s.first_event
            if count <= 0 or s.first_event + count > min(available, MAX_EVENT_INDEX + 1):
                raise RowbeamError(f"{spec.source}: {s.where}.events: sensor {sensor.id!r} of {s.blend.name} has "
                                   f"{available} event(s) (0 .. {available - 1}) inside frames {p['frame_start']}.."
                                   f"{p['frame_end']}; asked for {s.first_event} .. {s.first_event + count - 1}")
            ranges.append((s.where, s.scenario, sensor.id, s.first_event, count))
            shards += _shards(seen[s.scenario], sensor, size, s.first_event, count, spec.max_shard_cost)
    check_ranges(spec.source, ranges)
    for k, shard in enumerate(shards):
        shard["id"] = f"{k:05d}"
    plan = {"schema": PLAN_SCHEMA, "dataset": spec.name, "spec": str(Path(spec_path).resolve()),
            "spec_sha256": canonical_sha256(spec.document), "split_rule": spec.split_rule,
            "cost_model": {**COST_MODEL, "max_cost": spec.max_shard_cost},
            "scenarios": scenarios, "shards": [{"id": sh.pop("id"), **sh} for sh in shards]}
    plan["plan_sha256"] = plan_hash(plan)
    return plan


def _shards(sc: dict, sensor, size, first: int, count: int, max_cost: float) -> list[dict]:
    cost = event_cost(sensor, size)
    per = max(1, int(max_cost // cost))
    out = []
    for k0 in range(first, first + count, per):
        n = min(per, first + count - k0)
        argv = ["rowbeam", "export", sc["blend"], *(["--rig", sc["rig"]] if sc["rig"] else []), "--out", sc["bundle"],
                "--sensors", sensor.id, "--first-event", str(k0), "--count", str(n), "--scenario", sc["scenario"],
                "--lineage-group", sc["lineage_group"], "--split", sc["split"], "--quiet"]
        out.append({"id": None, "scenario": sc["scenario"], "sensor": sensor.id, "first_event": k0, "count": n,
                    "cost": cost * n, "argv": argv, "command": shlex.join(argv),
                    "sample_ids": [sample_id(sc["scenario"], sensor.id, reference_time_ns(sensor, k, size))
                                   for k in range(k0, k0 + n)]})
    return out


def plan_hash(plan: dict) -> str:
    """sha256 of the canonical plan without its own hash field."""
    return hashlib.sha256(canonical_json({k: v for k, v in plan.items() if k != "plan_sha256"})).hexdigest()


def write_plan(plan: dict, out_dir) -> Path:
    """Write DIR/plan.json atomically. A folder already holding another plan (or other files) is refused;
    rewriting the same plan is a no-op."""
    out = Path(out_dir)
    target = out / PLAN_FILE
    if target.exists():
        old = load_json(target, "plan")
        if old.get("plan_sha256") != plan["plan_sha256"]:
            raise RowbeamError(f"{target}: holds another plan (plan_sha256 {str(old.get('plan_sha256'))[:12]}…); "
                               "plan into a new folder")
        return target
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RowbeamError(f"{out}: exists and is not an empty folder")
    created = not os.path.lexists(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(target, plan)
    except OSError as exc:
        if created:
            shutil.rmtree(out, ignore_errors=True)         # this run made it: no empty folder stays
        raise RowbeamError(f"{target}: cannot write ({exc.strerror or exc}); nothing written") from None
    return target


def load_plan(path) -> tuple[dict, Path]:
    """(plan, plan folder) from DIR or DIR/plan.json; the schema and the plan hash must hold."""
    path = Path(path)
    if path.is_dir():
        path = path / PLAN_FILE
    plan = load_json(path, "plan")
    errors = schema_errors(plan, PLAN_SCHEMA) if isinstance(plan, dict) else ["(top level): not an object"]
    if errors:
        raise RowbeamError(f"{path}: not a rowbeam plan: {errors[0]}")
    if plan_hash(plan) != plan["plan_sha256"]:
        raise RowbeamError(f"{path}: plan_sha256 does not match its content (edited after planning?)")
    return plan, path.parent


def verify_inputs(plan: dict, scenario: str | None = None) -> None:
    """Refuse (RowbeamError naming the file) when a .blend, rig or dependency changed since planning."""
    for sc in plan["scenarios"]:
        if scenario is not None and sc["scenario"] != scenario:
            continue
        if sha256_file(sc["blend"]) != sc["blend_sha256"]:
            raise RowbeamError(f"{sc['blend']}: changed since the plan was made (sha256); plan again")
        if sc["rig"] is not None and canonical_sha256(load_rig(sc["rig"]).document) != sc["rig_sha256"]:
            raise RowbeamError(f"{sc['rig']}: changed since the plan was made (rig sha256); plan again")
        for d in sc["dependencies"]:
            if sha256_file(d["path"]) != d["sha256"]:
                raise RowbeamError(f"{d['path']}: dependency of {sc['blend']} changed since the plan was made")


def shard_by_id(plan: dict, shard_id: str) -> dict:
    for sh in plan["shards"]:
        if sh["id"] == shard_id:
            return sh
    raise RowbeamError(f"plan {plan['plan_sha256'][:12]}…: no shard {shard_id!r} (0 .. {len(plan['shards']) - 1})")


def scenario_of(plan: dict, name: str) -> dict:
    return next(sc for sc in plan["scenarios"] if sc["scenario"] == name)
