"""The public bundle loader (rowbeam.bundle.reader): open a bundle, iterate events and flows, lazy typed
arrays with hashes verified, and one-line errors for what it cannot read."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from rowbeam.bundle.arrays import read_exr_channels
from rowbeam.bundle.reader import Bundle, open_event, open_flow, read_payload
from rowbeam.util.errors import RowbeamError
from rowbeam.blender.scenes import flow_scenes


@pytest.fixture(scope="module")
def van(exports):
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export

    e = exports("loader_van", flow_scenes.passing_van, scale=4, events={"camera_front": (0, 2)})
    if not (e.bundle / "flows").exists():
        run_export(plan_export(ExportRequest(out=e.bundle, blend=e.blend, rig=e.rig, first_event=0, count=2,
                                             flow=True)))
    return e


def test_bundle_iterates_events_and_flows_lazily(van):
    b = Bundle.open(van.bundle)
    assert b.info["schema"] == "rowbeam/bundle@1" and b.sensors() == ["camera_front"]
    events = list(b.events())
    assert [e.index for e in events] == [0, 1] and [e.sensor for e in events] == ["camera_front"] * 2
    e0 = events[0]
    assert e0._arrays == {} and e0.sensor_type == "rolling_shutter_camera"
    assert e0.sample_id == json.loads((e0.path / "manifest.json").read_text())["sample_id"]
    z = e0.array("camera_z")
    H, W = e0.manifest["calibration"]["image_size_px"][::-1]
    assert z.dtype == np.float32 and z.shape == (H, W)
    assert list(e0._arrays) == [("camera_z", True)]                     # only what was asked for was read
    # the same pixels an independent OpenEXR read gives
    raw, _ = read_exr_channels(e0.path / e0.entry("camera_z")["uri"])
    (plane,) = raw.values()
    assert np.array_equal(np.isnan(z), np.isnan(plane)) and np.array_equal(z[~np.isnan(z)], plane[~np.isnan(z)])
    assert e0.array("instance_id").dtype == np.uint32 and e0.array("row_T_world_camera").shape == (H, 4, 4)
    assert {o["render_index"] for o in e0.objects} >= set(np.unique(e0.array("instance_id")).tolist()) - {0}
    assert e0.object_labels == []                                         # object labels are opt-in per camera
    assert b.event("camera_front", 1).reference_time_ns == events[1].reference_time_ns
    flows = list(b.flows())
    assert len(flows) == 1 and flows[0].flow_id.endswith("flow.0-1")
    f = flows[0]
    assert f.source.sample_id == e0.sample_id and f.destination.sample_id == events[1].sample_id
    assert f.array("flow_forward").shape == (H, W, 2) and f.array("flow_forward").dtype == np.float32
    assert open_flow(f.path).source.path.resolve() == e0.path.resolve()
    assert open_event(e0.path / "manifest.json").sample_id == e0.sample_id


def test_hashes_are_verified_unless_asked_not_to(van, tmp_path):
    copy = tmp_path / "b"
    shutil.copytree(van.bundle, copy)
    e = Bundle.open(copy).event("camera_front", 0)
    path = e.path / e.entry("camera_z")["uri"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(RowbeamError, match="sha256 does not match"):
        e.array("camera_z")
    path.write_bytes(bytes(data[:-10]))
    with pytest.raises(RowbeamError, match="bytes, manifest declares"):
        e.array("camera_z")
    # an edited destination manifest no longer matches the flow's record of it
    dest = copy / "events" / "camera_front" / "000001" / "manifest.json"
    m = json.loads(dest.read_text())
    m["run"] = {"edited": True}
    dest.write_text(json.dumps(m))
    flow = next(Bundle.open(copy).flows())
    with pytest.raises(RowbeamError, match="changed since the flow was made"):
        flow.endpoint("destination")
    assert flow.endpoint("destination", verify=False).index == 1


def test_loader_errors_are_one_line(van, tmp_path):
    with pytest.raises(RowbeamError, match="not a bundle folder"):
        Bundle.open(tmp_path / "missing")
    with pytest.raises(RowbeamError, match="not a bundle folder"):
        Bundle.open(tmp_path)
    b = Bundle.open(van.bundle)
    with pytest.raises(RowbeamError, match="no events of sensor 'lidar'"):
        list(b.events("lidar"))
    with pytest.raises(RowbeamError, match="no published event camera_front/000007"):
        b.event("camera_front", 7)
    e = b.event("camera_front", 0)
    with pytest.raises(RowbeamError, match="no modality 'depth'"):
        e.array("depth")
    entry = dict(e.entry("valid"), uri="../../../../etc/passwd")
    with pytest.raises(RowbeamError, match="not a relative path inside the bundle"):
        read_payload(e.path, entry, b.path)
    with pytest.raises(RowbeamError, match="decoded shape"):
        read_payload(e.path, dict(e.entry("valid"), shape=[1, 2]), b.path)
    with pytest.raises(RowbeamError, match="not an event folder"):
        open_event(tmp_path)


def test_kitti_flow_is_the_new_name_and_kitti_still_works(van, tmp_path):
    from tests.conftest import run_python

    flow = next(Bundle.open(van.bundle).flows()).path
    outs = []
    for name in ("kitti-flow", "kitti"):
        out = tmp_path / f"{name}.png"
        r = run_python("-m", "rowbeam", "adapt", name, flow, out, "--variant", "occ")
        assert r.returncode == 0, r.stderr
        side = json.loads((tmp_path / f"{name}.png.json").read_text())
        assert side["format"] == "kitti2015_flow_png" and side["variant"] == "occ"
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def test_docs_api_examples_run_on_a_real_bundle(van, tmp_path, capsys):
    """The Python blocks of docs/api.md that need no torch run as written on an exported bundle with flows: the
    documented public API (rowbeam.Bundle, rowbeam.check_bundle, rowbeam.MODALITIES) is the one that works."""
    import re

    from tests.conftest import REPO

    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "api.md").read_text(), re.S)
    runnable = [b for b in blocks if "import torch" not in b]
    assert runnable, "docs/api.md has no runnable example"
    for block in runnable:
        exec(compile(block.replace('"out/bundle"', repr(str(van.bundle))), "docs/api.md", "exec"), {})
    out = capsys.readouterr().out
    assert "pass" in out and "m {sensor}:opencv_optical per_row" in out
