"""rowbeam.bundle.samples (the numpy half of rowbeam.torch) on the small all-sensor bundle: sample keys against the
loader's arrays and closed forms (LiDAR point time after the sweep start, forward flow with its four flags), the
index's order and its split filter (bundle lineage.split, a dataset.json's split lists and quarantine)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from rowbeam.bundle.reader import Bundle
from rowbeam.bundle.samples import load_sample, sample_index
from rowbeam.util.errors import RowbeamError


def test_camera_and_flow_samples(dusk_all_sensors):
    [ref] = sample_index(dusk_all_sensors, "camera_front", flow=True)
    s = load_sample(ref)
    flow = next(Bundle.open(dusk_all_sensors).flows("camera_front"))
    ev = flow.source
    assert (s["index"], s["sample_id"], s["time_ns"]) == (30, ev.sample_id, ev.reference_time_ns)
    assert s["depth"].shape == (1, 45, 80) and np.array_equal(s["depth"][0], ev.array("camera_z"), equal_nan=True)
    assert np.array_equal(s["rgb"].transpose(1, 2, 0), ev.array("rgb"))
    assert np.array_equal(s["flow"].transpose(1, 2, 0), flow.array("flow_forward"), equal_nan=True)
    for flag in ("source_valid", "dest_in_bounds", "dest_visible", "correspondence_defined"):
        assert np.array_equal(s[f"flow_{flag}"], flow.array(f"flow_forward_{flag}").astype(bool)), flag
    assert s["flow_dt_ns"] == flow.destination.reference_time_ns - ev.reference_time_ns > 0


def test_lidar_sample_point_times(dusk_all_sensors):
    [ref] = sample_index(dusk_all_sensors, "lidar_top")
    s = load_sample(ref)
    p = next(Bundle.open(dusk_all_sensors).events("lidar_top")).array("points")
    # uniform_32 at 10 Hz, 256 firings a sweep starting at 1 s, no channel offsets: t = firing * 1e9 / 2560 ns
    assert s["start_ns"] == 10**9
    assert np.array_equal(s["t_offset_ns"], p["firing"].astype(np.int64) * 10**9 // 2560)
    assert np.array_equal(s["ring"], p["channel"]) and s["points"].shape == (p.size, 3)


def test_index_order_and_splits(dusk_all_sensors, tmp_path):
    refs = sample_index([dusk_all_sensors, dusk_all_sensors], "camera_front")
    assert [r.event.rsplit("/", 1)[1] for r in refs] == ["000030", "000031"] * 2
    with pytest.raises(RowbeamError, match="no samples of sensor 'camera_front' in split 'train'"):
        sample_index(dusk_all_sensors, "camera_front", split="train")        # the bundle's events carry no split
    root = tmp_path / "dataset"
    root.mkdir()
    (root / "b").symlink_to(dusk_all_sensors)
    samples = [{"sample_id": str(i), "split": split, "path": f"b/events/camera_front/{i:06d}", "quarantined": q}
               for i, split, q in ((30, "train", False), (31, "val", False), (31, "train", True))]
    (root / "dataset.json").write_text(json.dumps({"samples": samples}))
    assert [(r.event.rsplit("/", 1)[1], r.split) for r in sample_index(root, "camera_front", "train")] == [
        ("000030", "train")]
    assert [r.split for r in sample_index(root, "camera_front")] == ["train", "val"]
