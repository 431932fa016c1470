"""render_export.py: both invocation styles, bad input (one line, non-zero, nothing written), resume."""
from __future__ import annotations

import json
import math
import os
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from rowbeam.blender.scenes import calibration, common

from tests.conftest import REPO, blender_binary, run_python
from tests.helpers import save_plane_scene

EXPORT = REPO / "render_export.py"


@pytest.fixture(scope="module")
def scene_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    a = save_plane_scene(d / "a.blend", scale=16)
    _, rig_b = calibration.tilted_plane(scale=16)
    b = common.save(d / "b.blend", rig_b)
    return a, b


def _tree(path: Path) -> dict:
    return {str(p.relative_to(path)): p.stat().st_mtime_ns for p in sorted(path.rglob("*"))} if path.exists() else {}


def _one_line_error(r, *fragments):
    assert r.returncode != 0, r.stdout
    errors = [line for line in r.stderr.splitlines() if line.startswith("rowbeam export: error:")]
    assert len(errors) == 1, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    for frag in fragments:
        assert frag in errors[0], (frag, errors[0])


def _write_rig(path: Path, rig: dict) -> Path:
    path.write_text(json.dumps(rig))
    return path


def test_python_entry_exports_and_resumes(scene_files, tmp_path):
    a, _ = scene_files
    out = tmp_path / "out"
    r = run_python(EXPORT, a, "--rig", a.with_suffix(".rig.json"), "--out", out, "--count", "2", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    events = sorted((out / "events" / "camera_front").iterdir())
    assert [e.name for e in events] == ["000000", "000001"]
    assert "published 2" in r.stdout
    again = run_python(EXPORT, a, "--rig", a.with_suffix(".rig.json"), "--out", out, "--count", "2")
    assert again.returncode == 0 and "skipped 2" in again.stdout, again.stdout
    # a damaged payload is detected and only that event is exported again
    victim = events[1] / "range.exr"
    victim.write_bytes(victim.read_bytes()[:-10])
    third = run_python(EXPORT, a, "--rig", a.with_suffix(".rig.json"), "--out", out, "--count", "2")
    assert "published 1" in third.stdout and "skipped 1" in third.stdout, third.stdout
    check = run_python("-m", "rowbeam", "check", out)
    assert check.returncode == 0, check.stdout


def test_blender_dash_p_entry(scene_files, tmp_path):
    """`blender -b a.blend -P render_export.py -- ARGS`: the real command inside a Blender binary; with the
    bpy wheel, emulated (the file open, the script run as __main__ with argv after --)."""
    a, _ = scene_files
    out = tmp_path / "out"
    args = ["--rig", str(a.with_suffix(".rig.json")), "--out", str(out), "--count", "1"]
    if blender_binary():
        r = run_python(EXPORT, a, *args)
    else:
        code = (f"import bpy, sys; bpy.ops.wm.open_mainfile(filepath={str(a)!r}); "
                f"sys.argv = ['blender', '-b', {str(a)!r}, '-P', {str(EXPORT)!r}, '--', *{args!r}]; "
                f"exec(compile(open({str(EXPORT)!r}).read(), 'render_export.py', 'exec'), "
                f"{{'__name__': '__main__', '__file__': {str(EXPORT)!r}}})")
        r = run_python("-c", code)
    assert r.returncode == 0, r.stderr
    assert (out / "events" / "camera_front" / "000000" / "manifest.json").is_file()


def test_missing_blend(tmp_path, scene_files):
    a, _ = scene_files
    out = tmp_path / "out"
    r = run_python(EXPORT, tmp_path / "nope.blend", "--rig", a.with_suffix(".rig.json"), "--out", out)
    _one_line_error(r, "nope.blend", "does not exist")
    assert not out.exists()


def test_not_a_blend(tmp_path, scene_files):
    a, _ = scene_files
    fake = tmp_path / "fake.blend"
    fake.write_text("hello")
    r = run_python(EXPORT, fake, "--rig", a.with_suffix(".rig.json"), "--out", tmp_path / "out")
    _one_line_error(r, "fake.blend", "not a .blend file")


def test_missing_camera_object(tmp_path, scene_files):
    a, _ = scene_files
    rig = json.loads(a.with_suffix(".rig.json").read_text())
    rig["sensors"][0]["object"] = "NoSuchCamera"
    r = run_python(EXPORT, a, "--rig", _write_rig(tmp_path / "rig.json", rig), "--out", tmp_path / "out")
    _one_line_error(r, "camera_front", "'NoSuchCamera' is not in scene")
    assert not (tmp_path / "out").exists()


def test_object_that_is_not_a_camera(tmp_path, scene_files):
    a, _ = scene_files
    rig = json.loads(a.with_suffix(".rig.json").read_text())
    rig["sensors"][0]["object"] = "plane_z8"
    r = run_python(EXPORT, a, "--rig", _write_rig(tmp_path / "rig.json", rig), "--out", tmp_path / "out")
    _one_line_error(r, "'plane_z8' is a MESH, not a camera")


@pytest.mark.parametrize("edit, fragments", [
    (lambda s: s.update(colour="red"), ("rig.json", "sensors[0]", "unknown field(s) 'colour'")),
    (lambda s: s.update(rate_hz="thirty"), ("sensors[0].rate_hz", "'thirty' is not of type 'number'")),
    (lambda s: s.update(readout_ns=-5), ("sensors[0].readout_ns", "less than the minimum of 0")),
    (lambda s: s.update(readout_direction="left_to_right"), ("sensors[0].readout_direction",)),
    (lambda s: s.pop("exposure_ns"), ("'exposure_ns' is required",)),
    (lambda s: s.update(type="thermal_camera"), ("sensors[0].type",)),
])
def test_bad_rig_fields(tmp_path, scene_files, edit, fragments):
    a, _ = scene_files
    rig = json.loads(a.with_suffix(".rig.json").read_text())
    edit(rig["sensors"][0])
    r = run_python(EXPORT, a, "--rig", _write_rig(tmp_path / "rig.json", rig), "--out", tmp_path / "out")
    _one_line_error(r, *fragments)
    assert not (tmp_path / "out").exists()


def test_rig_that_is_not_json(tmp_path, scene_files):
    a, _ = scene_files
    bad = tmp_path / "rig.json"
    bad.write_text("{sensors: [")
    r = run_python(EXPORT, a, "--rig", bad, "--out", tmp_path / "out")
    _one_line_error(r, "rig.json", "not valid JSON")


def test_sensor_id_not_in_rig(tmp_path, scene_files):
    a, _ = scene_files
    r = run_python(EXPORT, a, "--rig", a.with_suffix(".rig.json"), "--out", tmp_path / "out", "--sensors", "lidar_top")
    _one_line_error(r, "'lidar_top' is not in the rig", "camera_front")
    assert not (tmp_path / "out").exists()


def test_output_folder_holding_a_different_dataset(tmp_path, scene_files):
    a, b = scene_files
    out = tmp_path / "out"
    first = run_python(EXPORT, a, "--rig", a.with_suffix(".rig.json"), "--out", out, "--count", "1")
    assert first.returncode == 0, first.stderr
    before = _tree(out)
    r = run_python(EXPORT, b, "--rig", b.with_suffix(".rig.json"), "--out", out, "--count", "1")
    _one_line_error(r, "holds a different dataset", "blend_sha256")
    assert _tree(out) == before


def test_output_folder_with_foreign_files(tmp_path, scene_files):
    a, _ = scene_files
    out = tmp_path / "out"
    out.mkdir()
    (out / "holiday.jpg").write_bytes(b"x")
    r = run_python(EXPORT, a, "--rig", a.with_suffix(".rig.json"), "--out", out)
    _one_line_error(r, "not empty", "bundle.json")
    assert sorted(os.listdir(out)) == ["holiday.jpg"]


def test_interrupted_event_leaves_no_manifest_and_resumes(tmp_path, scene_files):
    """kill -9 of a real exporter while an event's payloads sit written in its staging folder (not yet
    published): no folder or manifest appears for that event, published ones verify, and the rerun
    removes the dead writer's staging and publishes the rest."""
    import signal
    import time

    from rowbeam.blender.export.bundle import BundleWriter

    from tests.conftest import python_command

    a, _ = scene_files
    for attempt in range(3):                   # the kill must land between payload write and publish
        out = tmp_path / f"out{attempt}"
        args = [EXPORT, a, "--rig", a.with_suffix(".rig.json"), "--out", out, "--count", "3", "--device", "cpu"]
        p = subprocess.Popen(python_command(*args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        staged, deadline = None, time.monotonic() + 300
        while staged is None and p.poll() is None and time.monotonic() < deadline:
            staged = next((d for d in (out / ".staging").glob("w-*/events+*") if any(d.glob("*.exr"))), None)
            time.sleep(0.002)
        p.send_signal(signal.SIGKILL)
        p.wait()
        if staged is not None and staged.exists():
            break
    else:
        pytest.fail("three exporters published before a kill could land between payload write and publish")
    location = staged.name.replace("+", "/")
    assert not (out / location).exists()
    published = sorted((out / "events" / "camera_front").glob("*")) if (out / "events").exists() else []
    assert all(BundleWriter(out, {}).is_complete(e.relative_to(out).as_posix()) for e in published)
    again = run_python(*args)
    assert again.returncode == 0, again.stderr
    assert f"published {3 - len(published)}," in again.stdout and f"skipped {len(published)}" in again.stdout
    assert (out / location / "manifest.json").is_file() and not (out / ".staging").exists()


def _run_with_autoexec(code: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh bpy process whose preferences let .blend files run their scripts on load
    (the bpy wheel's default is off, which alone would keep a registered text block from running)."""
    code = "import bpy; bpy.context.preferences.filepaths.use_scripts_auto_execute = True; " + code
    blender = blender_binary()
    if blender:
        cmd = [blender, "-b", "--factory-startup", "--python-exit-code", "1", "--python-expr", code]
        return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    return run_python("-c", code)


def test_blend_scripts_are_not_run(tmp_path):
    """A .blend with a registered startup text block: its script must not run on export, even where
    Blender is set to auto-run scripts (the exporter opens files with use_scripts=False)."""
    import bpy

    _, rig = calibration.fronto_plane(scale=16)
    rig["sensors"][0]["rgb_samples"] = 0
    marker = tmp_path / "pwned"
    text = bpy.data.texts.new("evil.py")
    text.write(f"open({str(marker)!r}, 'w').write('ran')\n")
    text.use_module = True
    blend = common.save(tmp_path / "evil.blend", rig)
    # control: with auto-execution on, a plain open runs the script, so the check below can fail
    r = _run_with_autoexec(f"bpy.ops.wm.open_mainfile(filepath={str(blend)!r})")
    assert r.returncode == 0 and marker.read_text() == "ran", r.stderr
    marker.unlink()
    argv = [str(EXPORT), str(blend), "--rig", str(blend.with_suffix(".rig.json")), "--out", str(tmp_path / "out"),
            "--count", "1"]
    r = _run_with_autoexec(f"import runpy, sys; sys.argv = {argv!r}; runpy.run_path({str(EXPORT)!r}, run_name='__main__')")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "events" / "camera_front" / "000000" / "manifest.json").is_file()
    assert not marker.exists()


def test_cancel_between_events_leaves_only_complete_events(tmp_path, scene_files):
    """What the panel's Esc does: close the export after the first event."""
    from rowbeam.blender.export.run import ExportRequest, iter_export, new_summary, plan_export, run_export

    a, _ = scene_files
    request = ExportRequest(out=tmp_path / "out", blend=a, rig=a.with_suffix(".rig.json"), count=3)
    plan = plan_export(request)
    summary = new_summary(plan)
    steps = iter_export(plan, summary)
    done, total, _ = next(steps)
    steps.close()
    assert (done, total) == (1, 3) and summary["cancelled"] and len(summary["published"]) == 1
    assert [p.name for p in (tmp_path / "out" / "events" / "camera_front").iterdir()] == ["000000"]
    assert not (tmp_path / "out" / ".staging").exists()
    again = run_export(plan_export(request))
    assert len(again["skipped"]) == 1 and len(again["published"]) == 2 and not again["cancelled"]


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _frame_range_end_ns(scene) -> Fraction:
    """Scene-clock time (ns, t = 0 at frame_start) of frame_end."""
    return Fraction(scene.frame_end - scene.frame_start) * Fraction(scene.render.fps_base) / scene.render.fps * 10**9


def test_default_count_is_every_camera_event_inside_the_frame_range(tmp_path):
    """Without --count: every event k whose acquisition (start_k .. start_k + readout + exposure) ends by
    frame_end; a 3-frame scene at 30 fps holds 2 events of 16 ms at 30 Hz (the third would end at 82.7 ms)."""
    import bpy

    _, rig = calibration.fronto_plane(scale=16)
    s = rig["sensors"][0]
    s["rgb_samples"] = 0
    bpy.context.scene.frame_end = 3
    end_ns = _frame_range_end_ns(bpy.context.scene)
    blend = common.save(tmp_path / "short.blend", rig)
    n = 0
    while s["first_event_ns"] + Fraction(n * 10**9, s["rate_hz"]) + s["readout_ns"] + s["exposure_ns"] <= end_ns:
        n += 1
    assert n >= 2
    out = tmp_path / "out"
    r = run_python(EXPORT, blend, "--rig", blend.with_suffix(".rig.json"), "--out", out)
    assert r.returncode == 0, r.stderr
    assert _names(out / "events" / "camera_front") == [f"{k:06d}" for k in range(n)]
    assert f"published {n}," in r.stdout


def test_default_count_for_a_lidar(tmp_path):
    """Without --count a LiDAR exports every sweep that ends by frame_end: 8 frames at 30 fps = 233 ms
    hold sweeps 0 and 1 of 100 ms."""
    import bpy

    from rowbeam.blender.scenes import lidar_calibration

    _, rig = lidar_calibration.box_room(steps=16)
    s = rig["sensors"][0]
    bpy.context.scene.frame_end = 8
    end_ns = _frame_range_end_ns(bpy.context.scene)
    blend = common.save(tmp_path / "room.blend", rig)
    n = 0
    while s["first_sweep_ns"] + Fraction((n + 1) * 10**9, s["rotation_hz"]) <= end_ns:
        n += 1
    assert n >= 2
    out = tmp_path / "out"
    r = run_python(EXPORT, blend, "--rig", blend.with_suffix(".rig.json"), "--out", out)
    assert r.returncode == 0, r.stderr
    assert _names(out / "events" / "lidar_top") == [f"{k:06d}" for k in range(n)]


@pytest.fixture(scope="module")
def two_cameras(tmp_path_factory):
    """A rig of two cameras on one object; `--sensors camera_small --first-event 1 --count 1` exports only
    camera_small: 40 x 24 px (scene: 80 x 45), motion_steps 3, 10 Hz from 5 ms, 6 ms readout, 2 ms exposure."""
    d = tmp_path_factory.mktemp("two_cameras")
    truth, rig = calibration.fronto_plane(scale=16)
    front = rig["sensors"][0]
    front["rgb_samples"] = 0
    small = dict(front, id="camera_small", rate_hz=10, first_event_ns=5_000_000, readout_ns=6_000_000,
                 exposure_ns=2_000_000, image_size_px=[40, 24], motion_steps=3, verify_rows=2)
    rig["sensors"].append(small)
    blend = common.save(d / "two.blend", rig)
    out = d / "out"
    r = run_python(EXPORT, blend, "--rig", blend.with_suffix(".rig.json"), "--out", out, "--sensors", "camera_small",
                   "--first-event", "1", "--count", "1")
    assert r.returncode == 0, r.stderr
    return truth, small, out


def test_sensors_option_exports_only_the_named_sensor(two_cameras):
    """Only camera_small's folder exists, and its row times follow camera_small's timing (docs/camera.md formula:
    start + readout (v + 0.5)/H + exposure/2, rounded half up), not camera_front's."""
    from tests.helpers import load_event

    _, small, out = two_cameras
    assert _names(out / "events") == ["camera_small"]
    assert _names(out / "events" / "camera_small") == ["000001"]
    m, a = load_event(out / "events" / "camera_small" / "000001")
    H = small["image_size_px"][1]
    start = small["first_event_ns"] + Fraction(10**9, small["rate_hz"])
    want = [math.floor(start + Fraction(small["readout_ns"] * (2 * v + 1), 2 * H) + Fraction(small["exposure_ns"], 2)
                       + Fraction(1, 2)) for v in range(H)]
    assert a["row_time_ns"].tolist() == want


def test_image_size_px_sets_the_exported_grid(two_cameras):
    """image_size_px [40, 24] on an 80 x 45 scene camera: every array is 24 x 40, K is the same camera at
    40 px (AUTO fit: focal length and principal-point offset scale by 40/80), and the plane at z = 8 m
    has camera_z 8 and range 8 sqrt(1 + x_n^2 + y_n^2) on that grid."""
    from tests.helpers import load_event

    truth, small, out = two_cameras
    W, H = small["image_size_px"]
    m, a = load_event(out / "events" / "camera_small" / "000001")
    assert m["calibration"]["image_size_px"] == [W, H]
    for name in ("camera_z", "range", "valid", "instance_id", "semantic_id"):
        assert a[name].shape == (H, W), name
    assert a["normal_geometric"].shape == (H, W, 3) and a["row_T_world_camera"].shape == (H, 4, 4)
    W0, H0 = truth.size
    k = W / W0
    K = np.array([[truth.K[0, 0] * k, 0, W / 2 - 0.5 + (truth.K[0, 2] - (W0 / 2 - 0.5)) * k],
                  [0, truth.K[1, 1] * k, H / 2 - 0.5 + (truth.K[1, 2] - (H0 / 2 - 0.5)) * k], [0, 0, 1]])
    assert np.array(m["calibration"]["K"]) == pytest.approx(K, abs=1e-6)        # Blender stores shifts as float32
    u, v = np.meshgrid(np.arange(W, dtype=np.float64), np.arange(H, dtype=np.float64))
    x_n, y_n = (u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1]
    assert a["valid"].all()
    assert np.abs(a["camera_z"] - 8.0).max() < 1e-3
    assert np.abs(a["range"] - 8.0 * np.sqrt(1 + x_n**2 + y_n**2)).max() < 1e-3


def test_motion_steps_reach_the_label_render(two_cameras):
    _, small, out = two_cameras
    m = json.loads((out / "events" / "camera_small" / "000001" / "manifest.json").read_text())
    assert small["motion_steps"] != 7                             # not the default
    assert m["method"]["cycles"]["motion_steps"] == small["motion_steps"]


def test_flow_option_exports_consecutive_pairs(tmp_path):
    """--count 3 --flow: flows 0->1 and 1->2, each naming its endpoint events, with the rolling-shutter flow
    of a plate moving down: v = w T / (1 - w r), w = speed f / z px/s, r = readout / H, T = event spacing."""
    from rowbeam.blender.scenes import flow_scenes

    from tests.helpers import load_event

    truth, rig = flow_scenes.plate_moving_down(scale=16)
    s = rig["sensors"][0]
    blend = common.save(tmp_path / "p.blend", rig)
    out = tmp_path / "out"
    r = run_python(EXPORT, blend, "--rig", blend.with_suffix(".rig.json"), "--out", out, "--count", "3", "--flow")
    assert r.returncode == 0, r.stderr
    flows = out / "flows" / "camera_front"
    assert _names(flows) == ["000000-000001", "000001-000002"]
    w = truth["speed"] * truth["K"][1, 1] / truth["z"]
    for i in (0, 1):
        m, a = load_event(flows / f"{i:06d}-{i + 1:06d}")
        for role, k in (("source", i), ("destination", i + 1)):
            event = json.loads((out / "events" / "camera_front" / f"{k:06d}" / "manifest.json").read_text())
            assert m["endpoints"][role]["index"] == k and m["endpoints"][role]["sample_id"] == event["sample_id"]
        H = a["flow_forward"].shape[0]
        start = [s["first_event_ns"] + math.floor(Fraction(j * 10**9, s["rate_hz"]) + Fraction(1, 2)) for j in (i, i + 1)]
        T, row = (start[1] - start[0]) * 1e-9, s["readout_ns"] * 1e-9 / H
        rows = np.arange(H)[:, None] + a["flow_forward"][..., 1]
        inside = (a["flow_forward_dest_in_bounds"] == 1) & (rows <= H - 1)     # edge rows take the last row's time
        assert inside.mean() > 0.85
        assert np.abs(a["flow_forward"][..., 1][inside] - w * T / (1 - w * row)).max() < 1e-3
        assert np.abs(a["flow_forward"][..., 0][inside]).max() < 1e-3
    check = run_python("-m", "rowbeam", "check", out)
    assert check.returncode == 0, check.stdout
