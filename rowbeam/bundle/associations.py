"""Timed associations (`rowbeam/associations@1`): camera row bands <-> LiDAR beams / radar chirps.

For a camera event and a LiDAR or radar event whose span overlaps it (within the tolerance), every camera row
(reference time t_row, `rowbeam.rolling_shutter@1`) is paired with the other event's nearest acquisition time
(LiDAR: a firing's channel time group; radar: a chirp), ties to the earlier one, and kept only when
|t_row - t_other| <= max_skew_ns: no pair beyond the tolerance is ever written. Consecutive rows paired with the same
firing group / chirp form a band: rows [v0, v1], their times, the other time, the largest |skew| in the band and
the pose support (the state log samples bracketing the band's times, when the bundle has a state log). The camera
reference time is paired the same way. The checker recomputes every record from the manifests.

With pair_by "device" rows and partners are paired by their device timestamps (each sensor's declared clock,
rowbeam.model.sensor_clock) as a consumer that trusts its sensors' stamps would; each band then also records the
skew the pair really has on the master clock.

`rowbeam associate BUNDLE --max-skew-us N [--pair-by device]` writes BUNDLE/associations/[device_]max_skew_<ns>ns.json
(atomic).
"""
from __future__ import annotations

import numpy as np

from rowbeam.bundle.files import load_json
from rowbeam.bundle.layout import scan_layout
from rowbeam.bundle.schema import schema_errors
from rowbeam.model.sensor_clock import device_times_of
from rowbeam.model.state_log import load_state_log
from rowbeam.model.timing import RollingShutterTiming
from rowbeam.sensors import type_of
from rowbeam.util.errors import RowbeamError

SCHEMA = "rowbeam/associations@1"
FOLDER = "associations"
RULE = ("each camera row's reference time paired with the nearest LiDAR firing-group / radar chirp time of an "
        "overlapping event (ties: the earlier), kept only when |t_row - t_other| <= max_skew_ns; consecutive rows with "
        "the same partner form a band; skew_ns = t_row - t_other")
DEVICE_RULE = ("as the master-clock rule, with each time replaced by its sensor's device timestamp (manifest time.device."
               "rule): skew_ns and max_abs_skew_ns are device ns; true_skew_ns and max_abs_true_skew_ns are the same "
               "pairs' skew on the master clock (t_row - t_other), what the pairing really is")
PAIR_BY = ("master", "device")


def other_times(manifest: dict) -> tuple[np.ndarray, list[dict]]:
    """(sorted int64 times, what each time is) of a LiDAR or radar event: its timing model's acquisition_times()."""
    return type_of(manifest).timing_from_manifest(manifest["event"]).acquisition_times()


def nearest(sorted_t: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Index of the nearest sorted_t to each query time (ties: the earlier)."""
    i = np.clip(np.searchsorted(sorted_t, query), 1, len(sorted_t) - 1)
    left = sorted_t[i - 1]
    return np.where(np.abs(query - left) <= np.abs(sorted_t[i] - query), i - 1, i) if len(sorted_t) > 1 \
        else np.zeros(len(query), dtype=np.int64)


def _support(track, t0: int, t1: int) -> list[int] | None:
    """[first, last] state-log sample times bracketing [t0, t1] (None without a covering track)."""
    if track is None or not track.covers([t0, t1]).all():
        return None
    a = int(np.clip(np.searchsorted(track.t, t0, side="right") - 1, 0, len(track.t) - 1))
    b = int(np.clip(np.searchsorted(track.t, t1, side="left"), 0, len(track.t) - 1))
    return [int(track.t[a]), int(track.t[b])]


def span_ns(manifest: dict) -> tuple[int, int]:
    """(first, last) row / beam / chirp time of an event (ns), from its timing model."""
    return type_of(manifest).timing_from_manifest(manifest["event"]).times_span_ns()


def _ref(m: dict) -> dict:
    return {"sensor": m["sensor"]["id"], "type": m["sensor"]["type"], "index": m["event"]["index"],
            "sample_id": m["sample_id"]}


def _pairing(camera: dict, other: dict, rows_t: np.ndarray, t_other: np.ndarray, pair_by: str):
    """(row times, partner times) to pair on: master (scene clock) ns, or each sensor's device timestamps
    (rowbeam.model.sensor_clock, the manifests' `time` blocks) when pair_by == "device"."""
    if pair_by == "device":
        return device_times_of(camera, rows_t), device_times_of(other, t_other)
    return rows_t, t_other


def associate_pair(camera: dict, other: dict, max_skew_ns: int, tracks: dict | None = None,
                   pair_by: str = "master") -> dict | None:
    """The association record of one camera event with one LiDAR/radar event (manifests), or None when no row
    pairs within max_skew_ns. pair_by "device": rows and partners paired by device timestamps (skews in device
    ns); every band and the reference then also carry the skew the pair really has on the master clock."""
    timing = RollingShutterTiming.from_manifest(camera["event"])
    rows_t = timing.row_reference_times_ns()
    t_other, what = other_times(other)
    q_rows, q_other = _pairing(camera, other, rows_t, t_other, pair_by)
    idx = nearest(q_other, q_rows)
    skew = q_rows - q_other[idx]
    keep = np.abs(skew) <= max_skew_ns
    if not keep.any():
        return None
    true_skew = rows_t - t_other[idx]
    tracks = tracks or {}
    cam_track, other_track = tracks.get(camera["sensor"]["object"]), tracks.get(other["sensor"]["object"])
    bands, v = [], 0
    H = len(rows_t)
    while v < H:
        if not keep[v]:
            v += 1
            continue
        w = v
        while w + 1 < H and keep[w + 1] and idx[w + 1] == idx[v]:
            w += 1
        t0, t1 = int(min(rows_t[v], rows_t[w])), int(max(rows_t[v], rows_t[w]))
        to = int(t_other[idx[v]])
        band = {"rows": [v, w], "camera_time_ns": [int(rows_t[v]), int(rows_t[w])], "other": what[idx[v]],
                "other_time_ns": to, "max_abs_skew_ns": int(np.abs(skew[v:w + 1]).max())}
        if pair_by == "device":
            band["max_abs_true_skew_ns"] = int(np.abs(true_skew[v:w + 1]).max())
        support = {k: s for k, s in (("camera", _support(cam_track, t0, t1)), ("other", _support(other_track, to, to)))
                   if s is not None}
        if support:
            band["pose_support_ns"] = support
        bands.append(band)
        v = w + 1
    return {"camera": _ref(camera), "other": _ref(other),
            "reference": _reference(camera, other, timing, t_other, what, max_skew_ns, pair_by), "bands": bands,
            "rows_paired": int(keep.sum()), "rows": H}


def _reference(camera: dict, other: dict, timing, t_other, what, max_skew_ns: int, pair_by: str) -> dict | None:
    """The camera reference time paired the same way as its rows (None beyond the tolerance)."""
    ref_t = np.array([timing.reference_time_ns()], dtype=np.int64)
    q_ref, q_other = _pairing(camera, other, ref_t, t_other, pair_by)
    j = int(nearest(q_other, q_ref)[0])
    skew = int(q_ref[0]) - int(q_other[j])
    if abs(skew) > max_skew_ns:
        return None
    true = {"true_skew_ns": int(ref_t[0]) - int(t_other[j])} if pair_by == "device" else {}
    return {"camera_reference_time_ns": int(ref_t[0]), "other_time_ns": int(t_other[j]), "other": what[j],
            "skew_ns": skew, **true}


def associate(manifests: list[dict], max_skew_ns: int, tracks: dict | None = None, state: dict | None = None,
              pair_by: str = "master") -> dict:
    """The rowbeam/associations@1 document for a bundle's event manifests (every camera x overlapping LiDAR/radar),
    paired on the master clock or (pair_by "device") by device timestamps."""
    cams = [m for m in manifests if type_of(m).has_rows]
    others = [m for m in manifests if type_of(m).timed_beams]
    key = lambda m: (m["sensor"]["id"], m["event"]["index"])  # noqa: E731
    pairs = []
    for c in sorted(cams, key=key):
        c0, c1 = _span(c, pair_by)
        for o in sorted(others, key=key):
            o0, o1 = _span(o, pair_by)
            if o1 < c0 - max_skew_ns or o0 > c1 + max_skew_ns:
                continue
            rec = associate_pair(c, o, max_skew_ns, tracks, pair_by)
            if rec is not None:
                pairs.append(rec)
    return {"schema": SCHEMA, "max_skew_ns": int(max_skew_ns), "pair_by": pair_by,
            "rule": DEVICE_RULE if pair_by == "device" else RULE, "state": state, "pairs": pairs}


def _span(manifest: dict, pair_by: str) -> tuple[int, int]:
    """span_ns on the clock the pairing uses (device timestamps are monotonic in master time)."""
    first, last = span_ns(manifest)
    if pair_by != "device":
        return first, last
    d = device_times_of(manifest, [first, last])
    return int(d[0]), int(d[1])


def _manifests(root) -> list[dict]:
    """Schema-valid event manifests of a bundle (flows skipped); RowbeamError naming a bad one."""

    out = []
    for path in scan_layout(root)[0]:
        m = load_json(path, "manifest")
        if isinstance(m, dict) and m.get("schema") == "rowbeam/flow@1":
            continue
        errors = schema_errors(m, "rowbeam/sample@1")
        if errors:
            raise RowbeamError(f"{path}: invalid manifest: {errors[0]}")
        out.append(m)
    return out


def _state_of(manifests: list[dict], root):
    """(state pointer, tracks) of the first camera event that has a state log, else (None, None)."""

    for m in manifests:
        if type_of(m).has_rows and "state" in m:
            return m["state"], load_state_log(root, m["state"])[1]
    return None, None


def associate_bundle(bundle, max_skew_us: float, pair_by: str = "master") -> tuple[str, dict]:
    """Write BUNDLE/associations/max_skew_<ns>ns.json (pair_by "device": device_max_skew_<ns>ns.json); return (its
    path, the document)."""
    import math
    from pathlib import Path

    from rowbeam.bundle.files import atomic_write_json

    root = Path(bundle)
    if not (root / "bundle.json").is_file():
        raise RowbeamError(f"{root}: not a rowbeam bundle (no bundle.json)")
    if not (isinstance(max_skew_us, (int, float)) and math.isfinite(max_skew_us) and 0 <= max_skew_us <= 1e6):
        raise RowbeamError(f"--max-skew-us {max_skew_us}: must be 0 .. 1000000 (microseconds)")
    if pair_by not in PAIR_BY:
        raise RowbeamError(f"--pair-by {pair_by!r}: must be one of {', '.join(PAIR_BY)}")
    manifests = _manifests(root)
    state, tracks = _state_of(manifests, root)
    doc = associate(manifests, round(max_skew_us * 1000), tracks, state, pair_by)
    (root / FOLDER).mkdir(exist_ok=True)
    path = root / FOLDER / f"{'device_' if pair_by == 'device' else ''}max_skew_{doc['max_skew_ns']}ns.json"
    atomic_write_json(path, doc)
    return str(path), doc


def check_associations(root, add) -> None:
    """Every associations/*.json: schema, no pair beyond its tolerance, and equal to the records recomputed from the
    bundle's manifests and state log (complete: no pair within tolerance missing)."""
    from pathlib import Path


    folder = Path(root) / FOLDER
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.json")):
        name = f"associations:{path.name}"
        try:
            doc = load_json(path, "associations")
            errors = schema_errors(doc, SCHEMA)
            if errors:
                add(name, False, f"violates {SCHEMA}: {errors[0]}")
                continue
            beyond = sum(1 for p in doc["pairs"] for b in p["bands"] if b["max_abs_skew_ns"] > doc["max_skew_ns"])
            beyond += sum(1 for p in doc["pairs"] if p["reference"] and abs(p["reference"]["skew_ns"]) > doc["max_skew_ns"])
            manifests = _manifests(root)
            tracks = None
            if doc["state"]:
                tracks = load_state_log(root, doc["state"])[1]
            expected = associate(manifests, doc["max_skew_ns"], tracks, doc["state"], doc.get("pair_by", "master"))
        except (RowbeamError, OSError) as exc:
            add(name, False, f"unusable: {exc}")
            continue
        same = expected["pairs"] == doc["pairs"]
        bands = sum(len(p["bands"]) for p in doc["pairs"])
        true = _true_skew(doc)
        add(name, same and not beyond, f"{beyond} pairs beyond max_skew_ns {doc['max_skew_ns']}" if beyond else
            (f"{len(doc['pairs'])} event pairs, {bands} row bands, all within {doc['max_skew_ns']} ns and equal to the "
             "records recomputed from the manifests" + true[0] if same else "records differ from those recomputed "
             "from the bundle's manifests and state log (stale or edited; rerun rowbeam associate)"),
            pairs=len(doc["pairs"]), bands=bands, **true[1])


def _true_skew(doc: dict) -> tuple[str, dict]:
    """(message tail, values) of the master-clock skew of pairs made by device timestamps ("", {} otherwise)."""
    if doc.get("pair_by") != "device":
        return "", {}
    worst = max((b["max_abs_true_skew_ns"] for p in doc["pairs"] for b in p["bands"]), default=0)
    return (f"; paired by device timestamps, the pairs' true (master-clock) skew is up to {worst} ns"
            + (f", beyond the {doc['max_skew_ns']} ns tolerance" if worst > doc["max_skew_ns"] else ""),
            {"worst_true_skew_ns": worst})
