"""Peak-memory measures that must not change a label: camera labels derived in row bands, EXR planes read without
a second copy (no Blender)."""
import numpy as np
import OpenEXR
import pytest

from rowbeam.bundle.arrays import read_exr_channels, read_exr_parts, write_exr
from rowbeam.blender.sensors import camera_labels
from rowbeam.blender.sensors.camera_labels import derive_labels
from rowbeam.blender.cycles.lens_camera import PixelRays

K = np.array([[90.0, 0, 31.5], [0, 90.0, 20.5], [0, 0, 1]])


def _rot(ax, ay, az):
    cx, sx, cy, sy, cz, sz = np.cos(ax), np.sin(ax), np.cos(ay), np.sin(ay), np.cos(az), np.sin(az)
    Rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    Ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    Rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    return Rz @ Ry @ Rx


def _scene(h=43, w=64, seed=3):
    """Passes of a moving camera (every row its own rotated, translated pose) seeing points at known camera_z
    along each pixel-centre ray: (passes, row poses, lut, truth)."""
    rng = np.random.default_rng(seed)
    poses = np.tile(np.eye(4), (h, 1, 1))
    for v in range(h):
        poses[v, :3, :3] = _rot(0.3 + 0.01 * v, -0.2 + 0.004 * v, 1.1 - 0.02 * v)
        poses[v, :3, 3] = [5.0 + 0.1 * v, -3.0, 1.5 + 0.02 * v]
    u, v = np.meshgrid(np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64))
    xn, yn = (u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1]
    z = rng.uniform(2.0, 60.0, (h, w))
    Xc = np.stack([xn * z, yn * z, z], axis=-1)
    nc = -Xc / np.linalg.norm(Xc, axis=-1, keepdims=True)          # facing the camera
    R, C = poses[:, None, :3, :3], poses[:, None, :3, 3]
    world = (R @ Xc[..., None])[..., 0] + C
    n_world = (R @ nc[..., None])[..., 0]
    index = rng.integers(1, 6, (h, w)).astype(np.float32)
    background = rng.random((h, w)) < 0.1
    index[background] = 0
    depth = np.where(background, 1e10, z).astype(np.float32)
    position = np.where(background[..., None], 0.0, world).astype(np.float32)
    passes = {"depth": depth, "index": index, "position": position,
              "normal": n_world.astype(np.float32), "true_normal": n_world.astype(np.float32)}
    lut = np.array([0, 7, 7, 9, 11, 13], dtype=np.uint32)
    truth = {"camera_z": z, "range": z * np.sqrt(1 + xn ** 2 + yn ** 2), "valid": ~background, "normal": nc,
             "rays": np.stack([xn, yn, np.ones_like(xn)], axis=-1)}
    return passes, poses, lut, truth


@pytest.mark.parametrize("lens", [False, True])
def test_banded_derivation_equals_one_pass_and_closed_form(monkeypatch, lens):
    passes, poses, lut, truth = _scene()
    rays = PixelRays.of(truth["rays"]) if lens else None
    whole, whole_stats = camera_labels.derive_band(passes, poses, K, lut, rays=rays)
    monkeypatch.setattr(camera_labels, "BAND_PIXELS", 64 * 5)      # 5-row bands; the last one 3 rows
    banded, banded_stats = derive_labels(passes, poses, K, lut, rays=rays)
    assert banded.keys() == whole.keys() and banded_stats == whole_stats
    for k in whole:
        assert banded[k].dtype == whole[k].dtype and np.array_equal(banded[k], whole[k], equal_nan=True), k
    valid = truth["valid"]
    assert np.array_equal(banded["valid"].astype(bool), valid)
    # independent closed form: the known camera_z, range along the pixel-centre ray, camera-frame normal
    # (float32 world positions some tens of metres from the origin: ~1e-5 m rounding)
    assert np.abs(banded["camera_z"][valid] - truth["camera_z"][valid]).max() < 2e-4
    assert np.abs(banded["range"][valid] - truth["range"][valid]).max() < 2e-4
    assert np.abs(banded["normal_geometric"][valid] - truth["normal"][valid]).max() < 1e-5
    assert np.isnan(banded["range"][~valid]).all()
    assert np.array_equal(banded["semantic_id"], lut[banded["instance_id"]])
    assert np.array_equal(banded["instance_id"][valid], passes["index"][valid].astype(np.uint32))


def test_band_rows_use_their_own_row_pose(monkeypatch):
    """A fault that gave each band the first band's poses is caught: rows shifted by one band disagree."""
    passes, poses, lut, truth = _scene()
    monkeypatch.setattr(camera_labels, "BAND_PIXELS", 64 * 5)
    wrong = poses.copy()
    wrong[5:10] = poses[0:5]
    bad, _ = derive_labels(passes, wrong, K, lut)
    valid = truth["valid"][5:10]
    assert np.abs(bad["camera_z"][5:10][valid] - truth["camera_z"][5:10][valid]).max() > 1e-2


def test_merged_band_stats_are_those_of_one_pass():
    """Band stats fold as one pass over the image would give them: max_* by maximum (a NaN in any band stays NaN,
    as np.max over the whole image gives it), counts summed."""
    bands = [{"max_centre_ray_departure_m": 0.25, "unresolved_hit_pixels": 2},
             {"max_centre_ray_departure_m": float("nan"), "unresolved_hit_pixels": 3},
             {"max_centre_ray_departure_m": 0.5, "unresolved_hit_pixels": 0}]
    stats = {}
    for b in bands:
        camera_labels.merge_stats(stats, b)
    assert np.isnan(stats["max_centre_ray_departure_m"]) and stats["unresolved_hit_pixels"] == 5
    stats = {}
    for b in (bands[0], bands[2]):
        camera_labels.merge_stats(stats, b)
    assert stats["max_centre_ray_departure_m"] == 0.5


def test_exr_read_without_second_copy(tmp_path):
    a = np.arange(12 * 7, dtype=np.float32).reshape(12, 7) / 7
    write_exr(tmp_path / "a.exr", np.stack([a, 2 * a], axis=-1), ["L.X", "L.Y"], "float32")
    channels, _ = read_exr_channels(tmp_path / "a.exr")
    parts = read_exr_parts(tmp_path / "a.exr")
    for got in (channels, parts):
        assert np.array_equal(got["L.X"], a) and np.array_equal(got["L.Y"], 2 * a)
    # the arrays outlive the File they were read with (they own their memory)
    with OpenEXR.File(str(tmp_path / "a.exr"), separate_channels=True) as f:
        px = f.channels()["L.X"].pixels
    del f
    assert np.array_equal(px, a)


@pytest.mark.parametrize("direction", ["top_to_bottom", "bottom_to_top"])
def test_label_render_in_bands_equals_one_render(tmp_path, monkeypatch, direction):
    """A plane approaching at 40 m/s rendered as 3 horizontal bands (border renders): every row's camera_z is the
    closed form z0 + v*t_row (each band keeps its rows' times), ids and validity equal the one-render export's and
    the exact-row verification passes."""
    from rowbeam.blender.sensors import camera_event
    from rowbeam.blender.scenes import calibration

    from tests.conftest import build_and_export
    from tests.helpers import load_event
    from tests.blender.sensors.test_calibration_exports import Z_TOL, _truth_z

    one = build_and_export(tmp_path, "one", calibration.moving_plane, scale=8, direction=direction)
    W, H = one.truth.size
    assert camera_event.label_bands(W, H, W * H // 3 + 1) == [(0, H // 3), (H // 3, 2 * H // 3), (2 * H // 3, H)]
    monkeypatch.setattr(camera_event, "LABEL_BAND_PIXELS", W * H // 3 + 1)
    banded = build_and_export(tmp_path, "banded", calibration.moving_plane, scale=8, direction=direction)
    (_, a1), (m3, a3) = load_event(one.event), load_event(banded.event)
    assert banded.summary["published"] and m3["method"]["derivation"]["label_render_bands"] == 3
    assert np.abs(a3["camera_z"] - _truth_z(banded.truth, a3["row_time_ns"])).max() < Z_TOL
    for k in ("instance_id", "valid", "semantic_id"):
        assert np.array_equal(a3[k], a1[k]), k
    assert np.abs(a3["range"] - a1["range"]).max() < Z_TOL
    assert m3["method"]["verification"]["worst_range_error_m"] < Z_TOL


def test_thread_map_keeps_order_and_finishes_every_call_before_raising():
    """rowbeam.util.worker_threads.thread_map: results in item order whatever finishes first; a failure is raised only after
    every other call has finished (a writer never leaves a call running into a removed staging folder)."""
    import threading
    import time

    from rowbeam.util.worker_threads import thread_map

    assert thread_map(lambda i: (time.sleep(0.02 * (3 - i)), i * i)[1], range(4), workers=3) == [0, 1, 4, 9]
    finished, lock = [], threading.Lock()

    def work(i):
        if i == 0:
            raise ValueError("first")
        time.sleep(0.05)
        with lock:
            finished.append(i)
        return i

    with pytest.raises(ValueError, match="first"):
        thread_map(work, range(4), workers=2)
    assert sorted(finished) == [1, 2, 3]
