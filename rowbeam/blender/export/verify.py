"""Measure label error against an exact reference: rows rendered alone at their exact time.

The reference for image row v is a Cycles render of that single row (border render) with
motion blur off and the scene set (frame_set with subframe) to the row's reference time, so
no rolling-shutter mapping and no motion-step interpolation is involved. Its labels are
derived with the same per-row pose code. Compared per row:
  range error     max |range_label - range_ref| over pixels valid in both with the same object;
  silhouette px   for every pixel whose object differs, the distance (px, along the row) to the
                  nearest reference pixel showing the label's object (W if none).
"""
from __future__ import annotations

import numpy as np


ROW_SELECTION = ("the first and last rows, then the middle row of each moving or deforming object (largest first), "
                 "then rows spread evenly over the rows those objects cross; rows spread over the image when no "
                 "moving object is seen")


def verify_rows(rows: int, count: int) -> list[int]:
    """`count` image rows spread over the image, first and last included."""
    if count <= 0:
        return []
    if count == 1:
        return [rows // 2]
    return sorted({round(i * (rows - 1) / (count - 1)) for i in range(count)})


def motion_rows(instance_id: np.ndarray, moving, count: int) -> list[int]:
    """`count` rows of an (H, W) render-index image where the motion is (ROW_SELECTION); `moving`: render
    indices of moving or deforming objects."""
    H = instance_id.shape[0]
    moving = np.asarray(sorted(moving), dtype=instance_id.dtype)
    on = np.isin(instance_id, moving) if moving.size else np.zeros(instance_id.shape, bool)
    if count <= 0 or not on.any():
        return verify_rows(H, count)
    picks = [0, H - 1][:count]
    ids, sizes = np.unique(instance_id[on], return_counts=True)
    for obj in ids[np.argsort(-sizes, kind="stable")]:
        rows = np.flatnonzero((instance_id == obj).any(axis=1))
        mid = int(rows[len(rows) // 2])
        if len(picks) < count and mid not in picks:
            picks.append(mid)
    crossing = [int(r) for r in np.flatnonzero(on.any(axis=1)) if r not in picks]
    need = count - len(picks)
    if need > 0 and crossing:
        picks += sorted({crossing[round(i * (len(crossing) - 1) / max(need - 1, 1))] for i in range(need)})
    return sorted(set(picks))


def compare_row(label: dict, ref: dict) -> dict:
    """Compare one row of label arrays with the exact reference row (1-D arrays of width W)."""
    li, ri = label["instance_id"], ref["instance_id"]
    w = li.size
    same = (li == ri) & (label["valid"] == 1) & (ref["valid"] == 1)
    range_err = np.abs(label["range"].astype(np.float64) - ref["range"].astype(np.float64))[same]
    mismatch = np.flatnonzero(li != ri)
    cols = np.arange(w)
    worst_px = 0.0
    for c in mismatch:
        where = cols[ri == li[c]]
        worst_px = max(worst_px, float(np.abs(where - c).min()) if where.size else float(w))
    return {"range_error_m": float(range_err.max(initial=0.0)), "silhouette_error_px": worst_px,
            "id_mismatch_pixels": int(mismatch.size), "compared_pixels": int(same.sum())}
