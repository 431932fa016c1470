"""Object world matrices at many times without a frame_set per time (bpy reads, numpy float32 math).

For objects whose motion is plain -- transform F-curves of one action (no NLA, drivers, constraints,
physics, time remapping), parents of type OBJECT that are plain too -- matrix_world at scene time
t is computed directly: F-curves evaluated at Blender's float32 ctime (frame + subframe), then
Blender's own float32 composition (object.cc: scale -> Euler/quaternion rotation with its delta ->
location; parent @ parent_inverse @ local) replayed in numpy with the same operation order, so
the result equals `matrix_world` after `scene.frame_set` bit for bit (tests/blender/compat/test_pose_eval.py).
Anything else returns None and the caller falls back to frame_set (`scene_clock`).
"""
from __future__ import annotations

import math

import numpy as np

from rowbeam.blender.compat import blender_compat

F32 = np.float32
EULER_ORDERS = ("XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX")
# Blender's RotOrderInfo (math_rotation.cc): axis permutation and parity of each Euler order
_ORDER_INFO = {"XYZ": ((0, 1, 2), 0), "XZY": ((0, 2, 1), 1), "YXZ": ((1, 0, 2), 1),
               "YZX": ((1, 2, 0), 0), "ZXY": ((2, 0, 1), 0), "ZYX": ((2, 1, 0), 1)}
_CHANNELS = {"location": 3, "rotation_euler": 3, "rotation_quaternion": 4, "scale": 3,
             "delta_location": 3, "delta_rotation_euler": 3, "delta_rotation_quaternion": 4, "delta_scale": 3}
# F-curve paths that cannot move an object (anything else, e.g. rotation_mode or axis-angle, falls back)
_HARMLESS_PREFIXES = ("hide_", "pass_index", "color", '["', "visible_", "display_", "show_", "rowbeam")


def _plain_reason(obj) -> str | None:
    """Why `obj`'s matrix_world cannot be evaluated directly (None: it can)."""
    if obj.constraints and len(obj.constraints):
        return "constraints"
    if getattr(obj, "rigid_body", None) is not None or getattr(obj, "rigid_body_constraint", None) is not None:
        return "rigid body"
    if obj.rotation_mode not in EULER_ORDERS and obj.rotation_mode != "QUATERNION":
        return f"rotation mode {obj.rotation_mode}"
    if obj.parent is not None:
        if obj.parent_type != "OBJECT":
            return f"parent type {obj.parent_type}"
        reason = _plain_reason(obj.parent)
        if reason:
            return f"parent {obj.parent.name}: {reason}"
    anim = obj.animation_data
    if anim is None:
        return None
    if len(anim.drivers) or len(anim.nla_tracks) or getattr(anim, "use_tweak_mode", False):
        return "drivers or NLA"
    if anim.action is None:
        return None
    if anim.action_influence != 1.0 or anim.action_blend_type != "REPLACE":
        return "action influence or blending"
    if blender_compat.HAS_LAYERED_ACTIONS and (len(anim.action.layers) > 1 or any(
            len(layer.strips) > 1 for layer in anim.action.layers)):
        return "layered action with several layers or strips"
    for fc in blender_compat.fcurves(obj):
        if fc.data_path in _CHANNELS:
            if not 0 <= fc.array_index < _CHANNELS[fc.data_path]:
                return f"F-curve {fc.data_path}[{fc.array_index}]"
        elif not fc.data_path.startswith(_HARMLESS_PREFIXES):
            return f"F-curve {fc.data_path}"
    return None


def plain_reason(objects) -> str | None:
    """None when every object's world matrix can be evaluated directly, else the first reason why not."""
    for obj in objects:
        reason = _plain_reason(obj)
        if reason:
            return f"{obj.name}: {reason}"
    return None


def certainly_static(obj) -> bool:
    """True when nothing can move `obj` over time: plain (see plain_reason) with no transform F-curve on it or
    on any parent (a static object renders identically with Cycles motion blur off)."""
    if _plain_reason(obj) is not None:
        return False
    while obj is not None:
        if any(fc.data_path in _CHANNELS for fc in blender_compat.fcurves(obj)):
            return False
        obj = obj.parent
    return True


def blender_ctime(frames, subframes) -> np.ndarray:
    """Blender's evaluation time: float32(float32(frame) + float32(subframe)) (scene framelen 1)."""
    return (np.asarray(frames, dtype=F32) + np.asarray(subframes, dtype=F32)).astype(F32)


def _channels(obj, ctime: np.ndarray) -> dict:
    """{data_path: (N, n) float32}: each transform channel at each ctime (static value where no F-curve)."""
    out = {}
    for path, n in _CHANNELS.items():
        out[path] = np.broadcast_to(np.asarray(getattr(obj, path), dtype=F32), (ctime.size, n)).copy()
    if obj.animation_data is not None and obj.animation_data.action is not None:
        times = [float(t) for t in ctime]
        for fc in blender_compat.fcurves(obj):
            if fc.data_path in _CHANNELS and not fc.mute:
                ev = fc.evaluate
                out[fc.data_path][:, fc.array_index] = np.array([ev(t) for t in times], dtype=F32)
    return out


def _euler_to_mat3(eul: np.ndarray, order: str) -> np.ndarray:
    """eulO_to_mat3 for N Euler triples (N, 3) float32 -> (N, 3, 3) float32 as M[n, col, row] (Blender layout);
    trigonometry and products in double like Blender, rounded to float32 at the end."""
    (i, j, k), parity = _ORDER_INFO[order]
    e = eul.astype(np.float64)
    sgn = -1.0 if parity else 1.0
    ti, tj, th = sgn * e[:, i], sgn * e[:, j], sgn * e[:, k]
    cos = np.frompyfunc(math.cos, 1, 1)
    sin = np.frompyfunc(math.sin, 1, 1)
    ci, cj, ch = (cos(x).astype(np.float64) for x in (ti, tj, th))
    si, sj, sh = (sin(x).astype(np.float64) for x in (ti, tj, th))
    cc, cs, sc, ss = ci * ch, ci * sh, si * ch, si * sh
    M = np.empty((e.shape[0], 3, 3), dtype=np.float64)
    M[:, i, i] = cj * ch
    M[:, j, i] = sj * sc - cs
    M[:, k, i] = sj * cc + ss
    M[:, i, j] = cj * sh
    M[:, j, j] = sj * ss + cc
    M[:, k, j] = sj * cs - sc
    M[:, i, k] = -sj
    M[:, j, k] = cj * si
    M[:, k, k] = cj * ci
    return M.astype(F32)


def _quat_to_mat3(q: np.ndarray) -> np.ndarray:
    """normalize_qt_qt then quat_to_mat3 for (N, 4) float32 (w, x, y, z) -> (N, 3, 3) float32, M[n, col, row]."""
    q = q.astype(F32)
    dot = ((q[:, 0] * q[:, 0] + q[:, 1] * q[:, 1]) + q[:, 2] * q[:, 2]) + q[:, 3] * q[:, 3]
    length = np.sqrt(dot)
    zero = length == 0
    inv = np.where(zero, F32(1), F32(1) / np.where(zero, F32(1), length)).astype(F32)
    qn = (q * inv[:, None]).astype(F32)
    qn[zero] = np.array([1, 0, 0, 0], dtype=F32)
    q0, q1, q2, q3 = (math.sqrt(2.0) * qn[:, c].astype(np.float64) for c in range(4))
    qda, qdb, qdc = q0 * q1, q0 * q2, q0 * q3
    qaa, qab, qac = q1 * q1, q1 * q2, q1 * q3
    qbb, qbc, qcc = q2 * q2, q2 * q3, q3 * q3
    M = np.empty((q.shape[0], 3, 3), dtype=np.float64)
    M[:, 0, 0] = 1.0 - qbb - qcc
    M[:, 0, 1] = qdc + qab
    M[:, 0, 2] = -qdb + qac
    M[:, 1, 0] = -qdc + qab
    M[:, 1, 1] = 1.0 - qaa - qcc
    M[:, 1, 2] = qda + qbc
    M[:, 2, 0] = qdb + qac
    M[:, 2, 1] = -qda + qbc
    M[:, 2, 2] = 1.0 - qaa - qbb
    return M.astype(F32)


def _per_distinct_value(fn, values: np.ndarray) -> np.ndarray:
    """fn(values) for a row-wise function fn of (N, k) float32 rows: evaluated once and repeated when every row has
    the bits of the first (an unanimated channel, e.g. the rotation of a translating rig), else on every row. The
    result is the same either way; it saves the per-row trigonometry of long time series (2049 LiDAR firing
    times)."""
    bits = values.view(np.uint32)
    if values.shape[0] > 1 and (bits == bits[:1]).all():
        return np.repeat(fn(values[:1]), values.shape[0], axis=0)
    return fn(values)


def _mul_m3(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """mul_m3_m3m3(R, A, B) = A @ B in Blender's [col][row] layout, float32, Blender's summation order."""
    R = np.empty_like(A)
    for c in range(3):
        for r in range(3):
            R[:, c, r] = (B[:, c, 0] * A[:, 0, r] + B[:, c, 1] * A[:, 1, r]) + B[:, c, 2] * A[:, 2, r]
    return R


def _mul_m4(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """mul_m4_m4m4(R, A, B) = A @ B, [col][row] layout, float32; Blender's SSE2 order (b0 a0 + b1 a1) + (b2 a2 + b3 a3)."""
    R = np.empty(np.broadcast_shapes(A.shape, B.shape), dtype=F32)
    for c in range(4):
        R[:, c, :] = ((B[:, c, 0, None] * A[:, 0, :] + B[:, c, 1, None] * A[:, 1, :])
                      + (B[:, c, 2, None] * A[:, 2, :] + B[:, c, 3, None] * A[:, 3, :]))
    return R


def _local_matrices(obj, ctime: np.ndarray) -> np.ndarray:
    """BKE_object_to_mat4 at each ctime: (N, 4, 4) float32, [col][row] layout."""
    ch = _channels(obj, ctime)
    n = ctime.size
    smat = np.zeros((n, 3, 3), dtype=F32)
    size = (ch["scale"] * ch["delta_scale"]).astype(F32)
    for a in range(3):
        smat[:, a, a] = size[:, a]
    if obj.rotation_mode == "QUATERNION":
        rmat = _per_distinct_value(_quat_to_mat3, ch["rotation_quaternion"])
        dmat = _per_distinct_value(_quat_to_mat3, ch["delta_rotation_quaternion"])
    else:
        def to_mat3(eul):
            return _euler_to_mat3(eul, obj.rotation_mode)
        rmat = _per_distinct_value(to_mat3, ch["rotation_euler"])
        dmat = _per_distinct_value(to_mat3, ch["delta_rotation_euler"])
    m3 = _mul_m3(_mul_m3(dmat, rmat), smat)
    M = np.zeros((n, 4, 4), dtype=F32)
    M[:, :3, :3] = m3
    M[:, 3, :3] = (ch["location"] + ch["delta_location"]).astype(F32)
    M[:, 3, 3] = 1
    return M


def _world_blender_layout(obj, ctime: np.ndarray, cache: dict) -> np.ndarray:
    key = obj.name
    if key not in cache:
        M = _local_matrices(obj, ctime)
        if obj.parent is not None:
            parent = _world_blender_layout(obj.parent, ctime, cache)
            pinv = np.asarray(obj.matrix_parent_inverse, dtype=F32).T[None]     # [col][row]
            M = _mul_m4(_mul_m4(parent, np.broadcast_to(pinv, parent.shape)), M)
        cache[key] = M
    return cache[key]


def world_matrices_direct(objects, frames, subframes) -> np.ndarray:
    """matrix_world of each plain object (see `plain_reason`) at each (frame, subframe):
    (len(objects), N, 4, 4) float64 holding Blender's float32 values, row-major like np.array(matrix_world)."""
    ctime = blender_ctime(frames, subframes)
    cache = {}
    out = np.empty((len(objects), ctime.size, 4, 4))
    for j, obj in enumerate(objects):
        out[j] = np.swapaxes(_world_blender_layout(obj, ctime, cache), 1, 2)
    return out
