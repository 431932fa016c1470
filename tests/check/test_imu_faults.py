"""Planted faults for every IMU check: each plants one fault in a copy of a correct export (a tilted mount spinning
about its own z, with a noise model, so world and IMU frames differ and the measured channel exists), payloads
re-encoded with the exporter's writers and rehashed, and asserts that very check's status in the QA report dict.
The table check -> test -> assertion is in docs/check.md."""
from __future__ import annotations

import numpy as np
import pytest

from rowbeam.blender.scenes import imu_scenes

from tests.check.test_checker_faults import _copy, _edit_manifest, _replace
from tests.check.test_planted_faults import fails, passes, status
from tests.helpers import load_event

NOISE = {"gyroscope_noise_density": 1.7e-4, "gyroscope_random_walk": 1.9e-5, "accelerometer_noise_density": 2e-3,
         "accelerometer_random_walk": 3e-3, "seed": 7}


@pytest.fixture(scope="module")
def spin(exports):
    return exports("imu_spin_noisy", imu_scenes.yaw_rate, first_event=1, count=1, tilt=0.6, noise=NOISE)


def _event(spin, tmp_path):
    root, ev = _copy(spin, tmp_path)
    return root, ev, load_event(ev)[1]


def test_clean_export_passes_every_imu_check(spin, tmp_path):
    root, _, _ = _event(spin, tmp_path)
    for check in ("imu_sample_times", "imu_finite", "imu_rate_vs_poses", "imu_measured", "imu_exact_reference",
                  "imu_vs_state_log", "sample_poses_rigid", "reference_pose"):
        passes(root, check)


def test_imu_sample_times(spin, tmp_path):
    """One sample stamped 1 ns late."""
    root, ev, a = _event(spin, tmp_path)
    t = a["sample_time_ns"].copy()
    t[3] += 1
    _replace(ev, "sample_time_ns", t)
    fails(root, "imu_sample_times")


def test_imu_finite(spin, tmp_path):
    root, ev, a = _event(spin, tmp_path)
    f = a["specific_force"].copy()
    f[2, 1] = np.nan
    _replace(ev, "specific_force", f)
    fails(root, "imu_finite")


@pytest.mark.parametrize("payload, failing", [("angular_velocity", ("imu_rate_vs_poses", "imu_vs_state_log")),
                                              ("specific_force", ("imu_vs_state_log",))])
def test_imu_truth_in_the_world_frame(spin, tmp_path, payload, failing):
    """Angular velocity or specific force written in the world frame (R v) instead of the IMU frame (the mount is
    tilted 0.6 rad, so the two differ)."""
    root, ev, a = _event(spin, tmp_path)
    R = a["sample_T_world_imu"][:, :3, :3]
    _replace(ev, payload, np.einsum("nij,nj->ni", R, a[payload]))
    for name in failing:
        fails(root, name)


def test_imu_vs_state_log_gravity_sign(spin, tmp_path):
    """Specific force with gravity's sign flipped (a + g instead of a - g)."""
    root, ev, a = _event(spin, tmp_path)
    R = a["sample_T_world_imu"][:, :3, :3]
    g = np.einsum("nji,j->ni", R, np.array([0.0, 0.0, -9.80665]))       # g in the IMU frame
    _replace(ev, "specific_force", a["specific_force"] + 2 * g)
    fails(root, "imu_vs_state_log")
    passes(root, "imu_rate_vs_poses")


def test_imu_measured(spin, tmp_path):
    """The measured channel not from the recorded seed (one sample off by 1e-6 rad/s)."""
    root, ev, a = _event(spin, tmp_path)
    w = a["angular_velocity_measured"].copy()
    w[0, 0] += 1e-6
    _replace(ev, "angular_velocity_measured", w)
    fails(root, "imu_measured")


def test_imu_measured_without_noise_model(spin, tmp_path):
    root, ev, _ = _event(spin, tmp_path)
    _edit_manifest(ev, lambda m: m["calibration"].pop("noise"))
    fails(root, "imu_measured")


def test_imu_exact_reference_warns(spin, tmp_path):
    """A recorded difference from Blender's own motion beyond the tolerance is a warning (that reference carries
    truncation and roundoff), never a pass."""
    root, ev, _ = _event(spin, tmp_path)
    _edit_manifest(ev, lambda m: m["method"]["verification"].update(worst_specific_force_difference_mps2=5.0))
    assert status(root, "imu_exact_reference") == {"warn"}


def test_sample_poses_rigid(spin, tmp_path):
    root, ev, a = _event(spin, tmp_path)
    T = a["sample_T_world_imu"].copy()
    T[4, :3, :3] *= 1.01
    _replace(ev, "sample_T_world_imu", T)
    fails(root, "sample_poses_rigid")
