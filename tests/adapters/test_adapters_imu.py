"""IMU adapter (`adapt euroc-imu`) read back with the csv module and compared with the closed form of uniform
circular motion (not with the bundle): every sample, EuRoC header, units, noise file."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from rowbeam.adapters import imu_formats
from rowbeam.blender.scenes import imu_scenes
from rowbeam.bundle.schema import schema_errors
from rowbeam.util.errors import RowbeamError

from tests.conftest import run_python

NOISE = {"gyroscope_noise_density": 1.7e-4, "gyroscope_random_walk": 1.9e-5, "accelerometer_noise_density": 2e-3,
         "accelerometer_random_walk": 3e-3, "seed": 3}


@pytest.fixture(scope="module")
def circle(exports):
    return exports("adapt_imu_circular", imu_scenes.circular, first_event=0, count=2, noise=NOISE)


def _rows(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], np.array([[float(x) for x in r] for r in rows[1:]])


def test_euroc_csv_against_the_closed_form(circle, tmp_path):
    r = run_python("-m", "rowbeam", "adapt", "euroc-imu", circle.bundle, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    header, truth = _rows(tmp_path / "out" / "imu" / "truth.csv")
    assert ",".join(header) == imu_formats.HEADER
    assert header[1] == "w_RS_S_x [rad s^-1]" and header[6] == "a_RS_S_z [m s^-2]"
    t = truth[:, 0].astype(np.int64)
    assert len(t) == 40 and t[0] == 0 and np.all(np.diff(t) == 5_000_000)          # 200 Hz from 0
    expected = np.array([np.r_[circle.truth.omega(x), circle.truth.force(x)] for x in t * 1e-9])
    assert np.abs(truth[:, 1:] - expected).max() <= 1e-12
    _, data = _rows(tmp_path / "out" / "imu" / "data.csv")
    assert np.array_equal(data[:, 0], truth[:, 0]) and not np.array_equal(data[:, 1:], truth[:, 1:])
    noise = (data[:, 1:] - truth[:, 1:]).std(0)
    assert 0.3 < noise[0] / (1.7e-4 * np.sqrt(200)) < 3                     # white noise of the declared density
    yaml = (tmp_path / "out" / "imu" / "imu.yaml").read_text()
    assert "gyroscope_noise_density: 0.00017\n" in yaml and "update_rate: 200.0\n" in yaml
    side = json.loads((tmp_path / "out" / "rowbeam_adapter_sidecar.json").read_text())
    assert side["format"] == "euroc_imu_csv" and not schema_errors(side, side["schema"])


def test_read_csv_round_trips(tmp_path):
    t = np.array([0, 5, 10], np.int64)
    w = np.random.default_rng(0).normal(size=(3, 3))
    f = np.random.default_rng(1).normal(size=(3, 3))
    t2, w2, f2 = imu_formats.read_csv(imu_formats.csv_text(t, w, f))
    assert np.array_equal(t, t2) and np.array_equal(w, w2) and np.array_equal(f, f2)


def test_unknown_sensor_is_one_line(tmp_path, circle):
    with pytest.raises(RowbeamError, match="no events of sensor .nope."):
        imu_formats.export_euroc_imu(circle.bundle, tmp_path / "o", sensor="nope")
