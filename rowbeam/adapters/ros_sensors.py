"""ROS 2 messages of one event, per sensor type: ROS_SENSORS[type].messages(event) -> [RosMessage]. A new sensor type
is one function and one entry.

Conventions (docs/mcap.md): topics /<sensor>/...; frame_id of sensor data = the sensor id (camera: OpenCV optical =
ROS optical frame, x right, y down, z forward; LiDAR/radar: x forward, y left, z up); times on the scene clock.
- camera: every message stamped at the event's reference_time_ns (the centre of the frame's exposure window,
  frame_start_ns + (readout_ns + exposure_ns)/2, the time of calibration.T_camera_world); each row's own time and
  pose in /<sensor>/poses (nav_msgs/Path, one PoseStamped per row, stamped at the row's time).
- LiDAR: PointCloud2 stamped at sweep_start_ns; per point `t` (uint32 ns) and `time` (float32 s) after the stamp.
- radar: PointCloud2 stamped at frame_start_ns; per point `t` / `time` likewise (the chirp's time).
- IMU: one sensor_msgs/Imu per sample, stamped at the sample's time (sample_time_ns).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from rowbeam.adapters import ros_messages as rm
from rowbeam.bundle.reader import Event
from rowbeam.model.frames import T_BLENDER_CAMERA_OPENCV
from rowbeam.sensors import type_of
from rowbeam.util.errors import RowbeamError

CAMERA, LIDAR, RADAR, IMU = "rolling_shutter_camera", "spinning_lidar", "radar", "imu"
WORLD = "world"
INT32_MAX = 2**31 - 1
# rowbeam distortion model -> (ROS distortion_model, coefficient count ROS expects, in OpenCV order)
ROS_LENSES = {("none", 0): ("plumb_bob", 5), ("opencv", 4): ("plumb_bob", 5), ("opencv", 5): ("plumb_bob", 5),
              ("opencv", 8): ("rational_polynomial", 8), ("opencv_fisheye", 4): ("equidistant", 4)}


@dataclass(frozen=True)
class RosMessage:
    topic: str
    type: str          # 'pkg/Type' (rowbeam.adapters.ros_messages.DEFINITIONS)
    time_ns: int       # log time (= the header stamp)
    value: dict


@dataclass(frozen=True)
class RosSensor:
    """messages(event) -> the event's messages; T_mount_sensor: the sensor frame in its mount object's local axes."""
    messages: Callable[[Event], list[RosMessage]]
    T_mount_sensor: Any


def ros_lens(distortion: dict) -> tuple[str, list[float]]:
    """(ROS CameraInfo distortion_model, d) of a manifest's calibration.distortion; RowbeamError when ROS has none."""
    model, coeffs = distortion["model"], [float(c) for c in distortion.get("coefficients", [])]
    found = ROS_LENSES.get((model, len(coeffs)))
    if found is None:
        raise RowbeamError(f"lens model {model!r} with {len(coeffs)} coefficients has no ROS CameraInfo equivalent")
    name, count = found
    return name, coeffs + [0.0] * (count - len(coeffs))


def camera_info(event: Event, t_ns: int) -> dict:
    """sensor_msgs/CameraInfo: K, D in ROS terms, R = I, P = [K | 0], no binning, full-image ROI."""
    cal = event.manifest["calibration"]
    if cal.get("pixel_convention", "opencv") != "opencv":
        raise RowbeamError(f"{event.path}: pixel convention {cal['pixel_convention']!r} is not ROS's (opencv)")
    W, H = cal["image_size_px"]
    K = np.asarray(cal["K"], np.float64)
    model, d = ros_lens(cal["distortion"])
    return {"header": rm.header(t_ns, event.sensor), "height": H, "width": W, "distortion_model": model, "d": d,
            "k": [float(x) for x in K.ravel()], "r": [float(x) for x in np.eye(3).ravel()],
            "p": [float(x) for x in np.hstack([K, np.zeros((3, 1))]).ravel()], "binning_x": 0, "binning_y": 0,
            "roi": {"x_offset": 0, "y_offset": 0, "height": 0, "width": 0, "do_rectify": False}}


def int32_ids(ids: np.ndarray, name: str, reserved=()) -> np.ndarray:
    """uint32 ids as int32 (32SC1): values <= 2^31 - 1 kept, `reserved` values (e.g. the void class 4294967295)
    keep their bits (read -1); any other larger id is refused."""
    ids = np.asarray(ids, np.uint32)
    big = (ids > INT32_MAX) & ~np.isin(ids, np.asarray(reserved, np.uint32))
    if big.any():
        raise RowbeamError(f"{name} {int(ids[big][0])} does not fit a 32SC1 image")
    return ids.view(np.int32)


def objects_message(event: Event, t_ns: int) -> RosMessage:
    """/<sensor>/objects: std_msgs/String holding the event's objects table as JSON (render index -> stable 64-bit
    id (decimal string), name, class)."""
    table = [{"render_index": o["render_index"], "id": str(o["id"]), "name": o.get("name"),
              "class_id": o.get("class_id"), "class": o.get("class_tag")} for o in event.objects]
    return RosMessage(f"/{event.sensor}/objects", "std_msgs/String", t_ns,
                      rm.string(json.dumps(table, separators=(",", ":"))))


def poses_message(event: Event, t_ns: int) -> RosMessage | None:
    """/<sensor>/poses: nav_msgs/Path in `world` of the sensor frame's pose at each of its acquisition times (camera
    rows, LiDAR firing groups, radar chirps), each PoseStamped stamped at its own time; None without poses."""
    kind = type_of(event.manifest)
    found = kind.poses(event.manifest, event.arrays([n for n in kind.pose_arrays if n in event.names]
                                                    + (["time_offset_ns"] if "time_offset_ns" in event.names else [])))
    if found is None:
        return None
    times, T_world_mount, _ = found
    T = np.asarray(T_world_mount) @ ROS_SENSORS[kind.name].T_mount_sensor
    poses = [{"header": rm.header(int(t), WORLD), "pose": rm.pose(M)} for t, M in zip(times, T, strict=True)]
    return RosMessage(f"/{event.sensor}/poses", "nav_msgs/Path", t_ns, {"header": rm.header(t_ns, WORLD),
                                                                         "poses": poses})


def box_markers(event: Event, t_ns: int) -> RosMessage | None:
    """/<sensor>/boxes: visualization_msgs/MarkerArray, one CUBE per labelled object with a 3D box, in the camera
    frame at the reference time (pose = T_camera_object_reference with the box centre, scale = box size, m):
    ns = class, id = render index, text = the stable 64-bit id (decimal)."""
    markers = []
    for o in event.object_labels:
        box = o.get("box3d")
        if not box or o.get("T_camera_object_reference") is None:
            continue
        T = np.asarray(o["T_camera_object_reference"], np.float64).copy()
        T[:3, 3] = T[:3, :3] @ np.asarray(box["centre_m"], np.float64) + T[:3, 3]
        sx, sy, sz = (float(s) for s in box["size_m"])
        markers.append({"header": rm.header(t_ns, event.sensor), "ns": o.get("class") or "", "id": int(o["instance_id"]),
                        "type": 1, "action": 0, "pose": rm.pose(T), "scale": {"x": sx, "y": sy, "z": sz},
                        "color": {"r": 0.1, "g": 0.9, "b": 0.3, "a": 0.5}, "lifetime": {"sec": 0, "nanosec": 0},
                        "frame_locked": False, "points": [], "colors": [], "texture_resource": "",
                        "texture": {"header": rm.header(0, ""), "format": "", "data": b""}, "uv_coordinates": [],
                        "text": str(o["id"]), "mesh_resource": "", "mesh_file": {"filename": "", "data": b""},
                        "mesh_use_embedded_materials": False})
    if not markers:
        return None
    return RosMessage(f"/{event.sensor}/boxes", "visualization_msgs/MarkerArray", t_ns, {"markers": markers})


def camera_messages(event: Event) -> list[RosMessage]:
    """camera_info, image (rgb8 display), depth (32FC1 camera_z, m, NaN = no surface), range (32FC1, m),
    instance_id / semantic_id (32SC1), poses, objects, boxes."""
    from rowbeam.adapters.objects import display_image

    s, t = event.sensor, event.reference_time_ns
    out = [RosMessage(f"/{s}/camera_info", "sensor_msgs/CameraInfo", t, camera_info(event, t))]
    rgb, _ = display_image(event)
    if rgb is not None:
        out.append(RosMessage(f"/{s}/image", "sensor_msgs/Image", t, rm.image(t, s, rgb, "rgb8")))
    for name, topic in (("camera_z", "depth"), ("range", "range")):
        if name in event.names:
            out.append(RosMessage(f"/{s}/{topic}", "sensor_msgs/Image", t,
                                  rm.image(t, s, event.array(name).astype(np.float32), "32FC1")))
    for name, reserved in (("instance_id", ()), ("semantic_id", (0xFFFFFFFF,))):
        if name in event.names:
            out.append(RosMessage(f"/{s}/{name}", "sensor_msgs/Image", t,
                                  rm.image(t, s, int32_ids(event.array(name), name, reserved), "32SC1")))
    return out + [m for m in (poses_message(event, t), objects_message(event, t), box_markers(event, t)) if m]


def _time_columns(t_ns: np.ndarray, stamp_ns: int) -> dict:
    """`t` (uint32 ns after the stamp, Ouster convention) and `time` (float32 s after the stamp, Velodyne)."""
    dt = np.asarray(t_ns, np.int64) - int(stamp_ns)
    if dt.size and (dt.min() < 0 or dt.max() > 0xFFFFFFFF):
        raise RowbeamError(f"point times {int(dt.min())}..{int(dt.max())} ns after the stamp do not fit uint32 ns")
    return {"t": dt.astype(np.uint32), "time": (dt / 1e9).astype(np.float32)}


def lidar_messages(event: Event) -> list[RosMessage]:
    """points: PointCloud2 (x y z float32 m in the LiDAR frame at the point's own time, t, time, ring = channel,
    firing, range float32 m, instance_id, semantic_id) stamped at sweep_start_ns; poses; objects."""
    s, stamp = event.sensor, int(event.manifest["event"]["sweep_start_ns"])
    p = event.array("points")
    rng = event.array("range")[p["firing"].astype(np.int64), p["channel"].astype(np.int64)]
    cols = {"x": p["x"].astype(np.float32), "y": p["y"].astype(np.float32), "z": p["z"].astype(np.float32),
            **_time_columns(p["t_ns"], stamp), "ring": p["channel"].astype(np.uint16),
            "firing": p["firing"].astype(np.uint32), "range": rng.astype(np.float32),
            "instance_id": p["instance_id"].astype(np.uint32), "semantic_id": p["semantic_id"].astype(np.uint32)}
    out = [RosMessage(f"/{s}/points", "sensor_msgs/PointCloud2", stamp, rm.point_cloud(stamp, s, cols))]
    return out + [m for m in (poses_message(event, stamp), objects_message(event, stamp)) if m]


def radar_messages(event: Event) -> list[RosMessage]:
    """points: PointCloud2 (x y z float32 m in the radar frame at the chirp's time, range, azimuth / elevation
    float32 rad of the beam, radial_velocity float32 m/s (positive = receding), t, time, chirp, beam, instance_id,
    semantic_id) stamped at frame_start_ns; poses; objects."""
    s, stamp = event.sensor, int(event.manifest["event"]["frame_start_ns"])
    p = event.array("points")
    beam = p["beam"].astype(np.int64)
    cols = {"x": p["x"].astype(np.float32), "y": p["y"].astype(np.float32), "z": p["z"].astype(np.float32),
            "range": p["range"].astype(np.float32),
            "azimuth": np.deg2rad(event.array("azimuth_deg")[beam]).astype(np.float32),
            "elevation": np.deg2rad(event.array("elevation_deg")[beam]).astype(np.float32),
            "radial_velocity": p["radial_velocity"].astype(np.float32), **_time_columns(p["t_ns"], stamp),
            "chirp": p["chirp"].astype(np.uint32), "beam": p["beam"].astype(np.uint32),
            "instance_id": p["instance_id"].astype(np.uint32), "semantic_id": p["semantic_id"].astype(np.uint32)}
    out = [RosMessage(f"/{s}/points", "sensor_msgs/PointCloud2", stamp, rm.point_cloud(stamp, s, cols))]
    return out + [m for m in (poses_message(event, stamp), objects_message(event, stamp)) if m]


def imu_covariances(event: Event) -> tuple[list[float], list[float]]:
    """(angular_velocity_covariance, linear_acceleration_covariance), row-major 3x3: per axis the variance of one
    sample's white noise, noise_density^2 * rate_hz ((rad/s)^2, (m/s^2)^2; Kalibr's discrete-time sigma squared),
    of the event's declared noise model; all zeros without one (ROS: unknown; the truth carries no noise)."""
    noise = event.manifest["calibration"].get("noise")
    rate = float(event.manifest["event"]["rate_hz"])
    return tuple([float(x) for x in np.eye(3).ravel() * (noise[f"{part}_noise_density"] ** 2 * rate if noise else 0.0)]
                 for part in ("gyroscope", "accelerometer"))


def imu_message(t_ns: int, frame_id: str, omega, force, covariances) -> dict:
    """sensor_msgs/Imu: angular_velocity (rad/s) and linear_acceleration = specific force (m/s^2), both in the IMU
    frame; no orientation (orientation_covariance[0] = -1, REP 145)."""
    vec = [{"x": float(v[0]), "y": float(v[1]), "z": float(v[2])} for v in (omega, force)]
    return {"header": rm.header(t_ns, frame_id), "orientation": {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0},
            "orientation_covariance": [-1.0] + [0.0] * 8, "angular_velocity": vec[0],
            "angular_velocity_covariance": covariances[0], "linear_acceleration": vec[1],
            "linear_acceleration_covariance": covariances[1]}


def imu_messages(event: Event) -> list[RosMessage]:
    """imu: one sensor_msgs/Imu per sample, the measured channel where the event has one (covariance: its declared
    white noise), else the truth (covariance zeros); imu_truth: the truth too when imu is measured; poses."""
    s, t = event.sensor, event.array("sample_time_ns")
    measured = "angular_velocity_measured" in event.names
    channels = [("imu", "_measured" if measured else "", imu_covariances(event))]
    if measured:
        channels.append(("imu_truth", "", ([0.0] * 9, [0.0] * 9)))
    out = []
    for topic, suffix, cov in channels:
        omega, force = event.array(f"angular_velocity{suffix}"), event.array(f"specific_force{suffix}")
        out += [RosMessage(f"/{s}/{topic}", "sensor_msgs/Imu", int(ti), imu_message(int(ti), s, w, f, cov))
                for ti, w, f in zip(t, omega, force, strict=True)]
    poses = poses_message(event, int(t[0]))
    return out + ([poses] if poses else [])


ROS_SENSORS = {
    CAMERA: RosSensor(camera_messages, T_BLENDER_CAMERA_OPENCV),
    LIDAR: RosSensor(lidar_messages, np.eye(4)),
    RADAR: RosSensor(radar_messages, np.eye(4)),
    IMU: RosSensor(imu_messages, np.eye(4)),
}
