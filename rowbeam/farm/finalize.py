"""`rowbeam finalize DIR`: the dataset manifest (DIR/dataset.json), split lists (DIR/splits/<split>.txt), the
dataset hash, the QA summary over all bundles (DIR/qa_summary.json) and the leakage audit.

Every sample comes from the plan's expected sample ids, read through rowbeam.bundle.reader (sha256 of
every payload verified); the split of a sample is the one its manifest carries. Exit status: 0 complete and
every audit passed, 1 a sample missing, a QA failure or a failed leakage audit, 2 unusable input.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rowbeam.bundle.reader import Bundle, Event
from rowbeam.check.runner import check_bundle
from rowbeam.farm.dataset import (
    DATASET_HASH_RULE,
    LEVELS,
    SPLIT_HASH_RULE,
    dataset_hash,
    leakage_audit,
    rgb_fingerprint,
    sample_content_hash,
)
from rowbeam.util.errors import RowbeamError
from rowbeam.bundle import ownership
from rowbeam.bundle.files import atomic_write_bytes, atomic_write_json, load_json
from rowbeam.bundle.schema import schema_errors

from .plan import load_plan

MANIFEST_SCHEMA = "rowbeam/dataset_manifest@1"


def _constant(a: np.ndarray) -> bool:
    """True when an array holds one value everywhere (NaN counted as a value): no scene content to leak."""
    if a.size == 0:
        return True
    if a.dtype.kind == "f":
        flat = a.reshape(-1)
        nan = np.isnan(flat)
        return bool(nan.all() or (not nan.any() and (flat == flat[0]).all()))
    return bool((a.reshape(-1) == a.reshape(-1)[0]).all()) if a.dtype.names is None else len(a) <= 1


def collect(plan: dict, plan_dir) -> tuple[list, list, dict]:
    """(samples, missing sample ids, rgb fingerprints) over every expected sample of the plan."""
    samples, missing, fingerprints = [], [], {}
    for sc in plan["scenarios"]:
        bundle = Bundle(plan_dir / sc["bundle"])
        for sh in (s for s in plan["shards"] if s["scenario"] == sc["scenario"]):
            for k, sid in zip(range(sh["first_event"], sh["first_event"] + sh["count"]), sh["sample_ids"], strict=True):
                loc = f"events/{sh['sensor']}/{k:06d}"
                quarantined = not (bundle.path / loc / "manifest.json").is_file()
                folder = bundle.path / ("quarantine/" + loc if quarantined else loc)
                if not (folder / "manifest.json").is_file():
                    missing.append(sid)
                    continue
                event = Event(folder, bundle.path)
                if event.sample_id != sid:
                    raise RowbeamError(f"{folder}: holds sample {event.sample_id!r}, the plan expects {sid!r}")
                arrays = event.arrays()
                content, payloads = sample_content_hash(event.manifest, arrays)
                lineage = event.manifest["lineage"]
                samples.append({"sample_id": sid, "split": lineage.get("split", "(none)"),
                                "scenario": lineage["scenario"], "lineage_group": lineage["lineage_group"],
                                "path": folder.relative_to(plan_dir).as_posix(), "content_sha256": content,
                                "quarantined": quarantined, "payloads": payloads,
                                "constant": {n: _constant(a) for n, a in arrays.items()}})
                if "rgb" in arrays:
                    fingerprints[sid] = rgb_fingerprint(arrays["rgb"])
    return samples, missing, fingerprints


def finalize(plan_dir) -> dict:
    plan, plan_dir = load_plan(plan_dir)
    check_outputs_are_ours(plan_dir)              # before the long part: nothing of the user's is overwritten
    samples, missing, fingerprints = collect(plan, plan_dir)
    qa = {"bundles": {}}
    for sc in plan["scenarios"]:
        path = plan_dir / sc["bundle"]
        if not path.is_dir():
            qa["bundles"][sc["scenario"]] = {"status": "missing"}
            continue
        report = check_bundle(path)
        qa["bundles"][sc["scenario"]] = {"status": report["status"],
                                         **{k: v for k, v in report.get("summary", {}).items()
                                            if isinstance(v, (int, float, str))}}
    qa["quarantined"] = sorted(s["sample_id"] for s in samples if s["quarantined"])
    qa["status"] = "fail" if any(b["status"] != "pass" for b in qa["bundles"].values()) else "pass"
    planned = {sc["scenario"]: sc["split"] for sc in plan["scenarios"]}
    wrong_split = [s["sample_id"] for s in samples if s["split"] != planned[s["scenario"]]]
    audit = leakage_audit(samples, fingerprints)
    audit["split_differs_from_plan"] = wrong_split
    if wrong_split:
        audit["status"] = "fail"
    kept = [s for s in samples if not s["quarantined"]]
    dhash = dataset_hash({s["sample_id"]: s["content_sha256"] for s in kept})
    splits = {}
    for s in sorted(kept, key=lambda s: s["sample_id"]):
        splits.setdefault(s["split"], []).append(s["sample_id"])
    status = "pass" if not missing and qa["status"] == "pass" and audit["status"] == "pass" else "fail"
    doc = {"schema": MANIFEST_SCHEMA, "dataset": plan["dataset"], "plan_sha256": plan["plan_sha256"],
           "status": status, "dataset_hash": dhash, "hash_rule": DATASET_HASH_RULE, "split_rule": SPLIT_HASH_RULE
           if plan["split_rule"]["rule"] == "hash" else "explicit", "levels": LEVELS,
           "samples": [{k: s[k] for k in ("sample_id", "split", "scenario", "lineage_group", "path", "content_sha256",
                                          "quarantined")} for s in sorted(samples, key=lambda s: s["sample_id"])],
           "splits": {k: {"samples": len(v), "list": f"splits/{k}.txt"} for k, v in sorted(splits.items())},
           "missing": missing, "qa": qa, "leakage": audit}
    errors = schema_errors(doc, MANIFEST_SCHEMA)
    if errors:
        raise AssertionError(f"finalize produced an invalid dataset manifest: {errors[0]}")
    (plan_dir / "splits").mkdir(exist_ok=True)
    for name, ids in splits.items():
        atomic_write_bytes(plan_dir / "splits" / f"{name}.txt", "".join(f"{i}\n" for i in ids).encode())
    ownership.mark(plan_dir / "splits", "finalize", files=ownership.listing(plan_dir / "splits"))
    atomic_write_json(plan_dir / "qa_summary.json", {"qa": qa, "leakage": audit})
    atomic_write_json(plan_dir / "dataset.json", doc)
    return doc


def check_outputs_are_ours(plan_dir: Path) -> None:
    """Refuse (one line) to overwrite a dataset.json, qa_summary.json or splits/ that finalize did not write."""
    for name, ours in (("dataset.json", lambda d: d.get("schema") == MANIFEST_SCHEMA),
                       ("qa_summary.json", lambda d: set(d) == {"qa", "leakage"})):
        path = plan_dir / name
        if os.path.lexists(path):
            try:
                doc = load_json(path, name)
            except RowbeamError:
                doc = None
            if not isinstance(doc, dict) or not ours(doc):
                raise RowbeamError(f"{path}: exists and was not written by rowbeam finalize; move it away")
    ownership.check_replaceable(plan_dir / "splits", "splits folder")


def summary_lines(doc: dict) -> list[str]:
    a = doc["leakage"]
    lines = [f"dataset {doc['dataset']}: {len(doc['samples'])} sample(s), "
             + ", ".join(f"{k} {v['samples']}" for k, v in doc["splits"].items()),
             f"dataset hash {doc['dataset_hash']}",
             f"QA: {doc['qa']['status']} ({len(doc['qa']['quarantined'])} quarantined)",
             f"leakage audit: {a['status']} (lineage groups in several splits {len(a['lineage_groups_in_several_splits'])}, "
             f"identical payloads across splits {len(a['identical_payloads_across_splits'])}, near-duplicate RGB "
             f"{len(a['near_duplicate_rgb_across_splits'])}, split differs from plan {len(a['split_differs_from_plan'])})"]
    for g in a["lineage_groups_in_several_splits"][:3]:
        lines.append(f"  LEAK lineage group {g['lineage_group']!r} in splits {', '.join(g['splits'])}")
    for p in a["identical_payloads_across_splits"][:3]:
        lines.append(f"  LEAK identical {p['modality']} in {p['samples'][0]} ({p['splits'][0]}) and {p['samples'][1]} "
                     f"({p['splits'][1]})")
    for p in a["near_duplicate_rgb_across_splits"][:3]:
        lines.append(f"  LEAK near-duplicate rgb {p['samples'][0]} ({p['splits'][0]}) ~ {p['samples'][1]} "
                     f"({p['splits'][1]}), relative RMS {p['relative_rms']:.3g}")
    if doc["missing"]:
        lines.append(f"  MISSING {len(doc['missing'])} sample(s), first {doc['missing'][0]} (rowbeam farm status)")
    lines.append(f"status: {doc['status']}")
    return lines
