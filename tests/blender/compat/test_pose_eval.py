"""Direct pose evaluation (rowbeam.blender.compat.pose_eval) against frame_set on every animation kind of the calibration
scenes, the running example's parent chain, synthetic Euler orders / quaternions / deltas / Bezier / parent
inverses, and the frame_set fallback (constraints, drivers, NLA)."""
from __future__ import annotations

import numpy as np
import pytest

from rowbeam.blender.compat import scene_clock
from rowbeam.blender.compat.pose_eval import EULER_ORDERS, plain_reason
from rowbeam.blender.scenes import calibration, common, flow_scenes, lidar_calibration, running_example

TOL = 1e-12     # the direct path replays Blender's float32 arithmetic: equal to frame_set bit for bit here


def _times(scene, n=97):
    clock = scene_clock.scene_clock(scene)
    end = float(clock.ns_of(scene.frame_end))
    # irregular times (not on frames), plus exact frames, across the whole range and a little beyond its start
    return clock, sorted({int(t) for t in np.linspace(0, end, n) + np.linspace(0, 1.3e6, n)} | {0, int(end)})


def _both(objects, label):
    import bpy

    scene = bpy.context.scene
    clock, times = _times(scene)
    assert scene_clock.direct_evaluation_reason(scene, objects) is None, label
    direct = scene_clock.objects_world_matrices(scene, clock, objects, times)
    scene_clock.FORCE_FRAME_SET = True
    try:
        reference = scene_clock.objects_world_matrices(scene, clock, objects, times)
    finally:
        scene_clock.FORCE_FRAME_SET = False
    moved = np.abs(reference - reference[:, :1]).max()
    return np.abs(direct - reference).max(), moved


def _animated(names):
    import bpy

    return [bpy.data.objects[n] for n in names]


CALIBRATION_SCENES = {
    "moving_plane": (lambda: calibration.moving_plane(scale=8), ["moving_plane", "camera_front"]),
    "ego_forward": (lambda: calibration.ego_forward(scale=8), ["camera_front"]),
    "ego_yaw": (lambda: calibration.ego_yaw(scale=8), ["camera_front"]),
    "rotating_plate_quaternion": (lambda: flow_scenes.rotating_plate(scale=8), ["plate", "camera_front"]),
    "lidar_moving_wall": (lambda: lidar_calibration.moving_wall(steps=16), ["moving_wall", "lidar_mount"]),
    "lidar_ego_translating": (lambda: lidar_calibration.ego_translating(steps=16), ["lidar_mount"]),
    "running_example_parent_chain_bezier": (lambda: running_example.build(64, 36),
                                           ["ego_camera", "lidar_mount", "shuttle", "cyclist", "pedestrian"]),
}


@pytest.mark.parametrize("name", sorted(CALIBRATION_SCENES))
def test_direct_poses_equal_frame_set_on_calibration_scenes(name):
    import bpy

    build, wanted = CALIBRATION_SCENES[name]
    build()
    names = [n for n in wanted if n in bpy.data.objects] or pytest.fail(f"{name}: none of {wanted}")
    err, moved = _both(_animated(names), name)
    assert err <= TOL, (name, err)
    assert moved > 1e-3, f"{name}: nothing moved, the comparison would prove nothing"


def test_direct_poses_equal_frame_set_on_every_rotation_kind():
    """Every Euler order and quaternions (unnormalised), delta transforms, scale, a parent with a non-identity
    parent inverse and a Bezier grandchild: the float32 operation order has to be Blender's."""
    common.new_scene(8, 8)
    objs = []
    for k, order in enumerate(EULER_ORDERS + ("QUATERNION",)):
        o = common.add_empty(f"e{k}", (k, 0.5, 1.0), (0.3, -0.2, 0.7))
        o.rotation_mode, o.scale, o.delta_location = order, (1.5, 0.7, 2.0), (0.1, 0.2, -0.3)
        if order == "QUATERNION":
            o.delta_rotation_quaternion = (1.0, 0.05, 0.0, 0.0)
            for f, q in ((1, (0.9, 0.1, 0.3, -0.2)), (20, (0.3, 0.5, -0.2, 0.8))):
                o.rotation_quaternion = q
                o.keyframe_insert("rotation_quaternion", frame=f)
        else:
            o.delta_rotation_euler = (0.05, 0.1, -0.02)
            for f, e in ((1, (0.3, -0.2, 0.7)), (20, (1.3, 0.4, -2.7))):
                o.rotation_euler = e
                o.keyframe_insert("rotation_euler", frame=f)
        for f, loc in ((1, (k, 0.5, 1.0)), (25, (k + 3, -2.5, 4.0))):
            o.location = loc
            o.keyframe_insert("location", frame=f)
        objs.append(o)
    child = common.add_empty("child", (1, 2, 3), (0.1, 0.2, 0.3))
    child.parent = objs[2]
    child.matrix_parent_inverse = objs[2].matrix_world.inverted()
    grandchild = common.add_empty("grandchild", (0.5, 0, 0), (0.4, 0, 0.1))
    grandchild.parent = child
    for f, loc in ((1, (0.5, 0, 0)), (30, (0.7, 3, 1))):
        grandchild.location = loc
        grandchild.keyframe_insert("location", frame=f)
    err, moved = _both(objs + [child, grandchild], "rotation kinds")
    assert err <= TOL and moved > 0.1, err


def test_fallback_to_frame_set_for_constraints_drivers_and_nla():
    """Motion the direct path does not model is detected (reason named) and still exact via frame_set."""
    import bpy

    common.new_scene(8, 8)
    target = common.add_empty("target", (0, 0, 0))
    for f, loc in ((1, (0, 0, 0)), (30, (5, 1, 0))):
        target.location = loc
        target.keyframe_insert("location", frame=f)
    follower = common.add_empty("follower", (0, 3, 0))
    follower.constraints.new("COPY_LOCATION").target = target
    driven = common.add_empty("driven", (0, 0, 0))
    drv = driven.driver_add("location", 2).driver
    drv.expression = "frame / 10"
    nla = common.add_empty("nla", (0, 0, 0))
    nla.keyframe_insert("location", frame=1)
    track = nla.animation_data.nla_tracks.new()
    track.strips.new("s", 1, nla.animation_data.action)
    child_of_constrained = common.add_empty("child_of_constrained", (1, 0, 0))
    child_of_constrained.parent = follower
    scene = bpy.context.scene
    clock, times = _times(scene, 11)
    for obj, word in ((follower, "constraints"), (driven, "drivers"), (nla, "NLA"), (child_of_constrained, "parent")):
        reason = plain_reason([obj])
        assert reason and word in reason, (obj.name, reason)
    got = scene_clock.objects_world_matrices(scene, clock, [follower, driven, target], times)
    for i, t in enumerate(times):
        scene_clock.set_time(scene, clock, t)
        for j, o in enumerate((follower, driven, target)):
            assert np.array_equal(got[j, i], np.array(o.matrix_world))
    assert abs(got[0, -1, 0, 3] - 5.0) < 1e-6 and got[1, -1, 2, 3] > 2.0     # the constraint and driver acted
    assert plain_reason([target]) is None
    scene.render.frame_map_new = 200
    assert "remapping" in scene_clock.direct_evaluation_reason(scene, [target])


def test_frames_subframes_equal_the_clock():
    """The integer-arithmetic batch conversion gives exactly SceneClock.frame_subframe (NTSC rate, Fractions,
    negative times, numpy ints)."""
    from fractions import Fraction

    from rowbeam.model.timing import SceneClock

    for clock in (SceneClock(30, 1.0, 1), SceneClock(30000, 1001.0, 7), SceneClock(24, 1.001, -3)):
        times = [0, 1, -5, 33_366_667, np.int64(123_456_789), Fraction(10**9, 3), Fraction(-7, 11),
                 Fraction(33_366_667 * 7 + 1, 2)] + list(range(0, 10**9, 9_999_991))
        frames, subframes = scene_clock.frames_subframes(clock, times)
        assert list(zip(frames, subframes, strict=True)) == [clock.frame_subframe(t) for t in times]


def test_certainly_static_only_when_nothing_can_move_the_object():
    """Motion blur is turned off only for objects nothing animates (own or parent F-curves, constraints, drivers)."""
    from rowbeam.blender.compat.pose_eval import certainly_static

    common.new_scene(8, 8)
    still = common.add_empty("still", (1, 2, 3), (0.1, 0.2, 0.3))
    keyed = common.add_empty("keyed", (0, 0, 0))
    keyed.keyframe_insert("location", frame=1)                       # one key: still counts as animated
    child = common.add_empty("child_of_keyed", (1, 0, 0))
    child.parent = keyed
    constrained = common.add_empty("constrained", (0, 0, 0))
    constrained.constraints.new("COPY_LOCATION").target = still
    driven = common.add_empty("driven", (0, 0, 0))
    driven.driver_add("location", 0).driver.expression = "frame"
    hidden_only = common.add_empty("hidden_only", (0, 0, 0))
    hidden_only.keyframe_insert("hide_render", frame=1)              # animates visibility, not the transform
    assert certainly_static(still) and certainly_static(hidden_only)
    for obj in (keyed, child, constrained, driven):
        assert not certainly_static(obj), obj.name


def test_constant_rotation_channels_give_the_bits_of_the_row_by_row_evaluation():
    """A rotation channel whose rows are all bit-identical is converted once and repeated; rows equal as numbers but
    not as bits (-0.0 vs 0.0, whose sine differs in sign) or different anywhere take the row-by-row path. Either way
    the matrices are those of converting every row."""
    from rowbeam.blender.compat.pose_eval import _euler_to_mat3, _per_distinct_value, _quat_to_mat3

    rng = np.random.default_rng(3)
    eul = np.repeat(rng.uniform(-3, 3, (1, 3)).astype(np.float32), 50, axis=0)
    quat = np.repeat(np.array([[0.9, 0.1, 0.3, -0.2]], dtype=np.float32), 50, axis=0)
    signed_zero = np.zeros((50, 3), dtype=np.float32)
    signed_zero[7] = -0.0
    varying = rng.uniform(-3, 3, (50, 3)).astype(np.float32)
    for fn, values in ((lambda e: _euler_to_mat3(e, "YZX"), eul), (_quat_to_mat3, quat),
                       (lambda e: _euler_to_mat3(e, "XYZ"), signed_zero), (lambda e: _euler_to_mat3(e, "ZXY"), varying)):
        assert _per_distinct_value(fn, values).tobytes() == fn(values).tobytes()
    assert np.signbit(_per_distinct_value(lambda e: _euler_to_mat3(e, "XYZ"), signed_zero)[7]).any()
