"""Object adapters (COCO, BOP, KITTI object) on the object calibration scene (80 x 45 px: squares whose projections
are known pixel rectangles, one half outside the image, one partly covered, a rotated box, a square moving at
150 m/s under a 12 ms rolling shutter), each read back by an independent reader: pycocotools for COCO; a BOP
reader written here from the BOP format facts (JSON files, 16-bit depth PNG, masks, PLY models in mm) whose masks
are re-rasterised here from the exported models, poses and cam_K; a KITTI devkit-format parser."""
from __future__ import annotations

import json
import math
import shutil

import cv2
import numpy as np
import pytest

from rowbeam.adapters.output import FOLDER_SIDECAR
from rowbeam.bundle.schema import schema_errors
from rowbeam.blender.scenes import calibration, object_scenes

from tests.conftest import run_python
from tests.helpers import load_event, object_scene_poses

W, H = 80, 45                       # object_calibration at scale 16


@pytest.fixture(scope="module")
def calib(exports):
    e = exports("object_calibration", object_scenes.object_calibration, first_event=1, count=1)
    m, a = load_event(e.event)
    return e, m, a, {o["name"]: o for o in m["object_labels"]["objects"]}


def _adapt(*args):
    return run_python("-m", "rowbeam", "adapt", *args)


def _ok(r):
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("rowbeam adapt: wrote") and not r.stderr.strip(), (r.stdout, r.stderr)


# ---------------------------------------------------------------- COCO

def test_coco_round_trips_through_pycocotools(calib, tmp_path):
    from pycocotools import mask as mask_utils
    from pycocotools.coco import COCO

    e, m, a, objs = calib
    out = tmp_path / "instances.json"
    _ok(_adapt("coco", e.bundle, out))
    coco = COCO(str(out))
    (img,) = coco.dataset["images"]
    assert (img["width"], img["height"]) == (W, H) and img["rowbeam_sample_id"] == m["sample_id"]
    assert {c["id"]: c["name"] for c in coco.dataset["categories"]}[9] == "calibration_target"
    anns = coco.loadAnns(coco.getAnnIds(imgIds=[img["id"]]))
    by_name = {}
    for ann in anns:
        ours = a["instance_id"] == ann["rowbeam_instance_id"]
        assert np.array_equal(coco.annToMask(ann).astype(bool), ours)
        assert ann["area"] == int(ours.sum()) == int(mask_utils.area(ann["segmentation"]))
        assert ann["bbox"] == mask_utils.toBbox(ann["segmentation"]).tolist()
        vs, us = np.nonzero(ours)
        assert ann["bbox"] == [us.min(), vs.min(), us.max() - us.min() + 1, vs.max() - vs.min() + 1]
        assert isinstance(ann["rowbeam_id"], str) and ann["iscrowd"] == 0
        by_name[next(o["name"] for o in objs.values() if o["id"] == ann["rowbeam_id"])] = ann
    assert len(anns) == len(objs) == 5                                  # every object is visible here
    # closed form: truncated u 59.5..99.5, v 10.5..20.5 -> visible columns 60..79; amodal columns 60..99
    assert by_name["truncated"]["bbox"] == [60, 11, 20, 10] and by_name["truncated"]["area"] == 200
    assert by_name["truncated"]["rowbeam_bbox_amodal"] == [60, 11, 40, 10]
    assert by_name["back"]["area"] == 300 - 50 and by_name["front"]["area"] == 100
    # the loader's canvas mask: truncated = 40 x 10 px, 20 columns beyond the right edge (u 80..99)
    from rowbeam.bundle.reader import open_event

    canvas = open_event(e.event).canvas_mask(objs["truncated"])
    assert canvas.shape == (3 * H, 3 * W) and canvas.sum() == 400 and canvas[H:2 * H, W:2 * W].sum() == 200
    vs, us = np.nonzero(canvas)
    assert (us.min() - W, us.max() - W, vs.min() - H, vs.max() - H) == (60, 99, 11, 20)
    side = json.loads((tmp_path / "instances.json.json").read_text())
    assert not schema_errors(side, "rowbeam/adapter_sidecar@1") and side["annotations"] == 5
    assert side["skipped"] == [] and side["max_rounding_error"] == {"px": 0.0}


def _edited_copy(e, tmp_path, edit):
    root = tmp_path / "bundle"
    shutil.copytree(e.bundle, root)
    path = root / e.event.relative_to(e.bundle) / "manifest.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))
    return root


def test_coco_skips_void_class_with_a_reason(calib, tmp_path):
    e, _, _, objs = calib

    def void_front(m):
        next(o for o in m["object_labels"]["objects"] if o["name"] == "front")["semantic_id"] = 2**32 - 1
    root = _edited_copy(e, tmp_path, void_front)
    r = _adapt("coco", root, tmp_path / "c.json")
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    assert r.stdout.rstrip().endswith("dropped 1 of 5 object label(s): 1 void class (no ontology class, no COCO "
                                      "category) ('front')"), r.stdout
    doc = json.loads((tmp_path / "c.json").read_text())
    assert objs["front"]["id"] not in {a["rowbeam_id"] for a in doc["annotations"]}
    side = json.loads((tmp_path / "c.json.json").read_text())
    assert side["skipped"] == [{"sample_id": doc["images"][0]["rowbeam_sample_id"], "id": objs["front"]["id"],
                                "name": "front", "reason": "void class (no ontology class, no COCO category)"}]


def test_coco_with_no_annotation_at_all_says_why_and_exits_2(calib, tmp_path):
    e, _, _, _ = calib

    def void_all(m):
        for o in m["object_labels"]["objects"]:
            o["semantic_id"] = 2**32 - 1
    root = _edited_copy(e, tmp_path, void_all)
    r = _adapt("coco", root, tmp_path / "c.json")
    assert r.returncode == 2 and not (tmp_path / "c.json").exists() and not (tmp_path / "c.json.json").exists()
    (line,) = r.stderr.strip().splitlines()
    assert "coco: no annotation to write: dropped 5 of 5 object label(s): 5 void class" in line, line
    assert "'truncated'" in line and "class_rules" in line


# ---------------------------------------------------------------- BOP

def _read_ply_models(path):
    """(vertices (N, 3), triangles (M, 3)) of a binary little-endian PLY with float/double x y z and uchar/int
    vertex_indices lists, per the PLY header grammar."""
    raw = path.read_bytes()
    end = raw.index(b"end_header\n") + len(b"end_header\n")
    types = {"float": "<f4", "double": "<f8", "uchar": "u1", "int": "<i4", "uint": "<u4"}
    elements, cur = [], None
    for line in raw[:end].decode().splitlines():
        w = line.split()
        if w[0] == "format":
            assert w[1] == "binary_little_endian"
        elif w[0] == "element":
            cur = [w[1], int(w[2]), []]
            elements.append(cur)
        elif w[0] == "property":
            cur[2].append(w[1:])
    pos, out = end, {}
    for name, n, props in elements:
        if props[0][0] == "list":
            dt = np.dtype([("n", types[props[0][1]]), ("i", types[props[0][2]], (3,))])
        else:
            dt = np.dtype([(p[1], types[p[0]]) for p in props])
        rec = np.frombuffer(raw, dt, n, pos)
        pos += dt.itemsize * n
        out[name] = rec
    assert pos == len(raw)
    v = out["vertex"]
    assert (out["face"]["n"] == 3).all()
    return np.stack([v["x"], v["y"], v["z"]], -1).astype(np.float64), out["face"]["i"].astype(np.int64)


def _raster(V_mm, F, R, t_mm, K, u_range, v_range):
    """Pixel centres (u, v) inside any projected triangle: an independent edge-function rasteriser."""
    P = (np.asarray(R) @ V_mm.T).T + np.asarray(t_mm)
    assert (P[:, 2] > 0).all()
    uv = np.stack([K[0, 0] * P[:, 0] / P[:, 2] + K[0, 1] * P[:, 1] / P[:, 2] + K[0, 2],
                   K[1, 1] * P[:, 1] / P[:, 2] + K[1, 2]], -1)
    us, vs = np.arange(*u_range), np.arange(*v_range)
    gu, gv = np.meshgrid(us, vs)
    mask = np.zeros(gu.shape, bool)
    for tri in F:
        a, b, c = uv[tri]
        area = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
        if abs(area) < 1e-12:
            continue
        s = np.sign(area)
        e0 = s * ((b[0] - a[0]) * (gv - a[1]) - (b[1] - a[1]) * (gu - a[0]))
        e1 = s * ((c[0] - b[0]) * (gv - b[1]) - (c[1] - b[1]) * (gu - b[0]))
        e2 = s * ((a[0] - c[0]) * (gv - c[1]) - (a[1] - c[1]) * (gu - c[0]))
        mask |= (e0 >= 0) & (e1 >= 0) & (e2 >= 0)
    return mask


def _bop_box(mask, x0=0, y0=0):
    vs, us = np.nonzero(mask)
    return [-1, -1, -1, -1] if not us.size else [int(us.min()) + x0, int(vs.min()) + y0, int(us.max() - us.min()),
                                                 int(vs.max() - vs.min())]


def test_bop_reader_reloads_and_masks_match_a_rerasterisation(calib, tmp_path):
    e, m, a, objs = calib
    out = tmp_path / "bop"
    _ok(_adapt("bop", e.bundle, out, "--split", "test"))
    cam = json.loads((out / "camera.json").read_text())
    assert (cam["width"], cam["height"]) == (W, H)
    scene = out / "test" / "000001"
    cams = json.loads((scene / "scene_camera.json").read_text())
    gts = json.loads((scene / "scene_gt.json").read_text())
    infos = json.loads((scene / "scene_gt_info.json").read_text())
    info_models = json.loads((out / "models" / "models_info.json").read_text())
    side = json.loads((out / FOLDER_SIDECAR).read_text())
    assert not schema_errors(side, "rowbeam/adapter_sidecar@1")
    im = str(e.event.name.lstrip("0") or "0")
    assert list(cams) == list(gts) == list(infos) == [im]
    K = np.array(cams[im]["cam_K"]).reshape(3, 3)
    ds = cams[im]["depth_scale"]
    assert ds == cam["depth_scale"]
    # camera pose (world -> camera, mm) against the scene's analytic camera
    T_wc = calibration.seed_pose()
    R_w2c, t_w2c = np.array(cams[im]["cam_R_w2c"]).reshape(3, 3), np.array(cams[im]["cam_t_w2c"])
    assert np.abs(R_w2c - T_wc[:3, :3].T).max() < 1e-6
    assert np.abs(t_w2c - (-T_wc[:3, :3].T @ T_wc[:3, 3]) * 1000).max() < 1e-2
    # depth: PNG x depth_scale = camera_z in mm (0 = no surface)
    depth = cv2.imread(str(scene / "depth" / f"{int(im):06d}.png"), cv2.IMREAD_UNCHANGED)
    assert depth.dtype == np.uint16 and depth.shape == (H, W)
    valid = a["valid"].astype(bool)
    assert np.abs(depth[valid] * ds - a["camera_z"][valid] * 1000).max() <= ds / 2 + 1e-6
    assert not depth[~valid].any()
    analytic = object_scene_poses(16)
    rs = {r["rowbeam_id"]: r for r in side["rolling_shutter"]}
    pose_err_mm, pose_err_rad, mismatch = 0.0, 0.0, {}
    for gt_id, (gt, info) in enumerate(zip(gts[im], infos[im], strict=True)):
        rowbeam_id = next(g["rowbeam_id"] for g in side["gt"] if g["gt_id"] == gt_id)
        name = next(n for n, o in objs.items() if o["id"] == rowbeam_id)
        V, F = _read_ply_models(out / "models" / f"obj_{gt['obj_id']:06d}.ply")
        mi = info_models[str(gt["obj_id"])]
        span = V.max(0) - V.min(0)
        assert [mi["size_x"], mi["size_y"], mi["size_z"]] == pytest.approx(span.tolist(), abs=1e-3)
        d = max(np.linalg.norm(V[i] - V, axis=1).max() for i in range(len(V)))
        assert mi["diameter"] == pytest.approx(d, abs=1e-3)
        R, t = np.array(gt["cam_R_m2c"]).reshape(3, 3), np.array(gt["cam_t_m2c"])
        if name in analytic:
            pose_err_mm = max(pose_err_mm, float(np.abs(t - analytic[name][:3, 3] * 1000).max()))
            c = (np.trace(R.T @ analytic[name][:3, :3]) - 1) / 2
            pose_err_rad = max(pose_err_rad, float(np.arccos(np.clip(c, -1, 1))))
        canvas = _raster(V, F, R, t, K, (-W, 2 * W), (-H, 2 * H))
        image = canvas[H:2 * H, W:2 * W]
        mask = cv2.imread(str(scene / "mask" / f"{int(im):06d}_{gt_id:06d}.png"), cv2.IMREAD_UNCHANGED) > 0
        visib = cv2.imread(str(scene / "mask_visib" / f"{int(im):06d}_{gt_id:06d}.png"), cv2.IMREAD_UNCHANGED) > 0
        assert np.array_equal(visib, a["instance_id"] == objs[name]["instance_id"]) and not (visib & ~mask).any()
        assert info["px_count_visib"] == int(visib.sum())
        assert info["px_count_valid"] == int((mask & valid).sum())
        assert info["visib_fract"] == pytest.approx(info["px_count_visib"] / info["px_count_all"])
        assert info["bbox_visib"] == _bop_box(visib)
        mismatch[name] = int((image != mask).sum())
        if objs[name]["motion"] == "static":
            assert info["px_count_all"] == int(canvas.sum()), name                  # 3x canvas, BOP's definition
            assert info["bbox_obj"] == _bop_box(canvas, -W, -H), name
            assert rs[rowbeam_id]["pixel_displacement_bound_px"] < 1e-6
        else:
            # one BOP pose per image: the rolling-shutter mask differs by at most the recorded bound per row
            bound = rs[rowbeam_id]["pixel_displacement_bound_px"]
            assert bound == pytest.approx(150.0 * rs[rowbeam_id]["max_row_time_skew_ns"] * 1e-9 * 50 / 10, rel=1e-3)
            for v in np.flatnonzero(mask.any(1) | image.any(1)):
                got, ref = np.flatnonzero(mask[v]), np.flatnonzero(image[v])
                assert abs(got.min() - ref.min()) <= bound + 0.5 and abs(got.max() - ref.max()) <= bound + 0.5
    print(f"BOP: static-object mask mismatch vs re-rasterisation {mismatch} px; poses vs analytic "
          f"{pose_err_mm:.2e} mm, {pose_err_rad:.2e} rad; depth rounding {side['max_rounding_error']['depth_mm']:.3f} mm;"
          f" rolling shutter worst {side['rolling_shutter_worst']}")
    assert all(v <= 2 for n, v in mismatch.items() if objs[n]["motion"] == "static"), mismatch
    assert pose_err_mm < 1e-2 and pose_err_rad < 1e-5


# ---------------------------------------------------------------- KITTI object

KITTI_FIELDS = ("type", "truncated", "occluded", "alpha", "x1", "y1", "x2", "y2", "h", "w", "l", "x", "y", "z",
                "rotation_y")


def _parse_kitti(path):
    """KITTI object devkit label format: 15 space-separated columns per object."""
    rows = []
    for line in path.read_text().splitlines():
        cols = line.split(" ")
        assert len(cols) == 15, line
        row = dict(zip(KITTI_FIELDS, [cols[0], *map(float, cols[1:])], strict=True))
        assert row["type"] in ("Car", "Van", "Truck", "Pedestrian", "Person_sitting", "Cyclist", "Tram", "Misc",
                               "DontCare")
        assert 0 <= row["truncated"] <= 1 and row["occluded"] in (0, 1, 2, 3)
        assert -math.pi <= row["alpha"] <= math.pi and -math.pi <= row["rotation_y"] <= math.pi
        rows.append(row)
    return rows


def _kitti_corners(r):
    """8 corners of a KITTI box in camera coordinates (devkit: location = bottom centre, y down, ry about y)."""
    x = np.array([1, 1, -1, -1, 1, 1, -1, -1]) * r["l"] / 2
    y = np.array([0, 0, 0, 0, -1, -1, -1, -1]) * r["h"]
    z = np.array([1, -1, -1, 1, 1, -1, -1, 1]) * r["w"] / 2
    c, s = math.cos(r["rotation_y"]), math.sin(r["rotation_y"])
    Ry = np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])
    return (Ry @ np.stack([x, y, z])).T + [r["x"], r["y"], r["z"]]


def _aabb_corners(o):
    T = np.array(o["T_camera_object_reference"])
    c, s = np.array(o["box3d"]["centre_m"]), np.array(o["box3d"]["size_m"])
    pts = np.array([[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)]) * s / 2 + c
    return (T[:3, :3] @ pts.T).T + T[:3, 3]


def _same_corners(A, B, tol):
    return all(np.linalg.norm(Y - p, axis=1).min() < tol for X, Y in ((A, B), (B, A)) for p in X)


def test_kitti_object_labels_parse_and_boxes_match_the_pose(calib, tmp_path):
    e, m, _, objs = calib

    def yaw_box(doc):                                   # the rotated box turned to a pure yaw of 0.7 rad about y
        o = next(o for o in doc["object_labels"]["objects"] if o["name"] == "box")
        c, s = math.cos(0.7), math.sin(0.7)
        T = np.array(o["T_camera_object_reference"])
        T[:3, :3] = [[c, 0, s], [0, 1, 0], [-s, 0, c]]
        o["T_camera_object_reference"] = T.tolist()
    root = _edited_copy(e, tmp_path, yaw_box)
    out = tmp_path / "kitti"
    _ok(_adapt("kitti-object", root, out))
    name = f"{int(e.event.name):06d}"
    rows = _parse_kitti(out / "label_2" / f"{name}.txt")
    side = json.loads((out / FOLDER_SIDECAR).read_text())
    assert not schema_errors(side, "rowbeam/adapter_sidecar@1") and side["skipped"] == []
    edited = {o["id"]: o for o in json.loads((root / e.event.relative_to(e.bundle) / "manifest.json").read_text())
              ["object_labels"]["objects"]}
    assert len(rows) == 5
    for row, entry in zip(rows, side["objects"], strict=True):
        o = edited[entry["id"]]
        assert _same_corners(_kitti_corners(row), _aabb_corners(o), 1e-5), (o["name"], row)
        x, y, w, h = o["bbox_amodal_clipped"]
        assert (row["x1"], row["y1"], row["x2"], row["y2"]) == (x, y, x + w - 1, y + h - 1)
        assert row["alpha"] == pytest.approx(
            (row["rotation_y"] - math.atan2(row["x"], row["z"]) + math.pi) % (2 * math.pi) - math.pi, abs=2e-6)
        assert row["truncated"] == pytest.approx(o["truncation_fraction"], abs=0.005)
    box = rows[[s["id"] for s in side["objects"]].index(objs["box"]["id"])]
    assert box["rotation_y"] == pytest.approx(0.7, abs=1e-6)                 # R_y(0.7) maps x to (cos, 0, -sin)
    assert (box["h"], box["w"], box["l"]) == pytest.approx((0.6, 0.4, 1.0), abs=1e-6)
    trunc = rows[[s["id"] for s in side["objects"]].index(objs["truncated"]["id"])]
    assert trunc["truncated"] == 0.5 and (trunc["x1"], trunc["x2"]) == (60, 79)
    back = rows[[s["id"] for s in side["objects"]].index(objs["back"]["id"])]
    assert back["occluded"] == 1                                              # 50 of 300 px covered
    calib_rows = dict(line.split(": ") for line in (out / "calib" / f"{name}.txt").read_text().splitlines())
    assert set(calib_rows) == {"P0", "P1", "P2", "P3", "R0_rect", "Tr_velo_to_cam", "Tr_imu_to_velo"}
    P2 = np.array(calib_rows["P2"].split(), float).reshape(3, 4)
    assert np.allclose(P2[:, :3], m["calibration"]["K"]) and not P2[:, 3].any()
    assert np.array(calib_rows["R0_rect"].split(), float).reshape(3, 3).tolist() == np.eye(3).tolist()
    # the real (35 deg tilted) box: skipped with the reason, never an invented box
    out2 = tmp_path / "kitti2"
    _ok(_adapt("kitti-object", e.bundle, out2))
    assert len(_parse_kitti(out2 / "label_2" / f"{name}.txt")) == 4
    (skip,) = json.loads((out2 / FOLDER_SIDECAR).read_text())["skipped"]
    assert skip["id"] == objs["box"]["id"] and "not rotated about an axis parallel to camera y" in skip["reason"]


# ---------------------------------------------------------------- errors

def test_object_adapter_errors_are_one_line_and_leave_nothing(calib, tmp_path):
    e, _, _, _ = calib
    bare = _edited_copy(e, tmp_path, lambda m: m.pop("object_labels"))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    before = sorted(p.name for p in tmp_path.iterdir())
    cases = [(("coco", bare, tmp_path / "c.json"), "no camera events with object labels"),
             (("bop", bare, tmp_path / "b"), "no camera events with object labels"),
             (("kitti-object", bare, tmp_path / "k"), "no camera events with object labels"),
             (("coco", e.bundle, e.event / "c.json"), "inside the bundle"),
             (("bop", e.bundle, busy), "not empty"),
             (("bop", e.bundle, tmp_path / "b", "--split", "../x"), "plain folder name"),
             (("kitti-object", e.bundle, tmp_path / "k", "--sensor", "nope"), "no events of sensor 'nope'")]
    for args, fragment in cases:
        r = _adapt(*args)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, (args, r.stderr)
        assert lines[0].startswith(f"rowbeam adapt {args[0]}: error:") and fragment in lines[0], (args, lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# ---------------------------------------------------------------- camera + LiDAR: the KITTI calibration chain

def calib_with_lidar():
    """The object calibration scene plus a static LiDAR mount 0.5 m above the camera, its x axis along the
    camera's optical axis (LiDAR z up = camera -y)."""
    import bpy

    from rowbeam.blender.scenes import common

    truth, rig = object_scenes.object_calibration()
    T_wc = calibration.seed_pose()
    M = np.eye(4)
    M[:3, 0], M[:3, 1], M[:3, 2] = T_wc[:3, 2], -T_wc[:3, 0], -T_wc[:3, 1]
    M[:3, 3] = T_wc[:3, 3] - 0.5 * T_wc[:3, 1]
    mount = common.add_empty("lidar_mount")
    mount.matrix_world = common.Matrix(M.tolist())
    bpy.context.view_layer.update()
    rig["sensors"] += common.lidar_rig("lidar_top", mount.name, azimuth_steps=512, preset="uniform_32")["sensors"]
    truth["T_world_lidar"] = M
    return truth, rig


def test_kitti_calib_chain_projects_velodyne_points_onto_camera_depth(exports, tmp_path):
    """Tr_velo_to_cam (from the LiDAR firing at the camera's reference time) equals the analytic mount pose in the
    camera frame, and velodyne .bin points mapped by calib's Tr_velo_to_cam, R0_rect and P2 land on pixels whose
    camera_z is the point's depth (flat, fronto-parallel targets), or lie behind it (parallax occlusion)."""
    e = exports("object_calibration_lidar", calib_with_lidar, events={"camera_front": (1, 1), "lidar_top": (0, 1)})
    cam_event = next(p for p in map(__import__("pathlib").Path, e.summary["published"]) if "camera_front" in p.parts)
    _, a = load_event(cam_event)
    _ok(_adapt("kitti-object", e.bundle, tmp_path / "ko"))
    _ok(_adapt("kitti-lidar", e.bundle, tmp_path / "kl"))
    rows = {k: np.array(v.split(), float) for k, v in (line.split(": ") for line in
            (tmp_path / "ko" / "calib" / f"{int(cam_event.name):06d}.txt").read_text().splitlines())}
    Tr = np.vstack([rows["Tr_velo_to_cam"].reshape(3, 4), [0, 0, 0, 1]])
    truth = np.linalg.inv(calibration.seed_pose()) @ e.truth["T_world_lidar"]
    assert np.abs(Tr - truth).max() < 1e-5, Tr
    pts = np.fromfile(tmp_path / "kl" / "velodyne" / "000000.bin", "<f4").reshape(-1, 4)[:, :3].astype(np.float64)
    p_cam = (rows["R0_rect"].reshape(3, 3) @ (Tr[:3, :3] @ pts.T + Tr[:3, 3:4])).T
    uvw = (rows["P2"].reshape(3, 4) @ np.hstack([p_cam, np.ones((len(p_cam), 1))]).T).T
    front = uvw[:, 2] > 0
    u, v = np.rint(uvw[front, 0] / uvw[front, 2]).astype(int), np.rint(uvw[front, 1] / uvw[front, 2]).astype(int)
    z = p_cam[front, 2]
    inside = (u >= 1) & (u < W - 1) & (v >= 1) & (v < H - 1)
    checked = 0
    for uu, vv, zz in zip(u[inside], v[inside], z[inside], strict=True):
        patch = a["camera_z"][vv - 1:vv + 2, uu - 1:uu + 2]
        if np.isnan(patch).any() or patch.max() - patch.min() > 1e-5:
            continue                               # an edge or the tilted box: depth varies within a pixel
        # never in front of what the camera sees; equal unless hidden from the camera (the LiDAR is 0.5 m higher)
        assert zz > patch[1, 1] - 1e-4, (uu, vv, zz, patch[1, 1])
        checked += abs(zz - patch[1, 1]) < 1e-4
    print(f"KITTI calib chain: {checked} LiDAR points on flat targets match camera_z within 1e-4 m")
    assert checked >= 20


def test_bop_depth_and_rgb_encodings():
    from rowbeam.adapters.bop import bop_box, depth_png, srgb8

    assert srgb8(np.array([[[0.0, 0.0031308, 0.5], [1.0, 2.0, np.nan]]])).tolist() == [[[0, 10, 188], [255, 255, 0]]]
    z = np.array([[1.23456, np.nan]], np.float32)
    d, err = depth_png(z, np.array([[1, 0]], np.uint8), 0.1)
    assert d.tolist() == [[12346, 0]] and err == pytest.approx(abs(12346 * 0.1 - float(z[0, 0]) * 1000))
    assert bop_box([60, 11, 40, 10]) == [60, 11, 39, 9] and bop_box(None) == [-1, -1, -1, -1]
    from rowbeam.adapters.mesh import diameter

    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 50, 1500, 4):                # pruned search == brute force (4: a square prunes everything)
        v = rng.normal(size=(n, 3)) * [3, 1, 0.2] if n != 4 else np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0.0]])
        assert diameter(v) == pytest.approx(np.sqrt(((v[:, None] - v[None]) ** 2).sum(-1).max()), abs=1e-12)


def test_bop_failure_while_writing_leaves_nothing(calib, tmp_path, monkeypatch):
    from rowbeam.adapters import bop
    from rowbeam.util.errors import RowbeamError

    e = calib[0]
    real, calls = bop.write_file, []

    def fail_on_fifth(path, data):
        calls.append(path)
        if len(calls) == 5:
            raise RowbeamError(f"{path}: cannot write (No space left on device)")
        real(path, data)
    monkeypatch.setattr(bop, "write_file", fail_on_fifth)
    with pytest.raises(RowbeamError, match="No space left"):
        bop.export_bop(e.bundle, tmp_path / "bop")
    assert len(calls) == 5 and list(tmp_path.iterdir()) == []          # no OUT_DIR, no staging sibling


# ---------------------------------------------------------------- images users can open

def _with_rgb_standard_exposure(exposure):
    """The object calibration scene with an RGB render, the Standard view transform and `exposure` stops."""
    import bpy

    truth, rig = object_scenes.object_calibration()
    rig["sensors"][0]["rgb_samples"] = 1
    bpy.context.scene.view_settings.view_transform = "Standard"
    bpy.context.scene.view_settings.exposure = exposure
    return truth, rig


def test_formats_get_colour_managed_srgb_pngs_of_the_rgb(exports, tmp_path):
    """rgb_display = the sRGB transfer of rgb x 2^exposure (the Standard view transform's closed form, 0 LSB), and
    COCO (file_name beside the JSON), BOP (rgb/) and KITTI (image_2/) PNGs decode to exactly it."""
    from rowbeam.adapters.objects import srgb8

    e = exports("object_calibration_rgb", _with_rgb_standard_exposure, exposure=0.5, first_event=1, count=1)
    m, a = load_event(e.event)
    assert a["rgb_display"].dtype == np.uint8 and a["rgb_display"].shape == (H, W, 3)
    assert np.abs(a["rgb_display"].astype(int) - srgb8(a["rgb"] * 2 ** 0.5)).max() == 0
    how = m["method"]["rgb_display"]
    assert (how["view_transform"], how["exposure_stops"], how["display_device"]) == ("Standard", 0.5, "sRGB")
    want = a["rgb_display"][..., ::-1]                                      # cv2 decodes BGR
    out = tmp_path / "coco" / "instances.json"
    out.parent.mkdir()
    _ok(_adapt("coco", e.bundle, out))
    (img,) = json.loads(out.read_text())["images"]
    assert img["file_name"] == f"instances_images/{m['sample_id']}.png"
    assert np.array_equal(cv2.imread(str(out.parent / img["file_name"]), cv2.IMREAD_UNCHANGED), want)
    assert json.loads((tmp_path / "coco" / "instances.json.json").read_text())["images"][img["file_name"]] == how
    _ok(_adapt("bop", e.bundle, tmp_path / "bop"))
    (png,) = (tmp_path / "bop").glob("test/000001/rgb/*.png")
    assert np.array_equal(cv2.imread(str(png), cv2.IMREAD_UNCHANGED), want)
    _ok(_adapt("kitti-object", e.bundle, tmp_path / "kitti"))
    (png,) = (tmp_path / "kitti" / "image_2").glob("*.png")
    assert np.array_equal(cv2.imread(str(png), cv2.IMREAD_UNCHANGED), want)
