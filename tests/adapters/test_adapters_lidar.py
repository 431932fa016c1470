"""LiDAR adapters (`adapt kitti-lidar`, `adapt ply`) read back by independent readers — numpy.fromfile for the
KITTI velodyne .bin, a PLY parser written here from the PLY 1.0 header grammar — and compared with the
closed-form sweep of a mount translating at 15 m/s (rig-derived beam times and directions, analytic ranges)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from rowbeam import adapters  # noqa: F401  (package import)
from rowbeam.adapters import lidar_formats
from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import sha256_file
from rowbeam.bundle.schema import schema_errors
from rowbeam.blender.scenes import lidar_calibration as lc

from tests.conftest import run_python
from tests.sensors.test_lidar import SWEEP, _rig_beams

STEPS = 64


@pytest.fixture(scope="module")
def ego(exports):
    return exports("adapt_ego_translating", lc.ego_translating, steps=STEPS)


def _truth(e):
    sensor = json.loads(e.rig.read_text())["sensors"][0]
    beams = _rig_beams(sensor, SWEEP)
    t, dirs = beams["t"].reshape(-1), beams["dirs"].reshape(-1, 3)     # (firing, channel) order = point order
    ranges = np.array([e.truth.expected_range(tt, d) for tt, d in zip(beams["t"].reshape(-1), dirs, strict=True)])
    return t, dirs, ranges, beams["reference"]


def _adapt(*args):
    r = run_python("-m", "rowbeam", "adapt", *args)
    return r


def _sidecar_ok(folder):
    side = json.loads((folder / lidar_formats.FOLDER_SIDECAR).read_text())
    assert not schema_errors(side, "rowbeam/adapter_sidecar@1")
    for rel, digest in side["files"].items():
        assert sha256_file(folder / rel) == digest
    return side


def test_kitti_velodyne_bin_own_time_and_motion_compensated(ego, tmp_path):
    t, dirs, ranges, t_ref = _truth(ego)
    out = tmp_path / "kitti"
    r = _adapt("kitti-lidar", ego.bundle, out)
    assert r.returncode == 0, r.stderr
    pts = np.fromfile(out / "velodyne" / f"{SWEEP:06d}.bin", dtype="<f4").reshape(-1, 4)
    assert len(pts) == len(t) == STEPS * 32                           # a closed corridor: every beam returns
    xyz = pts[:, :3].astype(np.float64)
    # each point in the LiDAR frame at its own beam time: along its rig beam at the analytic range
    assert np.abs(np.linalg.norm(xyz, axis=1) - ranges).max() < 1e-4
    assert np.abs(xyz / np.linalg.norm(xyz, axis=1)[:, None] - dirs).max() < 1e-5
    assert pts[:, 3].min() >= 0 and pts[:, 3].max() <= 1 and pts[:, 3].max() > 0.5     # cos_incidence
    side = _sidecar_ok(out)
    assert side["format"] == "kitti_velodyne_bin" and "own beam time" in side["frame"]
    assert 0 < side["max_rounding_error"]["m"] < 1e-5 and "cos_incidence" in side["intensity"]

    ref = tmp_path / "kitti_ref"
    r = _adapt("kitti-lidar", ego.bundle, ref, "--frame", "reference", "--intensity", "zero")
    assert r.returncode == 0, r.stderr
    comp = np.fromfile(ref / "velodyne" / f"{SWEEP:06d}.bin", dtype="<f4").reshape(-1, 4)
    assert not comp[:, 3].any()
    # the same world point: pose(t_beam) @ own-time point == pose(t_ref) @ compensated point
    world_own = xyz + np.stack([ego.truth.pose(tt)[:3, 3] for tt in t])
    world_ref = comp[:, :3].astype(np.float64) + ego.truth.pose(t_ref)[:3, 3]
    assert np.abs(world_own - world_ref).max() < 1e-4
    shift = np.abs(comp[:, 0] - xyz[:, 0]).max()                  # 15 m/s over half a sweep: ~0.75 m
    assert shift == pytest.approx(15.0 * (t_ref - t.min()) * 1e-9, rel=0.05)


def _read_ply(path):
    """Binary little-endian PLY reader from the PLY 1.0 header grammar: `element NAME COUNT`, `property TYPE NAME`."""
    types = {"char": "i1", "uchar": "u1", "short": "<i2", "ushort": "<u2", "int": "<i4", "uint": "<u4",
             "float": "<f4", "double": "<f8"}
    raw = path.read_bytes()
    end = raw.index(b"end_header\n") + len(b"end_header\n")
    lines = raw[:end].decode("ascii").splitlines()
    assert lines[0] == "ply" and lines[1] == "format binary_little_endian 1.0"
    count, fields = None, []
    for line in lines[2:]:
        words = line.split()
        if words[0] == "element":
            assert words[1] == "vertex"
            count = int(words[2])
        elif words[0] == "property":
            fields.append((words[2], types[words[1]]))
    data = np.frombuffer(raw[end:], dtype=np.dtype(fields))
    assert len(data) == count
    return data, [w for w in lines if w.startswith("comment")]


def test_ply_has_every_return_with_its_exact_time(ego, tmp_path):
    from tests.helpers import load_event

    t, _, ranges, _ = _truth(ego)
    out = tmp_path / "sweep.ply"
    r = _adapt("ply", ego.event, out)
    assert r.returncode == 0, r.stderr
    data, comments = _read_ply(out)
    assert np.array_equal(data["t_ns"].astype(np.int64), t)       # exact: integer-valued doubles
    xyz = np.stack([data["x"], data["y"], data["z"]], -1)
    assert np.abs(np.linalg.norm(xyz, axis=1) - ranges).max() < 1e-4
    m, a = load_event(ego.event)
    assert np.array_equal(data["cos_incidence"], a["cos_incidence"][data["firing"], data["channel"]])
    assert np.array_equal(data["instance_id"], a["points"]["instance_id"])
    assert any(m["sample_id"] in c for c in comments)
    side = json.loads((tmp_path / "sweep.ply.json").read_text())
    assert not schema_errors(side, "rowbeam/adapter_sidecar@1") and side["sha256"] == sha256_file(out)
    assert side["max_rounding_error"] == {"m": 0.0, "ns": 0.0}
    # a bundle gives one PLY per LiDAR event
    folder = tmp_path / "plys"
    assert _adapt("ply", ego.bundle, folder).returncode == 0
    assert (folder / "lidar_top" / f"{SWEEP:06d}.ply").read_bytes() == out.read_bytes()
    _sidecar_ok(folder)


def test_lidar_adapter_errors_are_one_line_and_leave_nothing(ego, tmp_path, monkeypatch):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    cases = [(("kitti-lidar", ego.bundle, busy), "not empty"),
             (("kitti-lidar", ego.bundle, ego.bundle / "events" / "out"), "inside the bundle"),
             (("kitti-lidar", tmp_path / "nothing", tmp_path / "o1"), "not a bundle folder"),
             (("kitti-lidar", ego.bundle, tmp_path / "o2", "--sensor", "nope"), "no events of sensor 'nope'"),
             (("ply", ego.event, ego.event / "x.ply"), "inside the bundle"),
             (("ply", ego.event, tmp_path / "missing" / "x.ply"), "does not exist")]
    for args, fragment in cases:
        r = _adapt(*args)
        assert r.returncode == 2, (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"rowbeam adapt {args[0]}: error:") and fragment in lines[0], (args, lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy"]
    # a failure while writing removes the staged folder: no OUT_DIR, no temp sibling
    calls = []

    def failing(path, data):
        calls.append(path)
        raise RowbeamError(f"{path}: cannot write (No space left on device)")
    monkeypatch.setattr(lidar_formats, "write_file", failing)
    with pytest.raises(RowbeamError, match="No space left"):
        lidar_formats.export_kitti_lidar(ego.bundle, tmp_path / "o3")
    assert calls and sorted(p.name for p in tmp_path.iterdir()) == ["busy"]
