"""PyTorch datasets over rowbeam bundles and finalized datasets (optional extra: `pip install rowbeam[torch]`).

    from rowbeam.torch import RowbeamDataset, RowbeamIterableDataset, collate
    ds = RowbeamDataset(["out/bundle"], sensor="camera_front", split="train", flow=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, collate_fn=collate)

Samples are rowbeam.bundle.samples.load_sample dicts with numpy arrays turned into tensors (uint32 ids become
int64); keys, shapes, dtypes and units: docs/torch.md. Datasets hold only paths (SampleRef), so they pickle to
workers, and each worker opens its own files. Order is deterministic (rowbeam.bundle.samples.sample_index); the
iterable dataset gives worker w of W the samples w, w + W, ... (with batch_size 1 the DataLoader's round robin
over workers yields index order) and, with a seed, a permutation that depends only on (seed, epoch).
"""
from __future__ import annotations

import numpy as np

try:
    import torch
    from torch.utils.data import Dataset, IterableDataset, get_worker_info
except ImportError as exc:           # torch is an optional extra
    raise ImportError("rowbeam.torch needs PyTorch: pip install 'rowbeam[torch]' (or torch itself)") from exc

from rowbeam.bundle.samples import POINT_KEYS, load_sample, sample_index


def to_tensors(sample: dict) -> dict:
    """numpy arrays and numpy scalars -> tensors (bool, uint8, int64, float32, float64 kept; other ints -> int64);
    strings, ints and None stay as they are."""
    out = {}
    for k, v in sample.items():
        if isinstance(v, (np.ndarray, np.generic)):
            a = np.asarray(v)
            if a.dtype.kind in "iu" and a.dtype not in (np.uint8, np.int64):
                a = a.astype(np.int64)
            out[k] = torch.from_numpy(a if a.flags.c_contiguous else a.copy())
        else:
            out[k] = v
    return out


class RowbeamDataset(Dataset):
    """Map-style dataset: item i = the tensors of sample_index(sources, sensor, split, flow)[i]."""

    def __init__(self, sources, sensor: str, split: str | None = None, flow: bool = False):
        self.refs = sample_index(sources, sensor, split, flow)

    def __len__(self) -> int:
        return len(self.refs)

    def __getitem__(self, i: int) -> dict:
        return to_tensors(load_sample(self.refs[i]))


class RowbeamIterableDataset(IterableDataset):
    """Iterable dataset over the same index: each worker reads its own share (w, w + W, ...); `seed` given: the
    order is a permutation drawn from (seed, epoch) (set_epoch), the same in every worker."""

    def __init__(self, sources, sensor: str, split: str | None = None, flow: bool = False, seed: int | None = None):
        self.refs = sample_index(sources, sensor, split, flow)
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def order(self) -> list[int]:
        """Index order of one epoch (before the split over workers)."""
        n = len(self.refs)
        if self.seed is None:
            return list(range(n))
        return np.random.default_rng([self.seed, self.epoch]).permutation(n).tolist()

    def __len__(self) -> int:
        return len(self.refs)

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in self.order()[worker::workers]:
            yield to_tensors(load_sample(self.refs[i]))


def collate(samples: list[dict]) -> dict:
    """A batch of B samples: in point samples (LiDAR, radar: a `points` key) the per-point keys (POINT_KEYS) are
    concatenated over the batch, with `batch` (N_total,) int64 (the sample of each point) and `offsets` (B + 1,)
    int64; every other tensor is stacked (B, ...); strings, ints and None become lists. Samples of one dataset share
    their keys."""
    out: dict = {}
    per_point = POINT_KEYS if "points" in samples[0] else ()
    counts = None
    for k in samples[0]:
        values = [s[k] for s in samples]
        if k in per_point:
            out[k] = torch.cat(values)
            counts = [len(v) for v in values]
        elif isinstance(values[0], torch.Tensor):
            out[k] = torch.stack(values)
        else:
            out[k] = values
    if counts is not None:
        out["batch"] = torch.repeat_interleave(torch.arange(len(samples)), torch.tensor(counts))
        out["offsets"] = torch.tensor([0, *np.cumsum(counts).tolist()], dtype=torch.int64)
    return out
