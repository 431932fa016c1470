"""rowbeam.torch with CPU torch, in its own venv (.venv-torch, Python 3.11: make venv-torch), on a bundle the main
suite exported (ROWBEAM_TORCH_BUNDLE; tests/bundle/test_torch_loader_venv.py runs this file): map-style and iterable
datasets in a DataLoader with 2 workers, batches against the loader's own arrays, per-point time, flow with its four
flags, dataset splits, deterministic order."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from rowbeam.bundle.reader import Bundle
from rowbeam.torch import RowbeamDataset, RowbeamIterableDataset, collate
from rowbeam.util.errors import RowbeamError


@pytest.fixture(scope="module")
def bundle() -> Path:
    path = os.environ.get("ROWBEAM_TORCH_BUNDLE")
    if not path:
        pytest.fail("ROWBEAM_TORCH_BUNDLE is not set: run through tests/bundle/test_torch_loader_venv.py")
    return Path(path)


def test_camera_batches_from_two_workers_equal_the_bundle(bundle):
    ds = RowbeamDataset([bundle], "camera_front")
    batches = list(DataLoader(ds, batch_size=1, num_workers=2, collate_fn=collate))
    assert [b["index"] for b in batches] == [[30], [31]]
    for b in batches:
        ev = Bundle.open(bundle).event("camera_front", b["index"][0])
        assert b["depth"].shape == (1, 1, 45, 80) and b["depth"].dtype == torch.float32
        assert np.array_equal(b["depth"][0, 0].numpy(), ev.array("camera_z"), equal_nan=True)
        assert np.array_equal(b["valid"][0, 0].numpy(), ev.array("valid").astype(bool))
        assert b["rgb"].shape == (1, 3, 45, 80) and np.array_equal(b["rgb"][0].permute(1, 2, 0).numpy(), ev.array("rgb"))
        assert np.array_equal(b["rgb_display"][0].permute(1, 2, 0).numpy(), ev.array("rgb_display"))
        assert b["instance_id"].dtype == torch.int64 and np.array_equal(b["instance_id"][0].numpy(), ev.array("instance_id"))
        assert np.array_equal(b["semantic_id"][0].numpy(), ev.array("semantic_id"))
        assert np.array_equal(b["row_time_ns"][0].numpy(), ev.array("row_time_ns"))
        assert b["time_ns"].tolist() == [ev.reference_time_ns] and b["sample_id"] == [ev.sample_id]


def test_flow_samples_carry_the_flow_and_its_four_flags(bundle):
    [b] = list(DataLoader(RowbeamDataset(bundle, "camera_front", flow=True), batch_size=2, num_workers=2,
                          collate_fn=collate))
    flow = next(Bundle.open(bundle).flows("camera_front"))
    assert b["index"] == [30] and b["flow"].shape == (1, 2, 45, 80)
    assert np.array_equal(b["flow"][0].permute(1, 2, 0).numpy(), flow.array("flow_forward"), equal_nan=True)
    for flag in ("source_valid", "dest_in_bounds", "dest_visible", "correspondence_defined"):
        assert b[f"flow_{flag}"].dtype == torch.bool
        assert np.array_equal(b[f"flow_{flag}"][0].numpy(), flow.array(f"flow_forward_{flag}").astype(bool)), flag
    assert b["flow_dt_ns"].tolist() == [flow.destination.reference_time_ns - flow.source.reference_time_ns]


def test_lidar_points_collate_with_per_point_time(bundle):
    ds = RowbeamDataset([bundle, bundle], "lidar_top")
    [b] = list(DataLoader(ds, batch_size=2, num_workers=2, collate_fn=collate))
    ev = next(Bundle.open(bundle).events("lidar_top"))
    p = ev.array("points")
    n = p.size
    assert b["points"].shape == (2 * n, 3) and b["offsets"].tolist() == [0, n, 2 * n]
    assert b["batch"].tolist() == [0] * n + [1] * n
    assert np.array_equal(b["points"][:n].numpy(), np.stack([p["x"], p["y"], p["z"]], -1).astype(np.float32))
    assert np.array_equal(b["t_ns"][n:].numpy(), p["t_ns"])
    # closed form: uniform_32 at 10 Hz, 256 firings a sweep, no channel offsets -> t = firing * 1e9 / 2560 ns
    assert np.array_equal(b["t_offset_ns"][:n].numpy(), p["firing"].astype(np.int64) * 10**9 // 2560)
    assert np.array_equal(b["ring"][:n].numpy(), p["channel"]) and b["start_ns"].tolist() == [10**9] * 2


def test_iterable_dataset_splits_over_workers_deterministically(bundle):
    ds = RowbeamIterableDataset([bundle, bundle, bundle], "camera_front")
    ids = [b["index"][0] for b in DataLoader(ds, batch_size=1, num_workers=2, collate_fn=collate)]
    assert ids == [30, 31] * 3
    seeded = RowbeamIterableDataset([bundle, bundle, bundle], "camera_front", seed=7)
    seeded.set_epoch(3)
    order = seeded.order()
    assert sorted(order) == list(range(6)) and order == np.random.default_rng([7, 3]).permutation(6).tolist()
    got = [b["sample_id"][0] for b in DataLoader(seeded, batch_size=1, num_workers=2, collate_fn=collate)]
    assert got == [load_id(seeded.refs[i].event) for i in order]


def load_id(event_path) -> str:
    return json.loads((Path(event_path) / "manifest.json").read_text())["sample_id"]


def test_dataset_splits_come_from_dataset_json(bundle, tmp_path):
    root = tmp_path / "dataset"
    root.mkdir()
    (root / "b").symlink_to(bundle)
    samples = [{"sample_id": f"s{i}", "split": split, "path": f"b/events/camera_front/{i:06d}", "quarantined": q}
               for i, split, q in ((30, "train", False), (31, "val", False))]
    samples.append({"sample_id": "l", "split": "val", "path": "b/events/lidar_top/000010", "quarantined": True})
    (root / "dataset.json").write_text(json.dumps({"samples": samples}))
    val = RowbeamDataset([root], "camera_front", split="val")
    assert [r.split for r in val.refs] == ["val"] and val[0]["index"] == 31
    with pytest.raises(RowbeamError, match="no samples of sensor 'lidar_top' in split 'val'"):
        RowbeamDataset([root], "lidar_top", split="val")
    with pytest.raises(RowbeamError, match="no samples of sensor 'camera_front' in split 'train'"):
        RowbeamDataset([bundle], "camera_front", split="train")     # the bundle's events carry no split
