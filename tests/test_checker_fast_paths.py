"""The checker's windowed fast paths equal the plain computations they replace: the boxed rasteriser (row
skipping, span accumulation) against a brute-force point-in-triangle test of every pixel centre, and the
bit-packed mask extent against unpacking the whole mask. No Blender needed."""
from __future__ import annotations

import numpy as np

from contracts.object_checks import canvas_mask_box, packed_extent, tight_box, unpack
from contracts.rasterize import rasterize_rows, rasterize_rows_box


def _brute(V, F, K, T, rows, width, u0, margin):
    """Coverage by testing every pixel centre against every projected triangle (edges moved by margin px)."""
    out = np.zeros((len(rows), width), dtype=bool)
    u = np.arange(u0, u0 + width, dtype=np.float64)
    for i, y in enumerate(rows):
        Ti = T[i] if T.ndim == 3 else T
        P = V @ Ti[:3, :3].T + Ti[:3, 3]
        uv = (P @ K.T)[:, :2] / P[:, 2:3]
        for tri in F:
            p = uv[tri]
            area = (p[1, 0] - p[0, 0]) * (p[2, 1] - p[0, 1]) - (p[1, 1] - p[0, 1]) * (p[2, 0] - p[0, 0])
            if area == 0:
                continue
            inside = np.ones(width, dtype=bool)
            for a, b in ((0, 1), (1, 2), (2, 0)):
                e = np.sign(area) * ((p[b, 0] - p[a, 0]) * (y - p[a, 1]) - (p[b, 1] - p[a, 1]) * (u - p[a, 0]))
                inside &= e >= -margin * np.hypot(*(p[b] - p[a]))
            out[i] |= inside
    return out


def test_boxed_rasteriser_equals_brute_force_on_random_meshes():
    rng = np.random.default_rng(7)
    K = np.array([[60.0, 0.3, 40.0], [0.0, 58.0, 22.0], [0.0, 0.0, 1.0]])
    rows = np.arange(-10, 55)
    for trial in range(6):
        V = rng.normal(size=(9, 3)) * 0.3
        F = rng.integers(0, 9, size=(7, 3))
        T = np.repeat(np.eye(4)[None], len(rows), 0)
        T[:, :3, 3] = [rng.normal() * 0.3, rng.normal() * 0.3, 3.0 + trial]
        T[:, 0, 3] += 0.01 * rows * (trial % 2)                        # a moving object on odd trials
        Ts = T if trial % 2 else T[0]
        for margin in (0.0, 0.3, -0.3):
            want = _brute(V, F, K, Ts, rows, 100, -10, margin)
            assert want.any()
            assert np.array_equal(rasterize_rows(V, F, K, Ts, rows, 100, -10, margin), want), (trial, margin)
            box = rasterize_rows_box(V, F, K, Ts, rows, 100, -10, margin)
            r0, c0, block = box
            assert block.any() and np.array_equal(want[r0:r0 + block.shape[0], c0:c0 + block.shape[1]], block)
            assert want.sum() == block.sum()                            # nothing covered outside the box
    assert rasterize_rows_box(V, F, K, T[0], np.arange(500, 510), 100, -10) is None


def test_packed_extent_and_canvas_box_equal_full_unpack():
    rng = np.random.default_rng(3)
    W, H = 37, 11
    for trial in range(40):
        m = np.zeros((3 * H, 3 * W), dtype=bool)
        if trial % 5:
            r, c = rng.integers(0, 3 * H), rng.integers(0, 3 * W)
            m[r:r + rng.integers(1, 9), c:c + rng.integers(1, 30)] = True
            m &= rng.random(m.shape) < 0.8
        packed = np.packbits(m, axis=-1)
        packed[:, -1] |= 0b1                                            # the pad bit (3W = 111 px of 112) is ignored
        e = packed_extent(packed, 3 * W)
        box = tight_box(m)
        assert (e is None) == (box is None)
        if box is not None:                     # holds every pixel; tight in columns, rows may take pad-only rows
            assert m[e[0]:e[1], e[2]:e[3]].sum() == m.sum() and (e[2], e[3]) == (box[0], box[0] + box[2])
        arrays = {"amodal_masks_canvas": packed[None], "amodal_masks": np.packbits(m[H:2 * H, W:2 * W], axis=-1)[None]}
        for o in ({"canvas_mask_index": 0, "mask_index": 0}, {"canvas_mask_index": None, "mask_index": 0}):
            full = m if o["canvas_mask_index"] is not None else np.pad(m[H:2 * H, W:2 * W], ((H, H), (W, W)))
            b = canvas_mask_box(arrays, W, H, o)
            got = np.zeros_like(full)
            if b is not None:
                got[b[0]:b[0] + b[2].shape[0], b[1]:b[1] + b[2].shape[1]] = b[2]
            assert np.array_equal(got, full)
    assert np.array_equal(unpack(np.packbits(np.eye(9, dtype=bool), axis=-1), 9), np.eye(9, dtype=bool))
