"""The camera's rgb options (denoiser, adaptive sampling, half storage) change the rgb render and nothing else: every
label payload of the running example (moving objects, motion blur, object labels) is bitwise identical to the plain
export, the options are declared in method.rgb_render, and a plain export (denoiser off) declares none of them."""
from __future__ import annotations

import pytest

from rowbeam.blender.scenes import running_example
from rowbeam.bundle.reader import Bundle

# Payloads made by the rgb render: rgb, its display view and its coverage (1 - mist of the same samples).
RGB_PAYLOADS = {"rgb", "rgb_display", "rgb_coverage"}
OPTIONS = {"rgb_denoise": True, "rgb_adaptive_threshold": 0.05, "rgb_adaptive_min_samples": 2, "rgb_storage": "half"}


def _build(scale, **camera):
    running_example.build(1280 // scale, 720 // scale)
    return None, running_example.rig(lidar=False, rgb_samples=4, verify_rows=2, object_labels=True, **camera)


@pytest.fixture(scope="module")
def pair(exports):
    plain = exports("rgb_plain", _build, scale=8, first_event=30, count=1, rgb_denoise=False)
    options = exports("rgb_options", _build, scale=8, first_event=30, count=1, **OPTIONS)
    assert plain.summary["quarantined"] == options.summary["quarantined"] == []      # both pass the in-line check
    return next(Bundle.open(plain.bundle).events()), next(Bundle.open(options.bundle).events())


def test_labels_are_bitwise_identical_with_every_rgb_option(pair):
    plain, options = pair
    assert set(plain.names) == set(options.names)
    labels = sorted(set(plain.names) - RGB_PAYLOADS)
    assert {"instance_id", "camera_z", "range", "amodal_masks", "object_row_T_world_object"} <= set(labels)
    differ = [n for n in labels if plain.array(n).tobytes() != options.array(n).tobytes()
              or plain.array(n).dtype != options.array(n).dtype]
    assert differ == []
    for key in ("object_labels", "objects", "calibration", "event"):
        assert plain.manifest.get(key) == options.manifest.get(key), key
    assert plain.array("rgb").tobytes() != options.array("rgb").tobytes()     # the options did reach the render


def test_the_rig_default_is_64_plain_samples():
    from rowbeam.model.rig import parse_rig

    raw = {"schema": "rowbeam/rig@1", "sensors": [{"id": "c", "type": "rolling_shutter_camera", "object": "cam",
           "rate_hz": 30, "first_event_ns": 0, "readout_ns": 1000, "exposure_ns": 1000,
           "readout_direction": "top_to_bottom"}]}
    cam = parse_rig(raw).sensors[0]
    assert (cam.rgb_samples, cam.rgb_denoise, cam.rgb_adaptive_threshold, cam.rgb_storage) == (64, False, 0.0, "float32")


def test_options_are_declared_and_the_plain_render_declares_none(pair):
    plain, options = pair
    method = options.manifest["method"]["rgb_render"]
    assert method["denoising"]["denoiser"] == "OPENIMAGEDENOISE" and method["denoising"]["device"] == "CPU"
    assert method["adaptive_sampling"] == {"noise_threshold": 0.05, "min_samples": 2, "max_samples": 4}
    assert method["storage"] == "half"
    assert options.manifest["modalities"]["rgb"]["storage"]["pixel_type"] == "HALF"
    assert options.manifest["modalities"]["rgb"]["storage"]["lossy"]
    plain_method = plain.manifest["method"]["rgb_render"]
    assert plain_method["denoising"] is False
    assert "adaptive_sampling" not in plain_method and "storage" not in plain_method
    assert plain.manifest["modalities"]["rgb"]["storage"]["pixel_type"] == "FLOAT"
    assert "lossy" not in plain.manifest["modalities"]["rgb"]["storage"]
