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
from dataclasses import dataclass, field, replace
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
from rowbeam.blender.cycles.render_camera import use_render_camera
from rowbeam.blender.objects.instances import instance_geometry, instance_matrices, shown_instances
from rowbeam.blender.objects.meshes import triangles_of
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
                   "and none of which the surface policy decided (policy_mask: the modal mask there follows alpha, "
                   "glass or volumes, the amodal mask the geometry) takes amodal = modal from the label render "
                   "(nothing can be in front of it)")

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


def rasterise_deforming(st, obj, F, T_cw_rows, lens, rays: CanvasRays):
    """A deforming object's canvas silhouette, rasterised per canvas pixel from its evaluated mesh at each canvas
    row's exact time (the same for every camera model: a pinhole camera passes its pinhole Lens).

    The mesh is evaluated only at the rows its canvas box can cover: first at DEFORM_SAMPLE_ROWS evenly spaced
    canvas rows, then at every row of the canvas box (rowbeam.check.rasterize.lens_canvas_box of the per-row mesh boxes
    of all rows evaluated so far, LENS_BOX_PAD_PX padded) not yet evaluated, until the box holds only evaluated rows.
    st: the event's _Stage (scene, clock, times: exact time (ns) of canvas rows 0 .. 3H-1, W, H, clip: camera-z
    near / far, m); T_cw_rows (3H, 4, 4) camera <- world per canvas row; F: the asset's triangles.
    Returns (canvas box (x0, x1, y0, y1), mask (y1 - y0, x1 - x0)
    bool, world vertices (y1 - y0, V, 3) of the box's rows), None when the box misses the canvas, or a str (why not)
    when the evaluated triangles change between rows or differ from F."""
    scene, clock, times, W, H, (near, far) = st.ctx.scene, st.ctx.clock, st.times, st.W, st.H, st.clip
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
    return triangles_of(obj.evaluated_get(depsgraph))


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


def _boxes(Kc, canvas_size, cam_poses, obj_mats, corners, clip):
    """(boxes, depths): padded canvas box [x0, x1) x [y0, y1) of each object over the sampled poses (None: off
    canvas; canvas_size (3W, 3H) px) and its camera-z range (zmin, zmax) over those poses ((-inf, inf) when it
    reaches the near plane)."""
    Wc, Hc = canvas_size
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


def unoccluded_inside(boxes: dict, depths: dict, render_index: dict, instance_id, camera_z, decided=None) -> set:
    """Objects no other object can cover: the padded canvas box lies inside the image and every pixel of it
    that shows another surface in the label render shows it beyond the object's farthest sampled camera z
    (+ 1 cm + 1 %). Where the object has silhouette it would then win the depth test, so its amodal mask is
    its modal mask and it needs no render of its own. decided: (H, W) policy_mask or None; a box with a pixel the
    surface policy decided is left out (an alpha-cut card's label is its mask, its amodal mask its geometry)."""
    out = set()
    inst = np.asarray(instance_id)                                      # (H, W) image
    H, W = inst.shape
    z = np.nan_to_num(np.asarray(camera_z, dtype=np.float64), nan=np.inf)
    for k, (x0, x1, y0, y1) in boxes.items():
        if x0 < W or x1 > 2 * W or y0 < H or y1 > 2 * H or not np.isfinite(depths[k][1]):
            continue
        zmax = depths[k][1]
        sl = (slice(y0 - H, y1 - H), slice(x0 - W, x1 - W))
        if decided is not None and np.any(decided[sl]):
            continue
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


def release_canvas_rays() -> None:
    """Drop the kept CanvasRays (canvas_ray_cache): done after a camera's last planned event, so its memory is free
    for the in-line check's own rays."""
    _RAYS.clear()


@dataclass(frozen=True)
class EventInputs:
    """What a camera event hands to its object labels.

    timing: the event's rolling-shutter timing model; K (3, 3) image intrinsics (px); params: the camera's
    Blender parameters (rowbeam.model.camera_model); row_poses (H, 4, 4) world <- OpenCV camera per image row;
    ref_pose (4, 4) world <- camera at the reference time; instance_id (H, W) render index per pixel (0:
    background); camera_z (H, W) m; lens: the rowbeam.model.lens.Lens it renders through, else None (pinhole);
    policy_mask: (H, W) uint8, 1 where the surface policy decided the label, else None."""
    timing: object
    K: object
    params: object
    row_poses: object
    ref_pose: object
    instance_id: object
    camera_z: object
    lens: object = None
    policy_mask: object = None


@dataclass
class _Stage:
    """Shared state of one event's object labels, filled stage by stage (canvas px, canvas row c = image row
    c - H; object keys k index the object table)."""
    ctx: object
    sensor: object
    ev: EventInputs
    cam: object
    W: int
    H: int
    times: list
    t_ref: int
    table: list
    objs: list
    moving: list
    row_of_moving: dict
    entries: dict = field(default_factory=dict)      # k -> {T_wo_ref, V, F, notes, sha, checkable, aabb}
    assets: dict = field(default_factory=dict)       # sha256 -> bytes
    skipped: list = field(default_factory=list)
    cam_rows: object = None                          # (3H, 4, 4) world <- camera per canvas row
    obj_rows: object = None                          # (moving, 3H, 4, 4) world <- object (with scale)
    M_samples: object = None                         # (objects, POSE_SAMPLES, 4, 4) at the box-sampling rows
    sample_rows: object = None
    hidden_notes: dict = field(default_factory=dict)
    corners: dict = field(default_factory=dict)      # k -> (8, 3) asset-box corners, object frame
    boxes: dict = field(default_factory=dict)        # k -> canvas box (x0, x1, y0, y1)
    from_modal: set = field(default_factory=set)
    rasterised: dict = field(default_factory=dict)   # k -> (box, mask bit-packed along x: np.packbits axis -1)
    clip: tuple = (0.0, 0.0)                         # (near, far) camera-z clip, m
    K_expected: object = None
    n_objects: int = 0                               # keys k < n_objects are scene objects, the rest instances
    inst_matrix: dict = field(default_factory=dict)  # instance k -> world matrix (4, 4) at the reference time

    @property
    def Wc(self) -> int:
        return 3 * self.W

    @property
    def Hc(self) -> int:
        return 3 * self.H

    def skip(self, k: int, reason: str) -> None:
        e = self.table[k]
        self.skipped.append({"instance_id": e.render_index, "id": str(e.id), "name": e.obj_name, "reason": reason})


def compute_object_labels(ctx, sensor, ev: EventInputs):
    """Object labels of one camera event: assets, canvas poses, projected boxes, rasterised silhouettes, Cycles
    canvas renders for the rest, then per-object records.

    Returns (arrays {amodal_masks, amodal_masks_canvas, canvas_row_time_ns, canvas_row_T_world_camera,
    object_row_T_world_object}, manifest block, assets {sha256: ply bytes}, seconds).
    """
    t_start = time.perf_counter()
    st = _new_stage(ctx, sensor, ev)
    _stage_assets(st)
    t_meshes = time.perf_counter()
    _stage_canvas_poses(st)
    t_poses = time.perf_counter()
    _stage_boxes(st)
    t_raster = time.perf_counter()
    _stage_rasterise(st)
    t_raster = time.perf_counter() - t_raster
    for k in [k for k in st.boxes if k >= st.n_objects and k not in st.from_modal and k not in st.rasterised]:
        st.boxes.pop(k)         # an instance cannot be rendered alone (it shares its instancer's visibility)
        st.skip(k, f"instance with more than {RASTER_MAX_PAIRS} (canvas row, triangle) pairs: no object labels")
    groups = pack_groups({k: b for k, b in st.boxes.items() if k not in st.from_modal and k not in st.rasterised})
    canvas_masks, render_seconds, K_canvas_err, rendered_px = _stage_renders(st, groups)
    canvas_masks.update(st.rasterised)
    for k in st.from_modal:                    # no possible occluder, inside the image: amodal = modal
        x0, x1, y0, y1 = st.boxes[k]
        canvas_masks[k] = (st.boxes[k], np.asarray(ev.instance_id)[y0 - st.H:y1 - st.H, x0 - st.W:x1 - st.W]
                           == st.table[k].render_index)
    objects_out, amodal, canvas_list, added_total = _stage_assemble(st, canvas_masks)
    set_time(st.ctx.scene, st.ctx.clock, st.t_ref)
    arrays = _arrays(st, amodal, canvas_list)
    seconds = {"object_labels": time.perf_counter() - t_start, "object_label_meshes": t_meshes - t_start,
               "object_label_row_poses": t_poses - t_meshes, "object_label_renders": sum(render_seconds),
               "object_label_rasterise": t_raster}
    method = _method_block(st, groups, rendered_px, added_total, K_canvas_err)
    block = {"definition": DEFINITION, "method": method, "canvas": _canvas_block(st),
             "objects": objects_out, "skipped": st.skipped}
    return arrays, block, st.assets, seconds


def _new_stage(ctx, sensor, ev: EventInputs) -> _Stage:
    """The stage of an event: the object table's objects (keys 0 .. N-1), then the instances the event shows (a
    visible pixel; st.objs[k] None): an instance without one gets no label and no payload."""
    insts = getattr(ctx, "instances", None)
    extra = shown_instances(insts, ev.instance_id) if insts else []
    table = list(ctx.table) + extra
    moving = [k for k, e in enumerate(ctx.table) if e.motion == "moving"]
    moving += [len(ctx.table) + i for i, e in enumerate(extra) if e.motion == "moving"]
    return _Stage(ctx=ctx, sensor=sensor, ev=ev, cam=ctx.scene.objects[sensor.object],
                  W=ev.params.resolution_x, H=ev.params.resolution_y, times=canvas_row_times(ev.timing),
                  t_ref=ev.timing.reference_time_ns(), table=table,
                  objs=[ctx.scene.objects[e.obj_name] for e in ctx.table] + [None] * len(extra), moving=moving,
                  row_of_moving={k: i for i, k in enumerate(moving)}, n_objects=len(ctx.table))


def _stage_assets(st: _Stage) -> None:
    """Meshes and content-addressed assets at the reference time (st.entries, st.assets); objects without mesh
    geometry and instancers are listed in st.skipped."""
    import bpy

    scene = st.ctx.scene
    set_time(scene, st.ctx.clock, st.t_ref)
    dg = bpy.context.evaluated_depsgraph_get()
    insts = getattr(st.ctx, "instances", None)
    instancers = set(insts.instancer.values()) if insts else set()
    for k, (e, o) in enumerate(zip(st.table[:st.n_objects], st.objs, strict=False)):
        mesh = mesh_of(o, dg)
        if mesh is None:
            st.skip(k, f"{o.type} object without mesh geometry: no object labels"
                    + ("; its instances are objects of their own" if o.name in instancers else ""))
            continue
        T_wo, V, notes = asset_for(np.array(o.matrix_world, dtype=np.float64), mesh[0], mesh[1], e.obj_name)
        deforming = e.motion != "static" and o.is_deform_modified(scene, "RENDER")     # a static one keeps its mesh
        if deforming:
            notes.append("deforming: asset is the mesh at reference_time_ns; masks rasterised from the evaluated mesh "
                         "at each canvas row's time (row_mesh)")
        data = ply_bytes(V, mesh[1])
        sha = hashlib.sha256(data).hexdigest()
        st.assets[sha] = data
        st.entries[k] = {"T_wo_ref": T_wo, "V": V, "F": mesh[1], "notes": notes, "sha": sha,
                         "checkable": not deforming,
                         "aabb": (V.min(axis=0), V.max(axis=0))}
    labelled = _stage_instance_assets(st)
    for o in scene.objects:
        if o.is_instancer and o.instance_type != "NONE" and not o.hide_render and o.name not in labelled:
            st.skipped.append({"instance_id": None, "id": None, "name": o.name,
                               "reason": f"instancer ({o.instance_type}): its instances are not in the object table "
                                         "(instance_id 0); no object labels"})


def _stage_instance_assets(st: _Stage) -> set:
    """Assets of the instances (keys k >= n_objects) at the reference time, like objects' (a static instance is
    rigid: its pose is its world matrix's rigid part, its scale baked into the asset; a moving one's rows follow
    instances.INSTANCE_MOTION_RULE); returns the instancers' names. An instance without mesh geometry at the
    reference time is listed in st.skipped."""
    insts = st.ctx.instances
    if not insts:
        return set()
    geom = instance_geometry(st.ctx.scene, st.ctx.view_layer, insts)
    for k in range(st.n_objects, len(st.table)):
        e = st.table[k]
        if e.render_index not in geom:
            st.skip(k, "instance without mesh geometry at the reference time: no object labels")
            continue
        M, V_local, F = geom[e.render_index]
        T_wo, V, notes = asset_for(M, V_local, F, e.obj_name)
        data = ply_bytes(V, F)
        sha = hashlib.sha256(data).hexdigest()
        st.assets[sha] = data
        st.inst_matrix[k] = M
        st.entries[k] = {"T_wo_ref": T_wo, "V": V, "F": F, "notes": notes, "sha": sha, "checkable": True,
                         "aabb": (V.min(axis=0), V.max(axis=0))}
    return set(insts.instancer.values())


def _stage_canvas_poses(st: _Stage) -> None:
    """Poses per canvas row: the camera for every row (image rows reuse row_poses), moving objects for every
    row; every object's matrix at the box-sampling rows; objects hidden during part of the canvas rows."""
    scene, clock, H, Hc, times = st.ctx.scene, st.ctx.clock, st.H, st.Hc, st.times
    st.sample_rows = np.unique(np.linspace(0, Hc - 1, POSE_SAMPLES).round().astype(int))
    need = [c for c in range(Hc) if not H <= c < 2 * H]
    st.cam_rows = np.empty((Hc, 4, 4))
    st.cam_rows[H:2 * H] = st.ev.row_poses
    mov_keys = [k for k in st.moving if k < st.n_objects]
    mov_objs = [st.objs[k] for k in mov_keys]
    M_extra = objects_world_matrices(scene, clock, [st.cam] + mov_objs, [times[c] for c in need])
    st.cam_rows[need] = [world_from_opencv_camera(m) for m in M_extra[0]]
    st.obj_rows = np.empty((len(st.moving), Hc, 4, 4))
    if mov_objs:
        M_in = objects_world_matrices(scene, clock, mov_objs, [times[c] for c in range(H, 2 * H)])
        st.obj_rows[:len(mov_keys), need] = M_extra[1:]
        st.obj_rows[:len(mov_keys), H:2 * H] = M_in
    _stage_instance_rows(st, len(mov_keys))
    M_obj = objects_world_matrices(scene, clock, st.objs[:st.n_objects], [times[c] for c in st.sample_rows])
    M_inst = np.array([st.obj_rows[st.row_of_moving[k]][st.sample_rows] if k in st.row_of_moving else
                       np.broadcast_to(st.inst_matrix.get(k, np.eye(4)), (len(st.sample_rows), 4, 4))
                       for k in range(st.n_objects, len(st.table))]).reshape(-1, len(st.sample_rows), 4, 4)
    st.M_samples = np.concatenate([np.asarray(M_obj).reshape(-1, len(st.sample_rows), 4, 4), M_inst])
    states = []
    for c in (0, H, 2 * H - 1, Hc - 1):
        set_time(scene, clock, times[c])
        states.append([bool(o.hide_render) for o in st.objs[:st.n_objects]])
    for k in range(st.n_objects):
        if len({s[k] for s in states}) > 1:
            st.hidden_notes[k] = ("hidden (hide_render) during part of the canvas rows' times: Blender takes render "
                                  "visibility at the shutter centre only, so every label shows it in all rows or in "
                                  "none")


def _stage_instance_rows(st: _Stage, first: int) -> None:
    """st.obj_rows[first:] = the moving instances' world matrices at every canvas row (INSTANCE_MOTION_RULE); an
    instance missing at some row (not rendered then) keeps its reference matrix there."""
    keys = st.moving[first:]
    if not keys:
        return
    rows = instance_matrices(st.ctx.scene, st.ctx.clock, st.ctx.instances, [st.table[k].render_index for k in keys],
                             list(st.times))
    for i, k in enumerate(keys):
        ref = st.inst_matrix.get(k, np.eye(4))
        st.obj_rows[first + i] = np.where(np.isnan(rows[i]), ref, rows[i])


def _stage_boxes(st: _Stage) -> None:
    """Padded projected canvas boxes and camera-z ranges (pinhole), the objects whose amodal mask is their
    modal one (unoccluded_inside), the asset-box corners and the camera's clip slab."""
    ev, W, H = st.ev, st.W, st.H
    st.K_expected = np.array(ev.K, dtype=np.float64) + np.array([[0, 0, W], [0, 0, H], [0, 0, 0]])
    for k, ent in st.entries.items():
        lo, hi = ent["aabb"]
        st.corners[k] = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
    st.clip = (float(st.cam.data.clip_start), float(st.cam.data.clip_end)) if ev.lens is None else CLIP_M
    if ev.lens is not None:
        return                               # through a lens: every object is rasterised (or skipped)
    keys = list(st.entries)
    Kc = intrinsics_from_blender(replace(ev.params, lens_mm=ev.params.lens_mm / 3, shift_x=ev.params.shift_x / 3,
                                         shift_y=ev.params.shift_y / 3, resolution_x=st.Wc, resolution_y=st.Hc))
    # corners are in the baked (scaled) object frame: use rigid object poses
    rig_samples = np.array([[rigid_part(M) for M in st.M_samples[k]] for k in keys]) \
        if keys else np.zeros((0, len(st.sample_rows), 4, 4))
    box_list, depth_list = _boxes(Kc, (st.Wc, st.Hc), st.cam_rows[st.sample_rows], rig_samples,
                                  [st.corners[k] for k in keys], float(st.cam.data.clip_start))
    st.boxes = {k: b for k, b in zip(keys, box_list, strict=True) if b is not None}
    depths = dict(zip(keys, depth_list, strict=True))
    if SHORTCUT_UNOCCLUDED:
        st.from_modal = unoccluded_inside(st.boxes, depths, {k: st.table[k].render_index for k in st.boxes},
                                          ev.instance_id, ev.camera_z, ev.policy_mask)


def _stage_rasterise(st: _Stage) -> None:
    """Rasterised canvas silhouettes (st.rasterised): deforming objects for every camera model, then every
    rigid object through a lens, or (pinhole) the rigid objects RASTER_RULE admits."""
    T_cw_rows = np.linalg.inv(st.cam_rows)                              # (3H, 4, 4) camera <- world per canvas row
    lens = st.ev.lens
    ray_lens = lens if lens is not None else make_lens(LensSpec(), st.ev.K, st.W, st.H)
    rays_cache = canvas_ray_cache(ray_lens, st.W, st.H)
    shown = lens_shown(st.ctx.scene, st.ctx.clock, st.objs, st.ev.timing, st.hidden_notes)
    for k in list(st.entries):
        if not st.entries[k]["checkable"] and shown.get(k, True):
            _rasterise_deforming_entry(st, k, T_cw_rows, ray_lens, rays_cache)
    if lens is not None:
        for k in list(st.entries):
            if not shown.get(k, True):
                st.skip(k, f"{st.hidden_notes[k]}; hidden at the label render's time (the shutter centre): no pixel "
                           "rendered, no object labels")
            elif st.entries[k]["checkable"]:
                _rasterise_lens_entry(st, k, T_cw_rows, rays_cache)
    elif RASTERISE_RIGID:
        for k in list(st.entries):
            if k not in st.from_modal and st.entries[k]["checkable"] and k not in st.hidden_notes:
                _rasterise_rigid_entry(st, k, T_cw_rows)


def _row_T_wo(st: _Stage, k: int):
    """World <- object (rigid) of object k: (3H, 4, 4) per canvas row when it moves, else (4, 4)."""
    if k in st.row_of_moving:
        return np.array([rigid_part(M) for M in st.obj_rows[st.row_of_moving[k]]])
    return st.entries[k]["T_wo_ref"]


def _rasterise_deforming_entry(st: _Stage, k: int, T_cw_rows, ray_lens, rays_cache) -> None:
    ent = st.entries[k]
    got = rasterise_deforming(st, st.objs[k], ent["F"], T_cw_rows, ray_lens, rays_cache)
    if isinstance(got, str):
        if st.ev.lens is not None:  # pinhole: left to the Cycles canvas renders (not re-rasterised by the checker)
            st.skip(k, f"deforming: {got}: no object labels through a lens")
        return
    st.boxes.pop(k, None)
    st.from_modal.discard(k)
    if got is None:
        return
    box, mask, Vw = got
    data = npy_bytes(Vw)
    sha = hashlib.sha256(data).hexdigest()
    st.assets[sha] = data
    ent["row_mesh"] = {"uri": asset_uri(sha, data), "relative_to": "bundle root", "sha256": sha,
                       "first_canvas_row": box[2], "rows": box[3] - box[2], "units": "m", "frame": "world",
                       "rule": ROW_MESH_RULE}
    st.boxes[k] = box
    st.rasterised[k] = (box, np.packbits(mask, axis=-1))


def _rasterise_lens_entry(st: _Stage, k: int, T_cw_rows, rays_cache) -> None:
    ent = st.entries[k]
    T_co = T_cw_rows @ _row_T_wo(st, k)
    box = lens_canvas_box(st.ev.lens, st.corners[k], np.broadcast_to(T_co, (st.Hc, 4, 4)), st.W, st.H, st.clip[0])
    if box is None:
        return
    x0, x1, y0, y1 = box
    st.boxes[k] = box
    st.rasterised[k] = (box, np.packbits(rasterize_rays(ent["V"], ent["F"], rays_cache.get(x0, x1, y0, y1),
                                                        T_co[y0:y1], near=st.clip[0], far=st.clip[1]), axis=-1))


def _rasterise_rigid_entry(st: _Stage, k: int, T_cw_rows) -> None:
    ent = st.entries[k]
    K64 = np.asarray(st.ev.K, dtype=np.float64)
    T_co = T_cw_rows @ _row_T_wo(st, k)                                 # (3H, 4, 4) camera <- object per row
    box = hull_box(st.corners[k], T_co, K64, st.W, st.H, st.clip[0])
    if box is None:
        st.boxes.pop(k, None)                                           # no pixel centre of the canvas
        return
    x0, x1, y0, y1 = box
    if (y1 - y0) * len(ent["F"]) > RASTER_MAX_PAIRS:
        return
    st.boxes[k] = box
    st.rasterised[k] = (box, np.packbits(rasterize_rows(ent["V"], ent["F"], K64, T_co[y0:y1], np.arange(y0, y1) - st.H,
                                                        x1 - x0, x0 - st.W, near=st.clip[0], far=st.clip[1]), axis=-1))


def _stage_renders(st: _Stage, groups: list):
    """Cycles canvas renders (pinhole only) of each group: ({k: (box, mask)}, render seconds, the canvas
    camera's K error vs K + (W, H), rendered px)."""
    canvas_masks, render_seconds = {}, []
    if st.ev.lens is not None:
        return canvas_masks, render_seconds, None, 0
    scene, vl = st.ctx.scene, st.ctx.view_layer
    rendered_px = 0
    with ScenePatch() as p:
        K_canvas_err = _canvas_render_setup(st, p)
        for g in groups:
            box = (min(st.boxes[k][0] for k in g), max(st.boxes[k][1] for k in g),
                   min(st.boxes[k][2] for k in g), max(st.boxes[k][3] for k in g))
            rendered_px += _area(box)
            with ScenePatch() as q:
                members = {st.objs[k].name for k in g}
                for o in [o for o in st.objs if o is not None] + _instancers(scene):
                    if o.name not in members and not o.hide_render:
                        q.set(o, "hide_render", True)      # not synced at all: the render costs its group only
                _set_canvas_border(q, scene, box, st.Wc, st.Hc, _flipped(st))
                t0 = time.perf_counter()
                passes = cs.render_passes(scene, vl)
                render_seconds.append(time.perf_counter() - t0)
            idx = passes["index"]
            if _flipped(st):
                idx = idx[::-1, ::-1]
            if idx.shape != (box[3] - box[2], box[1] - box[0]):
                raise RuntimeError(f"canvas border render returned {idx.shape}, expected "
                                   f"{(box[3] - box[2], box[1] - box[0])}")
            idx = np.rint(idx).astype(np.int64)
            for k in g:
                canvas_masks[k] = (box, np.packbits(idx == st.table[k].render_index, axis=-1))
    return canvas_masks, render_seconds, K_canvas_err, rendered_px


def _instancers(scene) -> list:
    """Scene objects that instance others (their instances carry other pass indices than their own)."""
    return [o for o in scene.objects if o.is_instancer]


def _flipped(st: _Stage) -> bool:
    return st.sensor.readout_direction != "top_to_bottom"


def _canvas_render_setup(st: _Stage, p) -> float:
    """Patch the scene for the canvas renders (3W x 3H, 1 sample, Gaussian 0.01 px, Object Index pass, lens / 3,
    shift / 3, stretched rolling shutter); returns max |K_canvas - (K + (W, H))| (px)."""
    scene, vl, params = st.ctx.scene, st.ctx.view_layer, st.ev.params
    st.ctx.base_settings(p, st.Wc, st.Hc)
    p.set(scene.cycles, "samples", 1)
    p.set(scene.cycles, "pixel_filter_type", "GAUSSIAN")
    p.set(scene.cycles, "filter_width", 0.01)
    p.set(scene.cycles, "max_bounces", 0)
    for attr in ("use_pass_position", "use_pass_normal", "use_pass_z", "use_pass_vector"):
        p.set(vl, attr, False)
    p.set(vl, "use_pass_object_index", True)
    cs.set_render_indices(p, scene, st.table[:st.n_objects])
    rcam = use_render_camera(p, scene, st.cam, st.sensor.readout_direction)
    p.set(rcam.data, "lens", rcam.data.lens / 3)
    p.set(rcam.data, "shift_x", rcam.data.shift_x / 3)
    p.set(rcam.data, "shift_y", rcam.data.shift_y / 3)
    sign = -1.0 if _flipped(st) else 1.0
    K_canvas_err = float(np.abs(intrinsics_from_blender(replace(
        params, lens_mm=rcam.data.lens, shift_x=sign * rcam.data.shift_x, shift_y=sign * rcam.data.shift_y,
        resolution_x=st.Wc, resolution_y=st.Hc)) - st.K_expected).max())
    shutter = timed_rows_shutter(st.times[0], _row_period(st), st.Hc)
    cs.apply_shutter(p, scene, st.ctx.clock, shutter, st.sensor.motion_steps, st.objs[:st.n_objects] + [rcam])
    return K_canvas_err


def _row_period(st: _Stage) -> Fraction:
    return st.ev.timing.period_ns                  # row period (ns, exact)


def _stage_assemble(st: _Stage, canvas_masks: dict):
    """Per-object records in render-index order: (objects, packed image masks, packed canvas masks, modal
    pixels added in all)."""
    objects_out, amodal, canvas_list, added_total = [], [], [], 0
    flat = np.asarray(st.ev.instance_id).ravel()
    # visible pixels of every render index at once: (image rows, image cols) of index i = pix[start[i]:stop[i]]
    order = np.argsort(flat, kind="stable")
    ids, start, counts = np.unique(flat[order], return_index=True, return_counts=True)
    where = {int(i): order[a:a + n] for i, a, n in zip(ids, start, counts, strict=True)}
    for k in sorted(canvas_masks, key=lambda k: st.table[k].render_index):
        pix = where.get(st.table[k].render_index, np.zeros(0, np.int64))
        win = _window(st, canvas_masks[k], pix)
        added_total += win["added"]
        if win["n_all"] == 0:    # projected box met the canvas, silhouette did not: not in view (or hidden then)
            if k in st.hidden_notes:
                st.skip(k, st.hidden_notes[k] + "; no pixel rendered")
            continue
        mask_index = canvas_index = None
        if win["n_img"]:
            mask_index = len(amodal)
            amodal.append(np.packbits(_image_mask(st, win), axis=-1))
        if win["n_all"] > win["n_img"]:
            canvas_index = len(canvas_list)
            canvas = np.zeros((st.Hc, st.Wc), dtype=bool)
            x0w, x1w, y0w, y1w = win["box"]
            canvas[y0w:y1w, x0w:x1w] = win["full"]
            canvas_list.append(np.packbits(canvas, axis=-1))
        objects_out.append(_object_record(st, k, win, mask_index, canvas_index))
    return objects_out, amodal, canvas_list, added_total


def _window(st: _Stage, canvas_mask, pix) -> dict:
    """An object's amodal silhouette `full` (the canvas mask OR its visible pixels) and modal mask `modal` in the
    window box (x0w, x1w, y0w, y1w) = its canvas box plus its visible pixels (flat image indices `pix`); the
    image part `img_w` of `full`; counts n_all, n_img, n_vis; `added` modal pixels not on the silhouette."""
    W, H = st.W, st.H
    (x0, x1, y0, y1), m = canvas_mask
    if m.dtype == np.uint8:                                     # kept bit-packed along x until needed
        m = np.unpackbits(m, axis=-1, count=x1 - x0).view(bool)
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
    full |= modal
    inside = np.zeros_like(full)                                # the image part of the window
    inside[max(H - y0w, 0):max(2 * H - y0w, 0), max(W - x0w, 0):max(2 * W - x0w, 0)] = True
    img_w = full & inside
    return {"box": (x0w, x1w, y0w, y1w), "full": full, "modal": modal, "img_w": img_w, "added": added,
            "rows": mv - H, "n_all": int(full.sum()), "n_img": int(img_w.sum()), "n_vis": int(pix.size)}


def _image_mask(st: _Stage, win: dict) -> np.ndarray:
    """(H, W) bool: the window's amodal silhouette inside the image."""
    W, H = st.W, st.H
    x0w, x1w, y0w, y1w = win["box"]
    img = np.zeros((H, W), dtype=bool)
    img[max(y0w - H, 0):min(y1w - H, H), max(x0w - W, 0):min(x1w - W, W)] = \
        win["img_w"][max(H - y0w, 0):min(2 * H - y0w, y1w - y0w), max(W - x0w, 0):min(2 * W - x0w, x1w - x0w)]
    return img


def _object_poses(st: _Stage, k: int, centroid_row):
    """(world <- object at the reference time, world <- object at the centroid row's time or None); rigid."""
    T_wo_ref = st.entries[k]["T_wo_ref"]
    if k not in st.row_of_moving:
        return T_wo_ref, T_wo_ref
    Tm = st.obj_rows[st.row_of_moving[k]]
    M_ref = st.inst_matrix[k] if k >= st.n_objects else _matrix_at(st.ctx.scene, st.ctx.clock, st.objs[k], st.t_ref)
    T_ref_w = rigid_part(np.array(M_ref))
    T_c = rigid_part(Tm[st.H + centroid_row]) if centroid_row is not None else None
    return T_ref_w, T_c


def _object_record(st: _Stage, k: int, win: dict, mask_index, canvas_index) -> dict:
    """The manifest record of object k from its window (_window)."""
    e, ent, W, H = st.table[k], st.entries[k], st.W, st.H
    n_all, n_img, n_vis = win["n_all"], win["n_img"], win["n_vis"]
    x0w, _, y0w, _ = win["box"]
    centroid_row = int(np.floor(win["rows"].mean() + 0.5)) if n_vis else None
    T_ref_w, T_c = _object_poses(st, k, centroid_row)
    notes = list(ent["notes"]) + ([st.hidden_notes[k]] if k in st.hidden_notes else [])
    if win["added"]:
        notes.append(f"{win['added']} modal pixel(s) not on the rendered silhouette were added to the amodal mask")
    lo, hi = ent["aabb"]
    return {
        "instance_id": e.render_index, "id": str(e.id), "name": e.obj_name, "class": e.class_tag,
        "semantic_id": e.class_id, "motion": e.motion,
        "mask_index": mask_index, "canvas_mask_index": canvas_index,
        "row_pose_index": st.row_of_moving.get(k),
        "px_count_all": n_all, "px_count_in_image": n_img, "px_count_visib": n_vis,
        "visib_fract": n_vis / n_all, "truncation_fraction": 1 - n_img / n_all,
        "occlusion_fraction": (1 - n_vis / n_img) if n_img else 0.0,
        "bbox_modal": tight_box(win["modal"], x0w - W, y0w - H),
        "bbox_amodal_clipped": tight_box(win["img_w"], x0w - W, y0w - H),
        "bbox_amodal_unclipped": tight_box(win["full"], x0w - W, y0w - H),
        "box3d": {"kind": "object_template_aabb", "frame": "object",
                  "centre_m": [float(x) for x in (lo + hi) / 2], "size_m": [float(x) for x in hi - lo]},
        "T_camera_object_reference": (invert_rigid(st.ev.ref_pose) @ T_ref_w).tolist(),
        "reference_time_ns": int(st.t_ref),
        "T_camera_object_centroid_row": (invert_rigid(st.ev.row_poses[centroid_row]) @ T_c).tolist()
        if centroid_row is not None else None,
        "centroid_row": centroid_row,
        "centroid_row_time_ns": _round_ns(st.times[H + centroid_row]) if centroid_row is not None else None,
        "asset": {"uri": f"{ASSET_DIR}/{ent['sha']}.ply", "relative_to": "bundle root", "sha256": ent["sha"],
                  "units": "m", "frame": "object (scale baked in)"},
        **({"row_mesh": ent["row_mesh"]} if "row_mesh" in ent else {}),
        "rasterisation_check": ent["checkable"] or "row_mesh" in ent,
        "notes": notes,
    }


def _arrays(st: _Stage, amodal: list, canvas_list: list) -> dict:
    W, H, Wc, Hc = st.W, st.H, st.Wc, st.Hc
    return {
        "amodal_masks": np.stack(amodal) if amodal else np.zeros((0, H, (W + 7) // 8), np.uint8),
        "amodal_masks_canvas": np.stack(canvas_list) if canvas_list else np.zeros((0, Hc, (Wc + 7) // 8), np.uint8),
        "canvas_row_time_ns": np.array([_round_ns(t) for t in st.times], dtype=np.int64),
        "canvas_row_T_world_camera": st.cam_rows,
        "object_row_T_world_object": np.array([[rigid_part(M) for M in st.obj_rows[i]] for i in range(len(st.moving))])
        if st.moving else np.zeros((0, Hc, 4, 4)),
    }


def _method_block(st: _Stage, groups, rendered_px: int, added_total: int, K_canvas_err) -> dict:
    table, lens = st.table, st.ev.lens
    return {"amodal": METHOD if lens is None else LENS_METHOD, "renders": len(groups),
            "objects_rendered": len(st.boxes) - len(st.from_modal) - len(st.rasterised),
            "objects_from_modal": len(st.from_modal), "objects_rasterised": len(st.rasterised),
            "amodal_source": {"cycles_renders": sorted(table[k].render_index for g in groups for k in g),
                              "modal": sorted(table[k].render_index for k in st.from_modal),
                              "rasterised": sorted(table[k].render_index for k in st.rasterised)},
            "rendered_px": rendered_px, "image_px": st.W * st.H,
            "unoccluded_rule": UNOCCLUDED_RULE, "raster_rule": RASTER_RULE,
            "modal_pixels_added": added_total, "canvas_K_max_abs_error": K_canvas_err,
            "canvas_shutter": {"first_row_ns": float(st.times[0]), "row_period_ns": float(_row_period(st)),
                               "rows": st.Hc, "motion_steps": st.sensor.motion_steps}}


def _canvas_block(st: _Stage) -> dict:
    lens = st.ev.lens
    clip_rule = ("camera rays start on the plane camera_z = near and end on camera_z = far (Cycles clip_start / "
                 "clip_end): surface outside that slab is not seen"
                 + ("" if lens is None else "; through a lens the rays are the lens camera's "
                    "(clip_start / clip_end of rowbeam/blender/cycles/osl_camera.py)"))
    return {"size_px": [st.Wc, st.Hc], "origin_px": [-st.W, -st.H],
            "clip_m": {"near": float(st.clip[0]), "far": float(st.clip[1]), "rule": clip_rule},
            **({} if lens is None else {"lens": {"model": lens.model, "valid_pixels": LENS_CANVAS_RULE}}),
            "row_times": "canvas row c <-> image row v = c - H; time = start + readout*(v'+0.5)/H + "
                         "exposure/2 (v' = v top_to_bottom, H-1-v bottom_to_top), extrapolated beyond the image"}


def _matrix_at(scene, clock, obj, t_ns):
    return objects_world_matrices(scene, clock, [obj], [t_ns])[0, 0]
