"""Shared reading of per-object camera labels (manifest `object_labels`) for the object adapters."""
from __future__ import annotations

import numpy as np

from rowbeam.bundle.reader import Bundle, Event
from rowbeam.util.errors import RowbeamError
from rowbeam.sensors.camera import CAMERA

VOID_ID = 2**32 - 1


def labelled_events(bundle: Bundle, sensor: str | None = None, single_sensor: bool = False) -> list[Event]:
    """Camera events that carry object labels (sorted by sensor, index); RowbeamError when there are none.
    `single_sensor`: refuse a bundle whose labelled cameras are several unless `sensor` picks one."""
    events = [e for e in bundle.events(sensor) if e.sensor_type == CAMERA and e.manifest.get("object_labels")]
    if not events:
        where = f"sensor {sensor!r}" if sensor else "any camera"
        raise RowbeamError(f"{bundle.path}: no camera events with object labels for {where} (set "
                           "\"object_labels\": true on the camera in the rig and export again)")
    sensors = sorted({e.sensor for e in events})
    if single_sensor and len(sensors) > 1:
        raise RowbeamError(f"{bundle.path}: several cameras with object labels ({', '.join(sensors)}); "
                           "choose one with --sensor")
    return events


def refuse_lens(events: list[Event], fmt: str, why: str) -> None:
    """RowbeamError (one line) when a camera event renders through a lens (calibration.distortion model != none):
    `fmt`'s camera model is the pinhole K only (`why`), so its labels would be read with the wrong projection."""
    for e in events:
        model = e.manifest["calibration"].get("distortion", {}).get("model", "none")
        if model != "none":
            raise RowbeamError(f"{e.path}: camera {e.sensor!r} renders through lens model {model} "
                               f"(calibration.distortion); {fmt} {why}, so its masks, boxes and poses would be read "
                               "with the wrong projection: export this camera without a lens for " + fmt)


def image_size(event: Event) -> tuple[int, int]:
    """(W, H) of a camera event."""
    W, H = event.manifest["calibration"]["image_size_px"]
    return int(W), int(H)


def modal_mask(event: Event, label: dict) -> np.ndarray:
    """(H, W) bool visible mask (instance_id == the object's render index), checked against px_count_visib."""
    mask = event.modal_mask(label)
    if int(mask.sum()) != int(label["px_count_visib"]):
        raise RowbeamError(f"{event.path}: object {label['id']}: instance_id holds {int(mask.sum())} pixels, "
                           f"object_labels.px_count_visib says {label['px_count_visib']}; run `rowbeam check`")
    return mask


def amodal_mask(event: Event, label: dict) -> np.ndarray:
    """(H, W) bool amodal mask inside the image (all False when the object is not in the image),
    checked against px_count_in_image."""
    W, H = image_size(event)
    mask = event.amodal_mask(label)
    mask = np.zeros((H, W), bool) if mask is None else mask
    if int(mask.sum()) != int(label["px_count_in_image"]):
        raise RowbeamError(f"{event.path}: object {label['id']}: amodal mask holds {int(mask.sum())} pixels, "
                           f"object_labels.px_count_in_image says {label['px_count_in_image']}; run `rowbeam check`")
    return mask


def mask_box(mask: np.ndarray) -> tuple[int, int, int, int] | None:
    """(u_min, v_min, u_max, v_max) pixel indices of the set pixels, or None when empty."""
    rows, cols = np.any(mask, axis=1), np.any(mask, axis=0)
    if not rows.any():
        return None
    v = np.flatnonzero(rows)
    u = np.flatnonzero(cols)
    return int(u[0]), int(v[0]), int(u[-1]), int(v[-1])


def srgb8(rgb: np.ndarray) -> np.ndarray:
    """Scene-linear float RGB -> 8-bit sRGB (IEC 61966-2-1 transfer, clipped to [0, 1])."""
    c = np.clip(np.nan_to_num(np.asarray(rgb, np.float64)), 0.0, 1.0)
    s = np.where(c <= 0.0031308, 12.92 * c, 1.055 * np.power(c, 1 / 2.4) - 0.055)
    return np.rint(s * 255.0).astype(np.uint8)


FALLBACK_DISPLAY = {"view_transform": "none: the bundle has no rgb_display; scene-linear rgb clipped to [0, 1] with the "
                                      "sRGB transfer (IEC 61966-2-1)", "exposure_stops": 0.0, "gamma": 1.0,
                    "display_device": "sRGB"}


def display_image(event: Event) -> tuple[np.ndarray | None, dict | None]:
    """((H, W, 3) uint8 sRGB display image of the event's RGB, how it was made) -- the exported rgb_display
    (the scene's view transform and exposure, method.rgb_display) or, in a bundle without it, FALLBACK_DISPLAY;
    (None, None) when the event has no rgb."""
    if "rgb_display" in event.names:
        return event.array("rgb_display"), event.manifest["method"].get("rgb_display")
    if "rgb" in event.names:
        return srgb8(event.array("rgb")), FALLBACK_DISPLAY
    return None, None


def dropped_summary(skipped: list[dict], total: int) -> str:
    """'dropped N of TOTAL object label(s): k reason (first names), ...' of an adapter's skipped list
    ({"reason", "name"?} each), or '' when nothing was dropped."""
    if not skipped:
        return ""
    by_reason: dict = {}
    for s in skipped:
        by_reason.setdefault(s["reason"], []).append(s.get("name") or s.get("id"))
    parts = []
    for reason, names in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        first = ", ".join(repr(n) for n in dict.fromkeys(names) if n is not None)
        first = ", ".join(first.split(", ")[:5]) + (", ..." if len(set(names)) > 5 else "")
        parts.append(f"{len(names)} {reason}" + (f" ({first})" if first else ""))
    return f"dropped {len(skipped)} of {total} object label(s): " + "; ".join(parts)


def refuse_empty(fmt: str, written: int, skipped: list[dict], total: int) -> None:
    """RowbeamError (one line, nothing written) when an adapter would write no annotation at all."""
    if written:
        return
    why = dropped_summary(skipped, total) or "the labelled events hold no object"
    hint = (" (tag the objects or add class_rules to the ontology: docs/objects.md)"
            if any("void class" in s["reason"] for s in skipped) else "")
    raise RowbeamError(f"{fmt}: no annotation to write: {why}{hint}")
