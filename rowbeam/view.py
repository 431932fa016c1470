"""A rerun recording (.rrd) of a bundle on one timeline of acquisition times (`rowbeam view`; rerun-sdk, optional extra
`view`). Timeline `acquisition_time`: duration since the scene clock's 0, integer ns. Entities (world frame, metres):

  world/bodies/<name>           Transform3D (T_world_object) + axes at every state-log sample time
  world/ego_trajectory          LineStrips3D (static): the ego body's logged positions
  world/<camera>                Transform3D at each row time (T_world_camera, OpenCV optical) + Pinhole (K)
  world/<camera>/rgb, /depth    Image (8-bit sRGB display) and DepthImage (camera_z, m; NaN = no surface) at the
                                event's reference_time_ns
  world/<camera>/boxes          Boxes3D in the camera frame of the reference time (the labelled objects' 3D boxes;
                                labels = stable 64-bit id)
  world/points/<lidar>          Points3D, world coordinates, one row per firing time (that firing's returns)
  world/points/<radar>          Points3D, world coordinates, one row per chirp time (that chirp's returns)
  world/<imu>                   Transform3D at each sample time (T_world_imu)
  imu/<imu>/<quantity>          Scalars at each sample time, three series x, y, z in the IMU frame: angular_velocity
                                (rad/s), specific_force (m/s^2), and their *_measured versions when exported

A point row shows only its own firing / chirp: widen a 3D view's visible time range (e.g. one sweep) to see a
sweep build up. Nothing here needs Blender.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np

from rowbeam.bundle.reader import Bundle, Event
from rowbeam.model.frames import quat_wxyz_from_matrix
from rowbeam.model.state_log import load_state_log
from rowbeam.util.errors import RowbeamError

TIMELINE = "acquisition_time"
EXTRA = "pip install 'rowbeam[view]'"


def rerun_module():
    try:
        import rerun
    except ImportError:
        raise RowbeamError(f"writing a rerun recording needs rerun-sdk ({EXTRA})") from None
    return rerun


def _times(rr, t_ns) -> list:
    return [rr.TimeColumn(TIMELINE, duration=np.asarray(t_ns, np.int64).astype("timedelta64[ns]"))]


def _transforms(rr, rec, entity: str, t_ns, T) -> None:
    """Transform3D rows of poses T (M, 4, 4) (parent <- entity) at times t_ns (M,)."""
    T = np.asarray(T, np.float64)
    rec.send_columns(entity, indexes=_times(rr, t_ns), columns=rr.Transform3D.columns(
        translation=T[:, :3, 3], mat3x3=T[:, :3, :3]))


def _points_by_time(rr, rec, entity: str, t_ns, xyz) -> None:
    """Points3D rows: one per distinct time, holding the points of that time (xyz (N, 3) sorted by t_ns)."""
    t_ns = np.asarray(t_ns, np.int64)
    order = np.argsort(t_ns, kind="stable")
    times, counts = np.unique(t_ns[order], return_counts=True)
    rec.send_columns(entity, indexes=_times(rr, times),
                     columns=rr.Points3D.columns(positions=np.asarray(xyz, np.float32)[order]).partition(counts))


def log_state(rr, rec, bundle: Bundle, events: list[Event]) -> None:
    """Every body of the state logs the events point at (first log wins a body/time), and the ego trajectory."""
    seen: dict[str, dict[int, np.ndarray]] = {}
    roles = {}
    for pointer in {e.manifest["state"]["sha256"]: e.manifest["state"] for e in events if e.manifest.get("state")}.values():
        log, tracks = load_state_log(bundle.path, pointer)
        for body in log["bodies"]:
            roles[body["name"]] = body["role"]
            track = seen.setdefault(body["name"], {})
            for t, T in zip(tracks[body["name"]].t, tracks[body["name"]].T, strict=True):
                track.setdefault(int(t), T)
    for name, track in sorted(seen.items()):
        times = sorted(track)
        _transforms(rr, rec, f"world/bodies/{name}", times, [track[t] for t in times])
        rec.log(f"world/bodies/{name}", rr.TransformAxes3D(0.5), static=True)
        if roles[name] == "ego":
            rec.log("world/ego_trajectory", rr.LineStrips3D([[track[t][:3, 3] for t in times]]), static=True)


def _xyzw(T) -> list[float]:
    w, x, y, z = quat_wxyz_from_matrix(np.asarray(T)[:3, :3])
    return [float(x), float(y), float(z), float(w)]


def log_camera(rr, rec, event: Event) -> None:
    s, t = event.sensor, event.reference_time_ns
    cal = event.manifest["calibration"]
    W, H = cal["image_size_px"]
    _transforms(rr, rec, f"world/{s}", event.array("row_time_ns"), event.array("row_T_world_camera"))
    rec.log(f"world/{s}", rr.Pinhole(image_from_camera=np.asarray(cal["K"], np.float64), width=W, height=H),
            static=True)
    rec.set_time(TIMELINE, duration=np.timedelta64(t, "ns"))
    if "rgb_display" in event.names:
        rec.log(f"world/{s}/rgb", rr.Image(event.array("rgb_display")))
    rec.log(f"world/{s}/depth", rr.DepthImage(event.array("camera_z"), meter=1.0))
    boxes = [o for o in event.object_labels if o.get("box3d") and o.get("T_camera_object_reference") is not None]
    if boxes:
        T = np.array([o["T_camera_object_reference"] for o in boxes], np.float64)
        centres = np.einsum("nij,nj->ni", T[:, :3, :3], [o["box3d"]["centre_m"] for o in boxes]) + T[:, :3, 3]
        rec.log(f"world/{s}/boxes", rr.Boxes3D(centers=centres, half_sizes=np.array([o["box3d"]["size_m"] for o in boxes])
                                               / 2, quaternions=[_xyzw(M) for M in T],
                                               labels=[str(o["id"]) for o in boxes]))
    rec.reset_time()


def log_returns(rr, rec, event: Event) -> None:
    """LiDAR firings / radar chirps: world coordinates of each return at its own time."""
    p = event.array("points")
    _points_by_time(rr, rec, f"world/points/{event.sensor}", p["t_ns"],
                    np.stack([p["x_world"], p["y_world"], p["z_world"]], -1))


IMU_SERIES = ("angular_velocity", "specific_force", "angular_velocity_measured", "specific_force_measured")


def log_imu(rr, rec, event: Event) -> None:
    """IMU samples at their own times: the IMU pose, and each exported IMU_SERIES quantity as three scalar series."""
    s, t = event.sensor, event.array("sample_time_ns")
    _transforms(rr, rec, f"world/{s}", t, event.array("sample_T_world_imu"))
    for name in (n for n in IMU_SERIES if n in event.names):
        v = np.asarray(event.array(name), np.float64).reshape(-1, 3)
        rec.send_columns(f"imu/{s}/{name}", indexes=_times(rr, t),
                         columns=rr.Scalars.columns(scalars=v.ravel()).partition([3] * len(v)))
        rec.log(f"imu/{s}/{name}", rr.SeriesLines(names=["x", "y", "z"]), static=True)


VIEWS = {"rolling_shutter_camera": log_camera, "spinning_lidar": log_returns, "radar": log_returns, "imu": log_imu}


def write_recording(bundle_path, out, sensors=None, spawn: bool = False) -> dict:
    """Write the recording of `sensors` (default: all) to OUT (.rrd, new file); `spawn`: also open the viewer.
    Returns {"file", "events", "entities"}."""
    from rowbeam.adapters.output import check_output_file
    from rowbeam.bundle.files import temp_sibling

    bundle = Bundle.open(bundle_path)
    out = check_output_file(out, bundle.path)
    rr = rerun_module()
    events = [e for s in (sensors or bundle.sensors()) for e in bundle.events(s)]
    if not events:
        raise RowbeamError(f"{bundle.path}: no published events")
    tmp = temp_sibling(out)
    rec = rr.RecordingStream("rowbeam", recording_id=bundle.info.get("dataset_id") or str(bundle.path))
    try:
        rec.save(str(tmp))
        log_state(rr, rec, bundle, events)
        for e in events:
            VIEWS.get(e.sensor_type, lambda *_: None)(rr, rec, e)
        rec.flush()
        rec.disconnect()
        os.link(tmp, out)
    except FileExistsError:
        raise RowbeamError(f"{out}: exists; rowbeam never overwrites a file it cannot prove it wrote") from None
    finally:
        tmp.unlink(missing_ok=True)
    return {"file": str(out), "events": len(events), "viewer": open_viewer(out) if spawn else None}


def open_viewer(path) -> str:
    """Start the rerun viewer (the `rerun` executable of rerun-sdk) on `path`, detached; what happened, in words."""
    exe = shutil.which("rerun") or shutil.which("rerun", path=os.path.dirname(sys.executable))
    if exe is None:
        return "no rerun viewer found; open the file with `rerun FILE`"
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return "no display to open a viewer on; open the file with `rerun FILE` where there is one"
    subprocess.Popen([exe, str(path)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)
    return "viewer started"
