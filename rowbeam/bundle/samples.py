"""Training samples from bundles and finalized datasets, as numpy dicts with declared keys, shapes, dtypes and
units (the framework-free half of `rowbeam.torch`; docs/torch.md lists every key).

An index is a list of SampleRef (folder paths and strings only, so it pickles to loader workers); a sample is
read through the loader (rowbeam.bundle.reader, sha256 verified) when asked for. Index order is deterministic:
sources in the given order, then sensor id, then event index (flows: source index, destination index).
Split: a finalized dataset's split lists (dataset.json, quarantined samples left out); a bundle's events carry
theirs in manifest lineage.split (events without one belong to no split and are left out when a split is asked).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rowbeam.bundle.files import load_json
from rowbeam.bundle.reader import Bundle, Event, open_event, open_flow
from rowbeam.model.modalities import FLAG_NAMES
from rowbeam.util.errors import RowbeamError

CAMERA, LIDAR, RADAR = "rolling_shutter_camera", "spinning_lidar", "radar"
POINT_KEYS = ("points", "t_ns", "t_offset_ns", "range", "instance_id", "semantic_id", "ring", "radial_velocity",
              "points_motion_compensated")      # per-point keys: (N, ...) with N varying between samples


@dataclass(frozen=True)
class SampleRef:
    """One sample: an event folder (`flow` None) or a flow folder (its source event is the sample's camera event)."""
    event: str
    flow: str | None
    sensor: str
    split: str | None


def _dataset_refs(root: Path, sensor: str, split: str | None, flow: bool) -> list[SampleRef]:
    doc = load_json(root / "dataset.json", "dataset.json")
    refs = []
    for s in doc.get("samples", []):
        if s.get("quarantined") or (split is not None and s["split"] != split):
            continue
        event = open_event(root / s["path"])
        if event.sensor == sensor:
            refs += _event_refs(Bundle.open(event.root), event, s["split"], flow)
    return refs


def _event_refs(bundle: Bundle, event: Event, split: str | None, flow: bool) -> list[SampleRef]:
    if not flow:
        return [SampleRef(str(event.path), None, event.sensor, split)]
    return [SampleRef(str(event.path), str(f.path), event.sensor, split) for f in bundle.flows(event.sensor)
            if f.manifest["endpoints"]["source"]["index"] == event.index]


def sample_index(sources, sensor: str, split: str | None = None, flow: bool = False) -> list[SampleRef]:
    """The samples of one sensor over `sources` (bundle folders or finalized dataset folders holding dataset.json),
    of `split` (None: all); `flow`: one sample per forward flow whose source is an event of the sensor.
    RowbeamError when a source is neither, or when nothing matches."""
    refs: list[SampleRef] = []
    for src in [sources] if isinstance(sources, (str, Path)) else sources:
        root = Path(src)
        if (root / "dataset.json").is_file():
            refs += _dataset_refs(root, sensor, split, flow)
            continue
        bundle = Bundle.open(root)
        for event in bundle.events(sensor):
            mine = event.manifest.get("lineage", {}).get("split")
            if split is None or mine == split:
                refs += _event_refs(bundle, event, mine, flow)
    if not refs:
        raise RowbeamError(f"no {'flow ' if flow else ''}samples of sensor {sensor!r}"
                           + (f" in split {split!r}" if split else "") + f" in {sources}")
    return refs


def _camera(event: Event) -> dict:
    """rgb (3, H, W) float32 scene-linear; rgb_display (3, H, W) uint8 sRGB; depth (1, H, W) float32 camera_z m, NaN
    where invalid; valid (1, H, W) bool; instance_id / semantic_id (H, W) int64; row_time_ns (H,) int64;
    row_T_world_camera (H, 4, 4) float64; K (3, 3) float64 px."""
    names = set(event.names)
    out = {"K": np.asarray(event.manifest["calibration"]["K"], np.float64)}
    if "rgb" in names:
        out["rgb"] = np.ascontiguousarray(event.array("rgb").transpose(2, 0, 1), np.float32)
    if "rgb_display" in names:
        out["rgb_display"] = np.ascontiguousarray(event.array("rgb_display").transpose(2, 0, 1))
    out["depth"] = event.array("camera_z").astype(np.float32)[None]
    out["valid"] = event.array("valid").astype(bool)[None]
    for name in ("instance_id", "semantic_id"):
        out[name] = event.array(name).astype(np.int64)
    out["row_time_ns"] = event.array("row_time_ns").astype(np.int64)
    out["row_T_world_camera"] = event.array("row_T_world_camera").astype(np.float64)
    return out


def _points(event: Event, start_key: str) -> dict:
    """points (N, 3) float32 m (sensor frame at each point's own time); t_ns (N,) int64 scene clock; t_offset_ns (N,)
    int64 after the sweep/frame start; range (N,) float32 m; instance_id / semantic_id (N,) int64; LiDAR: ring (N,)
    int64 (channel), points_motion_compensated (N, 3) float32 (sensor frame at time_ns); radar: radial_velocity
    (N,) float32 m/s, positive = receding."""
    p = event.array("points")
    start = int(event.manifest["event"][start_key])
    out = {"points": np.stack([p["x"], p["y"], p["z"]], -1).astype(np.float32), "t_ns": p["t_ns"].astype(np.int64),
           "t_offset_ns": p["t_ns"].astype(np.int64) - start, "start_ns": np.int64(start),
           "instance_id": p["instance_id"].astype(np.int64), "semantic_id": p["semantic_id"].astype(np.int64)}
    if "channel" in p.dtype.names:
        out["ring"] = p["channel"].astype(np.int64)
        out["range"] = event.array("range")[p["firing"].astype(np.int64), p["channel"].astype(np.int64)]
        if "points_motion_compensated" in event.names:
            out["points_motion_compensated"] = event.array("points_motion_compensated").astype(np.float32)
    else:
        out["range"] = p["range"]
        out["radial_velocity"] = p["radial_velocity"].astype(np.float32)
    out["range"] = np.asarray(out["range"], np.float32)
    return out


def _flow(path: str) -> dict:
    """flow (2, H, W) float32 px forward (u, v) from the source to the destination; the four flags (H, W) bool:
    flow_source_valid, flow_dest_in_bounds, flow_dest_visible, flow_correspondence_defined; flow_dt_ns int64."""
    f = open_flow(path)
    out = {"flow": np.ascontiguousarray(f.array("flow_forward").transpose(2, 0, 1), np.float32)}
    for flag in FLAG_NAMES:
        out[f"flow_{flag}"] = f.array(f"flow_forward_{flag}").astype(bool)
    ep = f.manifest["endpoints"]
    out["flow_dt_ns"] = np.int64(ep["destination"]["reference_time_ns"] - ep["source"]["reference_time_ns"])
    return out


SAMPLE_READERS = {CAMERA: _camera, LIDAR: lambda e: _points(e, "sweep_start_ns"),
                  RADAR: lambda e: _points(e, "frame_start_ns")}


def load_sample(ref: SampleRef) -> dict:
    """The numpy sample of `ref`: sample_id (str), sensor (str), index (int), split (str or None), time_ns (int64:
    the event's reference time) and the sensor type's arrays (docs/torch.md)."""
    event = open_event(ref.event)
    reader = SAMPLE_READERS.get(event.sensor_type)
    if reader is None:
        raise RowbeamError(f"{event.path}: sensor type {event.sensor_type!r} has no training sample reader")
    out = {"sample_id": event.sample_id, "sensor": event.sensor, "index": event.index, "split": ref.split,
           "time_ns": np.int64(event.reference_time_ns), **reader(event)}
    if ref.flow is not None:
        out.update(_flow(ref.flow))
    return out
