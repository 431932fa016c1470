"""Object-level labels of a camera event (bpy): exact amodal masks on BOP's 3x canvas, counts, boxes,
poses at row time, content-addressed mesh assets.

Method (declared in the manifest): rigid meshes with few enough (row x triangle) pairs are rasterised from
their asset at every canvas row's pose (rowbeam.check.rasterize, clipped to the camera's near/far slab), Cycles'
visible pixels OR-ed in and counted as a cross-check; objects nothing can cover take the modal mask; the rest
(deforming, heavy meshes, hidden during the event) use Cycles label renders (1 sample, Gaussian 0.01 px, Object Index pass)
of a virtual 3W x 3H camera with the image's focal length in pixels and principal point shifted by
(W, H) — the "canvas" — whose rolling shutter is stretched so canvas row c keeps the timing model's
(extrapolated) time of image row c - H. In each render only one group of objects is visible to camera
rays (the others get hide_render = True, so they are not even synced); objects of a group have
non-overlapping padded projected boxes, so the Object Index pass gives each object's whole silhouette
with only its self-occlusion. Each render is cropped (border render) to the union of its group's boxes.
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import replace
from fractions import Fraction

import numpy as np

from rowbeam.model.camera_model import intrinsics_from_blender
from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import atomic_write_bytes, sha256_file
from rowbeam.model.frames import invert_rigid, rigid_part, world_from_opencv_camera
from rowbeam.model.lens import LensSpec, make_lens
from rowbeam.check.object_checks import DEFINITION, tight_box
from rowbeam.check.rasterize import (
    UNIT_BOX,
    CanvasRays,
    clipped_box_points,
    lens_canvas_box,
    ply_bytes,
    rasterize_rays,
    rasterize_rows,
    row_boxes,
)

from rowbeam.blender.cycles import cycles_setup as cs
from rowbeam.blender.cycles.cycles_timing import label_shutter, timed_rows_shutter
from rowbeam.blender.cycles.osl_camera import CLIP_M
from rowbeam.blender.compat.scene_clock import objects_world_matrices, set_time
from rowbeam.blender.compat.scene_patch import ScenePatch

BOX_PAD_PX = 2              # padding of projected boxes (px) beyond the sampled motion
POSE_SAMPLES = 5            # canvas rows at which boxes are projected
DEFORM_SAMPLE_ROWS = 33     # canvas rows (evenly spaced) at which a deforming object's mesh is first evaluated
ASSET_DIR = "assets/meshes"
RENDER_COST_PX = 100_000    # fixed cost of one Cycles render (sync, film, EXR) in rendered pixels (measured ~0.1 s vs ~1 us/px)
SHORTCUT_UNOCCLUDED = True  # objects no other object can cover take their amodal mask from the label render
RASTERISE_RIGID = True      # rigid meshes: amodal canvas mask rasterised from the asset instead of Cycles renders
RASTER_MAX_PAIRS = 20_000_000   # (canvas row, triangle) pairs above which an object is rendered by Cycles instead
RASTER_RULE = ("a rigid (not deforming), always-shown object whose (canvas rows of its box) x (triangles) <= "
               f"{RASTER_MAX_PAIRS} gets its canvas silhouette rasterised from its asset (float64: a pixel centre "
               "is covered when it lies inside the projection of a triangle clipped to near <= camera_z <= far) at "
               "each canvas row's pose (camera and object at the row's time), the same K; Cycles' visible pixels "
               "(instance_id) are then OR-ed in and counted (method.modal_pixels_added), so every modal pixel is "
               "cross-checked against the rasterised silhouette (the checker fails one farther than 0.02 px from an "
               "edge)")
UNOCCLUDED_RULE = ("an object whose padded projected box (mesh-box corners at 5 canvas-row times, padded 2 px + half the "
                   "largest motion between samples) lies inside the image and whose box pixels that show another "
                   "surface in the label render all have camera_z > 1.01 * (its farthest sampled camera z) + 0.01 m "
                   "takes amodal = modal from the label render (nothing can be in front of it)")

LENS_METHOD = ("rasterised_through_lens: every object with a mesh is rasterised per canvas pixel (a rigid one "
               "from its asset): the pixel centre is unprojected through the lens (rowbeam.model.lens.unproject, float64 "
               "Newton) to its normalized ray (x, y, 1) and is covered when that ray lies inside the pinhole projection "
               "(normalized coordinates) of a triangle clipped to near <= camera_z <= far, posed at the pixel's canvas "
               "row time (camera and object); rowbeam.check.rasterize.rasterize_rays over the canvas box "
               "rowbeam.check.rasterize.lens_canvas_box. Cycles' visible pixels (instance_id) are OR-ed in and counted "
               "(method.modal_pixels_added). A deforming object is rasterised the same way from its evaluated mesh "
               "(render settings) at each canvas row's exact time (row_mesh: those per-row world vertices, rows of its "
               "canvas box, for the checker; the mesh is evaluated at evenly spaced sample rows, then at every row "
               "of the canvas box of the rows evaluated so far until that box holds only evaluated rows); an object "
               "hidden (hide_render) during part of the event is labelled in "
               "every row when it is shown at the label render's time (the shutter centre: Blender syncs render "
               "visibility once per render), else listed in `skipped`")
ROW_MESH_RULE = ("vertices (rows, V, 3) float64 world metres of the object's evaluated mesh (render settings) at the "
                 "time of canvas rows first_canvas_row .. first_canvas_row + rows - 1 (the rows of its canvas box; none "
                 "covered elsewhere), triangles those of `asset`; the mask is rasterised from row c's vertices seen "
                 "by canvas_row_T_world_camera[c]")
LENS_CANVAS_RULE = ("through a lens the canvas is the pixels u in [-W, 2W), v in [-H, 2H) whose centre has a ray "
                    "(rowbeam.model.lens.unproject valid: inside the model's valid domain, where its radial map is "
                    "strictly increasing, inverse residual <= 1e-9 px); pixels beyond the valid domain are not part "
                    "of the canvas (never in a mask): px_count_all, truncation_fraction and visib_fract count canvas "
                    "pixels only")

METHOD = ("rasterised_or_cycles_canvas: rigid meshes rasterised from their assets (raster_rule); deforming meshes "
          "(shown at the label render's time) rasterised per canvas pixel from their evaluated mesh (render settings) "
          "at each canvas row's exact time, as through a lens with the pinhole model (row_mesh: those per-row world "
          "vertices, for the checker); objects no other "
          "object can cover from the label render (unoccluded_rule); the others by cycles_canvas_group_renders: "
          "Cycles renders of a 3W x 3H canvas camera (same f in px, principal point "
          "+ (W, H), lens / 3, shift / 3), rolling shutter stretched over 3H rows so canvas row c has the timing "
          "model's time of image row c - H (half-row correction applied), same motion steps as the label render; "
          "1 sample, Gaussian 0.01 px, Object Index pass; objects packed in groups whose padded projected boxes do "
          "not overlap, other objects hide_render = True (not synced); each render cropped to its group's boxes. The modal "
          "pixels (instance_id) are OR-ed into the amodal mask (a visible pixel lies on its silhouette); "
          "method.modal_pixels_added counts them")


def lens_shown(scene, clock, objs, timing, hidden_notes: dict) -> dict:
    """{k: shown} for the objects hidden during part of the canvas rows' times (hidden_notes): Blender takes render
    visibility at the scene time of the render, the label render's shutter centre (cycles_timing.label_shutter),
    so such an object is in every row of the labels or in none."""
    if not hidden_notes:
        return {}
    set_time(scene, clock, label_shutter(timing).centre_ns)
    return {k: not objs[k].hide_render for k in hidden_notes}


def deforming_row_meshes(scene, clock, objects, times) -> dict:
    """{name: (world vertices (len(times), V, 3) float64 m, triangles (F, 3))} of each deforming object's evaluated
    mesh (render settings, rowbeam.blender.flow.mesh_motion.evaluate_meshes) at each of the exact times `times` (ns); (None, None)
    when its vertex count or triangles differ between them."""
    if not objects:
        return {}
    from rowbeam.blender.flow.mesh_motion import evaluate_meshes

    got = evaluate_meshes(scene, clock, [(o, (o.name, c), t) for o in objects for c, t in enumerate(times)])
    out = {}
    for o in objects:
        rows = [got[o.name, c] for c in range(len(times))]
        F = rows[0][1]
        same = all(len(v) == len(rows[0][0]) and np.array_equal(f, F) for v, f in rows)
        out[o.name] = (np.stack([v for v, _ in rows]), F) if same else (None, None)
    return out


def rasterise_deforming(scene, clock, obj, F, times, T_cw_rows, lens, W: int, H: int, rays: CanvasRays,
                        near: float, far: float):
    """A deforming object's canvas silhouette, rasterised per canvas pixel from its evaluated mesh at each canvas
    row's exact time (the same for every camera model: a pinhole camera passes its pinhole Lens).

    The mesh is evaluated only at the rows its canvas box can cover: first at DEFORM_SAMPLE_ROWS evenly spaced
    canvas rows, then at every row of the canvas box (rowbeam.check.rasterize.lens_canvas_box of the per-row mesh boxes
    of all rows evaluated so far, LENS_BOX_PAD_PX padded) not yet evaluated, until the box holds only evaluated rows.
    times: exact time (ns) of canvas rows 0 .. 3H-1; T_cw_rows (3H, 4, 4) camera <- world per canvas row; F: the
    asset's triangles; near / far: camera-z clip (m). Returns (canvas box (x0, x1, y0, y1), mask (y1 - y0, x1 - x0)
    bool, world vertices (y1 - y0, V, 3) of the box's rows), None when the box misses the canvas, or a str (why not)
    when the evaluated triangles change between rows or differ from F."""
    got = {}
    want = np.unique(np.linspace(0, len(times) - 1, DEFORM_SAMPLE_ROWS).round().astype(int)).tolist()
    while want:
        Vw, Fr = deforming_row_meshes(scene, clock, [obj], [times[c] for c in want])[obj.name]
        if Fr is None or not np.array_equal(Fr, F):
            return ("the evaluated mesh's triangles change between canvas rows or differ from the asset's")
        got.update(zip(want, Vw, strict=True))
        rows = np.array(sorted(got))
        Vr, T = np.stack([got[c] for c in rows]), T_cw_rows[rows]
        box = lens_canvas_box(lens, UNIT_BOX, row_boxes(Vr @ np.swapaxes(T[:, :3, :3], 1, 2) + T[:, None, :3, 3]),
                              W, H, near)
        if box is None:
            return None
        want = [c for c in range(box[2], box[3]) if c not in got]
    x0, x1, y0, y1 = box
    Vw = np.stack([got[c] for c in range(y0, y1)])
    T = T_cw_rows[y0:y1]
    P = Vw @ np.swapaxes(T[:, :3, :3], 1, 2) + T[:, None, :3, 3]                      # (rows, V, 3) camera frame
    return box, rasterize_rays(P, F, rays.get(x0, x1, y0, y1), np.eye(4), near=near, far=far), Vw


def npy_bytes(a) -> bytes:
    """The .npy file (numpy format 1.0, little-endian float64, no pickle) of an array."""
    import io

    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a, dtype="<f8"), allow_pickle=False)
    return buf.getvalue()


def asset_uri(sha: str, data: bytes) -> str:
    """Bundle-relative path of a content-addressed asset: a PLY mesh, or a .npy array (a deforming object's
    per-row vertices)."""
    return f"{ASSET_DIR}/{sha}.{'ply' if data[:3] == b'ply' else 'npy'}"


def canvas_row_times(timing) -> list[Fraction]:
    """Exact reference time (ns) of canvas rows c = 0 .. 3H-1 (image row v = c - H, extrapolated)."""
    H = timing.rows
    return [timing.row_time_exact(c - H) for c in range(3 * H)]


def _round_ns(t: Fraction) -> int:
    return int(math.floor(t + Fraction(1, 2)))


def mesh_of(obj, depsgraph):
    """(vertices (V,3) local, triangles (F,3)) of the evaluated object, or None without mesh geometry."""
    ob = obj.evaluated_get(depsgraph)
    try:
        me = ob.to_mesh()
    except RuntimeError:
        return None
    if me is None:
        return None
    try:
        me.calc_loop_triangles()
        V = np.empty(len(me.vertices) * 3)
        me.vertices.foreach_get("co", V)
        F = np.empty(len(me.loop_triangles) * 3, dtype=np.int32)
        me.loop_triangles.foreach_get("vertices", F)
    finally:
        ob.to_mesh_clear()
    if len(F) == 0:
        return None
    return V.reshape(-1, 3), F.reshape(-1, 3)


def _refuse_mirroring(M_world, name: str) -> None:
    if np.linalg.det(np.asarray(M_world, dtype=np.float64)[:3, :3]) <= 0:
        raise RowbeamError(f"object {name!r}: negative (mirroring) or zero scale; object labels need a rigid "
                           "pose with positive scale (apply the scale in Blender: Object > Apply > Scale)")


def check_object_scales(scene, table, sensors) -> None:
    """Planning-time refusal (before anything renders), when some camera sensor exports object labels, of an
    object-table object whose world matrix mirrors or collapses (det <= 0) at the scene's current frame.
    Non-uniform positive scale is allowed: it is baked into the asset (asset_for) and noted."""
    if not any(getattr(s, "object_labels", False) for s in sensors):
        return
    for e in table:
        _refuse_mirroring(scene.objects[e.obj_name].matrix_world, e.obj_name)


def asset_for(M_world, V_local, F, name: str):
    """(T_world_object rigid, baked vertices, notes): matrix_world = T_rigid @ S, vertices = S v."""
    M = np.asarray(M_world, dtype=np.float64)
    _refuse_mirroring(M, name)          # also at export time: an animated scale may turn negative later
    T = rigid_part(M)
    S = T[:3, :3].T @ M[:3, :3]
    notes = []
    sv = np.linalg.svd(S, compute_uv=False)
    if not np.allclose(sv, 1.0, atol=1e-9):
        kind = "uniform" if np.allclose(sv, sv[0], rtol=1e-9) else "non-uniform"
        notes.append(f"{kind} scale {[round(float(x), 9) for x in sv]} baked into the asset (pose is rigid)")
    return T, V_local @ S.T, notes


def write_assets(root, assets: dict) -> None:
    """Write OUT/assets/meshes/<sha256>.ply (or .npy: asset_uri) once (content-addressed, atomic; concurrent writers agree)."""
    from pathlib import Path

    d = Path(root) / ASSET_DIR
    d.mkdir(parents=True, exist_ok=True)
    for sha, data in assets.items():
        p = Path(root) / asset_uri(sha, data)
        if p.exists() and sha256_file(p) == sha:
            continue
        atomic_write_bytes(p, data)


def _boxes(Kc, Wc, Hc, cam_poses, obj_mats, corners, clip):
    """(boxes, depths): padded canvas box [x0, x1) x [y0, y1) of each object over the sampled poses (None: off
    canvas) and its camera-z range (zmin, zmax) over those poses ((-inf, inf) when it reaches the near plane)."""
    boxes, depths = [], []
    for j, C in enumerate(corners):
        us, vs, zs, near = [], [], [], False
        for i, Tc in enumerate(cam_poses):
            P = (invert_rigid(Tc) @ obj_mats[j, i] @ np.c_[C, np.ones(len(C))].T).T[:, :3]
            if np.any(P[:, 2] <= clip):
                near = True
                break
            zs.append(P[:, 2])
            us.append(Kc[0, 0] * P[:, 0] / P[:, 2] + Kc[0, 2])
            vs.append(Kc[1, 1] * P[:, 1] / P[:, 2] + Kc[1, 2])
        if near:
            boxes.append((0, Wc, 0, Hc))
            depths.append((-math.inf, math.inf))
            continue
        depths.append((float(np.min(zs)), float(np.max(zs))))
        us, vs = np.array(us), np.array(vs)
        move = max(np.abs(np.diff(us, axis=0)).max(initial=0), np.abs(np.diff(vs, axis=0)).max(initial=0))
        pad = BOX_PAD_PX + 0.5 * move
        x0, x1 = math.floor(us.min() - pad), math.ceil(us.max() + pad) + 1
        y0, y1 = math.floor(vs.min() - pad), math.ceil(vs.max() + pad) + 1
        x0, x1, y0, y1 = max(x0, 0), min(x1, Wc), max(y0, 0), min(y1, Hc)
        boxes.append((x0, x1, y0, y1) if x1 > x0 and y1 > y0 else None)
    return boxes, depths


def hull_box(corners, T_co, K, W: int, H: int, near: float):
    """Canvas box [x0, x1) x [y0, y1) (canvas px, origin at image (-W, -H)) that contains every pixel centre a
    mesh inside the box `corners` (8, 3, object frame, index bits = x, y, z) can cover, camera rows having
    their own pose T_co (3H, 4, 4, camera <- object, canvas row c = image row c - H); None if none.
    Row c can be covered only if its v = c - H lies within the projection of the corners in front of the
    plane z = near and the edges' crossings of it (the projection of the clipped box), 1 px margin."""
    X, ok = clipped_box_points(corners, T_co, near)                                          # (R, 20, 3)
    z = np.where(ok, X[..., 2], 1.0)
    u = np.where(ok, K[0, 0] * X[..., 0] / z + K[0, 1] * X[..., 1] / z + K[0, 2], np.nan)
    v = np.where(ok, K[1, 1] * X[..., 1] / z + K[1, 2], np.nan)
    rows = np.arange(len(T_co)) - H
    with np.errstate(invalid="ignore"):
        vmin, vmax = np.nanmin(np.where(ok.any(1)[:, None], v, 0), 1), np.nanmax(np.where(ok.any(1)[:, None], v, 0), 1)
        hit = ok.any(1) & (rows >= vmin - 1) & (rows <= vmax + 1)
    if not hit.any():
        return None
    c = np.nonzero(hit)[0]
    umin, umax = np.nanmin(u[hit]), np.nanmax(u[hit])
    x0, x1 = max(0, math.floor(umin) - 1 + W), min(3 * W, math.ceil(umax) + 2 + W)
    if x1 <= x0:
        return None
    return x0, x1, int(c[0]), int(c[-1]) + 1


def unoccluded_inside(boxes: dict, depths: dict, render_index: dict, instance_id, camera_z, W: int, H: int) -> set:
    """Objects no other object can cover: the padded canvas box lies inside the image and every pixel of it
    that shows another surface in the label render shows it beyond the object's farthest sampled camera z
    (+ 1 cm + 1 %). Where the object has silhouette it would then win the depth test, so its amodal mask is
    its modal mask and it needs no render of its own."""
    out = set()
    inst = np.asarray(instance_id)
    z = np.nan_to_num(np.asarray(camera_z, dtype=np.float64), nan=np.inf)
    for k, (x0, x1, y0, y1) in boxes.items():
        if x0 < W or x1 > 2 * W or y0 < H or y1 > 2 * H or not np.isfinite(depths[k][1]):
            continue
        zmax = depths[k][1]
        sl = (slice(y0 - H, y1 - H), slice(x0 - W, x1 - W))
        other = inst[sl] != render_index[k]
        if np.all(z[sl][other] > zmax * 1.01 + 0.01):
            out.add(k)
    return out


def _overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def _area(b) -> int:
    return (b[1] - b[0]) * (b[3] - b[2])


def _union(a, b):
    return (min(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), max(a[3], b[3]))


def pack_groups(boxes: dict, render_px: float = RENDER_COST_PX) -> list[list]:
    """Greedy packing (largest box first) of {key: box} into groups of pairwise non-overlapping boxes, choosing
    for each box the group whose union box grows least, and a new group when every growth costs more pixels
    than a render of its own (`render_px`: a render's fixed cost in pixels) plus its own box."""
    groups, unions = [], []
    for k in sorted(boxes, key=lambda k: -_area(boxes[k])):
        b = boxes[k]
        best, best_cost = None, render_px + _area(b)
        for i, g in enumerate(groups):
            if any(_overlap(b, boxes[o]) for o in g):
                continue
            cost = _area(_union(unions[i], b)) - _area(unions[i])
            if cost < best_cost:
                best, best_cost = i, cost
        if best is None:
            groups.append([k])
            unions.append(b)
        else:
            groups[best].append(k)
            unions[best] = _union(unions[best], b)
    return groups


def _set_canvas_border(patch, scene, box, Wc, Hc, flipped: bool):
    x0, x1, y0, y1 = box
    if flipped:
        x0, x1, y0, y1 = Wc - x1, Wc - x0, Hc - y1, Hc - y0
    r = scene.render
    patch.set(r, "use_border", True)
    patch.set(r, "use_crop_to_border", True)
    patch.set(r, "border_min_x", (x0 + 0.5) / Wc)
    patch.set(r, "border_max_x", min(1.0, (x1 + 0.5) / Wc))
    patch.set(r, "border_min_y", (Hc - y1 + 0.5) / Hc)
    patch.set(r, "border_max_y", min(1.0, (Hc - y0 + 0.5) / Hc))


_RAYS: dict = {}


def canvas_ray_cache(lens, W: int, H: int) -> CanvasRays:
    """The CanvasRays of this lens and image size, kept for the next event of the same camera (one at a time)."""
    key = (lens.model, lens.K.tobytes(), tuple(lens.D), lens.max_radius, lens.max_theta_rad, W, H)
    if key not in _RAYS:
        _RAYS.clear()
        _RAYS[key] = CanvasRays(lens, W, H)
    return _RAYS[key]


def compute_object_labels(ctx, sensor, timing, K, params, row_poses, ref_pose, instance_id, camera_z, lens=None):
    """Object labels of one camera event (lens: the rowbeam.model.lens.Lens it renders through, else None).

    Returns (arrays {amodal_masks, amodal_masks_canvas, canvas_row_time_ns, canvas_row_T_world_camera,
    object_row_T_world_object}, manifest block, assets {sha256: ply bytes}, seconds).
    """
    import bpy

    from rowbeam.blender.sensors.camera_event import use_render_camera

    t_start = time.perf_counter()
    scene, clock = ctx.scene, ctx.clock
    cam = scene.objects[sensor.object]
    W, H = params.resolution_x, params.resolution_y
    Wc, Hc = 3 * W, 3 * H
    flipped = sensor.readout_direction != "top_to_bottom"
    times = canvas_row_times(timing)
    t_ref = timing.reference_time_ns()
    table = list(ctx.table)
    objs = [scene.objects[e.obj_name] for e in table]
    moving = [k for k, e in enumerate(table) if e.motion == "moving"]
    row_of_moving = {k: i for i, k in enumerate(moving)}

    # meshes and assets at the reference time
    set_time(scene, clock, t_ref)
    dg = bpy.context.evaluated_depsgraph_get()
    entries, assets, skipped = {}, {}, []
    for k, (e, o) in enumerate(zip(table, objs, strict=True)):
        mesh = mesh_of(o, dg)
        if mesh is None:
            skipped.append({"instance_id": e.render_index, "id": str(e.id), "name": e.obj_name,
                            "reason": f"{o.type} object without mesh geometry: no object labels"})
            continue
        T_wo, V, notes = asset_for(np.array(o.matrix_world, dtype=np.float64), mesh[0], mesh[1], e.obj_name)
        if o.is_deform_modified(scene, "RENDER"):
            notes.append("deforming: asset is the mesh at reference_time_ns; masks rasterised from the evaluated mesh "
                         "at each canvas row's time (row_mesh)")
        data = ply_bytes(V, mesh[1])
        sha = hashlib.sha256(data).hexdigest()
        assets[sha] = data
        entries[k] = {"T_wo_ref": T_wo, "V": V, "F": mesh[1], "notes": notes, "sha": sha,
                      "checkable": not o.is_deform_modified(scene, "RENDER"),
                      "aabb": (V.min(axis=0), V.max(axis=0))}

    for o in scene.objects:
        if o.is_instancer and o.instance_type != "NONE" and not o.hide_render:
            skipped.append({"instance_id": None, "id": None, "name": o.name,
                            "reason": f"instancer ({o.instance_type}): its instances are not in the object table "
                                      "(instance_id 0); no object labels"})

    t_meshes = time.perf_counter()
    # poses per canvas row: camera for every row (image rows reuse row_poses), moving objects for every row
    sample_rows = np.unique(np.linspace(0, Hc - 1, POSE_SAMPLES).round().astype(int))
    need = [c for c in range(Hc) if not H <= c < 2 * H]
    cam_rows = np.empty((Hc, 4, 4))
    cam_rows[H:2 * H] = row_poses
    mov_objs = [objs[k] for k in moving]
    M_extra = objects_world_matrices(scene, clock, [cam] + mov_objs, [times[c] for c in need])
    cam_rows[need] = [world_from_opencv_camera(m) for m in M_extra[0]]
    obj_rows = np.empty((len(moving), Hc, 4, 4))
    if moving:
        M_in = objects_world_matrices(scene, clock, mov_objs, [times[c] for c in range(H, 2 * H)])
        obj_rows[:, need] = M_extra[1:]
        obj_rows[:, H:2 * H] = M_in
    # matrices (with scale) at the box-sampling rows, for every object
    M_samples = objects_world_matrices(scene, clock, objs, [times[c] for c in sample_rows])
    hidden_notes, states = {}, []
    for c in (0, H, 2 * H - 1, Hc - 1):
        set_time(scene, clock, times[c])
        states.append([bool(o.hide_render) for o in objs])
    for k in range(len(objs)):
        if len({s[k] for s in states}) > 1:
            hidden_notes[k] = ("hidden (hide_render) during part of the canvas rows' times: Blender takes render "
                               "visibility at the shutter centre only, so every label shows it in all rows or in none")
    t_poses = time.perf_counter()
    Kc = intrinsics_from_blender(replace(params, lens_mm=params.lens_mm / 3, shift_x=params.shift_x / 3,
                                         shift_y=params.shift_y / 3, resolution_x=Wc, resolution_y=Hc))
    K_expected = np.array(K, dtype=np.float64) + np.array([[0, 0, W], [0, 0, H], [0, 0, 0]])
    corners = {}
    for k, ent in entries.items():
        lo, hi = ent["aabb"]
        corners[k] = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
    keys = list(entries)
    # corners are in the baked (scaled) object frame: use rigid object poses
    rig_samples = np.array([[rigid_part(M_samples[k, i]) for i in range(len(sample_rows))] for k in keys]) \
        if keys else np.zeros((0, len(sample_rows), 4, 4))
    clip = float(cam.data.clip_start)
    if lens is None:
        box_list, depth_list = _boxes(Kc, Wc, Hc, cam_rows[sample_rows], rig_samples, [corners[k] for k in keys], clip)
        boxes = {k: b for k, b in zip(keys, box_list, strict=True) if b is not None}
        depths = dict(zip(keys, depth_list, strict=True))
        from_modal = unoccluded_inside(boxes, depths, {k: table[k].render_index for k in boxes}, instance_id,
                                       camera_z, W, H) if SHORTCUT_UNOCCLUDED else set()
    else:
        boxes, from_modal = {}, set()        # through a lens: every object is rasterised (or skipped)
    clip_near, clip_far = (float(cam.data.clip_start), float(cam.data.clip_end)) if lens is None else CLIP_M
    rasterised = {}
    t_raster = time.perf_counter()
    T_cw_rows = np.linalg.inv(cam_rows)                                  # (3H, 4, 4) camera <- world per canvas row
    # deforming objects, every camera model: rasterised per pixel from the evaluated mesh at each canvas row's time
    ray_lens = lens if lens is not None else make_lens(LensSpec(), K, W, H)
    rays_cache = canvas_ray_cache(ray_lens, W, H)
    shown = lens_shown(scene, clock, objs, timing, hidden_notes)
    for k in keys:
        ent = entries[k]
        if ent["checkable"] or not shown.get(k, True):
            continue
        got = rasterise_deforming(scene, clock, objs[k], ent["F"], times, T_cw_rows, ray_lens, W, H, rays_cache,
                                  clip_near, clip_far)
        if isinstance(got, str):
            if lens is not None:       # pinhole: left to the Cycles canvas renders (not re-rasterised by the checker)
                skipped.append({"instance_id": table[k].render_index, "id": str(table[k].id),
                                "name": table[k].obj_name, "reason": f"deforming: {got}: no object labels through "
                                "a lens"})
            continue
        boxes.pop(k, None)
        from_modal.discard(k)
        if got is None:
            continue
        box, mask, Vw = got
        data = npy_bytes(Vw)
        sha = hashlib.sha256(data).hexdigest()
        assets[sha] = data
        ent["row_mesh"] = {"uri": asset_uri(sha, data), "relative_to": "bundle root", "sha256": sha,
                           "first_canvas_row": box[2], "rows": box[3] - box[2], "units": "m", "frame": "world",
                           "rule": ROW_MESH_RULE}
        boxes[k] = box
        rasterised[k] = (box, mask)
    if lens is not None:
        for k in keys:
            ent = entries[k]
            if not shown.get(k, True):
                skipped.append({"instance_id": table[k].render_index, "id": str(table[k].id), "name": table[k].obj_name,
                                "reason": f"{hidden_notes[k]}; hidden at the label render's time (the shutter "
                                          "centre): no pixel rendered, no object labels"})
                continue
            if not ent["checkable"]:
                continue
            T_wo = (np.array([rigid_part(M) for M in obj_rows[row_of_moving[k]]]) if k in row_of_moving
                    else ent["T_wo_ref"])
            T_co = T_cw_rows @ T_wo
            box = lens_canvas_box(lens, corners[k], np.broadcast_to(T_co, (Hc, 4, 4)), W, H, clip_near)
            if box is None:
                continue
            x0, x1, y0, y1 = box
            boxes[k] = box
            rasterised[k] = (box, rasterize_rays(ent["V"], ent["F"], rays_cache.get(x0, x1, y0, y1), T_co[y0:y1],
                                                 near=clip_near, far=clip_far))
    elif RASTERISE_RIGID:
        K64 = np.asarray(K, dtype=np.float64)
        for k in keys:
            ent = entries[k]
            if k in from_modal or not ent["checkable"] or k in hidden_notes:
                continue
            T_wo = (np.array([rigid_part(M) for M in obj_rows[row_of_moving[k]]]) if k in row_of_moving
                    else ent["T_wo_ref"])
            T_co = T_cw_rows @ T_wo                                       # (3H, 4, 4) camera <- object per row
            box = hull_box(corners[k], T_co, K64, W, H, clip_near)
            if box is None:
                boxes.pop(k, None)                                        # no pixel centre of the canvas
                continue
            x0, x1, y0, y1 = box
            if (y1 - y0) * len(ent["F"]) > RASTER_MAX_PAIRS:
                continue
            boxes[k] = box
            rasterised[k] = (box, rasterize_rows(ent["V"], ent["F"], K64, T_co[y0:y1], np.arange(y0, y1) - H,
                                                 x1 - x0, x0 - W, near=clip_near, far=clip_far))
    t_raster = time.perf_counter() - t_raster
    groups = pack_groups({k: b for k, b in boxes.items() if k not in from_modal and k not in rasterised})

    # renders
    canvas_masks = {}
    render_seconds = []
    first = times[0]
    period = timing.period_ns                  # row period (ns, exact)
    K_canvas_err, rendered_px = None, 0
    if lens is None:                           # Cycles canvas renders (pinhole canvas camera)
        with ScenePatch() as p:
            ctx.base_settings(p, Wc, Hc)
            p.set(scene.cycles, "samples", 1)
            p.set(scene.cycles, "pixel_filter_type", "GAUSSIAN")
            p.set(scene.cycles, "filter_width", 0.01)
            p.set(scene.cycles, "max_bounces", 0)
            vl = ctx.view_layer
            for attr in ("use_pass_position", "use_pass_normal", "use_pass_z", "use_pass_vector"):
                p.set(vl, attr, False)
            p.set(vl, "use_pass_object_index", True)
            cs.set_render_indices(p, scene, table)
            rcam = use_render_camera(p, scene, cam, sensor.readout_direction)
            p.set(rcam.data, "lens", rcam.data.lens / 3)
            p.set(rcam.data, "shift_x", rcam.data.shift_x / 3)
            p.set(rcam.data, "shift_y", rcam.data.shift_y / 3)
            sign = -1.0 if flipped else 1.0
            K_canvas_err = float(np.abs(intrinsics_from_blender(replace(
                params, lens_mm=rcam.data.lens, shift_x=sign * rcam.data.shift_x, shift_y=sign * rcam.data.shift_y,
                resolution_x=Wc, resolution_y=Hc)) - K_expected).max())
            shutter = timed_rows_shutter(first, period, Hc)
            cs.apply_shutter(p, scene, clock, shutter, sensor.motion_steps, objs + [rcam])
            for g in groups:
                box = (min(boxes[k][0] for k in g), max(boxes[k][1] for k in g),
                       min(boxes[k][2] for k in g), max(boxes[k][3] for k in g))
                rendered_px += _area(box)
                in_group = set(g)
                with ScenePatch() as q:
                    for k, o in enumerate(objs):
                        if k not in in_group and not o.hide_render:
                            q.set(o, "hide_render", True)      # not synced at all: the render costs its group only
                    _set_canvas_border(q, scene, box, Wc, Hc, flipped)
                    t0 = time.perf_counter()
                    passes = cs.render_passes(scene, vl)
                    render_seconds.append(time.perf_counter() - t0)
                idx = passes["index"]
                if flipped:
                    idx = idx[::-1, ::-1]
                if idx.shape != (box[3] - box[2], box[1] - box[0]):
                    raise RuntimeError(f"canvas border render returned {idx.shape}, expected "
                                       f"{(box[3] - box[2], box[1] - box[0])}")
                idx = np.rint(idx).astype(np.int64)
                for k in g:
                    ri = table[k].render_index
                    canvas_masks[k] = (box, idx == ri)

    canvas_masks.update(rasterised)
    for k in from_modal:                       # no possible occluder, inside the image: amodal = modal
        x0, x1, y0, y1 = boxes[k]
        canvas_masks[k] = (boxes[k], np.asarray(instance_id)[y0 - H:y1 - H, x0 - W:x1 - W] == table[k].render_index)

    # assemble per-object results
    objects_out, amodal, canvas_list, added_total = [], [], [], 0
    inst = np.asarray(instance_id)
    T_cw_ref = invert_rigid(ref_pose)
    ref_obj = {k: entries[k]["T_wo_ref"] for k in entries}
    # visible pixels of every render index at once: (image rows, image cols) of index i = pix[start[i]:stop[i]]
    flat = inst.ravel()
    order = np.argsort(flat, kind="stable")
    ids, start, counts = np.unique(flat[order], return_index=True, return_counts=True)
    where = {int(i): order[a:a + n] for i, a, n in zip(ids, start, counts, strict=True)}
    for k in sorted(canvas_masks, key=lambda k: table[k].render_index):
        e, ent = table[k], entries[k]
        (x0, x1, y0, y1), m = canvas_masks[k]
        pix = where.get(e.render_index, np.zeros(0, np.int64))
        mv, mu = pix // W + H, pix % W + W                         # visible pixels, canvas coordinates
        if pix.size:                                                # window = box plus the visible pixels
            x0w, x1w = min(x0, int(mu.min())), max(x1, int(mu.max()) + 1)
            y0w, y1w = min(y0, int(mv.min())), max(y1, int(mv.max()) + 1)
        else:
            x0w, x1w, y0w, y1w = x0, x1, y0, y1
        full = np.zeros((y1w - y0w, x1w - x0w), dtype=bool)       # amodal silhouette in the window
        full[y0 - y0w:y1 - y0w, x0 - x0w:x1 - x0w] = m
        modal = np.zeros_like(full)
        modal[mv - y0w, mu - x0w] = True
        added = int((modal & ~full).sum())
        added_total += added
        full |= modal
        inside = np.zeros_like(full)                                # the image part of the window
        inside[max(H - y0w, 0):max(2 * H - y0w, 0), max(W - x0w, 0):max(2 * W - x0w, 0)] = True
        img_w = full & inside
        n_all, n_img, n_vis = int(full.sum()), int(img_w.sum()), int(pix.size)
        if n_all == 0:        # projected box met the canvas, silhouette did not: not in view (or hidden then)
            if k in hidden_notes:
                skipped.append({"instance_id": e.render_index, "id": str(e.id), "name": e.obj_name,
                                "reason": hidden_notes[k] + "; no pixel rendered"})
            continue
        mask_index = None
        if n_img:
            mask_index = len(amodal)
            img = np.zeros((H, W), dtype=bool)
            img[max(y0w - H, 0):min(y1w - H, H), max(x0w - W, 0):min(x1w - W, W)] = \
                img_w[max(H - y0w, 0):min(2 * H - y0w, y1w - y0w), max(W - x0w, 0):min(2 * W - x0w, x1w - x0w)]
            amodal.append(np.packbits(img, axis=-1))
        canvas_index = None
        if n_all > n_img:
            canvas_index = len(canvas_list)
            canvas = np.zeros((Hc, Wc), dtype=bool)
            canvas[y0w:y1w, x0w:x1w] = full
            canvas_list.append(np.packbits(canvas, axis=-1))
        T_wo_ref = ref_obj[k]
        if k in row_of_moving:
            T_wo_ref = None
        centroid_row = int(np.floor((mv - H).mean() + 0.5)) if n_vis else None
        if k in row_of_moving:
            Tm = obj_rows[row_of_moving[k]]
            T_ref_w = rigid_part(np.array(_matrix_at(scene, clock, objs[k], t_ref)))
            T_c = rigid_part(Tm[H + centroid_row]) if centroid_row is not None else None
        else:
            T_ref_w = T_wo_ref
            T_c = T_wo_ref
        notes = list(ent["notes"]) + ([hidden_notes[k]] if k in hidden_notes else [])
        if added:
            notes.append(f"{added} modal pixel(s) not on the rendered silhouette were added to the amodal mask")
        lo, hi = ent["aabb"]
        objects_out.append({
            "instance_id": e.render_index, "id": str(e.id), "name": e.obj_name, "class": e.class_tag,
            "semantic_id": e.class_id, "motion": e.motion,
            "mask_index": mask_index, "canvas_mask_index": canvas_index,
            "row_pose_index": row_of_moving.get(k),
            "px_count_all": n_all, "px_count_in_image": n_img, "px_count_visib": n_vis,
            "visib_fract": n_vis / n_all, "truncation_fraction": 1 - n_img / n_all,
            "occlusion_fraction": (1 - n_vis / n_img) if n_img else 0.0,
            "bbox_modal": tight_box(modal, x0w - W, y0w - H), "bbox_amodal_clipped": tight_box(img_w, x0w - W, y0w - H),
            "bbox_amodal_unclipped": tight_box(full, x0w - W, y0w - H),
            "box3d": {"kind": "object_template_aabb", "frame": "object",
                      "centre_m": [float(x) for x in (lo + hi) / 2], "size_m": [float(x) for x in hi - lo]},
            "T_camera_object_reference": (T_cw_ref @ T_ref_w).tolist(), "reference_time_ns": int(t_ref),
            "T_camera_object_centroid_row": (invert_rigid(row_poses[centroid_row]) @ T_c).tolist()
            if centroid_row is not None else None,
            "centroid_row": centroid_row,
            "centroid_row_time_ns": _round_ns(times[H + centroid_row]) if centroid_row is not None else None,
            "asset": {"uri": f"{ASSET_DIR}/{ent['sha']}.ply", "relative_to": "bundle root", "sha256": ent["sha"],
                      "units": "m", "frame": "object (scale baked in)"},
            **({"row_mesh": ent["row_mesh"]} if "row_mesh" in ent else {}),
            "rasterisation_check": ent["checkable"] or "row_mesh" in ent,
            "notes": notes,
        })
    set_time(scene, clock, t_ref)
    arrays = {
        "amodal_masks": np.stack(amodal) if amodal else np.zeros((0, H, (W + 7) // 8), np.uint8),
        "amodal_masks_canvas": np.stack(canvas_list) if canvas_list else np.zeros((0, Hc, (Wc + 7) // 8), np.uint8),
        "canvas_row_time_ns": np.array([_round_ns(t) for t in times], dtype=np.int64),
        "canvas_row_T_world_camera": cam_rows,
        "object_row_T_world_object": np.array([[rigid_part(M) for M in obj_rows[i]] for i in range(len(moving))])
        if moving else np.zeros((0, Hc, 4, 4)),
    }
    seconds = {"object_labels": time.perf_counter() - t_start, "object_label_meshes": t_meshes - t_start,
               "object_label_row_poses": t_poses - t_meshes, "object_label_renders": sum(render_seconds),
               "object_label_rasterise": t_raster}
    block = {
        "definition": DEFINITION,
        "method": {"amodal": METHOD if lens is None else LENS_METHOD, "renders": len(groups),
                   "objects_rendered": len(boxes) - len(from_modal) - len(rasterised),
                   "objects_from_modal": len(from_modal), "objects_rasterised": len(rasterised),
                   "amodal_source": {"cycles_renders": sorted(table[k].render_index for g in groups for k in g),
                                     "modal": sorted(table[k].render_index for k in from_modal),
                                     "rasterised": sorted(table[k].render_index for k in rasterised)},
                   "rendered_px": rendered_px, "image_px": W * H,
                   "unoccluded_rule": UNOCCLUDED_RULE, "raster_rule": RASTER_RULE,
                   "modal_pixels_added": added_total, "canvas_K_max_abs_error": K_canvas_err,
                   "canvas_shutter": {"first_row_ns": float(first), "row_period_ns": float(period), "rows": Hc,
                                      "motion_steps": sensor.motion_steps}},
        "canvas": {"size_px": [Wc, Hc], "origin_px": [-W, -H],
                   "clip_m": {"near": float(clip_near), "far": float(clip_far),
                              "rule": "camera rays start on the plane camera_z = near and end on camera_z = far "
                                      "(Cycles clip_start / clip_end): surface outside that slab is not seen"
                                      + ("" if lens is None else "; through a lens the rays are the lens camera's "
                                         "(clip_start / clip_end of rowbeam/blender/cycles/osl_camera.py)")},
                   **({} if lens is None else {"lens": {"model": lens.model, "valid_pixels": LENS_CANVAS_RULE}}),
                   "row_times": "canvas row c <-> image row v = c - H; time = start + readout*(v'+0.5)/H + "
                                "exposure/2 (v' = v top_to_bottom, H-1-v bottom_to_top), extrapolated beyond the image"},
        "objects": objects_out,
        "skipped": skipped,
    }
    return arrays, block, assets, seconds


def _matrix_at(scene, clock, obj, t_ns):
    return objects_world_matrices(scene, clock, [obj], [t_ns])[0, 0]
