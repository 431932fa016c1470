"""`contracts check`: a clean bundle passes; each injected fault fails with a message naming it."""
from __future__ import annotations

import json
import shutil

import numpy as np
import OpenEXR
import pytest

from rowbeam.bundle.arrays import write_exr
from rowbeam.check.runner import check_bundle
from rowbeam.util.errors import RowbeamError, UnusableInput
from rowbeam.bundle.files import resolve_inside
from rowbeam.blender.scenes import calibration

from tests.conftest import run_python
from tests.helpers import assert_fails, failures, load_event, rehash, save_payload


def _tilted_with_rgb(scale):
    truth, rig = calibration.tilted_plane(scale=scale)
    rig["sensors"][0]["rgb_samples"] = 2
    return truth, rig


@pytest.fixture(scope="module")
def clean(exports):
    return exports("tilted_plane_rgb", _tilted_with_rgb, scale=8)


@pytest.fixture
def bundle(clean, tmp_path):
    """A private copy of a clean bundle and its single event folder."""
    dst = tmp_path / "bundle"
    shutil.copytree(clean.bundle, dst)
    event = next((dst / "events").glob("*/*"))
    return dst, event


def _manifest(event):
    return json.loads((event / "manifest.json").read_text())


def _save_manifest(event, m):
    (event / "manifest.json").write_text(json.dumps(m))


def test_clean_bundle_passes(clean):
    report, failed = failures(clean.bundle)
    assert report["status"] == "pass" and not failed
    names = {c["check"] for c in report["events"][0]["checks"]}
    assert {"schema", "camera_z_range", "row_times", "validity_consistency", "normal_geometric_facing",
            "instance_ids_known", "semantic_matches_instance", "exact_reference", "intrinsics"} <= names


def test_flipped_payload_byte(bundle):
    root, event = bundle
    p = event / "range.exr"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))
    assert_fails(root, "payload:range", "sha256", "does not match")


def test_missing_channel(bundle):
    root, event = bundle
    z = load_event(event)[1]["camera_z"]
    write_exr(event / "camera_z.exr", z, ["depth"], "float32")
    rehash(event, "camera_z")
    assert_fails(root, "payload:camera_z", "channel 'camera_z' is missing")


def test_wrong_dtype(bundle):
    root, event = bundle
    z = load_event(event)[1]["camera_z"]
    with OpenEXR.File({"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage},
                      {"camera_z": z.astype(np.float16)}) as f:
        f.write(str(event / "camera_z.exr"))
    rehash(event, "camera_z")
    assert_fails(root, "payload:camera_z", "stored as float16", "float32")


def test_wrong_declared_dtype(bundle):
    root, event = bundle
    m = _manifest(event)
    m["modalities"]["instance_id"]["dtype"] = "float32"
    _save_manifest(event, m)
    assert_fails(root, "contract:instance_id", "dtype='float32'", "'uint32'")


def test_nan_where_valid(bundle):
    root, event = bundle
    z = load_event(event)[1]["camera_z"].copy()
    z[3, 5] = np.nan
    write_exr(event / "camera_z.exr", z, ["camera_z"], "float32")
    rehash(event, "camera_z")
    assert_fails(root, "validity_consistency", "camera_z: 1 non-finite values where valid")


def test_manifest_without_units(bundle):
    root, event = bundle
    m = _manifest(event)
    del m["modalities"]["range"]["units"]
    _save_manifest(event, m)
    assert_fails(root, "schema", "modalities.range", "'units' is required")


@pytest.mark.parametrize("field", ["frame", "time_support"])
def test_manifest_without_frame_or_time_support(bundle, field):
    root, event = bundle
    m = _manifest(event)
    del m["modalities"]["camera_z"][field]
    _save_manifest(event, m)
    assert_fails(root, "schema", f"'{field}' is required")


def test_uri_escaping_the_bundle(bundle):
    root, event = bundle
    m = _manifest(event)
    m["modalities"]["range"]["uri"] = "../../x"
    _save_manifest(event, m)
    assert_fails(root, "schema", "modalities.range.uri")


def test_resolve_inside_refuses_escapes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "outside").write_text("x")
    (tmp_path / "a" / "link").symlink_to(tmp_path / "outside")
    for uri in ("../../x", "/etc/passwd", "a/../../x", "C:/x", "a\\..\\x", ""):
        with pytest.raises(RowbeamError):
            resolve_inside(tmp_path / "a", uri)
    with pytest.raises(RowbeamError, match="outside the bundle"):
        resolve_inside(tmp_path / "a", "link")
    assert resolve_inside(tmp_path / "a", "ok.exr") == (tmp_path / "a" / "ok.exr").resolve()


def test_truncated_exr_with_matching_hash(bundle):
    root, event = bundle
    p = event / "normal_shading.exr"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    rehash(event, "normal_shading")
    assert_fails(root, "payload:normal_shading", "unreadable OpenEXR", "truncated")


def test_truncated_exr_against_manifest(bundle):
    root, event = bundle
    p = event / "valid.exr"
    p.write_bytes(p.read_bytes()[:100])
    assert_fails(root, "payload:valid", "bytes, manifest declares")


def test_range_stored_as_camera_z(bundle):
    """z called range: off-axis pixels break range = z*sqrt(1+x_n^2+y_n^2)."""
    root, event = bundle
    write_exr(event / "range.exr", load_event(event)[1]["camera_z"], ["range"], "float32")
    rehash(event, "range")
    assert_fails(root, "camera_z_range", "range != camera_z*sqrt(1+x_n^2+y_n^2)")


def test_flipped_geometric_normal(bundle):
    root, event = bundle
    n = load_event(event)[1]["normal_geometric"]
    write_exr(event / "normal_geometric.exr", -n, ["X", "Y", "Z"], "float32")
    rehash(event, "normal_geometric")
    assert_fails(root, "normal_geometric_facing", "faces away from the camera")


def test_unknown_instance_and_wrong_semantic(bundle):
    root, event = bundle
    inst = load_event(event)[1]["instance_id"].copy()
    inst[0, 0] = 77
    write_exr(event / "instance_id.exr", inst, ["instance_id"], "uint32")
    rehash(event, "instance_id")
    assert_fails(root, "instance_ids_known", "[77]")
    assert_fails(root, "semantic_matches_instance", "1 pixels")


def test_row_times_not_the_declared_model(bundle):
    root, event = bundle
    t = load_event(event)[1]["row_time_ns"].copy()
    t[4] += 1
    save_payload(event, "row_time_ns", t)
    assert_fails(root, "row_times", "at 1 rows (first row 4")


def test_invalid_pixel_with_an_object_id(bundle):
    root, event = bundle
    a = load_event(event)[1]
    valid = a["valid"].copy()
    valid[2, 2] = 0
    write_exr(event / "valid.exr", valid, ["valid"], "uint8")
    rehash(event, "valid")
    assert_fails(root, "validity_consistency", "hit an object but are marked invalid", "values where invalid")


def test_cli_exit_codes(clean, bundle, tmp_path):
    ok = run_python("-m", "rowbeam", "check", clean.bundle, "--report", tmp_path / "r.json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "pass"
    root, event = bundle
    (event / "semantic_id.exr").write_bytes(b"garbage")
    bad = run_python("-m", "rowbeam", "check", root)
    assert bad.returncode == 1 and "FAIL" in bad.stdout and "semantic_id" in bad.stdout
    missing = run_python("-m", "rowbeam", "check", tmp_path / "nope")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no such file" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = run_python("-m", "rowbeam", "check", tmp_path / "empty")
    assert empty.returncode == 2 and "not a rowbeam bundle" in empty.stderr and "Traceback" not in empty.stderr


def test_checker_never_imports_bpy():
    code = "import sys, rowbeam.check.runner, rowbeam.cli; assert 'bpy' not in sys.modules; print('ok')"
    r = run_python("-c", code)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_single_event_folder_is_checkable(clean):
    report = check_bundle(clean.event)
    assert report["status"] == "pass" and report["summary"]["events"] == 1


def test_unusable_input_raises(tmp_path):
    with pytest.raises(UnusableInput):
        check_bundle(tmp_path / "missing")
