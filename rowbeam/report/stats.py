"""Distributions, not means: every QA residual as quantiles and a histogram, sliced by
distance, image radius, motion speed and class; dataset statistics; drift against a baseline report.

A residual is a 1-D array of non-negative values in declared units with, per sample, the slicing keys
that exist for it (distance m, image radius px, speed m/s, class name). Samples are capped per event
(MAX_SAMPLES_PER_EVENT, a fixed-seed subset) so a large bundle stays fast; counts are kept exact.
"""
from __future__ import annotations

import numpy as np

QUANTILES = (0.5, 0.9, 0.99, 1.0)
MAX_SAMPLES_PER_EVENT = 100_000
DISTANCE_BINS_M = (0.0, 5.0, 10.0, 20.0, 40.0, 80.0, np.inf)
RADIUS_BINS = (0.0, 0.25, 0.5, 0.75, np.inf)      # fraction of the half diagonal from the principal point
SPEED_BINS_M_S = (0.0, 0.01, 1.0, 5.0, 15.0, np.inf)
HIST_BINS = 24

# Declared drift thresholds of `--baseline`: a value beyond them is flagged.
DRIFT_THRESHOLDS = {
    "residual_quantile": {"rule": "current > baseline * (1 + rel) + abs, per residual at p50, p90, p99 and max",
                          "rel": 0.5, "abs_by_unit": {"m": 1e-4, "px": 0.01, "ns": 1000.0, "1": 1e-4}},
    "rate": {"rule": "|current - baseline| > abs for invalid rates, visibility and class shares (fractions)",
             "abs": 0.05},
    "count": {"rule": "event, flow and quarantine counts differ", "abs": 0},
}


def _bin_labels(edges, unit: str) -> list[str]:
    return [f"{a:g}–{b:g} {unit}" if np.isfinite(b) else f"≥ {a:g} {unit}" for a, b in zip(edges[:-1], edges[1:], strict=False)]


class Residuals:
    """Collects residual samples by name; summary() -> {name: distribution}."""

    def __init__(self):
        self.data: dict[str, dict] = {}
        self.class_names: dict[int, str] = {}      # semantic id -> class name, for the class slices

    def add(self, name: str, unit: str, values, meaning: str, distance=None, radius=None, speed=None,
            klass=None, count: int | None = None) -> None:
        """Add the finite samples of `values` (with their slicing keys). count: the values are already the subset
        this method would keep (sample_pixels) of `count` finite samples; else every sample is given."""
        v = np.asarray(values, dtype=np.float64).ravel()
        keys = {"distance": distance, "radius": radius, "speed": speed, "class": klass}
        keys = {k: np.asarray(a).ravel() for k, a in keys.items() if a is not None}
        ok = np.isfinite(v)
        if not ok.all():                            # (the usual all-finite case copies nothing)
            v = v[ok]
            keys = {k: a[ok] for k, a in keys.items()}
        total = v.size if count is None else count
        step = sample_step(v.size) if count is None else 1
        if step > 1:                                # a regular subset (every step-th sample): fast, reproducible
            v, keys = v[::step], {k: a[::step] for k, a in keys.items()}
        d = self.data.setdefault(name, {"unit": unit, "meaning": meaning, "values": [], "keys": {}, "count": 0})
        d["values"].append(v)
        d["count"] += total
        for k, a in keys.items():
            d["keys"].setdefault(k, []).append(a)

    def summary(self) -> dict:
        out = {}
        bins = {}                                   # the bins of each key array, computed once: residuals share keys
        for name, d in sorted(self.data.items()):
            v = np.concatenate(d["values"]).astype(np.float64, copy=False) if d["values"] else np.zeros(0)
            s = np.sort(v)                          # every quantile is read off a sorted array (describe)
            entry = {"unit": d["unit"], "meaning": d["meaning"], "count": int(d["count"]), "sampled": int(v.size),
                     **describe(s, is_sorted=True), "histogram": histogram(s, is_sorted=True), "slices": {}}
            for k, parts in d["keys"].items():
                if sum(a.size for a in parts) != v.size:
                    continue
                same = (k, *((a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str) for a in parts))
                if same not in bins:                # (the parts are alive here: equal memory, equal values)
                    bins[same] = key_bins(np.concatenate(parts), k, self.class_names)
                entry["slices"][k] = slice_by(v, bins[same])
            out[name] = entry
        return out


def sample_step(n: int) -> int:
    """Stride of the regular subset Residuals.add keeps of n finite samples (at most MAX_SAMPLES_PER_EVENT)."""
    return -(-n // MAX_SAMPLES_PER_EVENT) if n > MAX_SAMPLES_PER_EVENT else 1


def sample_pixels(mask) -> tuple[np.ndarray, int]:
    """(flat indices, count): the subset Residuals.add keeps of a residual given at every `mask` pixel (row-major),
    and the number of mask pixels. A residual that is finite on the mask, computed at these pixels only and added
    with count=, gives the same distribution as adding it at every mask pixel."""
    idx = np.flatnonzero(mask)
    return idx[::sample_step(idx.size)], int(idx.size)


def describe(v, is_sorted: bool = False) -> dict:
    """{count, quantiles {p50, p90, p99, max}} of finite values (None when empty): np.quantile(v, QUANTILES) (method
    'linear'), read off v sorted (is_sorted: v is already in ascending order)."""
    v = np.asarray(v, dtype=np.float64)
    if v.size == 0:
        return {"quantiles": {f"p{int(q * 100)}" if q < 1 else "max": None for q in QUANTILES}}
    qs = sorted_quantiles(v if is_sorted else np.sort(v), QUANTILES)
    return {"quantiles": {(f"p{int(q * 100)}" if q < 1 else "max"): float(x) for q, x in zip(QUANTILES, qs, strict=True)}}


def sorted_quantiles(s, q) -> np.ndarray:
    """np.quantile(s, q) (method 'linear') of a non-empty ascending float64 array, with numpy's own arithmetic: virtual
    index (n - 1) q, neighbours floor and floor + 1 (clipped to the last), a + (b - a) g, from g = 0.5 on
    b - (b - a)(1 - g); the same float64 numbers without a partition."""
    n = s.size
    virtual = (n - 1) * np.asarray(q, dtype=np.float64)
    below = np.floor(virtual)
    i0 = below.astype(np.intp)
    i1 = np.minimum(i0 + 1, n - 1)
    a, b = s[i0], s[i1]
    g = virtual - below
    diff = b - a
    return np.where(g >= 0.5, b - diff * (1 - g), a + diff * g)


def histogram(v, bins: int = HIST_BINS, is_sorted: bool = False) -> dict:
    """Histogram on log10-spaced edges over the positive values (zeros counted apart): {edges, counts, zeros}.
    is_sorted: v is in ascending order, NaN last (the positive values are then one slice of it and the counts are
    read off it by binary search, = np.histogram's)."""
    v = np.asarray(v, dtype=np.float64)
    if is_sorted:
        first_zero, first_nan = v.searchsorted([0.0, np.nan], "left")
        first_pos = v.searchsorted(0.0, "right")
        pos, zeros = v[first_pos:first_nan], int(first_pos - first_zero)
    else:
        pos = v[v > 0]
        zeros = int(np.count_nonzero(v == 0))
    if pos.size == 0:
        return {"scale": "log10", "edges": [], "counts": [], "zeros": zeros}
    smallest, largest = (pos[0], pos[-1]) if is_sorted else (pos.min(), pos.max())
    lo, hi = np.log10(smallest), np.log10(largest)
    spread = hi - lo >= 1e-6
    if not spread:                                      # (nearly) one value: one decade around it
        lo, hi = lo - 0.5, hi + 0.5
    edges = np.logspace(lo, hi, bins + 1)
    if spread:
        edges[0], edges[-1] = smallest, largest         # 10**log10(x) may round below x: keep the extremes inside
    if is_sorted:     # np.histogram's rule for explicit edges: [e_i, e_i+1), the last bin closed
        cum = np.concatenate([pos.searchsorted(edges[:-1], "left"), pos.searchsorted(edges[-1:], "right")])
        counts = np.diff(cum)
    else:
        counts, _ = np.histogram(pos, edges)
    return {"scale": "log10", "edges": [float(e) for e in edges], "counts": [int(c) for c in counts], "zeros": zeros}


def key_bins(key, kind: str, class_names: dict | None = None) -> list[tuple[str, np.ndarray]]:
    """[(bin label, ascending indices of the samples in it)] of the non-empty bins of a slicing key: distance (m),
    radius (fraction of the half diagonal), speed (m/s) or class (key = class id or name; ids are named through
    class_names), in slice_by's order (bins ascending, classes by key)."""
    if kind == "class":
        names = class_names or {}
        groups = [(names.get(int(lab), str(lab)) if np.issubdtype(key.dtype, np.integer) else str(lab), key == lab)
                  for lab in np.unique(key)]
    else:
        edges, unit = {"distance": (DISTANCE_BINS_M, "m"), "radius": (RADIUS_BINS, "× half diagonal"),
                       "speed": (SPEED_BINS_M_S, "m/s")}[kind]
        code = np.searchsorted(edges, key.astype(np.float64, copy=False), "right")   # edges[code - 1] <= key < edges[code]
        groups = [(lab, code == i) for i, lab in enumerate(_bin_labels(edges, unit), start=1)]
    return [(lab, idx) for lab, m in groups if (idx := np.flatnonzero(m)).size]


def slice_by(v, bins) -> list[dict]:
    """Quantiles of v (1-D, float64) per bin of key_bins(key, ...) of its slicing key."""
    out = []
    for lab, idx in bins:
        part = v[idx]                               # (a fresh array: sorted in place)
        part.sort()
        out.append({"bin": lab, "count": int(idx.size), **describe(part, is_sorted=True)})
    return out


def drift(current: dict, baseline: dict) -> dict:
    """Compare two report.json documents with DRIFT_THRESHOLDS; {status, items: [{what, baseline, current, limit,
    flagged}]} (only comparable values are listed)."""
    items = []
    th = DRIFT_THRESHOLDS
    for name, cur in current.get("residuals", {}).items():
        base = baseline.get("residuals", {}).get(name)
        if not base or base.get("unit") != cur.get("unit"):
            continue
        a = th["residual_quantile"]["abs_by_unit"].get(cur["unit"], 0.0)
        for q, cv in cur["quantiles"].items():
            bv = base["quantiles"].get(q)
            if cv is None or bv is None:
                continue
            limit = bv * (1 + th["residual_quantile"]["rel"]) + a
            items.append({"what": f"residual {name} {q} ({cur['unit']})", "baseline": bv, "current": cv,
                          "limit": limit, "flagged": bool(cv > limit)})
    cs, bs = current.get("statistics", {}), baseline.get("statistics", {})
    for key in ("camera_invalid_rate", "lidar_no_return_rate", "mean_visib_fract"):
        if cs.get(key) is not None and bs.get(key) is not None:
            items.append({"what": key, "baseline": bs[key], "current": cs[key], "limit": th["rate"]["abs"],
                          "flagged": bool(abs(cs[key] - bs[key]) > th["rate"]["abs"])})
    cc, bc = cs.get("class_pixel_share", {}), bs.get("class_pixel_share", {})
    for k in sorted(set(cc) | set(bc)):
        c, b = cc.get(k, 0.0), bc.get(k, 0.0)
        items.append({"what": f"class share {k}", "baseline": b, "current": c, "limit": th["rate"]["abs"],
                      "flagged": bool(abs(c - b) > th["rate"]["abs"])})
    for key in ("events", "flows", "quarantined"):
        c, b = cs.get("counts", {}).get(key), bs.get("counts", {}).get(key)
        if c is not None and b is not None:
            items.append({"what": f"{key} count", "baseline": b, "current": c, "limit": 0, "flagged": c != b})
    flagged = [i for i in items if i["flagged"]]
    return {"thresholds": th, "status": "drift" if flagged else "ok", "flagged": len(flagged), "items": items}
