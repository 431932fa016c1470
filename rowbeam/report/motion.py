"""Motion speed of what each sample sees, for the report's speed slices.

Speed of a sample = |world velocity (m/s) of the material point it hit|: 0 on objects the manifest declares static;
on a moving object, v + ω × (P − origin) of its rigid body from the bundle's state log (rowbeam.model.state_log, linear
interpolation of the logged velocities) at the event's reference time; NaN (left out of the speed slice) when the
object is moving but the bundle has no state log covering it. The flow pages use the flow's own scene flow instead.
"""
from __future__ import annotations

import numpy as np

from rowbeam.util.errors import RowbeamError
from rowbeam.model.state_log import load_state_log

_TRACKS: dict[tuple[str, str], dict] = {}


def tracks_of(event) -> dict:
    """{body name: BodyTrack} of the event's state log ({} without one or when it cannot be read); cached per log."""
    pointer = event.manifest.get("state")
    if not pointer:
        return {}
    key = (str(event.root), pointer.get("sha256", ""))
    if key not in _TRACKS:
        try:
            _TRACKS[key] = load_state_log(event.root, pointer)[1]
        except (RowbeamError, OSError, KeyError, ValueError):
            _TRACKS[key] = {}
        if len(_TRACKS) > 8:                               # a dataset of many bundles: keep memory bounded
            _TRACKS.pop(next(iter(_TRACKS)))
    return _TRACKS[key]


def point_speeds(objects: list[dict], tracks: dict, instance_id, points_world, t_ns: int) -> np.ndarray:
    """(N,) m/s speed of N samples: instance_id (N,) render indices, points_world (N, 3) m (world) of the hits; static
    objects 0, moving objects from their track at t_ns, anything else NaN (background, untracked)."""
    ids = np.asarray(instance_id).astype(np.int64).ravel()
    P = np.asarray(points_world, dtype=np.float64).reshape(-1, 3)
    top = max([int(ids.max(initial=0))] + [int(o["render_index"]) for o in objects]) + 1
    lut = np.full(top, np.nan)                           # static objects: 0 by render index, in one lookup
    lut[[int(o["render_index"]) for o in objects if o.get("motion") == "static"]] = 0.0
    out = np.take(lut, np.clip(ids, 0, top - 1)) if ids.size else np.full(ids.shape, np.nan)
    inside = ids
    if ids.size and int(ids.min()) < 0:             # (ids >= top cannot happen: top > ids.max())
        out[ids < 0] = np.nan
        inside = ids[ids >= 0]
    present = np.bincount(inside, minlength=top) > 0
    for o in objects:
        if o.get("motion") == "static" or not present[int(o["render_index"])]:
            continue
        sel = ids == int(o["render_index"])
        track = tracks.get(o.get("name"))
        if track is None or not track.covers([t_ns]).all():
            continue
        v, w = track.velocities(t_ns)
        origin = track.pose(t_ns)[:3, 3]
        out[sel] = np.linalg.norm(v + np.cross(w, P[sel] - origin), axis=-1)
    return out


def camera_speeds(event, arrays: dict, pixels, rays) -> np.ndarray:
    """(N,) m/s speed at N pixels (flat row-major indices `pixels` of the event's images): hit point = row pose
    (row_T_world_camera, OpenCV camera frame) applied to rays (N, 3) = (x, y, 1) through those pixels times camera_z,
    computed on moving objects' pixels only; at the event's reference time."""
    W = arrays["camera_z"].shape[1]
    ids = arrays["instance_id"].ravel()[pixels]
    moving = [int(o["render_index"]) for o in event.objects if o.get("motion") != "static"]
    need = np.isin(ids, moving)
    P = np.zeros((ids.size, 3))
    if need.any():
        px = pixels[need]
        X = np.asarray(rays, dtype=np.float64)[need] * arrays["camera_z"].ravel()[px].astype(np.float64)[:, None]
        T = arrays["row_T_world_camera"][px // W]
        P[need] = np.einsum("nij,nj->ni", T[:, :3, :3], X) + T[:, :3, 3]
    return point_speeds(event.objects, tracks_of(event), ids, P, event.reference_time_ns)


def beam_speeds(event, points) -> np.ndarray:
    """(N,) m/s speed of a LiDAR/radar point table's returns (x_world, y_world, z_world, instance_id)."""
    P = np.stack([points["x_world"], points["y_world"], points["z_world"]], -1)
    return point_speeds(event.objects, tracks_of(event), points["instance_id"], P, event.reference_time_ns)
