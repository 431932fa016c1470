"""Visual QA report: the overlays and statistics against numeric fixtures (no Blender): colour map order,
PNG bytes read back by an independent decoder (OpenCV), the flow wheel, a LiDAR return projected into the
time-matched camera row landing at its closed-form pixel, the forward-warp residual, the timing band, the
residual quantiles and the baseline drift rule."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from rowbeam.report import colour, overlays, png, stats
from rowbeam.model.timing import RollingShutterTiming


def test_colour_map_is_ordered_by_luminance_and_colourise_keeps_the_order():
    table = colour.VIRIDIS
    assert np.all(np.diff(colour.luminance(table)) > 0)               # the anchors: strictly brighter
    values = np.linspace(2.0, 50.0, 400)
    lum = colour.luminance(colour.colourise(values[None], 2.0, 50.0)[0])
    assert np.all(np.diff(lum) >= -0.5)                               # 8-bit rounding only
    assert lum[-1] - lum[0] > 150
    lum_log = colour.luminance(colour.colourise(values[None], 2.0, 50.0, log=True)[0])
    assert np.all(np.diff(lum_log) >= -0.5)
    # log spreads the near values: 2..5 m covers more of the bar in log than linear
    assert lum_log[np.searchsorted(values, 5.0)] - lum_log[0] > 3 * (lum[np.searchsorted(values, 5.0)] - lum[0])
    nan = colour.colourise(np.array([[np.nan, 3.0]]), 2.0, 50.0)
    assert (nan[0, 0] == colour.NO_DATA).all() and not (nan[0, 1] == colour.NO_DATA).all()


def test_png_bytes_decode_identically_with_opencv():
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, (7, 13, 3), dtype=np.uint8)
    data = png.encode_png(img)
    back = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)[..., ::-1]   # BGR -> RGB
    assert np.array_equal(back, img)
    rgba = rng.integers(0, 256, (5, 4, 4), dtype=np.uint8)
    back = cv2.imdecode(np.frombuffer(png.encode_png(rgba), np.uint8), cv2.IMREAD_UNCHANGED)
    assert np.array_equal(back[..., [2, 1, 0, 3]], rgba)
    thumb = png.thumbnail(np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3), 4)
    assert thumb.shape == (4, 4, 3) and thumb[0, 0, 0] == np.rint(np.mean([0, 3, 24, 27]))


def test_flow_wheel_directions_and_magnitude():
    f = np.array([[[4.0, 0.0], [0.0, 4.0], [-4.0, 0.0], [0.0, -4.0], [0.0, 0.0], [np.nan, 1.0]]])
    c = colour.flow_colour(f, 4.0).astype(int)[0]
    assert tuple(c[4]) == (255, 255, 255)                             # no motion: white
    assert (c[5] == colour.NO_DATA).all()                             # undefined
    assert c[0][0] == 255 and c[0][1] < 60 and c[0][2] < 60           # right: red (Middlebury)
    assert c[2][2] > 200 and c[2][0] < 60                             # left: cyan/blue side
    half = colour.flow_colour(np.array([[[2.0, 0.0]]]), 4.0).astype(int)[0, 0]
    assert c[0][1] < half[1] < 255                                    # half magnitude: desaturated toward white


def test_draw_points_puts_u_in_the_column_and_v_in_the_row():
    img = np.zeros((10, 20, 3), dtype=np.uint8)
    colour.draw_points(img, np.array([[15.2, 3.4], [-1, 2], [25, 3]]), (255, 0, 0))
    hit = np.argwhere(img[..., 0] == 255)
    assert hit.tolist() == [[3, 15]]


def _synthetic_pair(H=40, W=60, z_plane=10.0):
    """A static camera looking along +x of the world at a wall 10 m away (camera_z = 10 m everywhere) and one
    LiDAR return on the wall at closed-form pixel (u, v) = (41, 13), fired at the time of row 13."""
    K = np.array([[50.0, 0, (W - 1) / 2], [0, 50.0, (H - 1) / 2], [0, 0, 1]])
    T_wc = np.eye(4)
    T_wc[:3, :3] = np.array([[0, 0, 1], [-1, 0, 0], [0, -1, 0]], float)   # camera z = world x, camera x = -world y
    timing = RollingShutterTiming(0, 12_000_000, 4_000_000, H, "top_to_bottom")
    row_t = np.array(timing.row_reference_times_ns())
    cam_arrays = {"row_time_ns": row_t, "row_T_world_camera": np.repeat(T_wc[None], H, 0),
                  "camera_z": np.full((H, W), z_plane, np.float32), "valid": np.ones((H, W), np.uint8),
                  "instance_id": np.full((H, W), 1, np.uint32),
                  "normal_geometric": np.tile(np.array([0, 0, -1], np.float32), (H, W, 1))}
    cam_manifest = {"sensor": {"id": "cam"}, "event": {"index": 0}, "calibration": {"K": K.tolist()},
                    "objects": [{"id": 77, "render_index": 1}]}
    u, v = 41.0, 13.0
    x_c = np.array([(u - K[0, 2]) / 50.0 * z_plane, (v - K[1, 2]) / 50.0 * z_plane, z_plane])
    p_w = T_wc[:3, :3] @ x_c + T_wc[:3, 3]
    dtype = [("t_ns", "<i8"), ("x_world", "<f8"), ("y_world", "<f8"), ("z_world", "<f8"), ("instance_id", "<u4")]
    pts = np.array([(row_t[13] + 1000, *p_w, 5), (row_t[0] + 5_000_000, *p_w, 5)], dtype=dtype)
    lidar_manifest = {"objects": [{"id": 77, "render_index": 5, "motion": "static"}]}
    return lidar_manifest, {"points": pts}, cam_manifest, cam_arrays


def test_lidar_return_lands_at_its_closed_form_pixel_in_the_overlay():
    lm, la, cm, ca = _synthetic_pair()
    base = np.zeros((40, 60, 3), np.uint8)
    out = overlays.lidar_in_camera(lm, la, cm, ca, base)
    assert out["pairs"] == 1                                    # the second return is 5 ms off its row: not paired
    for name in ("residual", "skew"):
        changed = np.argwhere((out[name] != 0).any(-1))
        assert [13, 41] in changed.tolist(), name
    p = out["pairs_data"]
    assert abs(p["residual_m"][0]) < 1e-9 and p["skew_ns"][0] == 1000
    ok_pixel = out["skew"][13, 41]
    assert not (ok_pixel == (150, 150, 150)).all()             # coloured, not the grey of unpaired returns


def test_warp_residual_is_zero_for_a_pure_shift_and_not_for_the_wrong_sign():
    H, W = 30, 40
    v, u = np.mgrid[0:H, 0:W].astype(float)
    shift = np.array([3.25, -1.5])
    src = np.stack([0.01 * u + 0.02 * v, 0.5 + 0.003 * u, 0.2 - 0.004 * v], -1)      # linear: bilinear is exact
    dst = np.stack([0.01 * (u - shift[0]) + 0.02 * (v - shift[1]), 0.5 + 0.003 * (u - shift[0]),
                    0.2 - 0.004 * (v - shift[1])], -1)
    flow = np.broadcast_to(shift, (H, W, 2)).copy()
    mask = np.ones((H, W), bool)
    r = overlays.warp_residual(src, dst, flow, mask)
    inside = np.isfinite(r)
    assert inside.sum() > 0.8 * H * W and np.nanmax(r) < 1e-12
    assert np.nanmin(overlays.warp_residual(src, dst, -flow, mask)) > 0.015     # 2 x shift of the gradients
    mask[5, 5] = False
    assert np.isnan(overlays.warp_residual(src, dst, flow, mask)[5, 5])


@pytest.mark.parametrize("direction", ["top_to_bottom", "bottom_to_top"])
def test_timing_band_row_time_moves_with_the_readout_direction(direction):
    H = 24
    t = np.array(RollingShutterTiming(0, 12_000_000, 4_000_000, H, direction).row_reference_times_ns())
    img, leg = overlays.timing_band(t, 4_000_000, width=200)
    dark = np.array([np.flatnonzero((row == (10, 40, 160)).all(-1))[0] for row in img])
    steps = np.diff(dark)
    assert (steps >= 0).all() if direction == "top_to_bottom" else (steps <= 0).all()
    assert abs(dark[0] - dark[-1]) > 100
    assert leg["t0_ns"] == int(t.min()) - 2_000_000 and leg["t1_ns"] == int(t.max()) + 2_000_000
    # exposure window: 4 ms of a 16 ms span = a quarter of the width, centred on the reference time
    light = ((img[H // 2] == (170, 200, 255)).all(-1) | (img[H // 2] == (10, 40, 160)).all(-1)).sum()
    assert abs(light - 200 * 4 / 16) <= 3


def test_residual_quantiles_histogram_and_slices():
    r = stats.Residuals()
    v = np.arange(1, 101, dtype=float) * 1e-3
    dist = np.where(np.arange(100) < 50, 3.0, 30.0)
    r.add("x", "m", v, "test", distance=dist, klass=np.array(["car"] * 30 + ["road"] * 70))
    s = r.summary()["x"]
    assert s["count"] == 100 and s["quantiles"]["max"] == pytest.approx(0.1)
    assert s["quantiles"]["p50"] == pytest.approx(np.quantile(v, 0.5))
    assert sum(s["histogram"]["counts"]) == 100
    by_d = {b["bin"]: b for b in s["slices"]["distance"]}
    assert by_d["0–5 m"]["count"] == 50 and by_d["0–5 m"]["quantiles"]["max"] == pytest.approx(0.05)
    assert by_d["20–40 m"]["quantiles"]["p50"] == pytest.approx(np.quantile(v[50:], 0.5))
    assert {b["bin"]: b["count"] for b in s["slices"]["class"]} == {"car": 30, "road": 70}


def test_semantic_image_colours_each_id_as_its_legend_with_and_without_void():
    for s in (np.array([[0, 1, 2, 25]], np.uint32), np.array([[0, 1, 0xFFFFFFFF, 7]], np.uint32)):
        img = overlays.semantic_image(s)
        assert [tuple(c) for c in img[0]] == [overlays.semantic_colour(int(i)) for i in s[0]]
        assert tuple(img[0, 0]) == (0, 0, 0) and len({tuple(c) for c in img[0]}) == 4
    assert tuple(overlays.semantic_image(np.array([[0xFFFFFFFF]], np.uint32))[0, 0]) == (255, 255, 255)


def test_finite_on_sees_a_single_non_finite_channel_inside_the_mask_only():
    from rowbeam.report.build import _finite_on

    mask = np.ones((4, 5), bool)
    mask[0, 0] = False
    z, n = np.ones((4, 5), np.float32), np.ones((4, 5, 3), np.float32)
    z[0, 0], n[0, 0, 1] = np.nan, np.inf                  # outside the mask: ignored
    assert _finite_on(mask, [z, n])
    for bad in (np.nan, np.inf, -np.inf):
        n2 = n.copy()
        n2[3, 4, 2] = bad
        assert not _finite_on(mask, [z, n2]) and not _finite_on(mask, [np.where(mask, bad, z)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_percentiles_are_numpys_float64_percentiles(dtype):
    """colour.percentiles selects in the values' own dtype and must give np.percentile's float64 numbers exactly."""
    rng = np.random.default_rng(7)
    q = [0.0, 1.0, 37.3, 50.0, 99.0, 99.9, 100.0]
    for n in (1, 2, 3, 10, 101, 1000, 54321):
        v = (rng.lognormal(1.0, 2.0, n) * (1000 if dtype == np.int32 else 1)).astype(dtype)
        assert np.array_equal(colour.percentiles(v, q), np.percentile(v.astype(np.float64), q)), n


def test_residual_at_the_sampled_pixels_has_the_distribution_of_every_pixel():
    """A residual computed at sample_pixels(mask) only and added with count= summarises exactly as the same residual
    added at every mask pixel (more pixels than the per-event cap, so a subset is kept)."""
    rng = np.random.default_rng(3)
    H, W = 400, 300
    img, dist = rng.gamma(2.0, 1e-3, (H, W)), rng.uniform(0, 100, (H, W))
    mask = rng.random((H, W)) < 0.9
    assert mask.sum() > stats.MAX_SAMPLES_PER_EVENT
    full, sampled = stats.Residuals(), stats.Residuals()
    full.add("r", "m", img[mask], "test", distance=dist[mask])
    pix, count = stats.sample_pixels(mask)
    assert count == mask.sum() and len(pix) <= stats.MAX_SAMPLES_PER_EVENT and mask.ravel()[pix].all()
    sampled.add("r", "m", img.ravel()[pix], "test", distance=dist.ravel()[pix], count=count)
    assert sampled.summary() == full.summary()


@pytest.mark.parametrize("values", [[5.0, 5.0, 5.0], [1.0, 1.0 + 1e-9], [2.0, 2.0 * (1 + 1e-5)], [0.0, 3.0, 3.0]])
def test_histogram_of_nearly_equal_values_has_increasing_edges_and_counts_every_value(values):
    h = stats.histogram(np.array(values))
    assert np.all(np.diff(h["edges"]) > 0)
    assert sum(h["counts"]) + h["zeros"] == len(values)
    assert h["edges"][0] <= min(v for v in values if v > 0) <= max(values) <= h["edges"][-1]


def test_drift_flags_only_beyond_the_declared_thresholds():
    def doc(p99, invalid):
        return {"residuals": {"z": {"unit": "m", "quantiles": {"p50": 1e-4, "p90": 1e-4, "p99": p99, "max": p99}}},
                "statistics": {"camera_invalid_rate": invalid, "counts": {"events": 3, "flows": 1, "quarantined": 0}}}
    base = doc(1e-3, 0.20)
    assert stats.drift(doc(1.2e-3, 0.22), base)["status"] == "ok"        # within 1.5x + 1e-4 m, within 0.05
    d = stats.drift(doc(3e-3, 0.20), base)
    assert d["status"] == "drift" and {i["what"] for i in d["items"] if i["flagged"]} == {"residual z p99 (m)",
                                                                                          "residual z max (m)"}
    assert stats.drift(doc(1e-3, 0.30), base)["flagged"] == 1


def test_id_colours_follow_the_stable_id_and_classes_are_distinct():
    a = overlays.id_image(np.array([[0, 1, 2]], np.uint32), [{"render_index": 1, "id": 2**62 + 5},
                                                            {"render_index": 2, "id": 7}])
    b = overlays.id_image(np.array([[2, 1]], np.uint32), [{"render_index": 2, "id": 2**62 + 5},
                                                         {"render_index": 1, "id": 7}])
    assert (a[0, 0] == 0).all()                                       # background
    assert (a[0, 1] == b[0, 0]).all() and (a[0, 2] == b[0, 1]).all()  # same object, same colour in both events
    sem = overlays.semantic_image(np.array([list(range(0, 10)) + [0xFFFFFFFF]], np.uint32))[0]
    assert (sem[0] == 0).all() and (sem[-1] == 255).all()
    assert len({tuple(c) for c in sem[1:10]}) == 9


def test_velocity_colour_sign_zero_clip_and_nan():
    c = colour.velocity_colour(np.array([-10.0, -5.0, 0.0, 5.0, 10.0, 25.0, np.nan]), 10.0).astype(int)
    assert tuple(c[0]) == (33, 102, 172) and tuple(c[4]) == (178, 24, 43)     # the map's ends at -v_max / +v_max
    assert c[1][2] > c[1][0] + 50 and c[3][0] > c[3][2] + 50                  # approaching blue, receding red
    assert tuple(c[2]) == (247, 247, 247) and (c[5] == c[4]).all()             # zero near white; clipped beyond
    assert (c[6] == colour.NO_DATA).all()
    bar = colour.velocity_bar(64, 2)
    assert bar[0, 0, 2] > bar[0, 0, 0] and bar[0, -1, 0] > bar[0, -1, 2]       # blue left, red right


def _radar_frame():
    """2 chirps x 3 beams (azimuths +30, 0, -30 deg): beam 0 at 20 m approaching at 5 m/s, beam 2 at 50 m receding
    at 5 m/s (chirp 1), the rest no return."""
    rng = np.zeros((2, 3), np.float32)
    vr = np.zeros((2, 3), np.float32)
    valid = np.zeros((2, 3), np.uint8)
    rng[0, 0], vr[0, 0], valid[0, 0] = 20.0, -5.0, 1
    rng[1, 2], vr[1, 2], valid[1, 2] = 50.0, 5.0, 1
    return rng, np.array([30.0, 0.0, -30.0]), vr, valid


def test_range_azimuth_puts_left_azimuth_left_near_range_low_and_colours_by_velocity():
    rng, az, vr, valid = _radar_frame()
    img, leg = overlays.radar_range_azimuth(rng, az, vr, valid, r_max=60.0, v_max=10.0, n_range=60, col_px=4)
    assert img.shape == (60, 12, 3) and leg["azimuths_deg"] == [30.0, 0.0, -30.0]
    blue, red = colour.velocity_colour(np.array([-5.0, 5.0]), 10.0)
    assert (img[59 - 20, 0:4] == blue).all()                  # +30 deg (left of the sensor): left column; 20 m row 39
    assert (img[59 - 50, 8:12] == red).all()                  # -30 deg: right column; 50 m: row 9 (far = up)
    others = np.ones((60, 12), bool)
    others[39, 0:4] = others[9, 8:12] = False
    assert (img[others] == 255).all()                         # every other cell empty (white)


def test_range_doppler_bins_range_and_velocity():
    rng, _, vr, valid = _radar_frame()
    img, leg = overlays.radar_range_doppler(rng, vr, valid, r_max=60.0, v_max=10.0, n_range=60, n_velocity=20)
    filled = {tuple(x) for x in np.argwhere((img != colour.NO_DATA).any(-1))}
    assert filled == {(39, 5), (9, 15)}                       # -5 m/s: column (−5 + 10) / 20 * 20 = 5; +5: 15
    assert leg["log"] and leg["lo"] == 1.0


def _radar_setup():
    """The static camera of _synthetic_pair with its timing, and a 2-chirp radar frame: chirp 0 at row 13's time
    + 1 us, chirp 1 20 ms later (no camera row within 1 ms)."""
    _, _, cm, ca = _synthetic_pair()
    H = ca["camera_z"].shape[0]
    timing = RollingShutterTiming(0, 12_000_000, 4_000_000, H, "top_to_bottom")
    cm = {**cm, "sensor": {"id": "cam", "type": "rolling_shutter_camera", "object": "cam_obj"}, "sample_id": "s.cam.0",
          "event": {"index": 0, **timing.to_manifest()}}
    t13 = int(ca["row_time_ns"][13])
    period = 20_000_000
    radar_m = {"sensor": {"id": "radar", "type": "radar", "object": "radar_obj"}, "sample_id": "s.radar.0",
               "event": {"index": 0, "timing_model": "rowbeam.radar@1", "frame_start_ns": t13 + 1000 - period // 2,
                         "chirp_offset_ns": 0, "chirp_period_ns": period, "chirps": 2}}
    return cm, ca, radar_m, t13, period


RADAR_POINT = [("t_ns", "<i8"), ("chirp", "<u4"), ("x_world", "<f8"), ("y_world", "<f8"), ("z_world", "<f8"),
               ("radial_velocity", "<f8")]


def _on_the_wall(cm, ca, x, y, z=10.0):
    """World point at camera-frame (x z, y z, z) (x, y normalised coordinates) of the static camera."""
    T_wc = ca["row_T_world_camera"][0]
    return T_wc[:3, :3] @ np.array([x * z, y * z, z]) + T_wc[:3, 3]


def test_radar_return_lands_at_its_closed_form_pixel_in_the_time_matched_row():
    """Chirp 0's return on the wall is drawn at the closed-form pixel (41, 13) in the colour of -5 m/s; chirp 1
    pairs with no row: its return (pixel (10, 30)) is grey."""
    cm, ca, radar_m, t13, period = _radar_setup()
    H, W = ca["camera_z"].shape
    K = np.array(cm["calibration"]["K"])
    wall = lambda u, v: _on_the_wall(cm, ca, (u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1])  # noqa: E731
    pts = np.array([(t13 + 1000, 0, *wall(41, 13), -5.0), (t13 + 1000 + period, 1, *wall(10, 30), 5.0)],
                   dtype=RADAR_POINT)
    base = np.zeros((H, W, 3), np.uint8)
    out = overlays.radar_in_camera(radar_m, pts, cm, ca, base, v_max=10.0)
    assert out["chirp_row"] == {0: 13} and out["matched"] == 1
    assert np.allclose(out["uv"][0], [41, 13], atol=1e-9) and np.isnan(out["uv"][1]).all()
    blue = colour.velocity_colour(np.array(-5.0), 10.0)
    assert (out["image"][12:15, 40:43] == blue).all()                # a 3 x 3 square centred on (41, 13)
    assert (out["image"][30, 10] == 150).all()                         # the unpaired chirp's return: grey
    assert int((out["image"] != 0).any(-1).sum()) == 10                # nothing else drawn
    red = overlays.radar_in_camera(radar_m, np.array([(t13 + 1000, 0, *wall(41, 13), 5.0)], dtype=RADAR_POINT), cm,
                                   ca, base, v_max=10.0)["image"][13, 41]
    assert red[0] > red[2] + 50                                        # receding: red


def test_radar_return_is_projected_through_the_cameras_lens():
    """Same frame, camera with OpenCV radial distortion k1 = -0.25: the return at normalised (x, y) lands at
    u = f x (1 + k1 r^2) + c_x, v = f y (1 + k1 r^2) + c_y (Brown-Conrady, written out here), not at the pinhole
    pixel f x + c_x (2.9 px away)."""
    cm, ca, radar_m, t13, _ = _radar_setup()
    H, W = ca["camera_z"].shape
    K = np.array(cm["calibration"]["K"])
    k1 = -0.25
    cm = {**cm, "calibration": {"K": K.tolist(), "projection": "pinhole", "image_size_px": [W, H],
                                "distortion": {"model": "opencv", "coefficients": [k1, 0.0, 0.0, 0.0]}}}
    x, y = 0.55, -0.35
    pts = np.array([(t13 + 1000, 0, *_on_the_wall(cm, ca, x, y), -5.0)], dtype=RADAR_POINT)
    out = overlays.radar_in_camera(radar_m, pts, cm, ca, np.zeros((H, W, 3), np.uint8), v_max=10.0)
    radial = 1 + k1 * (x * x + y * y)
    expected = [K[0, 0] * x * radial + K[0, 2], K[1, 1] * y * radial + K[1, 2]]
    assert np.allclose(out["uv"][0], expected, atol=1e-6)
    assert abs(out["uv"][0][0] - (K[0, 0] * x + K[0, 2])) > 2.0      # the pinhole answer is far off
    u, v = np.rint(expected).astype(int)
    assert (out["image"][v, u] == colour.velocity_colour(np.array(-5.0), 10.0)).all()


def test_point_speed_is_static_zero_tracked_rigid_motion_else_nan():
    from rowbeam.report import motion
    from rowbeam.model.state_log import BodyTrack

    T = np.repeat(np.eye(4)[None], 2, 0)
    T[1, 0, 3] = 3.0
    track = BodyTrack([0, 1_000_000_000], T, np.array([[3.0, 0, 0], [3.0, 0, 0]]), np.array([[0, 0, 1.0]] * 2))
    objects = [{"render_index": 1, "motion": "static", "name": "wall"},
               {"render_index": 2, "motion": "moving", "name": "cart"},
               {"render_index": 3, "motion": "moving", "name": "untracked"}]
    ids = np.array([1, 2, 3, 0])
    P = np.array([[5.0, 5, 5], [1.5 + 1.0, 0, 0], [0, 0, 0], [0, 0, 0]])     # the cart's origin is at x = 1.5 at 0.5 s
    s = motion.point_speeds(objects, {"cart": track}, ids, P, 500_000_000)
    assert s[0] == 0.0
    assert s[1] == pytest.approx(np.sqrt(10.0))          # v + w x r = (3, 0, 0) + (0, 0, 1) x (1, 0, 0) = (3, 1, 0)
    assert np.isnan(s[2]) and np.isnan(s[3])             # moving without a track; background


def test_top_down_puts_forward_up_and_left_left():
    """x forward = up, y left = left: half width 10 m on 41 px (0.5 m/px, centre 20), (x, y) = (10, 5) m lands at
    pixel (u, v) = (10, 0) and (-4, -2) m at (24, 28); the sensor is a black 5 x 5 square at the centre."""
    cols = colour.velocity_colour(np.array([-5.0, 5.0]), 10.0)
    (img,), extent = overlays.top_down([np.array([[10.0, 5.0], [-4.0, -2.0]])], [cols], size=41, extent_m=10.0)
    assert extent == 10.0
    assert (img[0, 10] == cols[0]).all() and (img[28, 24] == cols[1]).all()
    assert (img[18:23, 18:23] == 0).all()
    drawn = (img != 255).any(-1)
    assert drawn.sum() == 2 + 25


def test_lidar_range_image_orders_channels_by_elevation_highest_on_top():
    F, elev = 24, [-10.0, 5.0, 0.0]
    rng = np.stack([np.full(F, 30.0), np.full(F, 5.0), np.full(F, 12.0)], -1)      # (F, C): channel c's range
    valid = np.ones((F, 3), np.uint8)
    valid[3, 2] = 0
    img, leg = overlays.lidar_range_image({"range": rng, "valid": valid}, elev)
    rep = round(F / (4 * 3))                                                      # rows per channel: 2
    assert img.shape == (3 * rep, F, 3)
    expect = colour.colourise(np.array([5.0, 12.0, 30.0]), leg["lo"], leg["hi"], log=True)
    for block, c in enumerate(expect):                                            # 5 deg, 0 deg, -10 deg
        rows = img[block * rep:(block + 1) * rep]
        ok = np.ones(F, bool)
        if block == 1:
            ok[3] = False
            assert (rows[:, 3] == colour.NO_DATA).all()                           # channel 2, firing 3: no return
        assert (rows[:, ok] == c).all()


def test_flag_levels_follow_the_nesting():
    names = ("source_valid", "correspondence_defined", "dest_in_bounds", "dest_visible")
    # pixel k (a column of 5) has the first k flags set
    a = {f"flow_forward_{n}": np.array([[1 if k > i else 0] for k in range(5)], np.uint8) for i, n in enumerate(names)}
    lv = overlays.flag_levels(a)
    assert lv[:, 0].tolist() == [0, 1, 2, 3, 4]
    img = overlays.flag_image(lv)
    assert [tuple(img[k, 0]) for k in range(5)] == [c for _, c in overlays.FLAG_LEVELS]


def test_object_axes_are_drawn_from_the_projected_origin_along_the_rotated_axes():
    """An object 10 m ahead, turned 90 deg about the camera's z: its x axis (1 m) points down the image (camera +y)
    and its y axis to the left (camera -x); f = 50 px: 5 px segments from the principal point (29.5, 19.5)."""
    K = np.array([[50.0, 0, 29.5], [0, 50.0, 19.5], [0, 0, 1]])
    T = np.eye(4)
    T[:3, :3] = [[0, -1, 0], [1, 0, 0], [0, 0, 1]]
    T[:3, 3] = [0, 0, 10.0]
    img = np.zeros((40, 60, 3), np.uint8)
    overlays.draw_axes(img, K, T, 1.0)
    red = np.argwhere((img == overlays.AXIS_COLOURS["x"]).all(-1))
    green = np.argwhere((img == overlays.AXIS_COLOURS["y"]).all(-1))
    assert set(red[:, 1]) <= {29, 30} and red[:, 0].max() == 24         # down to v = 19.5 + 5
    assert set(green[:, 0]) <= {19, 20} and green[:, 1].min() == 24     # left to u = 29.5 - 5


def test_sorted_quantiles_histogram_and_slices_are_numpys():
    """Read off one sorted array, the residual summary gives np.quantile's float64 numbers and np.histogram's counts
    (ties, a single value, duplicates on bin edges, NaN-free finite samples), and the class/distance slices (bins of
    key_bins) those of a boolean mask per bin (keys on the edges, beyond the last, NaN)."""
    rng = np.random.default_rng(11)
    for n in (1, 2, 3, 7, 100, 4321):
        for v in (rng.lognormal(-7.0, 2.0, n), rng.integers(0, 3, n).astype(np.float64) * 0.25):
            s = np.sort(v)
            assert np.array_equal(stats.sorted_quantiles(s, stats.QUANTILES), np.quantile(v, stats.QUANTILES)), n
            assert stats.describe(s, is_sorted=True) == stats.describe(v) == {"quantiles": {
                k: float(x) for k, x in zip(("p50", "p90", "p99", "max"), np.quantile(v, stats.QUANTILES), strict=True)}}
            h = stats.histogram(s, is_sorted=True)
            assert h == stats.histogram(v)
            signed = np.concatenate([v, [-1.5, -0.0, 0.0, np.nan, -np.inf]])       # negatives, both zeros, NaN last
            assert stats.histogram(np.sort(signed), is_sorted=True) == stats.histogram(signed)
            if h["edges"]:
                assert h["counts"] == np.histogram(v[v > 0], np.array(h["edges"]))[0].tolist()
            key, dist = rng.integers(0, 4, n), rng.uniform(-10, 100, n)
            dist[:7] = [0.0, 5.0, 10.0, 80.0, np.inf, np.nan, -0.0][:n]       # edges, beyond the last, no key
            for k, kind in ((key, "class"), (dist, "distance")):
                assert stats.slice_by(v, stats.key_bins(k, kind)) == _slices_by_masks(v, k, kind), (n, kind)


def _slices_by_masks(v, key, kind: str) -> list[dict]:
    """The slices by their definition: a boolean mask per bin [a, b) of the distance edges or per class id present,
    np.quantile of v there; empty bins left out."""
    if kind == "class":
        groups = [(str(lab), key == lab) for lab in np.unique(key)]
    else:
        e = stats.DISTANCE_BINS_M
        groups = [(lab, (key >= a) & (key < b)) for lab, a, b in zip(stats._bin_labels(e, "m"), e[:-1], e[1:], strict=True)]
    return [{"bin": lab, "count": int(m.sum()), "quantiles": {
        k: float(x) for k, x in zip(("p50", "p90", "p99", "max"), np.quantile(v[m], stats.QUANTILES), strict=True)}}
        for lab, m in groups if m.any()]


def test_normal_colour_with_the_known_finite_mask_is_the_tested_one():
    """normal_colour(n, finite=valid) = normal_colour(n) when n is finite exactly where valid (the checker's
    validity contract); NO_DATA exactly off valid."""
    rng = np.random.default_rng(5)
    n = rng.normal(size=(30, 40, 3)).astype(np.float32)
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    valid = rng.random((30, 40)) < 0.7
    n[~valid] = np.nan
    img = colour.normal_colour(n, finite=valid)
    assert np.array_equal(img, colour.normal_colour(n))
    assert (img[~valid] == colour.NO_DATA).all() and not (img[valid] == colour.NO_DATA).all(-1).any()


def test_percentiles_of_sorted_values_skip_the_sort():
    rng = np.random.default_rng(9)
    v = rng.normal(size=999).astype(np.float32)
    q = [1.0, 50.0, 99.0]
    assert np.array_equal(colour.percentiles(np.sort(v), q, is_sorted=True), np.percentile(v.astype(np.float64), q))
    assert colour.robust_range(np.sort(v), is_sorted=True) == colour.robust_range(v)


def _colourise_whole(values, lo, hi, log=False, mask=None):
    """The whole-image form of colour.colourise (one float64 copy of the image): the oracle of its blocks."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if log:
            lo, hi = np.log10(max(lo, 1e-12)), np.log10(max(hi, lo * (1 + 1e-9), 1e-12))
            t = np.log10(values, dtype=np.float64) - lo
        else:
            t = np.subtract(values, lo, dtype=np.float64)
        t *= 255.0 / (hi - lo) if hi > lo else 0.0
        ok = np.isfinite(t) if mask is None else np.isfinite(t) & mask
        index = np.rint(np.clip(t, 0.0, 255.0)).astype(np.uint16)
    index[~ok] = 256
    return np.take(colour._LUT_NO_DATA, index, axis=0)


@pytest.mark.parametrize("log", [False, True])
def test_colourise_by_blocks_is_the_whole_image_colourise(log):
    """More pixels than a block, a partial last block, NaN, ±inf, zero and negative values, a mask, ties at .5."""
    rng = np.random.default_rng(4)
    H, W = 301, 517
    assert H * W > 2 * colour.BLOCK and (H * W) % colour.BLOCK
    v = rng.lognormal(1.0, 1.5, (H, W)).astype(np.float32)
    v[rng.random((H, W)) < 0.05] = np.nan
    v[0, :5] = [np.inf, -np.inf, 0.0, -2.0, 1.5]
    mask = rng.random((H, W)) < 0.8
    for m in (None, mask):
        for lo, hi in ((0.5, 40.0), (3.0, 3.0)):
            assert np.array_equal(colour.colourise(v, lo, hi, log, m), _colourise_whole(v, lo, hi, log, m))
    ramp = np.arange(0, 256, 0.5)                     # 255 t lands on every .5 tie: rint's half-to-even
    assert np.array_equal(colour.colourise(ramp[None], 0.0, 255.0), _colourise_whole(ramp[None], 0.0, 255.0))


def test_normal_colour_by_blocks_is_the_whole_image_formula():
    rng = np.random.default_rng(6)
    n = rng.uniform(-1.2, 1.2, (257, 301, 3)).astype(np.float32)     # > one block, values outside [-1, 1] clipped
    n[rng.random((257, 301)) < 0.1] = np.nan
    ok = np.isfinite(n).all(-1)
    with np.errstate(invalid="ignore"):
        want = (np.clip(n, -1.0, 1.0) * np.float32(127.5) + np.float32(128.0)).astype(np.uint8)
    want[~ok] = colour.NO_DATA
    assert np.array_equal(colour.normal_colour(n), want)
    planes = [np.ascontiguousarray(n[..., c]) for c in range(3)]     # the checker's held planes (no stacked copy)
    assert np.array_equal(colour.normal_colour(planes), want) and np.array_equal(colour.normal_colour(planes, ok), want)


def test_report_writer_writes_every_image_and_thumbnail_from_its_threads_and_raises_their_errors(tmp_path):
    from rowbeam.report.build import THUMB_SIDE, Writer

    rng = np.random.default_rng(3)
    shapes = [(720, 1280, 3), (45, 80, 3), (321, 7, 3), (16, 256, 3), (700, 700, 4)] * 5   # more than MAX_PENDING
    images = [rng.integers(0, 256, s, dtype=np.uint8) for s in shapes]
    (tmp_path / "pages").mkdir()                             # the paths image() returns are relative to pages/
    with Writer(tmp_path, workers=2) as w:
        got = [w.image(f"sub/im{i}", img) if i % 2 else w.image(f"sub/im{i}", lambda img=img: img, shape=img.shape[:2])
               for i, img in enumerate(images)]                # odd: an image; even: the function that makes it
        assert not images[1].flags.writeable                 # being encoded elsewhere: the caller cannot change it
    for i, (img, g) in enumerate(zip(images, got, strict=True)):
        full = cv2.imread(str(tmp_path / "img/sub" / f"im{i}.png"), cv2.IMREAD_UNCHANGED)
        assert np.array_equal(full[..., [2, 1, 0, 3][:img.shape[2]]], img)
        thumb_file = tmp_path / "pages" / g["thumb"]
        thumb = cv2.imread(str(thumb_file), cv2.IMREAD_UNCHANGED)
        assert np.array_equal(thumb[..., [2, 1, 0, 3][:img.shape[2]]], png.thumbnail(img, THUMB_SIDE))
        assert (g["thumb"] == g["full"]) == (max(img.shape[:2]) <= THUMB_SIDE)
        assert g["height"] * thumb.shape[1] == g["width"] * thumb.shape[0]          # the thumbnail's aspect
    (tmp_path / "img/bad.png").mkdir()                      # the worker's write fails: leaving the block raises it
    with pytest.raises(IsADirectoryError), Writer(tmp_path, workers=1) as w:
        w.image("bad", images[1])
    with pytest.raises(ValueError, match="not the declared"), Writer(tmp_path, workers=1) as w:
        w.image("made", lambda: images[1], shape=(46, 80))   # the page would show it with the wrong size


def test_report_writer_copies_an_image_equal_to_the_kept_one_and_encodes_one_that_differs(tmp_path, monkeypatch):
    from rowbeam.report import build

    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, (720, 1280, 3), dtype=np.uint8)
    differs = a.copy()
    differs[700, 1000, 1] ^= 1                               # one channel of one pixel
    palette = rng.integers(0, 256, (7, 3), dtype=np.uint8)
    index = rng.integers(0, 7, (720, 1280)).astype(np.uint8)
    encoded = []
    real_encode = build.encode_png
    monkeypatch.setattr(build, "encode_png", lambda img, level: encoded.append(img.shape) or real_encode(img, level))
    (tmp_path / "pages").mkdir()
    with build.Writer(tmp_path, workers=2) as w:
        w.image("a", lambda: a, shape=a.shape[:2], keep=True)
        w.image("a_again", lambda: a.copy(), shape=a.shape[:2], same_as="a")
        w.image("b", a.copy(), keep=True)
        w.image("differs", differs, same_as="b")
        w.image("i", png.Indexed(index, palette), keep=True)
        w.image("i_other_palette", png.Indexed(index, palette[::-1].copy()), same_as="i")
    assert len(encoded) == 2 * 5                             # a PNG and a thumbnail each, but a_again: copies
    img = tmp_path / "img"
    for suffix in (".png", ".thumb.png"):
        assert (img / f"a_again{suffix}").read_bytes() == (img / f"a{suffix}").read_bytes()
    got = cv2.imread(str(img / "differs.png"), cv2.IMREAD_UNCHANGED)[..., ::-1]
    assert np.array_equal(got, differs)
    assert np.array_equal(cv2.imread(str(img / "i_other_palette.png"))[..., ::-1], palette[::-1][index])


def test_report_writer_copies_without_making_an_image_its_test_says_is_the_same(tmp_path):
    """image(same_as=, same=): when same() is true the kept image's files are copied and the image is never made;
    when false the image is made and written as its own pixels."""
    from rowbeam.report import build

    a = np.random.default_rng(7).integers(0, 256, (90, 160, 3), dtype=np.uint8)
    made = []
    (tmp_path / "pages").mkdir()
    with build.Writer(tmp_path, workers=2) as w:
        w.image("a", a, keep=True)
        w.image("told_same", lambda: made.append("same") or a, shape=a.shape[:2], same_as="a", same=lambda: True)
        w.image("b", a.copy(), keep=True)
        w.image("told_other", lambda: made.append("other") or 255 - a, shape=a.shape[:2], same_as="b",
                same=lambda: False)
    assert made == ["other"]
    img = tmp_path / "img"
    assert (img / "told_same.png").read_bytes() == (img / "a.png").read_bytes()
    assert (img / "told_same.thumb.png").exists() is (img / "a.thumb.png").exists()
    assert np.array_equal(cv2.imread(str(img / "told_other.png"), cv2.IMREAD_UNCHANGED)[..., ::-1], 255 - a)


def test_same_normal_colours_is_the_comparison_of_the_images():
    """same_normal_colours(a, b, finite) = (normal_colour(a, finite) == normal_colour(b, finite)): last-bit
    differences that keep every byte, -0 against +0, differences off `finite` (true); one component crossing a byte
    boundary (false)."""
    rng = np.random.default_rng(13)
    n = rng.normal(size=(3, 60, 90)).astype(np.float32)
    n /= np.sqrt((n * n).sum(0))
    finite = rng.random((60, 90)) < 0.9
    n[:, ~finite] = np.nan
    b = n.copy()
    b[0][finite] = np.nextafter(b[0][finite], np.float32(2))                 # last bit of every valid x
    b[1][~finite] = 0.5                                                        # off finite: NO_DATA either way
    zero = np.argwhere(finite)[0]
    n[2][tuple(zero)], b[2][tuple(zero)] = -0.0, 0.0
    same = [colour.same_normal_colours(list(n), list(b), finite),
            np.array_equal(colour.normal_colour(list(n), finite), colour.normal_colour(list(b), finite))]
    flipped = b.copy()
    y, x = np.argwhere(finite)[5]
    flipped[1, y, x] = np.float32((int(colour.normal_colour(list(n), finite)[y, x, 1]) - 127.0) / 127.5) # next byte
    other = [colour.same_normal_colours(list(n), list(flipped), finite),
             np.array_equal(colour.normal_colour(list(n), finite), colour.normal_colour(list(flipped), finite))]
    assert same == [True, True] and other == [False, False], (same, other)


def test_indexed_thumbnail_equals_the_thumbnail_of_its_rgb_at_every_factor():
    rng = np.random.default_rng(6)
    white = np.full((256, 3), 255, dtype=np.uint8)           # the largest sums a 16-bit lane must hold (f = 16)
    for (H, W), side, colours, dtype in [((37, 70), 18, 7, np.uint8), ((37, 70), 11, 256, np.uint32),
                                         ((100, 161), 16, 256, np.uint8), ((99, 160), 10, 3, np.uint32),
                                         ((64, 97), 6, 256, np.uint8), ((40, 290), 17, 256, np.uint8),
                                         ((40, 290), 5, 300, np.uint32), ((5, 9), 320, 4, np.uint8)]:
        f = png.thumbnail_factor(H, W, side)
        for palette in (rng.integers(0, 256, (colours, 3), dtype=np.uint8), white[:min(colours, 256)]):
            img = png.Indexed(rng.integers(0, len(palette), (H, W)).astype(dtype), palette)
            got = png.thumbnail(img, side)
            assert np.array_equal(got, png.thumbnail(palette[img.index], side)), (H, W, f, colours)


def test_indexed_image_png_decodes_to_its_rgb_with_opencv():
    rng = np.random.default_rng(4)
    for colours in (1, 7, 256, 300):                     # 300: more than a PNG palette holds -> written as RGB
        palette = rng.integers(0, 256, (colours, 3), dtype=np.uint8)
        img = png.Indexed(rng.integers(0, colours, (9, 14)).astype(np.uint32), palette)
        data = png.encode_png(img)
        assert data[25] == (3 if colours <= 256 else 2)      # IHDR colour type: palette, else truecolour
        back = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[..., ::-1]
        assert np.array_equal(back, palette[img.index]) and np.array_equal(png.decode_png(data), palette[img.index])
        assert np.array_equal(png.thumbnail(img, 7), png.thumbnail(palette[img.index], 7))
    z = np.geomspace(1.0, 60.0, 60 * 80).reshape(60, 80)          # a log ramp: every colour of the map
    z[::7, ::3] = np.nan
    mask = rng.random((60, 80)) < 0.95
    idx = colour.colour_indices(z, 1.0, 60.0, log=True, mask=mask)
    assert len(idx.palette) <= 256 and png.encode_png(idx)[25] == 3
    assert np.array_equal(idx.rgb(), _colourise_whole(z, 1.0, 60.0, True, mask))
    assert len(np.unique(idx.rgb().reshape(-1, 3), axis=0)) == 256                    # the 255 map colours + NO_DATA


def test_histogram_svg_labels_end_inside_the_svg():
    import re

    from rowbeam.report import html

    svg = html.histogram_svg(stats.histogram(np.geomspace(1e-9, 2.5e-8, 50)), "m", width=300)
    right = re.findall(r'<text x="([0-9.]+)"[^>]*?( text-anchor="end")?>([^<]*)</text>', svg)[-1]
    assert right[2] == "2.5e-08 m" and float(right[0]) == 300 and right[1]     # its end at the right edge


def test_facing_by_components_is_the_row_sum():
    """The camera page's facing residual, n · d/|d| summed x, y, z over component arrays, has the bits of numpy's
    (n * d/|d|).sum(-1) on (N, 3) rows; the data is one where the other summation order differs."""
    from rowbeam.model.camera_model import norm

    rng = np.random.default_rng(12)
    n = rng.normal(size=(50000, 3)).astype(np.float32).astype(np.float64)
    d = np.column_stack([rng.uniform(-1, 1, (50000, 2)), np.ones(50000)])
    f = norm(d)
    rows = (n * (d / f[..., None])).sum(-1)
    parts = [n[:, c] * (d[:, c] / f) for c in range(3)]
    facing = parts[0].copy()
    for p in parts[1:]:
        facing += p
    assert np.array_equal(facing, rows)
    assert not np.array_equal(parts[0] + (parts[1] + parts[2]), rows)


def test_class_counts_follow_from_the_instance_counts():
    """The class legend's (ids, pixel counts) from the instance counts equal _id_counts(semantic_id) when semantic_id
    is the checker's class of each instance (the table's class, background for 0, VOID_ID for an index not in the
    table): several instances of one class summed, an unknown index, background."""
    from rowbeam.model.ontology import VOID_ID
    from rowbeam.report.build import _class_counts, _id_counts

    rng = np.random.default_rng(8)
    objects = [{"render_index": i, "class_id": c} for i, c in ((1, 3), (2, 3), (3, 7), (5, 1))]
    instance = rng.integers(0, 7, (40, 60)).astype(np.uint32)          # 4 and 6: not in the table
    classes = {0: 0, **{o["render_index"]: o["class_id"] for o in objects}}
    semantic = np.array([classes.get(int(i), VOID_ID) for i in instance.ravel()], dtype=np.uint32).reshape(40, 60)
    ids, counts = _class_counts(*_id_counts(instance), objects)
    want_ids, want_counts = _id_counts(semantic)
    assert ids.tolist() == want_ids.tolist() and counts.tolist() == want_counts.tolist()
    assert VOID_ID in ids.tolist() and len(ids) == 5


def test_order_statistics_are_the_sorted_values_at_their_ranks():
    """colour.order_statistics = np.sort(v)[ranks]: the 1/99 % ranks of an image (thresholded subsets), the ends,
    ties on the thresholds (few distinct values), ranks in between and small arrays (whole sort), float32 and
    float64; and the 1..99 % range it gives equals np.percentile's."""
    rng = np.random.default_rng(21)
    for v in (rng.lognormal(2.0, 1.0, 300_000).astype(np.float32), rng.normal(size=200_001),
              rng.integers(0, 5, 150_000).astype(np.float32), np.sort(rng.random(100_000))[::-1].copy(),
              rng.random(999)):
        n = v.size
        for ranks in ([0, 1, n - 2, n - 1], [n // 100, n // 100 + 1, n - n // 100 - 1, n - n // 100],
                      [n // 100, n // 2], [n // 3], [n - 1]):
            assert np.array_equal(colour.order_statistics(v, ranks), np.sort(v)[ranks]), (n, ranks)
        assert np.array_equal(colour.percentiles(v, [1.0, 99.0]), np.percentile(v.astype(np.float64), [1.0, 99.0]))


def test_report_writer_encodes_a_shared_read_only_image_once(tmp_path, monkeypatch):
    """colour.colour_bar() is one read-only array: the Writer encodes it once a report and copies its files for the
    other bars; an image given writeable is encoded each time (the Writer holds on to shared constants only)."""
    from rowbeam.report import build

    assert colour.colour_bar() is colour.colour_bar() and not colour.colour_bar().flags.writeable
    encoded = []
    real_encode = build.encode_png
    monkeypatch.setattr(build, "encode_png", lambda img, level: encoded.append(img.shape) or real_encode(img, level))
    grey = np.full((20, 30, 3), 7, dtype=np.uint8)
    (tmp_path / "pages").mkdir()
    with build.Writer(tmp_path, workers=2) as w:
        for k in range(4):
            w.image(f"bar{k}", colour.colour_bar())
        w.image("grey0", grey)
        w.image("grey1", grey)
    assert len(encoded) == 1 + 2
    img = tmp_path / "img"
    assert {(img / f"bar{k}.png").read_bytes() for k in range(4)} == {png.encode_png(colour.colour_bar(), level=1)}
