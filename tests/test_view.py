"""`rowbeam view`: the small all-sensor bundle as a rerun recording, loaded back with rerun's own reader
(rerun.chunk.RrdReader): every timed entity's times and values against the bundle (LiDAR points at their firing
times, radar returns at their chirp times, camera poses at their row times, images and depth at the reference time,
state-log bodies at their sample times, IMU samples as scalar series at theirs); bad input: one line, exit 2, nothing written."""
from __future__ import annotations

import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest

from rowbeam.bundle.reader import Bundle
from rowbeam.model.state_log import load_state_log

from tests.conftest import REPO

pytest.importorskip("rerun")


def _view(*args):
    return subprocess.run([sys.executable, "-m", "rowbeam", "view", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=600)


def _rows(path) -> dict:
    """{(entity, component): [(time ns, value)]} of every timed row on the acquisition_time timeline."""
    import pyarrow as pa
    from rerun.chunk import RrdReader

    out = defaultdict(list)
    for chunk in RrdReader(path).stream():
        if chunk.is_static:
            continue
        b = chunk.to_record_batch()
        times = b.column("acquisition_time").cast(pa.int64()).to_pylist()
        for name in b.schema.names:
            if ":" in name:
                for t, v in zip(times, b.column(name).to_pylist(), strict=True):
                    out[(chunk.entity_path, name)].append((t, v))
    return {k: sorted(v, key=lambda tv: tv[0]) for k, v in out.items()}


@pytest.fixture(scope="module")
def recording(dusk_all_sensors, tmp_path_factory):
    out = tmp_path_factory.mktemp("view") / "dusk.rrd"
    r = _view(dusk_all_sensors, out)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout == f"rowbeam view: wrote {out} (5 events on timeline acquisition_time)\n"
    return _rows(out)


def _worst(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max(initial=0.0))


def test_recording_reloads_with_every_entity_at_its_acquisition_times(recording, dusk_all_sensors):
    bundle, worst = Bundle.open(dusk_all_sensors), defaultdict(float)
    for sensor in ("lidar_top", "radar_front"):
        p = next(bundle.events(sensor)).array("points")
        rows = recording[(f"/world/points/{sensor}", "Points3D:positions")]
        assert [t for t, _ in rows] == np.unique(p["t_ns"]).tolist()       # one row per firing / chirp time
        for t, xyz in rows:
            mine = p[p["t_ns"] == t]
            want = np.stack([mine["x_world"], mine["y_world"], mine["z_world"]], -1)
            assert np.array_equal(np.asarray(xyz, np.float32), want.astype(np.float32))
            worst["points (m, float32)"] = max(worst["points (m, float32)"], _worst(xyz, want))
    cams = list(bundle.events("camera_front"))
    rows = recording[("/world/camera_front", "Transform3D:translation")]
    assert [t for t, _ in rows] == np.concatenate([e.array("row_time_ns") for e in cams]).tolist()
    T = np.concatenate([e.array("row_T_world_camera") for e in cams])
    worst["camera row pose (m)"] = _worst([v[0] for _, v in rows], T[:, :3, 3])
    assert worst["camera row pose (m)"] < 1e-5
    for name, key, array in (("rgb", "Image:buffer", "rgb_display"), ("depth", "DepthImage:buffer", "camera_z")):
        rows = recording[(f"/world/camera_front/{name}", key)]
        assert [t for t, _ in rows] == [e.reference_time_ns for e in cams]
        for (_, buf), e in zip(rows, cams, strict=True):
            assert bytes(buf[0]) == np.ascontiguousarray(e.array(array)).tobytes()
    boxes = recording[("/world/camera_front/boxes", "Boxes3D:labels")]
    assert [sorted(v) for _, v in boxes] == [sorted(o["id"] for o in e.object_labels if o.get("box3d")) for e in cams]
    imu = next(bundle.events("imu_shuttle"))
    t_imu = imu.array("sample_time_ns").tolist()
    names = ("angular_velocity", "specific_force", "angular_velocity_measured", "specific_force_measured")
    assert set(names) <= set(imu.names)
    assert len(np.unique(imu.array("angular_velocity_measured"), axis=0)) == 20     # noisy: a sample's time matters
    for name in names:
        rows = recording[(f"/imu/imu_shuttle/{name}", "Scalars:scalars")]
        assert [t for t, _ in rows] == t_imu and len(t_imu) == 20
        assert np.array_equal(np.array([v for _, v in rows]), imu.array(name))        # float64, bit for bit
    rows = recording[("/world/imu_shuttle", "Transform3D:translation")]
    assert [t for t, _ in rows] == t_imu
    worst["imu pose (m)"] = _worst([v[0] for _, v in rows], imu.array("sample_T_world_imu")[:, :3, 3])
    assert worst["imu pose (m)"] < 1e-5
    samples = {}                                    # every export run's log: the union of their samples
    for e in bundle.events():
        track = load_state_log(bundle.path, e.manifest["state"])[1]["pedestrian"]
        samples.update({int(t): T for t, T in zip(track.t, track.T, strict=True)})
    rows = recording[("/world/bodies/pedestrian", "Transform3D:translation")]
    assert [t for t, _ in rows] == sorted(samples)
    worst["state-log body (m)"] = _worst([v[0] for _, v in rows], [samples[t][:3, 3] for t in sorted(samples)])
    assert worst["state-log body (m)"] < 1e-5
    print("\nview: " + ", ".join(f"{k} {v:.3g}" for k, v in worst.items()))


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    bundle = tmp_path / "b"
    (bundle / "events").mkdir(parents=True)
    existing = tmp_path / "x.rrd"
    existing.write_bytes(b"keep")
    for args, fragment in (((bundle, existing), "exists"), ((bundle, tmp_path / "n.rrd", "--sensor", "radar_9"),
                                                              "no events of sensor 'radar_9'")):
        r = _view(*args)
        assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
        assert r.stderr.startswith("rowbeam view: error: ") and fragment in r.stderr
    assert existing.read_bytes() == b"keep" and sorted(p.name for p in tmp_path.iterdir()) == ["b", "x.rrd"]
