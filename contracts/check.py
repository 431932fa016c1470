"""Check a rowbeam bundle (or one event folder) against its contracts; build the QA report.

Exit status of `python -m contracts check`: 0 publishable, 1 hard QA failure, 2 unusable input.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from . import CONTRACTS_VERSION
from .arrays import decode_payload
from .camera_checks import check_camera_event
from .cross_modal import check_lidar_camera
from .flow_checks import ENDPOINT_NEEDS, check_flow
from .lidar_checks import check_lidar_event
from .modalities import MODALITIES, manifest_dims, required
from .errors import RowbeamError, UnusableInput
from .files import resolve_inside, sha256_file
from .schema import schema_errors

MANIFEST = "manifest.json"
BUNDLE = "bundle.json"
INVARIANTS = {"rolling_shutter_camera": check_camera_event, "spinning_lidar": check_lidar_event}


class EventReport:
    """Results of every check on one event."""

    def __init__(self, manifest_path: Path):
        self.path = manifest_path
        self.sample_id = None
        self.manifest = None          # set once the manifest is schema-valid
        self.decoded = set()          # modalities whose payload passed integrity checks
        self.results = []

    def add(self, name: str, ok: bool, message: str, severity: str | None = None, **values):
        status = "pass" if ok else "fail"
        if severity == "warn":
            status = "pass" if ok else "warn"
        entry = {"check": name, "status": status, "message": message}
        if values:
            entry["values"] = values
        self.results.append(entry)

    @property
    def failed(self) -> bool:
        return any(r["status"] == "fail" for r in self.results)

    def to_json(self, root: Path) -> dict:
        return {"manifest": str(self.path.relative_to(root)) if root in self.path.parents else str(self.path),
                "sample_id": self.sample_id, "status": "fail" if self.failed else "pass",
                "checks": self.results}


def find_manifests(path: Path) -> tuple[Path, list[Path]]:
    """(bundle root, manifests) for a bundle folder or a single event or flow folder."""
    if not path.exists():
        raise UnusableInput(f"{path}: no such file or folder")
    if path.is_file() and path.name == MANIFEST:
        path = path.parent
    if (path / MANIFEST).is_file():
        root = next((p for p in path.parents if (p / BUNDLE).is_file()), path)
        return root, [path / MANIFEST]
    if (path / BUNDLE).is_file():
        manifests = sorted((path / "events").glob(f"*/*/{MANIFEST}")) + sorted((path / "flows").glob(f"*/*/{MANIFEST}"))
        if not manifests:
            raise UnusableInput(f"{path}: bundle holds no events (events/<sensor>/<index>/{MANIFEST})")
        return path, manifests
    raise UnusableInput(f"{path}: not a rowbeam bundle (no {BUNDLE} or {MANIFEST})")


def check_path(manifest_path: Path, base_root: Path, bundle_root: Path | None = None) -> EventReport:
    """Check one event or flow manifest. Payload uris resolve inside `base_root`; a flow's endpoint
    events inside `bundle_root` (default: base_root)."""
    report = EventReport(manifest_path)
    try:
        manifest = json.loads(manifest_path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        report.add("manifest_json", False, f"{manifest_path}: not valid JSON ({exc})")
        return report
    schema = manifest.get("schema") if isinstance(manifest, dict) else None
    if schema not in ("rowbeam/sample@1", "rowbeam/flow@1"):
        report.add("schema", False, f"{manifest_path.name}: unknown document schema {schema!r}")
        return report
    report.sample_id = manifest.get("sample_id") or manifest.get("flow_id")
    errors = schema_errors(manifest, schema)
    if errors:
        shown = "; ".join(errors[:3]) + (f" (+{len(errors) - 3} more)" if len(errors) > 3 else "")
        report.add("schema", False, f"{manifest_path.name} violates {schema}: {shown}")
        return report
    report.add("schema", True, f"manifest is valid {schema}")
    kind = "flow" if schema == "rowbeam/flow@1" else manifest["sensor"]["type"]
    arrays = _check_payloads(manifest, manifest_path.parent, base_root, kind, report)
    if kind == "flow":
        endpoints = _load_endpoints(manifest, bundle_root or base_root, report)
        if endpoints:
            check_flow(manifest, arrays, *endpoints, report.add)
    else:
        INVARIANTS[kind](manifest, arrays, report.add)
    report.manifest, report.decoded = manifest, set(arrays)
    return report


def _load_endpoints(manifest: dict, root: Path, report: EventReport):
    """Decoded ENDPOINT_NEEDS of the flow's source and destination events, hashes verified."""
    loaded = []
    for role in ("source", "destination"):
        ep = manifest["endpoints"][role]
        try:
            path = resolve_inside(root, ep["manifest"])
            if not path.is_file():
                raise RowbeamError(f"{role} event {ep['manifest']} does not exist")
            if sha256_file(path) != ep["manifest_sha256"]:
                raise RowbeamError(f"{role} event {ep['manifest']} changed since the flow was made (sha256)")
            event = json.loads(path.read_text())
            if event.get("sample_id") != ep["sample_id"] or event["sensor"]["id"] != manifest["sensor"]["id"]:
                raise RowbeamError(f"{role} event {ep['manifest']} is not sample {ep['sample_id']} of this sensor")
            arrays = {}
            for name in ENDPOINT_NEEDS:
                entry = event["modalities"][name]
                payload = resolve_inside(path.parent, entry["uri"], root)
                if sha256_file(payload) != entry["sha256"]:
                    raise RowbeamError(f"{role} event payload {entry['uri']} does not match its sha256")
                arrays[name] = decode_payload(payload, entry)
        except (RowbeamError, KeyError, json.JSONDecodeError) as exc:
            report.add(f"endpoint:{role}", False, str(exc))
            return None
        report.add(f"endpoint:{role}", True, f"{role} event {ep['manifest']} present and unchanged")
        loaded.append(arrays)
    return loaded


def _check_payloads(manifest, base: Path, root: Path, kind: str, report: EventReport) -> dict:
    """Integrity and declared-contract checks for every modality; returns the decoded arrays."""
    specs = MODALITIES[kind]
    mods = manifest["modalities"]
    missing = [m for m in required(kind) if m not in mods]
    unknown = [m for m in mods if m not in specs]
    report.add("modalities_present", not missing and not unknown,
               (f"missing modalities {missing}" if missing else "") + (f" unknown modalities {unknown}" if unknown else "")
               or "every required modality is declared")
    dims = manifest_dims(manifest)
    exposure = manifest.get("event", {}).get("exposure_ns")
    arrays = {}
    for name, entry in mods.items():
        if name not in specs:
            continue
        expected = specs[name].entry(manifest["sensor"]["id"], dims, exposure)
        diffs = [f"{k}={entry.get(k)!r} (contract: {v!r})" for k, v in expected.items() if entry.get(k) != v]
        if diffs:
            report.add(f"contract:{name}", False, f"{name}: declared " + ", ".join(diffs))
            continue
        try:
            path = resolve_inside(base, entry["uri"], root)
            if not path.is_file():
                raise RowbeamError(f"payload file {entry['uri']!r} does not exist")
            size = path.stat().st_size
            if size != entry["bytes"]:
                raise RowbeamError(f"{entry['uri']}: {size} bytes, manifest declares {entry['bytes']} (truncated?)")
            digest = sha256_file(path)
            if digest != entry["sha256"]:
                raise RowbeamError(f"{entry['uri']}: sha256 {digest[:12]}… does not match the manifest "
                                   f"({entry['sha256'][:12]}…)")
            array = decode_payload(path, entry)
            if list(array.shape) != entry["shape"]:
                raise RowbeamError(f"{entry['uri']}: decoded shape {list(array.shape)}, "
                                   f"manifest declares {entry['shape']}")
        except RowbeamError as exc:
            report.add(f"payload:{name}", False, str(exc))
            continue
        report.add(f"payload:{name}", True, f"{name}: present, sha256 verified, decodes as declared")
        arrays[name] = array
    return arrays


def check_bundle(path) -> dict:
    """Check every event under `path`; return the QA report (rowbeam/qa_report@1)."""
    t0 = time.perf_counter()
    path = Path(path)
    root, manifests = find_manifests(path)
    events = [check_path(m, root) for m in manifests]
    _check_cross_modal(events)
    failed = [e for e in events if e.failed]
    return {
        "schema": "rowbeam/qa_report@1",
        "checked": str(path),
        "contracts_version": CONTRACTS_VERSION,
        "status": "fail" if failed else "pass",
        "summary": {"events": len(events), "failed_events": len(failed),
                    "failed_checks": sum(r["status"] == "fail" for e in events for r in e.results),
                    "warnings": sum(r["status"] == "warn" for e in events for r in e.results),
                    "worst": _worst_values(events), "seconds": round(time.perf_counter() - t0, 3)},
        "events": [e.to_json(root) for e in events],
    }


def _time_span(manifest) -> tuple[int, int]:
    e = manifest["event"]
    if manifest["sensor"]["type"] == "spinning_lidar":
        return e["sweep_start_ns"], e["sweep_start_ns"] + round(e["firing_period_ns"] * e["azimuth_steps"])
    return e["frame_start_ns"], e["frame_start_ns"] + e["readout_ns"] + e["exposure_ns"]


def _load(report: EventReport, names) -> dict | None:
    if not set(names) <= report.decoded:
        return None
    entries = report.manifest["modalities"]
    return {n: decode_payload(report.path.parent / entries[n]["uri"], entries[n]) for n in names}


def _check_cross_modal(events) -> None:
    """LiDAR sweeps against every camera event that overlaps them in time (same bundle, same clock)."""
    usable = [e for e in events if e.manifest is not None and e.manifest["schema"] == "rowbeam/sample@1"]
    cameras = [e for e in usable if e.manifest["sensor"]["type"] == "rolling_shutter_camera"]
    for lid in (e for e in usable if e.manifest["sensor"]["type"] == "spinning_lidar"):
        l0, l1 = _time_span(lid.manifest)
        lidar_arrays = None
        for cam in cameras:
            c0, c1 = _time_span(cam.manifest)
            if c1 < l0 or c0 > l1:
                continue
            lidar_arrays = lidar_arrays or _load(lid, ["points"])
            camera_arrays = _load(cam, ["camera_z", "valid", "instance_id", "normal_geometric", "row_time_ns",
                                        "row_T_world_camera"])
            if lidar_arrays is None or camera_arrays is None:
                continue
            check_lidar_camera(lid.manifest, lidar_arrays, cam.manifest, camera_arrays, lid.add)


def _worst_values(events) -> dict:
    """Largest value of every numeric measure over all events (e.g. worst_residual_m)."""
    worst = {}
    for e in events:
        for r in e.results:
            for k, v in r.get("values", {}).items():
                if isinstance(v, (int, float)) and (k.startswith("worst") or k.startswith("max")):
                    key = f"{r['check']}.{k}"
                    worst[key] = max(worst.get(key, v), v)
    return worst


def summary_lines(report: dict) -> list[str]:
    s = report["summary"]
    lines = [f"rowbeam check: {report['status'].upper()} — {s['events']} folder(s) (events and flows), "
             f"{s['failed_events']} failed, {s['failed_checks']} failed check(s), {s['warnings']} warning(s)"]
    for e in report["events"]:
        for r in e["checks"]:
            if r["status"] != "pass":
                lines.append(f"  {r['status'].upper()} {e['manifest']}: {r['check']}: {r['message']}")
    for k, v in sorted(s["worst"].items()):
        lines.append(f"  worst {k} = {v:.6g}")
    return lines
