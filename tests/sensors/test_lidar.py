"""Spinning LiDAR: timing model, beam table, layout, and exported sweeps against closed-form ranges."""
from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from rowbeam.check.runner import check_bundle
from rowbeam.util.errors import RowbeamError
from rowbeam.sensors.lidar import beam_directions, preset_table
from rowbeam.model.rig import parse_rig
from rowbeam.blender.sensors.lidar_layout import sweep_layout
from rowbeam.blender.scenes import lidar_calibration as lc

from tests.conftest import REPO, run_python
from tests.helpers import assert_fails, load_event, rehash, save_payload

RANGE_TOL = 1e-4     # m


def _lidar(**fields):
    sensor = {"id": "lidar_top", "type": "spinning_lidar", "object": "mount", "rotation_hz": 10, "azimuth_steps": 2048,
              "elevations_deg": [-10.0, 0.0, 5.0], "first_sweep_ns": 0, "min_range_m": 0.5, "max_range_m": 100.0}
    sensor.update(fields)
    return parse_rig({"schema": "rowbeam/rig@1", "sensors": [sensor]}, "rig.json").sensors[0]


def test_firing_times_are_exact_and_rounded_half_up():
    t = _lidar().timing(1)                      # 10 Hz: sweep 1 starts at 100 ms; period 1e9/20480 = 48828.125 ns
    times = t.firing_times_ns()
    assert t.firing_period_ns == Fraction(390625, 8)
    assert (times[0], times[1], times[2], times[2047]) == (100_000_000, 100_048_828, 100_097_656, 199_951_172)
    assert t.reference_time_ns() == 150_000_000
    assert t.beam_times_ns().shape == (2048, 3)


def test_azimuth_follows_spin_direction_and_start():
    ccw = _lidar(start_azimuth_deg=30.0)
    cw = _lidar(start_azimuth_deg=30.0, spin_direction="cw")
    t = ccw.timing(0)
    assert ccw.azimuths_deg(t)[[0, 512], 0] == pytest.approx([30.0, 120.0])
    assert cw.azimuths_deg(cw.timing(0))[[0, 512], 0] == pytest.approx([30.0, -60.0])
    d = ccw.directions(t)[512, 2]                # 5 deg up, azimuth 120 deg: left-back of the sensor
    assert d == pytest.approx([np.cos(np.radians(5)) * np.cos(np.radians(120)),
                               np.cos(np.radians(5)) * np.sin(np.radians(120)), np.sin(np.radians(5))])


def test_channel_time_offsets_rotate_their_azimuth():
    """A channel fired 2.304 us after its firing points where the head is then: 360*10*2.304e-6 deg further."""
    s = _lidar(time_offsets_ns=[0, 2304, 4608])
    az = s.azimuths_deg(s.timing(0))
    assert az[0, 2] - az[0, 0] == pytest.approx(360 * 10 * 4608e-9)
    assert s.timing(0).beam_times_ns()[3].tolist() == [146484, 148788, 151092]


def test_presets():
    assert len(preset_table("uniform_64")["elevations_deg"]) == 64
    assert preset_table("uniform_32")["elevations_deg"][0] == -25.0
    vlp = preset_table("vlp16")
    assert sorted(vlp["elevations_deg"]) == list(range(-15, 16, 2)) and vlp["time_offsets_ns"][15] == 15 * 2304
    s = parse_rig({"schema": "rowbeam/rig@1", "sensors": [
        {"id": "v", "type": "spinning_lidar", "object": "m", "rotation_hz": 10, "azimuth_steps": 1800,
         "preset": "vlp16", "first_sweep_ns": 0, "min_range_m": 0.4, "max_range_m": 100}]}).sensors[0]
    assert s.channels == 16 and s.time_offsets_ns[1] == 2304


@pytest.mark.parametrize("fields, fragment", [
    ({"elevations_deg": [-10.0, 95.0]}, "sensors[0].elevations_deg[1]: 95.0 is greater than the maximum of 90"),
    ({"azimuth_steps": 0}, "sensors[0].azimuth_steps: 0 is less than the minimum of 1"),
    ({"rotation_hz": -10}, "sensors[0].rotation_hz: -10 is less than"),
    ({"min_range_m": 50, "max_range_m": 10}, "min_range_m: 50 must be below max_range_m 10"),
    ({"azimuth_offsets_deg": [0, 1]}, "azimuth_offsets_deg: 2 values for 3 channels"),
    ({"time_offsets_ns": [0, 0, 60000]}, "time_offsets_ns: offset 60000 ns is not shorter than the firing period"),
    ({"preset": "vlp16"}, "sensors[0]"),                   # both a preset and elevations
    ({"spin_direction": "sideways"}, "sensors[0].spin_direction"),
])
def test_bad_lidar_rig_values(fields, fragment):
    with pytest.raises(RowbeamError) as exc:
        _lidar(**fields)
    assert fragment in str(exc.value) and str(exc.value).startswith("rig.json")


def test_bad_lidar_rig_on_the_command_line_is_one_line(tmp_path):
    from rowbeam.blender.scenes import common

    _, rig = lc.box_room(steps=16)
    rig["sensors"][0]["elevations_deg"] = [0.0, 91.0]
    rig["sensors"][0].pop("preset")
    blend = common.save(tmp_path / "room.blend", rig)
    r = run_python(REPO / "render_export.py", blend, "--rig", blend.with_suffix(".rig.json"), "--out", tmp_path / "o")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("rowbeam export: error:")] == [
        f"rowbeam export: error: {blend.with_suffix('.rig.json')}: invalid rig: sensors[0].elevations_deg[1]: "
        "91.0 is greater than the maximum of 90"]


def test_layout_of_sequential_firing():
    vlp = sweep_layout(1800, Fraction(10**9, 18000), preset_table("vlp16")["time_offsets_ns"])
    assert (vlp.slots, vlp.width) == (24, 4) and vlp.slot_of_channel == tuple(range(16))
    assert vlp.quantization_ns == pytest.approx(162.2, abs=0.1)
    together = sweep_layout(2048, Fraction(10**9, 20480), [0] * 64)
    assert (together.slots, together.width, together.quantization_ns) == (1, 64, 0.0)
    rows, cols = vlp.pixel_of_beam()
    assert rows[2, 15] == 2 * 24 + 15 and cols[2, 15] == 0


SWEEP = 1                # build_and_export exports event 1 unless told otherwise


def _half_up(q: Fraction) -> int:
    return math.floor(q + Fraction(1, 2))


def _rig_beams(sensor: dict, sweep: int) -> dict:
    """Truth of one sweep from the rig document alone, by the definitions in docs/lidar.md (not the exported beam
    table, not rowbeam.sensors.lidar): beam times (F, C) int64 ns, unit directions (F, C, 3) in the LiDAR frame
    (x forward, y left, z up), sweep start and reference (centre) time in ns."""
    preset = sensor.get("preset")
    if preset and preset.startswith("uniform_"):             # evenly from -25 deg to +15 deg
        elev, delays = np.linspace(-25.0, 15.0, int(preset.split("_")[1])), None
    elif preset == "vlp16":                                     # VLP-16 manual: laser c at c deg (odd), c - 15 (even)
        elev = np.array([c if c % 2 else c - 15 for c in range(16)], float)
        delays = [2304 * c for c in range(16)]
    else:
        elev, delays = np.asarray(sensor["elevations_deg"], float), None
    C = len(elev)
    delays = np.asarray(sensor.get("time_offsets_ns", delays or [0] * C), np.int64)
    az_offsets = np.asarray(sensor.get("azimuth_offsets_deg", [0.0] * C), float)
    hz, steps = Fraction(sensor["rotation_hz"]), sensor["azimuth_steps"]
    start = sensor["first_sweep_ns"] + _half_up(Fraction(sweep * 10**9) / hz)
    period = Fraction(10**9) / (hz * steps)                    # ns between firings
    firing = np.array([start + _half_up(k * period) for k in range(steps)], np.int64)
    since_start_s = (np.arange(steps)[:, None] * float(period) + delays[None, :]) * 1e-9
    sign = 1.0 if sensor.get("spin_direction", "ccw") == "ccw" else -1.0
    az = np.radians(sensor.get("start_azimuth_deg", 0.0) + sign * 360.0 * float(hz) * since_start_s
                    + az_offsets[None, :])
    el = np.broadcast_to(np.radians(elev)[None, :], az.shape)
    dirs = np.stack([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)], -1)
    return {"t": firing[:, None] + delays[None, :], "dirs": dirs, "start": start, "elevations_deg": elev,
            "reference": start + _half_up(steps * period / 2)}


def _expected(e, m, a):
    """(rig-derived directions, beam times, closed-form ranges from the scene's mount motion and planes); also
    checks that the exported beam and point times are the rig's."""
    assert e.event.name == f"{SWEEP:06d}"
    truth = _rig_beams(json.loads(e.rig.read_text())["sensors"][0], SWEEP)
    dirs, t = truth["dirs"], truth["t"]
    assert m["event"]["sweep_start_ns"] == truth["start"]
    assert np.array_equal(truth["start"] + a["time_offset_ns"].astype(np.int64), t)
    pts = a["points"]
    assert np.array_equal(pts["t_ns"], t[pts["firing"], pts["channel"]])
    F, C = a["range"].shape
    assert (F, C) == t.shape
    return dirs, t, np.array([[e.truth.expected_range(t[k, c], dirs[k, c]) for c in range(C)] for k in range(F)])


def _passes(e):
    report = check_bundle(e.bundle)
    assert report["status"] == "pass", [c for ev in report["events"] for c in ev["checks"] if c["status"] != "pass"]


def test_box_room_exact_ranges_and_normals(exports):
    e = exports("box_room", lc.box_room)
    m, a = load_event(e.event)
    dirs, t, expected = _expected(e, m, a)
    assert a["valid"].all() and a["range"].shape == (256, 32)
    assert np.abs(a["range"] - expected).max() < RANGE_TOL
    # the geometric normal is the wall's inward normal, in the LiDAR frame (yawed 20 deg), facing the sensor
    T = e.truth.pose(0)
    n_world = np.einsum("ij,fcj->fci", T[:3, :3], a["normal_geometric"].astype(np.float64))
    assert np.abs(np.abs(n_world).max(axis=-1) - 1.0).max() < 1e-5          # axis-aligned walls
    assert np.all(np.einsum("fci,fci->fc", a["normal_geometric"], dirs) < 0)
    assert np.abs(a["cos_incidence"] + np.einsum("fci,fci->fc", a["normal_geometric"], dirs)).max() < 1e-6
    assert len(a["points"]) == 256 * 32 and a["points"]["t_ns"][0] == t[0, 0]
    _passes(e)


def test_box_room_vlp16_sequential_channels(exports):
    e = exports("box_room_vlp16", lc.box_room, steps=1800, preset="vlp16")
    m, a = load_event(e.event)
    _, t, expected = _expected(e, m, a)
    assert np.abs(a["range"] - expected).max() < RANGE_TOL
    assert a["time_offset_ns"][0].tolist() == [2304 * i for i in range(16)]
    assert m["method"]["cycles"]["rows_per_firing"] == 24
    assert m["method"]["cycles"]["render_time_quantization_ns"] < 200
    _passes(e)


def test_moving_wall_range_per_firing(exports):
    """Wall approaching at 20 m/s: each firing's range is the wall at that firing's time, not at sweep start."""
    e = exports("moving_wall", lc.moving_wall)
    m, a = load_event(e.event)
    dirs, t, expected = _expected(e, m, a)
    valid = a["valid"] == 1
    assert valid.sum() > 1000
    facing = valid & (a["cos_incidence"] > 0.2)
    assert np.abs(a["range"] - expected)[facing].max() < RANGE_TOL
    # every return lies on the wall plane at its own time (independent of beam direction rounding)
    pts = a["points"]
    x_wall = e.truth.notes["x0"] + e.truth.notes["speed"] * t[pts["firing"], pts["channel"]] * 1e-9
    assert np.abs(pts["x_world"] - x_wall).max() < RANGE_TOL
    # and visibly differs from the sweep-start wall for late firings (up to 2 m along x)
    x_start = e.truth.notes["x0"] + e.truth.notes["speed"] * t[0, 0] * 1e-9
    late = pts["firing"] > 200
    assert np.abs(pts["x_world"][late] - x_start).min() > 1.5
    _passes(e)


def test_moving_wall_with_sequential_channel_times(exports):
    """VLP-16 timing: channel 15 fires 34.56 us after channel 0; at 20 m/s that is 0.7 mm, resolved."""
    e = exports("moving_wall_vlp16", lc.moving_wall, steps=1800, preset="vlp16")
    m, a = load_event(e.event)
    _, t, _ = _expected(e, m, a)
    pts = a["points"]
    speed, x0 = e.truth.notes["speed"], e.truth.notes["x0"]
    at_own_time = np.abs(pts["x_world"] - (x0 + speed * t[pts["firing"], pts["channel"]] * 1e-9))
    firing_time = t[pts["firing"], 0]                          # channel 0 fires with no delay
    at_firing_time = np.abs(pts["x_world"] - (x0 + speed * firing_time * 1e-9))
    assert at_own_time.max() < 2e-5
    late_channels = pts["channel"] >= 12
    assert at_firing_time[late_channels].min() > 4e-4
    _passes(e)


def test_ego_translating_sensor(exports):
    """Mount moving at 15 m/s in a corridor: origins move 1.5 m over the sweep; ranges stay exact."""
    e = exports("ego_translating", lc.ego_translating)
    m, a = load_event(e.event)
    dirs, t, expected = _expected(e, m, a)
    assert a["valid"].all()
    assert np.abs(a["range"] - expected).max() < RANGE_TOL
    firing_t = t[:, 0]                                          # no channel delays
    poses = a["firing_T_world_lidar"][:, 0]
    assert np.abs(poses[-1, :3, 3] - poses[0, :3, 3])[0] == pytest.approx(15 * (firing_t[-1] - firing_t[0]) * 1e-9,
                                                                            abs=1e-5)
    for k in (0, 100, 255):
        assert np.abs(poses[k] - e.truth.pose(firing_t[k])).max() < 1e-5
    # motion-compensated points: world points in the LiDAR frame at the sweep centre
    reference_ns = _rig_beams(json.loads(e.rig.read_text())["sensors"][0], SWEEP)["reference"]
    assert m["calibration"]["T_lidar_world"]["time_ns"] == reference_ns
    T_ref = np.linalg.inv(e.truth.pose(reference_ns))
    pts = a["points"]
    world = np.stack([pts["x_world"], pts["y_world"], pts["z_world"]], -1)
    assert np.abs(a["points_motion_compensated"] - (world @ T_ref[:3, :3].T + T_ref[:3, 3])).max() < 1e-5
    # the per-point LiDAR-frame xyz differs from the compensated one by the ego motion (up to 0.75 m)
    own = np.stack([pts["x"], pts["y"], pts["z"]], -1)
    assert np.abs(own - a["points_motion_compensated"])[:, 0].max() > 0.7
    _passes(e)


def _cw_uniform_128(steps: int = 96):
    """The translating mount with a clockwise head starting at 37.5 deg, per-channel azimuth offsets
    (+-3 deg) and the uniform_128 preset; 96 firings: a firing period of 1041666.67 ns (rounded times)."""
    truth, rig = lc.ego_translating(steps=steps)
    rig["sensors"][0].update(preset="uniform_128", spin_direction="cw", start_azimuth_deg=37.5,
                             azimuth_offsets_deg=[round(3.0 * math.sin(c), 4) for c in range(128)])
    return truth, rig


def test_cw_sweep_with_azimuth_offsets_and_uniform_128(exports):
    """Every range equals the corridor's closed form along the rig-derived beam (cw spin, start azimuth,
    offsets, preset elevations of docs/lidar.md) from the mount's position at the beam's own time."""
    e = exports("cw_uniform_128", _cw_uniform_128)
    m, a = load_event(e.event)
    sensor = json.loads(e.rig.read_text())["sensors"][0]
    dirs, t, expected = _expected(e, m, a)
    assert a["range"].shape == (96, 128) and a["valid"].all()
    assert np.abs(a["range"] - expected).max() < RANGE_TOL
    beams = m["calibration"]["beams"]
    assert beams["spin_direction"] == "cw"
    assert [c["elevation_deg"] for c in beams["channels"]] == pytest.approx(np.linspace(-25, 15, 128), abs=1e-12)
    assert [c["azimuth_offset_deg"] for c in beams["channels"]] == sensor["azimuth_offsets_deg"]
    # every world point lies on its rig-derived beam from the mount's true origin at the beam's time
    pts = a["points"]
    world = np.stack([pts["x_world"], pts["y_world"], pts["z_world"]], -1)
    poses = np.array([e.truth.pose(x) for x in pts["t_ns"]])
    beam_world = np.einsum("nij,nj->ni", poses[:, :3, :3], dirs[pts["firing"], pts["channel"]])
    predicted = poses[:, :3, 3] + beam_world * expected[pts["firing"], pts["channel"]][:, None]
    assert np.abs(world - predicted).max() < RANGE_TOL
    # the truth discriminates: a ccw head or dropped offsets would put most beams elsewhere
    for wrong in ({"spin_direction": "ccw"}, {"azimuth_offsets_deg": [0.0] * 128}):
        other = _rig_beams({**sensor, **wrong}, SWEEP)["dirs"]
        assert np.degrees(np.arccos(np.clip(np.einsum("fci,fci->fc", other, dirs), -1, 1))).mean() > 1.0
    _passes(e)


def test_verification_sees_the_same_scene_inside_the_beam_render_settings(tmp_path):
    """export_lidar_event verifies a sweep while beam_renders' settings are still applied (one depsgraph
    re-evaluation per sweep, not one more for the casts). Those settings (AOV in every material, a default
    material for a bare mesh, lights and world off, motion blur flags, the beam camera) must change no geometry:
    the BVH verification inside them equals the one on the plain scene, on a moving wall, a box without a
    material and a sun."""
    import bpy

    from rowbeam.blender.sensors import lidar_event
    from rowbeam.blender.sensors.lidar_labels import labels_from_beams
    from rowbeam.blender.sensors.lidar_osl import lidar_shader_source
    from rowbeam.blender.export.run import ExportRequest, plan_export
    from rowbeam.blender.compat.scene_clock import rigid_poses
    from rowbeam.blender.scenes import common

    from tests.conftest import skip_without_custom_camera

    _, rig = lc.moving_wall(steps=64)
    skip_without_custom_camera(rig)
    common.add_box("bare_box", (2, 2, 2), (-4, 2, 1))
    bpy.context.scene.collection.objects.link(bpy.data.objects.new("sun", bpy.data.lights.new("sun", "SUN")))
    blend = common.save(tmp_path / "wall.blend", rig)
    plan = plan_export(ExportRequest(out=tmp_path / "o", blend=blend, rig=blend.with_suffix(".rig.json"), count=1,
                                     device="cpu"))
    ctx, sensor = plan.context, plan.jobs[0].sensor
    timing = sensor.timing(0)
    offsets, group = timing.time_groups()
    layout = sweep_layout(sensor.azimuth_steps, timing.firing_period_ns, sensor.time_offsets_ns)
    mount = ctx.scene.objects[sensor.object]
    poses = rigid_poses(ctx.scene, ctx.clock, mount, timing.firing_times_exact(offsets))
    poses = poses.reshape(sensor.azimuth_steps, len(offsets), 4, 4)
    directions = sensor.directions(timing)

    def verify(beams):
        labels, _ = labels_from_beams(beams, poses[:, group], directions, (sensor.min_range_m, sensor.max_range_m),
                                      ctx.lut)
        return lidar_event._verify(ctx, sensor, timing, labels, poses, directions, offsets, group)

    with lidar_event.beam_renders(ctx, sensor, timing, layout, lidar_shader_source) as (beams, _):
        assert ctx.scene.world is None and bpy.data.objects["sun"].hide_render     # the settings are applied
        inside = verify(beams)
    outside = verify(beams)
    assert inside == outside
    assert inside["beams_compared"] == 8 * 32 and inside["id_mismatch_beams"] == 0
    assert inside["worst_range_error_m"] < RANGE_TOL


def test_point_table_format(exports):
    e = exports("box_room", lc.box_room)
    m, a = load_event(e.event)
    entry = m["modalities"]["points"]
    assert entry["dtype"] == "record" and entry["format"] == "npz"
    assert [f["name"] for f in entry["fields"]] == list(a["points"].dtype.names)
    assert {f["name"]: f["units"] for f in entry["fields"]}["t_ns"] == "ns"
    assert m["modalities"]["points_motion_compensated"]["frame"] == "lidar_top:lidar at reference_time_ns"
    beams = m["calibration"]["beams"]
    assert len(beams["channels"]) == 32 and beams["spin_direction"] == "ccw"
    assert m["calibration"]["range_limits_m"] == {"min": 0.3, "max": 120.0}
    # the file itself, read by numpy alone, has docs/adapters.md's little-endian record layout
    readme = [("t_ns", "<i8"), ("channel", "<u2"), ("firing", "<u4")] + [(n, "<f8") for n in (
        "x", "y", "z", "x_world", "y_world", "z_world")] + [("instance_id", "<u4"), ("semantic_id", "<u4")]
    raw = np.load(e.event / entry["uri"], allow_pickle=False)["array"]     # docs/format.md
    assert raw.dtype == np.dtype(readme) and raw.shape == (256 * 32,)
    assert [(f["name"], np.dtype(f["dtype"]).newbyteorder("<")) for f in entry["fields"]] == \
        [(n, np.dtype(t)) for n, t in readme]


def test_beam_directions_helper():
    d = beam_directions([0.0, 90.0], [0.0, 45.0])
    assert d == pytest.approx(np.array([[1, 0, 0], [0, np.sqrt(0.5), np.sqrt(0.5)]]))


@pytest.fixture
def room_copy(exports, tmp_path):
    import shutil

    e = exports("box_room", lc.box_room)
    shutil.copytree(e.bundle, tmp_path / "b")
    return tmp_path / "b", next((tmp_path / "b" / "events").glob("*/*"))


def test_checker_catches_a_range_off_its_world_point(room_copy):
    from rowbeam.bundle.arrays import write_exr

    root, ev = room_copy
    _, a = load_event(ev)
    r = a["range"].copy()
    r[10, 3] += 0.01
    write_exr(ev / "range.exr", r, ["range"], "float32")
    rehash(ev, "range")
    assert_fails(root, "range_equals_world_distance", "differs from |p_world - origin(t)|")


def test_checker_catches_points_stamped_with_the_sweep_start(room_copy):

    root, ev = room_copy
    _, a = load_event(ev)
    pts = a["points"].copy()
    pts["t_ns"] = pts["t_ns"][0]
    save_payload(ev, "points", pts)
    assert_fails(root, "points_times", "differ from beam times")


def test_checker_catches_returns_beyond_the_declared_limits(room_copy):
    root, ev = room_copy
    m = json.loads((ev / "manifest.json").read_text())
    m["calibration"]["range_limits_m"]["max"] = 4.0
    (ev / "manifest.json").write_text(json.dumps(m))
    assert_fails(root, "range_limits", "returns outside [0.3, 4.0] m")


def test_checker_catches_a_wrong_beam_table(room_copy):
    root, ev = room_copy
    m = json.loads((ev / "manifest.json").read_text())
    m["calibration"]["beams"]["channels"][5]["elevation_deg"] += 0.1
    (ev / "manifest.json").write_text(json.dumps(m))
    assert_fails(root, "beam_directions", "off their beam-table direction")
