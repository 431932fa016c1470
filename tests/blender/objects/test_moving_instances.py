"""Moving instances: a collection instance whose instancer (an empty) moves along camera x, and a geometry-nodes
instance whose instancer moves the same way, under a 12 ms top-to-bottom rolling shutter. Each instance's per-row
pose, per-row amodal span and visible pixels equal the closed form at each row's own time; a static
geometry-nodes object is static."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from rowbeam.blender.scenes import calibration, common
from rowbeam.check.object_checks import object_masks

from tests.blender.objects.test_instances import _empty, _translation
from tests.helpers import failures, load_event

SPEED, Z = 150.0, 10.0                            # m/s along camera x, camera z of both movers
X0 = {"mover_c": -4.63, "mover_gn": -4.63}        # camera x at t = 0 (s)
Y = {"mover_c": -1.2, "mover_gn": 1.2}            # camera y: rows 13.5..19.5 and 25.5..31.5 at scale 16
HALF = 0.6                                        # m: half side of both squares (3 px at f 50, z 10)


def moving_instances(scale: int = 16):
    """Two 1.2 m squares at camera z 10 moving along camera x at 150 m/s: `mover_c` a collection instance (its
    empty instancer moves), `mover_gn` a geometry-nodes instance (its instancer moves); a static geometry-nodes
    object `still_gn` (its geometry: a quad, no instances) and a ground plane at z 20."""
    import bpy

    _, cam, T, K, size = calibration._base(scale)
    common.tag(common.add_quad("ground", 40, 40, T @ _translation(0, 0, 20.0)), 0xF000, "road")
    coll = bpy.data.collections.new("MoverC")
    sq = common.add_quad("square", HALF, HALF, np.eye(4))
    for c in sq.users_collection:
        c.objects.unlink(sq)
    coll.objects.link(sq)
    common.tag(sq, 0xF001, "vehicle")
    v_world = T[:3, 0] * SPEED
    e = _empty("mover_c", coll, T @ _translation(X0["mover_c"], Y["mover_c"], Z), coll, bpy.context.scene.collection)
    common.tag(e, 0xF002, None)
    p0 = np.array(e.matrix_world.translation)
    common.key_locations(e, [(1, tuple(p0)), (2, tuple(p0 + v_world / calibration.FPS))])
    proto = common.add_quad("gn_square", HALF, HALF, np.eye(4))
    proto.hide_render = True
    common.tag(proto, 0xF003, "vehicle")
    me = bpy.data.meshes.new("one_point")
    me.from_pydata([(0.0, 0.0, 0.0)], [], [])
    gn = bpy.data.objects.new("mover_gn", me)
    bpy.context.scene.collection.objects.link(gn)
    gn.matrix_world = common.Matrix((T @ _translation(X0["mover_gn"], Y["mover_gn"], Z)).tolist())
    common.tag(gn, 0xF004, "vehicle")
    common.instance_on_points(gn, proto, "one_instance")   # one vertex at its origin: one instance
    p0 = np.array(gn.matrix_world.translation)
    common.key_locations(gn, [(1, tuple(p0)), (2, tuple(p0 + v_world / calibration.FPS))])
    still = common.add_quad("still_gn", 1.0, 1.0, T @ _translation(3.0, 0.0, 15.0))
    common.tag(still, 0xF005, "wall")
    mod = still.modifiers.new("pass_through", "NODES")
    tree = bpy.data.node_groups.new("pass_through", "GeometryNodeTree")
    tree.interface.new_socket("Geometry", in_out="INPUT", socket_type="NodeSocketGeometry")
    tree.interface.new_socket("Geometry", in_out="OUTPUT", socket_type="NodeSocketGeometry")
    tree.links.new(tree.nodes.new("NodeGroupInput").outputs[0], tree.nodes.new("NodeGroupOutput").inputs[0])
    mod.node_group = tree
    rig = common.camera_rig("camera_front", cam.name, rgb_samples=0, verify_rows=2, object_labels=True)
    return {"K": K, "size": size}, rig


@pytest.fixture(scope="module")
def movers(exports):
    return exports("moving_instances", moving_instances, first_event=1, count=1)


def test_static_geometry_nodes_object_is_static(movers):
    m, _ = load_event(movers.event)
    objs = {o["name"]: o for o in m["objects"]}
    assert objs["still_gn"]["motion"] == "static"
    assert objs["ground"]["motion"] == "static"
    assert objs["mover_gn"]["motion"] == "moving"
    lab = next(o for o in m["object_labels"]["objects"] if o["name"] == "still_gn")
    assert not any("deforming" in n for n in lab.get("notes", [])), lab
    # quad of half side 1 m at camera (3, 0, 15): u 46.67..53.33, v 19.17..25.83 -> centres u 47..53, v 20..25
    assert lab["bbox_modal"] == lab["bbox_amodal_unclipped"] == [47, 20, 7, 6], lab
    assert lab["px_count_visib"] == lab["px_count_all"] == 42


def test_moving_instances_per_row_poses_masks_and_pixels_vs_closed_form(movers):
    m, a = load_event(movers.event)
    W, H = movers.truth["size"]
    K = movers.truth["K"]
    insts = {o["instance"]["instancer"]: o for o in m["objects"] if "instance" in o}
    assert set(insts) == {"mover_c", "mover_gn"}
    labels = {o["instance_id"]: o for o in m["object_labels"]["objects"]}
    T_wc = a["canvas_row_T_world_camera"]
    worst_pose, worst_span = 0.0, 0
    for name, o in insts.items():
        assert o["motion"] == "moving"
        lab = labels[o["render_index"]]
        i = lab["row_pose_index"]
        assert i is not None, lab
        t = a["canvas_row_time_ns"].astype(np.float64) / 1e9
        T_co = np.einsum("rij,rjk->rik", np.linalg.inv(T_wc), a["object_row_T_world_object"][i])
        err = max(np.abs(T_co[:, 0, 3] - (X0[name] + SPEED * t)).max(),
                  np.abs(T_co[:, 1:3, 3] - [Y[name], Z]).max(), np.abs(T_co[:, :3, :3] - np.eye(3)).max())
        worst_pose = max(worst_pose, err)
        img, _ = object_masks(m["object_labels"], a, W, H, lab)
        vc = K[1, 2] + Y[name] * K[1, 1] / Z
        for v in range(H):
            tv = Fraction(int(a["canvas_row_time_ns"][H + v]), 10**9)
            uc = K[0, 2] + (X0[name] + SPEED * float(tv)) * K[0, 0] / Z
            want = np.arange(np.ceil(uc - 3), np.floor(uc + 3) + 1) if vc - 3 < v < vc + 3 else np.array([])
            want = want[(want >= 0) & (want < W)]
            got_amodal = np.nonzero(img[v])[0]
            got_modal = np.nonzero(a["instance_id"][v] == o["render_index"])[0]
            worst_span = max(worst_span, len(np.setxor1d(want, got_amodal)), len(np.setxor1d(want, got_modal)))
    print(f"moving instances: per-row pose error vs closed form {worst_pose:.2e} m; worst row span error "
          f"{worst_span} px")
    assert worst_pose < 1e-5, worst_pose
    assert worst_span == 0
    assert m["method"]["derivation"]["unresolved_hit_pixels"] == 0
    report, failed = failures(movers.bundle)
    assert report["status"] == "pass", [(f["check"], f["message"]) for f in failed]


def test_flow_follows_moving_instances_as_rigid_bodies(movers, tmp_path):
    """Forward flow of the movers' pixels between events 1 and 2: the same image row one frame (1/30 s) later, so
    each material point moves SPEED / 30 * f / Z = 25 px along u, 0 along v."""
    from tests.conftest import run_python

    r = run_python("render_export.py", movers.blend, "--rig", movers.rig, "--out", tmp_path / "flow",
                   "--first-event", 1, "--count", 2, "--flow", "-q")
    assert r.returncode == 0, r.stderr
    (flow,) = (tmp_path / "flow").glob("flows/*/*")
    fm, fa = load_event(flow)
    (src,) = [p for p in (tmp_path / "flow").glob("events/*/000001")]
    m, a = load_event(src)
    W = movers.truth["size"][0]
    K = movers.truth["K"]
    du_true = SPEED / calibration.FPS * K[0, 0] / Z
    checked = 0
    for o in (o for o in m["objects"] if "instance" in o):
        v, u = np.nonzero(a["instance_id"] == o["render_index"])
        keep = u + du_true < W - 1
        assert keep.sum() > 10, o["name"]
        got = fa["flow_forward"][v[keep], u[keep]]
        assert np.abs(got - [du_true, 0.0]).max() < 1e-3, (o["name"], got[:3])
        checked += int(keep.sum())
    print(f"flow on moving instances: {checked} px within 1e-3 px of ({du_true}, 0)")
    report, failed = failures(tmp_path / "flow")
    assert report["status"] == "pass", [(f["check"], f["message"]) for f in failed]
