"""ROS 2 messages in one MCAP file (`adapt mcap BUNDLE OUT.mcap [--sensor ID ...]`), written with the `mcap` and
`mcap-ros2-support` packages (no ROS installation): per event the messages of rowbeam.adapters.ros_sensors, the
state log on /tf (tf2_msgs/TFMessage: world -> every logged body at each sample time) and the sensor mounts on
/tf_static (mount object -> sensor frame). A bundle without a state log gets world -> sensor at each event's
reference time on /tf instead. Log time of every message = its header stamp (scene clock ns). The sidecar
(rowbeam/adapter_sidecar@1) lies beside OUT (OUT + '.json'); the MCAP's metadata record `rowbeam` repeats its losses
and header-stamp conventions.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from rowbeam.adapters import ros_messages as rm
from rowbeam.adapters.adapter import BUNDLE_IN, AdapterFormat
from rowbeam.adapters.output import check_output_file, sidecar, write_sidecar
from rowbeam.adapters.ros_sensors import ROS_SENSORS, WORLD, RosMessage
from rowbeam.bundle.files import sha256_file, temp_sibling
from rowbeam.bundle.reader import Bundle, Event
from rowbeam.model.frames import invert_rigid
from rowbeam.model.state_log import load_state_log
from rowbeam.util.errors import RowbeamError

FORMAT = "ros2_mcap"
EXTRA = "pip install 'rowbeam[ros]'"
LOST = [
    "the float scene-linear rgb (the image topic is the 8-bit sRGB display image), normals, rgb_coverage, amodal "
    "masks, flow and scene flow",
    "a lens's valid domain (CameraInfo has no field for it: docs/lenses.md)",
    "float64 point coordinates, ranges and angles (PointCloud2 fields are float32; max_rounding_error)",
    "point clouds' world coordinates (x_world ...): use /tf at the point's time",
]


def _writer_class():
    try:
        from mcap_ros2.writer import Writer
    except ImportError:
        raise RowbeamError(f"writing MCAP needs the mcap and mcap-ros2-support packages ({EXTRA})") from None
    return Writer


def event_messages(events: list[Event]) -> tuple[list[RosMessage], list[str]]:
    """(messages of every event of a known sensor type, [what was skipped: sensors of types with no ROS mapping])."""
    out, skipped = [], []
    for e in events:
        kind = ROS_SENSORS.get(e.sensor_type)
        if kind is None:
            skipped.append(f"sensor {e.sensor} of type {e.sensor_type!r} (no ROS message mapping)")
            continue
        out += kind.messages(e)
    return out, sorted(set(skipped))


def _sensor_pose_key(event: Event) -> np.ndarray:
    """T_world_sensor at the event's reference time (from calibration T_<x>_world)."""
    cal = event.manifest["calibration"]
    key = next(k for k, v in cal.items() if k.startswith("T_") and k.endswith("_world") and isinstance(v, dict))
    return invert_rigid(np.asarray(cal[key]["matrix"], np.float64))


def tf_messages(bundle: Bundle, events: list[Event]) -> list[RosMessage]:
    """/tf from the state logs the events point at (each sample time once, bodies sorted by name) and /tf_static
    (mount -> sensor); without any state log, /tf holds world -> sensor at each event's reference time."""
    logs = {}
    for e in events:
        pointer = e.manifest.get("state")
        if pointer and pointer["sha256"] not in logs:
            logs[pointer["sha256"]] = load_state_log(bundle.path, pointer)
    if not logs:
        return [RosMessage("/tf", "tf2_msgs/TFMessage", e.reference_time_ns, {"transforms": [rm.transform_stamped(
            e.reference_time_ns, WORLD, e.sensor, _sensor_pose_key(e))]}) for e in events if e.sensor_type in ROS_SENSORS]
    samples: dict[int, dict] = {}
    for log, tracks in logs.values():
        for body in log["bodies"]:
            track = tracks[body["name"]]
            for t, T in zip(track.t, track.T, strict=True):
                samples.setdefault(int(t), {}).setdefault(body["name"], T)
    out = [RosMessage("/tf", "tf2_msgs/TFMessage", t, {"transforms": [rm.transform_stamped(t, WORLD, name, T)
                                                                      for name, T in sorted(bodies.items())]})
           for t, bodies in sorted(samples.items())]
    mounts = {e.sensor: (e.manifest["sensor"]["object"], e.sensor_type) for e in events if e.sensor_type in ROS_SENSORS}
    clash = sorted(set(mounts) & ({WORLD} | {n for bodies in samples.values() for n in bodies}))
    if clash:
        raise RowbeamError(f"sensor id {clash[0]!r} is also a state-log body or 'world'; tf frames would collide")
    t0 = min(samples)
    static = [rm.transform_stamped(t0, mount, s, ROS_SENSORS[kind].T_mount_sensor)
              for s, (mount, kind) in sorted(mounts.items())]
    return out + [RosMessage("/tf_static", "tf2_msgs/TFMessage", t0, {"transforms": static})]


def _float32_error(events: list[Event]) -> dict:
    """Largest rounding error of the float32 point fields: {'m': xyz and range, 's': time, 'rad': angles}."""
    err = {"m": 0.0, "s": 0.0, "rad": 0.0}
    for e in events:
        if e.sensor_type not in ("spinning_lidar", "radar"):
            continue
        p = e.array("points")
        for c in ("x", "y", "z", "range"):
            if c in p.dtype.names:
                err["m"] = max(err["m"], float(np.abs(p[c].astype(np.float32) - p[c]).max(initial=0.0)))
        start = e.manifest["event"]["sweep_start_ns" if e.sensor_type == "spinning_lidar" else "frame_start_ns"]
        dt = (p["t_ns"] - start) / 1e9
        err["s"] = max(err["s"], float(np.abs(dt.astype(np.float32) - dt).max(initial=0.0)))
        if "azimuth_deg" in e.names:
            a = np.deg2rad(np.concatenate([e.array("azimuth_deg"), e.array("elevation_deg")]))
            err["rad"] = max(err["rad"], float(np.abs(a.astype(np.float32) - a).max(initial=0.0)))
    return err


def write_mcap(path: Path, messages: list[RosMessage], metadata: dict) -> None:
    """Write `messages` (sorted by time, then topic) into a new MCAP file at `path` through a hidden sibling,
    linked into place only when complete (an existing `path` is never replaced)."""
    Writer = _writer_class()
    tmp = temp_sibling(path)
    try:
        with open(tmp, "wb") as f:
            writer = Writer(f)
            schemas = {t: writer.register_msgdef(rm.schema_name(t), rm.msgdef(t)) for t in sorted({m.type for m in messages})}
            for seq, m in enumerate(sorted(messages, key=lambda m: (m.time_ns, m.topic))):
                writer.write_message(m.topic, schemas[m.type], m.value, log_time=m.time_ns, publish_time=m.time_ns,
                                     sequence=seq)
            writer.add_metadata("rowbeam", metadata)
            writer.finish()
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    except FileExistsError:
        raise RowbeamError(f"{path}: exists; rowbeam never overwrites a file it cannot prove it wrote") from None
    except OSError as exc:
        raise RowbeamError(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        tmp.unlink(missing_ok=True)


def export_mcap(bundle_path, out, sensors=None) -> dict:
    """Write OUT (ROS 2 MCAP) and OUT.json (sidecar) from every event of `sensors` (default: all); return the sidecar."""
    bundle = Bundle.open(bundle_path)
    out = check_output_file(out, bundle.path)
    side = check_output_file(Path(str(out) + ".json"), bundle.path)
    _writer_class()
    events = [e for s in (sensors or bundle.sensors()) for e in bundle.events(s)]
    if not events:
        raise RowbeamError(f"{bundle.path}: no published events")
    messages, skipped = event_messages(events)
    messages += tf_messages(bundle, events)
    topics: dict[str, dict] = {}
    for m in messages:
        topics.setdefault(m.topic, {"type": m.type, "messages": 0})["messages"] += 1
    source = {"bundle": str(bundle.path), "events": len(events), "messages": len(messages), "topics": topics}
    stamps = {"rolling_shutter_camera": "reference_time_ns", "spinning_lidar": "sweep_start_ns",
              "radar": "frame_start_ns", "imu": "sample_time_ns (one message per sample)"}
    write_mcap(out, messages, {"lost": json.dumps(LOST + skipped), "header_stamps": json.dumps(stamps),
                               "conventions": "docs/mcap.md"})
    return write_sidecar(out, side, lambda: sidecar(FORMAT, out.name, source, LOST + skipped, _float32_error(events),
                                                    sha256=sha256_file(out), units="see docs/mcap.md",
                                                    header_stamps=stamps))


def _arguments(p) -> None:
    p.add_argument("bundle", help=BUNDLE_IN)
    p.add_argument("out", help="new .mcap file (sidecar: OUT + '.json')")
    p.add_argument("--sensor", action="append", help="sensor id (repeatable; default: every sensor)")


def _line(args, s: dict) -> str:
    err = ", ".join(f"{v:.3g} {k}" for k, v in s["max_rounding_error"].items())
    return (f"rowbeam adapt: wrote {args.out} ({s['source']['messages']} ROS 2 messages on {len(s['source']['topics'])} "
            f"topics from {s['source']['events']} events; float32 rounding {err}); {len(s['lost'])} losses in the sidecar")


ADAPTER_FORMATS = (AdapterFormat(
    "mcap", "ROS 2 MCAP: images, CameraInfo, PointCloud2 with per-point time, /tf from the state log, boxes",
    _arguments, lambda a: export_mcap(a.bundle, a.out, a.sensor), line=_line,
    description="OUT.mcap with ROS 2 (CDR) messages readable by Foxglove, RViz (ros2 bag play) and rosbags; "
                "topics, frames and time stamps: docs/mcap.md."),)
