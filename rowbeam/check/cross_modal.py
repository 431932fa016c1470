"""Cross-modal invariant: LiDAR returns on static surfaces agree with the camera row whose time
matches: LiDAR projected into the correct camera row.

For a return p_world at time t_p and a camera event, find the row v it projects into with that
row's own pose (fixed point of v = row of projection(T_camera_world(t_v) p)). Keep the pair when
|t_row(v) - t_p| <= LIDAR_CAMERA_MAX_SKEW_NS, the return's object is static and is what the camera
sees at all four surrounding pixel centres, on one planar face (equal geometric normals). Then
camera_z interpolated at (u, v) (bilinear in 1/z, exact on planar faces) must equal the return's
camera-frame z.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from rowbeam.model import qa_profile as tol
from rowbeam.model.lens import lens_from_calibration, project_uv
from rowbeam.model.pixel_sampling import bilinear_corners


class CrossCheck(NamedTuple):
    """A check of a subject sensor type's events against every overlapping event of a partner type (registered as the
    subject's "cross_check" hook): fn(subject_manifest, subject_arrays, partner_manifest, partner_arrays, add)."""

    partner: str                # sensor type name
    subject_arrays: tuple       # modalities of the subject the check reads
    partner_arrays: tuple       # modalities of the partner the check reads
    fn: Callable


def row_of_projection(points_world, row_T_world_camera, lens_or_K, iterations=4):
    """(uv, z, row) of world points projected with the pose of the row they land on, through the camera's
    lens (rowbeam.model.lens) or pinhole K; uv is NaN outside the lens's valid domain."""
    H = row_T_world_camera.shape[0]
    T_cw = np.linalg.inv(row_T_world_camera)
    row = np.full(len(points_world), H // 2)
    for _ in range(iterations):
        T = T_cw[row]
        X = np.einsum("nij,nj->ni", T[:, :3, :3], points_world) + T[:, :3, 3]
        uv = np.stack(project_uv(lens_or_K, X), -1)
        row = np.clip(np.nan_to_num(np.rint(uv[:, 1]), nan=0).astype(np.int64), 0, H - 1)
    return uv, X[:, 2], row


def lidar_camera_pairs(lidar_manifest, lidar_arrays, camera_manifest, camera_arrays) -> dict | None:
    """LiDAR returns of one sweep projected into the camera row whose time matches (the checker's pairing).

    Returns None when no static return lies inside the camera event's time span, else a dict of arrays over
    the returns kept by time span and motion (N of them): `points` (the point records), `uv` (N, 2) px,
    `z` (N,) m return's camera-frame z at its row's pose, `row` (N,) int, `skew_ns` (N,) |t_row - t_return|,
    `paired` (N,) bool (inside the image, skew within LIDAR_CAMERA_MAX_SKEW_NS, same object on one planar face
    at the four surrounding pixel centres), `camera_z` (N,) m interpolated in 1/z (meaningful where paired),
    `residual_m` (N,) camera_z - z (NaN where not paired).
    """
    pts = lidar_arrays["points"]
    by_index = {o["render_index"]: o for o in lidar_manifest["objects"]}
    cam_index = {o["id"]: o["render_index"] for o in camera_manifest["objects"]}
    static = np.array([by_index.get(int(i), {}).get("motion") == "static" for i in pts["instance_id"]], dtype=bool)
    row_t = camera_arrays["row_time_ns"]
    span = (row_t.min() - tol.LIDAR_CAMERA_MAX_SKEW_NS, row_t.max() + tol.LIDAR_CAMERA_MAX_SKEW_NS)
    keep = static & (pts["t_ns"] >= span[0]) & (pts["t_ns"] <= span[1])
    if not keep.any():
        return None
    sel = pts[keep]
    world = np.stack([sel["x_world"], sel["y_world"], sel["z_world"]], -1)
    lens = lens_from_calibration(camera_manifest["calibration"])
    K = np.array(camera_manifest["calibration"]["K"]) if lens is None else lens
    uv, z, row = row_of_projection(world, camera_arrays["row_T_world_camera"], K)
    H, W = camera_arrays["camera_z"].shape
    skew = np.abs(row_t[row] - sel["t_ns"])
    inside = (z > 0) & (uv[:, 0] >= 0) & (uv[:, 0] <= W - 1) & (uv[:, 1] >= 0) & (uv[:, 1] <= H - 1)
    ok = inside & (skew <= tol.LIDAR_CAMERA_MAX_SKEW_NS)
    want = np.array([cam_index.get(by_index[int(i)]["id"], -1) for i in sel["instance_id"]])
    inst, valid, cz = camera_arrays["instance_id"], camera_arrays["valid"], camera_arrays["camera_z"]
    normal = camera_arrays["normal_geometric"]
    corners = bilinear_corners(uv[:, 0], uv[:, 1], W, H)
    r0, c0 = corners[0][0], corners[0][1]
    inv = np.zeros(len(sel))
    for r, c, w in corners:
        ok &= (inst[r, c] == want) & (valid[r, c] == 1)
        # one planar face around the return: all four geometric normals agree
        ok &= np.nan_to_num(np.abs(normal[r, c] - normal[r0, c0]).max(axis=-1), nan=1.0) < 1e-3
        with np.errstate(divide="ignore", invalid="ignore"):
            inv += w / cz[r, c].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        interpolated = 1.0 / inv
    return {"points": sel, "uv": uv, "z": z, "row": row, "skew_ns": skew, "paired": ok, "camera_z": interpolated,
            "residual_m": np.where(ok, interpolated - z, np.nan)}


def check_lidar_camera(lidar_manifest, lidar_arrays, camera_manifest, camera_arrays, add) -> None:
    """Compare one sweep with one camera event; records one result named after the camera event."""
    name = f"lidar_vs_camera:{camera_manifest['sensor']['id']}/{camera_manifest['event']['index']}"
    pairs = lidar_camera_pairs(lidar_manifest, lidar_arrays, camera_manifest, camera_arrays)
    if pairs is None:
        add(name, True, "no static returns inside the camera event's time span", severity="warn")
        return
    ok, z, skew = pairs["paired"], pairs["z"], pairs["skew_ns"]
    if not ok.any():
        add(name, True, f"no static return lands, within {tol.LIDAR_CAMERA_MAX_SKEW_NS / 1e6:g} ms, on a camera "
            "row showing the same surface", severity="warn")
        return
    err = np.abs(pairs["camera_z"][ok] - z[ok])
    limit = tol.LIDAR_CAMERA_Z_ABS_TOL_M + tol.LIDAR_CAMERA_Z_REL_TOL * z[ok]
    bad = int(np.count_nonzero(err > limit))
    worst = float(err.max())
    add(name, bad == 0, f"{int(ok.sum())} static returns projected into time-matched camera rows: "
        + (f"{bad} disagree with camera_z (worst {worst:.3g} m)" if bad else
           f"camera_z agrees (worst {worst:.3g} m, skew <= {int(skew[ok].max())} ns)"),
        pairs=int(ok.sum()), worst_z_error_m=worst, max_skew_ns=int(skew[ok].max()))
