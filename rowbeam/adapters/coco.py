"""COCO instances JSON from camera object labels (`adapt coco BUNDLE OUT.json`).

One image per labelled camera event (an 8-bit sRGB PNG of its RGB in OUT_images/ beside OUT, made with the scene's
colour management; file_name is relative to OUT's folder), one annotation per object with at least one visible pixel:
segmentation = COCO RLE of the modal mask (instance_id == the object's render index) in compressed string
form, area = visible pixel count, bbox = [u_min, v_min, u_max - u_min + 1, v_max - v_min + 1] of the visible
pixels (pixel centres at integers; COCO's box runs from the left edge of u_min to the right edge of u_max).
category_id = the ontology class id (manifest `ontology`); extra keys (strings of the stable 64-bit id, the
amodal boxes, fractions) are prefixed `rowbeam_`. Objects with no visible pixel or a void class are skipped
and counted in the sidecar.
"""
from __future__ import annotations

import contextlib

import json
from pathlib import Path

import numpy as np

from rowbeam.adapters.adapter import BUNDLE_IN, AdapterFormat
from rowbeam.bundle.reader import Bundle
from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import sha256_file
from rowbeam.adapters.objects import (
    VOID_ID,
    display_image,
    dropped_summary,
    image_size,
    labelled_events,
    mask_box,
    modal_mask,
    refuse_empty,
)
from rowbeam.adapters.output import (
    check_output_dir,
    check_output_file,
    sidecar,
    staged_dir,
    write_file,
    write_sidecar,
)
from rowbeam.adapters.png import png_bytes


def rle_counts(mask: np.ndarray) -> list[int]:
    """Uncompressed COCO RLE counts of an (H, W) mask: run lengths over the column-major (Fortran order)
    flattening, alternating 0-runs and 1-runs, starting with the number of leading zeros (possibly 0)."""
    flat = np.asarray(mask, bool).reshape(-1, order="F")
    if flat.size == 0:
        return [0]
    change = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(bounds).tolist()
    return ([0] + runs) if flat[0] else runs


def rle_string(counts: list[int]) -> str:
    """COCO's compressed RLE string (pycocotools maskApi rleToString): each count, minus the count two
    places before it from the third on, written as 5-bit groups, low first, 0x20 = more follow, offset by 48."""
    out = []
    for i, count in enumerate(counts):
        x = int(count) - (int(counts[i - 2]) if i > 2 else 0)
        more = True
        while more:
            c = x & 0x1F
            x >>= 5                                  # arithmetic shift, as on C's signed long
            more = (x != -1) if (c & 0x10) else (x != 0)
            if more:
                c |= 0x20
            out.append(chr(c + 48))
    return "".join(out)


def encode_rle(mask: np.ndarray) -> dict:
    """{"size": [H, W], "counts": compressed string} of an (H, W) mask."""
    H, W = mask.shape
    return {"size": [int(H), int(W)], "counts": rle_string(rle_counts(mask))}


def _categories(events) -> list[dict]:
    classes = {}
    for e in events:
        for c in e.manifest["ontology"]["classes"]:
            classes.setdefault(int(c["id"]), c)
    if any(cid == 0 for cid in classes):
        raise RowbeamError("ontology class id 0 is background in rowbeam and reserved in COCO; cannot map it")
    return [{"id": cid, "name": c["name"], "supercategory": c.get("tags", [c["name"]])[0]}
            for cid, c in sorted(classes.items())]


def coco_document(bundle: Bundle, sensor: str | None = None, images_dir: str = "images") -> tuple[dict, dict]:
    """(COCO instances document, statistics for the sidecar); an event with rgb is the image
    `images_dir/<sample_id>.png` (stats["images"]: {file_name: (uint8 image, how it was made)})."""
    events = labelled_events(bundle, sensor)
    categories = _categories(events)
    known = {c["id"] for c in categories}
    images, annotations, skipped, files = [], [], [], {}
    for image_id, event in enumerate(events, start=1):
        W, H = image_size(event)
        pixels, how = display_image(event)
        name = f"{images_dir}/{event.sample_id}.png" if pixels is not None else ""
        if pixels is not None:
            files[name] = (pixels, how)
        images.append({"id": image_id, "width": W, "height": H, "file_name": name,
                       "rowbeam_sample_id": event.sample_id, "rowbeam_reference_time_ns": event.reference_time_ns})
        for label in event.object_labels:
            mask = modal_mask(event, label)
            why = ("no visible pixel" if not mask.any() else
                   "void class (no ontology class, no COCO category)" if int(label["semantic_id"]) == VOID_ID else
                   f"class id {label['semantic_id']} not in the ontology" if int(label["semantic_id"]) not in known
                   else None)
            if why:
                skipped.append({"sample_id": event.sample_id, "id": str(label["id"]), "name": label.get("name"),
                                 "reason": why})
                continue
            u0, v0, u1, v1 = mask_box(mask)
            annotations.append({
                "id": len(annotations) + 1, "image_id": image_id, "category_id": int(label["semantic_id"]),
                "segmentation": encode_rle(mask), "area": int(mask.sum()),
                "bbox": [u0, v0, u1 - u0 + 1, v1 - v0 + 1], "iscrowd": 0,
                "rowbeam_id": str(label["id"]), "rowbeam_instance_id": int(label["instance_id"]),
                "rowbeam_bbox_amodal": label.get("bbox_amodal_unclipped"),
                "rowbeam_bbox_amodal_clipped": label.get("bbox_amodal_clipped"),
                "rowbeam_visib_fract": label.get("visib_fract"),
                "rowbeam_truncation_fraction": label.get("truncation_fraction"),
                "rowbeam_occlusion_fraction": label.get("occlusion_fraction")})
    doc = {"info": {"description": f"rowbeam bundle {bundle.info.get('dataset_id', bundle.path.name)}",
                    "rowbeam_conventions": "bbox [x, y, w, h] of visible pixels, pixel centres at integers, "
                    "w = u_max - u_min + 1; rowbeam_bbox_amodal = amodal box on the 3x canvas, same convention "
                    "(x, y may be negative); rowbeam_id = stable 64-bit object id (decimal string)"},
           "images": images, "annotations": annotations, "categories": categories}
    total = sum(len(e.object_labels) for e in events)
    refuse_empty("coco", len(annotations), skipped, total)
    return doc, {"skipped": skipped, "events": [e.sample_id for e in events], "images": files,
                 "dropped": dropped_summary(skipped, total)}


LOST = ["amodal masks (only the rowbeam_bbox_amodal boxes are kept), the 3x-canvas silhouettes and counts",
        "per-row acquisition times, object poses, 3D boxes, depth and every other modality",
        "objects with no visible pixel and objects of the void class (listed in skipped)",
        "the float rgb: each image is an 8-bit sRGB display PNG (the scene's view transform and exposure: the "
        "sidecar's images)"]


def export_coco(bundle_path, out, sensor: str | None = None) -> dict:
    """Write OUT (COCO instances JSON), its images (8-bit sRGB PNGs in the new folder OUT_images/ beside it, named
    by each image's file_name, relative to OUT's folder) and OUT.json (sidecar); return the sidecar."""
    bundle = Bundle.open(bundle_path)
    out = check_output_file(out, bundle.path)
    side = check_output_file(Path(str(out) + ".json"), bundle.path)
    images_dir = check_output_dir(out.parent / f"{out.stem}_images", bundle.path)
    doc, stats = coco_document(bundle, sensor, images_dir.name)
    with staged_dir(images_dir) if stats["images"] else contextlib.nullcontext() as stage:
        for name, (pixels, _) in stats["images"].items():
            write_file(stage / Path(name).name, png_bytes(pixels, 8))
        write_file(out, json.dumps(doc, separators=(",", ":")).encode() + b"\n")
        meta = write_sidecar(out, side, lambda: sidecar(
            "coco_instances", out.name, {"bundle": str(bundle.path), "events": stats["events"]}, LOST, {"px": 0.0},
            sha256=sha256_file(out), skipped=stats["skipped"], annotations=len(doc["annotations"]), units="px",
            dropped=stats["dropped"], segmentation="compressed COCO RLE of the modal mask (column-major runs, zeros first)",
            images={name: how for name, (_, how) in stats["images"].items()}))
    return meta


def _arguments(p) -> None:
    p.add_argument("bundle", help=BUNDLE_IN)
    p.add_argument("out", help="output JSON file (sidecar: OUT + '.json')")
    p.add_argument("--sensor", help="camera sensor id (default: every camera with object labels)")


ADAPTER_FORMATS = (AdapterFormat(
    "coco", "COCO instances JSON from modal masks (RLE) of camera object labels", _arguments,
    lambda a: export_coco(a.bundle, a.out, a.sensor)),)
