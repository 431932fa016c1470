"""Parts shared by the report's per-sensor pages (`rowbeam.report.camera_page`, `lidar_page`, `radar_page`): the page
context a sensor type's "report_page" hook receives, legends, scalar image figures and pixel statistics."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from rowbeam.model.camera_model import pixel_grid
from rowbeam.model.ontology import BACKGROUND_ID, VOID_ID
from rowbeam.report import colour, html, overlays

OPEN_TABLE_ROWS = 20            # a camera page's object table longer than this starts folded (<details>)


@dataclass
class PageContext:
    """What a per-event page writes with and into: w (the report's image Writer), rel (the folder's key/path, the
    prefix of its image names), res (Residuals), stats (dataset statistics), verify (re-verify payload sha256),
    checks (the checker's results for this folder), events ([(event, its SensorType or None)] of the bundle),
    checked (the checker's decoded arrays by event folder, or None to read them again)."""

    w: object
    rel: str
    res: object
    stats: object
    verify: bool
    checks: list = field(default_factory=list)
    events: list = field(default_factory=list)
    checked: dict | None = None

    def passed(self, name: str) -> bool:
        """Whether the checker ran check `name` on this folder and it passed (never when re-verifying)."""
        return not self.verify and _passed(self.checks, name)

    def events_of(self, keep) -> list:
        """The bundle's events (bundle order) whose SensorType t has keep(t)."""
        return [e for e, t in self.events if t is not None and keep(t)]


class ReportPage(NamedTuple):
    """A sensor type's report page (its "report_page" hook): kind (the item kind in report.json) and
    render(event, PageContext) -> HTML body."""

    kind: str
    render: Callable


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


def auto_exposure(rgb, cap: float = 64.0) -> float:
    """Gain that maps the 99th percentile of the finite scene-linear luminance to 1 (at least 1, at most cap)."""
    lum = colour.luminance(np.nan_to_num(np.asarray(rgb, dtype=np.float64)))
    p = float(np.percentile(lum, 99)) if lum.size else 1.0
    return float(np.clip(1.0 / p, 1.0, cap)) if p > 0 else 1.0


