"""`rowbeam report BUNDLE_OR_DATASET --out DIR [--baseline DIR]`: the visual QA report.

Runs the checker (rowbeam.check.runner.check_bundle) on each bundle, then writes, into a staging sibling of DIR
that is renamed into place when complete (nothing half-written): index.html (QA pass/fail per event, flow
and sweep, failures first, worst residuals, quarantine with reasons, residual distributions, dataset
statistics, baseline drift), one page per camera event, flow and LiDAR sweep with its overlays, img/
(full-resolution PNGs and thumbnails) and report.json (rowbeam/report@1). A DATASET is a folder whose
sub-folders are bundles. A bundle that fails its checks still gets a report.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from rowbeam.bundle.arrays import channel_planes
from rowbeam.bundle.reader import Bundle, Event, Flow
from rowbeam.check.camera_checks import manifest_lens
from rowbeam.model.camera_model import norm, pixel_grid, ray_directions
from rowbeam.check.runner import check_bundle
from rowbeam.util.errors import RowbeamError, UnusableInput
from rowbeam.bundle.files import atomic_write_json, fsync_path, load_json
from rowbeam.check.flow_checks import cycle_residuals
from rowbeam.model.lens import image_rays
from rowbeam.model.ontology import BACKGROUND_ID, VOID_ID
from rowbeam.util.worker_threads import WORKERS
from rowbeam.report import colour, html, motion, overlays
from rowbeam.report.png import Indexed, encode_png, thumbnail, thumbnail_factor
from rowbeam.report.radar_page import radar_page
from rowbeam.report.stats import Residuals, drift, histogram, sample_pixels, sorted_quantiles

SCHEMA = "rowbeam/report@1"
REPORT_JSON = "report.json"
THUMB_SIDE = 320
MIN_DISPLAY_WIDTH = 240
OPEN_TABLE_ROWS = 20            # a camera page's object table longer than this starts folded (<details>)


class _Silent:
    def start_job(self, label): pass
    def stage(self, name, total=None, unit=""): pass
    def advance(self, done): pass


def find_bundles(source: Path) -> list[Path]:
    """[source] for a bundle (holds bundle.json), its bundle sub-folders for a dataset; else UnusableInput."""
    if not source.is_dir():
        raise UnusableInput(f"{source}: not a bundle or dataset folder (does not exist or is not a folder)")
    if (source / "bundle.json").exists():
        return [source]
    subs = sorted(p for p in source.iterdir() if p.is_dir() and (p / "bundle.json").exists())
    if not subs:
        raise UnusableInput(f"{source}: not a rowbeam bundle (no bundle.json) nor a dataset of bundles")
    return subs


def check_out(out: Path, sources: list[Path]) -> None:
    """Refuse an --out that is a file, non-empty and not an earlier report, inside a bundle, or not writable."""
    resolved = out.resolve()
    for s in sources:
        if resolved == s.resolve() or s.resolve() in resolved.parents:
            raise RowbeamError(f"--out {out}: inside the bundle {s}; write the report elsewhere")
    if os.path.lexists(out):
        if not out.is_dir():
            raise RowbeamError(f"--out {out}: exists and is not a folder")
        entries = list(out.iterdir())
        if entries and not _is_report(out):
            raise RowbeamError(f"--out {out}: folder is not empty and holds no earlier report ({REPORT_JSON}); "
                               "give a new or empty folder")
    parent = out.absolute().parent
    if not parent.is_dir():
        raise RowbeamError(f"--out {out}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise RowbeamError(f"--out {out}: folder {parent} is not writable")


def _is_report(folder: Path) -> bool:
    try:
        return load_json(folder / REPORT_JSON, REPORT_JSON).get("schema") == SCHEMA
    except (RowbeamError, OSError, AttributeError):
        return False


def load_baseline(path) -> dict:
    p = Path(path)
    doc_path = p / REPORT_JSON if p.is_dir() else p
    if not doc_path.is_file():
        raise RowbeamError(f"--baseline {path}: no {REPORT_JSON} (give an earlier report folder)")
    doc = load_json(doc_path, REPORT_JSON)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise RowbeamError(f"--baseline {doc_path}: not a {SCHEMA} document (schema {doc.get('schema')!r})"
                           if isinstance(doc, dict) else f"--baseline {doc_path}: not a JSON object")
    return doc


class Writer:
    """Writes PNGs (full resolution + thumbnail) under the staging root; image() returns their paths relative to
    pages/ at once. Making the image (when given a function), its thumbnail, the zlib encoding and the file writes
    run on worker threads (numpy and zlib release the GIL on whole images, so they overlap the pages' own work on
    other cores; never bpy): an image given to image() is made read-only, and must not be changed afterwards. An image
    likely to equal an earlier one (keep=, same_as=) is encoded only when it differs: else its files are copies of the
    earlier one's; an image given already read-only (a shared constant: colour.colour_bar()) is encoded once, its
    later files are copies. Use as a context manager: leaving it waits for every file and raises the first error (after an
    error it cancels what has not started)."""

    MAX_PENDING = 16            # images queued at most (their memory) before image() waits for the oldest

    def __init__(self, root: Path, workers: int | None = None):
        self.root = root
        self._pool = ThreadPoolExecutor(max_workers=workers or WORKERS, thread_name_prefix="report-png")
        self._pending: deque = deque()
        self._folders: set = set()          # the img/ folders made so far
        self._kept: dict = {}               # rel -> (job, PNG path, thumbnail path or None) of an image(keep=True)
        self._given: dict = {}              # id(image) -> (image, (job, PNG path, thumbnail path)) of shared images

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            return
        try:
            while self._pending:
                self._pending.popleft().result()
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def image(self, rel: str, img, shape=None, keep: bool = False, same_as: str | None = None, same=None) -> dict:
        """Write img, an (H, W, C) uint8 image or an Indexed image, or a function of no arguments that makes one on a
        worker thread (it must only read arrays nobody changes meanwhile, and never call bpy), then shape = (H, W).
        keep: hold the image made until a later image(same_as=rel) compares with it. same_as: the rel of an earlier
        image(keep=True) of the same shape; once made, img is compared with it and, when pixel-identical, its PNG and
        thumbnail are byte copies of that image's files instead of being encoded again. same: with same_as, a function
        of no arguments (run on a worker thread, same rules) that tells whether img would be pixel-identical to that
        image without making it: then img is never made."""
        full = self.root / "img" / f"{rel}.png"
        if full.parent not in self._folders:
            full.parent.mkdir(parents=True, exist_ok=True)
            self._folders.add(full.parent)
        H, W = shape if callable(img) else img.shape[:2]
        f = thumbnail_factor(H, W, THUMB_SIDE)
        thumb_rel = f"{rel}.png" if f == 1 else f"{rel}.thumb.png"
        shared = False                      # given read-only: a shared constant (colour.colour_bar()), kept by id
        if not callable(img):
            pixels = img.index if isinstance(img, Indexed) else img
            shared, pixels.flags.writeable = not pixels.flags.writeable, False
        if len(self._pending) >= self.MAX_PENDING:
            self._pending.popleft().result()
        thumb = None if f == 1 else self.root / "img" / thumb_rel
        earlier = self._kept.pop(same_as) if same_as else None
        if earlier is None and id(img) in self._given:                    # this very image again: copy its files
            earlier, same = self._given[id(img)][1], _always
        job = self._pool.submit(_write_png, full, thumb, img, (H, W), earlier, keep, same)
        if shared:
            self._given.setdefault(id(img), (img, (job, full, thumb)))   # (holding img keeps its id unique)
        if keep:
            self._kept[rel] = (job, full, thumb)
        self._pending.append(job)
        h, w = H // f, W // f
        scale = max(1, -(-MIN_DISPLAY_WIDTH // w))
        return {"full": f"../img/{rel}.png", "thumb": f"../img/{thumb_rel}", "width": w * scale,
                "height": h * scale}


def _write_png(full: Path, thumb: Path | None, img, shape, earlier=None, keep=False, same=None):
    """Write img (an image, or the function that makes an image of `shape` (H, W)) as PNG to `full` and, unless
    thumb is None, its thumbnail (png.thumbnail, THUMB_SIDE) to `thumb`; return the image when keep. earlier: (job, PNG path,
    thumbnail path) of an earlier image: when img is pixel-identical to the image that job returns (or same(), when
    given, says it would be), copy its files instead (the pool starts jobs in the order given, so the earlier job
    has started: waiting for it cannot deadlock)."""
    if earlier is not None and same is not None:
        earlier[0].result()                         # its files are written
        if same():
            _copy_files(earlier, full, thumb)
            return None
        earlier = None
    if callable(img):
        img = img()
        if img.shape[:2] != tuple(shape):
            raise ValueError(f"{full.name}: made a {img.shape[:2]} image, not the declared {tuple(shape)}")
    if earlier is not None and _same_image(img, earlier[0].result()):
        _copy_files(earlier, full, thumb)
        return img if keep else None
    full.write_bytes(encode_png(img, level=1))
    if thumb is not None:
        thumb.write_bytes(encode_png(thumbnail(img, THUMB_SIDE), level=1))
    return img if keep else None


def _always() -> bool:
    return True


def _copy_files(earlier, full: Path, thumb: Path | None) -> None:
    """The PNG and thumbnail of an earlier image ((job, PNG path, thumbnail path)) copied to full and thumb."""
    shutil.copyfile(earlier[1], full)
    if thumb is not None:
        shutil.copyfile(earlier[2], thumb)


def _same_image(a, b) -> bool:
    """Whether two images (uint8 arrays or Indexed) are the same kind, shape and values (so the same PNG bytes)."""
    if isinstance(a, Indexed) or isinstance(b, Indexed):
        return (isinstance(a, Indexed) and isinstance(b, Indexed) and np.array_equal(a.palette, b.palette)
                and a.index.dtype == b.index.dtype and np.array_equal(a.index, b.index))
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def build_report(source, out, baseline=None, progress=None) -> dict:
    """Write the report of a bundle or dataset into `out`; return report.json's document."""
    t0 = time.perf_counter()
    source, out = Path(source), Path(out)
    progress = progress or _Silent()
    bundles = find_bundles(source)
    check_out(out, bundles)
    base_doc = load_baseline(baseline) if baseline else None
    staging = out.absolute().parent / f".{out.name}.report-staging-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    (staging / "pages").mkdir(parents=True)
    try:
        doc = _build(bundles, source, staging, progress)
        doc["seconds"] = round(time.perf_counter() - t0, 3)
        if base_doc is not None:
            doc["drift"] = {"baseline": str(baseline), **drift(doc, base_doc)}
        _write_index(staging, doc)
        atomic_write_json(staging / REPORT_JSON, doc)
        (staging / "style.css").write_text(html.CSS)
        fsync_path(staging)
        _publish(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return doc


def _publish(staging: Path, out: Path) -> None:
    """Rename the finished report into place; an earlier report (or an empty folder) is replaced."""
    old = None
    if os.path.lexists(out):
        old = out.absolute().parent / f".{out.name}.report-old-{os.getpid()}"
        os.rename(out, old)
    os.rename(staging, out)
    fsync_path(out.absolute().parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _key(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", path.name) or "bundle"


def _build(bundles, source, staging, progress) -> dict:
    res = Residuals()
    stats = _Stats()
    bundle_docs = []
    with Writer(staging) as w:
        for b in bundles:
            key = _key(b) if len(bundles) > 1 else "bundle"
            progress.start_job(f"report {b.name}")
            progress.stage("checking", unit="")
            kept = {}                      # the checker's decoded, verified arrays: every payload is decoded once
            qa = check_bundle(b, keep_arrays=kept)
            bundle_docs.append(_report_bundle(b, key, qa, w, res, stats, progress, kept))
            kept.clear()
        # the summaries here, while the Writer's threads still encode the last images
        doc = {"schema": SCHEMA, "source": str(source), "generated_ns": time.time_ns(),
               "status": "fail" if any(d["qa_status"] == "fail" for d in bundle_docs) else "pass",
               "bundles": bundle_docs, "residuals": res.summary(), "statistics": stats.summary(bundle_docs)}
    return doc


def _qa_by_folder(qa: dict) -> dict:
    return {str(Path(e["manifest"]).parent): e for e in qa["events"]}


def _report_bundle(root: Path, key: str, qa: dict, w: Writer, res: Residuals, stats, progress, kept=None) -> dict:
    bundle = Bundle.open(root)
    bundle.preloaded.update(kept or {})
    by_folder = _qa_by_folder(qa)
    events = list(bundle.events())
    flows = list(bundle.flows())
    types = {id(e): _safe(lambda e=e: e.sensor_type) for e in events}
    lidars = [e for e in events if types[id(e)] == "spinning_lidar"]
    cameras = [e for e in events if types[id(e)] == "rolling_shutter_camera"]
    ctx = {"lidars": lidars, "cameras": cameras, "checked": bundle.preloaded}
    items = []
    progress.stage("overlays", total=len(events) + len(flows), unit="folders")
    for i, doc in enumerate([*events, *flows]):
        rel = doc.path.relative_to(root).as_posix()
        entry = by_folder.get(rel, {"status": "fail", "checks": [{"check": "unchecked", "status": "fail",
                                                                  "message": "not checked"}]})
        item = {"folder": rel, "kind": None, "qa_status": entry["status"],
                "failed_checks": [c for c in entry["checks"] if c["status"] == "fail"],
                "warnings": [c for c in entry["checks"] if c["status"] == "warn"],
                "worst": {f"{c['check']}.{k}": v for c in entry["checks"] for k, v in c.get("values", {}).items()
                          if isinstance(v, (int, float)) and (k.startswith("worst") or k.startswith("max"))}}
        verify = entry["status"] == "fail"      # the checker verified passing folders' sha256; re-verify the others
        _item_page(doc, key, rel, entry["status"], entry["checks"], item, w, res, stats, ctx, verify)
        items.append(item)
        progress.advance(i + 1)
    quarantine = [_quarantine_entry(root, q) for q in qa.get("quarantine", [])]
    for q in quarantine:                    # held back at export: the same overlays, failed checks first
        q["kind"] = None
        doc = _open_quarantined(root, root / q["folder"])
        _item_page(doc, key, q["folder"], "fail", q.pop("checks"), q, w, Residuals(), _Stats(), ctx, True,
                   f"quarantined at export: {'; '.join(q['reasons'][:3])}")
    stats.quarantine += [{"folder": q["folder"], "reasons": q["reasons"]} for q in quarantine]
    stats.counts["events"] += len(events)
    stats.counts["flows"] += len(flows)
    stats.counts["quarantined"] += len(quarantine)
    stats.splits.append(bundle.info.get("split"))
    items.sort(key=lambda it: (it["qa_status"] != "fail", it["kind"] or "", it["folder"]))
    return {"bundle": str(root), "key": key, "qa_status": qa["status"], "qa_summary": qa["summary"],
            "bundle_checks": [c for c in qa.get("bundle", {}).get("checks", []) if c["status"] != "pass"],
            "items": items, "quarantine": quarantine}


def _open_quarantined(root: Path, folder: Path):
    """A quarantined event or flow folder as a bundle_reader document (payloads resolve inside the bundle)."""
    if folder.parent.parent.name == "flows":
        return Flow(folder, root)
    return Event(folder, root)


def _item_page(doc, key, rel, status, checks, item, w, res, stats, ctx, verify, note="") -> None:
    """Write the page of one event or flow folder (overlays by sensor kind, then its QA checks; failed checks
    first, and on a failing folder before the overlays); sets item kind, page and overlays."""
    name = f"{key}/{rel}".replace("/", "_")
    item["page"] = f"pages/{name}.html"
    try:
        if isinstance(doc, Flow):
            item["kind"] = "flow"
            body = _flow_page(doc, w, f"{key}/{rel}", res, stats, verify)
        elif doc.sensor_type == "spinning_lidar":
            item["kind"] = "lidar_sweep"
            body = _lidar_page(doc, w, f"{key}/{rel}", res, stats, verify)
        elif doc.sensor_type == "rolling_shutter_camera":
            item["kind"] = "camera_event"
            body = _camera_page(doc, w, f"{key}/{rel}", res, stats, ctx["lidars"], verify,
                                checked_valid=not verify and _passed(checks, "validity_consistency"),
                                checked_ids=not verify and _passed(checks, "semantic_matches_instance"),
                                checked=None if verify else ctx["checked"].get(doc.path.resolve()))
        elif doc.sensor_type == "radar":
            item["kind"] = "radar_frame"
            body = radar_page(doc, w, f"{key}/{rel}", res, stats, ctx["cameras"], verify)
        else:
            item["kind"] = "other"
            body = f"<p>{html.esc(doc.sensor_type)} event: no overlays for this sensor type yet (QA below)</p>"
        item["overlays"] = "ok"
    except (RowbeamError, OSError, KeyError, ValueError, TypeError, IndexError) as exc:
        body = f"<p class=\"fail\">overlays unavailable: {html.esc(exc)}</p>"
        item["overlays"] = f"unavailable: {exc}"
        item["kind"] = item["kind"] or "unknown"
    order = {"fail": 0, "warn": 1}
    table = html.table(["check", "status", "message"],
                       [[html.esc(c.get("check")), html.status(c.get("status", "?")), html.esc(c.get("message", ""))]
                        for c in sorted(checks, key=lambda c: order.get(c.get("status"), 2))])
    head = (f"<nav><a href=\"../index.html\">index</a></nav><h1>{html.esc(rel)} {html.status(status)}</h1>"
            + (f"<p class=\"fail\">{html.esc(note)}</p>" if note else ""))
    if status == "fail":
        page = f"{head}<h2>QA checks (failed first)</h2>{table}{body}"
    else:
        page = f"{head}{body}<h2>QA checks</h2>{table}"
    (w.root / item["page"]).write_text(html.page(f"{rel} — {status.upper()}", page, "../style.css"))


def _safe(fn):
    try:
        return fn()
    except (RowbeamError, OSError, KeyError, TypeError):
        return None


def _quarantine_entry(root: Path, rel: str) -> dict:
    """A quarantined folder and why: the failing checks of the qa_report.json it keeps."""
    reasons, checks = [], []
    try:
        q = load_json(root / rel / "qa_report.json", "qa_report.json")
        checks = q.get("checks") or [c for e in q.get("events", []) for c in e.get("checks", [])]
        checks = [c for c in checks if isinstance(c, dict)]
        reasons = [f"{c['check']}: {c['message']}" for c in checks if c.get("status") == "fail"]
    except (RowbeamError, OSError, AttributeError, KeyError, TypeError) as exc:
        reasons = [f"no readable qa_report.json ({exc})"]
    return {"folder": rel, "reasons": reasons or ["no failing check recorded"], "checks": checks}


def _class_names(manifest: dict) -> dict:
    names = {c["id"]: c["name"] for c in manifest.get("ontology", {}).get("classes", [])}
    names[0], names[0xFFFFFFFF] = "background", "void"
    return names


def _finite_on(mask, images) -> bool:
    """Whether every image (H, W) or (H, W, C) is finite at every `mask` pixel, from its sum over the mask (a sum of
    finite values that overflows also gives False, which only sends the caller down its general path)."""
    return all(bool(np.isfinite(np.sum(x, where=mask if x.ndim == 2 else mask[..., None]))) for x in images)


def _radius(K, W, H, u=None, v=None) -> np.ndarray:
    """Distance of pixel centres (u, v) from the principal point, as a fraction of the image half diagonal
    (default: every pixel centre, (H, W))."""
    if u is None:
        u, v = pixel_grid(W, H)
    return np.hypot(u - K[0, 2], v - K[1, 2]) / (0.5 * np.hypot(W, H))


def _scalar_block(w, rel, name, values, valid, unit, caption, images=None, valid_sorted=None):
    """Linear and log figures of a scalar image (made on the Writer's threads; the log image is made here and goes
    into `images[name]` when given). The 1..99 % range is computed once when every valid value is positive (the log
    range is then the same percentiles). valid_sorted: the caller's np.sort(values[valid]), when it has it (else
    the percentiles select their order statistics: colour.order_statistics)."""
    out = []
    v = np.asarray(values)
    lo = hi = None
    vv, is_sorted = (v[valid], False) if valid_sorted is None else (valid_sorted, True)
    if vv.size and (vv[0] > 0 and vv[-1] > 0 if is_sorted else np.all(vv > 0)):   # every valid value is positive
        lo, hi = colour.robust_range(vv, is_sorted=is_sorted)                       # (sorted: NaN last)
    for log in (False, True):
        leg = overlays.scalar_legend(vv, None, log, lo, hi, is_sorted=is_sorted)  # = scalar()'s of values[valid]
        def make(log=log, leg=leg):                                              # = scalar(...)[0] as Indexed
            return colour.colour_indices(values, leg["lo"], leg["hi"], log, valid)
        img = make
        if log and images is not None:
            img = make()
            images[name] = img.rgb()
        fig = w.image(f"{rel}/{name}{'_log' if log else ''}", img, shape=v.shape[:2])
        bar = w.image(f"{rel}/{name}{'_log' if log else ''}_bar", colour.colour_bar())
        out.append(html.figure(fig, f"{caption}{' (log)' if log else ''}", html.colour_bar(bar, leg, unit)))
    return "".join(out)


def _passed(checks, name: str) -> bool:
    """Whether the checker's check `name` is among `checks` and passed."""
    return any(c.get("check") == name and c.get("status") == "pass" for c in checks)


def _id_counts(ids) -> tuple[np.ndarray, np.ndarray]:
    """(ids present ascending, pixel count of each) of an unsigned id image: np.unique(ids, return_counts=True), by
    one bincount when every id is below 2**20 (render indices, class ids; a sort only for larger ones, e.g. void)."""
    flat = np.asarray(ids).ravel()
    if flat.size and int(flat.max()) < 1 << 20:
        counts = np.bincount(flat)
        present = np.flatnonzero(counts)
        return present, counts[present]
    return np.unique(flat, return_counts=True)


def _class_counts(present, counts, objects: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """_id_counts(semantic_id) from _id_counts(instance_id) = (present, counts) when semantic_id is the class of the
    instance at every pixel (the checker's semantic_matches_instance: the object table's class, background for
    BACKGROUND_ID, VOID_ID for an index not in the table)."""
    by_index = {int(o["render_index"]): int(o["class_id"]) for o in objects}
    classes = np.array([by_index.get(int(i), BACKGROUND_ID if i == BACKGROUND_ID else VOID_ID) for i in present],
                       dtype=np.int64)
    ids, where = np.unique(classes, return_inverse=True)
    sums = np.zeros(len(ids), dtype=np.int64)
    np.add.at(sums, where, counts)
    return ids, sums


def _instance_legend(present, counts, objects: list[dict], class_names: dict) -> str:
    """The instance_id image's legend from its _id_counts (present, counts): every render index seen in the image,
    most pixels first, with the colour the image gives it (colour.id_colours of its stable 64-bit id; background
    black), the id, object name, class and pixel count; folded like the object table when longer than
    OPEN_TABLE_ROWS."""
    by_index = {int(o["render_index"]): o for o in objects}
    stable = np.array([int(by_index[int(i)]["id"]) if int(i) in by_index else 0 for i in present], dtype=np.uint64)
    colours = colour.id_colours(stable)
    rows = []
    for k in np.argsort(-counts, kind="stable"):
        i, o = int(present[k]), by_index.get(int(present[k]))
        name = "background" if i == 0 else (o["name"] if o else "? (not in the object table)")
        cls = class_names.get(int(o["class_id"]), o.get("class_tag", "?")) if o else ""
        rows.append([html.swatch(colours[k]), i, int(stable[k]) if o else "", html.esc(name), html.esc(str(cls)),
                     int(counts[k])])
    table = html.table(["", "render index", "instance id (stable)", "object", "class", "pixels"], rows)
    shown = " open" if len(rows) <= OPEN_TABLE_ROWS else ""
    return f"<details{shown}><summary>instance legend: {len(rows)} in the image</summary>{table}</details>"


def _camera_page(ev: Event, w: Writer, rel: str, res: Residuals, stats, lidars, verify=False,
                 checked_valid=False, checked_ids=False, checked=None) -> str:
    """checked_valid: the checker's validity_consistency passed on these arrays (every float label finite exactly
    where valid, camera_z and range positive there), so the page need not test it again. checked_ids: its
    semantic_matches_instance passed (the class legend's counts follow from the instance counts). checked: the checker's
    decoded arrays of this event (rowbeam.bundle.arrays.DecodedArrays, sha256 verified), read as they are: the normals
    stay channel planes unless an overlay reads them whole (LiDAR pairing)."""
    m = ev.manifest
    a = checked if checked is not None and all(n in checked for n in ev.names) else ev.arrays(verify=verify)
    K = np.array(m["calibration"]["K"], dtype=np.float64)
    H, W = a["camera_z"].shape
    valid = a["valid"] == 1
    names = _class_names(m)
    parts = [f"<p>camera event, {W}×{H} px, reference time {m['event']['reference_time_ns']} ns, "
             f"sample {html.esc(m['sample_id'])}</p><h2>Images</h2>"]
    if "rgb" in a:
        gain = auto_exposure(a["rgb"])
        parts.append(html.figure(w.image(f"{rel}/rgb", colour.srgb(a["rgb"], gain)),
                                 f"rgb (scene linear × {gain:.3g} → sRGB, clipped)"))
    else:
        parts.append("<p>no rgb exported (rgb_samples 0)</p>")
    logs = {} if ev.object_labels or lidars else None     # the camera_z (log) image, when a backdrop needs it
    z_valid = a["camera_z"][valid]                 # its percentiles (colour range) and the depth statistics:
    z_valid.sort()                                 # (a fresh array: sorted in place)
    parts.append(_scalar_block(w, rel, "camera_z", a["camera_z"], valid, "camera_z [m]", "camera_z", logs, z_valid))
    parts.append(_scalar_block(w, rel, "range", a["range"], valid, "range [m]", "range"))
    both = "normal_geometric" in a and "normal_shading" in a      # often the same image (flat shading): encoded once
    for n in ("normal_geometric", "normal_shading"):       # images made on the Writer's threads from `a`
        if n in a:
            planes = channel_planes(a, n)                 # (taken here: the worker reads only these arrays)
            img = lambda p=planes: colour.normal_colour(p, valid if checked_valid else None)  # noqa: E731
            pair = {"keep": both} if n == "normal_geometric" else {"same_as": f"{rel}/normal_geometric" if both else None}
            if both and checked_valid and n == "normal_shading":   # both finite exactly where valid: compare the bytes
                g = channel_planes(a, "normal_geometric")          # where the floats differ, before making the image
                pair["same"] = lambda p=planes, g=g: colour.same_normal_colours(p, g, valid)
            parts.append(html.figure(w.image(f"{rel}/{n}", img, shape=(H, W), **pair),
                                     f"{n} (camera frame: RGB = (n+1)/2, x right red, y down green, z forward blue)"))
    parts.append(html.figure(w.image(f"{rel}/instance_id", lambda: overlays.id_indexed(a["instance_id"], m["objects"]),
                                     shape=(H, W)), "instance_id (colour of the stable 64-bit id)"))
    instances = _id_counts(a["instance_id"])
    parts.append(_instance_legend(*instances, m["objects"], names))
    parts.append(html.figure(w.image(f"{rel}/semantic_id", lambda: overlays.semantic_indexed(a["semantic_id"]),
                                     shape=(H, W)), "semantic_id"))
    present, counts = _class_counts(*instances, m["objects"]) if checked_ids else _id_counts(a["semantic_id"])
    parts.append("<h3>Class legend</h3>" + html.table(
        ["", "semantic id", "class", "pixels"],
        [[html.swatch(overlays.semantic_colour(int(c))), int(c), html.esc(names.get(int(c), "?")), int(n)]
         for c, n in zip(present, counts, strict=True)]))
    for c, n in zip(present, counts, strict=True):             # share of all pixels, background included
        label = names.get(int(c), str(int(c)))
        stats.class_pixels[label] = stats.class_pixels.get(label, 0) + int(n)
    ev_t = m["event"]
    band, leg = overlays.timing_band(a["row_time_ns"], int(ev_t["exposure_ns"]))
    parts.append("<h2>Rolling-shutter timing</h2>" + html.figure(
        w.image(f"{rel}/timing_band", band),
        f"row time vs row (row v of this image = image row v; {ev_t['readout_direction']}): dark = row reference "
        f"time, light = exposure window of {ev_t['exposure_ns'] / 1e6:g} ms; x from {leg['t0_ns']} ns (left) to "
        f"{leg['t1_ns']} ns (right), readout {ev_t['readout_ns'] / 1e6:g} ms"))
    base = None                                     # the grey backdrop, only for overlays drawn on it
    if ev.object_labels or lidars:
        base = overlays.backdrop(a) if "rgb" in a else overlays.greyscale(logs["camera_z"])   # = backdrop(a)
    if ev.object_labels:
        img, rows = overlays.object_overlay(ev, a, base)
        parts.append("<h2>Objects</h2>" + html.figure(w.image(f"{rel}/objects", img),
                     "modal contour + box (cyan), amodal contour + clipped box (yellow), axes at "
                     "T_camera_object_reference (x red, y green, z blue)"))
        table = html.table(["id", "name", "class", "px visible", "px all", "visib_fract", "truncation", "occlusion"],
                           [[html.fmt(r[k]) for k in ("id", "name", "class", "px_count_visib", "px_count_all",
                                                       "visib_fract", "truncation_fraction", "occlusion_fraction")]
                            for r in rows])
        shown = " open" if len(rows) <= OPEN_TABLE_ROWS else ""   # a long table: folded, the overlays below stay near
        parts.append(f"<details{shown}><summary>object table: {len(rows)} objects (pixel counts, visib_fract, "
                     f"truncation, occlusion)</summary>{table}</details>")
        stats.visib += [r["visib_fract"] for r in rows if r["visib_fract"] is not None]
        for o in ev.object_labels:
            sha = (o.get("asset") or {}).get("sha256")
            if sha:
                stats.assets[sha[:12]] = stats.assets.get(sha[:12], 0) + 1
    for o in m["objects"]:
        stats.objects[(o.get("class_tag"), str(o["id"]))] = o.get("motion")
    # residuals of the camera contracts at the valid pixels: computed at the subset Residuals keeps of them
    # (stats.sample_pixels) when the inputs are finite there (so is every residual), else at every valid pixel
    normals = [n for n in ("normal_geometric", "normal_shading") if n in a]
    if checked_valid or _finite_on(valid, [a["camera_z"], a["range"], *(a[n] for n in normals)]):
        pix, count = sample_pixels(valid)
    else:
        pix, count = np.flatnonzero(valid), None
    v, u = (x.astype(np.float64) for x in np.divmod(pix, W))     # pixel centres (camera_model.pixel_grid)
    res.class_names.update(names)
    z = a["camera_z"].ravel()[pix].astype(np.float64)
    lens = manifest_lens(m["calibration"])          # a distorted camera: rays through the lens (rowbeam.model.lens)
    d = ray_directions(K, u, v) if lens is None else image_rays(lens, W, H).reshape(-1, 3)[pix]
    keys = {"distance": z, "radius": _radius(K, W, H, u, v), "klass": a["semantic_id"].ravel()[pix],
            "speed": motion.camera_speeds(ev, a, pix, d)}   # sliced by class id; res.class_names names them
    factor = norm(d)             # range / camera_z on each pixel-centre ray
    res.add("camera.z_range_m", "m", np.abs(a["range"].ravel()[pix] - z * factor),
            "|range − camera_z·|ray|| per valid pixel (ray = (x_n, y_n, 1) through the pixel centre)", **keys, count=count)
    for n in normals:
        nv = [p.reshape(-1)[pix].astype(np.float64) for p in channel_planes(a, n)]    # at the sampled pixels (x, y, z)
        res.add(f"camera.{n}_unit", "1", np.abs(norm(nv) - 1), f"| |{n}| - 1 | per valid pixel", **keys, count=count)
        if n == "normal_geometric":
            facing = nv[0] * (d[:, 0] / factor)     # n_g · d / |d|, summed x, y, z in that order (as (n * d).sum(-1))
            for c in (1, 2):
                facing += nv[c] * (d[:, c] / factor)
            res.add("camera.geometric_facing", "1", np.maximum(0.0, facing, out=facing),
                    "max(0, n_g · ray direction): > 0 means a geometric normal facing away from the camera", **keys,
                    count=count)
    stats.camera_valid += [int(np.count_nonzero(valid)), valid.size]
    stats.depth.append(z_valid)                    # (ascending, its own dtype: the statistics read it as float64)
    # LiDAR returns in the time-matched camera rows
    for lid in lidars:
        try:
            la = {"points": lid.array("points")}
            pairs = overlays.lidar_in_camera(lid.manifest, la, m, a, base)
        except (RowbeamError, KeyError, ValueError) as exc:
            parts.append(f"<p class=\"warn\">LiDAR {html.esc(lid.path.name)}: {html.esc(exc)}</p>")
            continue
        if pairs is None:
            continue
        bar1 = w.image(f"{rel}/lidar_{lid.sensor}_{lid.index}_res_bar", colour.colour_bar())
        bar2 = w.image(f"{rel}/lidar_{lid.sensor}_{lid.index}_skew_bar", colour.colour_bar())
        parts.append(f"<h2>LiDAR {html.esc(lid.sensor)}/{lid.index:06d} in time-matched camera rows</h2>"
                     f"<p>{pairs['pairs']} static returns paired (of {pairs['inside']} projected inside the image; "
                     "grey = inside but not paired: other surface, edge or skew)</p>")
        parts.append(html.figure(w.image(f"{rel}/lidar_{lid.sensor}_{lid.index}_residual", pairs["residual"]),
                                 "|camera_z − return's z| at the matched row",
                                 html.colour_bar(bar1, pairs["residual_legend"], "m")))
        parts.append(html.figure(w.image(f"{rel}/lidar_{lid.sensor}_{lid.index}_skew", pairs["skew"]),
                                 "|row time − return time|", html.colour_bar(bar2, pairs["skew_legend"], "ns")))
        p = pairs["pairs_data"]
        ok = p["paired"]
        if ok.any():
            r, c = np.clip(np.rint(p["uv"][ok, 1]).astype(int), 0, H - 1), np.clip(np.rint(p["uv"][ok, 0]).astype(int), 0, W - 1)
            pk = {"distance": p["z"][ok], "radius": _radius(K, W, H, c, r), "klass": a["semantic_id"][r, c],
                  "speed": motion.beam_speeds(lid, p["points"][ok])}
            res.add("lidar_camera.z_residual_m", "m", np.abs(p["residual_m"][ok]),
                    "|camera_z (1/z-interpolated) − LiDAR return z| at the time-matched row", **pk)
            res.add("lidar_camera.skew_ns", "ns", p["skew_ns"][ok], "|row time − return time| of paired returns", **pk)
    return "".join(parts)


def auto_exposure(rgb, cap: float = 64.0) -> float:
    """Gain that maps the 99th percentile of the finite scene-linear luminance to 1 (at least 1, at most cap)."""
    lum = colour.luminance(np.nan_to_num(np.asarray(rgb, dtype=np.float64)))
    p = float(np.percentile(lum, 99)) if lum.size else 1.0
    return float(np.clip(1.0 / p, 1.0, cap)) if p > 0 else 1.0


def _lidar_page(ev: Event, w: Writer, rel: str, res: Residuals, stats, verify=False) -> str:
    m = ev.manifest
    a = ev.arrays(verify=verify)
    beams = m["calibration"]["beams"]["channels"]
    names = _class_names(m)
    F, C = a["range"].shape
    parts = [f"<p>LiDAR sweep, {F} firings × {C} channels, sweep start {m['event']['sweep_start_ns']} ns, "
             f"reference time {m['event']['reference_time_ns']} ns</p>"]
    img, leg = overlays.lidar_range_image(a, [b["elevation_deg"] for b in beams])
    bar = w.image(f"{rel}/range_bar", colour.colour_bar())
    parts.append(html.figure(w.image(f"{rel}/range_image", img),
                             "range image: rows = channels by elevation (top = highest), columns = firings",
                             html.colour_bar(bar, leg, "range [m]")))
    pts = a["points"]
    xy = np.stack([pts["x"], pts["y"]], -1)
    dt = (pts["t_ns"] - int(m["event"]["sweep_start_ns"])).astype(np.float64)
    tlo, thi = 0.0, max(float(dt.max(initial=0)), 1.0)
    cols = colour.colourise(dt, tlo, thi)
    sets, cols_sets, captions = [xy], [cols], ["top-down, LiDAR frame at each point's own time (raw), coloured by time offset"]
    if "points_motion_compensated" in a:
        mc = a["points_motion_compensated"]
        sets.append(mc[:, :2])
        cols_sets.append(cols)
        captions.append("top-down, motion compensated to the reference time, coloured by time offset")
    imgs, extent = overlays.top_down(sets, cols_sets)
    tbar = w.image(f"{rel}/time_bar", colour.colour_bar())
    for i, (im, cap) in enumerate(zip(imgs, captions, strict=True)):
        parts.append(html.figure(w.image(f"{rel}/top_down_{i}", im), f"{cap}; x forward = up, y left = left, "
                                 f"half width {extent:.3g} m", html.colour_bar(tbar, {"lo": tlo, "hi": thi, "log": False},
                                                                                "time offset [ns]")))
    if len(sets) == 2:
        diff = np.linalg.norm(np.stack([pts["x"], pts["y"], pts["z"]], -1) - a["points_motion_compensated"], axis=-1)
        parts.append(f"<p>motion compensation moves points by {np.quantile(diff, 0.5) if diff.size else 0:.3g} m "
                     f"(median), {diff.max(initial=0):.3g} m (max)</p>")
    valid = a["valid"] == 1
    k, c = np.nonzero(valid)
    if k.size == len(pts):
        rng = a["range"][k, c].astype(np.float64)
        klass = pts["semantic_id"]
        res.class_names.update(names)
        xyz = np.stack([pts["x"], pts["y"], pts["z"]], -1)
        res.add("lidar.range_vs_point_m", "m", np.abs(np.linalg.norm(xyz, axis=-1) - rng),
                "|range − |point xyz|| (LiDAR frame at the beam's time)", distance=rng, klass=klass,
                speed=motion.beam_speeds(ev, pts))
    stats.lidar_valid += [int(valid.sum()), valid.size]
    return "".join(parts)


def _flow_page(fl: Flow, w: Writer, rel: str, res: Residuals, stats, verify=False) -> str:
    m = fl.manifest
    a = fl.arrays(verify=verify)
    src, dst = fl.endpoint("source", verify=verify), fl.endpoint("destination", verify=verify)
    sa = src.arrays(["camera_z", "instance_id", "normal_geometric", "semantic_id", "valid"]
                    + (["rgb"] if "rgb" in src.names else []), verify=verify)
    da = dst.arrays(["instance_id", "normal_geometric"] + (["rgb"] if "rgb" in dst.names else []), verify=verify)
    f = a["flow_forward"]
    H, W = f.shape[:2]
    vis = a["flow_forward_dest_visible"] == 1
    mag = np.hypot(f[..., 0], f[..., 1])
    maxmag = float(np.nanmax(np.where(np.isfinite(mag), mag, np.nan))) if np.isfinite(mag).any() else 1.0
    parts = [f"<p>flow {html.esc(m['flow_id'])}: source {html.esc(m['endpoints']['source']['manifest'])}, "
             f"destination {html.esc(m['endpoints']['destination']['manifest'])}</p>"]
    wheel = w.image(f"{rel}/wheel", colour.flow_wheel_legend())
    parts.append(html.figure(w.image(f"{rel}/flow_forward", colour.flow_colour(f, maxmag)),
                             f"flow_forward (Middlebury wheel, saturation = |flow| / {maxmag:.3g} px; px, u right, v down)",
                             f"<div><img src=\"{html.esc(wheel['full'])}\" width=\"96\" height=\"96\" alt=\"flow wheel\"></div>"))
    lv = overlays.flag_levels(a, "forward")
    legend = "".join(f"<div>{html.swatch(c)}{html.esc(n)}: {int((lv == i).sum())} px</div>"
                     for i, (n, c) in enumerate(overlays.FLAG_LEVELS))
    parts.append(html.figure(w.image(f"{rel}/flags_forward", overlays.flag_image(lv)),
                             "flow_forward flags (nested: visible ⇒ in bounds ⇒ defined ⇒ source valid)", legend))
    K = np.array(src.manifest["calibration"]["K"], dtype=np.float64)
    radius = _radius(K, W, H)
    names = _class_names(src.manifest)
    klass = sa["semantic_id"]
    res.class_names.update(names)
    dt_s = (m["endpoints"]["destination"]["reference_time_ns"] - m["endpoints"]["source"]["reference_time_ns"]) / 1e9
    speed = np.linalg.norm(a["scene_flow_world"].astype(np.float64), axis=-1) / abs(dt_s) if dt_s else None
    if "rgb" in sa and "rgb" in da:
        r = overlays.warp_residual(sa["rgb"], da["rgb"], f, vis)
        img, leg = overlays.scalar(r, vis)
        bar = w.image(f"{rel}/warp_bar", colour.colour_bar())
        parts.append(html.figure(w.image(f"{rel}/warp_residual", img),
                                 "forward-warp check: |source rgb − destination rgb warped back by flow_forward|, "
                                 "dest_visible pixels only (others grey)", html.colour_bar(bar, leg, "scene linear")))
        ok = vis & np.isfinite(r)
        res.add("flow.warp_rgb", "scene_linear", r[ok], "|source rgb − destination rgb at p + flow| (dest_visible)",
                distance=sa["camera_z"][ok], radius=radius[ok], speed=speed[ok] if speed is not None else None,
                klass=klass[ok])
    else:
        parts.append("<p>forward-warp check needs rgb in both events (not exported)</p>")
    err, px = cycle_residuals(a, {"instance_id": sa["instance_id"], "normal_geometric": sa["normal_geometric"]},
                              {"instance_id": da["instance_id"], "normal_geometric": da["normal_geometric"]})
    if err.size:
        res.add("flow.cycle_px", "px", err, "forward + backward at the landing point − start (mutually visible)",
                distance=sa["camera_z"][px], radius=radius[px], speed=speed[px] if speed is not None else None,
                klass=klass[px])
    fin = np.isfinite(mag)
    stats.flow_mag.append(mag[fin])
    return "".join(parts)


def _stat_quantiles(v, is_sorted: bool = False) -> dict:
    """{p1, p50, p99, max} of v (None when empty): np.quantile per quantile in v's own precision, or with is_sorted
    (v ascending float64) the same numbers read off v (stats.sorted_quantiles)."""
    names, qs = ("p1", "p50", "p99", "max"), (0.01, 0.5, 0.99, 1.0)
    if not v.size:
        return dict.fromkeys(names)
    values = sorted_quantiles(v, qs) if is_sorted else [np.quantile(v, q) for q in qs]
    return {k: float(x) for k, x in zip(names, values, strict=True)}


def _ascending_float64(chunks) -> np.ndarray:
    """One ascending float64 array of the values of ascending arrays (empty when none)."""
    if not chunks:
        return np.zeros(0)
    return (chunks[0] if len(chunks) == 1 else np.sort(np.concatenate(chunks))).astype(np.float64)


class _Stats:
    def __init__(self):
        self.class_pixels, self.assets, self.objects = {}, {}, {}
        self.visib, self.depth, self.flow_mag = [], [], []
        self.camera_valid, self.lidar_valid = [], []
        self.quarantine, self.splits = [], []
        self.counts = {"events": 0, "flows": 0, "quarantined": 0}

    def summary(self, bundle_docs) -> dict:
        total = sum(self.class_pixels.values()) or 1
        cv, lv = np.array(self.camera_valid).reshape(-1, 2), np.array(self.lidar_valid).reshape(-1, 2)
        depth = _ascending_float64(self.depth)     # camera_z of every valid pixel: its quantiles and histogram
        fm = np.concatenate(self.flow_mag) if self.flow_mag else np.zeros(0)
        classes, motion = {}, {}
        for (tag, _), mo in self.objects.items():
            classes[tag] = classes.get(tag, 0) + 1
            motion[mo] = motion.get(mo, 0) + 1
        splits = [s for s in self.splits if s]
        return {
            "counts": dict(self.counts),
            "class_pixel_share": {k: v / total for k, v in sorted(self.class_pixels.items())},
            "class_object_counts": dict(sorted((str(k), v) for k, v in classes.items())),
            "object_motion_counts": dict(sorted((str(k), v) for k, v in motion.items())),
            "asset_object_counts": dict(sorted(self.assets.items(), key=lambda kv: -kv[1])),
            "mean_visib_fract": float(np.mean(self.visib)) if self.visib else None,
            "visib_fract_histogram": np.histogram(self.visib, bins=10, range=(0, 1))[0].tolist() if self.visib else [],
            "camera_z_m": _stat_quantiles(depth, is_sorted=True),
            "flow_magnitude_px": _stat_quantiles(fm),
            "camera_invalid_rate": float(1 - cv[:, 0].sum() / cv[:, 1].sum()) if cv.size else None,
            "lidar_no_return_rate": float(1 - lv[:, 0].sum() / lv[:, 1].sum()) if lv.size else None,
            "quarantine_reasons": self.quarantine,
            "splits": {s: splits.count(s) for s in sorted(set(splits))} if splits else "no split declared",
            "depth_histogram": histogram(depth, is_sorted=True),
        }


def _write_index(staging: Path, doc: dict) -> None:
    parts = [f"<h1>rowbeam visual QA report {html.status(doc['status'])}</h1><p>source {html.esc(doc['source'])}; "
             f"built in {doc.get('seconds', 0):.2f} s; machine-readable: <a href=\"{REPORT_JSON}\">{REPORT_JSON}</a></p>"]
    if "drift" in doc:
        d = doc["drift"]
        rows = [[html.esc(i["what"]), html.fmt(i["baseline"]), html.fmt(i["current"]), html.fmt(i["limit"]),
                 html.status("fail" if i["flagged"] else "pass")] for i in sorted(d["items"], key=lambda i: not i["flagged"])]
        parts.append(f"<h2>Drift against baseline {html.esc(d['baseline'])}: {html.esc(d['status'])} "
                     f"({d['flagged']} flagged)</h2>" + html.table(["value", "baseline", "current", "limit", ""], rows))
    for b in doc["bundles"]:
        s = b["qa_summary"]
        parts.append(f"<h2>Bundle {html.esc(b['bundle'])} {html.status(b['qa_status'])}</h2><p>{s['events']} folders, "
                     f"{s['failed_events']} failed, {s['failed_checks']} failed checks, {s['warnings']} warnings, "
                     f"{len(b['quarantine'])} quarantined</p>")
        if b["bundle_checks"]:
            parts.append(html.table(["bundle check", "status", "message"], [[html.esc(c["check"]), html.status(c["status"]),
                                    html.esc(c["message"])] for c in b["bundle_checks"]]))
        if b["quarantine"]:
            parts.append("<h3>Quarantined (held back at export; not published)</h3>" + html.table(
                ["folder", "kind", "reasons"],
                [[f"<a href=\"{html.esc(q['page'])}\">{html.esc(q['folder'])}</a>" if q.get("page") else
                  html.esc(q["folder"]), html.esc(q.get("kind") or "–"), "<br>".join(html.esc(r) for r in q["reasons"])]
                 for q in b["quarantine"]]))
        rows = []
        for it in b["items"]:
            fails = "<br>".join(html.esc(f"{c['check']}: {c['message']}") for c in it["failed_checks"][:5])
            worst = "<br>".join(f"{html.esc(k)} = {v:.3g}" for k, v in sorted(it["worst"].items())[:6])
            rows.append([f"<a href=\"{html.esc(it['page'])}\">{html.esc(it['folder'])}</a>", html.esc(it["kind"]),
                         html.status(it["qa_status"]), fails or "–", worst or "–"])
        parts.append("<h3>Published folders (failures first)</h3>"
                     + html.table(["folder", "kind", "QA", "failed checks (first 5)", "worst values"], rows))
    parts.append("<h2>Residual distributions</h2>" + html.table(
        ["residual", "unit", "samples", "p50", "p90", "p99", "max"],
        [[html.esc(n), html.esc(r["unit"]), r["count"], *(html.fmt(r["quantiles"][k]) for k in ("p50", "p90", "p99", "max"))]
         for n, r in doc["residuals"].items()]))
    for name, r in doc["residuals"].items():
        qs = r["quantiles"]
        parts.append(f"<h3>{html.esc(name)} [{html.esc(r['unit'])}]</h3><p>{html.esc(r['meaning'])}; {r['count']} samples"
                     f" ({r['sampled']} kept)</p>" + html.table(["p50", "p90", "p99", "max"], [[html.fmt(qs[k]) for k in
                                                                                            ("p50", "p90", "p99", "max")]])
                     + html.histogram_svg(r["histogram"], r["unit"]))
        for kind, bins in r["slices"].items():
            parts.append(f"<details><summary>by {html.esc(kind)}</summary>" + html.table(
                [kind, "count", "p50", "p90", "p99", "max"],
                [[html.esc(x["bin"]), x["count"], *(html.fmt(x["quantiles"][k]) for k in ("p50", "p90", "p99", "max"))]
                 for x in bins]) + "</details>")
    st = doc["statistics"]
    rows = [[html.esc(k), html.esc(json.dumps(v) if not isinstance(v, (int, float, str)) or v is None else v)]
            for k, v in st.items() if k not in ("depth_histogram", "quarantine_reasons")]
    parts.append("<h2>Dataset statistics</h2>" + html.table(["statistic", "value"], rows)
                 + "<h3>camera_z over valid pixels</h3>" + html.histogram_svg(st["depth_histogram"], "m"))
    (staging / "index.html").write_text(html.page("rowbeam visual QA report", "".join(parts), "style.css"))
