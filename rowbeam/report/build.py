"""`rowbeam report BUNDLE_OR_DATASET --out DIR [--baseline DIR]`: the visual QA report.

Runs the checker (rowbeam.check.runner.check_bundle) on each bundle, then writes, into a staging sibling of DIR
that is renamed into place when complete (nothing half-written): index.html (QA pass/fail per event, flow
and sweep, failures first, worst residuals, quarantine with reasons, residual distributions, dataset
statistics, baseline drift), one page per camera event, flow and LiDAR sweep with its overlays, img/
(full-resolution PNGs and thumbnails) and report.json (rowbeam/report@1). A DATASET is a folder whose
sub-folders are bundles. A bundle that fails its checks still gets a report.
"""
from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from rowbeam.bundle import ownership
from rowbeam.bundle.reader import Bundle, Event, Flow
from rowbeam.check.runner import check_bundle
from rowbeam.util.errors import RowbeamError, UnusableInput
from rowbeam.bundle.files import atomic_write_json, finite_json, fsync_path, load_json, resolve_inside
from rowbeam.check.flow_checks import cycle_residuals
from rowbeam.util.worker_threads import WORKERS
from rowbeam.sensors import find_sensor_type, load_layer
from rowbeam.report import colour, html, overlays
from rowbeam.report.png import Indexed, encode_png, thumbnail, thumbnail_factor
from rowbeam.report.page_parts import OPEN_TABLE_ROWS, PageContext, _class_names, _finite_on, _radius  # noqa: F401
from rowbeam.report.page_parts import _class_counts, _id_counts  # noqa: F401  (tests read them here)
from rowbeam.report.stats import Residuals, drift, histogram, sorted_quantiles
from rowbeam.report.time_table import time_table

SCHEMA = "rowbeam/report@1"
REPORT_JSON = "report.json"
THUMB_SIDE = 320
MIN_DISPLAY_WIDTH = 240

load_layer("report")    # each sensor type's page (its "report_page" hook)


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
    ownership.check_replaceable(out, "--out")     # only an earlier report holding nothing but rowbeam's files
    parent = out.absolute().parent
    if not parent.is_dir():
        raise RowbeamError(f"--out {out}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise RowbeamError(f"--out {out}: folder {parent} is not writable")


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
    for infix in (".report-staging-", ".report-old-"):
        ownership.reclaim_siblings(out, infix)          # what killed report runs left
    staging = out.absolute().parent / f".{out.name}.report-staging-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        ownership.make_owned_dir(staging, "report-staging")
        return _build_staged(bundles, source, out, staging, progress,
                             {"t0": t0, "baseline": baseline, "base_doc": base_doc})
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        where = exc.filename if exc.filename is not None else out
        raise RowbeamError(f"{where}: cannot write ({exc.strerror or exc}); nothing written to --out {out}") from None


def _build_staged(bundles, source, out, staging, progress, run: dict) -> dict:
    """Build the report in `staging` and publish it as `out`; on any failure `staging` is removed.
    run: t0 (perf_counter s at the start), baseline (path or None) and base_doc (its report.json)."""
    try:
        (staging / "pages").mkdir()
        doc = _build(bundles, source, staging, progress)
        doc["seconds"] = round(time.perf_counter() - run["t0"], 3)
        if run["base_doc"] is not None:
            doc["drift"] = {"baseline": str(run["baseline"]), **drift(doc, run["base_doc"])}
        doc = finite_json(doc)                      # any NaN / inf left becomes null: report.json stays JSON
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
    """Rename the finished report into place; an earlier report holding only rowbeam's files (or an empty
    folder) is replaced. The marker lists the report's files, so a later run can prove them rowbeam's."""
    ownership.mark(staging, "report", files=ownership.listing(staging))
    fsync_path(staging)
    ownership.check_replaceable(out, "--out")             # again: files may have been added meanwhile
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
               "status": _overall_status(bundle_docs),
               "bundles": bundle_docs, "residuals": res.summary(), "statistics": stats.summary(bundle_docs)}
    return doc


def _overall_status(bundle_docs) -> str:
    """fail when a bundle failed QA, any listed folder failed or was not checked, or a bundle holds hidden
    folders among its events/flows (never checked); else pass."""
    bad = any(d["qa_status"] == "fail" or d.get("unchecked") or any(it["qa_status"] != "pass" for it in d["items"])
              for d in bundle_docs)
    return "fail" if bad else "pass"


def _hidden_data_folders(root: Path) -> list[str]:
    """Hidden entries among events/ and flows/ folders (`events/..camera`, `.000001.old-PID`): never checked."""
    found = []
    for top in ("events", "flows"):
        for d in ([root / top] + sorted(p for p in (root / top).glob("*") if p.is_dir()) if (root / top).is_dir()
                  else []):
            found += [p.relative_to(root).as_posix() for p in sorted(d.iterdir()) if p.name.startswith(".")]
    return found


def _qa_by_folder(qa: dict) -> dict:
    return {str(Path(e["manifest"]).parent): e for e in qa["events"]}


def _report_bundle(root: Path, key: str, qa: dict, w: Writer, res: Residuals, stats, progress, kept=None) -> dict:
    bundle = Bundle.open(root)
    bundle.preloaded.update(kept or {})
    by_folder = _qa_by_folder(qa)
    events = list(bundle.events())
    flows = list(bundle.flows())
    ctx = {"events": [(e, find_sensor_type(_safe(lambda e=e: e.sensor_type))) for e in events],
           "checked": bundle.preloaded}
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
    unchecked = _hidden_data_folders(root)
    for q in quarantine:                    # held back at export: the same overlays, failed checks first
        q["kind"] = None
        outside = q.pop("outside", False)
        if outside:                         # a link out of the bundle: listed with why, nothing read there
            q.pop("checks")
            unchecked.append(q["folder"])
            continue
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
            "unchecked": unchecked,
            "bundle_checks": [c for c in qa.get("bundle", {}).get("checks", []) if c["status"] != "pass"],
            "items": items, "quarantine": quarantine}


def _open_quarantined(root: Path, folder: Path):
    """A quarantined event or flow folder as a bundle_reader document (payloads resolve inside the bundle)."""
    if folder.parent.parent.name == "flows":
        return Flow(folder, root)
    return Event(folder, root)


def _item_page(doc, key, rel, status, checks, item, w, res, stats, ctx, verify, note="") -> None:
    """Write the page of one event or flow folder (overlays by its sensor type's "report_page", then its QA checks;
    failed checks first, and on a failing folder before the overlays); sets item kind, page and overlays."""
    name = f"{key}/{rel}".replace("/", "_")
    item["page"] = f"pages/{name}.html"
    page = PageContext(w, f"{key}/{rel}", res, stats, verify, checks, ctx["events"], ctx["checked"])
    try:
        report_page = None if isinstance(doc, Flow) else _report_page(doc.sensor_type)
        if isinstance(doc, Flow):
            item["kind"] = "flow"
            body = _flow_page(doc, w, f"{key}/{rel}", res, stats, verify)
        elif report_page is not None:
            item["kind"] = report_page.kind
            body = report_page.render(doc, page)
        else:
            item["kind"] = "other"
            body = f"<p>{html.esc(doc.sensor_type)} event: no overlays for this sensor type yet (QA below)</p>"
        body += "" if isinstance(doc, Flow) else time_table(doc.manifest)
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


def _report_page(type_name: str):
    """The registered ReportPage of a sensor type, or None (an unknown type, or one without a page)."""
    kind = find_sensor_type(type_name)
    return kind.hook("report_page") if kind is not None else None


def _safe(fn):
    try:
        return fn()
    except (RowbeamError, OSError, KeyError, TypeError):
        return None


def _quarantine_entry(root: Path, rel: str) -> dict:
    """A quarantined folder and why: the failing checks of the qa_report.json it keeps."""
    reasons, checks = [], []
    try:
        folder = resolve_inside(root, rel)
    except RowbeamError as exc:
        return {"folder": rel, "reasons": [f"not read: {exc}"], "checks": [], "outside": True}
    try:
        q = load_json(resolve_inside(folder, "qa_report.json", root), "qa_report.json")
        checks = q.get("checks") or [c for e in q.get("events", []) for c in e.get("checks", [])]
        checks = [c for c in checks if isinstance(c, dict)]
        reasons = [f"{c['check']}: {c['message']}" for c in checks if c.get("status") == "fail"]
    except (RowbeamError, OSError, AttributeError, KeyError, TypeError) as exc:
        reasons = [f"no readable qa_report.json ({exc})"]
    return {"folder": rel, "reasons": reasons or ["no failing check recorded"], "checks": checks}


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
    finite = np.isfinite(v)
    skipped = int(v.size - np.count_nonzero(finite))
    v = v[finite] if skipped else v                   # (keeps an ascending v ascending)
    if not v.size:
        return {**dict.fromkeys(names), **({"non_finite": skipped} if skipped else {})}
    values = sorted_quantiles(v, qs) if is_sorted else [np.quantile(v, q) for q in qs]
    return {**{k: float(x) for k, x in zip(names, values, strict=True)}, **({"non_finite": skipped} if skipped else {})}


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
            "depth_histogram": histogram(depth[np.isfinite(depth)], is_sorted=True),
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
