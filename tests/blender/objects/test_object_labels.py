"""Object labels: exact amodal masks on the 3x canvas, counts, boxes, fractions and poses against
closed form on a calibration scene (squares whose projections are known pixel rectangles, a rotated box, a
square moving along camera x under a rolling shutter); the checker's independent re-rasterisation and the
faults it must catch; bad input."""
from __future__ import annotations

import json
import shutil
from fractions import Fraction

import numpy as np
import pytest

from rowbeam.util.errors import RowbeamError
from rowbeam.model.frames import invert_rigid
from rowbeam.check.object_checks import object_masks, tight_box
from rowbeam.check.rasterize import ply_bytes, rasterize_rows, read_ply
from rowbeam.blender.scenes import object_scenes

from tests.helpers import failures, load_event, load_payload, object_scene_poses, save_payload

SCALE = 16          # 80 x 45 px, f = 50, c = (40, 22.5)


@pytest.fixture(scope="module")
def calib(exports):
    e = exports("object_calibration", object_scenes.object_calibration, first_event=1, count=1)
    m, a = load_event(e.event)
    return e, m, a, {o["name"]: o for o in m["object_labels"]["objects"]}


def _rect_count(u0, u1, v0, v1, W=None, H=None):
    """Pixel centres (integers) strictly inside [u0, u1] x [v0, v1], optionally clipped to the image."""
    us = np.arange(np.ceil(u0), np.floor(u1) + 1)
    vs = np.arange(np.ceil(v0), np.floor(v1) + 1)
    if W is not None:
        us, vs = us[(us >= 0) & (us < W)], vs[(vs >= 0) & (vs < H)]
    return len(us) * len(vs)


def _rot_err(R1, R2) -> float:
    c = (np.trace(np.asarray(R1)[:3, :3].T @ np.asarray(R2)[:3, :3]) - 1) / 2
    return float(np.arccos(np.clip(c, -1, 1)))


def test_rasteriser_closed_form_and_ply_roundtrip():
    """No bpy: a square projecting to u 9.5..29.5, v 4.5..14.5 covers 20 x 10 centres; a per-row pose moving
    it 0.25 px per row shears it; PLY bytes round-trip."""
    K = np.array([[100.0, 0, 39.5], [0, 100.0, 22.0], [0, 0, 1]])
    z = 10.0
    X = lambda u: (u - 39.5) * z / 100      # noqa: E731
    Y = lambda v: (v - 22.0) * z / 100      # noqa: E731
    V = np.array([[X(9.5), Y(4.5), z], [X(29.5), Y(4.5), z], [X(29.5), Y(14.5), z], [X(9.5), Y(14.5), z]])
    F = np.array([[0, 1, 2], [0, 2, 3]])
    rows = np.arange(-45, 90)
    m = rasterize_rows(V, F, K, np.eye(4), rows, 240, -80)
    assert m.sum() == 200 and tight_box(m, -80, -45) == [10, 5, 20, 10]
    T = np.repeat(np.eye(4)[None], len(rows), 0)
    T[:, 0, 3] = 0.25 * rows * z / 100 + 0.01          # row v shifted by 0.25 v + 0.1 px
    m = rasterize_rows(V, F, K, T, rows, 240, -80)
    for v in range(5, 15):
        us = np.nonzero(m[v + 45])[0] - 80
        assert us.min() == np.ceil(9.5 + 0.25 * v + 0.1) and us.max() == np.floor(29.5 + 0.25 * v + 0.1)
    V2, F2 = read_ply(ply_bytes(V, F))
    assert np.array_equal(V, V2) and np.array_equal(F, F2)


def test_truncated_square_counts_and_boxes_exact(calib):
    """u 59.5..99.5 x v 10.5..20.5 on an 80-wide image: 400 px on the canvas, 200 inside, truncation 1/2."""
    _, m, a, objs = calib
    o = objs["truncated"]
    assert (o["px_count_all"], o["px_count_in_image"], o["px_count_visib"]) == (400, 200, 200)
    assert o["truncation_fraction"] == 0.5 and o["visib_fract"] == 0.5 and o["occlusion_fraction"] == 0.0
    assert o["bbox_amodal_unclipped"] == [60, 11, 40, 10]
    assert o["bbox_amodal_clipped"] == o["bbox_modal"] == [60, 11, 20, 10]
    assert o["canvas_mask_index"] is not None
    img, canvas = object_masks(m["object_labels"], a, 80, 45, o)
    assert canvas[45 + 11:45 + 21, 80 + 60:80 + 100].all() and canvas.sum() == 400
    assert m["modalities"]["amodal_masks"]["shape"][1:] == [45, 10]


def test_occlusion_exact(calib):
    """front (u 19.5..39.5, v 29.5..34.5, z 6) covers 10 x 5 of back (u 9.5..29.5, v 24.5..39.5, z 12)."""
    _, _, _, objs = calib
    back, front = objs["back"], objs["front"]
    assert (back["px_count_all"], back["px_count_in_image"], back["px_count_visib"]) == (300, 300, 250)
    assert back["occlusion_fraction"] == pytest.approx(50 / 300, abs=1e-15) and back["truncation_fraction"] == 0
    assert back["bbox_modal"] == back["bbox_amodal_clipped"] == [10, 25, 20, 15]
    assert (front["px_count_all"], front["px_count_visib"], front["occlusion_fraction"]) == (100, 100, 0.0)


def test_static_poses_and_box3d_vs_analytic(calib):
    """T_camera_object of the static objects equals the analytic placement (camera frame); box3d = mesh box."""
    _, m, _, objs = calib
    truth = object_scenes.object_calibration.__defaults__      # noqa: F841 (documented defaults)
    from rowbeam.blender.scenes import calibration
    T = calibration.seed_pose()
    poses = object_scene_poses(SCALE)
    worst_t, worst_r = 0.0, 0.0
    for name in ("truncated", "back", "front", "box"):
        got = np.array(objs[name]["T_camera_object_reference"])
        worst_t = max(worst_t, float(np.abs(got[:3, 3] - poses[name][:3, 3]).max()))
        worst_r = max(worst_r, _rot_err(got, poses[name]))
        if objs[name]["centroid_row"] is not None:
            assert np.allclose(objs[name]["T_camera_object_centroid_row"], got, atol=1e-9)
    print(f"static pose error vs analytic: {worst_t:.2e} m, {worst_r:.2e} rad")
    assert worst_t < 1e-5 and worst_r < 1e-5, (worst_t, worst_r)      # Blender stores matrices in float32
    assert objs["box"]["box3d"]["size_m"] == pytest.approx([1.0, 0.6, 0.4], abs=1e-6)
    assert objs["box"]["box3d"]["centre_m"] == pytest.approx([0, 0, 0], abs=1e-6)
    assert np.allclose(m["calibration"]["T_camera_world"]["matrix"], invert_rigid(T), atol=1e-6)


def test_moving_square_per_row_poses_and_mask_vs_closed_form(calib):
    """The mover (1.2 m square at camera z 10, x = -4.63 + 150 t) under a 12 ms top-to-bottom readout: each
    canvas row's pose and each image row's amodal span equal the closed form at that row's time."""
    _, m, a, objs = calib
    o = objs["mover"]
    assert o["motion"] == "moving" and o["row_pose_index"] == 0
    T_wc = a["canvas_row_T_world_camera"]
    T_wo = a["object_row_T_world_object"][0]
    t = a["canvas_row_time_ns"].astype(np.float64) / 1e9
    x_true = -4.63 + 150.0 * t
    T_co = np.einsum("rij,rjk->rik", np.linalg.inv(T_wc), T_wo)
    err = max(np.abs(T_co[:, 0, 3] - x_true).max(), np.abs(T_co[:, 1:3, 3] - [-1.2, 10.0]).max())
    print(f"moving object per-row pose error vs analytic: {err:.2e} m over {len(t)} canvas rows")
    assert err < 1e-5                       # Blender's float32 matrices at ~20 m from the origin
    # closed-form amodal span of every image row at its own time
    img, _ = object_masks(m["object_labels"], a, 80, 45, o)
    H = 45
    for v in range(45):
        tv = Fraction(int(a["canvas_row_time_ns"][H + v]), 10**9)
        uc = 40 + (-4.63 + 150 * float(tv)) * 5
        inside = 13.5 <= v <= 19.5
        us = np.nonzero(img[v])[0]
        if not inside:
            assert us.size == 0
        else:
            assert us.min() == np.ceil(uc - 3) and us.max() == np.floor(uc + 3), (v, uc, us)
    # pose at the centroid row: analytic x at that row's time
    c = o["centroid_row"]
    got = np.array(o["T_camera_object_centroid_row"])
    assert abs(got[0, 3] - (-4.63 + 150.0 * o["centroid_row_time_ns"] / 1e9)) < 1e-5
    assert c == int(np.floor(np.nonzero(a["instance_id"] == o["instance_id"])[0].mean() + 0.5))


def test_checker_passes_with_zero_mismatch(calib):
    e, m, _, _ = calib
    report, fails = failures(e.bundle)
    assert report["status"] == "pass", fails
    (r,) = [c for ev in report["events"] for c in ev["checks"] if c["check"] == "objects:rasterisation"]
    assert r["values"]["violation_px"] == 0
    print("mask mismatch vs independent rasterisation:", r["values"]["mismatch_px"], "px")
    assert r["values"]["mismatch_px"] <= 2


def _copy(e, tmp_path):
    root = tmp_path / "bundle"
    shutil.copytree(e.bundle, root)
    return root, sorted((root / "events").glob("*/*"))[0]


def _edit(folder, fn):
    p = folder / "manifest.json"
    m = json.loads(p.read_text())
    fn(m)
    p.write_text(json.dumps(m))


def _obj(m, name):
    return next(o for o in m["object_labels"]["objects"] if o["name"] == name)


def _fails(root):
    _, fails = failures(root)
    return {f["check"] for f in fails}


def _asset(root, ev, name):
    """(V, F) of the named object's exported asset."""
    o = _obj(json.loads((ev / "manifest.json").read_text()), name)
    return read_ply((root / o["asset"]["uri"]).read_bytes())


def _readdress_asset(root, ev, name, V, F):
    """Write (V, F) as a new content-addressed asset and point the object (uri, sha256, box3d) at it."""
    import hashlib
    data = ply_bytes(V, F)
    sha = hashlib.sha256(data).hexdigest()
    (root / "assets" / "meshes" / f"{sha}.ply").write_bytes(data)
    lo, hi = V.min(0), V.max(0)

    def edit(m):
        ob = _obj(m, name)
        ob["asset"].update(uri=f"assets/meshes/{sha}.ply", sha256=sha)
        ob["box3d"].update(centre_m=((lo + hi) / 2).tolist(), size_m=(hi - lo).tolist())
    _edit(ev, edit)


def test_checker_catches_mask_bit_flip(calib, tmp_path):
    root, ev = _copy(calib[0], tmp_path)
    arr = load_payload(ev, "amodal_masks").copy()
    o = _obj(json.loads((ev / "manifest.json").read_text()), "back")
    arr[o["mask_index"], 2, 0] ^= 0x80           # pixel (0, 2): far from every object
    save_payload(ev, "amodal_masks", arr)
    assert {"objects:counts", "objects:boxes", "objects:rasterisation"} <= _fails(root)


def test_checker_catches_modal_pixel_outside_amodal_mask(calib, tmp_path):
    """One visible pixel of 'back' cleared from its amodal mask: the subset rule (modal within amodal) fails."""
    root, ev = _copy(calib[0], tmp_path)
    o = _obj(json.loads((ev / "manifest.json").read_text()), "back")
    ids = load_event(ev)[1]["instance_id"]
    r, c = np.argwhere(ids == o["instance_id"])[0]
    arr = load_payload(ev, "amodal_masks").copy()
    arr[o["mask_index"], r, c >> 3] &= ~np.uint8(0x80 >> (c & 7))
    save_payload(ev, "amodal_masks", arr)
    assert {"objects:subset", "objects:counts"} <= _fails(root)


def test_checker_catches_canvas_mask_differing_inside_the_image(calib, tmp_path):
    """A bit of 'truncated''s canvas mask flipped inside the image region: canvas and image masks disagree."""
    root, ev = _copy(calib[0], tmp_path)
    m, _ = load_event(ev)
    o = _obj(m, "truncated")
    W, H = m["calibration"]["image_size_px"]
    arr = load_payload(ev, "amodal_masks_canvas").copy()
    r, c = H + H // 2, W + W // 2
    arr[o["canvas_mask_index"], r, c >> 3] ^= np.uint8(0x80 >> (c & 7))
    save_payload(ev, "amodal_masks_canvas", arr)
    assert "objects:subset" in _fails(root)


def test_checker_catches_count_off_by_one(calib, tmp_path):
    root, ev = _copy(calib[0], tmp_path)
    _edit(ev, lambda m: _obj(m, "truncated").update(px_count_all=401))
    assert "objects:counts" in _fails(root)


def test_checker_catches_loose_box(calib, tmp_path):
    root, ev = _copy(calib[0], tmp_path)
    _edit(ev, lambda m: _obj(m, "back").update(bbox_modal=[9, 25, 21, 15]))
    assert _fails(root) == {"objects:boxes"}


def test_checker_catches_moved_asset_vertex(calib, tmp_path):
    """A vertex moved 2 cm in a re-addressed asset (sha256 and uri updated): only the re-rasterisation fails."""
    root, ev = _copy(calib[0], tmp_path)
    V, F = _asset(root, ev, "back")
    V[0] *= 1.2                                      # a corner outward by 20 %: ~2 px on the image
    _readdress_asset(root, ev, "back", V, F)
    assert {"objects:rasterisation"} <= _fails(root) <= {"objects:rasterisation", "objects:ray_cast"}


def test_ray_cast_closed_form_rows_and_clip_planes():
    """No bpy: the checker's second path. A square spanning u 9.5..29.5, v 4.5..14.5 at z = 10 m; row v's pose
    shifts it by 0.25 v + 0.1 px: pixel centres inside/outside follow the closed form; a clip plane beyond the
    square (near = 11 m) hides it; centres 0.01 px from an edge are not judged."""
    from rowbeam.check.ray_cast import ray_hits, robust_hits
    K = np.array([[100.0, 0, 39.5], [0, 100.0, 22.0], [0, 0, 1]])
    z = 10.0
    V = np.array([[(u - 39.5) * z / 100, (v - 22.0) * z / 100, z] for u, v in
                  ((9.5, 4.5), (29.5, 4.5), (29.5, 14.5), (9.5, 14.5))])
    F = np.array([[0, 1, 2], [0, 2, 3]])
    u, v = np.meshgrid(np.arange(0, 60), np.arange(0, 30))
    u, v = u.ravel().astype(float), v.ravel().astype(float)
    T = np.repeat(np.eye(4)[None], u.size, 0)
    T[:, 0, 3] = (0.25 * v + 0.1) * z / 100
    shift = 0.25 * v + 0.1
    truth = (u >= 9.5 + shift) & (u <= 29.5 + shift) & (v >= 4.5) & (v <= 14.5)
    assert np.array_equal(ray_hits(V, F, K, T, np.stack([u, v], 1)), truth)
    assert not ray_hits(V, F, K, T, np.stack([u, v], 1), near=11.0).any()
    assert np.array_equal(ray_hits(V, F, K, T, np.stack([u, v], 1), near=0.1, far=10.5), truth)
    edge = np.array([[9.5 + 0.1 + 0.01, 8.0], [9.5 + 0.1 - 0.01, 8.0]])        # row 8: shift 2.1 px
    edge[:, 0] += 2.0
    inside, outside = robust_hits(V, F, K, np.eye(4)[None].repeat(2, 0) @ _shift_T(2.1 * z / 100), edge)
    assert not inside.any() and not outside.any()


def _shift_T(x):
    T = np.eye(4)
    T[0, 3] = x
    return T


def test_ray_cast_agrees_with_the_rasteriser_on_a_random_mesh():
    """Two independent algorithms (scanline edge functions vs Möller–Trumbore) on 40 random triangles with a
    per-row pose: every pixel centre the ray cast judges (not within 0.02 px of an edge) agrees."""
    from rowbeam.check.ray_cast import robust_hits
    rng = np.random.default_rng(3)
    K = np.array([[60.0, 0, 31.5], [0, 55.0, 17.25], [0, 0, 1]])
    V = rng.uniform([-2, -1.2, 4], [2, 1.2, 9], (60, 3))
    F = rng.integers(0, 60, (40, 3))
    rows = np.arange(-10, 45)
    T = np.repeat(np.eye(4)[None], len(rows), 0)
    T[:, 0, 3] = 0.004 * rows
    m = rasterize_rows(V, F, K, T, rows, 84, -10)
    r, c = np.nonzero(np.ones_like(m))
    inside, outside = robust_hits(V, F, K, T[r], np.stack([c - 10.0, rows[r]], 1).astype(float))
    truth = m[r, c]
    assert (inside | outside).mean() > 0.95 and 200 < truth.sum() < truth.size - 200
    assert not (truth & outside).any() and not (~truth & inside).any()


def test_checker_ray_cast_catches_what_a_shared_rasteriser_would_hide(calib, tmp_path, monkeypatch):
    """The exporter and the checker share rowbeam.check.rasterize for rigid objects: if it were wrong, the
    rasterisation check would agree with a wrong mask. Emulated: the checker's rasteriser returns the exported
    mask, and the asset is scaled by 1.15 (its silhouette grows by px everywhere): the ray cast alone fails."""
    from rowbeam.check import object_checks
    root, ev = _copy(calib[0], tmp_path)
    V, F = _asset(root, ev, "back")
    _readdress_asset(root, ev, "back", V * 1.15, F)
    W, H = calib[1]["calibration"]["image_size_px"]
    monkeypatch.setattr(object_checks, "rasterise_object_box", lambda manifest, arrays, ob, V, F, margin_px=0.0,
                        T_cw=None: object_checks.canvas_mask_box(arrays, W, H, ob))
    assert _fails(root) == {"objects:ray_cast"}


def test_bad_input_curve_without_geometry_and_non_uniform_scale(exports):
    e = exports("object_bad_input", object_scenes.object_bad_input, first_event=1, count=1)
    m, _ = load_event(e.event)
    skipped = m["object_labels"]["skipped"]
    reasons = {s["name"]: s["reason"] for s in skipped}
    assert "without mesh geometry" in reasons["empty_curve"]
    scaled = _obj(m, "scaled")
    assert any("non-uniform scale" in n for n in scaled["notes"])
    assert scaled["px_count_all"] == 200 and scaled["bbox_modal"] == [40, 25, 20, 10]
    blink = [o for o in m["object_labels"]["objects"] if o["name"] == "blink"]
    assert "hidden (hide_render) during part" in (reasons.get("blink") or " ".join(blink[0]["notes"] if blink else []))
    assert "collection_instancer" not in reasons                  # its instance is an object of its own
    (row,) = [o for o in m["objects"] if o.get("instance", {}).get("instancer") == "collection_instancer"]
    assert row["instance"]["object"] == "instanced_quad" and row["id_source"] == "instance_path_name_hash_unstable"
    label = next(o for o in m["object_labels"]["objects"] if o["instance_id"] == row["render_index"])
    assert label["px_count_visib"] == label["px_count_all"] == 200 and label["bbox_modal"] == [10, 28, 20, 10]
    _, a = load_event(e.event)
    assert (a["instance_id"][28:38, 10:30] == row["render_index"]).all()    # 20 x 10 px, closed form
    assert (a["instance_id"] == row["render_index"]).sum() == 200
    assert m["method"]["derivation"]["unresolved_hit_pixels"] == 0
    assert failures(e.bundle)[0]["status"] == "pass"


def test_bad_input_negative_scale_refused(tmp_path, monkeypatch):
    """Refused at planning time, before anything renders, by one line naming the object."""
    from rowbeam.blender.cycles import cycles_setup
    from tests.conftest import build_and_export

    def no_render(*a, **k):
        raise AssertionError("rendered before refusing the negative scale")
    monkeypatch.setattr(cycles_setup, "render_passes", no_render)
    with pytest.raises(RowbeamError, match="object 'scaled': negative .*scale") as exc:
        build_and_export(tmp_path, "neg", object_scenes.object_bad_input, kind="negative_scale")
    assert "\n" not in str(exc.value)
    assert not list((tmp_path / "neg_bundle").glob("events/*/*"))


def test_bottom_to_top_readout(exports):
    """Bottom-to-top readout renders through the rolled child camera: the same closed-form counts, the checker's
    per-row re-rasterisation passes, and the mover's image rows follow the reversed row times."""
    e = exports("object_calibration_btt", object_scenes.object_calibration, first_event=1, count=1,
                direction="bottom_to_top")
    m, a = load_event(e.event)
    objs = {o["name"]: o for o in m["object_labels"]["objects"]}
    assert (objs["truncated"]["px_count_all"], objs["truncated"]["px_count_in_image"]) == (400, 200)
    assert objs["truncated"]["bbox_amodal_unclipped"] == [60, 11, 40, 10]
    assert (objs["back"]["px_count_visib"], objs["back"]["px_count_all"]) == (250, 300)
    assert a["canvas_row_time_ns"][0] > a["canvas_row_time_ns"][-1]
    img, _ = object_masks(m["object_labels"], a, 80, 45, objs["mover"])
    for v in range(14, 20):
        uc = 40 + (-4.63 + 150 * a["canvas_row_time_ns"][45 + v] / 1e9) * 5
        us = np.nonzero(img[v])[0]
        assert us.min() == np.ceil(uc - 3) and us.max() == np.floor(uc + 3), (v, uc, us)
    report, fails = failures(e.bundle)
    assert report["status"] == "pass", fails


def test_unoccluded_shortcut_and_rasterised_masks_equal_rendering_every_object(calib, tmp_path, monkeypatch):
    """Objects nothing can cover take amodal = modal and rigid ones are rasterised from their assets (the
    default); rendering every object with Cycles instead (an independent second path) gives the same masks
    and counts, the mover's per-row shear and the truncated square's off-image half included."""
    from rowbeam.blender.objects import object_labels
    from tests.conftest import build_and_export
    e0, m0, a0, objs0 = calib
    assert m0["object_labels"]["method"]["objects_from_modal"] >= 1
    assert m0["object_labels"]["method"]["objects_rasterised"] >= 3
    assert m0["object_labels"]["method"]["modal_pixels_added"] == 0
    monkeypatch.setattr(object_labels, "SHORTCUT_UNOCCLUDED", False)
    monkeypatch.setattr(object_labels, "RASTERISE_RIGID", False)
    e1 = build_and_export(tmp_path, "all_rendered", object_scenes.object_calibration)
    m1, a1 = load_event(e1.event)
    assert m1["object_labels"]["method"]["objects_from_modal"] == 0
    assert m1["object_labels"]["method"]["objects_rasterised"] == 0
    for o1 in m1["object_labels"]["objects"]:
        o0 = objs0[o1["name"]]
        for key in ("px_count_all", "px_count_in_image", "px_count_visib", "bbox_amodal_unclipped"):
            assert o0[key] == o1[key], (o1["name"], key)
        assert np.array_equal(object_masks(m0["object_labels"], a0, 80, 45, o0)[1],
                              object_masks(m1["object_labels"], a1, 80, 45, o1)[1])


def test_checker_catches_changed_asset_bytes(calib, tmp_path):
    """An asset whose bytes no longer match its content address fails the re-rasterisation check by name."""
    root, ev = _copy(calib[0], tmp_path)
    o = _obj(json.loads((ev / "manifest.json").read_text()), "box")
    p = root / o["asset"]["uri"]
    p.write_bytes(p.read_bytes()[:-1] + b"\x01")
    report, fails = failures(root)
    hits = [f for f in fails if f["check"] == "objects:rasterisation"]
    assert hits and "does not match its sha256" in hits[0]["message"]


def test_rasteriser_clips_at_the_near_and_far_planes():
    """No bpy: a ground strip (camera y = 0.1 m, |x| <= 2 m, z from -5 m behind the camera to 30 m) seen by a
    camera whose rays start on z = near = 0.5 m and end on z = far = 10 m covers exactly the pixel centres with
    1 <= v - cy <= 20 (z = fy * 0.1 / (v - cy) in [near, far]) and |u - cx| <= 2 fx (v - cy) / (fy 0.1). Without
    clipping the strip is refused (a vertex behind the camera); clipping at z = 0 instead would fill every row
    below the horizon; ignoring `far` would add the rows 0 < v - cy < 1. Per-row poses clip the same way."""
    fx = fy = 100.0
    cx, cy = 60.2, 40.3
    K = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1]])
    V = np.array([[-2, 0.1, -5], [2, 0.1, -5], [2, 0.1, 30], [-2, 0.1, 30]], dtype=float)
    F = np.array([[0, 1, 2], [0, 2, 3]])
    rows, us = np.arange(-40, 120), np.arange(-60, 180)
    dv = rows[:, None] - cy
    expect = (dv >= 1) & (dv <= 20) & (np.abs(us[None, :] - cx) <= 2 * fx * dv / (fy * 0.1))
    m = rasterize_rows(V, F, K, np.eye(4), rows, len(us), int(us[0]), near=0.5, far=10.0)
    assert expect.sum() > 1000 and np.array_equal(m, expect)
    with pytest.raises(ValueError):
        rasterize_rows(V, F, K, np.eye(4), rows, len(us), int(us[0]))
    no_far = rasterize_rows(V, F, K, np.eye(4), rows, len(us), int(us[0]), near=0.5)
    assert np.array_equal(no_far & ~m, no_far & (dv > fy * 0.1 / 30) & (dv < 1))
    assert (no_far & ~m).sum() > 0
    T = np.repeat(np.eye(4)[None], len(rows), 0)       # per-row poses: the same pose each row
    assert np.array_equal(rasterize_rows(V, F, K, T, rows, len(us), int(us[0]), near=0.5, far=10.0), expect)


def test_object_labels_through_a_fisheye_lens(tmp_path):
    """The object calibration scene (truncated, overlapping, rotated box, moving mover) through a fisheye lens: object
    labels are rasterised through the lens (no Cycles canvas renders), a deforming (wave-modified) object too, from
    its evaluated mesh per row (row_mesh), and the checker (lens re-rasterisation, lens ray cast) passes, re-rasterising
    the deforming object from its per-row meshes."""
    import bpy

    from rowbeam.check.runner import check_bundle
    from rowbeam.blender.scenes import common

    from tests.conftest import build_and_export

    def builder():
        truth, rig = object_scenes.object_calibration()
        rig["sensors"][0]["lens"] = {"model": "opencv_fisheye", "D": [-0.02, 0.01, -0.004, 0.0005]}
        wave = common.add_quad("waving", 0.5, 0.5, bpy.data.objects["front"].matrix_world)
        wave.location.z += 0.3
        wave.modifiers.new("wave", "WAVE")
        common.tag(wave, 0x9006, "target")
        return truth, rig

    e = build_and_export(tmp_path, "fisheye_objects", builder)
    assert e.summary["published"], e.summary
    m, a = load_event(e.event)
    block = m["object_labels"]
    assert block["method"]["renders"] == 0 and block["method"]["objects_rasterised"] == len(block["objects"]) >= 5
    assert block["canvas"]["lens"]["model"] == "opencv_fisheye"
    waving = next(o for o in block["objects"] if o["name"] == "waving")
    assert "row_mesh" in waving and waving["rasterisation_check"], waving
    mover = next(o for o in block["objects"] if o["name"] == "mover")
    assert mover["row_pose_index"] is not None
    report = check_bundle(e.bundle)
    assert report["status"] == "pass", [c for ev in report["events"] for c in ev["checks"] if c["status"] != "pass"]
    checks = {c["check"]: c for ev in report["events"] for c in ev["checks"]}
    assert "(1 deforming, from their per-row meshes)" in checks["objects:rasterisation"]["message"], checks


