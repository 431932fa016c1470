"""Check a rowbeam bundle (or one event folder) against its contracts; build the QA report.

Exit status of `python -m rowbeam check`: 0 publishable, 1 hard QA failure, 2 unusable input.

Besides every event and flow, a bundle is checked as a whole (report["bundle"]):
- bundle.json: schema (`bundle_schema`), dataset_id = sha256 of the canonical identity (`bundle_dataset_id`),
  the stored rig's canonical sha256 = identity.rig_sha256 (`bundle_rig`); unreadable → exit 2;
- layout (`layout`, a hard failure): under events/ and flows/ only sensor folders, and in them only event
  folders <index:06d> / flow folders <i0:06d>-<i1:06d> holding a manifest.json — anything else a reader could
  take for data (`000000 copy`, a file, an event-looking folder without a manifest) fails;
- litter (`layout_litter`, a warning): hidden entries there (publish trash `.000001.old-PID`, editor files),
  a non-empty `.staging/` and `.bundle.json.tmp-PID` at the root — never read as data, safe to delete
  once no export runs;
- `sample_ids_unique`: every sample_id and flow_id once in the bundle.
Each event and flow also gets `folder_contents` (a warning for files its manifest does not reference),
`location` (folder name = sensor id and event index / endpoint indices;
sample_id = "<scenario>.<sensor>.<reference_time_ns>", flow_id = "<scenario>.<sensor>.flow.<i0>-<i1>"),
`identity` (build, lineage and ontology hashes = bundle.json's identity) and, for events, `schedule`
(the bundle's rig puts event <index> at the manifest's start time). quarantine/ is listed, not checked.
Special files (FIFO, device, socket) are refused without being opened; JSON documents are read with
bounds (rowbeam.bundle.files.load_json: 64 MiB, nesting 64, finite numbers only, one parser with rig files).
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path

from rowbeam.version import CONTRACTS_VERSION
from rowbeam.bundle.arrays import PAYLOAD_FORMATS, DecodedArrays
from rowbeam.bundle.reader import payload_path, read_payload
from rowbeam.check.flow_checks import ENDPOINT_NEEDS, check_flow
from rowbeam.check.object_checks import check_object_labels
from rowbeam.sensors import MODALITIES, load_layer, manifest_dims, required, sensor_type, sensor_types, type_of
from rowbeam.util.errors import RowbeamError, UnusableInput
from rowbeam.bundle.files import (
    STAGING_DIR,
    atomic_write_json,
    canonical_sha256,
    load_json,
    resolve_inside,
    sha256_file,
)
from rowbeam.model.sample_identity import sample_id
from rowbeam.bundle.schema import schema_errors
from rowbeam.bundle.associations import check_associations
from rowbeam.model.command_track import check_command_tracks
from rowbeam.check.time_checks import check_causality, check_event_time, check_time_against_rig
from rowbeam.bundle.layout import BUNDLE, MANIFEST, scan_layout
from rowbeam.model.state_log import check_event_against_log, check_log, load_state_log

QA_REPORT = "qa_report.json"
load_layer("check")      # each sensor type's checks (its "check_event", "check_rig_*" and "cross_check" hooks)


class EventReport:
    """Results of every check on one event."""

    def __init__(self, manifest_path: Path):
        self.path = manifest_path
        self.sample_id = None
        self.manifest = None          # set once the manifest is schema-valid
        self.decoded = set()          # modalities whose payload passed integrity checks
        self.arrays = None            # their decoded arrays, when the run keeps them (check_bundle keep_arrays)
        self.results = []

    def add(self, name: str, ok: bool, message: str, severity: str | None = None, **values):
        status = "pass" if ok else "fail"
        if severity == "warn":
            status = "pass" if ok else "warn"
        bad = sorted(k for k, v in values.items() if isinstance(v, float) and not math.isfinite(v))
        if bad:                       # a NaN / inf result never passes, and the report stays valid JSON
            values = {k: None if k in bad else v for k, v in values.items()}
            status = "warn" if severity == "warn" else "fail"
            message = f"{message} (non-finite value(s): {', '.join(bad)})"
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


def flow_id_of(scenario: str, sensor_id: str, index0: int, index1: int) -> str:
    """The id of the flow from event index0 to index1 (as the exporter names it)."""
    return f"{scenario}.{sensor_id}.flow.{index0}-{index1}"


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _locate(path: Path) -> tuple[Path, Path | None]:
    """(bundle root, the manifest of a single event or flow folder, or None for a whole bundle)."""
    if not _exists(path):
        raise UnusableInput(f"{path}: no such file or folder")
    if path.name in (MANIFEST, BUNDLE) and not path.is_dir():
        path = path.parent
    if _exists(path / MANIFEST):
        path = path.absolute()
        return next((p for p in path.parents if _exists(p / BUNDLE)), path), path / MANIFEST
    if _exists(path / BUNDLE):
        return path, None
    raise UnusableInput(f"{path}: not a rowbeam bundle (no {BUNDLE} or {MANIFEST})")


def find_manifests(path: Path) -> tuple[Path, list[Path]]:
    """(bundle root, manifests) for a bundle folder or a single event or flow folder."""
    root, single = _locate(Path(path))
    return (root, [single]) if single else (root, scan_layout(root)[0])


def quarantined(root: Path) -> list[str]:
    """Folders under quarantine/ (they failed a hard check at export; listed, never checked as publishable)."""
    q = root / "quarantine"
    return sorted(p.relative_to(root).as_posix() for p in q.glob("*/*/*") if p.is_dir() or p.is_symlink()) \
        if q.is_dir() else []


def check_path(manifest_path: Path, base_root: Path, bundle_root: Path | None = None,
               kept: dict | None = None, read_back: dict | None = None) -> EventReport:
    """Check one event or flow manifest. Payload uris resolve inside `base_root`; a flow's endpoint
    events inside `bundle_root` (default: base_root). kept: {resolved folder: arrays} of the folders checked
    before in this run; given, this folder's verified arrays are added (and a flow's endpoints taken from it).
    read_back: {name: (entry, array or error)} of this folder's payloads as their writer read them back
    (rowbeam.blender.export.manifest.PayloadWriter, read_payload with that entry): where the manifest declares the same entry,
    the file's size and sha256 are verified again and that read stands for decoding the file once more."""
    report = EventReport(manifest_path)
    try:
        manifest = load_json(manifest_path, "manifest")
    except RowbeamError as exc:
        report.add("manifest_json", False, str(exc))
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
    arrays = _check_payloads(manifest, manifest_path.parent, base_root, kind, report, read_back or {})
    if kind == "flow":
        endpoints = _load_endpoints(manifest, bundle_root or base_root, report, kept)
        if endpoints:
            check_flow(manifest, arrays, *endpoints, report.add)
    else:
        sensor_type(kind).hook("check_event")(manifest, arrays, report.add)
        check_event_time(manifest, report.add)
        if "object_labels" in manifest:
            check_object_labels(manifest, arrays, report.add, bundle_root or base_root)
    report.manifest, report.decoded = manifest, set(arrays)
    if kept is not None:
        report.arrays = kept[manifest_path.parent.resolve()] = arrays
    return report


def _load_endpoints(manifest: dict, root: Path, report: EventReport, kept: dict | None = None):
    """Decoded ENDPOINT_NEEDS of the flow's source and destination events, hashes verified (payloads already
    verified in this run are taken from `kept`)."""
    loaded = []
    for role in ("source", "destination"):
        ep = manifest["endpoints"][role]
        try:
            path = resolve_inside(root, ep["manifest"])
            if not _exists(path):
                raise RowbeamError(f"{role} event {ep['manifest']} does not exist")
            if sha256_file(path) != ep["manifest_sha256"]:
                raise RowbeamError(f"{role} event {ep['manifest']} changed since the flow was made (sha256)")
            event = load_json(path, "manifest")
            if event.get("sample_id") != ep["sample_id"] or event["sensor"]["id"] != manifest["sensor"]["id"]:
                raise RowbeamError(f"{role} event {ep['manifest']} is not sample {ep['sample_id']} of this sensor")
            arrays = {}
            done = (kept or {}).get(path.parent.resolve(), {})
            for name in ENDPOINT_NEEDS:
                if name in done and done[name] is not None:
                    arrays[name] = done[name]
                    continue
                try:
                    arrays[name] = read_payload(path.parent, event["modalities"][name], root)
                except RowbeamError as exc:
                    raise RowbeamError(f"{role} event: {exc}") from None
        except (RowbeamError, KeyError, TypeError, AttributeError) as exc:
            report.add(f"endpoint:{role}", False, f"{role} event: {exc!r}" if not isinstance(exc, RowbeamError)
                       else str(exc))
            return None
        report.add(f"endpoint:{role}", True, f"{role} event {ep['manifest']} present and unchanged")
        loaded.append(arrays)
    return loaded


def _check_payloads(manifest, base: Path, root: Path, kind: str, report: EventReport, read_back: dict) -> dict:
    """Integrity and declared-contract checks for every modality; returns the decoded arrays (a DecodedArrays:
    multi-channel images stay channel planes until a check reads the stacked array)."""
    specs = MODALITIES[kind]
    mods = manifest["modalities"]
    missing = [m for m in required(kind) if m not in mods]
    unknown = [m for m in mods if m not in specs]
    report.add("modalities_present", not missing and not unknown,
               (f"missing modalities {missing}" if missing else "") + (f" unknown modalities {unknown}" if unknown else "")
               or "every required modality is declared")
    dims = manifest_dims(manifest)
    exposure = manifest.get("event", {}).get("exposure_ns")
    arrays = DecodedArrays()
    for name, entry in mods.items():
        if name not in specs:
            continue
        expected = specs[name].entry(manifest["sensor"]["id"], dims, exposure)
        diffs = [f"{k}={entry.get(k)!r} (contract: {v!r})" for k, v in expected.items()
                 if entry.get(k) != v and not (k == "format" and entry.get(k) in PAYLOAD_FORMATS[v])]
        if diffs:
            report.add(f"contract:{name}", False, f"{name}: declared " + ", ".join(diffs))
            continue
        try:
            array = _read(base, entry, root, read_back.get(name))   # inside the bundle, size, sha256, dtype, shape
        except RowbeamError as exc:
            report.add(f"payload:{name}", False, str(exc))
            continue
        except OSError as exc:
            report.add(f"payload:{name}", False, f"{entry['uri']}: cannot be read ({exc.strerror or exc})")
            continue
        report.add(f"payload:{name}", True, f"{name}: present, sha256 verified, decodes as declared")
        arrays.add(name, array)
    return arrays


def _read(base: Path, entry: dict, root: Path, earlier: tuple | None):
    """read_payload(base, entry, root, planes=True); a read of the same entry made before (earlier = (entry, array or
    the error it raised); check_path's read_back) stands for the decode once the file's size and sha256 are
    verified again."""
    if earlier is None or earlier[0] != entry:
        return read_payload(base, entry, root, planes=True)
    payload_path(base, entry, root)
    if isinstance(earlier[1], Exception):
        raise earlier[1]
    return earlier[1]


def check_bundle(path, keep_arrays: dict | None = None) -> dict:
    """Check every event and flow under `path` and the bundle as a whole; return the QA report
    (rowbeam/qa_report@1). Raises UnusableInput (exit 2) when `path` cannot be read as a bundle.
    keep_arrays: a dict that receives {resolved folder: {name: array}} of every payload that passed its integrity
    checks (decoded once: the later checks and a caller such as the report reuse them; memory = the decoded
    bundle). Without it, arrays are dropped after each folder and read again where a later check needs them."""
    t0 = time.perf_counter()
    path = Path(path)
    root, single = _locate(path)
    whole = single is None
    bundle = EventReport(root / BUNDLE)
    manifests, problems, litter, quarantine = [single], [], [], []
    if whole:
        try:
            manifests, problems, litter = scan_layout(root)
            quarantine = quarantined(root)
        except OSError as exc:
            raise UnusableInput(f"{exc.filename or root}: cannot be read ({exc.strerror or exc})") from None
        if not manifests and not problems:
            raise UnusableInput(f"{path}: bundle holds no events (events/<sensor>/<index>/{MANIFEST})")
    context = _bundle_context(root, bundle) if _exists(root / BUNDLE) else None
    events = [check_path(m, root, kept=keep_arrays) for m in manifests]
    for e in events:
        _check_folder_contents(e)
        if context is not None:
            _check_against_bundle(e, root, context)
    if whole:
        bundle.add("layout", not problems, "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)"
                   if len(problems) > 5 else "") if problems else "events/ and flows/ hold only event and flow folders")
        if litter:
            bundle.add("layout_litter", False, "not data, left by interrupted or running exports (safe to delete when "
                       "no export runs): " + ", ".join(litter[:5]) + (f" (+{len(litter) - 5} more)" if len(litter) > 5
                                                                      else ""), severity="warn")
        _check_unique_ids(events, root, bundle)
    _check_cross_modal(events)
    _check_state_logs(events, root, bundle)
    if whole:
        check_causality([e.manifest for e in events if e.manifest and e.manifest.get("schema") == "rowbeam/sample@1"],
                        bundle.add)
        check_associations(root, bundle.add)
    failed = [e for e in events if e.failed]
    checks = [r for e in [bundle, *events] for r in e.results]
    return {
        "schema": "rowbeam/qa_report@1",
        "checked": str(path),
        "contracts_version": CONTRACTS_VERSION,
        "status": "fail" if failed or bundle.failed else "pass",
        "summary": {"events": len(events), "failed_events": len(failed),
                    "failed_checks": sum(r["status"] == "fail" for r in checks),
                    "warnings": sum(r["status"] == "warn" for r in checks),
                    "quarantined": len(quarantine),
                    "worst": _worst_values(events), "seconds": round(time.perf_counter() - t0, 3)},
        "bundle": bundle.to_json(root),
        "quarantine": quarantine,
        "events": [e.to_json(root) for e in events],
    }


def _bundle_context(root: Path, bundle: EventReport) -> dict:
    """Read and check bundle.json; return {"identity": dict or None, "rig": parsed Rig or None}.
    A bundle.json that cannot be read as a JSON object is unusable input (exit 2)."""
    from rowbeam.model.rig import parse_rig

    try:
        doc = load_json(root / BUNDLE, BUNDLE)
    except RowbeamError as exc:
        raise UnusableInput(str(exc)) from None
    if not isinstance(doc, dict):
        raise UnusableInput(f"{root / BUNDLE}: not a JSON object; not a rowbeam/bundle@1 document")
    errors = schema_errors(doc, "rowbeam/bundle@1")
    bundle.add("bundle_schema", not errors, f"{BUNDLE} violates rowbeam/bundle@1: " + "; ".join(errors[:3])
               if errors else f"{BUNDLE} is valid rowbeam/bundle@1")
    if errors:
        return {"identity": None, "rig": None}
    identity = doc["identity"]
    recomputed = canonical_sha256(identity)
    bundle.add("bundle_dataset_id", recomputed == doc["dataset_id"],
               f"dataset_id {doc['dataset_id'][:12]}… is not the sha256 of the identity ({recomputed[:12]}…)"
               if recomputed != doc["dataset_id"] else "dataset_id = sha256 of the canonical identity")
    rig = None
    if "rig" in doc:
        rig_sha = canonical_sha256(doc["rig"])
        if rig_sha != identity["rig_sha256"]:
            bundle.add("bundle_rig", False, f"the stored rig hashes to {rig_sha[:12]}…, identity.rig_sha256 is "
                       f"{identity['rig_sha256'][:12]}…")
        else:
            try:
                rig = parse_rig(doc["rig"], f"{BUNDLE} rig")
                bundle.add("bundle_rig", True, "the stored rig matches identity.rig_sha256")
            except (RowbeamError, KeyError, TypeError, ValueError) as exc:
                bundle.add("bundle_rig", False, f"the stored rig does not parse ({exc}); event times not checked "
                           "against it", severity="warn")
    return {"identity": identity, "rig": rig}


def _check_folder_contents(report: EventReport) -> None:
    """Warn about entries of an event or flow folder that are neither its manifest, its QA report nor a
    declared payload (a stray copy, a temporary file): never data, but a reader globbing *.exr could take them."""
    if report.manifest is None:
        return
    known = {MANIFEST, QA_REPORT} | {e["uri"].split("/")[0] for e in report.manifest["modalities"].values()}
    try:
        extra = sorted(set(os.listdir(report.path.parent)) - known)
    except OSError as exc:
        extra = [f"(folder unreadable: {exc.strerror})"]
    report.add("folder_contents", not extra, "not referenced by the manifest: " + ", ".join(extra[:5])
               + (f" (+{len(extra) - 5} more)" if len(extra) > 5 else "") if extra
               else "only the manifest, its QA report and declared payloads", severity="warn")


def _check_against_bundle(report: EventReport, root: Path, context: dict) -> None:
    """location, identity and (events) schedule of one schema-valid manifest against its bundle."""
    m = report.manifest
    if m is None:
        return
    flow = m["schema"] == "rowbeam/flow@1"
    sensor_id, scenario = m["sensor"]["id"], m["lineage"].get("scenario")   # a flow's lineage is a free object
    folder = report.path.parent
    problems = []
    try:
        rel = folder.resolve().relative_to(root.resolve()).parts
    except ValueError:
        rel = ()
    top = "flows" if flow else "events"
    if len(rel) != 3 or rel[0] != top:
        problems.append(f"a {'flow' if flow else 'sample'} manifest belongs in {top}/<sensor>/<folder>/, "
                        f"not {'/'.join(rel) or folder}")
    elif rel[1] != sensor_id:
        problems.append(f"sensor folder {rel[1]!r} holds sensor {sensor_id!r}")
    if flow:
        i0, i1 = (m["endpoints"][r]["index"] for r in ("source", "destination"))
        expected, actual_id, want_id = f"{i0:06d}-{i1:06d}", m["flow_id"], flow_id_of(scenario, sensor_id, i0, i1)
        for role, i in (("source", i0), ("destination", i1)):
            want = f"events/{sensor_id}/{i:06d}/{MANIFEST}"
            if m["endpoints"][role]["manifest"] != want:
                problems.append(f"{role} endpoint {m['endpoints'][role]['manifest']!r} is not event {i} ({want})")
    else:
        index = m["event"]["index"]
        expected, actual_id = f"{index:06d}", m["sample_id"]
        want_id = sample_id(scenario, sensor_id, m["event"]["reference_time_ns"])
    if len(rel) == 3 and rel[2] != expected:
        problems.append(f"folder {rel[2]!r} holds {'flow' if flow else 'event'} {expected}")
    if actual_id != want_id:
        problems.append(f"{'flow_id' if flow else 'sample_id'} {actual_id!r} is not {want_id!r}")
    report.add("location", not problems, "; ".join(problems) if problems else
               f"folder {'/'.join(rel)} = sensor {sensor_id}, {'flow' if flow else 'event'} {expected}")
    identity = context["identity"]
    if identity is not None:
        declared = {"blend_sha256": m["build"].get("blend_sha256"), "rig_sha256": m["build"].get("rig_sha256"),
                    "scenario": scenario, "lineage_group": m["lineage"].get("lineage_group")}
        if not flow:
            declared["ontology_sha256"] = m["ontology"].get("sha256")
        diff = [k for k, v in declared.items() if v != identity.get(k)]
        report.add("identity", not diff, f"differs from {BUNDLE} identity in {', '.join(diff)}" if diff
                   else f"build, lineage{'' if flow else ' and ontology'} match {BUNDLE} identity")
    if context["rig"] is not None and not flow:
        _check_schedule(report, context["rig"])


def _check_schedule(report: EventReport, rig) -> None:
    """The bundle's rig schedules event `index` of this sensor at the manifest's start time (ns)."""
    m = report.manifest
    sensor = next((s for s in rig.sensors if s.id == m["sensor"]["id"]), None)
    if sensor is None:
        report.add("schedule", False, f"sensor {m['sensor']['id']!r} is not in the bundle's rig")
        return
    if sensor.type != m["sensor"]["type"] or sensor.object != m["sensor"]["object"]:
        report.add("schedule", False, f"the bundle's rig has {sensor.id!r} as {sensor.type} on {sensor.object!r}, "
                   f"the manifest as {m['sensor']['type']} on {m['sensor']['object']!r}")
        return
    kind = sensor_type(sensor.type)
    if kind.hook("check_rig_calibration"):
        kind.hook("check_rig_calibration")(m, sensor, report.add)
    index, key = m["event"]["index"], kind.start_key
    start = sensor.event_start_ns(index)
    report.add("schedule", start == m["event"][key],
               f"event {index} of {sensor.id} starts at {start} ns per the bundle's rig; the manifest says "
               f"{key} = {m['event'][key]}" if start != m["event"][key] else f"event {index} at {start} ns as the rig says")
    if kind.hook("check_rig_acquisition"):
        kind.hook("check_rig_acquisition")(m, sensor, report.add)
    check_time_against_rig(m, rig.timebase(sensor.id), report.add)


def _check_unique_ids(events, root: Path, bundle: EventReport) -> None:
    seen = {}
    for e in events:
        if e.sample_id is not None:
            seen.setdefault(e.sample_id, []).append(e.path.parent.relative_to(root).as_posix())
    dups = {k: v for k, v in seen.items() if len(v) > 1}
    bundle.add("sample_ids_unique", not dups, "; ".join(f"{k!r} in {', '.join(v)}" for k, v in list(dups.items())[:5])
               if dups else "every sample_id and flow_id occurs once")


def _load(report: EventReport, names) -> dict | None:
    if not set(names) <= report.decoded:
        return None
    if report.arrays is not None:
        return {n: report.arrays[n] for n in names}
    entries = report.manifest["modalities"]
    return {n: read_payload(report.path.parent, entries[n], verify=False) for n in names}


def _check_state_logs(events, root: Path, bundle: EventReport) -> None:
    """Each state log the events point at (once: samples on their rate grid, rigid, velocities consistent), then
    every event's row/beam/chirp poses (and radar velocities) against it."""
    logs = {}
    for e in events:
        m = e.manifest
        if m is None or m.get("schema") != "rowbeam/sample@1" or "state" not in m:
            continue
        uri = m["state"]["log"]
        if uri not in logs:
            try:
                log, tracks = load_state_log(root, m["state"])
                logs[uri] = tracks
                check_log(log, tracks, lambda name, ok, msg, **kw: bundle.add(name, ok, f"{uri}: {msg}", **kw))  # noqa: B023 (called at once)
                check_command_tracks(log, lambda name, ok, msg, **kw: bundle.add(name, ok, f"{uri}: {msg}", **kw))  # noqa: B023
            except RowbeamError as exc:
                logs[uri] = None
                bundle.add("state_log", False, f"{uri}: {exc}")
        names = [n for n in type_of(m).pose_arrays if n in m["modalities"]]
        arrays = _load(e, names)
        if logs[uri] is None or arrays is None:
            e.add("state_log_poses", False, f"not compared: the state log {uri} or the event's pose arrays are unusable")
            continue
        check_event_against_log(m, arrays, logs[uri], e.add)


def _check_cross_modal(events) -> None:
    """Each sensor type's cross check ("cross_check" hook: LiDAR sweeps against every camera event that overlaps them
    in time, radar frames against every overlapping LiDAR sweep; same bundle, same clock)."""
    usable = [e for e in events if e.manifest is not None and e.manifest["schema"] == "rowbeam/sample@1"]
    for kind in sensor_types():
        cross = kind.hook("cross_check")
        if cross is None:
            continue
        partners = [e for e in usable if e.manifest["sensor"]["type"] == cross.partner]
        for subject in (e for e in usable if e.manifest["sensor"]["type"] == kind.name):
            _cross_check(subject, partners, cross)


def _cross_check(subject, partners, cross) -> None:
    """cross.fn on `subject` and every partner event whose acquisition interval overlaps the subject's."""
    s0, s1 = type_of(subject.manifest).span_ns(subject.manifest)
    subject_arrays = None
    for other in partners:
        p0, p1 = type_of(other.manifest).span_ns(other.manifest)
        if p1 < s0 or p0 > s1:
            continue
        subject_arrays = subject_arrays or _load(subject, list(cross.subject_arrays))
        other_arrays = _load(other, list(cross.partner_arrays))
        if subject_arrays is None or other_arrays is None:
            continue
        cross.fn(subject.manifest, subject_arrays, other.manifest, other_arrays, subject.add)


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


def check_report_path(path) -> Path:
    """Refuse a --report path that cannot be written or would change a bundle; create nothing."""
    target = Path(path)
    if _exists(target) and not target.is_file():
        kind = "a folder" if target.is_dir() else "not a regular file"
        raise RowbeamError(f"--report {path}: is {kind}; give a file path")
    parent = target.parent
    if not parent.is_dir():
        raise RowbeamError(f"--report {path}: folder {parent} does not exist" if not _exists(parent)
                           else f"--report {path}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise RowbeamError(f"--report {path}: folder {parent} is not writable")
    resolved = target.resolve()
    for base in resolved.parents:
        if _exists(base / BUNDLE):
            inside = resolved.relative_to(base).parts
            if inside[0] in ("events", "flows", "quarantine", STAGING_DIR) or inside == (BUNDLE,):
                raise RowbeamError(f"--report {path}: inside the bundle {base} ({'/'.join(inside[:2])}); "
                                   "writing there would change the bundle; write the report elsewhere")
    return target


def write_report(path, report: dict) -> None:
    """Write the QA report atomically (temporary sibling, fsync, rename); one-line error, no litter."""
    check_report_path(path)
    try:
        atomic_write_json(path, report)
    except OSError as exc:
        raise RowbeamError(f"--report {path}: cannot write ({exc.strerror or exc})") from None


def summary_lines(report: dict) -> list[str]:
    s = report["summary"]
    lines = [f"rowbeam check: {report['status'].upper()} — {s['events']} folder(s) (events and flows), "
             f"{s['failed_events']} failed, {s['failed_checks']} failed check(s), {s['warnings']} warning(s)"]
    if report.get("quarantine"):
        lines.append(f"  quarantine: {len(report['quarantine'])} folder(s) held back at export, not checked "
                     "(each keeps its qa_report.json)")
    for e in [report["bundle"]] * ("bundle" in report) + report["events"]:
        for r in e["checks"]:
            if r["status"] != "pass":
                lines.append(f"  {r['status'].upper()} {e['manifest']}: {r['check']}: {r['message']}")
    for k, v in sorted(s["worst"].items()):
        lines.append(f"  worst {k} = {v:.6g}")
    return lines
