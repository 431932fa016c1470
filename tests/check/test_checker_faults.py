"""Checker fault injection, one check at a time: plant one fault in a copy of a real exported bundle
(payload re-encoded with the exporter's writers, sha256/bytes updated so integrity still passes) and
see exactly the check that owns it fail while every other check passes."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from rowbeam.model import qa_profile as tol
from rowbeam.model.sample_identity import rgb_seed, sample_id
from rowbeam.blender.scenes import flow_scenes
from rowbeam.blender.scenes import lidar_calibration as lc

from tests.helpers import failures, load_event, save_payload
from tests.check.test_checker import _tilted_with_rgb


# -- planting helpers ---------------------------------------------------------------------------


def _copy(exported, tmp_path, kind="events"):
    """(bundle copy, its first event or flow folder)."""
    root = tmp_path / "bundle"
    shutil.copytree(exported.bundle, root)
    return root, sorted((root / kind).glob("*/*"))[0]


def _edit_manifest(folder, edit) -> dict:
    """Apply `edit(manifest)` in place and save; returns the edited manifest."""
    path = folder / "manifest.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))
    return m


def _replace(folder, name, array) -> None:
    """Re-encode modality `name` with the writer the exporter uses and update its sha256/bytes."""
    save_payload(folder, name, array)


def _only(root, check, *fragments) -> dict:
    """Exactly `check` fails (in one folder), every other check that ran passes; returns its result."""
    report, fails = failures(root)
    got = sorted({f["check"] for f in fails})
    assert got == [check], f"expected only {check!r} to fail, got {[(f['check'], f['message']) for f in fails]}"
    assert report["status"] == "fail" and report["summary"]["failed_events"] == 1
    (hit,) = [f for f in fails if f["check"] == check]
    for frag in fragments:
        assert frag in hit["message"], (frag, hit["message"])
    return hit


def _passes(root) -> dict:
    report, fails = failures(root)
    assert report["status"] == "pass" and not fails, [(f["check"], f["message"]) for f in fails]
    return report


# -- fixtures: small real exports ---------------------------------------------------------------


@pytest.fixture(scope="module")
def camera(exports):
    """tilted plane, 160x90 rolling-shutter camera with rgb (shared with test_checker.py)."""
    return exports("tilted_plane_rgb", _tilted_with_rgb, scale=8)


@pytest.fixture(scope="module")
def room(exports):
    """box room, 256 firings x 32 channels, every beam returns (shared with test_lidar.py)."""
    return exports("box_room", lc.box_room)


def _with_flow(exports, name, builder):
    """Two 160x90 events (0, 1) of a flow scene and the flow between them."""
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export

    e = exports(name, builder, scale=8, events={"camera_front": (0, 2)})
    if not (e.bundle / "flows").exists():
        run_export(plan_export(ExportRequest(out=e.bundle, blend=e.blend, rig=e.rig, first_event=0, count=2,
                                             flow=True, device="cpu")))
    return e


@pytest.fixture(scope="module")
def plate_flow(exports):
    """A plate spinning in the middle of the image: forward and backward flow visible on it."""
    return _with_flow(exports, "flow_rotating_plate_s8", flow_scenes.rotating_plate)


@pytest.fixture(scope="module")
def down_flow(exports):
    """A plate filling the image moving down ~4.2 px per event: bottom rows land on and past the image edge."""
    return _with_flow(exports, "flow_plate_down_s8", flow_scenes.plate_moving_down)


def test_fixtures_are_clean(camera, room, plate_flow, down_flow):
    for e, folders in ((camera, 1), (room, 1), (plate_flow, 3), (down_flow, 3)):   # flows: two events + the flow
        assert _passes(e.bundle)["summary"]["events"] == folders
        assert not (e.bundle / "quarantine").exists()                 # the exporter's own QA published everything
    _, a = load_event(down_flow.bundle / "flows" / "camera_front" / "000000-000001")
    H = a["flow_forward"].shape[0]
    landing = np.arange(H)[:, None] + a["flow_forward"][..., 1]
    edge = (landing >= H - 1) & (landing < H - 0.5)                 # past the last centre, inside the last row
    assert edge.any() and a["flow_forward_dest_in_bounds"][edge].all()
    assert (landing >= H - 0.5).any() and not a["flow_forward_dest_in_bounds"][landing >= H - 0.5].any()


# -- camera -------------------------------------------------------------------------------------


@pytest.mark.parametrize("field, delta, px", [
    # shift is in units of the larger image side: c_x moves by shift * W = 0.01 * 160 px
    ("shift_x", 0.01, 0.01 * 160),
    # f_x = lens / sensor_width * W: 22.95 mm / 36 mm * 160 = 102 px instead of 100
    ("lens_mm", 0.45, 0.45 / 36.0 * 160),
])
def test_intrinsics_disagreeing_with_the_blender_camera(camera, tmp_path, field, delta, px):
    root, ev = _copy(camera, tmp_path)
    m = _edit_manifest(ev, lambda m: m["calibration"]["blender_camera"].__setitem__(
        field, m["calibration"]["blender_camera"][field] + delta))
    assert m["calibration"]["K"] == json.loads((camera.event / "manifest.json").read_text())["calibration"]["K"]
    hit = _only(root, "intrinsics", "K differs from the Blender camera")
    assert hit["values"]["max_abs_error_px"] == pytest.approx(px, rel=1e-6)


@pytest.mark.parametrize("fault", ["scale", "last_row"])
def test_row_pose_not_rigid(camera, tmp_path, fault):
    """Row 7's pose scaled by 1.001, or its homogeneous last row (0, 0, 0, 1) broken: not a rigid transform."""
    root, ev = _copy(camera, tmp_path)
    T = load_event(ev)[1]["row_T_world_camera"].copy()
    if fault == "scale":
        T[7, :3, :3] *= 1.001
    else:
        T[7, 3, 0] = 1e-3
    _replace(ev, "row_T_world_camera", T)
    _only(root, "row_poses_rigid", "1 row poses are not rigid (first row 7)")


@pytest.mark.parametrize("fault", ["stamp", "scale"])
def test_reference_pose_stamped_late_or_not_rigid(camera, tmp_path, fault):
    root, ev = _copy(camera, tmp_path)

    def edit(m):
        T = m["calibration"]["T_camera_world"]
        if fault == "stamp":
            T["time_ns"] += 1
        else:
            T["matrix"] = (np.array(T["matrix"]) @ np.diag([1.001, 1.001, 1.001, 1.0])).tolist()
    _edit_manifest(ev, edit)
    _only(root, "reference_pose", "T_camera_world is not rigid or not stamped")


def test_reference_time_off_the_timing_model(camera, tmp_path):
    """reference time 1 ns late, stamped consistently on the pose, the sample id and the rgb seed derived from
    it: only the timing model (frame_start + (readout + exposure)/2, rounded half up) can tell."""
    root, ev = _copy(camera, tmp_path)
    m0 = json.loads((ev / "manifest.json").read_text())
    e = m0["event"]
    truth = e["frame_start_ns"] + (e["readout_ns"] + e["exposure_ns"] + 1) // 2
    late = truth + 1

    def edit(m):
        m["event"]["reference_time_ns"] = late
        m["calibration"]["T_camera_world"]["time_ns"] = late
        m["sample_id"] = sample_id(m["lineage"]["scenario"], m["sensor"]["id"], late)
        m["method"]["rgb_render"]["seed"] = rgb_seed(m["sample_id"])
    _edit_manifest(ev, edit)
    _only(root, "reference_time", f"reference_time_ns {late} != {truth}")


@pytest.mark.parametrize("name", ["normal_geometric", "normal_shading"])
def test_normal_not_unit_length(camera, tmp_path, name):
    root, ev = _copy(camera, tmp_path)
    m, a = load_event(ev)
    n = a[name].copy()
    v, u = np.argwhere(a["valid"] == 1)[len(np.argwhere(a["valid"] == 1)) // 2]
    n[v, u] *= 1.01
    _replace(ev, name, n)
    hit = _only(root, f"{name}_unit", "deviates from unit length")
    assert hit["values"]["worst_length_error"] == pytest.approx(0.01, abs=1e-5)


def test_semantic_class_outside_the_ontology(camera, tmp_path):
    """Object table and semantic plane agree on class 99, which the ontology does not define."""
    root, ev = _copy(camera, tmp_path)
    m, a = load_event(ev)
    assert 99 not in {c["id"] for c in m["ontology"]["classes"]}
    sem = a["semantic_id"].copy()
    sem[a["instance_id"] == 1] = 99
    _replace(ev, "semantic_id", sem)
    _edit_manifest(ev, lambda m: m["objects"][0].__setitem__("class_id", 99))
    _only(root, "semantic_ids_known", "semantic ids [99] are not in the ontology")


@pytest.mark.parametrize("dup", ["id", "render_index"])
def test_object_table_with_a_duplicate(camera, tmp_path, dup):
    root, ev = _copy(camera, tmp_path)

    def edit(m):
        o = dict(m["objects"][0])
        if dup == "id":
            o["render_index"] += 1           # a second render index claiming the same 64-bit id
        else:
            o["id"] += 1                     # a second 64-bit id claiming the same render index
        o["name"] += ".001"
        m["objects"].append(o)
    _edit_manifest(ev, edit)
    _only(root, "object_table", "duplicate ids or render indices")


@pytest.mark.parametrize("field, value", [("worst_range_error_m", 1.5e-3), ("worst_silhouette_error_px", 1.5)])
def test_recorded_verification_beyond_the_limit(camera, tmp_path, field, value):
    """No threshold forced: the manifest records a label error beyond the published 1 mm / 1 px."""
    root, ev = _copy(camera, tmp_path)

    def edit(m):
        ver = m["method"]["verification"]
        ver[field] = value
        ver["rows"][1][field.removeprefix("worst_")] = value
    _edit_manifest(ev, edit)
    _only(root, "exact_reference", "limits 0.001 m, 1.0 px")


def test_verification_exactly_at_the_limit_passes(camera, tmp_path):
    root, ev = _copy(camera, tmp_path)

    def edit(m):
        m["method"]["verification"].update(worst_range_error_m=tol.VERIFY_MAX_RANGE_ERROR_M,
                                           worst_silhouette_error_px=tol.VERIFY_MAX_SILHOUETTE_ERROR_PX)
    _edit_manifest(ev, edit)
    _passes(root)


def test_rgb_with_a_nan(camera, tmp_path):
    root, ev = _copy(camera, tmp_path)
    rgb = load_event(ev)[1]["rgb"].copy()
    rgb[3, 4, 1] = np.nan
    _replace(ev, "rgb", rgb)
    _only(root, "rgb_finite", "non-finite")


# -- LiDAR --------------------------------------------------------------------------------------


def test_firing_pose_with_a_scale(room, tmp_path):
    """Firing 10's pose scaled by 1.001, and its points' LiDAR-frame xyz made consistent with that pose, so
    only the rigidity check can see it (ranges use the origin; directions are unchanged)."""
    root, ev = _copy(room, tmp_path)
    _, a = load_event(ev)
    T = a["firing_T_world_lidar"].copy()
    T[10, 0, :3, :3] *= 1.001
    pts = a["points"].copy()
    rows = pts["firing"] == 10
    world = np.stack([pts["x_world"], pts["y_world"], pts["z_world"]], -1)[rows]
    local = np.einsum("ji,nj->ni", T[10, 0, :3, :3], world - T[10, 0, :3, 3])
    for i, axis in enumerate("xyz"):
        pts[axis][rows] = local[:, i]
    _replace(ev, "firing_T_world_lidar", T)
    _replace(ev, "points", pts)
    _only(root, "firing_poses_rigid", "1 firing poses are not rigid")


def test_lidar_reference_pose_stamped_late(room, tmp_path):
    root, ev = _copy(room, tmp_path)
    _edit_manifest(ev, lambda m: m["calibration"]["T_lidar_world"].__setitem__(
        "time_ns", m["calibration"]["T_lidar_world"]["time_ns"] + 1))
    _only(root, "reference_pose", "T_lidar_world is not rigid or not stamped")


def test_beam_time_one_ns_late(room, tmp_path):
    root, ev = _copy(room, tmp_path)
    t = load_event(ev)[1]["time_offset_ns"].copy()
    t[3, 5] += 1
    _replace(ev, "time_offset_ns", t)
    _only(root, "beam_times", "at 1 beams (first firing 3, channel 5)")


def test_cos_incidence_not_minus_n_dot_d(room, tmp_path):
    root, ev = _copy(room, tmp_path)
    cos = load_event(ev)[1]["cos_incidence"].copy()
    cos[4, 6] -= 1e-3
    _replace(ev, "cos_incidence", cos)
    hit = _only(root, "cos_incidence", "differs from -n.d")
    assert hit["values"]["worst_error"] == pytest.approx(1e-3, rel=1e-3)


def test_lidar_normal_not_unit_length(room, tmp_path):
    """n scaled by 1.01 and cos_incidence with it, so -n.d still matches: only the unit check sees it."""
    root, ev = _copy(room, tmp_path)
    _, a = load_event(ev)
    n, cos = a["normal_geometric"].copy(), a["cos_incidence"].copy()
    n[4, 6] *= 1.01
    cos[4, 6] *= 1.01
    _replace(ev, "normal_geometric", n)
    _replace(ev, "cos_incidence", cos)
    hit = _only(root, "normal_geometric_unit", "deviates from unit length")
    assert hit["values"]["worst_length_error"] == pytest.approx(0.01, abs=1e-5)


def test_points_out_of_beam_order(room, tmp_path):
    root, ev = _copy(room, tmp_path)
    pts = load_event(ev)[1]["points"].copy()
    pts[[0, 1]] = pts[[1, 0]]
    _replace(ev, "points", pts)
    _only(root, "points_match_beams", "does not list the 8192 valid beams in order")


def test_point_moved_along_its_beam(room, tmp_path):
    """1e-4 m along the beam: on the beam line (lateral check passes), but not T_lidar_world(t) p_world."""
    root, ev = _copy(room, tmp_path)
    pts = load_event(ev)[1]["points"].copy()
    p = np.array([pts["x"][100], pts["y"][100], pts["z"][100]])
    step = 1e-4 * p / np.linalg.norm(p)
    pts["x"][100], pts["y"][100], pts["z"][100] = p + step
    _replace(ev, "points", pts)
    hit = _only(root, "points_lidar_frame", "differs from T_lidar_world(t) p_world")
    assert hit["values"]["worst_error_m"] == pytest.approx(np.abs(step).max(), rel=1e-3)


def test_motion_compensated_point_off(room, tmp_path):
    root, ev = _copy(room, tmp_path)
    pmc = load_event(ev)[1]["points_motion_compensated"].copy()
    pmc[200, 2] += 1e-4
    _replace(ev, "points_motion_compensated", pmc)
    hit = _only(root, "points_motion_compensated", "differ from T_lidar_world(reference) p_world")
    assert hit["values"]["worst_error_m"] == pytest.approx(1e-4, rel=1e-3)


@pytest.mark.parametrize("edit", [
    {"worst_range_error_m": 2e-3},
    {"id_mismatch_beams": 20, "id_mismatch_fraction": 20 / 256},
], ids=["range_2mm", "ids_8pct"])
def test_lidar_recorded_verification_beyond_the_limit(room, tmp_path, edit):
    root, ev = _copy(room, tmp_path)
    _edit_manifest(ev, lambda m: m["method"]["verification"].update(edit))
    _only(root, "exact_reference", "limits 0.001 m, 1%")


# -- flow ---------------------------------------------------------------------------------------


def _background_pixel(a, direction):
    """A pixel whose source is invalid (no correspondence, no flags)."""
    v, u = np.argwhere(a[f"flow_{direction}_source_valid"] == 0)[0]
    return v, u


@pytest.mark.parametrize("flag, text", [
    ("dest_in_bounds", "1 pixels dest_in_bounds without correspondence_defined"),
    ("dest_visible", "1 pixels dest_visible without dest_in_bounds"),
], ids=["in_bounds_not_defined", "visible_not_in_bounds"])
def test_flow_flags_that_do_not_nest(plate_flow, tmp_path, flag, text):
    root, flow = _copy(plate_flow, tmp_path, "flows")
    _, a = load_event(flow)
    v, u = _background_pixel(a, "backward")
    f = a[f"flow_backward_{flag}"].copy()
    assert f[v, u] == 0
    f[v, u] = 1
    _replace(flow, f"flow_backward_{flag}", f)
    _only(root, "flow_backward_flags", text)


def test_flow_defined_without_a_source(plate_flow, tmp_path):
    root, flow = _copy(plate_flow, tmp_path, "flows")
    _, a = load_event(flow)
    v, u = _background_pixel(a, "backward")
    d = a["flow_backward_correspondence_defined"].copy()
    d[v, u] = 1
    _replace(flow, "flow_backward_correspondence_defined", d)
    _only(root, "flow_backward_flags", "1 pixels correspondence_defined without source_valid",
          "flow finite at 1 pixels where correspondence_defined says otherwise")


def test_backward_flow_that_does_not_return(plate_flow, tmp_path):
    """Backward flow shifted 0.3 px on every pixel: each forward+backward round trip misses by 0.3 px."""
    root, flow = _copy(plate_flow, tmp_path, "flows")
    _, a = load_event(flow)
    b = a["flow_backward"].copy()
    b[..., 0] += 0.3
    _replace(flow, "flow_backward", b)
    hit = _only(root, "flow_cycle_consistency", "forward+backward misses the start by more than 0.1 px")
    assert hit["values"]["worst_px"] == pytest.approx(0.3, abs=0.05)
    assert hit["values"]["pixels"] > 100


def test_scene_flow_in_the_wrong_frame(plate_flow, tmp_path):
    """scene_flow_source_camera set to the world vector (no rotation into the camera) at one pixel."""
    root, flow = _copy(plate_flow, tmp_path, "flows")
    _, a = load_event(flow)
    v, u = np.argwhere(a["flow_forward_correspondence_defined"] == 1)[0]
    s = a["scene_flow_source_camera"].copy()
    s[v, u] = a["scene_flow_world"][v, u]
    moved = float(np.abs(s[v, u] - a["scene_flow_source_camera"][v, u]).max())
    assert moved > 10 * tol.FLOW_SCENE_FLOW_TOL_M
    _replace(flow, "scene_flow_source_camera", s)
    hit = _only(root, "scene_flow_frames", "differs from R_camera_world scene_flow_world")
    assert hit["values"]["worst_m"] == pytest.approx(moved, rel=1e-3)


@pytest.mark.parametrize("name", ["flow_forward_correspondence_defined", "flow_backward"])
def test_flow_payload_breaking_its_contract_is_reported_not_a_crash(plate_flow, tmp_path, name):
    """A flow payload declared with the wrong dtype fails its contract; the invariants that read it are skipped
    (no traceback) and only that contract check fails."""
    root, flow = _copy(plate_flow, tmp_path, "flows")
    _edit_manifest(flow, lambda m: m["modalities"][name].update(dtype="float16"))
    _only(root, f"contract:{name}", f"{name}: declared dtype='float16'")
