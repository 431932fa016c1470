"""IMU exports against closed forms (rowbeam/blender/scenes/imu_scenes.py): static (+g up), constant yaw rate on a
tilted mount (rotation mode ZXY), uniform circular motion (centripetal), sinusoidal translation (a sin modifier) and a
lever arm on a parent whose yaw is a cubic in time (tangential + centripetal); each within 1e-4 m/s^2 and 1e-6 rad/s,
and the whole bundle passes the checker (state log included). Then the declared finite difference where the motion
is not plain (a constraint), a quaternion mount, and the bad inputs (one line, exit 2)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from rowbeam.blender.scenes import imu_scenes

from tests.conftest import REPO, run_python
from tests.helpers import failures, load_event

FORCE_TOL = 1e-4        # m/s^2
RATE_TOL = 1e-6         # rad/s
NOISE = {"gyroscope_noise_density": 1.7e-4, "gyroscope_random_walk": 1.9e-5, "accelerometer_noise_density": 2e-3,
         "accelerometer_random_walk": 3e-3, "seed": 5}


def worst_errors(exported) -> tuple[float, float]:
    """(worst angular velocity error rad/s, worst specific force error m/s^2) over every published event."""
    worst_w = worst_f = 0.0
    for ev in exported.summary["published"]:
        _, a = load_event(ev)
        t = a["sample_time_ns"] * 1e-9
        worst_w = max(worst_w, float(np.abs(np.array([exported.truth.omega(x) for x in t])
                                            - a["angular_velocity"]).max()))
        worst_f = max(worst_f, float(np.abs(np.array([exported.truth.force(x) for x in t])
                                            - a["specific_force"]).max()))
    return worst_w, worst_f


@pytest.mark.parametrize("name", sorted(imu_scenes.SCENES))
def test_closed_form(exports, name):
    exported = exports(f"imu_{name}", imu_scenes.SCENES[name], first_event=0, count=3)
    assert len(exported.summary["published"]) == 3 and not exported.summary["quarantined"]
    worst_w, worst_f = worst_errors(exported)
    assert worst_w <= RATE_TOL and worst_f <= FORCE_TOL, (worst_w, worst_f)
    report, bad = failures(exported.bundle)
    assert report["status"] == "pass", bad
    checks = {c["check"]: c["status"] for e in report["events"] for c in e["checks"]}
    assert checks["imu_vs_state_log"] == "pass" and checks["state_log_poses"] == "pass"
    m, _ = load_event(exported.event)
    assert m["calibration"]["derivatives"]["scheme"] == "analytic"


def _with_constraint(**kw):
    """Circular motion with a Limit Rotation constraint that limits nothing: not plain, so frame_set and the declared
    central difference."""
    truth, rig = imu_scenes.circular(**kw)
    import bpy

    c = bpy.data.objects["imu_mount"].constraints.new("LIMIT_ROTATION")
    c.use_limit_x = c.use_limit_y = c.use_limit_z = False
    return truth, rig


def test_finite_difference_fallback_declares_its_step_and_error(exports):
    exported = exports("imu_circular_constrained", _with_constraint, first_event=0, count=2)
    m, _ = load_event(exported.event)
    d = m["calibration"]["derivatives"]
    assert d["scheme"] == "central_difference" and d["step_ns"] == 10_000_000 and "constraints" in d["reason"]
    worst_w, worst_f = worst_errors(exported)
    # measured: float32 matrix_world through a 10 ms second difference, and the O(h^2) truncation
    assert worst_w <= 1e-3 and worst_f <= 0.05, (worst_w, worst_f)
    assert worst_f <= 3 * d["estimated_error"]["specific_force_mps2"] + 0.01
    assert failures(exported.bundle)[0]["status"] == "pass"


def _quaternion(**kw):
    """The lever-arm parent turned into a quaternion object keyed at three orientations (Bezier between them)."""
    truth, rig = imu_scenes.lever_arm(**kw)
    import bpy

    arm = bpy.data.objects["arm"]
    arm.animation_data_clear()
    arm.rotation_mode = "QUATERNION"
    for frame, q in ((1, (1, 0, 0, 0)), (16, (0.9, 0.1, 0.3, 0.2)), (31, (0.7, -0.2, 0.1, 0.6))):
        arm.rotation_quaternion = q
        arm.keyframe_insert("rotation_quaternion", frame=frame)
    return truth, rig


def test_quaternion_mount_agrees_with_blenders_own_motion(exports):
    """No closed form: the truth against central differences of Blender's matrix_world (imu_exact_reference) and
    the state log, both pass."""
    exported = exports("imu_quaternion", _quaternion, first_event=1, count=2)
    report, bad = failures(exported.bundle)
    assert report["status"] == "pass", bad
    statuses = {c["check"]: c["status"] for e in report["events"] for c in e["checks"]}
    assert statuses["imu_exact_reference"] == "pass" and statuses["imu_vs_state_log"] == "pass"


def test_measured_channel_is_separate_and_reproducible(exports):
    exported = exports("imu_noisy", imu_scenes.yaw_rate, first_event=0, count=2, noise=NOISE)
    m, a = load_event(exported.event)
    assert m["calibration"]["noise"]["seed"] == 5
    assert not np.array_equal(a["specific_force_measured"], a["specific_force"])
    assert worst_errors(exported)[1] <= FORCE_TOL                     # the truth channel is untouched
    report, _ = failures(exported.bundle)
    assert {c["status"] for e in report["events"] for c in e["checks"] if c["check"] == "imu_measured"} == {"pass"}


def _export_cli(tmp_path, builder, **fields):
    from rowbeam.blender.scenes import common

    _, rig = builder()
    rig["sensors"][0].update(fields)
    blend = common.save(tmp_path / "scene.blend", rig)
    return run_python(REPO / "render_export.py", blend, "--rig", blend.with_suffix(".rig.json"), "--out",
                      tmp_path / "b", "--count", "1")


def test_rate_above_the_bound_is_one_line_exit_2(tmp_path):
    r = _export_cli(tmp_path, imu_scenes.static, rate_hz=8000)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "rate_hz: 8000 Hz is above the IMU bound of 4000 Hz" in lines[0], r.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("fields, fragment", [
    ({"delivery": {"latency_ns": -1}}, "sensors[0].delivery.latency_ns: -1 is less than the minimum of 0"),
    ({"clock": {"drift_ppm": 1000.5}}, "sensors[0].clock.drift_ppm: 1000.5 is greater than the maximum of 1000"),
    ({"clock": {"drift_ppm": -1001}}, "sensors[0].clock.drift_ppm: -1001 is less than the minimum of -1000"),
], ids=["latency_negative", "drift_above_1000_ppm", "drift_below_-1000_ppm"])
def test_imu_clock_and_delivery_out_of_bounds_is_one_line_exit_2(tmp_path, fields, fragment):
    r = _export_cli(tmp_path, imu_scenes.static, **fields)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rowbeam export: error:") and fragment in lines[0], r.stderr
    assert not (tmp_path / "b").exists()


def _unbaked_rigid_body():
    import bpy

    truth, rig = imu_scenes.static()
    bpy.context.view_layer.objects.active = bpy.data.objects["ground"]
    bpy.ops.rigidbody.object_add()
    bpy.data.objects["imu_mount"].parent = bpy.data.objects["ground"]
    return truth, rig


def test_mount_without_motion_data_is_one_line_exit_2(tmp_path):
    r = _export_cli(tmp_path, _unbaked_rigid_body)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "object 'imu_mount': no motion data between frames" in lines[0], r.stderr
    assert not (tmp_path / "b").exists()
    json.dumps(lines)
