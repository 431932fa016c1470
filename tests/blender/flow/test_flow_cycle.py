"""flow_cycle_consistency on synthetic flow fields with closed-form truth (Blender-free): exact where the flow is
smooth, not fooled by a fold (a skinned hinge, triangle edges) or an occlusion edge, and a wrong return flow fails."""
from __future__ import annotations

import numpy as np
import pytest

from rowbeam.check.flow_checks import _check_cycle, cycle_residuals, non_smooth
from rowbeam.model import qa_profile as tol

H, W = 12, 48
K = np.array([[50.0, 0.0, W / 2 - 0.5], [0.0, 50.0, H / 2 - 0.5], [0.0, 0.0, 1.0]])


def _event(ids):
    """Endpoint arrays of a fronto-parallel plane at z = 5 m seen by a static camera; `ids` (H, W) instance ids."""
    n = np.zeros((H, W, 3), np.float32)
    n[..., 2] = -1.0
    return {"instance_id": ids.astype(np.int32), "normal_geometric": n, "camera_z": np.full((H, W), 5.0, np.float32),
            "row_T_world_camera": np.repeat(np.eye(4)[None], H, axis=0), "valid": np.ones((H, W), np.uint8)}


def _hinge(kink_u=20.5, offset=0.25, k=0.25):
    """Forward u -> u + offset left of the fold at source u = kink_u, u -> kink_u + offset + (u - kink_u) k right of it
    (a strip folding at a hinge: piecewise affine, continuous); backward is its exact inverse where it exists."""
    u = np.arange(W, dtype=np.float64)[None, :].repeat(H, 0)
    q = np.where(u < kink_u, u + offset, kink_u + offset + (u - kink_u) * k)
    kink_q = kink_u + offset
    p = np.where(u < kink_q, u - offset, kink_u + (u - kink_q) / k)
    fwd = np.stack([q - u, np.zeros_like(u)], -1).astype(np.float32)
    bwd = np.stack([p - u, np.zeros_like(u)], -1).astype(np.float32)
    vis_f = (q >= 0) & (q <= W - 1)
    vis_b = (p >= 0) & (p <= W - 1)
    return {"flow_forward": fwd, "flow_backward": bwd, "flow_forward_dest_visible": vis_f.astype(np.uint8),
            "flow_backward_dest_visible": vis_b.astype(np.uint8)}


def _run(arrays, src, dst):
    got = {}
    _check_cycle(K, arrays, src, dst, lambda name, ok, msg, **kw: got.setdefault(name, (ok, msg, kw)))
    return got["flow_cycle_consistency"]


def test_bilinear_return_across_a_fold_is_not_exact():
    """The closed form: bilinear interpolation of the exact inverse across the fold misses by up to
    o (0.5 - o) (1/k - 1) px; here more than the tolerance (the reason the fold is not compared)."""
    a = _hinge()
    ids = np.ones((H, W))
    every = {**a}
    err, _ = cycle_residuals(every, _event(ids), _event(ids))      # K None: no plane key
    assert err.size > 0
    folded = non_smooth(a["flow_forward"], ids, a["flow_forward_dest_visible"].astype(bool))
    assert folded.any() and not folded[:, :15].any() and not folded[:, 26:].any()


def test_fold_is_not_compared_and_the_rest_is_exact():
    a, ids = _hinge(), np.ones((H, W))
    ok, msg, values = _run(a, _event(ids), _event(ids))
    assert ok, msg
    assert values["worst_px"] < 1e-5 and values["non_smooth_pixels"] > 0 and values["pixels"] > 20 * H


def test_fold_compared_anyway_fails(monkeypatch):
    """Without the fold exclusion (a kink threshold no fold exceeds) the correct hinge flow fails: what the exclusion
    is for."""
    monkeypatch.setattr(tol, "FLOW_CYCLE_KINK_PX", 1e9)
    ok, _, values = _run(_hinge(), _event(np.ones((H, W))), _event(np.ones((H, W))))
    assert not ok and values["worst_px"] > tol.FLOW_CYCLE_TOL_PX


@pytest.mark.parametrize("shift", [0.3, -0.15, 0.11])
def test_wrong_return_flow_fails_beside_a_fold(shift):
    """A return flow off by `shift` px (> 0.1) everywhere: the smooth pixels catch it, the fold does not hide it."""
    a = _hinge()
    a["flow_backward"] = a["flow_backward"] + np.array([shift, 0.0], np.float32)
    ok, _, values = _run(a, _event(np.ones((H, W))), _event(np.ones((H, W))))
    assert not ok and values["worst_px"] == pytest.approx(abs(shift), abs=1e-4)


def test_wrong_return_flow_of_0_09_px_passes_and_1_px_fails():
    """The tolerance itself: 0.09 px passes, 1.0 px fails (a tolerance widened 10x would pass it)."""
    ids = np.ones((H, W))
    for shift, want in ((0.09, True), (1.0, False)):
        a = _hinge()
        a["flow_backward"] = a["flow_backward"] + np.array([0.0, shift], np.float32)
        assert _run(a, _event(ids), _event(ids))[0] is want, shift


def _occlusion():
    """Object 1 static (u < 20 in the source); object 2 (u >= 20) moves 3 px left and covers u 17..19 of object 1 in
    the destination. Every flow exact; the occluded source pixels are not forward-visible."""
    src_ids = np.where(np.arange(W) < 20, 1, 2)[None, :].repeat(H, 0)
    dst_ids = np.where(np.arange(W) < 17, 1, 2)[None, :].repeat(H, 0)
    fwd = np.zeros((H, W, 2), np.float32)
    fwd[src_ids == 2, 0] = -3.0
    bwd = np.zeros((H, W, 2), np.float32)
    bwd[dst_ids == 2, 0] = 3.0
    u = np.arange(W)[None, :].repeat(H, 0)
    vis_f = (src_ids == 2) | (u < 17)
    vis_b = ((dst_ids == 2) & (u + 3 <= W - 1)) | (dst_ids == 1)
    return ({"flow_forward": fwd, "flow_backward": bwd, "flow_forward_dest_visible": vis_f.astype(np.uint8),
             "flow_backward_dest_visible": vis_b.astype(np.uint8)}, _event(src_ids), _event(dst_ids))


def test_occlusion_edge_is_compared_exactly():
    """An occlusion edge is no fold: no pixel is left out for smoothness, the round trip is exact beside it."""
    a, src, dst = _occlusion()
    assert not non_smooth(a["flow_forward"], src["instance_id"], a["flow_forward_dest_visible"].astype(bool)).any()
    ok, msg, values = _run(a, src, dst)
    assert ok and values["non_smooth_pixels"] == 0 and values["worst_px"] == 0.0, msg
    _, pixels = cycle_residuals(a, src, dst, K)
    assert pixels[:, 15].all() and pixels[:, 20].all()               # the pixels beside both edges take part
    b = a["flow_backward"].copy()
    b[dst["instance_id"] == 2, 0] += 0.5                              # the occluder's return flow wrong
    a["flow_backward"] = b
    assert not _run(a, src, dst)[0]


def _zoom(s=1.4515):
    """Forward flow of a zoom by `s` about the image centre (linear: no fold anywhere); backward its inverse."""
    c = np.array([(W - 1) / 2, (H - 1) / 2])
    v, u = np.mgrid[0:H, 0:W].astype(np.float64)
    p = np.stack([u, v], -1)
    q = c + s * (p - c)
    back = c + (p - c) / s
    inside = lambda x: (x[..., 0] >= -0.5) & (x[..., 0] < W - 0.5) & (x[..., 1] >= -0.5) & (x[..., 1] < H - 0.5)  # noqa: E731
    return {"flow_forward": (q - p).astype(np.float32), "flow_backward": (back - p).astype(np.float32),
            "flow_forward_dest_visible": inside(q).astype(np.uint8),
            "flow_backward_dest_visible": inside(back).astype(np.uint8)}, q


def test_landing_beyond_the_outer_pixel_centres_is_not_compared():
    """A 1.4515x zoom: columns 7 and 40 land 0.45 px beyond the outer pixel centres (toward the image edge), where
    bilinear interpolation would hold the edge value (off by the flow's gradient x 0.45 = 0.14 px); they are left
    out and every compared pixel returns exactly."""
    a, q = _zoom()
    ids = np.ones((H, W))
    ok, msg, values = _run(a, _event(ids), _event(ids))
    assert ok and values["worst_px"] < 1e-5 and values["non_smooth_pixels"] == 0, msg
    _, pixels = cycle_residuals(a, _event(ids), _event(ids), K)
    beyond = (q[..., 0] > W - 1) | (q[..., 0] < 0) | (q[..., 1] > H - 1) | (q[..., 1] < 0)
    assert (beyond & (a["flow_forward_dest_visible"] == 1)).any() and not (pixels & beyond).any()


def _hinge_compressed_left(kink_u=20.5, kink_q=20.9, k_left=0.25):
    """Forward slope 1/4 left of the fold (a strip folding toward the camera ray), 1 right of it: source pixels two
    columns left of the fold land in the destination cell that straddles it."""
    u = np.arange(W, dtype=np.float64)[None, :].repeat(H, 0)
    q = np.where(u < kink_u, kink_q + (u - kink_u) * k_left, kink_q + (u - kink_u))
    p = np.where(u < kink_q, kink_u + (u - kink_q) / k_left, kink_u + (u - kink_q))
    fwd = np.stack([q - u, np.zeros_like(u)], -1).astype(np.float32)
    bwd = np.stack([p - u, np.zeros_like(u)], -1).astype(np.float32)
    return {"flow_forward": fwd, "flow_backward": bwd,
            "flow_forward_dest_visible": ((q >= 0) & (q <= W - 1)).astype(np.uint8),
            "flow_backward_dest_visible": ((p >= 0) & (p <= W - 1)).astype(np.uint8)}


def test_fold_neighbourhood_reaches_landings_beside_the_fold(monkeypatch):
    """Source column 19's own stencil (18, 19, 20) is straight, but it lands at 20.525 in the cell (20, 21) that
    straddles the destination fold at 20.9 (bilinear off by 0.1 x 3 x 0.525 = 0.16 px): the fold's neighbourhood
    must reach it."""
    a, ids = _hinge_compressed_left(), np.ones((H, W))
    ok, msg, values = _run(a, _event(ids), _event(ids))
    assert ok and values["worst_px"] < 0.01, msg
    folded = non_smooth(a["flow_forward"], ids, a["flow_forward_dest_visible"].astype(bool))
    assert folded[:, 19].all()
    monkeypatch.setattr(tol, "FLOW_CYCLE_KINK_REACH_PX", 0)             # the fold's own stencils only
    ok, _, values = _run(a, _event(ids), _event(ids))
    assert not ok and values["worst_px"] > tol.FLOW_CYCLE_TOL_PX


def test_objects_moving_apart_are_no_fold():
    """Object 1 (u < 20) static, object 2 (u >= 20) moving 2 px right, both fully visible: the flow jumps by 2 px
    between u = 19 and 20, an object boundary, not a fold; no pixel is left out and the round trip is exact."""
    src_ids = np.where(np.arange(W) < 20, 1, 2)[None, :].repeat(H, 0)
    dst_ids = np.select([np.arange(W) < 20, np.arange(W) < 22], [1, 3], 2)[None, :].repeat(H, 0)
    u = np.arange(W)[None, :].repeat(H, 0)
    fwd = np.zeros((H, W, 2), np.float32)
    fwd[src_ids == 2, 0] = 2.0
    bwd = np.zeros((H, W, 2), np.float32)
    bwd[dst_ids == 2, 0] = -2.0
    a = {"flow_forward": fwd, "flow_backward": bwd,
         "flow_forward_dest_visible": ((src_ids == 1) | (u + 2 <= W - 1)).astype(np.uint8),
         "flow_backward_dest_visible": (dst_ids != 3).astype(np.uint8)}
    src, dst = _event(src_ids), _event(dst_ids)
    assert not non_smooth(a["flow_forward"], src["instance_id"], a["flow_forward_dest_visible"].astype(bool)).any()
    ok, msg, values = _run(a, src, dst)
    assert ok and values["non_smooth_pixels"] == 0 and values["worst_px"] == 0.0, msg
