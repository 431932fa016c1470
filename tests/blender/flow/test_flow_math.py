"""The flow solve's shortcuts give the bits of the plain formulas they replace (numpy only, no Blender)."""
from __future__ import annotations

import numpy as np
import pytest

from rowbeam.util.blocks import blockwise
from rowbeam.check.event_points import camera_points, world_points
from rowbeam.check.flow_checks import rotate_per_row
from rowbeam.model.frames import apply_per_row, apply_rows_grid
from rowbeam.model.lens import image_rays
from rowbeam.model.pixel_sampling import camera_z_at
from rowbeam.blender.flow.flow_math import RowTerms


def _row_poses(rng, H):
    """(H, 4, 4) affine row poses drifting smoothly from row to row (as a rolling-shutter readout)."""
    T = np.tile(np.eye(4), (H, 1, 1))
    angle = 0.3 + 1e-3 * np.arange(H)
    T[:, 0, 0], T[:, 0, 1], T[:, 1, 0], T[:, 1, 1] = np.cos(angle), -np.sin(angle), np.sin(angle), np.cos(angle)
    T[:, :3, 3] = rng.normal(size=3) + 1e-2 * np.arange(H)[:, None]
    return T


def test_row_terms_equal_apply_per_row_bit_for_bit_while_rows_change():
    rng = np.random.default_rng(7)
    H, N = 40, 5000
    T = _row_poses(rng, H)
    X = rng.normal(scale=20.0, size=(N, 3))
    terms = RowTerms(T, X)
    rows = rng.integers(0, H, N)
    # the solve's first call has frac == 0 everywhere (no step term formed), later ones mostly frac != 0
    for changed, zero in ((1.0, 1.0), (0.9, 0.0), (0.05, 0.0), (0.0, 0.5), (0.3, 0.1), (0.0, 0.0)):
        move = rng.random(N) < changed
        rows = np.where(move, rng.integers(0, H, N), rows)
        frac = np.where((rows == H - 1) | (rng.random(N) < zero), 0.0, rng.random(N))
        got = terms.at(rows, frac)
        want = apply_per_row(T, X, rows, frac)
        assert got.tobytes() == want.tobytes(), f"differs after {changed:.0%} of the rows changed"


def test_rotate_per_row_equals_the_einsum_it_replaces():
    rng = np.random.default_rng(3)
    H, W = 12, 17
    R_cw = np.transpose(_row_poses(rng, H)[:, :3, :3], (0, 2, 1))
    grid = rng.normal(size=(H, W, 3))
    want = np.einsum("hij,hwj->hwi", R_cw, grid).reshape(-1, 3)
    pick = rng.choice(H * W, 50, replace=False)
    got = rotate_per_row(R_cw, grid.reshape(-1, 3)[pick], pick // W)
    assert np.array_equal(got, want[pick])
    assert not np.array_equal(rotate_per_row(np.transpose(R_cw, (0, 2, 1)), grid.reshape(-1, 3)[pick], pick // W),
                              want[pick])                     # the transpose matters (the test can fail)


@pytest.mark.parametrize("finite", [False, True])
def test_camera_z_at_matches_plain_two_d_indexing(finite):
    rng = np.random.default_rng(5)
    H, W = 9, 13
    z = rng.uniform(1.0, 5.0, (H, W)).astype(np.float32)
    z[2, 3] = np.nan
    ids = rng.integers(1, 3, (H, W)).astype(np.uint32)
    u, v = rng.uniform(-1.0, W, 200), rng.uniform(-1.0, H, 200)
    if not finite:                      # a NaN coordinate samples the corner pixel (finite ones are used as they are)
        u[0] = np.nan
    obj = ids[np.clip(np.rint(np.nan_to_num(v)), 0, H - 1).astype(int), np.clip(np.rint(np.nan_to_num(u)), 0, W - 1)
              .astype(int)].astype(np.int64)
    got_z, got_id = camera_z_at(z, ids, u, v, obj)
    # the same rule written with 2-D indexing: bilinear in 1/z where all four corners show the object, else nearest
    uu, vv = np.nan_to_num(u), np.nan_to_num(v)
    u0, v0 = np.clip(np.floor(uu), 0, W - 2).astype(int), np.clip(np.floor(vv), 0, H - 2).astype(int)
    fu, fv = np.clip(uu - u0, 0, 1), np.clip(vv - v0, 0, 1)
    inv, same = np.zeros(u.size), np.ones(u.size, bool)
    for r, c, w in ((v0, u0, (1 - fu) * (1 - fv)), (v0, u0 + 1, fu * (1 - fv)), (v0 + 1, u0, (1 - fu) * fv),
                    (v0 + 1, u0 + 1, fu * fv)):
        same &= ids[r, c].astype(np.int64) == obj
        with np.errstate(divide="ignore", invalid="ignore"):
            inv += w / z[r, c].astype(np.float64)
    rn, cn = np.clip(np.rint(vv), 0, H - 1).astype(int), np.clip(np.rint(uu), 0, W - 1).astype(int)
    with np.errstate(divide="ignore", invalid="ignore"):
        want_z = np.where(same, 1.0 / inv, z[rn, cn].astype(np.float64))
    assert got_z.tobytes() == want_z.tobytes()
    assert np.array_equal(got_id, ids[rn, cn].astype(np.int64))
    assert same.any() and not same.all()            # both branches are exercised


def test_event_points_are_the_plain_formulas_and_kept_only_for_read_only_events():
    rng = np.random.default_rng(11)
    H, W = 6, 8
    K = np.array([[50.0, 0.0, 3.5], [0.0, 50.0, 2.5], [0.0, 0.0, 1.0]])
    z = rng.uniform(1.0, 9.0, (H, W)).astype(np.float32)
    z[1, 2] = np.nan
    T = _row_poses(rng, H)
    want_camera = image_rays(K, W, H) * z.astype(np.float64)[..., None]
    want_world = apply_rows_grid(T, want_camera)
    assert world_points(K, z, T).tobytes() == want_world.tobytes()        # writeable: formed each time, not kept
    assert world_points(K, z, T) is not world_points(K, z, T)
    z.flags.writeable = False
    T.flags.writeable = False
    world = world_points(K, z, T)
    assert world.tobytes() == want_world.tobytes() and not world.flags.writeable
    assert world_points(K, z, T) is world and camera_points(K, z, T).tobytes() == want_camera.tobytes()
    K2 = K.copy()
    K2[0, 0] = 60.0                                   # another camera or other row poses: formed again, not reused
    assert world_points(K2, z, T).tobytes() == apply_rows_grid(T, image_rays(K2, W, H) * z[..., None]).tobytes()
    T2 = T.copy()
    T2[:, 0, 3] += 1.0
    assert world_points(K, z, T2).tobytes() == apply_rows_grid(T2, want_camera).tobytes()


def test_blockwise_gives_the_bits_of_one_call():
    rng = np.random.default_rng(13)
    H, N = 30, 1000
    T = _row_poses(rng, H)
    X, rows, frac = rng.normal(scale=30.0, size=(N, 3)), rng.integers(0, H, N), rng.random(N)
    want = apply_per_row(T, X, rows, frac)
    for block in (7, 256, N, 4 * N):             # ragged last block, one block, fewer points than a block
        got = blockwise(lambda x, r, f: apply_per_row(T, x, r, f), X, rows, frac, block=block)
        assert got.tobytes() == want.tobytes()
    z = rng.uniform(1.0, 5.0, (H, 40)).astype(np.float32)
    ids = rng.integers(1, 3, (H, 40)).astype(np.uint32)
    u, v, obj = rng.uniform(-1, 40, N), rng.uniform(-1, H, N), rng.integers(1, 3, N)
    got = blockwise(lambda a, b, o: camera_z_at(z, ids, a, b, o), u, v, obj, block=100)     # a tuple of arrays
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got, camera_z_at(z, ids, u, v, obj), strict=True))
