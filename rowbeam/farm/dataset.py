"""Datasets of many scenarios: the `rowbeam/dataset@1` spec, the split rule, per-sample content hashes,
the dataset hash, reproducibility levels and the leakage audit. No bpy.

Split assignment happens here, before anything renders: every lineage group gets exactly one split
(explicit map, or a deterministic hash of the group name with declared ratios).

Dataset hash (rule `rowbeam.dataset_hash@1`): SHA-256 over the 32-byte content hashes of every
sample, ordered by sample id. A sample's content hash covers its decoded payloads (not file bytes: EXR
compression, file names and timestamps do not enter) and its manifest's content (identity, timing,
calibration, objects, lineage and split), each array normalised at its declared reproducibility level.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import canonical_json, load_json
from rowbeam.bundle.schema import MAX_USER_JSON_BYTES, schema_errors

SPEC_SCHEMA = "rowbeam/dataset@1"
SPLIT_HASH_RULE = ("rowbeam.split_hash@1: u = first 8 bytes (big-endian) of sha256('rowbeam.split@1:' + salt + ':' "
                   "+ lineage_group) / 2^64; the split is the first of the declared ratios (in order) whose "
                   "cumulative sum exceeds u")
DATASET_HASH_RULE = ("rowbeam.dataset_hash@1: sha256 of the concatenated 32-byte sample content hashes in sample-id "
                     "order; a sample content hash = sha256 of canonical JSON of the manifest's content fields "
                     "followed by, per modality in name order, its name, dtype, shape and the decoded array bytes "
                     "(little-endian, C order) after normalisation at the modality's declared level")

# Reproducibility levels. "bitwise": the decoded values are equal bit for bit between two runs
# of one plan (any worker count, any Cycles thread count on the CPU). "numeric": equal within `tol` (absolute, in
# the modality's units); hashed after rounding to multiples of `tol` (NaN kept as NaN), so values that differ by
# less than `tol` hash equal unless they straddle a rounding boundary: equal hashes prove agreement, a hash
# mismatch is settled by `rowbeam replay`, which compares with the tolerance itself.
# Measured (bpy 5.3.0, CPU): every payload of a camera event (camera_z, range, normals, rgb at 4 samples, ids,
# row times and poses) is bitwise equal between Cycles threads 1 and 2 and between 1 and 3 farm workers; the
# numeric tolerances cover other devices (GPU) and Cycles builds, which were not measured bitwise.
NUMERIC_TOLERANCE = {
    "camera_z": 1e-4, "range": 1e-4, "normal_geometric": 1e-4, "normal_shading": 1e-4, "rgb": 1e-3,
    "cos_incidence": 1e-4, "points_motion_compensated": 1e-4,
    "flow_forward": 1e-3, "flow_backward": 1e-3, "scene_flow_world": 1e-4, "scene_flow_source_camera": 1e-4,
}
LEVELS = {
    "ids": "bitwise (sample ids, instance/semantic ids, validity planes)",
    "manifests": "bitwise (manifest content fields: identity, timing, calibration, objects, lineage, split)",
    "splits": "bitwise (split lists and the split of every sample)",
    "times_and_poses": "bitwise (row/beam times, per-row and per-firing poses: computed in float64, not traced)",
    "traced_floats": {name: {"level": "numeric", "tol": tol} for name, tol in NUMERIC_TOLERANCE.items()},
    "other": "bitwise (every modality not listed under traced_floats)",
}
MANIFEST_VOLATILE = ("run", "build")                       # host, wall times, versions, device, git revision
BUILD_KEPT = ("blend_sha256", "rig_sha256", "contracts_version")
METHOD_DIAGNOSTICS = ("verification", "derivation")        # measured errors: numeric, checked by the checker
FILE_FIELDS = ("uri", "sha256", "bytes", "storage", "format")


def level_of(modality: str) -> dict:
    """{'level': 'bitwise'} or {'level': 'numeric', 'tol': absolute tolerance in the modality's units}."""
    tol = NUMERIC_TOLERANCE.get(modality)
    return {"level": "numeric", "tol": tol} if tol is not None else {"level": "bitwise"}


# ----------------------------------------------------------------------------------------------- spec


@dataclass(frozen=True)
class ScenarioSpec:
    """One entry of the spec: a .blend, its rig (None: the rig stored in the .blend), lineage and events."""

    where: str                  # "scenarios[i]" for messages
    blend: Path
    rig: Path | None
    scenario: str
    lineage_group: str
    split: str | None           # explicit split of this entry (rule "explicit")
    seed: int | None
    sensors: tuple | None       # None: every sensor of the rig
    first_event: int
    count: int | None           # None: every event inside the scene's frame range


@dataclass(frozen=True)
class DatasetSpec:
    source: Path
    name: str
    scenarios: tuple
    split_rule: dict
    max_shard_cost: float
    document: dict


DEFAULT_MAX_SHARD_COST = 5e7      # pixel-samples (camera) or beams (LiDAR) per shard


def load_spec(path) -> DatasetSpec:
    """Read and validate a dataset spec; paths resolve against the spec's folder. Every problem is one
    RowbeamError naming the file and field; a missing .blend or rig, a lineage group in two splits and
    repeated scenario entries are refused here (overlapping event ranges: see check_ranges)."""
    path = Path(path)
    doc = load_json(path, "dataset spec", MAX_USER_JSON_BYTES)
    errors = schema_errors(doc, SPEC_SCHEMA) if isinstance(doc, dict) else ["(top level): must be a JSON object"]
    if errors:
        raise RowbeamError(f"{path}: invalid dataset spec: {errors[0]}")
    base = path.resolve().parent
    rule = doc["split"]
    scenarios = []
    for i, raw in enumerate(doc["scenarios"]):
        where = f"scenarios[{i}]"
        blend = (base / raw["blend"]).resolve()
        if not blend.is_file():
            raise RowbeamError(f"{path}: {where}.blend: {blend} does not exist")
        rig = (base / raw["rig"]).resolve() if raw.get("rig") else None
        if rig is not None and not rig.is_file():
            raise RowbeamError(f"{path}: {where}.rig: {rig} does not exist")
        if rule["rule"] == "hash" and "split" in raw:
            raise RowbeamError(f"{path}: {where}.split: the split rule is 'hash'; a scenario's split comes from its "
                               "lineage group (remove the field or use the 'explicit' rule)")
        events = raw.get("events", {})
        scenarios.append(ScenarioSpec(where, blend, rig, raw["scenario"], raw.get("lineage_group", raw["scenario"]),
                                      raw.get("split"), raw.get("seed"),
                                      tuple(raw["sensors"]) if "sensors" in raw else None,
                                      events.get("first", 0), events.get("count")))
    if rule["rule"] == "hash":
        total = math.fsum(r["ratio"] for r in rule["ratios"])
        if abs(total - 1.0) > 1e-9:
            raise RowbeamError(f"{path}: split.ratios: the ratios add up to {total:g}, not 1")
        names = [r["split"] for r in rule["ratios"]]
        if len(set(names)) != len(names):
            raise RowbeamError(f"{path}: split.ratios: a split is named twice")
    spec = DatasetSpec(path, doc["name"], tuple(scenarios), rule,
                       float(doc.get("shards", {}).get("max_cost", DEFAULT_MAX_SHARD_COST)), doc)
    assign_splits(spec)          # refuses a lineage group split two ways
    _check_scenarios(spec)
    return spec


def _check_scenarios(spec: DatasetSpec) -> None:
    """Entries of one scenario must name the same .blend, rig, lineage group and split (one bundle each)."""
    first = {}
    for s in spec.scenarios:
        f = first.setdefault(s.scenario, s)
        for field in ("blend", "rig", "lineage_group", "split"):
            if getattr(f, field) != getattr(s, field):
                raise RowbeamError(f"{spec.source}: {s.where}.{field}: scenario {s.scenario!r} is also "
                                   f"{f.where} with another {field} ({getattr(f, field)} vs {getattr(s, field)}); "
                                   "a scenario is one .blend, rig and lineage group")


def hash_split(lineage_group: str, ratios: list, salt: str = "") -> str:
    """The split of a lineage group under the hash rule (SPLIT_HASH_RULE); `ratios` = [{split, ratio}, ...]."""
    digest = hashlib.sha256(f"rowbeam.split@1:{salt}:{lineage_group}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2.0 ** 64
    acc = 0.0
    for r in ratios:
        acc += r["ratio"]
        if u < acc:
            return r["split"]
    return ratios[-1]["split"]       # u within rounding of 1


def assign_splits(spec: DatasetSpec) -> dict:
    """{lineage_group: split} for every group of the spec; RowbeamError when a group would get two splits
    or an entry has none."""
    rule, out, origin = spec.split_rule, {}, {}
    for s in spec.scenarios:
        if rule["rule"] == "hash":
            split = hash_split(s.lineage_group, rule["ratios"], rule.get("salt", ""))
        else:
            mapped = rule.get("map", {}).get(s.lineage_group)
            if s.split is not None and mapped is not None and s.split != mapped:
                raise RowbeamError(f"{spec.source}: {s.where}.split: {s.split!r}, but split.map assigns lineage "
                                   f"group {s.lineage_group!r} to {mapped!r}")
            split = s.split if s.split is not None else mapped
            if split is None:
                raise RowbeamError(f"{spec.source}: {s.where}: lineage group {s.lineage_group!r} has no split "
                                   "(give the scenario a 'split' or add the group to split.map)")
        if out.setdefault(s.lineage_group, split) != split:
            raise RowbeamError(f"{spec.source}: {s.where}.split: lineage group {s.lineage_group!r} is split two ways "
                               f"({origin[s.lineage_group]} is {out[s.lineage_group]!r}, {s.where} is {split!r}); "
                               "a lineage group belongs to one split")
        origin.setdefault(s.lineage_group, s.where)
    return out


def check_ranges(source, ranges: list) -> None:
    """`ranges` = [(where, scenario, sensor, first, count)]: refuse two entries producing the same sample."""
    by_key = {}
    for where, scenario, sensor, first, count in ranges:
        for w2, f2, c2 in by_key.get((scenario, sensor), []):
            if first < f2 + c2 and f2 < first + count:
                raise RowbeamError(f"{source}: {where}.events: events {first}..{first + count - 1} of scenario "
                                   f"{scenario!r} sensor {sensor!r} overlap {w2} ({f2}..{f2 + c2 - 1})")
        by_key.setdefault((scenario, sensor), []).append((where, first, count))


# ------------------------------------------------------------------------------------------- hashing


def manifest_content(manifest: dict) -> dict:
    """The hashed part of a sample manifest: everything but run metadata, build details other than the input
    hashes, measured method diagnostics and file-level payload fields (uri, sha256, bytes, storage, format)."""
    m = {k: v for k, v in manifest.items() if k not in MANIFEST_VOLATILE}
    m["build"] = {k: manifest.get("build", {}).get(k) for k in BUILD_KEPT}
    if isinstance(m.get("method"), dict):
        m["method"] = {k: v for k, v in m["method"].items() if k not in METHOD_DIAGNOSTICS}
    m["modalities"] = {name: {k: v for k, v in entry.items() if k not in FILE_FIELDS}
                       for name, entry in manifest.get("modalities", {}).items()}
    if isinstance(m.get("lineage"), dict):
        m["lineage"] = {k: v for k, v in m["lineage"].items() if k != "source"}
    return m


def normalised(name: str, array: np.ndarray) -> np.ndarray:
    """The array as it is hashed: bitwise-level arrays unchanged; numeric-level float arrays rounded to
    multiples of their tolerance (float64 grid index, NaN kept), so sub-tolerance noise hashes equal."""
    tol = NUMERIC_TOLERANCE.get(name)
    if tol is None or array.dtype.kind != "f":
        return np.ascontiguousarray(array)
    with np.errstate(invalid="ignore"):
        return np.ascontiguousarray(np.round(array.astype(np.float64) / tol) + 0.0)   # +0.0: -0 -> 0


def array_digest(name: str, array: np.ndarray) -> bytes:
    """sha256 of one decoded array at its level: name, dtype, shape, little-endian bytes."""
    a = normalised(name, array)
    a = a.astype(a.dtype.newbyteorder("<"), copy=False)
    h = hashlib.sha256(f"{name}|{a.dtype.str}|{list(a.shape)}|".encode())
    h.update(a.tobytes())
    return h.digest()


def sample_content_hash(manifest: dict, arrays: dict) -> tuple[str, dict]:
    """(content hash hex, {modality: payload digest hex}) of one sample: manifest content + decoded arrays."""
    h = hashlib.sha256(canonical_json(manifest_content(manifest)))
    payloads = {}
    for name in sorted(arrays):
        d = array_digest(name, arrays[name])
        payloads[name] = d.hex()
        h.update(d)
    return h.hexdigest(), payloads


def dataset_hash(content_hashes: dict) -> str:
    """rowbeam.dataset_hash@1 of {sample_id: content hash hex}: sha256 of the digests in sample-id order."""
    h = hashlib.sha256()
    for sid in sorted(content_hashes):
        h.update(bytes.fromhex(content_hashes[sid]))
    return h.hexdigest()


def first_divergence(name: str, published: np.ndarray, replayed: np.ndarray) -> str | None:
    """None when two decoded arrays agree at the modality's level; else one line naming the first element
    (row-major) that differs, both values and the level."""
    lv = level_of(name)
    if published.shape != replayed.shape or published.dtype != replayed.dtype:
        return (f"{name}: {published.dtype}{list(published.shape)} published vs {replayed.dtype}"
                f"{list(replayed.shape)} replayed")
    if published.dtype.kind == "f":
        a, b = published.astype(np.float64), replayed.astype(np.float64)
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        tol = lv.get("tol", 0.0)
        with np.errstate(invalid="ignore"):
            bad = (nan_a != nan_b) | (~nan_a & ~nan_b & ~(np.abs(a - b) <= tol))
            if lv["level"] == "bitwise":
                bad |= ~nan_a & ~nan_b & (published.view(np.uint8).reshape(*a.shape, -1)
                                          != replayed.view(np.uint8).reshape(*a.shape, -1)).any(-1)
    elif published.dtype.names:
        bad = published != replayed
    else:
        bad = published != replayed
    if not bad.any():
        return None
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    level = f"numeric, tol {lv['tol']:g}" if lv["level"] == "numeric" else "bitwise"
    return (f"{name}{list(idx)}: published {published[idx]!r} vs replayed {replayed[idx]!r} ({level}; "
            f"{int(bad.sum())} element(s) differ)")


# ------------------------------------------------------------------------------------------- leakage

AUDITED_PAYLOADS = ("rgb", "camera_z", "range", "points")   # scene content; times, poses and ids recur legitimately
FINGERPRINT_SIZE = 16            # RGB fingerprint: 16x16 luminance thumbnail (area means)
NEAR_DUPLICATE_REL = 0.05        # near duplicates: RMS(thumb_a - thumb_b) <= 5 % of the larger thumbnail RMS


def rgb_fingerprint(rgb: np.ndarray) -> np.ndarray:
    """(FINGERPRINT_SIZE**2,) float64: Rec.709 luminance of an (H, W, 3) scene-linear image, non-finite -> 0,
    averaged over a FINGERPRINT_SIZE x FINGERPRINT_SIZE grid of equal-area cells (rows/columns split evenly)."""
    lum = np.nan_to_num(rgb[..., :3].astype(np.float64) @ np.array([0.2126, 0.7152, 0.0722]),
                        nan=0.0, posinf=0.0, neginf=0.0)
    n = FINGERPRINT_SIZE
    H, W = lum.shape
    rows = np.minimum((np.arange(H) * n) // H, n - 1)
    cols = np.minimum((np.arange(W) * n) // W, n - 1)
    sums = np.zeros((n, n))
    np.add.at(sums, (rows[:, None], cols[None, :]), lum)
    counts = np.bincount(rows, minlength=n)[:, None] * np.bincount(cols, minlength=n)[None, :]
    return (sums / np.maximum(counts, 1)).ravel()


def near_duplicates(a: np.ndarray, b: np.ndarray) -> list[tuple[int, int, float]]:
    """Pairs (i, j, relative distance) of fingerprints a[i] (Na, D), b[j] (Nb, D) with
    RMS(a_i - b_j) <= NEAR_DUPLICATE_REL * max(RMS(a_i), RMS(b_j)) (two black images count as duplicates)."""
    if len(a) == 0 or len(b) == 0:
        return []
    d2 = np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T, 0.0) / a.shape[1]
    scale = np.maximum(np.sqrt((a * a).mean(1))[:, None], np.sqrt((b * b).mean(1))[None, :])
    rel = np.sqrt(d2) / np.maximum(scale, 1e-12)
    return [(int(i), int(j), float(rel[i, j])) for i, j in np.argwhere(rel <= NEAR_DUPLICATE_REL)]


def leakage_audit(samples: list[dict], fingerprints: dict) -> dict:
    """Audit a dataset's samples across splits. `samples`: [{sample_id, split, lineage_group, payloads:
    {modality: digest hex}}]; `fingerprints`: {sample_id: rgb_fingerprint}. Fails on a lineage group in two
    splits or an identical audited payload (AUDITED_PAYLOADS, not constant) in two splits; near-duplicate RGB
    fingerprints across splits are reported and fail too."""
    groups, payload_owner = {}, {}
    for s in samples:
        groups.setdefault(s["lineage_group"], {}).setdefault(s["split"], []).append(s["sample_id"])
    split_groups = [{"lineage_group": g, "splits": {k: v[:3] for k, v in sorted(by.items())}}
                    for g, by in sorted(groups.items()) if len(by) > 1]
    identical = []
    for s in sorted(samples, key=lambda s: s["sample_id"]):
        for name in AUDITED_PAYLOADS:
            digest = s.get("payloads", {}).get(name)
            if digest is None or s.get("constant", {}).get(name):
                continue
            other = payload_owner.setdefault((name, digest), s)
            if other is not s and other["split"] != s["split"]:
                identical.append({"modality": name, "sha256": digest, "samples": [other["sample_id"], s["sample_id"]],
                                  "splits": [other["split"], s["split"]]})
    by_split = {}
    for s in sorted(samples, key=lambda s: s["sample_id"]):
        if s["sample_id"] in fingerprints:
            by_split.setdefault(s["split"], []).append(s["sample_id"])
    near = []
    names = sorted(by_split)
    for i, sa in enumerate(names):
        fa = np.array([fingerprints[x] for x in by_split[sa]])
        for sb in names[i + 1:]:
            fb = np.array([fingerprints[x] for x in by_split[sb]])
            near += [{"samples": [by_split[sa][p], by_split[sb][q]], "splits": [sa, sb], "relative_rms": round(r, 6)}
                     for p, q, r in near_duplicates(fa, fb)]
    failed = bool(split_groups or identical or near)
    return {"status": "fail" if failed else "pass",
            "rules": {"lineage": "no lineage group in two splits",
                      "identical_payloads": f"no identical decoded payload ({', '.join(AUDITED_PAYLOADS)}; constant "
                                            "arrays skipped) in two splits",
                      "near_duplicate_rgb": f"no two RGB fingerprints ({FINGERPRINT_SIZE}x{FINGERPRINT_SIZE} "
                                            f"luminance means) in two splits within {NEAR_DUPLICATE_REL:.0%} "
                                            "relative RMS"},
            "lineage_groups_in_several_splits": split_groups, "identical_payloads_across_splits": identical,
            "near_duplicate_rgb_across_splits": near, "rgb_fingerprinted_samples": len(fingerprints)}
