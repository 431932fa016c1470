"""Label invariants shared by every sensor type: validity plane consistency and object/class ids."""
from __future__ import annotations

import numpy as np

from rowbeam.bundle.arrays import DecodedArrays
from rowbeam.model.ontology import BACKGROUND_ID, VOID_ID


def finite_and_nan(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(every channel finite, every channel NaN) per pixel."""
    if a.ndim == 2:
        return np.isfinite(a), np.isnan(a)
    finite, nan = np.isfinite(a[..., 0]), np.isnan(a[..., 0])
    for c in range(1, a.shape[-1]):
        finite &= np.isfinite(a[..., c])
        nan &= np.isnan(a[..., c])
    return finite, nan


BLOCK_PIXELS = 1 << 16        # pixels per row block of a per-pixel invariant (row_blocks): temporaries stay in cache


def row_blocks(H: int, W: int) -> list[slice]:
    """Row slices covering an H x W image, about BLOCK_PIXELS pixels each."""
    step = max(1, BLOCK_PIXELS // max(W, 1))
    return [slice(r, min(r + step, H)) for r in range(0, H, step)]


def nan_exactly_off(a: np.ndarray, miss: np.ndarray) -> bool:
    """Whether float label `a` (the shape of the bool mask `miss`, or that with one channel axis) is NaN in every
    channel where `miss` and finite in every channel elsewhere: the validity contract, row block by row block (one
    read of `a`), the NaN channels of each pixel counted as bytes (no per-pixel channel reduction)."""
    if a.shape[:miss.ndim] != miss.shape or a.ndim > miss.ndim + 1 or (a.ndim > miss.ndim and a.shape[-1] > 255):
        return False
    channels = 1 if a.ndim == miss.ndim else a.shape[-1]
    finite = 0
    for rows in (row_blocks(*miss.shape) if miss.ndim == 2 else [slice(None)]):
        block, m = a[rows], miss[rows]
        nan = np.isnan(block)
        if channels == 1:
            same = np.array_equal(nan, m)
        else:
            per_channel = nan.view(np.uint8)               # 0/1 per channel
            count = per_channel[..., 0].copy()
            for c in range(1, channels):
                count += per_channel[..., c]               # the NaN channels of each pixel
            same = np.array_equal(count, m.view(np.uint8) * np.uint8(channels))
        if not same:
            return False
        finite += np.count_nonzero(np.isfinite(block))
    return finite == channels * (miss.size - np.count_nonzero(miss))      # the non-NaN values are all finite


def _label_nan_exactly_off(arrays, name: str, miss: np.ndarray) -> bool:
    """nan_exactly_off(arrays[name], miss), taken channel plane by channel plane while a DecodedArrays holds the
    label unstacked (every plane NaN exactly where miss and finite elsewhere: the same verdict, no stacking)."""
    held = arrays.held_planes(name) if isinstance(arrays, DecodedArrays) else None
    if held is None:
        return nan_exactly_off(arrays[name], miss)
    return len(held) <= 255 and all(p.shape == miss.shape and nan_exactly_off(p, miss) for p in held)


def check_validity(arrays: dict, float_names, add) -> set:
    """NaN exactly where invalid in every float label; valid 0/1; object ids exactly where valid.
    Returns the names in float_names that are finite exactly where valid == 1 and NaN elsewhere (every channel)."""
    valid = arrays["valid"]
    values_ok = bool((valid <= 1).all())
    add("valid_values", values_ok, "valid holds values other than 0 and 1" if not values_ok else "valid is 0/1")
    hit = valid == 1
    miss = ~hit
    n_hit = int(np.count_nonzero(hit))
    problems, clean = [], set()
    for name in float_names:
        if name not in arrays:
            continue
        if _label_nan_exactly_off(arrays, name, miss):
            # no non-finite value where valid, nothing but NaN where invalid
            clean.add(name)
            n_bad_valid = n_bad_invalid = 0
            nonpos = (arrays[name] <= 0) if name in ("camera_z", "range") else None     # NaN compares False: valid only
        else:
            a = arrays[name]
            finite, nan = finite_and_nan(a)
            n_bad_valid = int(np.count_nonzero(hit & ~finite))
            n_bad_invalid = int(np.count_nonzero(miss & ~nan))
            nonpos = hit & finite & (a <= 0) if name in ("camera_z", "range") else None
        if n_bad_valid:
            problems.append(f"{name}: {n_bad_valid} non-finite values where valid")
        if n_bad_invalid:
            problems.append(f"{name}: {n_bad_invalid} values where invalid (declared fill is NaN)")
        if name in ("camera_z", "range"):
            n_nonpos = int(np.count_nonzero(nonpos))
            if n_nonpos:
                problems.append(f"{name}: {n_nonpos} non-positive values where valid")
    if "instance_id" in arrays:
        background = arrays["instance_id"] == BACKGROUND_ID
        n_hit_invalid = int(np.count_nonzero(miss & ~background))
        n_valid_bg = int(np.count_nonzero(hit & background))
        if n_hit_invalid:
            problems.append(f"instance_id: {n_hit_invalid} pixels hit an object but are marked invalid")
        if n_valid_bg:
            problems.append(f"instance_id: {n_valid_bg} valid pixels have the background id")
    add("validity_consistency", not problems, "; ".join(problems) if problems else
        "depth, normals and ids agree with the validity plane", valid_fraction=n_hit / valid.size)
    return clean


def check_ids(manifest: dict, arrays: dict, add) -> None:
    """Object table unique; every instance id in it; semantic id = the class of the instance."""
    objects = manifest["objects"]
    by_index = {o["render_index"]: o for o in objects}
    ids = [o["id"] for o in objects]
    table_ok = len(by_index) == len(objects) and len(set(ids)) == len(ids)
    add("object_table", table_ok, "object table ids and render indices are unique" if table_ok else
        "object table has duplicate ids or render indices")
    if "instance_id" not in arrays:
        return
    instance = arrays["instance_id"]
    top = int(instance.max(initial=0))
    known = by_index.keys() | {BACKGROUND_ID}
    if top < len(known) and all(i in known for i in range(top + 1)):
        missing = []                                       # every id from 0 to the largest present one is known
    else:
        present = np.flatnonzero(np.bincount(instance.ravel())) if top < 1 << 24 else np.unique(instance)
        missing = [int(x) for x in present if x != BACKGROUND_ID and int(x) not in by_index]
    add("instance_ids_known", not missing, f"instance ids {missing[:5]} are not in the object table"
        if missing else "every instance id is in the object table")
    if "semantic_id" not in arrays:
        return
    size = max(by_index, default=0) + 1
    lut = np.full(size + 1, VOID_ID, dtype=np.uint32)      # last slot: ids outside the table
    lut[BACKGROUND_ID] = BACKGROUND_ID
    for idx, o in by_index.items():
        lut[idx] = o["class_id"]
    semantic = arrays["semantic_id"]
    if top >= size:                                        # ids outside the table take the last slot
        instance = np.minimum(instance, size)
    n_bad = 0                                              # every index is in the table now: "clip" clips nothing
    for rows in row_blocks(len(instance), instance[0].size) if instance.ndim > 1 and len(instance) else [slice(None)]:
        n_bad += int(np.count_nonzero(np.take(lut, instance[rows], mode="clip") != semantic[rows]))
    add("semantic_matches_instance", n_bad == 0,
        f"semantic_id disagrees with the object table's class at {n_bad} pixels" if n_bad else
        "semantic_id equals the class of the instance at every pixel")
    known = {c["id"] for c in manifest["ontology"]["classes"]} | {BACKGROUND_ID, VOID_ID}
    classes = {o["class_id"] for o in objects} if n_bad == 0 else {int(c) for c in np.unique(semantic)}
    bad_cls = sorted(c for c in classes if c not in known)
    add("semantic_ids_known", not bad_cls, f"semantic ids {bad_cls[:5]} are not in the ontology"
        if bad_cls else "every semantic id is in the ontology")
