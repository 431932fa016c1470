"""Radar: timing model, beam grid, rig refusals, and exported frames against analytic range and radial velocity."""
from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from rowbeam.util.errors import RowbeamError
from rowbeam.model.rig import parse_rig


def _radar(**fields):
    sensor = {"id": "radar_front", "type": "radar", "object": "mount", "rate_hz": 20, "first_frame_ns": 0,
              "chirps": 128, "chirp_period_ns": 50_000, "azimuth_fov_deg": [-40.0, 40.0],
              "elevation_fov_deg": [-6.0, 6.0], "azimuth_beams": 8, "elevation_beams": 2,
              "min_range_m": 0.5, "max_range_m": 150.0, "max_radial_velocity_mps": 60.0}
    sensor.update({k: v for k, v in fields.items() if v is not None})
    for k in [k for k, v in fields.items() if v is None]:
        sensor.pop(k)
    return parse_rig({"schema": "rowbeam/rig@1", "sensors": [sensor]}, "rig.json").sensors[0]


def _half_up(q: Fraction) -> int:
    return math.floor(q + Fraction(1, 2))


def test_chirp_times_are_interval_centres_rounded_half_up():
    """20 Hz frame 3 starts at 150 ms; chirp j is the centre of [start + off + j*P, +P): P = 50,001 ns is odd, so
    every centre is a half ns and rounds up (a frame-stamp or chirp-start convention gives other numbers)."""
    s = _radar(chirp_period_ns=50_001, chirp_offset_ns=7)
    t = s.timing(3)
    times = t.chirp_times_ns()
    assert t.chirp_time_exact(0) == Fraction(150_000_000 + 7) + Fraction(50_001, 2)
    assert (times[0], times[1], times[127]) == (150_025_008, 150_075_009, 150_000_007 + _half_up(Fraction(255 * 50_001, 2)))
    assert t.reference_time_ns() == 150_000_007 + _half_up(Fraction(128 * 50_001, 2))
    assert t.chirp_intervals_ns()[1].tolist() == [150_050_008, 150_100_009]
    assert s.event_duration_ns() == 7 + 128 * 50_001


def test_chirp_times_at_frame_boundaries():
    """A chirp train that fills the frame exactly (50 x 1 ms at 20 Hz) is accepted: the last chirp of frame k ends
    where frame k+1's first chirp starts; 30 Hz frames start at rounded thirds of a second."""
    s = _radar(chirps=50, chirp_period_ns=1_000_000)
    a, b = s.timing(0), s.timing(1)
    assert a.chirp_intervals_ns()[-1, 1] == b.chirp_intervals_ns()[0, 0] == 50_000_000
    assert b.chirp_times_ns()[0] - a.chirp_times_ns()[-1] == 1_000_000
    s30 = _radar(rate_hz=30, chirps=4, chirp_period_ns=8_333_333)
    assert [s30.event_start_ns(k) for k in (1, 2, 3)] == [33_333_333, 66_666_667, 100_000_000]
    assert s30.timing(2).chirp_times_ns()[0] == 66_666_667 + _half_up(Fraction(8_333_333, 2))


def test_beam_grid_cell_centres_and_order():
    s = _radar()
    assert s.beams == 16
    # azimuth fastest: beam 0..7 at elevation -3 deg, 8..15 at +3 deg; cells of 10 deg centred
    assert s.azimuths_deg[:8] == pytest.approx([-35, -25, -15, -5, 5, 15, 25, 35])
    assert s.elevations_deg[0] == pytest.approx(-3.0) and s.elevations_deg[8] == pytest.approx(3.0)
    d = s.directions()[13]                       # azimuth 15 deg (toward +y: left), elevation +3 deg
    assert d == pytest.approx([math.cos(math.radians(3)) * math.cos(math.radians(15)),
                               math.cos(math.radians(3)) * math.sin(math.radians(15)), math.sin(math.radians(3))])
    table = _radar(beams_deg=[[0.0, 0.0], [30.0, -10.0]], azimuth_fov_deg=None, elevation_fov_deg=None,
                   azimuth_beams=None, elevation_beams=None)
    assert table.beams == 2 and table.grid is None and table.beam_table()[1] == {
        "beam": 1, "azimuth_deg": 30.0, "elevation_deg": -10.0}


def test_preset_fills_and_fields_win():
    s = _radar(preset="bench_128x64", chirps=None, chirp_period_ns=None, azimuth_fov_deg=None,
               elevation_fov_deg=None, azimuth_beams=None, elevation_beams=None)
    assert (s.chirps, s.beams) == (128, 64)
    s = _radar(preset="bench_128x64", chirps=16, azimuth_fov_deg=None, elevation_fov_deg=None,
               azimuth_beams=None, elevation_beams=None)
    assert (s.chirps, s.chirp_period_ns, s.beams) == (16, 50_000, 64)


@pytest.mark.parametrize("fields, fragment", [
    ({"chirps": 1001, "chirp_period_ns": 50_000},
     "sensors[0].chirp_period_ns: chirp_offset_ns + chirps x chirp_period_ns = 50050000 ns is longer than the frame "
     "period 50000000 ns"),
    ({"chirps": 100, "chirp_offset_ns": 45_000_001}, "sensors[0].chirp_period_ns: chirp_offset_ns + chirps"),
    ({"elevation_fov_deg": [-10.0, 95.0]}, "sensors[0].elevation_fov_deg[1]: 95.0 is greater than the maximum of 90"),
    ({"beams_deg": [[0.0, -91.0]]}, "sensors[0].beams_deg[0][1]: -91.0 is less than the minimum of -90"),
    ({"chirps": 0}, "sensors[0].chirps: 0 is less than the minimum of 1"),
    ({"max_radial_velocity_mps": 0}, "sensors[0].max_radial_velocity_mps: 0 is less than or equal to the minimum of 0"),
    ({"max_radial_velocity_mps": -5.0}, "sensors[0].max_radial_velocity_mps: -5.0 is less than or equal to"),
    ({"min_range_m": 200.0}, "sensors[0].min_range_m: 200.0 must be below max_range_m 150.0"),
    ({"azimuth_fov_deg": [10.0, -10.0]}, "sensors[0].azimuth_fov_deg: [10.0, -10.0] must be increasing"),
    ({"azimuth_beams": 0}, "sensors[0].azimuth_beams: 0 is less than the minimum of 1"),
    ({"chirp_period_ns": 2.5}, "sensors[0].chirp_period_ns: 2.5 is not of type 'integer'"),
    ({"doppler": 1}, "sensors[0]: unknown field(s) 'doppler'"),
])
def test_bad_radar_rig_values(fields, fragment):
    with pytest.raises(RowbeamError) as exc:
        _radar(**fields)
    assert fragment in str(exc.value) and str(exc.value).startswith("rig.json")
    assert "\n" not in str(exc.value)


# ---- exported frames against the analytic scenes (rowbeam/blender/scenes/radar_scenes.py) ----

from rowbeam.check.runner import check_bundle  # noqa: E402
from rowbeam.blender.scenes import radar_scenes as rs  # noqa: E402

from tests.helpers import load_event, save_payload  # noqa: E402

FRAME = 1
RANGE_TOL = 1e-4            # m
VELOCITY_TOL = 2e-3         # m/s: central difference of float32 matrix_world over +-2 ms


def _rig_truth(sensor: dict, frame: int):
    """Chirp times (K,) and beam directions (B, 3) from the rig document alone, by the definitions in docs/radar.md."""
    start = sensor["first_frame_ns"] + _half_up(Fraction(frame * 10**9) / Fraction(sensor["rate_hz"]))
    P, off = sensor["chirp_period_ns"], sensor.get("chirp_offset_ns", 0)
    t = np.array([start + off + _half_up(Fraction((2 * j + 1) * P, 2)) for j in range(sensor["chirps"])], np.int64)
    (a0, a1), (e0, e1) = sensor["azimuth_fov_deg"], sensor["elevation_fov_deg"]
    na, ne = sensor["azimuth_beams"], sensor["elevation_beams"]
    az = np.radians([a0 + (i + 0.5) * (a1 - a0) / na for _ in range(ne) for i in range(na)])
    el = np.radians([e0 + (i + 0.5) * (e1 - e0) / ne for i in range(ne) for _ in range(na)])
    return t, np.stack([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)], -1)


def _compare(e):
    m, a = load_event(e.event)
    t, dirs = _rig_truth(json.loads(e.rig.read_text())["sensors"][0], FRAME)
    assert np.array_equal(m["event"]["frame_start_ns"] + a["time_offset_ns"], t)
    truth = np.array([[e.truth.expected(t[j], dirs[b]) for b in range(len(dirs))] for j in range(len(t))])
    valid = a["valid"] == 1
    hit = np.isfinite(truth[..., 0])
    report = check_bundle(e.bundle)
    assert report["status"] == "pass", [c for ev in report["events"] for c in ev["checks"] if c["status"] != "pass"]
    return m, a, t, dirs, truth, valid, hit


def test_wall_approaching_radial_velocity_is_minus_v_cos_theta(exports):
    e = exports("radar_wall", rs.wall_approaching)
    m, a, t, dirs, truth, valid, hit = _compare(e)
    assert valid.all() and a["range"].shape == (16, 32)
    range_err = np.abs(a["range"] - truth[..., 0]).max()
    v_err = np.abs(a["radial_velocity"] - truth[..., 1]).max()
    print(f"wall: worst range error {range_err:.3g} m, worst radial velocity error {v_err:.3g} m/s")
    assert range_err < RANGE_TOL and v_err < VELOCITY_TOL
    # the closed form the issue states: v_r = -v cos(theta), theta between beam and the wall's motion (-x)
    assert np.abs(a["radial_velocity"] - (-12.0 * dirs[None, :, 0])).max() < VELOCITY_TOL
    # each chirp sees the wall at its own time: the range shrinks by v * chirp period per chirp (0.006 m)
    assert np.diff(a["range"][:, 0]).mean() == pytest.approx(-12.0 * 5e-4 / dirs[0, 0], rel=1e-3)
    assert m["calibration"]["radial_velocity"]["sign"].startswith("positive = receding")


def test_spinning_disc_range_constant_velocity_varies(exports):
    e = exports("radar_disc", rs.spinning_disc)
    m, a, t, dirs, truth, valid, hit = _compare(e)
    inner = valid & hit
    assert inner.sum() >= 16 * 8
    range_err = np.abs(a["range"] - truth[..., 0])[inner].max()
    v_err = np.abs(a["radial_velocity"] - truth[..., 1])[inner].max()
    print(f"disc: worst range error {range_err:.3g} m, worst radial velocity error {v_err:.3g} m/s")
    assert range_err < RANGE_TOL and v_err < VELOCITY_TOL
    both = inner.all(axis=0)
    assert np.ptp(a["range"][:, both], axis=0).max() < 1e-4              # the disc turns in its own plane
    assert np.ptp(a["radial_velocity"][inner]) > 1.0                      # upper half recedes, lower approaches
    # the sign: beams above the disc centre (z > 1) see material moving toward -y... v_r = -2 omega (z-1)/r
    up = inner & (dirs[None, :, 2] > 0)
    assert (a["radial_velocity"][up] < 0).all()


def test_ego_driving_past_static_poles(exports):
    e = exports("radar_poles", rs.ego_past_poles)
    m, a, t, dirs, truth, valid, hit = _compare(e)
    sure = valid & hit
    assert sure.sum() > 20
    range_err = np.abs(a["range"] - truth[..., 0])[sure].max()
    v_err = np.abs(a["radial_velocity"] - truth[..., 1])[sure].max()
    print(f"poles: worst range error {range_err:.3g} m, worst radial velocity error {v_err:.3g} m/s")
    assert range_err < RANGE_TOL and v_err < VELOCITY_TOL
    assert np.abs(a["radial_velocity"] - (-10.0 * dirs[None, :, 0]))[valid].max() < VELOCITY_TOL
    assert np.abs(a["chirp_velocity_world"] - [10.0, 0, 0]).max() < VELOCITY_TOL
    origins = a["chirp_T_world_radar"][:, :3, 3]
    assert np.abs(origins[:, 0] - (-6.0 + 10.0 * t * 1e-9)).max() < 1e-5


def test_schema_bounds_match_radar_constants():
    from rowbeam.sensors.radar import MAX_BEAMS, MAX_CHIRPS
    from rowbeam.bundle.schema import validator

    props = validator("rowbeam/rig@1").schema["$defs"]["radar"]["properties"]
    assert props["chirps"]["maximum"] == MAX_CHIRPS
    assert props["azimuth_beams"]["maximum"] == props["beams_deg"]["maxItems"] == MAX_BEAMS


# ---- state log ----

def test_state_log_of_the_ego_and_the_spinning_disc(exports):
    """The log holds the ego body (parent of the radar) at 200 Hz on the analytic trajectory, the radar mount, and
    the spinning disc with its angular velocity; the checker compares every chirp pose and radial velocity to it."""
    from rowbeam.model.state_log import load_state_log

    e = exports("radar_poles", rs.ego_past_poles)
    m, a = load_event(e.event)
    log, tracks = load_state_log(e.bundle, m["state"])
    roles = {b["name"]: (b["role"], b["rate_hz"]) for b in log["bodies"]}
    assert roles == {"ego_body": ("ego", 200), "radar_mount": ("sensor", 200)}
    ego = tracks["ego_body"]
    assert np.array_equal(np.diff(ego.t), np.full(len(ego.t) - 1, 5_000_000))
    assert ego.t[0] <= m["event"]["frame_start_ns"] and ego.t[-1] >= m["event"]["frame_start_ns"] + 16 * 500_000
    assert np.abs(ego.T[:, :3, 3] - (np.array([-7.0, 0, 1]) + np.outer(ego.t * 1e-9, [10.0, 0, 0]))).max() < 1e-5
    assert np.abs(ego.v - [10.0, 0, 0]).max() < 1e-3 and np.abs(ego.w).max() < 1e-6
    checks = {c["check"]: c for ev in check_bundle(e.bundle)["events"] for c in ev["checks"]}
    assert checks["state_log_poses"]["status"] == "pass"
    assert checks["radial_velocity_vs_state_log"]["status"] == "pass"
    print("poles vs log:", checks["state_log_poses"]["values"], checks["radial_velocity_vs_state_log"]["values"])

    e = exports("radar_disc", rs.spinning_disc)
    m, a = load_event(e.event)
    log, tracks = load_state_log(e.bundle, m["state"])
    disc = tracks["disc"]
    assert np.abs(disc.w - [2 * math.pi, 0, 0]).max() < 1e-3 and np.abs(disc.v).max() < 1e-3
    checks = {c["check"]: c for ev in check_bundle(e.bundle)["events"] for c in ev["checks"]}
    assert checks["radial_velocity_vs_state_log"]["status"] == "pass"
    print("disc vs log:", checks["state_log_poses"]["values"], checks["radial_velocity_vs_state_log"]["values"])


@pytest.fixture
def poles_copy(exports, tmp_path):
    import shutil

    e = exports("radar_poles", rs.ego_past_poles)
    shutil.copytree(e.bundle, tmp_path / "b")
    return tmp_path / "b", next((tmp_path / "b" / "events").glob("*/*"))


def test_checker_catches_a_radial_velocity_with_the_wrong_sign(poles_copy):
    """Flipped consistently in the per-beam array and the points (so only the motion can tell)."""
    from rowbeam.bundle.arrays import write_exr

    from tests.helpers import assert_fails, rehash

    root, ev = poles_copy
    _, a = load_event(ev)
    write_exr(ev / "radial_velocity.exr", -a["radial_velocity"], ["radial_velocity"], "float32")
    pts = a["points"].copy()
    pts["radial_velocity"] *= -1
    save_payload(ev, "points", pts)
    rehash(ev, "radial_velocity")
    assert_fails(root, "radial_velocity_vs_state_log", "radial velocity vs the logged object and mount motion")


def test_checker_catches_chirp_poses_stamped_at_the_frame_start(poles_copy):

    from tests.helpers import assert_fails

    root, ev = poles_copy
    _, a = load_event(ev)
    save_payload(ev, "chirp_T_world_radar", np.repeat(a["chirp_T_world_radar"][:1], len(a["chirp_T_world_radar"]), 0))
    assert_fails(root, "state_log_poses", "chirp poses vs the state log")


def test_checker_catches_a_log_velocity_that_disagrees_with_its_poses(poles_copy):
    import hashlib

    from rowbeam.bundle.files import canonical_json

    root, ev = poles_copy
    m = json.loads((ev / "manifest.json").read_text())
    log = json.loads((root / m["state"]["log"]).read_text())
    entry = next(b for b in log["bodies"] if b["name"] == "ego_body")["arrays"]["velocity"]
    v = np.load(root / entry["uri"])
    tmp = root / "state" / "new.npy"
    np.save(tmp, v * 1.1)                             # 10 % too fast: 1 m/s off
    data = tmp.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    tmp.rename(root / "state" / f"{sha}.npy")         # content addressed (the mount shares the old file)
    entry.update(uri=f"state/{sha}.npy", sha256=sha, bytes=len(data))
    text = canonical_json(log)
    (root / m["state"]["log"]).write_bytes(text)
    m["state"]["sha256"] = hashlib.sha256(text).hexdigest()
    (ev / "manifest.json").write_text(json.dumps(m))
    report = check_bundle(root)
    bad = [c for c in report["bundle"]["checks"] if c["check"] == "state_log"]
    assert report["status"] == "fail" and bad[0]["status"] == "fail", bad
    assert "velocity disagrees with the pose samples by 1" in bad[0]["message"]


# ---- the running example: radar + state log + associations ----

def _running_example():
    from rowbeam.blender.scenes import running_example

    running_example.build(80, 45)
    return None, running_example.rig(radar=True, state_log=True, rgb_samples=0, verify_rows=1,
                                     lidar_fields={"azimuth_steps": 256, "verify_firings": 2})


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    from tests.conftest import build_and_export

    return build_and_export(tmp_path_factory.mktemp("re_radar"), "re", _running_example,
                            events={"camera_front": (30, 1), "lidar_top": (10, 1), "radar_front": (20, 1)})


def _rows_and_partners(rig: dict, sensor_id: str, index: int):
    """Camera row times (docs/camera.md formula) and the partner's sorted times from the rig alone."""
    cam = rig["sensors"][0]
    H = 45
    start = cam["first_event_ns"] + _half_up(Fraction(30 * 10**9, cam["rate_hz"]))
    rows = np.array([start + _half_up(Fraction(cam["readout_ns"] * (2 * v + 1), 2 * H) + Fraction(cam["exposure_ns"], 2))
                     for v in range(H)], np.int64)
    s = next(x for x in rig["sensors"] if x["id"] == sensor_id)
    if s["type"] == "radar":
        t, _ = _rig_truth(s, index)
    else:
        period = Fraction(10**9) / (Fraction(s["rotation_hz"]) * s["azimuth_steps"])
        f0 = s["first_sweep_ns"] + _half_up(Fraction(index * 10**9) / Fraction(s["rotation_hz"]))
        t = np.array([f0 + _half_up(k * period) for k in range(s["azimuth_steps"])], np.int64)
    return rows, t


def test_running_example_radar_state_log_and_associations(running, tmp_path):
    from rowbeam.cli import main as contracts_main

    e = running
    assert len(e.summary["published"]) == 3 and not e.summary["quarantined"]
    assert contracts_main(["associate", str(e.bundle), "--max-skew-us", "100"]) == 0
    doc = json.loads((e.bundle / "associations" / "max_skew_100000ns.json").read_text())
    report = check_bundle(e.bundle)
    bad = [c for ev in report["events"] for c in ev["checks"] if c["status"] == "fail"]
    bad += [c for c in report["bundle"]["checks"] if c["status"] == "fail"]
    assert report["status"] == "pass", bad
    names = {c["check"]: c for ev in report["events"] for c in ev["checks"] if c["check"].startswith("state_log")}
    assert names["state_log_poses"]["status"] == "pass"
    assert [c for c in report["bundle"]["checks"] if c["check"].startswith("associations:")][0]["status"] == "pass"
    cross = [c for ev in report["events"] for c in ev["checks"] if c["check"].startswith("radar_vs_lidar:")]
    assert cross[0]["status"] == "pass" and cross[0]["values"]["pairs"] > 20
    print("radar vs lidar:", cross[0]["values"])
    # every pair, recomputed by brute force from the rig: nearest partner time per row, kept iff |skew| <= 100 us
    rig = json.loads(e.rig.read_text())
    by_other = {p["other"]["sensor"]: p for p in doc["pairs"]}
    assert set(by_other) == {"lidar_top", "radar_front"}
    for sid, index in (("lidar_top", 10), ("radar_front", 20)):
        rows, partner = _rows_and_partners(rig, sid, index)
        skew = rows[:, None] - partner[None, :]
        best = np.abs(skew).min(axis=1)
        expected_rows = set(np.flatnonzero(best <= 100_000).tolist())
        pair = by_other[sid]
        got_rows = {v for b in pair["bands"] for v in range(b["rows"][0], b["rows"][1] + 1)}
        assert got_rows == expected_rows and 0 < len(got_rows) < 45
        for b in pair["bands"]:
            for v in range(b["rows"][0], b["rows"][1] + 1):
                assert abs(int(rows[v]) - b["other_time_ns"]) == best[v] <= b["max_abs_skew_ns"] <= 100_000
            assert "camera" in b["pose_support_ns"]
    print("associations:", {k: (len(p["bands"]), p["rows_paired"]) for k, p in by_other.items()})
    # the radar frame of the running example: range and radial velocity of the static street vs the ego motion
    radar = next((e.bundle / "events" / "radar_front").glob("*"))
    m, a = load_event(radar)
    objs = {o["render_index"]: o for o in m["objects"]}
    pts = a["points"]
    static = np.array([objs[int(i)]["motion"] == "static" for i in pts["instance_id"]])
    P = np.stack([pts["x_world"], pts["y_world"], pts["z_world"]], -1)
    o = a["chirp_T_world_radar"][pts["chirp"], :3, 3]
    d = (P - o) / np.linalg.norm(P - o, axis=-1, keepdims=True)
    assert static.sum() > 100
    err = np.abs(pts["radial_velocity"][static] - (-10.0 * d[static, 0])).max()     # shuttle at 10 m/s along +x
    print(f"running example radar: {static.sum()} static returns, worst |v_r + 10 d_x| {err:.3g} m/s")
    assert err < VELOCITY_TOL


def test_checker_catches_an_association_beyond_the_tolerance(running, tmp_path):
    import shutil

    from rowbeam.bundle.associations import associate_bundle

    root = tmp_path / "b"
    shutil.copytree(running.bundle, root)
    path, doc = associate_bundle(root, 100)
    band = doc["pairs"][0]["bands"][0]
    band["other_time_ns"] += 150_000            # a partner 150 us further away: beyond the declared 100 us
    band["max_abs_skew_ns"] += 150_000
    Path(path).write_text(json.dumps(doc))
    report = check_bundle(root)
    bad = [c for c in report["bundle"]["checks"] if c["check"].startswith("associations:")]
    assert report["status"] == "fail" and bad[0]["status"] == "fail" and "beyond max_skew_ns 100000" in bad[0]["message"]
    doc["pairs"][0]["bands"].pop(0)             # a dropped pair within tolerance: incomplete
    Path(path).write_text(json.dumps(doc))
    bad = [c for c in check_bundle(root)["bundle"]["checks"] if c["check"].startswith("associations:")]
    assert bad[0]["status"] == "fail" and "differ from those recomputed" in bad[0]["message"]


@pytest.mark.parametrize("value", ["-5", "nan", "2e6"])
def test_associate_refuses_a_bad_tolerance_in_one_line(running, value, capsys):
    from rowbeam.cli import main as contracts_main

    assert contracts_main(["associate", str(running.bundle), "--max-skew-us", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"rowbeam associate: error: --max-skew-us {float(value)}: must be 0 .. 1000000 (microseconds)"]


def test_checker_catches_radar_returns_off_the_lidar_surface(running, tmp_path):
    """Every static radar return moved 5 cm along its own beam (range, point table and world points consistent, so
    every per-event check passes): only the LiDAR's surface disagrees."""
    import shutil


    from tests.helpers import assert_fails

    root = tmp_path / "b"
    shutil.copytree(running.bundle, root)
    (root / "associations").exists() and shutil.rmtree(root / "associations")
    ev = next((root / "events" / "radar_front").glob("*"))
    m, a = load_event(ev)
    pts = a["points"].copy()
    local = np.stack([pts["x"], pts["y"], pts["z"]], -1)
    unit = local / np.linalg.norm(local, axis=-1, keepdims=True)
    R = a["chirp_T_world_radar"][pts["chirp"], :3, :3]
    for i, k in enumerate("xyz"):
        pts[k] += 0.05 * unit[:, i]
        pts[f"{k}_world"] += 0.05 * np.einsum("nij,nj->ni", R, unit)[:, i]
    pts["range"] += 0.05
    rng = a["range"].copy()
    rng[pts["chirp"], pts["beam"]] = (rng[pts["chirp"], pts["beam"]].astype(np.float64) + 0.05).astype(np.float32)
    save_payload(ev, "points", pts)
    save_payload(ev, "range", rng)
    assert_fails(root, "radar_vs_lidar:lidar_top/10", "worst distance from the LiDAR surface 0.0")


# ---- the Sensors panel (add-on properties and operators) ----

UI_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import bpy
import addon
from addon.rig_props import load_rig_document, rig_document
from rowbeam.model.rig import parse_rig
from rowbeam.blender.scenes import common

common.new_scene(4, 4)
mount = common.add_empty("radar_mount")
ego = common.add_empty("ego")
addon.register()
scene = bpy.context.scene
bpy.context.view_layer.objects.active = mount
bpy.ops.rowbeam.sensor_add(sensor_type="radar")
out = {"added": rig_document(scene)}
s = scene.rowbeam.sensors[0]
s.radar_preset = "corner_short_range"
s.chirps, s.azimuth_beams = 32, 8
scene.rowbeam.state_log_ego = ego
out["edited"] = json.loads(scene["rowbeam_rig"])
s.beam_table = "0 0; 30 -10"
out["table"] = rig_document(scene)["sensors"][0]
parse_rig(out["edited"], "edited")
load_rig_document(scene, {"schema": "rowbeam/rig@1", "sensors": [{"id": "r", "type": "radar", "object": "radar_mount",
    "rate_hz": 20, "first_frame_ns": 0, "preset": "bench_128x64", "chirps": 16, "min_range_m": 1, "max_range_m": 90,
    "max_radial_velocity_mps": 40}], "state_log": {"ego_object": "ego"}})
out["loaded"] = rig_document(scene)
print("RESULT" + json.dumps(out))
"""


def test_sensors_panel_adds_and_edits_a_radar_with_presets(tmp_path):
    from rowbeam.sensors.radar import PRESETS

    from tests.conftest import REPO, run_python

    script = tmp_path / "ui.py"
    script.write_text(UI_SCRIPT)
    r = run_python(script, REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT"))[6:])
    added = res["added"]["sensors"][0]
    front = PRESETS["front_long_range"]
    assert (added["type"], added["id"], added["object"], added["rate_hz"]) == ("radar", "radar_0", "radar_mount", 20.0)
    assert (added["chirps"], added["azimuth_beams"], added["azimuth_fov_deg"]) == (
        front["chirps"], front["azimuth_beams"], front["azimuth_fov_deg"])
    parse_rig(res["added"], "added")
    edited = res["edited"]["sensors"][0]
    corner = PRESETS["corner_short_range"]
    assert (edited["chirps"], edited["azimuth_beams"], edited["chirp_period_ns"], edited["elevation_fov_deg"]) == (
        32, 8, corner["chirp_period_ns"], corner["elevation_fov_deg"])
    assert res["edited"]["state_log"] == {"ego_object": "ego", "ego_rate_hz": 200.0, "objects_rate_hz": 200.0}
    assert res["table"]["beams_deg"] == [[0.0, 0.0], [30.0, -10.0]] and "azimuth_beams" not in res["table"]
    loaded = res["loaded"]["sensors"][0]
    bench = PRESETS["bench_128x64"]
    assert (loaded["chirps"], loaded["chirp_period_ns"], loaded["azimuth_beams"], loaded["elevation_beams"]) == (
        16, bench["chirp_period_ns"], bench["azimuth_beams"], bench["elevation_beams"])
    assert res["loaded"]["state_log"]["ego_object"] == "ego"
    assert parse_rig(res["loaded"], "loaded").sensors[0].beams == 64


def test_checker_catches_camera_row_poses_in_reverse_order(running, tmp_path):
    """The running example's camera rows (shuttle at 10 m/s): row poses listed bottom-to-top disagree with the state
    log at the rows' times by up to 12 ms x 10 m/s = 0.12 m."""
    import shutil

    from rowbeam.bundle.reader import Bundle

    from tests.helpers import assert_fails

    root = tmp_path / "b"
    shutil.copytree(running.bundle, root)
    shutil.rmtree(root / "associations", ignore_errors=True)
    radar = next(Bundle.open(root).events(sensor="radar_front"))            # the one loader reads radar frames
    assert radar.array("radial_velocity").shape == (64, 32) and radar.array("points").size > 0
    ev = next((root / "events" / "camera_front").glob("*"))
    _, a = load_event(ev)
    save_payload(ev, "row_T_world_camera", a["row_T_world_camera"][::-1].copy())
    assert_fails(root, "state_log_poses", "row poses vs the state log")
