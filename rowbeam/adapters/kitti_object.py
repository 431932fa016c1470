"""KITTI object labels from camera object labels (`adapt kitti-object BUNDLE OUT_DIR [--sensor ID]`).

OUT_DIR/label_2/<index:06d>.txt, one line per object with a 3D box, per the KITTI object devkit:
  type truncated occluded alpha x1 y1 x2 y2 h w l x y z rotation_y
and OUT_DIR/calib/<index:06d>.txt (P0..P3 3x4, R0_rect 3x3, Tr_velo_to_cam and Tr_imu_to_velo 3x4, row-major).

The rowbeam camera is KITTI's camera 2 (rectified: R0_rect = I, P2 = [K | 0]); it has no stereo partner, so
P0, P1 and P3 repeat P2 (declared). Poses at the event's reference_time_ns. A 3D box is written only for an
object whose T_camera_object_reference maps one of its axes onto the camera's y axis (within AXIS_TOL_RAD),
i.e. it is rotated only about an axis parallel to camera y: that axis is the height h, the object's first
other axis (x before y before z) is the length l (KITTI's heading, rotation_y = 0 along camera x), the third
the width w; location = centre of the box's bottom face (largest camera y); alpha = rotation_y - atan2(x, z)
wrapped to [-pi, pi]. Other objects are skipped with the reason in the sidecar, never given an invented box.
x1 y1 x2 y2 = the amodal box clipped to the image in pixel-index extents (centres at integers; x2 = x + w - 1).
truncated = truncation_fraction; occluded from occlusion_fraction by OCCLUSION_LEVELS (3 when not in the image).
type from the object's class tag by TYPE_OF_TAG, else 'Misc'. Tr_velo_to_cam is the pose of a LiDAR of the
bundle at the firing nearest the camera's reference time when a sweep of it spans that time, else all zeros.
"""
from __future__ import annotations

import math

import numpy as np

from rowbeam.adapters.adapter import AdapterFormat, bundle_to_folder
from rowbeam.bundle.reader import Bundle, Event
from rowbeam.sensors.lidar import LIDAR
from rowbeam.adapters.objects import (
    display_image,
    dropped_summary,
    image_size,
    labelled_events,
    refuse_empty,
    refuse_lens,
)
from rowbeam.adapters.png import png_bytes
from rowbeam.adapters.output import FOLDER_SIDECAR, check_output_dir, folder_listing, sidecar, sidecar_bytes
from rowbeam.adapters.output import staged_dir, write_file

AXIS_TOL_RAD = 1e-3
OCCLUSION_LEVELS = ((0.1, 0), (0.5, 1), (1.01, 2))       # occlusion_fraction < bound -> KITTI level
TYPE_OF_TAG = {"car": "Car", "van": "Van", "truck": "Truck", "pedestrian": "Pedestrian", "person": "Pedestrian",
               "person_sitting": "Person_sitting", "cyclist": "Cyclist", "tram": "Tram"}
DECIMALS = 6                                             # written with %.6f / %.2f (box) / %.2f (fractions)


def occluded_level(label: dict) -> int:
    if not label.get("px_count_in_image"):
        return 3
    occ = float(label["occlusion_fraction"])
    return next(level for bound, level in OCCLUSION_LEVELS if occ < bound)


def yaw_box(label: dict) -> tuple[dict | None, str | None]:
    """KITTI 3D box fields of an object label, or (None, reason) when it is not rotated about camera y only."""
    T = np.asarray(label["T_camera_object_reference"], np.float64)
    R = T[:3, :3]
    box = label.get("box3d") or {}
    if box.get("kind") != "object_template_aabb":
        return None, "no object-template 3D box"
    cos_to_y = np.abs(R[1, :])                           # |camera y . object axis i|
    h_axis = int(np.argmax(cos_to_y))
    tilt = math.acos(min(1.0, float(cos_to_y[h_axis])))
    if tilt > AXIS_TOL_RAD:
        return None, (f"not rotated about an axis parallel to camera y (nearest object axis {'xyz'[h_axis]} is "
                      f"{math.degrees(tilt):.3f} deg off); KITTI has no box for it")
    l_axis, w_axis = [i for i in range(3) if i != h_axis]
    size = np.asarray(box["size_m"], np.float64)
    centre = T[:3, :3] @ np.asarray(box["centre_m"], np.float64) + T[:3, 3]
    d = R[:, l_axis]                                     # length direction in camera coordinates (d_y ~ 0)
    ry = math.atan2(-d[2], d[0])                         # R_y(ry) @ (1, 0, 0) = (cos ry, 0, -sin ry)
    bottom = centre + np.array([0.0, size[h_axis] / 2, 0.0])
    alpha = (ry - math.atan2(bottom[0], bottom[2]) + math.pi) % (2 * math.pi) - math.pi
    return {"h": float(size[h_axis]), "w": float(size[w_axis]), "l": float(size[l_axis]),
            "location": [float(x) for x in bottom], "rotation_y": float(ry), "alpha": float(alpha),
            "axes": {"height": "xyz"[h_axis], "length": "xyz"[l_axis], "width": "xyz"[w_axis]}}, None


def label_line(label: dict, box: dict) -> str:
    x, y, w, h = label["bbox_amodal_clipped"]
    kitti_type = TYPE_OF_TAG.get(str(label.get("class", "")).lower(), "Misc")
    f = f"%.{DECIMALS}f"
    return " ".join([kitti_type, "%.2f" % float(label["truncation_fraction"]), str(occluded_level(label)),
                     f % box["alpha"], "%.2f" % x, "%.2f" % y, "%.2f" % (x + w - 1), "%.2f" % (y + h - 1),
                     f % box["h"], f % box["w"], f % box["l"], *(f % v for v in box["location"]),
                     f % box["rotation_y"]])


def _lidar_to_camera(bundle: Bundle, event: Event) -> tuple[np.ndarray, dict]:
    """(3x4 Tr_velo_to_cam, note) from the LiDAR firing nearest the camera reference time, or zeros."""
    t = event.reference_time_ns
    T_cw = np.asarray(event.manifest["calibration"]["T_camera_world"]["matrix"], np.float64)
    for lidar in (e for e in bundle.events() if e.sensor_type == LIDAR):
        ev = lidar.manifest["event"]
        start = int(ev["sweep_start_ns"])
        times = start + lidar.array("time_offset_ns")[:, 0].astype(np.int64)
        if not times[0] <= t <= times[-1]:
            continue
        k = int(np.argmin(np.abs(times - t)))
        T = T_cw @ lidar.array("firing_T_world_lidar")[k, 0]
        return T[:3], {"lidar": lidar.sample_id, "firing": k, "time_gap_ns": int(times[k] - t)}
    return np.zeros((3, 4)), {"lidar": None, "note": "no LiDAR sweep spans the camera's reference time: zeros"}


def calib_text(K: np.ndarray, velo: np.ndarray) -> str:
    P = np.hstack([K, np.zeros((3, 1))])
    imu = np.hstack([np.eye(3), np.zeros((3, 1))])
    rows = [(f"P{i}", P) for i in range(4)] + [("R0_rect", np.eye(3)), ("Tr_velo_to_cam", velo),
                                              ("Tr_imu_to_velo", imu)]
    return "".join(f"{name}: " + " ".join("%.12e" % v for v in np.asarray(M).reshape(-1)) + "\n" for name, M in rows)


LOST = ["objects not rotated about an axis parallel to camera y (listed in skipped with the reason)",
        "masks, pixel counts, the canvas silhouette, stable ids (kept in this sidecar's objects table), per-row poses",
        "occlusion as 4 levels (OCCLUSION_LEVELS), truncation and 2D boxes to 2 decimals, 3D values to 6 decimals",
        "class: KITTI types from class tags (TYPE_OF_TAG), every other class is Misc",
        "stereo: P0, P1, P3 repeat P2 (one camera); Tr_imu_to_velo is identity (no IMU)"]


def export_kitti_object(bundle_path, out_dir, sensor: str | None = None) -> dict:
    """Write label_2/ and calib/ for every labelled event of one camera; return the sidecar."""
    bundle = Bundle.open(bundle_path)
    out_dir = check_output_dir(out_dir, bundle.path)
    events = labelled_events(bundle, sensor, single_sensor=True)
    refuse_lens(events, "KITTI", "calib P2 = [K | 0] is a pinhole projection (no distortion)")
    written, skipped, velo_notes, displays = [], [], {}, {}
    worst = {"m": 0.0, "rad": 0.0, "px": 0.0, "fraction": 0.0}
    with staged_dir(out_dir) as stage:
        for sub in ("label_2", "calib", "image_2"):
            (stage / sub).mkdir()
        for e in events:
            name = f"{e.index:06d}"
            lines = []
            for label in e.object_labels:
                box, why = yaw_box(label) if label.get("bbox_amodal_clipped") else (None, "not in the image")
                if box is None:
                    skipped.append({"sample_id": e.sample_id, "id": str(label["id"]), "name": label.get("name"),
                                    "reason": why})
                    continue
                lines.append(label_line(label, box))
                written.append({"file": f"label_2/{name}.txt", "line": len(lines), "id": str(label["id"]),
                                "axes": box["axes"]})
                values = [box["h"], box["w"], box["l"], *box["location"]]
                worst["m"] = max(worst["m"], max(abs(round(v, DECIMALS) - v) for v in values))
                worst["rad"] = max(worst["rad"], abs(round(box["rotation_y"], DECIMALS) - box["rotation_y"]),
                                   abs(round(box["alpha"], DECIMALS) - box["alpha"]))
                worst["fraction"] = max(worst["fraction"], abs(round(float(label["truncation_fraction"]), 2)
                                                               - float(label["truncation_fraction"])))
            write_file(stage / "label_2" / f"{name}.txt", "".join(f"{ln}\n" for ln in lines).encode())
            image, how = display_image(e)
            if image is not None:
                write_file(stage / "image_2" / f"{name}.png", png_bytes(image, 8))
                displays[name] = how
            velo, note = _lidar_to_camera(bundle, e)
            velo_notes[name] = note
            write_file(stage / "calib" / f"{name}.txt",
                       calib_text(np.asarray(e.manifest["calibration"]["K"], np.float64), velo).encode())
        total = sum(len(e.object_labels) for e in events)
        refuse_empty("kitti-object", len(written), skipped, total)
        if not displays:
            (stage / "image_2").rmdir()
        W, H = image_size(events[0])
        doc = sidecar("kitti_object", out_dir.name, {"bundle": str(bundle.path), "sensor": events[0].sensor,
                                                      "events": [e.sample_id for e in events]},
                      LOST, worst, files=folder_listing(stage), objects=written, skipped=skipped,
                      dropped=dropped_summary(skipped, total), rgb_display=displays,
                      camera="rowbeam camera = KITTI camera 2 (R0_rect = I, P2 = [K | 0])", image_size_px=[W, H],
                      pose_time="each event's reference_time_ns", axis_tolerance_rad=AXIS_TOL_RAD,
                      occluded_mapping="0: occlusion_fraction < 0.1, 1: < 0.5, 2: >= 0.5, 3: not in the image",
                      type_mapping=TYPE_OF_TAG, tr_velo_to_cam=velo_notes,
                      box_convention="x1 y1 x2 y2 = bbox_amodal_clipped in pixel indices, x2 = x + w - 1")
        write_file(stage / FOLDER_SIDECAR, sidecar_bytes(doc))
    return doc


def _arguments(p) -> None:
    bundle_to_folder(p, "camera sensor id (default: the only camera with object labels)")


ADAPTER_FORMATS = (AdapterFormat(
    "kitti-object", "KITTI object label_2 + calib (3D boxes only for yaw-only objects)", _arguments,
    lambda a: export_kitti_object(a.bundle, a.out_dir, a.sensor)),)
