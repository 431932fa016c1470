"""LiDAR sweeps that need more image rows than one Blender render has, and the default event count.

Truth is computed here from the rig numbers (elevations, k * 360 deg / steps, spin direction, start
azimuth, per-channel azimuth and time offsets, mount motion), not from the exported beam table.
"""
from __future__ import annotations

import json
import random
from fractions import Fraction

import numpy as np

from rowbeam.sensors.lidar import preset_table
from rowbeam.blender.cycles.cycles_timing import cycles_row_time_ns
from rowbeam.blender.sensors.lidar_layout import MAX_ROWS, sweep_layout
from rowbeam.blender.scenes import lidar_calibration as lc

from tests.conftest import REPO, run_python
from tests.helpers import load_event

RANGE_TOL = 1e-4     # m, as for the single-render sweeps in test_lidar.py
NS = 10**9


def _rig_beams(sensor: dict, index: int):
    """(t_ns (F, C) float64 scene time, unit directions (F, C, 3) in the LiDAR frame) of sweep `index`,
    straight from the rig's numbers."""
    hz, F = Fraction(sensor["rotation_hz"]), sensor["azimuth_steps"]
    elev = np.radians(np.array(sensor.get("elevations_deg") or preset_table(sensor["preset"])["elevations_deg"]))
    C = elev.size
    delays = np.array(sensor.get("time_offsets_ns", [0] * C), dtype=np.float64)
    az_off = np.array(sensor.get("azimuth_offsets_deg", [0.0] * C))
    start = float(sensor["first_sweep_ns"] + Fraction(index * NS) / hz)
    since_start = np.arange(F)[:, None] * float(NS / (hz * F)) + delays[None, :]     # ns
    sign = -1.0 if sensor.get("spin_direction") == "cw" else 1.0
    az = np.radians(sensor.get("start_azimuth_deg", 0.0) + sign * 360.0 * float(hz) * since_start * 1e-9 + az_off)
    el = np.broadcast_to(elev, az.shape)
    d = np.stack([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)], axis=-1)
    return start + since_start, d


def _with(builder, **sensor_fields):
    """A scene builder whose rig's LiDAR gets `sensor_fields` (a preset is dropped when elevations are given)."""
    def build(**kw):
        truth, rig = builder(**kw)
        s = rig["sensors"][0]
        if "elevations_deg" in sensor_fields:
            s.pop("preset", None)
        s.update(sensor_fields)
        return truth, rig
    return build


def _check_passes(bundle):
    r = run_python("-m", "rowbeam", "check", bundle)
    assert r.returncode == 0, r.stdout + r.stderr


# ---- layout (pure) ----------------------------------------------------------------------------------------

def _random_rig(rng: random.Random):
    hz = rng.choice([5, 10, 10, 20, 15.5, 29.97])
    steps = rng.choice([rng.randint(1, 4000), rng.randint(100, 2500), 900, 1800])
    period = Fraction(NS) / (Fraction(repr(float(hz))) * steps)
    C = rng.choice([1, 3, 12, 16, 32, 64, 128])
    kind = rng.choice(["together", "linear", "random"])
    top = int(period) - 1 if period == int(period) else int(period)        # every delay < period
    if kind == "together":
        delays = [0] * C
    elif kind == "linear":
        step = rng.randint(1, max(1, top // C))
        delays = [step * c for c in range(C)]
    else:
        delays = [rng.randint(0, top) for _ in range(C)]
    return hz, steps, period, delays


def test_every_beam_traced_at_its_declared_time_within_quantization():
    """Random legal rigs: each beam's row time in its render (Cycles' measured model (r+1)/H of the shutter)
    equals firing k's time + channel delay within the declared quantization; no render exceeds MAX_ROWS rows;
    renders cover the firings contiguously and no two beams share a pixel."""
    rng = random.Random(8)
    split = 0
    for _ in range(30):
        hz, F, period, delays = _random_rig(rng)
        layout = sweep_layout(F, period, delays)
        renders = layout.renders()
        assert [r.first_firing for r in renders] == [0] + list(np.cumsum([r.firings for r in renders])[:-1])
        assert sum(r.firings for r in renders) == F
        assert all(1 <= r.rows <= MAX_ROWS for r in renders)
        assert len(renders) == -(-F * layout.slots // MAX_ROWS) or len(renders) == -(-F // (MAX_ROWS // layout.slots))
        split += len(renders) > 1
        rows, cols = layout.pixel_of_beam()
        assert np.unique(rows * layout.width + cols).size == rows.size
        assert cols.max() < layout.width
        worst = 0.0
        for r in renders:
            shutter = r.shutter(_Timing(period))
            open_ns = shutter.centre_ns - shutter.duration_ns / 2
            k = np.arange(r.first_firing, r.first_firing + r.firings)
            local = rows[k] - k[0] * layout.slots                 # row inside this render
            assert local.min() >= 0 and local.max() < r.rows
            assert np.array_equal(layout.pixel_of_beam(r)[0], local) and np.array_equal(layout.pixel_of_beam(r)[1], cols[k])
            # exact at a few beams, float64 everywhere (times relative to the sweep start stay below 1e10 ns)
            for kk, c in ((0, 0), (r.firings - 1, len(delays) - 1), (r.firings // 2, len(delays) // 2)):
                got = cycles_row_time_ns(shutter, r.rows, int(local[kk, c]))
                want = (r.first_firing + kk) * period + delays[c]
                assert abs(got - want) <= Fraction(layout.quantization_ns) + Fraction(1, 10**6)
            got = float(open_ns) + float(shutter.duration_ns) * (local + 1) / r.rows
            want = k[:, None] * float(period) + np.asarray(delays, dtype=np.float64)[None, :]
            worst = max(worst, float(np.abs(got - want).max()))
        assert worst <= layout.quantization_ns + 1e-3
        assert worst >= layout.quantization_ns - 1e-3            # the declared quantization is the real worst
    assert split >= 5


class _Timing:
    """The two things a render's shutter needs from a sweep's timing: sweep start 0, exact firing period."""

    def __init__(self, period):
        self.firing_period_ns = period

    def firing_time_exact(self, k):
        return k * self.firing_period_ns


def test_the_issue_rigs_need_split_renders():
    """12 channels fired 1.5 us apart, 900 (or 450) steps at 10 Hz: 65,700 rows, more than Blender renders."""
    for steps in (900, 450):
        layout = sweep_layout(steps, Fraction(NS, 10 * steps), [1500 * c for c in range(12)])
        assert layout.rows == 65_700 > MAX_ROWS
        assert layout.quantization_ns <= 250
        assert [r.rows for r in layout.renders()] == [32_850, 32_850]
    fits = sweep_layout(1800, Fraction(NS, 18000), preset_table("vlp16")["time_offsets_ns"])
    assert len(fits.renders()) == 1 and fits.renders()[0].rows == fits.rows == 43_200


def test_largest_legal_layout_splits_within_the_row_limit():
    """The schema's most firings (100,000) at the most slots (256): 25.6 M rows in renders of <= 65,536 rows."""
    from rowbeam.blender.sensors.lidar_layout import MAX_SLOTS, SweepLayout

    big = SweepLayout(100_000, MAX_SLOTS, 4, (0,), (0,), 0.0)
    renders = big.renders()
    assert sum(r.rows for r in renders) == 100_000 * MAX_SLOTS
    assert max(r.rows for r in renders) <= MAX_ROWS and len(renders) == -(-100_000 // (MAX_ROWS // MAX_SLOTS))
    assert all(b.first_firing == a.first_firing + a.firings for a, b in zip(renders, renders[1:], strict=False))


# ---- exported sweeps --------------------------------------------------------------------------------------

TWELVE = {"elevations_deg": [-15.0 + 30.0 * c / 11 for c in range(12)], "time_offsets_ns": [1500 * c for c in range(12)]}


def _sensor(e) -> dict:
    return json.loads(e.rig.read_text())["sensors"][0]


def _split_method(m) -> dict:
    cyc = m["method"]["cycles"]
    assert cyc["image_rows"] > MAX_ROWS and len(cyc["renders"]) >= 2
    assert all(r["image_rows"] <= MAX_ROWS for r in cyc["renders"])
    assert sum(r["image_rows"] for r in cyc["renders"]) == cyc["image_rows"]
    return cyc


def test_twelve_channels_900_steps_on_an_approaching_wall(exports):
    """Wall approaching at 20 m/s: every return lies on the wall at its own beam time (split sweep)."""
    e = exports("wall_12ch_900", _with(lc.moving_wall, **TWELVE), steps=900)
    m, a = load_event(e.event)
    cyc = _split_method(m)
    sensor = _sensor(e)
    t, d = _rig_beams(sensor, int(e.event.name))
    expected = np.array([[e.truth.expected_range(t[k, c], d[k, c]) for c in range(12)] for k in range(900)])
    valid = a["valid"] == 1
    facing = valid & (a["cos_incidence"] > 0.2)
    assert facing.sum() > 3000
    err = np.abs(a["range"] - expected)[facing]
    print(f"12ch x 900 split into {len(cyc['renders'])} renders of {[r['image_rows'] for r in cyc['renders']]} rows, "
          f"quantization {cyc['render_time_quantization_ns']:.1f} ns, worst range error {err.max():.3g} m, "
          f"run seconds {m['run'].get('seconds')}")
    assert err.max() < RANGE_TOL
    # both halves of the sweep (both renders) are there and exact: the wall moves 2 m over the sweep
    half = cyc["renders"][1]["first_firing"]
    assert facing[:half].sum() > 1000 and facing[half:].sum() > 1000
    pts = a["points"]
    x_wall = e.truth.notes["x0"] + e.truth.notes["speed"] * pts["t_ns"] * 1e-9
    assert np.abs(pts["x_world"] - x_wall).max() < 2e-5
    assert cyc["render_time_quantization_ns"] <= 250
    _check_passes(e.bundle)


UNIFORM_128 = {"preset": "uniform_128", "time_offsets_ns": [1400 * (c // 4) for c in range(128)], "spin_direction": "cw",
               "start_azimuth_deg": 37.0, "azimuth_offsets_deg": [((c * 7) % 11 - 5) * 0.3 for c in range(128)]}


def test_128_channels_fired_in_delayed_banks_on_a_moving_mount(exports):
    """uniform_128, cw spin, start azimuth and per-channel azimuth offsets; 32 banks of 4 channels, bank b fired
    1.4 us x b after its firing (1.4 us does not divide the 333,333.3 ns period of 300 steps at 10 Hz): 237 rows
    per firing, two renders; ranges from a mount moving at 15 m/s. (32 distinct delays, not 128, to keep the test
    fast: the exporter evaluates the mount pose with one frame_set per firing and distinct delay.)"""
    e = exports("corridor_128ch", _with(lc.ego_translating, **UNIFORM_128), steps=300)
    m, a = load_event(e.event)
    cyc = _split_method(m)
    sensor = _sensor(e)
    t, d = _rig_beams(sensor, int(e.event.name))
    expected = np.array([[e.truth.expected_range(t[k, c], d[k, c]) for c in range(128)] for k in range(300)])
    assert a["valid"].all()
    err = np.abs(a["range"] - expected)
    print(f"128ch x 300 split into {len(cyc['renders'])} renders of {[r['image_rows'] for r in cyc['renders']]} rows, "
          f"quantization {cyc['render_time_quantization_ns']:.1f} ns, worst range error {err.max():.3g} m")
    # beyond float32 hit positions, a grazing beam's range error grows as 1/cos(incidence): bound the distance from
    # the true wall (range error x cos) everywhere and the range itself where the beam meets the wall squarely
    facing = a["cos_incidence"] > 0.2
    assert facing.sum() > 0.8 * facing.size
    assert err[facing].max() < RANGE_TOL / 2
    assert (err * a["cos_incidence"]).max() < RANGE_TOL / 5
    print(f"run seconds {m['run'].get('seconds')}")
    # every point's world position = mount position at its own time + range * rotated direction
    k, c = a["points"]["firing"].astype(int), a["points"]["channel"].astype(int)
    origin = np.stack([e.truth.pose(ti)[:3, 3] for ti in t[k, c]])
    world = np.stack([a["points"][n] for n in ("x_world", "y_world", "z_world")], -1)
    assert np.abs(world - origin - a["range"][k, c, None] * d[k, c]).max() < RANGE_TOL
    _check_passes(e.bundle)


# ---- default --count -------------------------------------------------------------------------------------

def _events_ending_by(first_ns: int, rate_hz, duration_ns: int, end_ns: Fraction) -> int:
    """Count by enumeration: events k whose start (rounded half up) + duration <= end_ns."""
    n = 0
    while first_ns + int(Fraction(n * NS) / Fraction(rate_hz) + Fraction(1, 2)) + duration_ns <= end_ns:
        n += 1
    return n


def _two_sensor_scene(tmp_path, fps, frame_end, lidar_fields=None, camera_fields=None):
    from rowbeam.blender.scenes import common

    _, rig = lc.box_room(steps=64)
    s = rig["sensors"][0]
    s.update(lidar_fields or {})
    import bpy

    scene = bpy.context.scene
    scene.render.fps, scene.frame_start, scene.frame_end = fps, 1, frame_end
    common.add_camera("cam", common.look_along((0.3, -0.2, 1.2), (1, 0, 0), (0, 0, -1)), 16.0, 16.0, 9.0, 32, 18)
    cam = common.camera_rig("camera_front", "cam", rate_hz=20, image_size_px=[32, 18], rgb_samples=0,
                            **(camera_fields or {}))["sensors"][0]
    rig["sensors"].append(cam)
    blend = common.save(tmp_path / "two.blend", rig)
    return blend, rig


def test_default_count_exports_every_event_inside_the_frame_range(tmp_path):
    """20 fps, frames 1..7 (0.3 s): LiDAR sweeps of 100 ms at 10 Hz -> 3 (the last ends exactly at 0.3 s);
    camera at 20 Hz with 12 + 4 ms acquisition -> 6. No --count on the command line."""
    fps, frame_end = 20, 7
    blend, rig = _two_sensor_scene(tmp_path, fps, frame_end)
    out = tmp_path / "bundle"
    r = run_python(REPO / "render_export.py", blend, "--rig", blend.with_suffix(".rig.json"), "--out", out,
                   "--device", "cpu")
    assert r.returncode == 0, r.stderr[-3000:]
    end_ns = Fraction((frame_end - 1) * NS, fps)
    lidar, cam = rig["sensors"]
    want = {"lidar_top": _events_ending_by(lidar["first_sweep_ns"], lidar["rotation_hz"], NS // lidar["rotation_hz"],
                                           end_ns),
            "camera_front": _events_ending_by(cam["first_event_ns"], cam["rate_hz"],
                                              cam["readout_ns"] + cam["exposure_ns"], end_ns)}
    assert want == {"lidar_top": 3, "camera_front": 6}
    got = {sid: sorted(p.name for p in (out / "events" / sid).iterdir()) for sid in want}
    assert got == {sid: [f"{i:06d}" for i in range(n)] for sid, n in want.items()}
    _check_passes(out)


def test_default_count_beyond_the_bundle_indices_is_one_line(tmp_path):
    """A 500 kHz LiDAR (one firing per sweep) over frames 1..250 at 24 fps holds ~5e6 sweeps: refused at once,
    with the count, not looped over; nothing written."""
    blend, rig = _two_sensor_scene(tmp_path, 24, 250, lidar_fields={"rotation_hz": 500_000, "azimuth_steps": 1})
    out = tmp_path / "bundle"
    r = run_python(REPO / "render_export.py", blend, "--rig", blend.with_suffix(".rig.json"), "--out", out,
                   "--sensors", "lidar_top", timeout=120)
    end_ns, sweep_ns = 249 * NS // 24, 2000              # 10.375 s exactly; k*2000 + 2000 <= end for k = 0 .. n-1
    n = (end_ns - sweep_ns) // sweep_ns + 1
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rowbeam export: error: sensor 'lidar_top'"), r.stderr
    assert f"hold {n} events" in lines[0]
    assert not out.exists()


def test_closed_form_count_agrees_with_enumeration():
    from rowbeam.model.timing import periodic_event_count

    rng = random.Random(8)
    for _ in range(400):
        first_ns = rng.choice([0, 7_000_000, 123_456_789])
        rate = rng.choice([10, 24, 29.97, 30, 7.3, 100, 0.5, 59.94])
        dur = rng.randint(0, NS // 5)
        end = Fraction(rng.randint(0, 3 * NS), rng.choice([1, 3, 7, 24]))
        assert periodic_event_count(first_ns, rate, dur, end) == _events_ending_by(first_ns, rate, dur, end)
