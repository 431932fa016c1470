"""Check `surface_layers` (rowbeam/check/layer_checks.py) on a planted 2 x 3 image with a 3-layer stack: a decal
(opacity 0.3, z = 5) over a wall (z = 8) in column 0, a leaf card (opacity 0.8, z = 4) over the wall in column 1,
the wall alone in column 2; threshold 0.5. Each planted break of the contract fails the check."""
from __future__ import annotations

import numpy as np
import pytest

from rowbeam.check.layer_checks import check_surface_layers, layer_faults
from rowbeam.model.surface_policy import SurfacePolicy

NAN = np.nan
WALL, DECAL, CARD = 1, 2, 3


def _event(threshold: float = 0.5):
    z = np.array([[5.0, 8.0, NAN], [4.0, 8.0, NAN], [8.0, NAN, NAN]], np.float32)
    ids = np.array([[DECAL, WALL, 0], [CARD, WALL, 0], [WALL, 0, 0]], np.uint32)
    o = np.array([[0.3, 1.0, NAN], [0.8, 1.0, NAN], [1.0, NAN, NAN]], np.float32)
    arrays = {"layer_camera_z": np.stack([z, z]), "layer_instance_id": np.stack([ids, ids]),
              "layer_opacity": np.stack([o, o]), "valid": np.ones((2, 3), np.uint8),
              "instance_id": np.array([[WALL, CARD, WALL]] * 2, np.uint32),
              "camera_z": np.array([[8.0, 4.0, 8.0]] * 2, np.float32)}
    manifest = {"method": {"surface_policy": SurfacePolicy(threshold, layers=3).manifest_block()}}
    return manifest, arrays


def _status(manifest, arrays):
    out = {}
    check_surface_layers(manifest, arrays, lambda name, ok, msg, severity=None, **v: out.update(
        {name: ("pass" if ok else "fail", v)}))
    return out["surface_layers"]


def test_correct_stack_passes():
    status, values = _status(*_event())
    assert status == "pass" and set(values.values()) == {0}


def test_threshold_decides_which_layer_is_the_label():
    """At threshold 0.2 the decal (0.3) is the label of column 0: the wall label there now breaks the contract."""
    manifest, arrays = _event(0.2)
    status, values = _status(manifest, arrays)
    assert status == "fail" and values["label_pixels"] == 2
    arrays["instance_id"][:, 0], arrays["camera_z"][:, 0] = DECAL, 5.0
    assert _status(manifest, arrays)[0] == "pass"


@pytest.mark.parametrize("fault, plant", [
    ("label", lambda a: a["instance_id"].__setitem__((1, 1), WALL)),              # label is not the stack's
    ("label", lambda a: a["camera_z"].__setitem__((0, 1), 4.01)),
    ("label", lambda a: a["valid"].__setitem__((0, 2), 0)),                         # a label hole under the wall
    ("opacity_range", lambda a: a["layer_opacity"].__setitem__((0, 0, 0), 1.2)),
    ("order", lambda a: a["layer_camera_z"].__setitem__((1, 1, 1), 3.0)),
    ("contiguity", lambda a: [a[k].__setitem__((0, 0, 0), v) for k, v in
                              (("layer_camera_z", NAN), ("layer_opacity", NAN), ("layer_instance_id", 0))]),
    ("presence", lambda a: a["layer_instance_id"].__setitem__((1, 2, 0), 0)),
])
def test_planted_fault_fails(fault, plant):
    manifest, arrays = _event()
    plant(arrays)
    status, values = _status(manifest, arrays)
    assert status == "fail" and values[f"{fault}_pixels"] == 1, values


def test_label_without_a_stopping_layer_is_a_fault_only_when_the_stack_ended():
    manifest, arrays = _event()
    arrays["layer_opacity"][:, 2, 0] = 0.1                 # the wall passed: nothing stops the ray in a short stack
    faults = layer_faults(arrays, 0.5)
    assert faults["label"][:, 2].all()
    arrays["valid"][:, 2] = 0
    assert not layer_faults(arrays, 0.5)["label"].any()


@pytest.mark.parametrize("drop", [("layer_camera_z", "layer_instance_id", "layer_opacity"), ("layer_opacity",)])
def test_declared_stack_missing_fails(drop):
    """The policy declares 3 layers; an event without its stack (or part of it) fails `surface_layers`."""
    manifest, arrays = _event()
    for name in drop:
        del arrays[name]
    status, values = _status(manifest, arrays)
    assert status == "fail" and values["missing_arrays"] == len(drop)


def test_no_stack_and_none_declared_adds_nothing():
    manifest, arrays = _event()
    manifest["method"]["surface_policy"]["layers"] = 0
    for name in ("layer_camera_z", "layer_instance_id", "layer_opacity"):
        del arrays[name]
    added = []
    check_surface_layers(manifest, arrays, lambda *a, **k: added.append(a))
    assert added == []


def test_label_is_the_first_layer_over_the_threshold_not_the_accumulated_coverage():
    """Two decals (0.3 at 4 m, 0.4 at 6 m) over the wall: accumulated coverage reaches 0.58 at the second decal,
    but neither decal's own opacity reaches 0.5, so the label is the wall; labelling the second decal fails."""
    manifest, arrays = _event()
    arrays["layer_camera_z"][:, 0] = [4.0, 6.0, 8.0]
    arrays["layer_instance_id"][:, 0] = [DECAL, CARD, WALL]
    arrays["layer_opacity"][:, 0] = [0.3, 0.4, 1.0]
    assert _status(manifest, arrays)[0] == "pass"
    arrays["instance_id"][:, 0], arrays["camera_z"][:, 0] = CARD, 6.0
    status, values = _status(manifest, arrays)
    assert status == "fail" and values["label_pixels"] == 2
