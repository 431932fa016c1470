"""Malformed exporter input, table-driven: every case is a real `render_export.py` process that must stop
with exactly one `rowbeam export: error: ...` line naming the field/file, exit status 2, no traceback, and write
nothing (no --out folder, no probe or temp litter, TMPDIR left empty). Rig-only variants that need no
process are checked in-process through `rowbeam.model.rig.parse_rig_text`, the code path of both rig sources.

Scene of every case: the fronto-plane calibration scene (80 x 45 px, 30 fps, frames 1..30) with a
rolling-shutter camera (30 Hz, readout 12 ms, exposure 4 ms) and a 10 Hz LiDAR on an empty.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from rowbeam.util.errors import RowbeamError
from rowbeam.model.ontology import DEFAULT_ONTOLOGY
from rowbeam.model.rig import load_rig, parse_rig_text
from rowbeam.bundle.schema import MAX_JSON_DEPTH, MAX_USER_JSON_BYTES, loads_user_json, validator
from rowbeam.model import timing
from rowbeam.blender.scenes import calibration, common

from tests.conftest import REPO, run_python

EXPORT = REPO / "render_export.py"
RAW = "@@raw@@"      # a string value "@@raw@@TEXT" is written into the rig file as the bare JSON text TEXT


def _raw(text: str) -> str:
    return RAW + text


def _dump(rig: dict) -> str:
    text = json.dumps(rig)
    while RAW in text:
        start = text.index('"' + RAW)
        end = text.index('"', start + 1)
        text = text[:start] + text[start + 1 + len(RAW):end] + text[end + 1:]
    return text


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """Blends and rig of the corpus: a.blend (valid rig stored and beside it) and variants of the scene."""
    import bpy

    d = tmp_path_factory.mktemp("bad_input")
    _, rig = calibration.fronto_plane(scale=16)
    rig["sensors"][0]["rgb_samples"] = 0
    common.add_empty("lidar_mount", (0, 0, 1))
    rig["sensors"] += common.lidar_rig("lidar_top", "lidar_mount", azimuth_steps=64)["sensors"]
    sc = bpy.context.scene
    sc["rowbeam_rig"] = json.dumps(rig)
    blends = {"a": common.save(d / "a.blend", rig)}
    stored = {
        "stored_int": 7,
        "stored_array": [1, 2, 3],                       # an ID-property array
        "stored_group": {"schema": "rowbeam/rig@1"},     # an ID-property group
        "stored_not_json": "{sensors: [",
        "stored_nan": json.dumps(rig).replace('"rate_hz": 30', '"rate_hz": NaN'),
        "stored_deep": "[" * 100_000 + "]" * 100_000,
        "stored_huge": json.dumps({**rig, "name": "x" * (MAX_USER_JSON_BYTES + 10)}),
    }
    for name, value in stored.items():
        sc["rowbeam_rig"] = value
        blends[name] = common.save(d / f"{name}.blend")
    sc["rowbeam_rig"] = json.dumps(rig)
    sc["rowbeam_scenario"] = "bad/scenario"
    blends["bad_scenario"] = common.save(d / "bad_scenario.blend")
    del sc["rowbeam_scenario"]
    sc.render.resolution_x = 20_000
    blends["huge_resolution"] = common.save(d / "huge_resolution.blend")
    sc.render.resolution_x, sc.render.resolution_percentage = 80, 4     # 3 x 1 px rendered
    blends["tiny_resolution"] = common.save(d / "tiny_resolution.blend")
    return {"rig": rig, "blends": blends, "dir": d}


def _events_in_range(rate_hz, duration_ns, fps=30, frame_start=1, frame_end=30) -> int:
    """Events k >= 0 (first event at 0 ns) whose acquisition ends by frame_end: k/rate + duration <= end."""
    end = Fraction(frame_end - frame_start, fps)
    k = 0
    while Fraction(k) / Fraction(rate_hz) + Fraction(duration_ns, 10**9) <= end:
        k += 1
    return k


def _camera(edit):
    return lambda rig: edit(rig["sensors"][0])


def _lidar(edit):
    return lambda rig: edit(rig["sensors"][1])


def _set(**fields):
    return lambda s: s.update(fields)


# Cases of the tables below checked in-process (the function behind the CLI step that refuses them) to keep
# the process count near 40; every category keeps process cases.
IN_PROCESS = {
    "camera_rate_overflowing_literal", "camera_rate_zero", "camera_rate_string", "camera_first_event_10e30_int",
    "camera_readout_negative", "camera_image_too_narrow", "camera_id_trailing_newline", "camera_object_300_chars",
    "lidar_rotation_negative", "lineage_group_control_char",
    "rig_nested_100_deep", "rig_not_utf8", "rig_top_level_list", "rig_is_a_folder",
    "first_event_negative", "sensors_empty", "flow_pairs_three_indices", "device_unknown",
    "stored_rig_id_group", "stored_rig_not_json", "stored_rig_huge", "resolution_3x1_px",
    "camera_alpha_threshold_above_one", "lidar_surface_policy_unknown_field",
    "camera_clock_drift_beyond_1000_ppm", "camera_clock_resolution_zero", "camera_clock_rounding_unknown",
    "camera_layers_nine", "lidar_layers_refused",
}


def _cases(table, in_process: bool):
    chosen = [c for c in table if (c[0] in IN_PROCESS) == in_process]
    return {"argvalues": [c[1:] for c in chosen], "ids": [c[0] for c in chosen]}


# (case id, rig edit, extra CLI args, fragments every error line must contain)
RIG_CASES = [
    ("camera_rate_nan", _camera(_set(rate_hz=_raw("NaN"))), [], ["rig.json", "NaN", "finite"]),
    ("camera_rate_infinity", _camera(_set(rate_hz=_raw("Infinity"))), [], ["rig.json", "Infinity", "finite"]),
    ("camera_rate_overflowing_literal", _camera(_set(rate_hz=_raw("1e400"))), [], ["rig.json", "1e400", "finite"]),
    ("camera_rate_1e300", _camera(_set(rate_hz=1e300)), [], ["rig.json", "sensors[0].rate_hz", "maximum"]),
    ("camera_rate_zero", _camera(_set(rate_hz=0)), [], ["rig.json", "sensors[0].rate_hz", "minimum"]),
    ("camera_rate_string", _camera(_set(rate_hz="thirty")), [], ["sensors[0].rate_hz", "not of type 'number'"]),
    ("camera_first_event_1e30_float", _camera(_set(first_event_ns=1e30)), [],
     ["sensors[0].first_event_ns", "not of type 'integer'"]),
    ("camera_first_event_10e30_int", _camera(_set(first_event_ns=10**30)), [],
     ["sensors[0].first_event_ns", "maximum"]),
    ("camera_readout_longer_than_period", _camera(_set(readout_ns=100_000_000)), [],
     ["sensors[0].readout_ns", "longer than the frame period", "33333333"]),
    ("camera_exposure_longer_than_period", _camera(_set(exposure_ns=40_000_000)), [],
     ["sensors[0].exposure_ns", "longer than the frame period"]),
    ("camera_readout_negative", _camera(_set(readout_ns=-5)), [], ["sensors[0].readout_ns", "minimum of 0"]),
    ("camera_image_65536", _camera(_set(image_size_px=[65536, 65536])), [],
     ["sensors[0].image_size_px[0]", "maximum of 16384"]),
    ("camera_image_too_narrow", _camera(_set(image_size_px=[2, 18])), [], ["sensors[0].image_size_px[0]", "minimum of 4"]),
    ("camera_id_parent_dir", _camera(_set(id="..")), [], ["rig.json", "sensors[0].id", "'..'"]),
    ("camera_id_slash", _camera(_set(id="cams/front")), [], ["sensors[0].id", "path component"]),
    ("camera_id_trailing_newline", _camera(_set(id="front\n")), [], ["sensors[0].id", "path component"]),
    ("camera_object_nul", _camera(_set(object="cam\x00era")), [], ["sensors[0].object", "control characters"]),
    ("camera_object_300_chars", _camera(_set(object="c" * 300)), [], ["sensors[0].object", "longer than 255"]),
    ("duplicate_sensor_id", lambda rig: rig["sensors"][1].update(id="camera_front"), [],
     ["sensors[1].id", "duplicate sensor id 'camera_front'"]),
    ("lidar_rotation_nan", _lidar(_set(rotation_hz=_raw("NaN"))), [], ["rig.json", "NaN", "finite"]),
    ("lidar_max_range_infinity", _lidar(_set(max_range_m=_raw("Infinity"))), [], ["rig.json", "Infinity"]),
    ("lidar_max_range_1e300", _lidar(_set(max_range_m=1e300)), [], ["sensors[1].max_range_m", "maximum"]),
    ("lidar_rotation_negative", _lidar(_set(rotation_hz=-10)), [], ["sensors[1].rotation_hz", "minimum"]),
    ("lidar_firings_faster_than_1ns", _lidar(_set(rotation_hz=100_000, azimuth_steps=100_000)), [],
     ["sensors[1].azimuth_steps", "more than once per ns"]),
    ("lidar_delay_not_shorter_than_firing", _lidar(_set(preset="vlp16", azimuth_steps=100_000)), [],
     ["sensors[1].time_offsets_ns", "not shorter than the firing period"]),
    ("lineage_group_control_char", lambda rig: rig.update(lineage={"scenario": "s", "lineage_group": "g\x07"}), [],
     ["lineage.lineage_group", "control characters"]),
    ("camera_alpha_threshold_zero", _camera(_set(surface_policy={"alpha_threshold": 0})), [],
     ["rig.json", "sensors[0].surface_policy.alpha_threshold", "minimum of 0"]),
    ("camera_alpha_threshold_above_one", _camera(_set(surface_policy={"alpha_threshold": 1.5})), [],
     ["sensors[0].surface_policy.alpha_threshold", "maximum of 1"]),
    ("lidar_transmission_unknown", _lidar(_set(surface_policy={"transmission": "refract"})), [],
     ["rig.json", "sensors[1].surface_policy.transmission", "'refract'"]),
    ("lidar_surface_policy_unknown_field", _lidar(_set(surface_policy={"hair": "ribbon"})), [],
     ["sensors[1].surface_policy", "'hair'"]),
    ("camera_delivery_latency_negative", _camera(_set(delivery={"latency_ns": -1})), [],
     ["rig.json", "sensors[0].delivery.latency_ns", "minimum of 0"]),
    ("lidar_clock_drift_beyond_1000_ppm", _lidar(_set(clock={"drift_ppm": -1000.5})), [],
     ["rig.json", "sensors[1].clock.drift_ppm", "minimum of -1000"]),
    ("camera_clock_drift_beyond_1000_ppm", _camera(_set(clock={"drift_ppm": 1001})), [],
     ["sensors[0].clock.drift_ppm", "maximum of 1000"]),
    ("camera_clock_resolution_zero", _camera(_set(clock={"resolution_ns": 0})), [],
     ["sensors[0].clock.resolution_ns", "minimum of 1"]),
    ("camera_clock_rounding_unknown", _camera(_set(clock={"rounding": "even"})), [],
     ["sensors[0].clock.rounding", "'even'"]),
    ("camera_layers_nine", _camera(_set(surface_policy={"layers": 9})), [],
     ["sensors[0].surface_policy.layers", "maximum of 8"]),
    ("lidar_layers_refused", _lidar(_set(surface_policy={"layers": 2})), [],
     ["rig.json", "sensors[1].surface_policy.layers", "camera only"]),
]

# (case id, rig-file bytes or None (the valid rig), extra args, fragments); {tmp} in args is the case folder
FILE_AND_FLAG_CASES = [
    ("rig_larger_than_1mib", lambda rig: _dump({**rig, "name": "n" * (2 << 20)}).encode(), [],
     ["rig.json", "bytes", "at most 1 MiB"]),
    ("rig_nested_100000_deep", lambda rig: b"[" * 100_000 + b"]" * 100_000, [], ["rig.json", "nested deeper"]),
    ("rig_nested_100_deep", lambda rig: _dump({**rig, "name": _raw("[" * 100 + "]" * 100)}).encode(), [],
     ["rig.json", f"nested deeper than {MAX_JSON_DEPTH}"]),
    ("rig_not_utf8", lambda rig: b"\xff\xfe\x00garbage", [], ["rig.json", "not valid JSON"]),
    ("rig_top_level_list", lambda rig: b"[]", [], ["rig.json", "JSON object"]),
    ("count_beyond_frame_range", None, ["--count", "1000"],
     ["camera_front", "frames 1..30", f"hold {_events_in_range(30, 16_000_000)} event(s)"]),
    ("count_one_billion", None, ["--count", "1000000000"], ["--count", "1000000000", "outside 0 .. 1000000"]),
    ("first_event_10e12", None, ["--first-event", str(10**12)], ["--first-event", "outside"]),
    ("first_event_past_range", None, ["--first-event", "500"],
     ["--first-event 500", "camera_front", f"{_events_in_range(30, 16_000_000)} event(s)", "nothing to export"]),
    ("lidar_count_beyond_range", None, ["--sensors", "lidar_top", "--count", "50"],
     ["lidar_top", f"hold {_events_in_range(10, 100_000_000)} event(s)"]),
    ("count_not_a_number", None, ["--count", "3x"], ["--count", "'3x' is not a whole number"]),
    ("first_event_negative", None, ["--first-event", "-1"], ["--first-event", "-1 is outside"]),
    ("sensors_only_commas", None, ["--sensors", ",,,"], ["--sensors", "empty entry"]),
    ("sensors_empty", None, ["--sensors", ""], ["--sensors", "empty entry"]),
    ("sensors_repeated", None, ["--sensors", "camera_front,camera_front"], ["--sensors", "'camera_front' is named twice"]),
    ("flow_pairs_three_indices", None, ["--flow-pairs", "1:2:3"], ["--flow-pairs", "'1:2:3'"]),
    ("flow_pair_beyond_range", None, ["--count", "0", "--flow-pairs", "0:5000"],
     ["camera_front", "event 5000", "frames 1..30"]),
    ("device_unknown", None, ["--device", "tpu"], ["--device", "'tpu'"]),
    ("unknown_flag", None, ["--colour", "red"], ["unrecognized arguments: --colour red"]),
    ("rig_is_a_folder", None, ["--rig", "{tmp}"], ["not a regular file"]),
    ("rig_is_a_fifo", None, ["--rig", "{tmp}/fifo.json"], ["fifo.json", "not a regular file"]),
]

BLEND_CASES = [   # (case id, blend variant, fragments); no --rig: the rig stored in the .blend
    ("stored_rig_int", "stored_int", ["stored_int.blend", "rowbeam_rig", "type int"]),
    ("stored_rig_id_array", "stored_array", ["rowbeam_rig", "IDPropertyArray"]),
    ("stored_rig_id_group", "stored_group", ["rowbeam_rig", "IDPropertyGroup"]),
    ("stored_rig_not_json", "stored_not_json", ["rowbeam_rig", "not valid JSON"]),
    ("stored_rig_nan", "stored_nan", ["rowbeam_rig", "NaN", "finite"]),
    ("stored_rig_deep", "stored_deep", ["rowbeam_rig", "nested deeper"]),
    ("stored_rig_huge", "stored_huge", ["rowbeam_rig", f"at most {MAX_USER_JSON_BYTES}"]),
    ("scenario_with_slash", "bad_scenario", ["bad_scenario.blend", "lineage.scenario", "scene properties"]),
    ("resolution_20000_px", "huge_resolution", ["camera_front", "20000x45", "16384"]),
    ("resolution_3x1_px", "tiny_resolution", ["camera_front", "3x1", "outside 4"]),
]


def _tree(path: Path) -> dict:
    return {str(p.relative_to(path)): (p.is_dir(), p.stat().st_mtime_ns if p.is_file() else 0)
            for p in sorted(path.rglob("*"))}


def _refused(r: subprocess.CompletedProcess, fragments, before: dict, case_dir: Path, tmpdir: Path):
    """The contract of a refusal: status 2, one error line with every fragment, no traceback, nothing written."""
    errors = [line for line in r.stderr.splitlines() if line.startswith("rowbeam export: error:")]
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert len(errors) == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-2000:]
    assert len(errors[0]) < 400, errors[0]
    for frag in fragments:
        assert frag in errors[0], (frag, errors[0])
    assert not (case_dir / "out").exists()
    assert _tree(case_dir) == before, "files written or changed"
    assert not any(tmpdir.iterdir()), sorted(os.listdir(tmpdir))


def _run_case(case_dir: Path, blend: Path, rig_file: Path | None, args, fragments):
    tmpdir = case_dir / "tmp"
    tmpdir.mkdir()
    args = [a.replace("{tmp}", str(case_dir)) for a in args]
    before = _tree(case_dir)
    cmd = [EXPORT, blend, *(["--rig", rig_file] if rig_file and "--rig" not in args else []),
           "--out", case_dir / "out", *args]
    r = run_python(*cmd, env={**os.environ, "TMPDIR": str(tmpdir)}, timeout=120)
    _refused(r, fragments, before, case_dir, tmpdir)


@pytest.mark.parametrize("edit, args, fragments", **_cases(RIG_CASES, False))
def test_bad_rig_field_cli(scene, tmp_path, edit, args, fragments):
    rig = json.loads(json.dumps(scene["rig"]))
    edit(rig)
    rig_file = tmp_path / "rig.json"
    rig_file.write_text(_dump(rig))
    _run_case(tmp_path, scene["blends"]["a"], rig_file, args, fragments)


@pytest.mark.parametrize("content, args, fragments", **_cases(FILE_AND_FLAG_CASES, False))
def test_bad_file_or_flag_cli(scene, tmp_path, content, args, fragments):
    rig_file = tmp_path / "rig.json"
    rig_file.write_bytes(content(scene["rig"]) if content else _dump(scene["rig"]).encode())
    if "{tmp}/fifo.json" in args:
        os.mkfifo(tmp_path / "fifo.json")
    _run_case(tmp_path, scene["blends"]["a"], rig_file, args, fragments)


@pytest.mark.parametrize("variant, fragments", **_cases(BLEND_CASES, False))
def test_bad_stored_rig_or_scene_cli(scene, tmp_path, variant, fragments):
    _run_case(tmp_path, scene["blends"][variant], None, [], fragments)


def _one_line(message: str, fragments) -> None:
    assert "\n" not in message.strip() and len(message) < 400, message
    for frag in fragments:
        assert frag in message, (frag, message)


@pytest.mark.parametrize("edit, args, fragments", **_cases(RIG_CASES, True))
def test_bad_rig_field_in_process(scene, edit, args, fragments):
    rig = json.loads(json.dumps(scene["rig"]))
    edit(rig)
    with pytest.raises(RowbeamError) as info:
        parse_rig_text(_dump(rig), "rig.json")
    _one_line(str(info.value), fragments)


@pytest.mark.parametrize("content, args, fragments", **_cases(FILE_AND_FLAG_CASES, True))
def test_bad_file_or_flag_in_process(scene, tmp_path, capsys, content, args, fragments):
    """Rig files through rowbeam.model.rig.load_rig; flags through the CLI's own parsers (argparse errors exit 2)."""
    from rowbeam.blender.export.cli import parse_args, parse_pairs, parse_sensors

    rig_file = tmp_path / "rig.json"
    rig_file.write_bytes(content(scene["rig"]) if content else _dump(scene["rig"]).encode())
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    before = _tree(tmp_path)
    with pytest.raises((RowbeamError, SystemExit)) as info:
        if not args or args[0] == "--rig":
            load_rig(args[1] if args else rig_file)
        else:
            parsed = parse_args([str(scene["blends"]["a"]), "--out", str(tmp_path / "out"), *args], True)
            parse_sensors(parsed.sensors), parse_pairs(parsed.flow_pairs)
    if info.type is SystemExit:
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("rowbeam export: error: ") and err.count("\n") == 1, err
        _one_line(err, fragments)
    else:
        _one_line(str(info.value), fragments)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("variant, fragments", **_cases(BLEND_CASES, True))
def test_bad_stored_rig_or_scene_in_process(scene, tmp_path, variant, fragments):
    """rowbeam.blender.export.run.plan_export on the .blend, as the CLI and the add-on call it: refuses, creates nothing."""
    from rowbeam.blender.export.run import ExportRequest, plan_export

    with pytest.raises(RowbeamError) as info:
        plan_export(ExportRequest(out=tmp_path / "out", blend=scene["blends"][variant]))
    _one_line(str(info.value), fragments)
    assert not any(tmp_path.iterdir())


def test_out_under_a_file(scene, tmp_path):
    (tmp_path / "afile").write_text("x")
    rig_file = tmp_path / "rig.json"
    rig_file.write_text(_dump(scene["rig"]))
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    before = _tree(tmp_path)
    r = run_python(EXPORT, scene["blends"]["a"], "--rig", rig_file, "--out", tmp_path / "afile" / "sub" / "out",
                   env={**os.environ, "TMPDIR": str(tmpdir)})
    _refused(r, ["--out", "afile", "is not a folder"], before, tmp_path, tmpdir)


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder no one may create entries in: a read-only tmpfs mount (root), else mode 0555 (non-root)."""
    d = tmp_path / "ro"
    d.mkdir()
    if os.geteuid() != 0:
        d.chmod(0o555)
        yield d
        d.chmod(0o755)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(d)], capture_output=True).returncode:
        pytest.skip("running as root without permission to mount a read-only tmpfs")
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=True)


def test_out_on_a_read_only_mount(scene, tmp_path, read_only_dir):
    rig_file = tmp_path / "rig.json"
    rig_file.write_text(_dump(scene["rig"]))
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    before = _tree(tmp_path)
    r = run_python(EXPORT, scene["blends"]["a"], "--rig", rig_file, "--out", read_only_dir / "bundle",
                   env={**os.environ, "TMPDIR": str(tmpdir)})
    _refused(r, ["--out", str(read_only_dir), "cannot write"], before, tmp_path, tmpdir)


# ---- in-process: the rig parser behind both rig sources ------------------------------------------------

def _rig_text(edit) -> str:
    rig = {"schema": "rowbeam/rig@1", "sensors": [
        common.camera_rig("cam", "camera")["sensors"][0], common.lidar_rig("lidar", "mount")["sensors"][0]]}
    edit(rig)
    return _dump(rig)


PARSER_CASES = [
    ("camera_rate_minus_infinity", _camera(_set(rate_hz=_raw("-Infinity"))), ["-Infinity", "finite"]),
    ("camera_rate_above_1e6", _camera(_set(rate_hz=1_000_001)), ["sensors[0].rate_hz", "maximum"]),
    ("camera_rate_below_1e-3", _camera(_set(rate_hz=0.0009)), ["sensors[0].rate_hz", "minimum"]),
    ("camera_rate_bool", _camera(_set(rate_hz=True)), ["sensors[0].rate_hz"]),
    ("camera_readout_float", _camera(_set(readout_ns=12_000_000.0)), ["sensors[0].readout_ns", "integer"]),
    ("camera_exposure_beyond_one_day", _camera(_set(exposure_ns=86_400 * 10**9 + 1)),
     ["sensors[0].exposure_ns", "maximum"]),
    ("camera_first_event_negative", _camera(_set(first_event_ns=-1)), ["sensors[0].first_event_ns"]),
    ("camera_integer_of_5000_digits", _camera(_set(first_event_ns=_raw("9" * 5000))), ["not valid JSON"]),
    ("camera_motion_steps_8", _camera(_set(motion_steps=8)), ["sensors[0].motion_steps"]),
    ("camera_rgb_samples_huge", _camera(_set(rgb_samples=10**7)), ["sensors[0].rgb_samples", "maximum"]),
    ("camera_verify_rows_negative", _camera(_set(verify_rows=-1)), ["sensors[0].verify_rows"]),
    ("camera_image_one_side", _camera(_set(image_size_px=[80])), ["sensors[0].image_size_px"]),
    ("camera_image_strings", _camera(_set(image_size_px=["80", "45"])), ["sensors[0].image_size_px[0]"]),
    ("camera_id_empty", _camera(_set(id="")), ["sensors[0].id"]),
    ("camera_id_65_chars", _camera(_set(id="c" * 65)), ["sensors[0].id"]),
    ("camera_id_backslash", _camera(_set(id="a\\b")), ["sensors[0].id"]),
    ("camera_object_empty", _camera(_set(object="")), ["sensors[0].object"]),
    ("camera_object_int", _camera(_set(object=5)), ["sensors[0].object"]),
    ("camera_type_unknown", _camera(_set(type="thermal")), ["sensors[0].type"]),
    ("camera_missing_rate", lambda rig: rig["sensors"][0].pop("rate_hz"), ["'rate_hz' is required"]),
    ("lidar_elevation_95", _lidar(lambda s: (s.pop("preset"), s.update(elevations_deg=[95.0]))),
     ["sensors[1].elevations_deg[0]", "maximum"]),
    ("lidar_elevation_nan", _lidar(lambda s: (s.pop("preset"), s.update(elevations_deg=[_raw("NaN")]))), ["NaN"]),
    ("lidar_azimuth_steps_zero", _lidar(_set(azimuth_steps=0)), ["sensors[1].azimuth_steps"]),
    ("lidar_azimuth_steps_fraction", _lidar(_set(azimuth_steps=2.5)), ["sensors[1].azimuth_steps"]),
    ("lidar_min_not_below_max", _lidar(_set(min_range_m=200.0)), ["sensors[1].min_range_m", "below max_range_m"]),
    ("lidar_offsets_wrong_length", _lidar(_set(azimuth_offsets_deg=[0.0, 1.0])),
     ["sensors[1].azimuth_offsets_deg", "2 values for 32 channels"]),
    ("lidar_time_offset_beyond_one_day", _lidar(_set(time_offsets_ns=[86_400 * 10**9 + 1] * 32)),
     ["sensors[1].time_offsets_ns[", "maximum"]),
    ("lidar_start_azimuth_1e9", _lidar(_set(start_azimuth_deg=1e9)), ["sensors[1].start_azimuth_deg", "maximum"]),
    ("lidar_preset_unknown", _lidar(_set(preset="uniform_7")), ["sensors[1].preset"]),
    ("lidar_spin_up", _lidar(_set(spin_direction="up")), ["sensors[1].spin_direction"]),
    ("lidar_first_sweep_1e30", _lidar(_set(first_sweep_ns=1e30)), ["sensors[1].first_sweep_ns"]),
    ("rig_name_control_char", lambda rig: rig.update(name="a\x1bb"), ["name", "control characters"]),
    ("rig_ontology_nul", lambda rig: rig.update(ontology="x\x00.json"), ["ontology"]),
    ("rig_65_sensors", lambda rig: rig.update(sensors=[{**rig["sensors"][0], "id": f"c{i}"} for i in range(65)]),
     ["sensors", "longer than 64"]),
    ("rig_no_sensors", lambda rig: rig.update(sensors=[]), ["sensors"]),
    ("rig_wrong_schema", lambda rig: rig.update(schema="rowbeam/rig@2"), ["schema"]),
]


@pytest.mark.parametrize("edit, fragments", [c[1:] for c in PARSER_CASES], ids=[c[0] for c in PARSER_CASES])
def test_bad_rig_in_process(edit, fragments):
    with pytest.raises(RowbeamError) as info:
        parse_rig_text(_rig_text(edit), "rig.json")
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    assert message.startswith("rig.json: "), message
    for frag in fragments:
        assert frag in message, (frag, message)


def test_bounds_are_inclusive_and_usable():
    """The declared limits themselves are accepted: rate 1e-3 and 1e6 Hz, readout = exposure = frame period,
    image 4 .. 16384 px, one day of scene time, a firing period of exactly 1 ns."""
    period = 10**9 // 1000
    edits = [
        _camera(_set(rate_hz=1000, readout_ns=period, exposure_ns=period, image_size_px=[4, 16384])),
        _camera(_set(rate_hz=timing.MIN_RATE_HZ, first_event_ns=timing.MAX_SCENE_TIME_NS)),
        _camera(_set(rate_hz=timing.MAX_RATE_HZ, readout_ns=1000, exposure_ns=0)),
        _lidar(_set(rotation_hz=10_000, azimuth_steps=100_000)),
    ]
    for edit in edits:
        rig = parse_rig_text(_rig_text(edit), "rig.json")
        cam = rig.sensors[0]
        assert cam.readout_ns <= Fraction(10**9) / Fraction(str(cam.rate_hz))
    assert rig.sensors[1].timing(0).firing_period_ns == 1


def test_schema_bounds_match_timing_constants():
    """The rig schema states the bounds rowbeam/model/timing.py declares (one set of numbers)."""
    defs = validator("rowbeam/rig@1").schema["$defs"]
    assert defs["rate_hz"]["minimum"] == timing.MIN_RATE_HZ and defs["rate_hz"]["maximum"] == timing.MAX_RATE_HZ
    assert defs["ns"]["maximum"] == timing.MAX_SCENE_TIME_NS
    size = defs["rolling_shutter_camera"]["properties"]["image_size_px"]["items"]
    assert (size["minimum"], size["maximum"]) == (timing.MIN_IMAGE_SIDE_PX, timing.MAX_IMAGE_SIDE_PX)


@pytest.mark.parametrize("text", ["NaN", "-Infinity", "1e309", "[1.5, {\"a\": Infinity}]"])
def test_loads_user_json_refuses_non_finite(text):
    assert not math.isfinite(json.loads(text) if text[0] != "[" else json.loads(text)[1]["a"])   # Python's json accepts
    with pytest.raises(RowbeamError, match="only finite numbers"):
        loads_user_json(text, "f.json", "rig")


def test_loads_user_json_depth_limit_is_exact():
    ok = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads_user_json(ok, "f.json", "rig") is not None
    with pytest.raises(RowbeamError, match=f"nested deeper than {MAX_JSON_DEPTH}"):
        loads_user_json("[" + ok + "]", "f.json", "rig")


def test_blend_that_is_a_folder_or_a_fifo_is_not_opened(tmp_path):
    """A FIFO named .blend would block open(); both are refused from their file type alone."""
    from rowbeam.blender.compat.blend_io import open_blend

    (tmp_path / "dir.blend").mkdir()
    os.mkfifo(tmp_path / "pipe.blend")
    for name in ("dir.blend", "pipe.blend"):
        with pytest.raises(RowbeamError) as info:
            open_blend(tmp_path / name)
        _one_line(str(info.value), [name, "not a regular file"])


@pytest.mark.parametrize("make_out, fragments", [
    (lambda d: d / ("n" * 256) / "out", ["path too long", "a path component is 256 bytes, at most 255"]),
    (lambda d: (d / "link").symlink_to(d / "gone") or d / "link" / "out", ["link", "dangling symbolic link"]),
    (lambda d: d.joinpath(*["p" * 200] * 21, "out"), ["path too long", "more than 4095 bytes"]),
], ids=["component_256_bytes", "dangling_symlink", "path_4300_bytes"])
def test_out_path_refused_before_writing(scene, tmp_path, make_out, fragments):
    from rowbeam.blender.export.run import ExportRequest, plan_export

    out = make_out(tmp_path)
    before = _tree(tmp_path)
    with pytest.raises(RowbeamError) as info:
        plan_export(ExportRequest(out=out, blend=scene["blends"]["a"]))
    _one_line(str(info.value), fragments)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("make, fragments", [
    (lambda p: p.write_text(DEFAULT_ONTOLOGY.read_text().replace('"background_id": 0', '"background_id": NaN')),
     ["onto.json", "ontology holds the number NaN"]),
    (lambda p: p.write_bytes(b" " * (MAX_USER_JSON_BYTES + 1)), ["onto.json", "larger than"]),
    (lambda p: p.mkdir(), ["onto.json", "a folder, not a regular file"]),
    (lambda p: os.mkfifo(p), ["onto.json", "a FIFO, not a regular file"]),
], ids=["nan", "larger_than_1mib", "folder", "fifo"])
def test_bad_ontology_file(tmp_path, make, fragments):
    """The rig's `ontology` file: the same JSON bounds as the rig; special files refused without opening."""
    from rowbeam.model.ontology import load_ontology

    make(tmp_path / "onto.json")
    with pytest.raises(RowbeamError) as info:
        load_ontology(tmp_path / "onto.json")
    _one_line(str(info.value), fragments)
