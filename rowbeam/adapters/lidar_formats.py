"""LiDAR point clouds in external formats: KITTI velodyne .bin and PLY.

KITTI velodyne (`adapt kitti-lidar BUNDLE OUT_DIR`): velodyne/<index:06d>.bin per sweep of one LiDAR sensor,
float32 little-endian records (x, y, z, intensity), metres, LiDAR frame (x forward, y left, z up, the same
axes as KITTI's Velodyne frame). `frame="own_time"` (default) writes each point in the LiDAR frame at its own
beam time (points.x/y/z: as a real sensor reports, motion distortion kept); `frame="reference"` writes
points_motion_compensated (LiDAR frame at event.reference_time_ns). rowbeam has no intensity: the fourth
value is cos_incidence (-n . d, in [0, 1]) or 0 (`intensity="zero"`), declared in the sidecar.

PLY (`adapt ply`): binary_little_endian 1.0, one vertex per return with double x y z (LiDAR frame at the
point's own time), double t_ns (exact: |t| < 2^53 ns), float cos_incidence, ushort channel, uint firing,
uint instance_id, uint semantic_id. Comments carry sample id, frame and units.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from rowbeam.adapters.adapter import AdapterFormat, bundle_to_folder
from rowbeam.bundle.reader import Bundle, Event, open_event
from rowbeam.util.errors import RowbeamError
from rowbeam.sensors.lidar import LIDAR
from rowbeam.bundle.files import sha256_file
from rowbeam.adapters.output import (
    FOLDER_SIDECAR,
    check_output_dir,
    check_output_file,
    folder_listing,
    sidecar,
    sidecar_bytes,
    staged_dir,
    write_file,
    write_sidecar,
)

FRAMES = {"own_time": "LiDAR frame (x forward, y left, z up, m) at each point's own beam time",
          "reference": "LiDAR frame (x forward, y left, z up, m) at event.reference_time_ns (motion compensated)"}
INTENSITIES = {"cos_incidence": "cos_incidence of the return (-n . d, 1 = head-on), float32 in [0, 1]",
               "zero": "0 for every point (rowbeam has no intensity)"}
PLY_FIELDS = (("x", "<f8", "double"), ("y", "<f8", "double"), ("z", "<f8", "double"), ("t_ns", "<f8", "double"),
              ("cos_incidence", "<f4", "float"), ("channel", "<u2", "ushort"), ("firing", "<u4", "uint"),
              ("instance_id", "<u4", "uint"), ("semantic_id", "<u4", "uint"))
MAX_EXACT_DOUBLE_NS = 2 ** 53


def lidar_xyzi(event: Event, frame: str = "own_time", intensity: str = "cos_incidence") -> tuple[np.ndarray, float]:
    """([N, 4] float32 x y z intensity of every return, largest |float32 - float64| of x y z in m)."""
    if frame not in FRAMES:
        raise RowbeamError(f"frame {frame!r} is not one of {', '.join(FRAMES)}")
    if intensity not in INTENSITIES:
        raise RowbeamError(f"intensity {intensity!r} is not one of {', '.join(INTENSITIES)}")
    pts = event.array("points")
    xyz = (np.stack([pts["x"], pts["y"], pts["z"]], axis=-1) if frame == "own_time"
           else event.array("points_motion_compensated")).astype(np.float64)
    out = np.zeros((len(pts), 4), "<f4")
    out[:, :3] = xyz
    if intensity == "cos_incidence" and len(pts):
        out[:, 3] = np.clip(event.array("cos_incidence")[pts["firing"], pts["channel"]], 0.0, 1.0)
    err = float(np.abs(out[:, :3].astype(np.float64) - xyz).max(initial=0.0))
    return out, err


def _lidar_events(bundle: Bundle, sensor: str | None) -> list[Event]:
    lidars = sorted({e.sensor for e in bundle.events() if e.sensor_type == LIDAR}) if sensor is None else [sensor]
    if not lidars:
        raise RowbeamError(f"{bundle.path}: no spinning LiDAR events")
    if len(lidars) > 1:
        raise RowbeamError(f"{bundle.path}: several LiDAR sensors ({', '.join(lidars)}); choose one with --sensor")
    events = list(bundle.events(lidars[0]))
    if any(e.sensor_type != LIDAR for e in events):
        raise RowbeamError(f"sensor {lidars[0]!r} is not a spinning LiDAR")
    return events


def _lost(frame: str) -> list[str]:
    return [f"per-point beam time t_ns, firing and channel (points are in the {FRAMES[frame]})",
            "world coordinates, instance and semantic ids, normals, the per-firing poses and the beams without a return",
            "coordinates rounded from float64 to float32 (largest error in max_rounding_error.m)"]


def export_kitti_lidar(bundle_path, out_dir, sensor: str | None = None, frame: str = "own_time",
                       intensity: str = "cos_incidence") -> dict:
    """Write OUT_DIR/velodyne/<index:06d>.bin for every sweep of one LiDAR sensor; return the sidecar."""
    bundle = Bundle.open(bundle_path)
    out_dir = check_output_dir(out_dir, bundle.path)
    events = _lidar_events(bundle, sensor)
    worst, sources = 0.0, []
    with staged_dir(out_dir) as stage:
        (stage / "velodyne").mkdir()
        for e in events:
            xyzi, err = lidar_xyzi(e, frame, intensity)
            worst = max(worst, err)
            write_file(stage / "velodyne" / f"{e.index:06d}.bin", xyzi.tobytes())
            sources.append({"sample_id": e.sample_id, "file": f"velodyne/{e.index:06d}.bin",
                            "reference_time_ns": e.reference_time_ns, "points": int(len(xyzi))})
        doc = sidecar("kitti_velodyne_bin", out_dir.name, {"bundle": str(bundle.path), "sensor": events[0].sensor,
                                                             "events": sources},
                      _lost(frame), {"m": worst}, files=folder_listing(stage), frame=FRAMES[frame],
                      record="float32 little-endian x, y, z, intensity", intensity=INTENSITIES[intensity],
                      units="m")
        write_file(stage / FOLDER_SIDECAR, sidecar_bytes(doc))
    return doc


def ply_bytes(event: Event) -> bytes:
    """Binary little-endian PLY of an event's returns (fields PLY_FIELDS)."""
    pts = event.array("points")
    if len(pts) and int(np.abs(pts["t_ns"]).max()) >= MAX_EXACT_DOUBLE_NS:
        raise RowbeamError(f"{event.path}: point times beyond 2^53 ns cannot be stored exactly as PLY double")
    rec = np.zeros(len(pts), [(n, t) for n, t, _ in PLY_FIELDS])
    for n in ("x", "y", "z", "t_ns", "channel", "firing", "instance_id", "semantic_id"):
        rec[n] = pts[n]
    if len(pts):
        rec["cos_incidence"] = event.array("cos_incidence")[pts["firing"], pts["channel"]]
    header = ["ply", "format binary_little_endian 1.0",
              f"comment rowbeam sample_id {event.sample_id}",
              f"comment frame {FRAMES['own_time']}",
              "comment units x y z m, t_ns ns on the scene clock (integer-valued double), cos_incidence 1",
              f"element vertex {len(pts)}"]
    header += [f"property {ply} {n}" for n, _, ply in PLY_FIELDS] + ["end_header"]
    return ("\n".join(header) + "\n").encode("ascii") + rec.tobytes()


def _ply_lost() -> list[str]:
    return ["world coordinates, normals, per-firing poses and the beams without a return",
            "t_ns stored as double (exact below 2^53 ns); nothing else rounded"]


def export_ply(source, out) -> dict:
    """An event folder -> one PLY file OUT (sidecar OUT.json); a bundle -> folder OUT/<sensor>/<index:06d>.ply
    for every LiDAR event (sidecar OUT/rowbeam_adapter_sidecar.json). Returns the sidecar."""
    source, out = Path(source), Path(out)
    if (source / "manifest.json").is_file() or source.name == "manifest.json":
        event = open_event(source)
        if event.sensor_type != LIDAR:
            raise RowbeamError(f"{event.path}: not a spinning LiDAR event ({event.sensor_type})")
        check_output_file(out, event.path)
        side = out.with_name(out.name + ".json")
        check_output_file(side, event.path)
        write_file(out, ply_bytes(event))
        return write_sidecar(out, side, lambda: sidecar(
            "ply_points", out.name, {"event": str(event.path), "sample_id": event.sample_id}, _ply_lost(),
            {"m": 0.0, "ns": 0.0}, sha256=sha256_file(out), frame=FRAMES["own_time"],
            fields=[n for n, _, _ in PLY_FIELDS]))
    bundle = Bundle.open(source)
    check_output_dir(out, bundle.path)
    events = [e for e in bundle.events() if e.sensor_type == LIDAR]
    if not events:
        raise RowbeamError(f"{bundle.path}: no spinning LiDAR events")
    with staged_dir(out) as stage:
        for e in events:
            (stage / e.sensor).mkdir(exist_ok=True)
            write_file(stage / e.sensor / f"{e.index:06d}.ply", ply_bytes(e))
        doc = sidecar("ply_points", out.name, {"bundle": str(bundle.path), "samples": [e.sample_id for e in events]},
                      _ply_lost(), {"m": 0.0, "ns": 0.0}, files=folder_listing(stage), frame=FRAMES["own_time"],
                      fields=[n for n, _, _ in PLY_FIELDS])
        write_file(stage / FOLDER_SIDECAR, sidecar_bytes(doc))
    return doc


def _kitti_arguments(p) -> None:
    bundle_to_folder(p, "LiDAR sensor id (needed when the bundle has several)")
    p.add_argument("--frame", choices=("own_time", "reference"), default="own_time",
                   help="own_time: each point in the LiDAR frame at its own beam time (default); reference: motion "
                   "compensated to the sweep's reference time")
    p.add_argument("--intensity", choices=("cos_incidence", "zero"), default="cos_incidence",
                   help="rowbeam has no intensity: write cos_incidence (default) or 0")


def _ply_arguments(p) -> None:
    p.add_argument("source", help="a bundle folder or one LiDAR event folder")
    p.add_argument("out", help="output PLY file (event) or a new folder (bundle)")


ADAPTER_FORMATS = (
    AdapterFormat("kitti-lidar", "KITTI velodyne .bin per sweep (float32 x y z intensity)", _kitti_arguments,
                  lambda a: export_kitti_lidar(a.bundle, a.out_dir, a.sensor, a.frame, a.intensity),
                  description="OUT_DIR/velodyne/<index:06d>.bin for every sweep of one LiDAR sensor: float32 x y z "
                  "intensity, LiDAR frame (x forward, y left, z up, m)."),
    AdapterFormat("ply", "binary PLY of LiDAR returns (x y z t_ns cos_incidence channel firing ids)", _ply_arguments,
                  lambda a: export_ply(a.source, a.out),
                  description="An event folder -> one PLY file OUT; a bundle -> OUT/<sensor>/<index:06d>.ply for "
                  "every LiDAR event."),
)
