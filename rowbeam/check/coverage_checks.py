"""Labels agree with an independent second source of what is there: the rgb render for a camera (check
`label_coverage`), the exporter's BVH ray cast of sampled beams for LiDAR and radar (check `beam_coverage`).

Second source: `rgb_coverage`, the share of the rgb render's camera paths that met a surface (Cycles Mist pass,
independent of the label render's materials, passes and threshold). A pixel is judged only where the surface
policy decided nothing in its neighbourhood (`policy_mask`) and the rgb is unambiguous around it:
- hole: the label ray found nothing, yet every rgb sample of the pixel and of its neighbours met a surface;
- phantom: the label ray and its neighbours found a surface, yet no rgb sample of the pixel or its neighbours did.
The neighbourhood (radius `edge_radius`) absorbs anti-aliased silhouettes,
where the pixel-centre label ray and the filtered rgb legitimately differ.

LiDAR / radar second source: for each verified firing (chirp) the manifest lists the beams whose Blender BVH cast
(scene.ray_cast at the exact time, geometry only) met a surface within the range limits and those that met none;
beams the surface policy decided, beams on geometry the cast cannot hit and (radar) beams refused by the velocity
limit are in neither list. A listed hit must be a return (valid 1), a listed miss must not.
"""
from __future__ import annotations

import math

import numpy as np

from rowbeam.model import qa_profile as tol


def _window(mask: np.ndarray, radius: int, reduce) -> np.ndarray:
    """reduce (np.logical_and / np.logical_or) of a bool (H, W) mask over each (2r+1)^2 window, edge-replicated."""
    padded = np.pad(mask, radius, mode="edge")
    H, W = mask.shape
    out = mask.copy()
    for dy in range(2 * radius + 1):
        for dx in range(2 * radius + 1):
            out = reduce(out, padded[dy:dy + H, dx:dx + W])
    return out


def edge_radius(manifest: dict) -> int:
    """Neighbourhood radius (px) of the judged pixels: COVERAGE_EDGE_PX, or half the rgb pixel filter width (Cycles
    default 1.5 px) rounded up when that is larger."""
    width = float((manifest.get("method", {}).get("rgb_render") or {}).get("filter_width_px", 1.5))
    return max(tol.COVERAGE_EDGE_PX, math.ceil(width / 2.0))


def coverage_disagreement(valid: np.ndarray, coverage: np.ndarray, policy: np.ndarray | None, radius: int) -> dict:
    """{hole, phantom, judged}: bool (H, W) masks of label holes and phantom labels among the judged pixels."""
    hit = valid == 1
    free = ~_window(policy > 0, radius, np.logical_or) if policy is not None else np.ones_like(hit)
    full = _window(coverage >= tol.COVERAGE_FULL, radius, np.logical_and)
    empty = _window(coverage <= tol.COVERAGE_EMPTY, radius, np.logical_and)
    hole = free & full & ~hit
    phantom = free & empty & _window(hit, radius, np.logical_and)
    return {"hole": hole, "phantom": phantom, "judged": free & (full | empty)}


def check_label_coverage(manifest: dict, arrays: dict, add) -> None:
    """Fail on any label hole or phantom label where the rgb coverage is unambiguous and the policy decided nothing."""
    if "rgb_coverage" not in arrays:
        add("label_coverage", False, "no rgb_coverage payload: labels were not compared with what the rgb saw",
            severity="warn")
        return
    radius = edge_radius(manifest)
    d = coverage_disagreement(arrays["valid"], arrays["rgb_coverage"], arrays.get("policy_mask"), radius)
    holes, phantoms = int(np.count_nonzero(d["hole"])), int(np.count_nonzero(d["phantom"]))
    first = np.argwhere(d["hole"] | d["phantom"])
    where = f" (first at row {first[0][0]}, column {first[0][1]})" if len(first) else ""
    add("label_coverage", holes + phantoms == 0,
        f"{holes} label holes where the rgb saw a surface, {phantoms} labels where the rgb saw none{where}"
        if holes + phantoms else "labels report a surface exactly where the rgb saw one (judged pixels)",
        hole_pixels=holes, phantom_pixels=phantoms, judged_pixels=int(np.count_nonzero(d["judged"])),
        policy_pixels=int(np.count_nonzero(arrays["policy_mask"])) if "policy_mask" in arrays else 0,
        radius_px=radius)


BEAM_LISTS = {"firings": ("firing", "cast_hit_channels", "cast_miss_channels"),
              "chirps": ("chirp", "cast_hit_beams", "cast_miss_beams")}


def beam_disagreement(valid: np.ndarray, rows: list, unit: str) -> tuple[list, list, int]:
    """(holes, phantoms, judged): (row, beam) pairs of listed cast hits without a return and of listed cast misses
    with one, among the verification rows `rows` of `unit` ("firings" or "chirps"); valid: (rows, beams) uint8."""
    key, hit_key, miss_key = BEAM_LISTS[unit]
    holes, phantoms, judged = [], [], 0
    for row in rows:
        k = row[key]
        holes += [(k, b) for b in row[hit_key] if valid[k, b] != 1]
        phantoms += [(k, b) for b in row[miss_key] if valid[k, b] == 1]
        judged += len(row[hit_key]) + len(row[miss_key])
    return holes, phantoms, judged


def check_beam_coverage(manifest: dict, arrays: dict, add, unit: str = "firings") -> None:
    """Fail on a dropped return where the exporter's BVH cast met a surface, or a return where it met none."""
    rows = manifest["method"]["verification"].get(unit, [])
    if "valid" not in arrays or not any(BEAM_LISTS[unit][1] in row for row in rows):
        add("beam_coverage", False, "no per-beam BVH cast lists: returns were not compared with the geometry",
            severity="warn")
        return
    holes, phantoms, judged = beam_disagreement(arrays["valid"], rows, unit)
    first = (holes + phantoms)[0] if holes or phantoms else None
    where = f" (first at {BEAM_LISTS[unit][0]} {first[0]}, beam {first[1]})" if first else ""
    add("beam_coverage", not (holes or phantoms),
        f"{len(holes)} beams without a return where the BVH cast met a surface, {len(phantoms)} returns where it met "
        f"none{where}" if holes or phantoms else f"returns exactly where the BVH cast met a surface ({judged} beams)",
        hole_beams=len(holes), phantom_beams=len(phantoms), judged_beams=judged)
