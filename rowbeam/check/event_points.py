"""The 3-D points of an exported camera event's pixels, formed once per decoded event and shared.

camera_points: image_rays(camera) * camera_z, (H, W, 3) float64 metres in the camera frame (OpenCV optical);
world_points: apply_rows_grid(row_T_world_camera, camera_points), each pixel at its own row's pose, world metres.
NaN where camera_z is NaN. The flow solve (rowbeam.blender.flow.flow_math) and the flow checks (flow_checks) both start
from them; in an export the checks are handed the same decoded endpoint arrays the solve read (read-only), so
they are formed once per event instead of once per use.

Kept only for a read-only camera_z (the bundle loader's arrays, which nothing may change), for as long as that
array lives, and only for the same row-pose array and the same camera (pinhole K by value; a Lens by its ray
grid, which rowbeam.model.lens keeps per lens). Kept arrays are read-only.
"""
from __future__ import annotations

import weakref

import numpy as np

from rowbeam.util.blocks import BLOCK, blockwise
from rowbeam.model.frames import apply_rows_grid
from rowbeam.model.lens import Lens, image_rays

_kept: dict = {}          # id(camera_z) -> _Entry


class _Entry:
    def __init__(self, row_T, camera_key):
        self.row_T, self.camera_key, self.points = weakref.ref(row_T), camera_key, {}


def _camera_key(camera, width: int, height: int):
    """What must match for kept points to be reused: K by value, or a Lens's (read-only, shared) ray grid, held."""
    if isinstance(camera, Lens):
        return ("lens", image_rays(camera, width, height))
    return ("K", np.asarray(camera, np.float64).tobytes())


def _same_key(a, b) -> bool:
    return a[0] == b[0] and (a[1] is b[1] if a[0] == "lens" else a[1] == b[1])


def _points(kind: str, camera, camera_z: np.ndarray, row_T: np.ndarray, compute) -> np.ndarray:
    if camera_z.flags.writeable:                 # could change after we keep its points: not kept
        return compute()
    H, W = camera_z.shape
    key = _camera_key(camera, W, H)
    entry = _kept.get(id(camera_z))
    if entry is None or entry.row_T() is not row_T or not _same_key(entry.camera_key, key):
        if entry is None:
            weakref.finalize(camera_z, _kept.pop, id(camera_z), None)
        entry = _kept[id(camera_z)] = _Entry(row_T, key)
    if kind not in entry.points:
        out = compute()
        out.flags.writeable = False
        entry.points[kind] = out
    return entry.points[kind]


def camera_points(camera, camera_z: np.ndarray, row_T_world_camera: np.ndarray) -> np.ndarray:
    """(H, W, 3) float64 m, camera frame: each pixel's ray through `camera` (a Lens or pinhole K) times its
    camera_z. row_T_world_camera only identifies the event (the points do not depend on it)."""
    H, W = camera_z.shape
    if isinstance(camera, Lens):
        return _points("camera", camera, camera_z, row_T_world_camera,
                       lambda: image_rays(camera, W, H) * camera_z.astype(np.float64)[..., None])
    return _points("camera", camera, camera_z, row_T_world_camera, lambda: _pinhole_points(camera, camera_z))


def _pinhole_points(K, camera_z: np.ndarray) -> np.ndarray:
    """image_rays(K) * camera_z bit for bit without the (H, W, 3) ray grid: a pinhole ray is
    ((u - c_x) / f_x, (v - c_y) / f_y, 1), its first component depends on the column only, its second on the row
    only, and z * 1 = z."""
    K = np.asarray(K, np.float64)
    H, W = camera_z.shape
    z = camera_z.astype(np.float64)
    out = np.empty((H, W, 3))
    np.multiply((np.arange(W, dtype=np.float64) - K[0, 2]) / K[0, 0], z, out=out[..., 0])
    np.multiply(((np.arange(H, dtype=np.float64) - K[1, 2]) / K[1, 1])[:, None], z, out=out[..., 1])
    out[..., 2] = z
    return out


def world_points(camera, camera_z: np.ndarray, row_T_world_camera: np.ndarray) -> np.ndarray:
    """(H, W, 3) float64 m, world frame: camera_points moved by each image row's pose (row_T_world_camera (H, 4, 4))."""
    rows_per_block = max(1, BLOCK // camera_z.shape[1])          # image rows per block (rowbeam.util.blocks)
    return _points("world", camera, camera_z, row_T_world_camera,
                   lambda: blockwise(apply_rows_grid, row_T_world_camera,
                                     camera_points(camera, camera_z, row_T_world_camera), block=rows_per_block))
