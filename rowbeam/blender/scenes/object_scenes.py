"""Calibration scene for object labels (bpy): squares facing the camera whose projections are known pixel
rectangles (edges on half-integer pixel coordinates, so pixel centres are 0.5 px from every edge) —
one half outside the image, one partly covered by another — a rotated box at a known pose, and a square
moving along camera x (rolling shutter shears it). Camera: the seed camera at 1/`scale` resolution.
"""
from __future__ import annotations

import numpy as np

from rowbeam.blender.scenes import calibration, common

FPS = calibration.FPS


def _rect_matrix(T, K, u0, u1, v0, v1, z):
    """(matrix_world, half_x, half_y) of an add_quad facing the camera whose projection is [u0,u1] x [v0,v1] px at depth z."""
    f, cx, cy = K[0, 0], K[0, 2], K[1, 2]
    xc, yc = ((u0 + u1) / 2 - cx) * z / f, ((v0 + v1) / 2 - cy) * z / f
    M = np.eye(4)
    M[:3, :3] = np.diag([1.0, 1.0, 1.0])      # quad local x = camera x, y = camera y, normal +z (away from camera)
    M[:3, 3] = (xc, yc, z)
    return T @ M, (u1 - u0) / 2 * z / f, (v1 - v0) / 2 * z / f, M


def _rot(ax, ay, az):
    cx_, sx = np.cos(ax), np.sin(ax)
    cy_, sy = np.cos(ay), np.sin(ay)
    cz, sz = np.cos(az), np.sin(az)
    Rx = np.array([[1, 0, 0], [0, cx_, -sx], [0, sx, cx_]])
    Ry = np.array([[cy_, 0, sy], [0, 1, 0], [-sy, 0, cy_]])
    Rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    return Rz @ Ry @ Rx


def object_calibration(scale: int = 16, mover_speed: float = 150.0, direction: str = "top_to_bottom"):
    """Objects with closed-form labels (pixel rectangles at scale 16, 80 x 45 px, f = 50, c = (40, 22.5)):
    truncated: u 59.5..99.5, v 10.5..20.5 at z 10 (40 x 10 px, half outside: 400 all, 200 in image);
    back: u 9.5..29.5, v 24.5..39.5 at z 12 (300 px); front: u 19.5..39.5, v 29.5..34.5 at z 6 (100 px)
    covering 10 x 5 = 50 px of back; box: 1.0 x 0.6 x 0.4 m rotated at camera (-1.5, -1.2, 9);
    mover: square 1.2 x 1.2 m at camera z 10 moving along camera x at `mover_speed` m/s."""
    _, cam, T, K, size = calibration._base(scale)
    truth = {"K": K, "T_world_camera": T, "size": size, "rects": {}, "poses": {}, "ids": {}}
    for name, oid, (u0, u1, v0, v1, z) in (("truncated", 0x9001, (59.5, 99.5, 10.5, 20.5, 10.0)),
                                           ("back", 0x9002, (9.5, 29.5, 24.5, 39.5, 12.0)),
                                           ("front", 0x9003, (19.5, 39.5, 29.5, 34.5, 6.0))):
        Mw, hx, hy, Mc = _rect_matrix(T, K, u0, u1, v0, v1, z)
        common.tag(common.add_quad(name, hx, hy, Mw), oid, "target")
        truth["rects"][name] = (u0, u1, v0, v1)
        truth["poses"][name] = Mc
        truth["ids"][name] = oid
    Mc = np.eye(4)
    Mc[:3, :3] = _rot(0.4, -0.6, 0.3)
    Mc[:3, 3] = (-1.5, -1.2, 9.0)
    box = common.add_box("box", (1.0, 0.6, 0.4), (0, 0, 0))
    box.matrix_world = common.Matrix((T @ Mc).tolist())
    common.tag(box, 0x9004, "target")
    truth["poses"]["box"], truth["ids"]["box"], truth["box_size"] = Mc, 0x9004, (1.0, 0.6, 0.4)
    Mc = np.eye(4)
    Mc[:3, 3] = (-4.63, -1.2, 10.0)
    mover = common.add_quad("mover", 0.6, 0.6, T @ Mc)
    p0 = np.array(mover.matrix_world.translation)
    v_world = T[:3, 0] * mover_speed
    common.key_locations(mover, [(1, tuple(p0)), (2, tuple(p0 + v_world / FPS))])
    common.tag(mover, 0x9005, "target")
    truth["poses"]["mover"], truth["ids"]["mover"] = Mc, 0x9005
    truth["mover_velocity_camera"] = np.array([mover_speed, 0.0, 0.0])
    rig = common.camera_rig("camera_front", cam.name, rgb_samples=0, verify_rows=2, object_labels=True,
                            readout_direction=direction)
    return truth, rig


def object_bad_input(kind: str = "mixed"):
    """Bad-input variants: "mixed" = a curve without geometry (skipped with a reason), a quad with non-uniform
    scale (2, 0.5, 1) (baked into its asset, noted), a normal quad, a quad hidden from frame 2 and an instanced
    collection (an empty instancing a quad: an object of its own); "negative_scale" = a quad with
    scale (-1, 1, 1) (refused)."""
    import bpy

    _, cam, T, K, size = calibration._base(16)
    Mw, hx, hy, _ = _rect_matrix(T, K, 9.5, 29.5, 9.5, 19.5, 10.0)
    common.tag(common.add_quad("plain", hx, hy, Mw), 0xA001, "target")
    Mw, hx, hy, _ = _rect_matrix(T, K, 39.5, 59.5, 24.5, 34.5, 10.0)
    q = common.add_quad("scaled", hx / 2, hy * 2, Mw)         # scale (2, 0.5, 1) restores the rectangle
    q.scale = (-2.0, 0.5, 1.0) if kind == "negative_scale" else (2.0, 0.5, 1.0)
    common.tag(q, 0xA002, "target")
    if kind == "mixed":
        Mw, hx, hy, _ = _rect_matrix(T, K, 59.5, 69.5, 4.5, 9.5, 10.0)
        blink = common.add_quad("blink", hx, hy, Mw)           # rendered until frame 2, hidden from frame 2
        common.tag(blink, 0xA004, "target")
        for frame, hidden in ((1, False), (2, True)):
            blink.hide_render = hidden
            blink.keyframe_insert("hide_render", frame=frame)
        blink.hide_render = False
        bpy.context.scene.frame_set(1)
        curve = bpy.data.curves.new("empty_curve", "CURVE")
        obj = bpy.data.objects.new("empty_curve", curve)
        bpy.context.scene.collection.objects.link(obj)
        common.tag(obj, 0xA003, "target")
        # an instanced collection (an empty instancing a quad that projects to u 9.5..29.5, v 27.5..37.5)
        Mw, hx, hy, _ = _rect_matrix(T, K, 9.5, 29.5, 27.5, 37.5, 10.0)
        src = common.add_quad("instanced_quad", hx, hy)
        coll = bpy.data.collections.new("instanced_collection")
        for c in list(src.users_collection):
            c.objects.unlink(src)
        coll.objects.link(src)
        from mathutils import Matrix

        inst = bpy.data.objects.new("collection_instancer", None)
        inst.instance_type, inst.instance_collection = "COLLECTION", coll
        inst.matrix_world = Matrix(np.asarray(Mw, dtype=np.float64).tolist())
        bpy.context.scene.collection.objects.link(inst)
    return {"K": K}, common.camera_rig("camera_front", cam.name, rgb_samples=0, verify_rows=1, object_labels=True)
