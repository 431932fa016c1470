"""BOP scenes from camera object labels (`adapt bop BUNDLE OUT_DIR [--split NAME]`), per the BOP format:

OUT_DIR/camera.json, OUT_DIR/models/obj_{obj_id:06d}.ply (mm) + models_info.json, and per labelled camera
(scene_id 1, 2, … in sensor order) OUT_DIR/<split>/<scene_id:06d>/ with scene_camera.json (cam_K row-major 9,
depth_scale, cam_R_w2c row-major 9, cam_t_w2c mm), scene_gt.json (cam_R_m2c, cam_t_m2c mm, obj_id),
scene_gt_info.json (bbox_obj, bbox_visib as [x, y, w, h] with w = x_max - x_min; px_count_all on the 3x
canvas; px_count_valid; px_count_visib; visib_fract = px_count_visib / px_count_all), depth/{im:06d}.png
(uint16, x depth_scale = camera_z in mm, 0 = no surface), rgb/{im:06d}.png (8-bit sRGB, when the event has
rgb), mask/{im:06d}_{gt:06d}.png (amodal, in the image) and mask_visib/… (modal). im_id = event index.

BOP has one pose per image: every pose is taken at the event's reference_time_ns (the camera's
T_camera_world and each object's T_camera_object_reference). The sidecar records, per object, the largest
gap between that time and the row times of the rows the object covers, and a bound on the resulting pixel
displacement (the object's asset vertices projected with each covered row's pose versus the reference pose).
obj_id numbers distinct assets (sha256) in sorted order; instances of one mesh share an obj_id.
"""
from __future__ import annotations

import json

import numpy as np

from rowbeam.adapters.adapter import AdapterFormat, bundle_to_folder
from rowbeam.bundle.reader import Bundle, Event
from rowbeam.model.camera_model import project
from rowbeam.util.errors import RowbeamError
from rowbeam.model.frames import apply, invert_rigid
from rowbeam.check.object_checks import object_row_poses
from rowbeam.adapters.mesh import diameter, mesh_ply_bytes, read_asset
from rowbeam.adapters.objects import (
    amodal_mask,
    display_image,
    image_size,
    labelled_events,
    mask_box,
    modal_mask,
    refuse_empty,
    refuse_lens,
    srgb8,  # noqa: F401  (the fallback encoding, also used by tests)
)
from rowbeam.adapters.output import FOLDER_SIDECAR, check_output_dir, folder_listing, sidecar, sidecar_bytes
from rowbeam.adapters.output import staged_dir, write_file
from rowbeam.adapters.png import png_bytes

DEPTH_SCALES = (0.1, 1.0, 10.0, 100.0)        # mm per depth PNG unit; the finest that holds the deepest pixel
MAX_DISPLACEMENT_VERTICES = 512


def bop_box(xywh_inclusive) -> list[int]:
    """rowbeam box [x, y, w, h] with w = x_max - x_min + 1 -> BOP box with w = x_max - x_min ([-1]*4 if None)."""
    if xywh_inclusive is None:
        return [-1, -1, -1, -1]
    x, y, w, h = (int(v) for v in xywh_inclusive)
    return [x, y, w - 1, h - 1]


def _mask_bop_box(mask: np.ndarray) -> list[int]:
    box = mask_box(mask)
    return [-1, -1, -1, -1] if box is None else [box[0], box[1], box[2] - box[0], box[3] - box[1]]


def _json(doc) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()


def _flat(R) -> list[float]:
    return [float(x) for x in np.asarray(R, np.float64).reshape(-1)]


def depth_png(camera_z: np.ndarray, valid: np.ndarray, depth_scale: float) -> tuple[np.ndarray, float]:
    """(uint16 depth image: camera_z in mm / depth_scale, 0 where invalid; largest rounding error in mm)."""
    z_mm = np.where(valid.astype(bool), np.nan_to_num(camera_z.astype(np.float64)) * 1000.0, 0.0)
    q = np.rint(z_mm / depth_scale)
    if q.max(initial=0) > 65535:
        raise RowbeamError(f"depth {z_mm.max() / 1000:.1f} m does not fit a 16-bit BOP depth PNG at depth_scale "
                           f"{depth_scale:g}")
    err = float(np.abs(q * depth_scale - z_mm)[valid.astype(bool)].max(initial=0.0))
    return q.astype(np.uint16), err


def _depth_scale(events: list[Event]) -> float:
    deepest = max(float(np.nanmax(e.array("camera_z"), initial=0.0)) for e in events) * 1000.0
    for s in DEPTH_SCALES:
        if deepest / s <= 65535:
            return s
    raise RowbeamError(f"deepest pixel {deepest / 1000:.0f} m does not fit a 16-bit BOP depth PNG")


def _camera_pose_at_reference(event: Event) -> np.ndarray:
    cal = event.manifest["calibration"]["T_camera_world"]
    if int(cal.get("time_ns", event.reference_time_ns)) != event.reference_time_ns:
        raise RowbeamError(f"{event.path}: calibration.T_camera_world is at {cal['time_ns']} ns, not at the event's "
                           f"reference time {event.reference_time_ns} ns")
    return np.asarray(cal["matrix"], np.float64)


def rolling_shutter_bound(event: Event, label: dict, rows: np.ndarray, vertices: np.ndarray) -> dict:
    """Largest |row time - reference time| over image `rows` (ns) and the largest pixel displacement of the
    object's asset vertices between the reference pose (the BOP pose) and the exported pose of each of those rows
    (camera at canvas_row_T_world_camera, object at object_row_T_world_object or static)."""
    if rows.size == 0:
        return {"max_row_time_skew_ns": 0, "pixel_displacement_bound_px": 0.0}
    t_rows = event.array("row_time_ns")
    W, H = image_size(event)
    skew = int(np.abs(t_rows[rows].astype(np.int64) - event.reference_time_ns).max())
    K = np.asarray(event.manifest["calibration"]["K"], np.float64)
    arrays = {n: event.array(n) for n in ("canvas_row_T_world_camera", "object_row_T_world_object")
              if n in event.names}
    T_wo = object_row_poses(event.manifest, arrays, label)
    v = vertices[::max(1, len(vertices) // MAX_DISPLACEMENT_VERTICES)]
    uv_ref, front_ref = project(K, apply(np.asarray(label["T_camera_object_reference"], np.float64), v))
    worst = 0.0
    for r in np.unique(rows):
        c = r + H                                              # canvas row of image row r
        uv, front = project(K, apply(invert_rigid(arrays["canvas_row_T_world_camera"][c]) @ T_wo[c], v))
        ok = front & front_ref
        if ok.any():
            worst = max(worst, float(np.linalg.norm(uv[ok] - uv_ref[ok], axis=-1).max()))
    return {"max_row_time_skew_ns": skew, "pixel_displacement_bound_px": worst}


def _assets(events: list[Event]) -> dict:
    """{sha256: (vertices m, faces)} of every asset the labels reference (file hash verified)."""
    assets = {}
    for e in events:
        for label in e.object_labels:
            sha = (label.get("asset") or {}).get("sha256")
            if sha not in assets:
                assets[sha] = read_asset(e, label)
    return assets


LOST = ["rolling shutter: one pose per image at the event's reference time (skew and pixel bound per object in "
        "rolling_shutter)", "stable 64-bit object ids (kept only in this sidecar's gt table), classes, per-row poses",
        "rgb: scene-linear float -> 8-bit sRGB, clipped to [0, 1]",
        "depth: camera_z rounded to depth_scale mm steps; pixels without a surface are 0",
        "models: float32 millimetres (vertex rounding in max_rounding_error.model_mm); only vertices and triangles",
        "amodal silhouette outside the image: only its count px_count_all and box bbox_obj survive",
        "mask_visib is rowbeam's exact modal mask (BOP's own tool derives it with a depth tolerance)"]


def export_bop(bundle_path, out_dir, split: str = "test") -> dict:
    """Write a BOP dataset folder; return the sidecar."""
    if not split or "/" in split or split.startswith("."):
        raise RowbeamError(f"--split {split!r}: give a plain folder name such as test or train")
    bundle = Bundle.open(bundle_path)
    out_dir = check_output_dir(out_dir, bundle.path)
    events = labelled_events(bundle)
    refuse_lens(events, "BOP", "stores cam_K only (pinhole; scene_camera.json has no distortion field)")
    refuse_empty("bop", sum(len(e.object_labels) for e in events), [], 0)
    assets = _assets(events)
    obj_ids = {sha: i for i, sha in enumerate(sorted(assets), start=1)}
    depth_scale = _depth_scale(events)
    sensors = sorted({e.sensor for e in events})
    err = {"depth_mm": 0.0, "model_mm": 0.0, "pose_mm": 0.0}
    out = {"gt": [], "rolling_shutter": [], "displays": {}, "err": err}
    with staged_dir(out_dir) as stage:
        _write_models(stage, assets, obj_ids, err)
        K0 = np.asarray(events[0].manifest["calibration"]["K"], np.float64)
        W0, H0 = image_size(events[0])
        write_file(stage / "camera.json", _json({"cx": K0[0, 2], "cy": K0[1, 2], "fx": K0[0, 0], "fy": K0[1, 1],
                                                 "width": W0, "height": H0, "depth_scale": depth_scale}))
        for scene_id, sensor in enumerate(sensors, start=1):
            _write_scene(stage / split / f"{scene_id:06d}", scene_id, [ev for ev in events if ev.sensor == sensor],
                         assets, obj_ids, depth_scale, out)
        rs_table = out["rolling_shutter"]
        doc = sidecar("bop_scene", out_dir.name, {"bundle": str(bundle.path), "events": [e.sample_id for e in events]},
                      LOST, err, files=folder_listing(stage), split=split,
                      scenes={str(i): s for i, s in enumerate(sensors, start=1)},
                      pose_time="each event's reference_time_ns (event.reference_time_definition)",
                      obj_ids={str(i): sha for sha, i in obj_ids.items()}, gt=out["gt"], rolling_shutter=rs_table,
                      rolling_shutter_worst={"max_row_time_skew_ns": max((r["max_row_time_skew_ns"] for r in rs_table),
                                                                         default=0),
                                             "pixel_displacement_bound_px": max(
                                                 (r["pixel_displacement_bound_px"] for r in rs_table), default=0.0)},
                      depth_scale=depth_scale, units="mm", rgb_display=out["displays"])
        write_file(stage / FOLDER_SIDECAR, sidecar_bytes(doc))
    return doc


def _write_models(stage, assets: dict, obj_ids: dict, err: dict) -> None:
    """models/obj_NNNNNN.ply (vertices in mm, float32; the rounding's worst error into err["model_mm"]) and
    models/models_info.json (diameter and bounding box in mm) of every asset."""
    (stage / "models").mkdir()
    info = {}
    for sha, obj_id in obj_ids.items():
        verts, faces = assets[sha]
        mm = verts * 1000.0
        err["model_mm"] = max(err["model_mm"], float(np.abs(mm.astype(np.float32) - mm).max(initial=0.0)))
        write_file(stage / "models" / f"obj_{obj_id:06d}.ply",
                   mesh_ply_bytes(mm, faces, "float", (f"rowbeam asset sha256 {sha}", "units mm")))
        lo, hi = mm.min(axis=0), mm.max(axis=0)
        info[str(obj_id)] = {"diameter": diameter(mm), "min_x": float(lo[0]), "min_y": float(lo[1]),
                             "min_z": float(lo[2]), "size_x": float(hi[0] - lo[0]),
                             "size_y": float(hi[1] - lo[1]), "size_z": float(hi[2] - lo[2])}
    write_file(stage / "models" / "models_info.json", _json(info))


def _write_scene(scene, scene_id: int, events: list, assets: dict, obj_ids: dict, depth_scale: float,
                 out: dict) -> None:
    """One BOP scene folder (one sensor's events): depth/rgb/mask/mask_visib images and scene_camera / scene_gt /
    scene_gt_info JSON. Appends to out["gt"], out["rolling_shutter"], out["displays"]; worst depth rounding into
    out["err"]."""
    for sub in ("depth", "rgb", "mask", "mask_visib"):
        (scene / sub).mkdir(parents=True)
    cams, gts, gt_infos = {}, {}, {}
    for e in events:
        im = e.index
        K = np.asarray(e.manifest["calibration"]["K"], np.float64)
        T_cw = _camera_pose_at_reference(e)
        cams[str(im)] = {"cam_K": _flat(K), "depth_scale": depth_scale, "cam_R_w2c": _flat(T_cw[:3, :3]),
                         "cam_t_w2c": _flat(T_cw[:3, 3] * 1000.0),
                         "rowbeam_time_ns": e.reference_time_ns, "rowbeam_sample_id": e.sample_id}
        depth, derr = depth_png(e.array("camera_z"), e.array("valid"), depth_scale)
        out["err"]["depth_mm"] = max(out["err"]["depth_mm"], derr)
        write_file(scene / "depth" / f"{im:06d}.png", png_bytes(depth, 16))
        image, how = display_image(e)
        if image is not None:
            write_file(scene / "rgb" / f"{im:06d}.png", png_bytes(image, 8))
            out["displays"][e.sample_id] = how
        gts[str(im)], gt_infos[str(im)] = _write_objects(scene, scene_id, e, assets, obj_ids, out)
    write_file(scene / "scene_camera.json", _json(cams))
    write_file(scene / "scene_gt.json", _json(gts))
    write_file(scene / "scene_gt_info.json", _json(gt_infos))
    for sub in ("rgb",):
        if not any((scene / sub).iterdir()):
            (scene / sub).rmdir()


def _write_objects(scene, scene_id: int, e, assets: dict, obj_ids: dict, out: dict) -> tuple[list, list]:
    """Event `e`'s object masks (amodal, visible) as PNGs; its scene_gt and scene_gt_info lists (poses in mm)."""
    im = e.index
    valid = e.array("valid").astype(bool)
    gts, gt_infos = [], []
    for gt_id, label in enumerate(e.object_labels):
        T = np.asarray(label["T_camera_object_reference"], np.float64)
        obj_id = obj_ids[label["asset"]["sha256"]]
        gts.append({"cam_R_m2c": _flat(T[:3, :3]), "cam_t_m2c": _flat(T[:3, 3] * 1000.0), "obj_id": obj_id})
        amodal, modal = amodal_mask(e, label), modal_mask(e, label)
        all_px, visib = int(label["px_count_all"]), int(modal.sum())
        gt_infos.append({
            "bbox_obj": bop_box(label.get("bbox_amodal_unclipped")), "bbox_visib": _mask_bop_box(modal),
            "px_count_all": all_px, "px_count_valid": int((amodal & valid).sum()),
            "px_count_visib": visib, "visib_fract": visib / all_px if all_px else 0.0})
        write_file(scene / "mask" / f"{im:06d}_{gt_id:06d}.png", png_bytes(amodal.astype(np.uint8) * 255, 8))
        write_file(scene / "mask_visib" / f"{im:06d}_{gt_id:06d}.png", png_bytes(modal.astype(np.uint8) * 255, 8))
        rows = np.flatnonzero(amodal.any(axis=1))
        bound = rolling_shutter_bound(e, label, rows, assets[label["asset"]["sha256"]][0])
        out["gt"].append({"scene_id": scene_id, "im_id": im, "gt_id": gt_id, "obj_id": obj_id,
                          "rowbeam_id": str(label["id"]), "sample_id": e.sample_id})
        out["rolling_shutter"].append({"scene_id": scene_id, "im_id": im, "gt_id": gt_id,
                                       "rowbeam_id": str(label["id"]), **bound})
    return gts, gt_infos


def _arguments(p) -> None:
    bundle_to_folder(p)
    p.add_argument("--split", default="test", help="split folder name (default test)")


ADAPTER_FORMATS = (AdapterFormat(
    "bop", "BOP scene folders: scene_camera/scene_gt/scene_gt_info, depth, rgb, masks, models in mm", _arguments,
    lambda a: export_bop(a.bundle, a.out_dir, a.split)),)
