"""Flow on deforming objects against closed form: a two-bone bar skinned to an armature, a shape-key blend linear
in time, and a topology-changing object (rowbeam.blender.scenes.deform_scenes; rolling-shutter camera, 320x180)."""
from __future__ import annotations

import numpy as np
import pytest

from rowbeam.blender.scenes import deform_scenes as ds

from tests.helpers import failures, load_event

SCALE = 4


@pytest.fixture(scope="module")
def deform(exports):
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export

    e = exports("deforming_actors", ds.deforming_actors, scale=SCALE, events={"camera_front": (0, 2)})
    flow = e.bundle / "flows" / "camera_front" / "000000-000001"
    if not flow.exists():
        run_export(plan_export(ExportRequest(out=e.bundle, blend=e.blend, rig=e.rig, first_event=0, count=2,
                                             flow=True, device="cpu")))
    events = [load_event(e.bundle / "events" / "camera_front" / f"{i:06d}") for i in (0, 1)]
    return e, load_event(flow), events


def _index(manifest, name) -> int:
    return next(o["render_index"] for o in manifest["objects"] if o["name"] == name)


def _camera_points(K, u, v, z=8.0):
    """Camera-frame points of pixels (u, v) on the camera z = 8 plane every actor stays in (closed form)."""
    return np.stack([(u - K[0, 2]) / K[0, 0] * z, (v - K[1, 2]) / K[1, 1] * z, np.full(u.shape, z)], -1)


def _solve_landing(K, row_times_ns, move):
    """Destination (u, v) and point of `move(t_s) -> camera point (N, 3)` at the time of the row it lands on
    (rows linear in time), by plain fixed-point iteration — a solver separate from the exporter's secant."""
    H = len(row_times_ns)
    t0, t1 = row_times_ns[0] * 1e-9, row_times_ns[-1] * 1e-9
    vd = None
    for _ in range(60):
        t = t0 if vd is None else t0 + (t1 - t0) * np.clip(vd, 0.0, H - 1.0) / (H - 1)
        Y = move(t)
        ud, vn = K[0, 0] * Y[:, 0] / Y[:, 2] + K[0, 2], K[1, 1] * Y[:, 1] / Y[:, 2] + K[1, 2]
        if vd is not None and np.abs(vn - vd).max() < 1e-10:
            break
        vd = vn
    return ud, vn, Y


def _rot_z(angle):
    """(N, 3, 3) right-handed rotations about the camera +z axis (the bar's normal)."""
    c, s = np.cos(angle), np.sin(angle)
    R = np.zeros(np.shape(angle) + (3, 3))
    R[..., 0, 0], R[..., 0, 1], R[..., 1, 0], R[..., 1, 1], R[..., 2, 2] = c, -s, s, c, 1.0
    return R


def _bar_truth(truth, src_times, dst_times, u, v):
    """Closed-form flow and camera-frame scene flow of bar pixels (u, v): (part, flow (N, 2), scene flow (N, 3)).
    part: 0 root (rest x <= 0.25, static), 1 tip (rest x >= 0.85, rotating rigidly about the joint), -1 hinge."""
    K, w, J = truth["K"], truth["omega"], ds.JOINT_CAMERA
    X = _camera_points(K, u, v)
    ts = src_times[v] * 1e-9
    rest = J + np.einsum("nij,nj->ni", _rot_z(-w * ts), X - J)
    part = np.where(X[:, 0] <= 0.25, 0, np.where(rest[:, 0] >= 0.85, 1, -1))

    def move(t):
        return np.where((part == 1)[:, None], J + np.einsum("nij,nj->ni", _rot_z(w * np.broadcast_to(t, ts.shape)),
                                                                 rest - J), X)
    ud, vd, Y = _solve_landing(K, dst_times, move)
    return part, np.stack([ud - u, vd - v], -1), Y - X


def test_two_bone_bar_flow_and_scene_flow_in_closed_form(deform):
    """Root points: zero flow; tip points rotate at omega about the joint, seen at the row they land on."""
    e, (fm, fa), ((m0, a0), (m1, a1)) = deform
    truth = e.truth
    bar = _index(m0, "bar")
    R_wc = truth["T"][:3, :3]
    worst = {}
    for direction, src, dst in (("forward", a0, a1), ("backward", a1, a0)):
        v, u = np.nonzero(src["instance_id"] == bar)
        defined = fa[f"flow_{direction}_correspondence_defined"][v, u] == 1
        assert defined.all(), f"{direction}: {np.count_nonzero(~defined)} bar pixels without correspondence"
        part, flow, sf_cam = _bar_truth(truth, src["row_time_ns"], dst["row_time_ns"], u.astype(float), v)
        got = fa[f"flow_{direction}"][v, u].astype(np.float64)
        assert (part == 0).sum() > 300 and (part == 1).sum() > 300
        for p in (0, 1):
            sel = part == p
            worst[(direction, p)] = float(np.abs(got[sel] - flow[sel]).max())
        if direction == "forward":
            sfw = fa["scene_flow_world"][v, u].astype(np.float64)
            rigid = part >= 0
            worst["scene_flow_m"] = float(np.abs(sfw[rigid] - sf_cam[rigid] @ R_wc.T).max())
            assert np.abs(flow[part == 1]).max() > 5.0                     # the tip really moves (px)
        assert np.abs(got[part == 0]).max() < 1e-4, direction              # static root: no flow
    print(f"two-bone bar, worst |flow - closed form| px (direction, 0 root / 1 tip) and scene flow m: {worst}")
    assert max(v for k, v in worst.items() if k != "scene_flow_m") < 2e-3, worst
    assert worst["scene_flow_m"] < 1e-4, worst
    assert fm["method"]["forward"]["max_material_point_distance_m"] < 1e-4


def test_shape_key_blend_linear_in_time(deform):
    """Plate blended from its basis to a stretched key, k = 30 t: every plate point in closed form."""
    e, (fm, fa), ((m0, a0), (m1, a1)) = deform
    truth = e.truth
    K, T, M = truth["K"], truth["T"], truth["plate_matrix"]
    M_inv, T_inv = np.linalg.inv(M), np.linalg.inv(T)
    plate = _index(m0, "blend_plate")

    def to_local(Xc):
        return (np.c_[Xc, np.ones(len(Xc))] @ (M_inv @ T).T)[:, :2]

    def to_camera(local):
        return (np.c_[local, np.ones(len(local))] @ (T_inv @ M).T)[:, :3]
    for direction, src, dst in (("forward", a0, a1), ("backward", a1, a0)):
        v, u = np.nonzero(src["instance_id"] == plate)
        assert u.size > 1000
        X = _camera_points(K, u.astype(float), v)
        rest = ds.plate_rest(src["row_time_ns"][v] * 1e-9 * ds.FPS, to_local(X))
        ud, vd, Y = _solve_landing(K, dst["row_time_ns"], lambda t: to_camera(ds.plate_local(t * ds.FPS, rest)))  # noqa: B023
        assert (fa[f"flow_{direction}_correspondence_defined"][v, u] == 1).all()
        err = np.abs(fa[f"flow_{direction}"][v, u] - np.stack([ud - u, vd - v], -1)).max()
        print(f"shape-key plate {direction}: worst |flow - closed form| {err:.3g} px over {u.size} pixels")
        assert err < 2e-3, (direction, err)
        if direction == "forward":
            sf = (Y - X) @ T[:3, :3].T
            assert np.abs(fa["scene_flow_world"][v, u] - sf).max() < 1e-4
            assert np.abs(ud - u).max() > 5.0


def test_topology_change_is_undefined_with_its_reason(deform):
    e, (fm, fa), ((m0, a0), (m1, a1)) = deform
    grid = _index(m0, "built_grid")
    rows = {o["name"]: o for o in fm["method"]["objects"]}
    assert rows["built_grid"]["correspondence"] == "undefined"
    assert rows["built_grid"]["reason"].startswith("topology changes")
    assert rows["bar"]["material_points"] == rows["blend_plate"]["material_points"] == "mesh"
    assert rows["bar"]["correspondence"] == "defined" and "reason" not in rows["bar"]
    for direction, src in (("forward", a0), ("backward", a1)):
        on = src["instance_id"] == grid
        assert on.sum() > 200
        assert not fa[f"flow_{direction}_correspondence_defined"][on].any()
        assert np.isnan(fa[f"flow_{direction}"][on]).all()


def test_deforming_flow_passes_the_checker_including_cycle_consistency(deform):
    e, (fm, fa), _ = deform
    report, failed = failures(e.bundle)
    assert not failed, failed
    checks = {c["check"]: c for ev in report["events"] for c in ev["checks"]}
    cycle = checks["flow_cycle_consistency"]
    assert cycle["status"] == "pass" and cycle["values"]["pixels"] > 50000
    assert checks["flow_undefined_objects"]["status"] == "pass" and checks["flow_undefined_objects"]["values"] == {
        "objects": 1}
    assert checks["deformation_motion_steps"]["status"] == "pass"
    # the deforming pixels take part: the bar's and the plate's pixels are mutually visible
    assert fm["method"]["forward"]["deforming_pixels"] > 5000
    assert (fa["flow_forward_dest_visible"] == 1).sum() > 50000


def test_checker_catches_a_defined_object_declared_undefined(deform, tmp_path):
    import json
    import shutil

    from tests.helpers import assert_fails

    e, _, _ = deform
    root = tmp_path / "b"
    shutil.copytree(e.bundle, root)
    path = root / "flows" / "camera_front" / "000000-000001" / "manifest.json"
    m = json.loads(path.read_text())
    bar = next(o for o in m["method"]["objects"] if o["name"] == "bar")
    bar.update(correspondence="undefined", reason="topology changes (claimed)")
    path.write_text(json.dumps(m))
    assert_fails(root, "flow_undefined_objects", "bar (forward)", "bar (backward)")


def test_verification_rows_cross_the_moving_and_deforming_objects(deform):
    """verify_rows = 3: the first and last rows, and one through the largest moving object (the shape-key plate
    or the bar), re-rendered alone at their exact time: the deforming objects' labels agree there."""
    e, _, events = deform
    for m, a in events:
        ver = m["method"]["verification"]
        rows = [r["row"] for r in ver["rows"]]
        H = a["instance_id"].shape[0]
        moving = [o["render_index"] for o in m["objects"] if o["motion"] == "moving"]
        assert rows[0] == 0 and rows[-1] == H - 1 and len(rows) == 3
        assert np.isin(a["instance_id"][rows[1]], moving).sum() > 20
        assert ver["worst_range_error_m"] < 1e-3 and ver["worst_silhouette_error_px"] <= 1.0


def test_motion_rows_selection():
    from rowbeam.blender.export.verify import motion_rows, verify_rows

    ids = np.zeros((20, 8), np.uint32)
    ids[3:6, 1:3] = 7          # small moving object, rows 3..5
    ids[10:17, 2:8] = 9        # large moving object, rows 10..16
    ids[:, 0] = 4              # static object in every row
    assert motion_rows(ids, [7, 9], 3) == [0, 13, 19]
    assert motion_rows(ids, [7, 9], 4) == [0, 4, 13, 19]
    assert motion_rows(ids, [7, 9], 6) == [0, 3, 4, 13, 16, 19]
    assert motion_rows(ids, [], 3) == verify_rows(20, 3) == [0, 10, 19]
    assert motion_rows(ids, [7, 9], 0) == []


def test_deformation_motion_steps_measured_and_within_tolerance(deform):
    """Each deforming object's Cycles motion steps are chosen so linear interpolation between them stays within
    1 mm and 0.1 px of the exactly evaluated mesh."""
    _, _, events = deform
    for m, _ in events:
        block = m["method"]["deformation"]
        rows = {o["name"]: o for o in block["objects"]}
        assert block["tolerance"] == {"m": 1e-3, "px": 0.1}
        for name in ("bar", "blend_plate"):
            o = rows[name]
            assert o["within_tolerance"] and o["max_error_m"] <= 1e-3 and o["max_error_px"] <= 0.1, o
            assert o["motion_samples"] == 2 ** o["motion_steps"] + 1 and o["motion_steps"] >= 7
        assert rows["blend_plate"]["max_error_m"] < 1e-6   # a linear blend is exact between samples (float32 mesh)
        assert rows["bar"]["max_error_m"] > 0                      # a rotation is not
        grid = rows["built_grid"]              # no vertex moves; its vertex count may change inside the shutter
        assert ("reason" in grid and not grid["within_tolerance"]) or grid["max_error_m"] == 0.0


def test_motion_steps_are_raised_until_within_tolerance(tmp_path):
    """A bar spinning at 40 rad/s starting from 1 motion step (3 samples over the 12 ms shutter): the chord error
    of the farthest tip vertex is 14 mm at 1 step, 3.6 mm at 2, 0.9 mm at 3, so 3 steps are chosen; the recorded
    error equals the closed-form sagitta r (1 - cos(dtheta / 2)). (At the default 7 steps a 1 mm error needs
    ~670 rad/s.)"""
    import bpy

    from rowbeam.blender.cycles.cycles_timing import label_shutter
    from rowbeam.blender.flow.mesh_motion import choose_deform_steps
    from rowbeam.model.rig import parse_rig
    from rowbeam.blender.compat.scene_clock import camera_poses, scene_clock

    truth, rig = ds.deforming_actors(scale=SCALE, omega=40.0)
    scene = bpy.context.scene
    clock = scene_clock(scene)
    sensor = parse_rig(rig).sensors[0]
    timing = sensor.timing(0, truth["size"][1])
    times = [timing.row_time_exact(v) for v in range(timing.rows)]
    poses = camera_poses(scene, clock, scene.objects["camera_front"], times)
    shutter = label_shutter(timing)
    out = choose_deform_steps(scene, clock, [scene.objects["bar"]], shutter, 1, times, poses, truth["K"], 1e-3, 0.1)
    (bar,) = out
    # chord sagitta of the farthest rigid tip vertex (r = |(2.3, +-0.3) - joint|) over one sample interval
    r = np.hypot(ds.BAR_COLUMNS[-1] - ds.JOINT_CAMERA[0], ds.BAR_HALF_HEIGHT)

    def sagitta(steps):
        return r * (1 - np.cos(40.0 * float(shutter.duration_ns) * 1e-9 / 2 ** steps / 2))
    assert sagitta(2) > 1e-3 > sagitta(3)
    assert bar["motion_steps"] == 3 and bar["within_tolerance"] and bar["max_error_px"] <= 0.1
    assert bar["max_error_m"] == pytest.approx(sagitta(3), rel=0.02)


def _walker(scale):
    from rowbeam.blender.scenes import running_example

    running_example.build(1280 // scale, 720 // scale)
    return None, running_example.rig(lidar=False, rgb_samples=0, verify_rows=3, object_labels=False)


def test_running_example_pedestrian_walks_with_material_point_flow(exports):
    """The demo's skinned pedestrian (events 30 -> 31, 320x180): its pixels take the mesh path with correspondence
    defined, and a second path agrees — Blender's ray cast at the source row's time identifies the hit triangle
    and barycentric coordinates, the evaluated mesh at the landing row's exact time (frame_set) moves that point,
    and the camera pose interpolated at that row projects it to the exported pixel + flow."""
    import bpy

    from rowbeam.model.camera_model import ray_directions
    from rowbeam.check.runner import check_bundle
    from rowbeam.model.timing import SceneClock
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export

    e = exports("walker", _walker, scale=4, events={"camera_front": (30, 2)})
    flow = e.bundle / "flows" / "camera_front" / "000030-000031"
    run_export(plan_export(ExportRequest(out=e.bundle, blend=e.blend, rig=e.rig, first_event=30, count=2, flow=True,
                                         device="cpu")))
    report = check_bundle(e.bundle)
    assert report["status"] == "pass", [c for ev in report["events"] for c in ev["checks"] if c["status"] != "pass"]
    fm, fa = load_event(flow)
    (m0, a0), (m1, a1) = (load_event(e.bundle / "events" / "camera_front" / f"{i:06d}") for i in (30, 31))
    rows = {o["name"]: o for o in fm["method"]["objects"]}
    assert rows["pedestrian"]["material_points"] == "mesh" and rows["pedestrian"]["correspondence"] == "defined"
    ped = _index(m0, "pedestrian")
    v_all, u_all = np.nonzero((a0["instance_id"] == ped) & (fa["flow_forward_correspondence_defined"] == 1))
    assert u_all.size > 15                  # the figure is ~16 px tall at 23 m
    bpy.ops.wm.open_mainfile(filepath=str(e.blend), use_scripts=False)
    scene = bpy.context.scene
    clock = SceneClock(scene.render.fps, scene.render.fps_base, scene.frame_start)
    obj = scene.objects["pedestrian"]
    K = np.array(m0["calibration"]["K"])
    H = a0["instance_id"].shape[0]
    errors = []
    for i in np.linspace(0, u_all.size - 1, 12).round().astype(int):
        u, v = int(u_all[i]), int(v_all[i])
        frame, sub = clock.frame_subframe(int(a0["row_time_ns"][v]))
        scene.frame_set(frame, subframe=sub)
        dg = bpy.context.evaluated_depsgraph_get()
        T = a0["row_T_world_camera"][v]
        d = T[:3, :3] @ ray_directions(K, u, v)
        hit, loc, _, face, hit_obj, _ = scene.ray_cast(dg, T[:3, 3].tolist(), (d / np.linalg.norm(d)).tolist())
        assert hit and hit_obj.name == "pedestrian"
        ev = obj.evaluated_get(dg)
        mesh = ev.to_mesh()
        M = np.array(ev.matrix_world)
        V = np.array([M[:3, :3] @ np.array(x.co) + M[:3, 3] for x in mesh.vertices])
        loc = np.array(loc)
        corners = [list(mesh.polygons[face].vertices)]
        ev.to_mesh_clear()
        q = V[corners[0]]                       # the hit quad: barycentric in the triangle holding the hit
        for tri in ((0, 1, 2), (0, 2, 3)):
            A, B, C = q[list(tri)]
            n = np.cross(B - A, C - A)
            b = np.array([np.cross(C - B, loc - B) @ n, np.cross(A - C, loc - C) @ n, np.cross(B - A, loc - A) @ n])
            b /= n @ n
            if b.min() > -1e-6:
                ids = [corners[0][k] for k in tri]
                break
        vd = v + float(fa["flow_forward"][v, u, 1])
        r0 = min(int(np.floor(np.clip(vd, 0, H - 1))), H - 1)
        a = np.clip(vd, 0, H - 1) - r0
        r1 = min(r0 + 1, H - 1)
        t_d = (1 - a) * int(a1["row_time_ns"][r0]) + a * int(a1["row_time_ns"][r1])
        frame, sub = clock.frame_subframe(int(round(t_d)))
        scene.frame_set(frame, subframe=sub)
        ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
        mesh = ev.to_mesh()
        M = np.array(ev.matrix_world)
        P = sum(bk * (M[:3, :3] @ np.array(mesh.vertices[k].co) + M[:3, 3]) for bk, k in zip(b, ids, strict=False))
        ev.to_mesh_clear()
        Tc = (1 - a) * a1["row_T_world_camera"][r0] + a * a1["row_T_world_camera"][r1]
        X = np.linalg.solve(Tc, np.r_[P, 1.0])[:3]
        uv = K[:2, :2] @ (X[:2] / X[2]) + K[:2, 2]
        errors.append(float(np.hypot(*(uv - (np.array([u, v]) + fa["flow_forward"][v, u])))))
    print(f"walker vs independent ray-cast path: worst {max(errors):.3g} px over {len(errors)} pixels")
    assert max(errors) < 0.02, errors


def test_partly_sampled_mesh_refuses_rows_it_was_not_sampled_at():
    """A deforming mesh evaluated at some rows only: reading a material point at a row it was not evaluated at (or,
    with frac > 0, at the next row) raises MissingMeshRows naming exactly those rows; frac == 0 never reads the next."""
    from rowbeam.blender.flow.material_points import DeformingMesh, MissingMeshRows, locate

    tri = np.array([[0, 1, 2]])
    V = np.full((6, 3, 3), np.nan)
    sampled = np.zeros(6, bool)
    for r in (2, 3):                                     # a unit triangle moving +x by 1 m per row
        V[r] = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]) + [r, 0, 0]
        sampled[r] = True
    mesh = DeformingMesh(V, tri, sampled)
    bary = np.array([[0.5, 0.25, 0.25]])
    assert np.allclose(mesh.at(np.array([2]), np.array([0]), bary, np.array([0.5])), [[2.75, 0.25, 0]])
    assert np.allclose(mesh.at(np.array([3]), np.array([0]), bary, np.array([0.0])), [[3.25, 0.25, 0]])
    with pytest.raises(MissingMeshRows) as gap:
        mesh.at(np.array([3, 3]), np.array([0, 0]), np.vstack([bary, bary]), np.array([0.0, 0.5]))
    assert gap.value.rows.tolist() == [4] and gap.value.mesh is mesh
    with pytest.raises(MissingMeshRows) as gap:
        locate(mesh, np.array([1, 2, 5]), np.zeros((3, 3)))
    assert gap.value.rows.tolist() == [1, 5]
    t, b, d = locate(mesh, np.array([2]), np.array([[2.25, 0.25, 0.0]]))
    assert t.tolist() == [0] and np.allclose(b, bary) and d.max() < 1e-12


def test_meshes_sampled_on_demand_give_the_flow_of_every_row(deform, monkeypatch):
    """The flow export evaluates deforming meshes at the rows each object shows in either event (+- a margin) and
    at any further row a destination solve reaches. Started from the source rows alone (no margin, so destination
    solves must ask for rows) and, separately, given every row of both events (the former behaviour), it writes the
    published payloads bit for bit."""
    from rowbeam.blender.flow import flow_pair
    from rowbeam.blender.export.run import ExportRequest, plan_export

    e, (fm, fa), _ = deform
    rows = fm["method"]["deforming_mesh_rows"]
    assert rows["bar"]["source"] < 180 and rows["blend_plate"]["destination"] < 180
    ctx = plan_export(ExportRequest(out=e.bundle, blend=e.blend, rig=e.rig, first_event=0, count=2, flow=True,
                                    device="cpu")).context
    events = [e.bundle / "events" / "camera_front" / f"{i:06d}" for i in (0, 1)]
    own_rows = flow_pair._initial_mesh_rows

    def source_rows_only(deforming, index_of, instance_ids):
        return {(k, j): {int(r) for r in np.flatnonzero((instance_ids[k] == index_of[n]).any(axis=1))}
                for j, n in enumerate(deforming) for k in (0, 1)}

    def every_row(deforming, index_of, instance_ids):
        return {key: set(range(instance_ids[key[0]].shape[0])) for key in own_rows(deforming, index_of, instance_ids)}

    for initial, more_solves in ((source_rows_only, True), (every_row, False)):
        monkeypatch.setattr(flow_pair, "_initial_mesh_rows", initial)
        monkeypatch.setattr(flow_pair, "MESH_ROW_MARGIN", 0)
        arrays, method, _ = flow_pair.compute_flow_pair(ctx, *events)
        assert (method["flow_solves"] > 2) == more_solves, method["flow_solves"]
        for name, value in arrays.items():
            assert value.tobytes() == fa[name].tobytes(), (initial.__name__, name)
        assert [(o["name"], o["material_points"], o["correspondence"]) for o in method["objects"]] == \
            [(o["name"], o["material_points"], o["correspondence"]) for o in fm["method"]["objects"]]


def test_forward_payloads_handed_over_early_are_the_final_ones_and_withdrawn_when_solved_again(deform, monkeypatch):
    """compute_flow_pair hands the forward direction's payloads to the flow's PayloadWriter once solved (written while
    the backward direction solves); when which objects are undefined changes (a later mesh sample), both directions
    solve again and the earlier hand-over is withdrawn: what stays handed over is the returned arrays."""
    from rowbeam.blender.flow import flow_pair
    from rowbeam.blender.export.run import ExportRequest, plan_export

    e, (fm, fa), _ = deform
    ctx = plan_export(ExportRequest(out=e.bundle, blend=e.blend, rig=e.rig, first_event=0, count=2, flow=True,
                                    device="cpu")).context
    events = [e.bundle / "events" / "camera_front" / f"{i:06d}" for i in (0, 1)]

    class Early:
        def __init__(self):
            self.held, self.calls = {}, []

        def submit(self, arrays):
            assert not self.held.keys() & arrays.keys()
            self.held.update(arrays)
            self.calls.append(("submit", sorted(arrays)))

        def withdraw(self, names):
            for n in names:
                del self.held[n]
            self.calls.append(("withdraw", sorted(names)))

    forward = sorted(n for n in flow_pair.PAYLOADS if "backward" not in n)
    early = Early()
    arrays, method, _ = flow_pair.compute_flow_pair(ctx, *events, early=early)
    assert early.calls == [("submit", forward)] and method["flow_solves"] == 2
    assert all(early.held[n] is arrays[n] for n in forward)
    # the backward solve reaches a row not sampled yet, and the new sample changes which objects are undefined
    from rowbeam.blender.flow.material_points import MissingMeshRows

    solve, rounds = flow_pair.geometric_flow, []

    def backward_misses_once(src, dst, *a):
        if not a[-1] and not rounds:                  # the first backward solve (no scene flow)
            rounds.append(1)
            raise MissingMeshRows(dst.meshes[0], np.array([0]))
        return solve(src, dst, *a)
    monkeypatch.setattr(flow_pair, "geometric_flow", backward_misses_once)
    same = flow_pair.same_topology
    monkeypatch.setattr(flow_pair, "same_topology", lambda a, b: same(a, b) or ("forced" if rounds else None))
    early = Early()
    arrays, method, _ = flow_pair.compute_flow_pair(ctx, *events, early=early)
    assert early.calls == [("submit", forward), ("withdraw", forward), ("submit", forward)], early.calls
    assert method["flow_solves"] == 4
    assert all(early.held[n] is arrays[n] for n in forward) and early.held.keys() == set(forward)
