"""`rowbeam adapt mcap`: the small all-sensor bundle (camera rows, LiDAR sweep, radar frame, IMU, state log) read back by an
independent reader (rosbags' MCAP reader and its own ROS 2 Humble typestore, not our message definitions), every
value compared with the bundle; header stamps against the rig's closed form (reference time, not the first row);
the ROS lens names against OpenCV's own projections; bad input: one line, exit 2, nothing written."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest

from rowbeam.adapters import ros_messages as rm
from rowbeam.adapters.ros_sensors import ros_lens
from rowbeam.bundle.reader import Bundle
from rowbeam.model.frames import T_BLENDER_CAMERA_OPENCV, matrix_from_quat_wxyz
from rowbeam.model.lens import LensSpec, make_lens, project
from rowbeam.model.state_log import load_state_log
from rowbeam.util.errors import RowbeamError

from tests.conftest import REPO

pytest.importorskip("rosbags")
STAMPS = {"rolling_shutter_camera": lambda e: e.reference_time_ns,
          "spinning_lidar": lambda e: e.manifest["event"]["sweep_start_ns"],
          "radar": lambda e: e.manifest["event"]["frame_start_ns"]}
FIELD_DTYPES = {1: "i1", 2: "u1", 3: "<i2", 4: "<u2", 5: "<i4", 6: "<u4", 7: "<f4", 8: "<f8"}


def _adapt(*args):
    return subprocess.run([sys.executable, "-m", "rowbeam", "adapt", "mcap", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def _read(path) -> dict:
    """{topic: [(log time ns, message)]} decoded by rosbags with its ROS 2 Humble typestore."""
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    out = defaultdict(list)
    with Reader(path) as reader:
        for conn, t, raw in reader.messages():
            out[conn.topic].append((t, store.deserialize_cdr(raw, conn.msgtype)))
    return out


def _ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def _matrix(p) -> np.ndarray:
    q, x = p.orientation, p.position
    T = np.eye(4)
    T[:3, :3] = matrix_from_quat_wxyz([q.w, q.x, q.y, q.z])
    T[:3, 3] = [x.x, x.y, x.z]
    return T


def _cloud(msg) -> np.ndarray:
    """PointCloud2 -> structured array from its own field table."""
    dtype = np.dtype({"names": [f.name for f in msg.fields], "formats": [FIELD_DTYPES[f.datatype] for f in msg.fields],
                      "offsets": [f.offset for f in msg.fields], "itemsize": msg.point_step})
    assert not msg.is_bigendian and msg.height == 1
    return np.frombuffer(bytes(msg.data), dtype, count=msg.width)


def _pixels(msg, dtype, channels=1) -> np.ndarray:
    assert msg.step == msg.width * channels * np.dtype(dtype).itemsize and not msg.is_bigendian
    shape = (msg.height, msg.width) + ((channels,) if channels > 1 else ())
    return np.frombuffer(bytes(msg.data), dtype).reshape(shape)


@pytest.fixture(scope="module")
def mcap(dusk_all_sensors, tmp_path_factory):
    out = tmp_path_factory.mktemp("mcap") / "dusk.mcap"
    r = _adapt(dusk_all_sensors, out)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"rowbeam adapt: wrote {out} (") and r.stderr == ""
    return out, _read(out), json.loads((out.parent / "dusk.mcap.json").read_text())


class Diff:
    """The largest |difference| seen per quantity (reported by the test)."""

    def __init__(self):
        self.worst = defaultdict(float)

    def __call__(self, name, a, b, tol):
        d = float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)), initial=0.0))
        self.worst[name] = max(self.worst[name], d)
        assert d <= tol, (name, d)


def _check_camera(topics, ev, diff):
    s, t, H = ev.sensor, ev.reference_time_ns, ev.manifest["event"]["rows"]
    at = {name: next(m for tt, m in topics[f"/{s}/{name}"] if tt == t)
          for name in ("camera_info", "image", "depth", "range", "instance_id", "semantic_id", "poses", "boxes")}
    info = at["camera_info"]
    assert (info.width, info.height, info.distortion_model) == (*ev.manifest["calibration"]["image_size_px"], "plumb_bob")
    assert np.array_equal(info.k, np.ravel(ev.manifest["calibration"]["K"])) and np.array_equal(info.d, [0.0] * 5)
    assert np.array_equal(np.reshape(info.p, (3, 4))[:, :3], ev.manifest["calibration"]["K"])
    assert info.header.frame_id == s and at["image"].encoding == "rgb8"
    assert np.array_equal(_pixels(at["image"], np.uint8, 3), ev.array("rgb_display"))
    for name in ("depth", "range"):
        assert at[name].encoding == "32FC1"
        assert np.array_equal(_pixels(at[name], "<f4"), ev.array("camera_z" if name == "depth" else "range"),
                              equal_nan=True)
    for name in ("instance_id", "semantic_id"):
        assert at[name].encoding == "32SC1"
        assert np.array_equal(_pixels(at[name], "<i4").view(np.uint32), ev.array(name))
    path = at["poses"].poses
    assert [_ns(p.header.stamp) for p in path] == ev.array("row_time_ns").tolist() and len(path) == H
    diff("row pose (m, rotation entries)", [_matrix(p.pose) for p in path], ev.array("row_T_world_camera"), 1e-12)
    labels = {o["instance_id"]: o for o in ev.object_labels}
    for m in at["boxes"].markers:
        o = labels[m.id]
        T = np.asarray(o["T_camera_object_reference"], np.float64)
        centre = T[:3, :3] @ o["box3d"]["centre_m"] + T[:3, 3]
        assert (m.text, m.ns, m.type, m.header.frame_id) == (o["id"], o["class"], 1, s)
        diff("box pose (m, rotation entries)", _matrix(m.pose), np.vstack([np.c_[T[:3, :3], centre], [0, 0, 0, 1]]), 1e-12)
        assert [m.scale.x, m.scale.y, m.scale.z] == o["box3d"]["size_m"]
    return len(at["boxes"].markers)


def _check_points(topics, ev, stamp, diff):
    p = ev.array("points")
    [(t, msg)] = [(t, m) for t, m in topics[f"/{ev.sensor}/points"] if _ns(m.header.stamp) == stamp]
    c = _cloud(msg)
    assert t == stamp and msg.header.frame_id == ev.sensor and c.size == p.size
    for name in ("x", "y", "z"):
        assert np.array_equal(c[name], p[name].astype(np.float32))
        diff("point xyz float32 rounding (m)", c[name], p[name], 1e-5)
    assert np.array_equal(c["t"].astype(np.int64), p["t_ns"] - stamp)
    diff("point time float32 (s)", c["time"], (p["t_ns"] - stamp) / 1e9, 1e-8)
    assert np.array_equal(c["instance_id"], p["instance_id"]) and np.array_equal(c["semantic_id"], p["semantic_id"])
    return c, p


def test_mcap_reads_back_through_rosbags_with_every_value_equal(mcap, dusk_all_sensors):
    out, topics, side = mcap
    bundle, diff = Bundle.open(dusk_all_sensors), Diff()
    boxes = 0
    for ev in bundle.events("camera_front"):
        boxes += _check_camera(topics, ev, diff)
    lidar = next(bundle.events("lidar_top"))
    c, p = _check_points(topics, lidar, lidar.manifest["event"]["sweep_start_ns"], diff)
    assert np.array_equal(c["ring"], p["channel"]) and np.array_equal(c["firing"], p["firing"])
    assert np.array_equal(c["range"], lidar.array("range")[p["firing"], p["channel"]])
    radar = next(bundle.events("radar_front"))
    c, p = _check_points(topics, radar, radar.manifest["event"]["frame_start_ns"], diff)
    assert np.array_equal(c["range"], p["range"].astype(np.float32))
    assert np.array_equal(c["radial_velocity"], p["radial_velocity"].astype(np.float32))
    assert np.array_equal(c["azimuth"], np.deg2rad(radar.array("azimuth_deg")[p["beam"]]).astype(np.float32))
    assert np.array_equal(c["chirp"], p["chirp"]) and np.array_equal(c["beam"], p["beam"])
    [(_, path)] = topics["/radar_front/poses"]
    assert [_ns(q.header.stamp) for q in path.poses] == (radar.manifest["event"]["frame_start_ns"]
                                                         + radar.array("time_offset_ns")).tolist()
    diff("chirp pose", [_matrix(q.pose) for q in path.poses], radar.array("chirp_T_world_radar"), 1e-12)
    [(_, path)] = topics["/lidar_top/poses"]
    diff("firing pose", [_matrix(q.pose) for q in path.poses], lidar.array("firing_T_world_lidar")[:, 0], 1e-12)
    _check_imu(topics, next(bundle.events("imu_shuttle")), diff)
    for ev in (e for e in bundle.events() if e.sensor_type in STAMPS):
        stamp = STAMPS[ev.sensor_type](ev)
        [table] = [json.loads(m.data) for t, m in topics[f"/{ev.sensor}/objects"] if t == stamp]
        assert [(o["render_index"], o["id"]) for o in table] == [(o["render_index"], str(o["id"])) for o in ev.objects]
    tf_count = _check_tf(topics, bundle, diff)
    n = sum(len(v) for v in topics.values())
    assert n == side["source"]["messages"] and side["format"] == "ros2_mcap"
    print(f"\nmcap: {n} messages on {len(topics)} topics ({tf_count} /tf, {boxes} boxes); max differences: "
          + ", ".join(f"{k} {v:.3g}" for k, v in diff.worst.items()))


def _check_imu(topics, ev, diff):
    """One sensor_msgs/Imu per sample at its own time in the IMU frame: /imu the measured channel with the declared
    white noise per sample as covariance (noise_density^2 * rate: 1.7e-4^2 * 200 (rad/s)^2, 2e-3^2 * 200 (m/s^2)^2),
    /imu_truth the truth (the shuttle cruises level: +g up, no rotation; specific force, not acceleration); poses."""
    s, t = ev.sensor, ev.array("sample_time_ns")
    for topic, suffix, (cov_w, cov_f) in (("imu", "_measured", (1.7e-4 ** 2 * 200, 2e-3 ** 2 * 200)),
                                          ("imu_truth", "", (0.0, 0.0))):
        msgs = topics[f"/{s}/{topic}"]
        assert [tt for tt, _ in msgs] == [_ns(m.header.stamp) for _, m in msgs] == t.tolist()
        assert all(m.header.frame_id == s and m.orientation_covariance[0] == -1 for _, m in msgs)
        w = [[m.angular_velocity.x, m.angular_velocity.y, m.angular_velocity.z] for _, m in msgs]
        f = [[m.linear_acceleration.x, m.linear_acceleration.y, m.linear_acceleration.z] for _, m in msgs]
        assert np.array_equal(w, ev.array(f"angular_velocity{suffix}"))
        assert np.array_equal(f, ev.array(f"specific_force{suffix}"))
        for _, m in msgs:
            assert np.allclose(m.angular_velocity_covariance, np.eye(3).ravel() * cov_w, rtol=1e-12, atol=0)
            assert np.allclose(m.linear_acceleration_covariance, np.eye(3).ravel() * cov_f, rtol=1e-12, atol=0)
    truth = [[m.linear_acceleration.x, m.linear_acceleration.y, m.linear_acceleration.z]
             for _, m in topics[f"/{s}/imu_truth"]]
    diff("IMU truth at cruise vs (0, 0, +g) (m/s^2)", truth, np.tile([0.0, 0.0, 9.80665], (len(t), 1)), 1e-9)
    [(_, path)] = topics[f"/{s}/poses"]
    assert [_ns(q.header.stamp) for q in path.poses] == t.tolist()
    diff("IMU sample pose", [_matrix(q.pose) for q in path.poses], ev.array("sample_T_world_imu"), 1e-12)


def _check_tf(topics, bundle, diff) -> int:
    """/tf: every state-log sample of every body at its time; /tf_static: the mounts; the chain world -> ego_camera
    (log, interpolated at each row time) -> camera_front (static) lands on the exported row poses."""
    tf = {(_ns(x.header.stamp), x.child_frame_id): x for _, m in topics["/tf"] for x in m.transforms}
    assert all(x.header.frame_id == "world" for x in tf.values())
    ev = bundle.event("camera_front", 30)
    log, tracks = load_state_log(bundle.path, ev.manifest["state"])
    for name, track in tracks.items():
        for t, T in zip(track.t, track.T, strict=True):
            x = tf[(int(t), name)].transform
            diff("tf sample", _matrix(type("P", (), {"position": x.translation, "orientation": x.rotation})), T, 1e-12)
    [(_, static)] = topics["/tf_static"]
    mounts = {x.child_frame_id: x for x in static.transforms}
    assert mounts["camera_front"].header.frame_id == "ego_camera"
    assert mounts["lidar_top"].header.frame_id == "lidar_mount" and mounts["radar_front"].header.frame_id == "radar_mount"
    assert mounts["imu_shuttle"].header.frame_id == "imu_mount"
    q = mounts["camera_front"].transform.rotation
    assert np.allclose(matrix_from_quat_wxyz([q.w, q.x, q.y, q.z]), T_BLENDER_CAMERA_OPENCV[:3, :3], atol=1e-15)
    chain = [tracks["ego_camera"].pose(t) @ T_BLENDER_CAMERA_OPENCV for t in ev.array("row_time_ns")]
    diff("tf chain vs row pose (interpolated log)", chain, ev.array("row_T_world_camera"), 1e-4)
    return len(topics["/tf"])


def test_stamps_follow_the_declared_convention_where_the_alternatives_differ(mcap, dusk_all_sensors):
    """Camera: event 30 at 30 Hz starts at 1 s; readout 12 ms, exposure 4 ms: stamp = 1 s + (12 + 4)/2 ms (the
    reference time), not the first row's exposure centre (1 s + 12/90 ms + 2 ms) nor the frame start. LiDAR sweep 10
    at 10 Hz: stamp = 1 s, t = k * 1e9 / (10 * 256) ns for firing k (uniform_32: no channel offsets)."""
    _, topics, _ = mcap
    rig = json.loads((dusk_all_sensors / "bundle.json").read_text())["rig"]["sensors"]
    cam = next(s for s in rig if s["id"] == "camera_front")
    start = 30 * 10**9 // cam["rate_hz"]
    reference = start + (cam["readout_ns"] + cam["exposure_ns"]) // 2
    first_row = start + cam["readout_ns"] // (2 * 45) + cam["exposure_ns"] // 2
    assert len({reference, first_row, start}) == 3
    stamps = sorted(_ns(m.header.stamp) for _, m in topics["/camera_front/image"])
    assert stamps[0] == reference == 1_008_000_000
    assert all(t == _ns(m.header.stamp) for t, m in topics["/camera_front/image"])
    [(t, cloud)] = topics["/lidar_top/points"]
    assert t == _ns(cloud.header.stamp) == 1_000_000_000
    c = _cloud(cloud)
    assert np.array_equal(c["t"].astype(np.int64), (c["firing"].astype(np.int64) * 10**9) // (10 * 256))


def test_message_definitions_are_the_ros2_humble_ones():
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    for name in rm.DEFINITIONS:
        theirs = store.generate_msgdef(rm.schema_name(name), ros_version=2)[0]
        assert sorted(rm.msgdef(name).split("=" * 80)) == sorted(theirs.split("=" * 80)), name


@pytest.mark.parametrize("model, D, ros", [
    ("pinhole", (), "plumb_bob"), ("opencv", (-0.2, 0.05, 1e-3, -5e-4), "plumb_bob"),
    ("opencv", (-0.2, 0.05, 1e-3, -5e-4, -0.01), "plumb_bob"),
    ("opencv", (0.1, -0.02, 1e-3, 5e-4, 0.001, 0.05, -0.01, 0.002), "rational_polynomial"),
    ("opencv_fisheye", (0.05, -0.01, 0.002, -0.0005), "equidistant")])
def test_ros_lens_names_project_like_opencv(model, D, ros):
    """The ROS distortion model and d of each rowbeam lens, fed to OpenCV's own projection (plumb_bob and
    rational_polynomial: cv2.projectPoints; equidistant: cv2.fisheye.projectPoints), land where rowbeam's lens does."""
    cv2 = pytest.importorskip("cv2")
    K = np.array([[300.0, 0, 160.5], [0, 301.0, 120.25], [0, 0, 1]])
    lens = make_lens(LensSpec(model, tuple(D)), K, 320, 240)
    name, d = ros_lens(lens.to_manifest())
    assert name == ros
    rng = np.random.default_rng(1)
    P = np.c_[rng.uniform(-0.4, 0.4, (50, 2)), np.ones(50)] * rng.uniform(1, 20, (50, 1))
    ours = project(lens, P)[0]
    if ros == "equidistant":
        theirs = cv2.fisheye.projectPoints(P[None], np.zeros(3), np.zeros(3), K, np.array(d))[0][0]
    else:
        theirs = cv2.projectPoints(P, np.zeros(3), np.zeros(3), K, np.array(d))[0][:, 0]
    assert np.abs(ours - theirs).max() < 1e-9


def test_a_lens_without_a_ros_model_is_refused():
    with pytest.raises(RowbeamError, match="no ROS CameraInfo equivalent"):
        ros_lens({"model": "opencv", "coefficients": [0.1, 0.2, 0.0, 0.0, 0.0, 0.1]})


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    bundle = tmp_path / "b"
    (bundle / "events").mkdir(parents=True)
    existing = tmp_path / "x.mcap"
    existing.write_bytes(b"keep")
    for args, fragment in (((bundle, existing), "exists"), ((bundle, tmp_path / "n.mcap", "--sensor", "lidar_9"),
                                                              "no events of sensor 'lidar_9'"),
                           ((tmp_path / "nothing", tmp_path / "n.mcap"), "not a bundle folder")):
        r = _adapt(*args)
        assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
        assert r.stderr.startswith("rowbeam adapt mcap: error: ") and fragment in r.stderr
    assert existing.read_bytes() == b"keep" and sorted(p.name for p in tmp_path.iterdir()) == ["b", "x.mcap"]
