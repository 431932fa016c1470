"""The checker's windowed fast paths equal the plain computations they replace: the boxed rasteriser (row
skipping, span accumulation) against a brute-force point-in-triangle test of every pixel centre, and the
bit-packed mask extent against unpacking the whole mask. No Blender needed."""
from __future__ import annotations

import numpy as np
import pytest

from rowbeam.util.errors import RowbeamError
from rowbeam.check.object_checks import canvas_mask_box, packed_extent, tight_box, unpack
from rowbeam.check.rasterize import rasterize_rows, rasterize_rows_box


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


# ---- camera invariants: NaN-skipping reductions and row blocks against the plain masked computations -------------

def _labels(rng, H=37, W=53):
    """A small synthetic camera event: valid plane, depth, range = depth * |ray|, unit normals facing the camera
    (NaN exactly where invalid), a pinhole K."""
    from rowbeam.check.camera_checks import ray_grid

    K = np.array([[40.0, 0.0, W / 2 - 0.3], [0.0, 41.0, H / 2 + 0.2], [0.0, 0.0, 1.0]])
    valid = (rng.random((H, W)) < 0.8).astype(np.uint8)
    miss = valid == 0
    rays = ray_grid(K, W, H)
    z = rng.uniform(1.0, 80.0, (H, W)).astype(np.float32)
    rng_m = (z * rays.factor).astype(np.float32)
    n = rng.normal(size=(H, W, 3))
    n[..., 2] = -np.abs(n[..., 2]) - 0.5
    n = (n / np.linalg.norm(n, axis=-1, keepdims=True)).astype(np.float32)
    for a in (z, rng_m, n):
        a[miss] = np.nan
    return K, {"valid": valid, "camera_z": z, "range": rng_m, "normal_geometric": n, "normal_shading": n.copy()}


class _Collect(list):
    """An `add` callback that keeps (name, ok, message, values) of every result."""

    def __call__(self, name, ok, message, **values):
        self.append((name, ok, message, values))


def _faults(rng, arrays):
    """Copies of `arrays` with one planted validity or value fault each (the fast paths must fall back)."""
    H, W = arrays["valid"].shape
    hit, miss = np.argwhere(arrays["valid"] == 1), np.argwhere(arrays["valid"] == 0)
    out = []
    for name in ("camera_z", "range", "normal_geometric", "normal_shading"):
        for kind in ("nan_valid", "inf_valid", "finite_invalid", "one_channel", "long", "overflow", "away"):
            if kind in ("one_channel", "away") and not name.startswith("normal"):
                continue
            a = {k: v.copy() for k, v in arrays.items()}
            y, x = hit[rng.integers(len(hit))]
            my, mx = miss[rng.integers(len(miss))]
            if kind == "nan_valid":
                a[name][y, x] = np.nan
            elif kind == "inf_valid":
                a[name][y, x] = np.inf
            elif kind == "finite_invalid":
                a[name][my, mx] = 0.5
            elif kind == "one_channel":
                a[name][y, x, 1] = np.nan
            elif kind == "long":
                a[name][y, x] *= 1.5
            elif kind == "overflow":                       # finite, but its square overflows float32
                a[name][y, x] = 3e38
            else:
                a[name][y, x] = -a[name][y, x]
            out.append((f"{name}:{kind}", a))
    return out


def test_nan_exactly_off_equals_the_per_channel_definition(monkeypatch):
    import rowbeam.check.label_checks as lc

    rng = np.random.default_rng(3)
    _, arrays = _labels(rng)
    hit = arrays["valid"] == 1
    cases = [("clean", arrays)] + _faults(rng, arrays)
    seen = set()
    for block in (1 << 30, 5 * hit.shape[1]):              # one block; blocks of 5 rows
        monkeypatch.setattr(lc, "BLOCK_PIXELS", block)
        for label, a in cases:
            for name in ("camera_z", "range", "normal_geometric", "normal_shading"):
                finite, nan = lc.finite_and_nan(a[name])
                want = not np.count_nonzero(hit & ~finite) and not np.count_nonzero(~hit & ~nan)
                got = lc.nan_exactly_off(a[name], ~hit)
                assert got == want, (label, name, block)
                seen.add(got)
    assert seen == {True, False}


def test_squared_norm_equals_einsum():
    from rowbeam.check.camera_checks import squared_norm

    rng = np.random.default_rng(5)
    n = (rng.normal(size=(64, 96, 3)) * 10.0 ** rng.integers(-3, 3, size=(64, 96, 1))).astype(np.float32)
    assert np.array_equal(squared_norm(n[..., 0], n[..., 1], n[..., 2]), np.einsum("hwc,hwc->hw", n, n))
    x, y, z = (np.ascontiguousarray(n[..., c]) for c in range(3))            # the planes a DecodedArrays holds
    assert np.array_equal(squared_norm(x, y, z), np.einsum("hwc,hwc->hw", n, n))


def test_camera_fast_paths_equal_masked_paths(monkeypatch):
    """z_range and normals with the clean set from check_validity (NaN-skipping reductions, small row blocks)
    give the results of the plain masked reductions over the whole image, on a clean event and on planted faults."""
    import rowbeam.check.label_checks as lc
    from rowbeam.check import camera_checks as cc

    rng = np.random.default_rng(11)
    K, arrays = _labels(rng)
    H, W = arrays["valid"].shape
    rays = cc.ray_grid(K, W, H)
    failed = set()
    for label, a in [("clean", arrays)] + _faults(rng, arrays):
        res = []
        for block in (1 << 30, 7 * W + 3):                 # one block; many blocks of 7 rows
            monkeypatch.setattr(lc, "BLOCK_PIXELS", block)
            clean = lc.check_validity(a, ("camera_z", "range", "normal_geometric", "normal_shading"), _Collect())
            for fast in (clean, set()):
                out = _Collect()
                cc._check_z_range(rays.factor, a["valid"], a, out, fast)
                cc._check_normals(rays.xn, rays.yn, rays.factor, a["valid"], a, out, fast, rays.f32)
                res.append(repr(out))                      # repr: a NaN worst equals a NaN worst
        assert all(r == res[0] for r in res), label
        failed |= {name for name, ok, _, _ in out if not ok}
    assert {"camera_z_range", "normal_geometric_unit", "normal_shading_unit", "normal_geometric_facing"} <= failed


def test_ray_grid_is_cached_per_camera_and_equals_the_formula():
    from rowbeam.check.camera_checks import ray_grid
    from rowbeam.model.camera_model import normalized

    K = np.array([[50.0, 0.0, 20.0], [0.0, 52.0, 11.0], [0.0, 0.0, 1.0]])
    g = ray_grid(K, 40, 24)
    assert ray_grid(K.copy(), 40, 24) is g
    assert ray_grid(K, 40, 25) is not g and ray_grid(K * 1.01, 40, 24) is not g
    xn, yn = normalized(K, np.arange(40.0)[None, :], np.arange(24.0)[:, None])
    assert np.array_equal(g.factor, np.sqrt(1.0 + xn * xn + yn * yn)) and g.finite and g.in_domain is None
    assert not g.factor.flags.writeable


def test_check_ids_shortcut_equals_the_scan_of_every_id():
    """instance_ids_known skips the id scan only when every id up to the largest present one is in the table;
    tables with gaps and ids beyond the table still name the unknown ids."""
    from rowbeam.check.label_checks import check_ids

    rng = np.random.default_rng(2)
    for table, extra in (((1, 2, 3, 4, 5), None), ((1, 2, 4, 5), 3), ((1, 2, 3), 7), ((2, 3), 1), ((1, 2, 3), None)):
        objects = [{"id": f"o{i}", "render_index": i, "class_id": 10 + i} for i in table]
        instance = rng.choice(np.array((0, *table), np.uint32), size=(9, 11))
        if extra is not None:
            instance[4, 5] = extra
        lut = {0: 0, **{i: 10 + i for i in table}}
        semantic = np.array([[lut.get(int(i), 0xFFFFFFFF) for i in row] for row in instance], np.uint32)
        manifest = {"objects": objects, "ontology": {"classes": [{"id": 10 + i} for i in range(9)]}}
        out = _Collect()
        check_ids(manifest, {"instance_id": instance, "semantic_id": semantic}, out)
        result = {name: (ok, msg) for name, ok, msg, _ in out}
        assert result["instance_ids_known"][0] == (extra is None), table
        if extra is not None:
            assert f"[{extra}]" in result["instance_ids_known"][1]
        assert result["semantic_matches_instance"][0], table


def test_camera_fast_paths_with_a_lens_domain_equal_masked_paths():
    """A fisheye whose valid domain leaves the image corners out (NaN rays there): with every valid pixel inside
    the domain the NaN-skipping paths run and equal the masked ones; a valid pixel outside turns them off."""
    import rowbeam.check.label_checks as lc
    from rowbeam.check import camera_checks as cc
    from rowbeam.model.lens import LensSpec, make_lens

    W, H = 64, 48
    K = np.array([[19.0, 0.0, 31.85], [0.0, 19.0, 24.15], [0.0, 0.0, 1.0]])          # corners beyond 90 deg
    rays = cc.ray_grid(K, W, H, make_lens(LensSpec("opencv_fisheye", (-0.013, 0.021, -0.006, 0.0011)), K, W, H))
    assert not rays.finite and rays.outside > 0
    names = ("camera_z", "range", "normal_geometric", "normal_shading")
    a = _labels(np.random.default_rng(4), H, W)[1]
    a["valid"][~rays.in_domain] = 0
    a["range"] = (a["camera_z"] * rays.factor).astype(np.float32)
    for name in names:
        a[name][a["valid"] == 0] = np.nan
    b = {k: v.copy() for k, v in a.items()}                # one valid pixel outside the domain
    (y, x), (y1, x1) = np.argwhere(~rays.in_domain)[0], np.argwhere(a["valid"] == 1)[0]
    b["valid"][y, x] = 1
    for name in names:
        b[name][y, x] = a[name][y1, x1]
    for labels, fast in ((a, True), (b, False)):
        clean = lc.check_validity(labels, names, _Collect())
        assert clean == set(names)
        assert bool(cc.nan_skipping(clean, rays, labels["valid"])) == fast
        res = []
        for c in (cc.nan_skipping(clean, rays, labels["valid"]), set()):
            out = _Collect()
            cc._check_z_range(rays.factor, labels["valid"], labels, out, c)
            cc._check_normals(rays.xn, rays.yn, rays.factor, labels["valid"], labels, out, c, rays.f32)
            res.append(repr(out))
        assert res[0] == res[1]


def _planes_of(arrays):
    """The DecodedArrays the checker builds for `arrays`: multi-channel images held as contiguous channel planes."""
    from rowbeam.bundle.arrays import DecodedArrays

    out = DecodedArrays()
    for name, a in arrays.items():
        out.add(name, [np.ascontiguousarray(a[..., c]) for c in range(a.shape[-1])] if a.ndim == 3 else a)
    return out


def test_validity_and_normals_on_held_planes_equal_the_stacked_arrays(monkeypatch):
    """check_validity, z_range and normals on a DecodedArrays that holds the normals as channel planes give the
    results (and the clean set) of the plain dict of stacked arrays, on a clean event and on every planted fault,
    without stacking the planes."""
    import rowbeam.check.label_checks as lc
    from rowbeam.check import camera_checks as cc

    rng = np.random.default_rng(13)
    K, arrays = _labels(rng)
    H, W = arrays["valid"].shape
    rays = cc.ray_grid(K, W, H)
    names = ("camera_z", "range", "normal_geometric", "normal_shading")
    verdicts = set()
    for label, a in [("clean", arrays)] + _faults(rng, arrays):
        for block in (1 << 30, 5 * W + 2):
            monkeypatch.setattr(lc, "BLOCK_PIXELS", block)
            runs = []
            for held in (a, _planes_of(a)):
                out = _Collect()
                clean = lc.check_validity(held, names, out)
                cc._check_z_range(rays.factor, held["valid"], held, out, clean)
                cc._check_normals(rays.xn, rays.yn, rays.factor, held["valid"], held, out, clean, rays.f32)
                runs.append((sorted(clean), repr(out)))       # repr: a NaN worst equals a NaN worst
                if held is not a and "normal_geometric" in clean:          # only a fallback reads the stacked array
                    assert held.held_planes("normal_geometric") is not None, "the planes were stacked"
            assert runs[0] == runs[1], (label, block)
            verdicts.add(runs[0][0] == sorted(names))
    assert verdicts == {True, False}


def test_decoded_arrays_stack_on_read_as_decode_payload(tmp_path):
    """read_payload(planes=True) of a multi-channel EXR, held by a DecodedArrays, reads back bit for bit as
    decode_payload's (H, W, C) array; membership and iteration never stack; single-channel payloads stay arrays."""
    from rowbeam.bundle.arrays import DecodedArrays, channel_planes, decode_payload, write_exr
    from rowbeam.bundle.reader import read_payload
    from rowbeam.bundle.files import sha256_file

    rng = np.random.default_rng(1)
    n = rng.normal(size=(6, 9, 3)).astype(np.float32)
    n[2, 3] = np.nan
    entries = {}
    for name, a, channels in (("normal_geometric", n, ["X", "Y", "Z"]), ("camera_z", n[..., 0].copy(), ["Z"])):
        path = tmp_path / f"{name}.exr"
        write_exr(path, a, channels, "float32")
        entries[name] = {"uri": path.name, "format": "openexr", "channels": channels, "dtype": "float32",
                         "shape": list(a.shape), "sha256": sha256_file(path), "bytes": path.stat().st_size}
    held = DecodedArrays()
    for name, e in entries.items():
        held.add(name, read_payload(tmp_path, e, planes=True))
    assert isinstance(read_payload(tmp_path, entries["camera_z"], planes=True), np.ndarray)
    assert "normal_geometric" in held and list(held) == list(entries) and len(held) == 2
    planes = channel_planes(held, "normal_geometric")
    assert all(p.flags.c_contiguous for p in planes) and held.held_planes("normal_geometric") is not None
    for name, e in entries.items():
        want = decode_payload(tmp_path / e["uri"], e)
        assert held[name].dtype == want.dtype and np.array_equal(held[name], want, equal_nan=True)
    assert held.held_planes("normal_geometric") is None                      # stacked once, on the first read
    assert all(np.array_equal(p, n[..., c], equal_nan=True) for c, p in enumerate(channel_planes(held, "normal_geometric")))
    bad = {**entries["normal_geometric"], "shape": [6, 9, 4]}
    with pytest.raises(RowbeamError, match="decoded shape"):
        read_payload(tmp_path, bad, planes=True)


def test_semantic_mismatch_count_by_row_blocks_equals_the_whole_image(monkeypatch):
    """semantic_matches_instance counts the same mismatching pixels in row blocks as a whole-image lookup, with ids
    inside and beyond the object table."""
    import rowbeam.check.label_checks as lc
    from rowbeam.model.ontology import VOID_ID

    rng = np.random.default_rng(9)
    objects = [{"id": f"o{i}", "render_index": i, "class_id": 10 + i} for i in (1, 2, 3)]
    manifest = {"objects": objects, "ontology": {"classes": [{"id": 10 + i} for i in range(5)]}}
    instance = rng.choice(np.array((0, 1, 2, 3, 9), np.uint32), size=(23, 17))
    lut = np.array([0, 11, 12, 13, VOID_ID], np.uint32)                  # id 9: beyond the table
    semantic = lut[np.minimum(instance, 4)]
    semantic[rng.random(semantic.shape) < 0.1] = 12
    want = int(np.count_nonzero(lut[np.minimum(instance, 4)] != semantic))
    assert want > 0
    for block in (1 << 30, 3 * 17, 17):
        monkeypatch.setattr(lc, "BLOCK_PIXELS", block)
        out = _Collect()
        lc.check_ids(manifest, {"instance_id": instance, "semantic_id": semantic}, out)
        msg = {name: m for name, _, m, _ in out}["semantic_matches_instance"]
        assert f"at {want} pixels" in msg, (block, msg)


def test_float32_facing_with_exact_recompute_equals_float64(monkeypatch):
    """The facing count and worst cos of a clean normal image (float32 estimate, float64 recomputed where it could
    decide) equal the float64 computation bit for bit: normals facing the camera, grazing within a few float32 ulps
    of the tolerance (every pixel ambiguous), and normals of lengths 1e-3..1e2."""
    import rowbeam.check.label_checks as lc
    from rowbeam.check import camera_checks as cc
    from rowbeam.model import qa_profile as tol

    H, W = 30, 70
    K = np.array([[45.0, 0.0, W / 2 - 0.3], [0.0, 47.0, H / 2 + 0.4], [0.0, 0.0, 1.0]])
    g = cc.ray_grid(K, W, H)
    assert g.f32 is not None and all(a.dtype == np.float32 for a in g.f32)   # the float32 path is taken
    ray = np.stack(np.broadcast_arrays(g.xn, g.yn, np.ones((H, W))), -1) / g.factor[..., None]
    rng = np.random.default_rng(21)
    for trial in range(24):
        n = rng.normal(size=(H, W, 3))
        kind = trial % 4
        if kind == 0:                                                       # facing the camera
            n[..., 2] = -np.abs(n[..., 2]) - 0.3
        n /= np.linalg.norm(n, axis=-1, keepdims=True)
        if kind in (1, 2):                                                  # cos within ~1e-7 / 1e-9 of tol
            n -= (n * ray).sum(-1, keepdims=True) * ray
            n /= np.linalg.norm(n, axis=-1, keepdims=True)
            n += ray * (tol.GEOMETRIC_FACING_TOL + rng.normal(size=(H, W, 1)) * (1e-7 if kind == 1 else 1e-9))
        n = n.astype(np.float32)
        if kind == 3:
            n *= (10.0 ** rng.integers(-3, 3, size=(H, W, 1))).astype(np.float32)
        hit = rng.random((H, W)) > 0.2
        n[~hit] = np.nan
        cos = n[..., 0] * g.xn
        cos += n[..., 1] * g.yn
        cos += n[..., 2]
        cos /= g.factor
        want = (int(np.count_nonzero(cos > tol.GEOMETRIC_FACING_TOL)), float(np.fmax.reduce(cos, axis=None, initial=-1.0)))
        planes = [np.ascontiguousarray(n[..., c]) for c in range(3)]
        for block in (1 << 30, 4 * W + 5):
            monkeypatch.setattr(lc, "BLOCK_PIXELS", block)
            assert cc._normal_stats(planes, hit, True, (g.xn, g.yn, g.factor), g.f32)[1] == want, (trial, block)
