"""Planted faults for the checks that had none: each plants one fault in a copy of a correct export (payload
re-encoded with the exporter's writers and rehashed, so integrity passes) and asserts that very check's status is
"fail" in the QA report dict. The radar export uses a rotated mount (yaw, pitch and roll), so a transposed
rotation differs from the right one; the table check -> test -> assertion is in docs/check.md."""
from __future__ import annotations

import json

import numpy as np
import pytest

from rowbeam.blender.scenes import radar_scenes as rs

from tests.helpers import failures, load_event, load_payload, rehash, save_payload
from tests.check import test_checker_faults as faults
from tests.blender.objects import test_object_labels as object_labels
from tests.check.test_checker_faults import _copy, _edit_manifest, _replace


# the same cached exports (one per session) as tests/check/test_checker_faults.py and tests/blender/objects/test_object_labels.py
camera, room, plate_flow = faults.camera, faults.room, faults.plate_flow
calib = object_labels.calib              # (export, manifest, arrays, objects by name)


def status(root, check) -> set:
    """The statuses of `check` over every event and the bundle block of the QA report of `root`."""
    report, _ = failures(root)
    got = {c["status"] for e in report["events"] for c in e["checks"] if c["check"] == check}
    got |= {c["status"] for c in report.get("bundle", {}).get("checks", []) if c["check"] == check}
    return got


def fails(root, check) -> None:
    got = status(root, check)
    assert "fail" in got, f"{check}: {got or 'not run'}"


def passes(root, check) -> None:
    got = status(root, check)
    assert got == {"pass"}, f"{check}: {got or 'not run'}"


# -- camera -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [2, 255])
def test_valid_values(camera, tmp_path, value):
    root, ev = _copy(camera, tmp_path)
    _, a = load_event(ev)
    valid = a["valid"].copy()
    valid[np.argwhere(valid == 1)[0][0], np.argwhere(valid == 1)[0][1]] = value
    _replace(ev, "valid", valid)
    fails(root, "valid_values")


@pytest.mark.parametrize("plant", ["missing", "unknown"])
def test_modalities_present(camera, tmp_path, plant):
    root, ev = _copy(camera, tmp_path)
    if plant == "missing":
        m = _edit_manifest(ev, lambda m: m["modalities"].pop("camera_z"))
    else:
        m = _edit_manifest(ev, lambda m: m["modalities"].__setitem__("depth_extra", dict(m["modalities"]["range"])))
    assert m
    fails(root, "modalities_present")


# -- LiDAR --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("delta", [1, 7])
def test_beam_time_offsets(room, tmp_path, delta):
    """The beam table's per-channel time offset (0 here, so only later) off the event's channel_time_offsets_ns."""
    root, ev = _copy(room, tmp_path)
    ch = 3
    _edit_manifest(ev, lambda m: m["calibration"]["beams"]["channels"][ch].__setitem__(
        "time_offset_ns", m["calibration"]["beams"]["channels"][ch]["time_offset_ns"] + delta))
    fails(root, "beam_time_offsets")


# -- flow ---------------------------------------------------------------------------------------------------------

def test_flow_source_valid_differs_from_the_events_valid_plane(plate_flow, tmp_path):
    """source_valid set at a pixel off every surface (valid 0 in the source event, correspondence undefined): the
    flags still nest, only the comparison with the source event's valid plane can tell."""
    root, flow = _copy(plate_flow, tmp_path, "flows")
    _, a = load_event(flow)
    sv, defined = a["flow_forward_source_valid"].copy(), a["flow_forward_correspondence_defined"]
    r, c = np.argwhere((sv == 0) & (defined == 0))[0]
    sv[r, c] = 1
    _replace(flow, "flow_forward_source_valid", sv)
    fails(root, "flow_forward_flags")


def test_flow_lens_unusable(plate_flow, tmp_path):
    """A flow manifest declaring a lens whose radial map turns back inside the image: flow_lens fails."""
    root, flow = _copy(plate_flow, tmp_path, "flows")
    _edit_manifest(flow, lambda m: (m["calibration"].update(projection="opencv"), m["calibration"].update(
        distortion={"model": "opencv", "coefficients": [-0.9, 0.0, 0.0, 0.0, 0.0],
                    "coefficient_names": ["k1", "k2", "p1", "p2", "k3"], "valid_domain": {}})))
    fails(root, "flow_lens")


# -- objects ------------------------------------------------------------------------------------------------------

def _objects(ev):
    return json.loads((ev / "manifest.json").read_text())["object_labels"]["objects"]


@pytest.mark.parametrize("which", ["lowest", "highest"])
def test_objects_listed(calib, tmp_path, which):
    """A visible instance left without an entry (its entry renamed to an unused id): the lowest and the highest
    visible instance, so an off-by-one in the listed check is caught."""
    root, ev = _copy(calib[0], tmp_path)
    _, a = load_event(ev)
    seen = sorted(set(np.unique(a["instance_id"][a["instance_id"] > 0]).tolist()))
    target = seen[0] if which == "lowest" else seen[-1]
    _edit_manifest(ev, lambda m: next(o for o in m["object_labels"]["objects"] if o["instance_id"] == target)
                   .update(instance_id=60000))
    fails(root, "objects:listed")


def test_objects_mask_index(calib, tmp_path):
    root, ev = _copy(calib[0], tmp_path)
    objs = [o for o in _objects(ev) if o["mask_index"] is not None]
    assert len(objs) >= 2
    _edit_manifest(ev, lambda m: next(o for o in m["object_labels"]["objects"] if o["name"] == objs[1]["name"])
                   .update(mask_index=objs[0]["mask_index"]))
    fails(root, "objects:mask_index")


@pytest.mark.parametrize("plant", ["pose", "time"])
def test_objects_canvas_rows(calib, tmp_path, plant):
    """Canvas row H + 3 (image row 3): its camera pose moved 1 um, or its time 1 ns later."""
    root, ev = _copy(calib[0], tmp_path)
    m, a = load_event(ev)
    H = m["calibration"]["image_size_px"][1]
    if plant == "pose":
        T = a["canvas_row_T_world_camera"].copy()
        T[H + 3, 0, 3] += 1e-6
        _replace(ev, "canvas_row_T_world_camera", T)
    else:
        t = a["canvas_row_time_ns"].copy()
        t[H + 3] += 1
        _replace(ev, "canvas_row_time_ns", t)
    fails(root, "objects:canvas_rows")


@pytest.mark.parametrize("key", ["visib_fract", "truncation_fraction", "occlusion_fraction"])
def test_objects_fractions(calib, tmp_path, key):
    root, ev = _copy(calib[0], tmp_path)
    _edit_manifest(ev, lambda m: m["object_labels"]["objects"][0].update({key: m["object_labels"]["objects"][0][key]
                                                                          + 1e-9}))
    fails(root, "objects:fractions")


@pytest.mark.parametrize("plant", ["scaled_reference", "centroid_row"])
def test_objects_poses(calib, tmp_path, plant):
    root, ev = _copy(calib[0], tmp_path)
    name = next(o["name"] for o in _objects(ev) if o["centroid_row"] is not None
                and o["T_camera_object_reference"] is not None)

    def edit(m):
        o = next(o for o in m["object_labels"]["objects"] if o["name"] == name)
        if plant == "scaled_reference":
            T = np.array(o["T_camera_object_reference"])
            T[:3, :3] *= 1.001
            o["T_camera_object_reference"] = T.tolist()
        else:
            o["centroid_row"] += 1
    _edit_manifest(ev, edit)
    fails(root, "objects:poses")


def test_objects_payloads(calib, tmp_path):
    """A needed payload (canvas_row_time_ns) that does not decode as declared: the object checks cannot run."""
    root, ev = _copy(calib[0], tmp_path)
    m = json.loads((ev / "manifest.json").read_text())
    (ev / m["modalities"]["canvas_row_time_ns"]["uri"]).write_bytes(b"not an npy file")
    rehash(ev, "canvas_row_time_ns")
    fails(root, "objects:payloads")


# -- radar on a rotated mount -------------------------------------------------------------------------------------

MOUNT_EULER = (0.12, -0.08, 0.35)     # rad, XYZ: roll, pitch, yaw


def _rotated_wall():
    """The approaching wall seen by a radar whose mount is rolled, pitched and yawed (R != R^T)."""
    import bpy

    truth, rig = rs.wall_approaching()
    bpy.data.objects["radar_mount"].rotation_euler = MOUNT_EULER
    bpy.context.view_layer.update()
    return truth, rig


@pytest.fixture(scope="module")
def radar(exports):
    return exports("radar_wall_rotated_mount", _rotated_wall)


def test_rotated_radar_export_is_clean(radar):
    """The export through the rotated mount publishes and passes every check (its chirp poses are not symmetric)."""
    assert radar.summary["published"] and not radar.summary["quarantined"]
    report, bad = failures(radar.bundle)
    assert report["status"] == "pass", [(f["check"], f["message"]) for f in bad]
    _, a = load_event(radar.event)
    R = a["chirp_T_world_radar"][0, :3, :3]
    assert np.abs(R - R.T).max() > 0.1 and (a["valid"] == 1).sum() > 100


def test_points_radar_frame_transposed_rotation(radar, tmp_path):
    """Point xyz computed with R_world_radar instead of its transpose (consistent everywhere else)."""
    root, ev = _copy(radar, tmp_path)
    _, a = load_event(ev)
    pts = a["points"].copy()
    k = pts["chirp"]
    T = a["chirp_T_world_radar"][k]
    world = np.stack([pts["x_world"], pts["y_world"], pts["z_world"]], -1)
    wrong = np.einsum("nij,nj->ni", T[:, :3, :3], world - T[:, :3, 3])
    for i, axis in enumerate("xyz"):
        pts[axis] = wrong[:, i]
    _replace(ev, "points", pts)
    fails(root, "points_radar_frame")


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_velocity_limits_both_signs(radar, tmp_path, sign):
    """One return at +-(max + 0.01) m/s (per-beam array and points table): velocity_limits fails; exactly +-max
    passes."""
    for beyond, check in ((0.01, fails), (0.0, passes)):
        root, ev = _copy(radar, tmp_path / f"{beyond}")
        m, a = load_event(ev)
        vmax = m["calibration"]["max_radial_velocity_mps"]
        v, pts = a["radial_velocity"].copy(), a["points"].copy()
        k, b = pts["chirp"][0], pts["beam"][0]
        v[k, b] = sign * (vmax + beyond)
        pts["radial_velocity"][0] = v[k, b]
        _replace(ev, "radial_velocity", v)
        _replace(ev, "points", pts)
        check(root, "velocity_limits")


def test_points_radial_velocity(radar, tmp_path):
    root, ev = _copy(radar, tmp_path)
    _, a = load_event(ev)
    pts = a["points"].copy()
    pts["radial_velocity"][len(pts) // 2] += 0.5
    _replace(ev, "points", pts)
    fails(root, "points_radial_velocity")


@pytest.mark.parametrize("delta", [1, -1])
def test_chirp_times(radar, tmp_path, delta):
    root, ev = _copy(radar, tmp_path)
    _, a = load_event(ev)
    t = a["time_offset_ns"].copy()
    t[5] += delta
    _replace(ev, "time_offset_ns", t)
    fails(root, "chirp_times")


@pytest.mark.parametrize("name", ["azimuth_deg", "elevation_deg"])
def test_beam_tables(radar, tmp_path, name):
    """The per-beam angle payload 0.25 deg off the manifest's beam table at beam 3."""
    root, ev = _copy(radar, tmp_path)
    _, a = load_event(ev)
    x = a[name].copy()
    x[3] += 0.25
    _replace(ev, name, x)
    fails(root, f"beam_{name}")


def test_radar_rig(radar, tmp_path):
    """The manifest's chirp train disagrees with the bundle's rig (one chirp period 1 ns longer)."""
    root, ev = _copy(radar, tmp_path)
    _edit_manifest(ev, lambda m: m["event"].update(chirp_period_ns=m["event"]["chirp_period_ns"] + 1))
    fails(root, "radar_rig")


# -- flow depth warp ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("times_limit", [3.0])
def test_flow_depth_warp_point_moved_along_the_destination_ray(plate_flow, tmp_path, times_limit):
    """At one dest_visible pixel the moved point (source point + scene_flow_world) slides along the destination
    camera's ray by 3x the declared depth-test limit: it projects to the same pixel (flow_matches_scene_flow
    passes), but its depth disagrees with the destination's camera_z there (a 10x wider limit would pass it)."""
    from rowbeam.check.event_points import world_points

    root, flow = _copy(plate_flow, tmp_path, "flows")
    fm, a = load_event(flow)
    src_m, src = load_event(root / "events" / "camera_front" / "000000")
    _, dst = load_event(root / "events" / "camera_front" / "000001")
    K = np.array(fm["calibration"]["K"])
    vis = np.argwhere(a["flow_forward_dest_visible"] == 1)
    v, u = vis[len(vis) // 2]
    X = world_points(K, src["camera_z"], src["row_T_world_camera"])[v, u] + a["scene_flow_world"][v, u]
    row = int(np.clip(round(v + float(a["flow_forward"][v, u, 1])), 0, len(dst["row_T_world_camera"]) - 1))
    T = dst["row_T_world_camera"][row]
    ray = X - T[:3, 3]
    z = float((T[:3, :3].T @ ray)[2])
    dt = fm["method"]["depth_test"]
    shift = times_limit * (dt["abs_m"] + dt["rel"] * z)              # metres of camera z
    step = ray / z * shift                                            # along the ray: camera z grows by `shift`
    sf, sfc = a["scene_flow_world"].copy(), a["scene_flow_source_camera"].copy()
    sf[v, u] = sf[v, u] + step
    sfc[v, u] = src["row_T_world_camera"][v, :3, :3].T @ sf[v, u].astype(np.float64)
    _replace(flow, "scene_flow_world", sf)
    _replace(flow, "scene_flow_source_camera", sfc)
    fails(root, "flow_depth_warp")
    passes(root, "flow_matches_scene_flow")


# -- more radar conditions (rotated mount) ------------------------------------------------------------------------

def _radar_point_edit(radar, tmp_path, edit):
    root, ev = _copy(radar, tmp_path)
    m, a = load_event(ev)
    edit(m, a, ev)
    return root


def test_radar_range_limits(radar, tmp_path):
    """One return 1 cm beyond max_range_m (per-beam range and point table moved together)."""
    def edit(m, a, ev):
        r = a["range"].copy()
        k, b = a["points"]["chirp"][0], a["points"]["beam"][0]
        r[k, b] = m["calibration"]["range_limits_m"]["max"] + 0.01
        _replace(ev, "range", r)
    fails(_radar_point_edit(radar, tmp_path, edit), "range_limits")


def test_radar_points_times(radar, tmp_path):
    def edit(m, a, ev):
        pts = a["points"].copy()
        pts["t_ns"][3] += 1
        _replace(ev, "points", pts)
    fails(_radar_point_edit(radar, tmp_path, edit), "points_times")


def test_radar_points_match_beams(radar, tmp_path):
    """Two rows of the point table swapped (the table must follow (chirp, beam) order)."""
    def edit(m, a, ev):
        pts = a["points"].copy()
        pts[[0, 1]] = pts[[1, 0]]
        _replace(ev, "points", pts)
    fails(_radar_point_edit(radar, tmp_path, edit), "points_match_beams")


def test_radar_range_equals_world_distance(radar, tmp_path):
    """The per-beam range 1 cm longer than |p_world - origin| at one return."""
    def edit(m, a, ev):
        r = a["range"].copy()
        k, b = a["points"]["chirp"][2], a["points"]["beam"][2]
        r[k, b] += 0.01
        _replace(ev, "range", r)
    fails(_radar_point_edit(radar, tmp_path, edit), "range_equals_world_distance")


def test_radar_normal_geometric_facing(radar, tmp_path):
    """One return's geometric normal turned to face away from the radar."""
    def edit(m, a, ev):
        n = a["normal_geometric"].copy()
        k, b = a["points"]["chirp"][1], a["points"]["beam"][1]
        n[k, b] = -n[k, b]
        _replace(ev, "normal_geometric", n)
    fails(_radar_point_edit(radar, tmp_path, edit), "normal_geometric_facing")


def test_radar_chirp_poses_rigid(radar, tmp_path):
    """Chirp 4's pose (rotated mount) scaled by 1.001: not a rigid transform."""
    def edit(m, a, ev):
        T = a["chirp_T_world_radar"].copy()
        T[4, :3, :3] *= 1.001
        _replace(ev, "chirp_T_world_radar", T)
    fails(_radar_point_edit(radar, tmp_path, edit), "chirp_poses_rigid")


def test_radar_beam_directions(radar, tmp_path):
    """The manifest's beam table turns beam 3 by 0.5 deg in azimuth: its returns lie off the declared beam."""
    root, ev = _copy(radar, tmp_path)
    _edit_manifest(ev, lambda m: m["calibration"]["beams"]["table"][3].update(
        azimuth_deg=m["calibration"]["beams"]["table"][3]["azimuth_deg"] + 0.5))
    fails(root, "beam_directions")


def test_flow_finite_where_undefined(plate_flow, tmp_path):
    """flow_forward finite (0, 0) at a pixel whose correspondence is undefined: the flags check fails."""
    root, flow = _copy(plate_flow, tmp_path, "flows")
    _, a = load_event(flow)
    f = a["flow_forward"].copy()
    r, c = np.argwhere(a["flow_forward_correspondence_defined"] == 0)[0]
    f[r, c] = 0.0
    _replace(flow, "flow_forward", f)
    fails(root, "flow_forward_flags")


def test_flow_reprojection_off_by_4_thousandths_of_a_pixel(plate_flow, tmp_path):
    """flow_forward 0.004 px off at one visible pixel (4x the 1e-3 px tolerance, under a 10x wider one)."""
    root, flow = _copy(plate_flow, tmp_path, "flows")
    _, a = load_event(flow)
    f = a["flow_forward"].copy()
    vis = np.argwhere(a["flow_forward_dest_visible"] == 1)
    r, c = vis[len(vis) // 2]
    f[r, c, 0] += 0.004
    _replace(flow, "flow_forward", f)
    fails(root, "flow_matches_scene_flow")


def _canvas(box, H, W):
    out = np.zeros((3 * H, 3 * W), bool)
    if box is not None:
        r0, c0, block = box
        out[r0:r0 + block.shape[0], c0:c0 + block.shape[1]] = block
    return out


def test_objects_mask_pixel_between_the_edge_band_and_ten_times_it(calib, tmp_path):
    """The rotated box's mask gains one pixel whose centre lies 0.02..0.2 px outside its silhouette: outside the
    edge band the checker allows (EDGE_MARGIN_PX), inside a band 10x wider; objects:rasterisation fails."""
    from rowbeam.check.object_checks import load_asset, rasterise_object_box

    band = 0.02                    # px, the edge band docs/objects.md declares (not read from the code under test)

    e, m, a, objs = calib
    root, ev = _copy(e, tmp_path)
    W, H = m["calibration"]["image_size_px"]
    o = objs["box"]
    V, F = load_asset(root, o["asset"])
    near = _canvas(rasterise_object_box(m, a, o, V, F, band), H, W)[H:2 * H, W:2 * W]
    wide = _canvas(rasterise_object_box(m, a, o, V, F, 10 * band), H, W)[H:2 * H, W:2 * W]
    candidates = np.argwhere(wide & ~near)
    assert candidates.size, "no pixel centre between the two bands"
    r, c = candidates[0]
    masks = load_payload(ev, "amodal_masks").copy()
    masks[o["mask_index"], r, c >> 3] |= np.uint8(0x80 >> (c & 7))
    save_payload(ev, "amodal_masks", masks)
    fails(root, "objects:rasterisation")


def test_points_radar_frame_off_by_10_micrometres(radar, tmp_path):
    """One point's radar-frame x 10 um off (10x the 1 um tolerance, under a 100x wider one; within the beam line's
    2e-4 m lateral tolerance)."""
    root, ev = _copy(radar, tmp_path)
    _, a = load_event(ev)
    pts = a["points"].copy()
    pts["x"][len(pts) // 3] += 1e-5
    _replace(ev, "points", pts)
    fails(root, "points_radar_frame")
    passes(root, "beam_directions")


def test_lidar_normal_facing_away(room, tmp_path):
    """One beam's geometric normal flipped and its cos_incidence with it (-n.d still matches): only the facing test
    can tell (a magnitude-only cos would hide it)."""
    root, ev = _copy(room, tmp_path)
    _, a = load_event(ev)
    n, cos = a["normal_geometric"].copy(), a["cos_incidence"].copy()
    n[4, 6], cos[4, 6] = -n[4, 6], -cos[4, 6]
    _replace(ev, "normal_geometric", n)
    _replace(ev, "cos_incidence", cos)
    fails(root, "normal_geometric_facing")
    passes(root, "cos_incidence")


def test_deformation_motion_steps(exports, tmp_path):
    """The skinned bar's recorded interpolation error between motion steps set to 2 mm (> 1 mm): the check warns."""
    from rowbeam.blender.scenes import deform_scenes as ds

    e = exports("deforming_actors_hinge_s8", ds.deforming_actors, scale=8, omega=3.0, events={"camera_front": (0, 2)})
    root, ev = _copy(e, tmp_path)

    def edit(m):
        bar = next(o for o in m["method"]["deformation"]["objects"] if o["name"] == "bar")
        bar["max_error_m"] = 2e-3
    _edit_manifest(ev, edit)
    assert "warn" in status(root, "deformation_motion_steps")
    assert status(e.bundle, "deformation_motion_steps") == {"pass"}


def test_objects_instance_ids(exports, tmp_path):
    """An instance's 64-bit id edited in the object table (its instancer id and persistent path unchanged)."""
    from tests.blender.objects import test_instances

    e = exports("instanced_city", test_instances.instanced_city, first_event=1, count=2)
    root, ev = _copy(e, tmp_path)

    def edit(m):
        o = next(o for o in m["objects"] if "instance" in o)
        o["id"] += 1
    m = _edit_manifest(ev, edit)
    assert any("instance" in o for o in m["objects"])
    fails(root, "objects:instance_ids")
