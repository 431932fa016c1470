"""Regressions found from outside, each pinned by a test that failed on the code before its fix (Blender-free)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rowbeam.check.camera_checks import _manifest_lens, check_lens_against_rig
from rowbeam.model.lens import LensSpec, make_lens
from rowbeam.model.rig import load_rig, parse_rig
from rowbeam.util.errors import RowbeamError

K_FISH = [[110.0, 0.0, 159.5], [0.0, 110.0, 89.5], [0.0, 0.0, 1.0]]
D_FISH = (-0.02, 0.01, -0.004, 0.0005)


def _fisheye_calibration(fov_deg):
    """A camera manifest's calibration block for a 320x180 fisheye exported with `fov_deg` (None: 180 deg)."""
    lens = make_lens(LensSpec("opencv_fisheye", D_FISH, tuple(map(tuple, K_FISH)), fov_deg), None, 320, 180)
    return {"K": K_FISH, "K_source": "rig", "image_size_px": [320, 180], "projection": "opencv_fisheye",
            "distortion": lens.to_manifest()}


def _results(cal):
    got = {}
    _manifest_lens(cal, np.array(cal["K"]), lambda name, ok, msg, **kw: got.setdefault(name, (ok, msg)))
    return got


@pytest.mark.parametrize("fov", [None, 85.0, 120.0, 179.0])
def test_fisheye_domain_with_a_declared_fov_is_the_checkers(fov):
    """The checker rebuilds the lens with the declared fov_deg: an 85 deg fisheye's theta_max = 42.5 deg."""
    cal = _fisheye_calibration(fov)
    ok, msg = _results(cal)["lens_model"]
    assert ok, msg
    if fov is not None:
        assert cal["distortion"]["valid_domain"]["theta_max_rad"] == pytest.approx(math.radians(fov) / 2)


@pytest.mark.parametrize("plant", ["fov_only", "theta_only"])
def test_fisheye_wrong_declared_domain_fails_lens_model(plant):
    cal = _fisheye_calibration(85.0)
    dom = cal["distortion"]["valid_domain"]
    if plant == "fov_only":
        dom["fov_deg"] = 90.0                       # theta_max_rad still 42.5 deg
    else:
        dom["theta_max_rad"] = math.radians(45.0)   # fov_deg still 85
    ok, _ = _results(cal)["lens_model"]
    assert not ok


def test_fisheye_fov_differing_from_the_rig_fails_lens_rig():
    """A manifest consistently declaring 90 deg (domain recomputed) when the rig says 85 deg: lens_rig fails."""
    cal = _fisheye_calibration(90.0)
    got = {}
    spec = LensSpec("opencv_fisheye", D_FISH, tuple(map(tuple, K_FISH)), 85.0)
    check_lens_against_rig({"calibration": cal}, spec, lambda n, ok, msg, **kw: got.setdefault(n, (ok, msg)))
    assert got["lens_rig"][0] is False and "fov_deg" in got["lens_rig"][1]
    got.clear()
    check_lens_against_rig({"calibration": _fisheye_calibration(85.0)}, spec,
                           lambda n, ok, msg, **kw: got.setdefault(n, (ok, msg)))
    assert got["lens_rig"][0] is True, got


RIG = {"schema": "rowbeam/rig@1", "sensors": [{
    "id": "cam", "type": "rolling_shutter_camera", "object": "Camera", "rate_hz": 10, "first_event_ns": 0,
    "readout_ns": 1000000, "exposure_ns": 100000, "readout_direction": "top_to_bottom", "image_size_px": [640, 480],
    "lens": {"model": "opencv", "D": [0.1, 0.0, 0.0, 0.0]}}]}


@pytest.mark.parametrize("literal, index", [("NaN", 0), ("Infinity", 1), ("-Infinity", 3), ("1e999", 2)])
def test_non_finite_lens_coefficient_in_a_rig_file_is_named(tmp_path, literal, index):
    """NaN / Infinity / an overflowing literal in the rig file: one line naming sensors[0].lens.D[i]."""
    text = json.dumps(RIG)
    D = [0.1, 0.0, 0.0, 0.0]
    D[index] = "@@"
    text = text.replace("[0.1, 0.0, 0.0, 0.0]", json.dumps(D).replace('"@@"', literal))
    path = tmp_path / "rig.json"
    path.write_text(text)
    with pytest.raises(RowbeamError) as e:
        load_rig(path)
    msg = str(e.value)
    assert "\n" not in msg and f"sensors[0].lens.D[{index}]" in msg and "finite" in msg, msg


def _radar(rate_hz, chirps, chirp_period_ns):
    return {"schema": "rowbeam/rig@1", "sensors": [{
        "id": "radar", "type": "radar", "object": "Radar", "rate_hz": rate_hz, "first_frame_ns": 0,
        "chirps": chirps, "chirp_period_ns": chirp_period_ns, "azimuth_fov_deg": [-40.0, 40.0],
        "elevation_fov_deg": [-6.0, 6.0], "azimuth_beams": 8, "elevation_beams": 2, "min_range_m": 0.5,
        "max_range_m": 80.0, "max_radial_velocity_mps": 60.0}]}


def test_radar_refusal_at_the_frame_period_boundary_prints_exact_values():
    """18 Hz: the frame is 500000000/9 = 55555555.56 ns; a 55555556 ns chirp train is refused, 55555555 accepted,
    and the message never shows a rounded period equal to the refused train."""
    parse_rig(_radar(18, 5, 11111111))                       # 55555555 ns fits
    parse_rig(_radar(20, 4, 12_500_000))                     # exactly one 50 ms frame: the limit itself fits
    with pytest.raises(RowbeamError) as e:
        parse_rig(_radar(18, 4, 13888889))                   # 55555556 ns
    msg = str(e.value)
    assert "55555556 ns is longer than the frame period" in msg and "500000000/9 ns" in msg, msg
    assert "frame period 55555556 ns" not in msg


def test_camera_refusal_at_the_frame_period_boundary_prints_exact_values():
    rig = json.loads(json.dumps(RIG))
    rig["sensors"][0].update(rate_hz=18, readout_ns=55555556, exposure_ns=1000)
    del rig["sensors"][0]["lens"]
    with pytest.raises(RowbeamError) as e:
        parse_rig(rig)
    msg = str(e.value)
    assert "readout_ns: 55555556 ns is longer than the frame period 500000000/9 ns" in msg, msg
    rig["sensors"][0]["readout_ns"] = 55555555
    parse_rig(rig)


# ----- dataset hash: what it covers ----------------------------------------------------------------------------

def _sample():
    m = {"sample_id": "s1", "build": {"blend_sha256": "a" * 64, "rig_sha256": "b" * 64, "contracts_version": 1,
                                      "git_revision": "x"},
         "run": {"host": "h"}, "modalities": {"camera_z": {"uri": "camera_z.exr", "sha256": "c" * 64, "dtype": "f4"}}}
    return m, {"camera_z": np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5}


def test_dataset_hash_covers_the_blend_bytes_as_docs_farm_says():
    """Re-saving a .blend changes its bytes: the sample content hash changes (docs/farm.md says so plainly)."""
    from pathlib import Path

    from rowbeam.farm.dataset import sample_content_hash

    m, a = _sample()
    h0 = sample_content_hash(m, a)[0]
    m2 = json.loads(json.dumps(m))
    m2["build"]["blend_sha256"] = "d" * 64
    assert sample_content_hash(m2, a)[0] != h0
    m3 = json.loads(json.dumps(m))
    m3["run"]["host"], m3["build"]["git_revision"] = "other", "y"                 # not covered
    m3["modalities"]["camera_z"]["uri"] = "elsewhere.exr"
    assert sample_content_hash(m3, a)[0] == h0
    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "farm.md").read_text().split())
    assert "covers the **.blend file's bytes**" in text and "dataset hash change" in text


def test_dataset_hash_sees_a_reshape_and_a_rounding_boundary():
    from rowbeam.farm.dataset import NUMERIC_TOLERANCE, array_digest

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert array_digest("valid", a) != array_digest("valid", a.reshape(4, 3))
    assert array_digest("valid", a) != array_digest("valid", a.reshape(12))
    t = NUMERIC_TOLERANCE["camera_z"]
    base = np.array([3.0], np.float64)
    assert array_digest("camera_z", base) == array_digest("camera_z", base + 0.4 * t)      # within, same grid point
    assert array_digest("camera_z", base) != array_digest("camera_z", base + 0.6 * t)      # across the boundary
    assert array_digest("camera_z", np.array([-0.0])) == array_digest("camera_z", np.array([0.0]))


def test_dataset_hash_is_independent_of_the_reading_order():
    from rowbeam.farm.dataset import dataset_hash

    a, b = {"s1": "11" * 32, "s2": "22" * 32}, {"s2": "22" * 32, "s1": "11" * 32}
    assert dataset_hash(a) == dataset_hash(b) != dataset_hash({"s1": "22" * 32, "s2": "11" * 32})


# ----- path confinement ----------------------------------------------------------------------------------------

def test_confine_refuses_a_sibling_folder_sharing_the_bundle_name_prefix(tmp_path):
    """bundle/ and bundle2/ side by side: a symlink in bundle/ to bundle2/x resolves outside (a string-prefix test
    would pass it)."""
    from rowbeam.bundle.files import resolve_inside

    root, sibling = tmp_path / "bundle", tmp_path / "bundle2"
    (root / "events" / "e").mkdir(parents=True)
    sibling.mkdir()
    (sibling / "x.exr").write_bytes(b"x")
    (root / "events" / "e" / "x.exr").symlink_to(sibling / "x.exr")
    (root / "events" / "e" / "ok.exr").write_bytes(b"ok")
    assert resolve_inside(root / "events" / "e", "ok.exr", root) == (root / "events" / "e" / "ok.exr").resolve()
    with pytest.raises(RowbeamError, match="resolves outside the bundle"):
        resolve_inside(root / "events" / "e", "x.exr", root)


def test_confine_follows_a_symlinked_flow_endpoint_out_of_the_bundle(tmp_path):
    """A flow's endpoint folder that is a symlink to another bundle's event: refused (links are resolved first)."""
    from rowbeam.bundle.files import resolve_inside

    root, other = tmp_path / "b", tmp_path / "other"
    (root / "flows" / "cam" / "000000-000001").mkdir(parents=True)
    (root / "events" / "cam").mkdir(parents=True)
    (other / "events" / "cam" / "000001").mkdir(parents=True)
    (other / "events" / "cam" / "000001" / "manifest.json").write_text("{}")
    (root / "events" / "cam" / "000001").symlink_to(other / "events" / "cam" / "000001")
    with pytest.raises(RowbeamError, match="resolves outside the bundle"):
        resolve_inside(root, "events/cam/000001/manifest.json", root)
    for uri in ("../b/events/cam/000001/manifest.json", "/etc/passwd", "a\\b", "c:x", ""):
        with pytest.raises(RowbeamError, match="not a relative path inside the bundle"):
            resolve_inside(root, uri, root)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_lens_spec_refuses_a_non_finite_coefficient_given_directly(value):
    """The extension's panel builds a lens block without a rig file: parse_lens_spec itself names lens.D[i]."""
    from rowbeam.model.lens import parse_lens_spec

    with pytest.raises(RowbeamError, match=r"lens\.D\[2\] \(p1\): .* is not a finite number"):
        parse_lens_spec({"model": "opencv", "D": [0.1, 0.0, value, 0.0]})


def test_a_reflection_is_not_rigid():
    """det = -1 (a mirrored frame): orthonormal columns, but not a rotation."""
    from rowbeam.model.frames import is_rigid, rigid_mask

    M = np.diag([1.0, 1.0, -1.0, 1.0])
    assert not is_rigid(M) and not rigid_mask(np.stack([np.eye(4), M]))[1] and rigid_mask(np.eye(4))
