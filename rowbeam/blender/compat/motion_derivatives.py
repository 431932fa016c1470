"""matrix_world of an object and its exact first and second time derivatives (bpy reads, float64 math).

For plain motion (`pose_eval.plain_reason`: transform F-curves of one action, object parents) every transform
channel is differentiated analytically: a Bezier segment is the cubic curve (x(u), y(u)) of its keys and handles
(handles corrected as Blender does so x(u) never turns back), u solved from x(u) = frame by bisection, and
    dy/dx = y'(u) / x'(u),   d2y/dx2 = (y''(u) x'(u) - y'(u) x''(u)) / x'(u)^3;
linear segments and linear extrapolation have constant slope, constant ones none; at a key, where the slope may
jump, the derivatives are those of the motion after it (right derivatives); polynomial Generator and sin/cos
Built-In Function modifiers are differentiated in closed form too. Channels compose as Blender
composes them (location, delta rotation @ rotation @ scale, parent @ parent_inverse @ local) with jets
(`rowbeam.model.jets`), so lever arms and parents' angular velocity and acceleration are carried exactly. Frames
per second turn d/dframe into d/dt. Anything else (other F-curve modifiers, easing interpolations, other rotation modes,
constraints, drivers, physics) raises NotAnalytic with the reason; the caller then uses a declared finite difference.
"""
from __future__ import annotations

import numpy as np

from rowbeam.model import imu_kinematics as kin
from rowbeam.model import jets
from rowbeam.model.jets import Jet

from rowbeam.blender.compat import blender_compat, pose_eval
from rowbeam.blender.compat.scene_clock import direct_evaluation_reason

_BISECTIONS = 64            # halves [0, 1] down to float64 resolution
MIN_SLOPE = 1e-9            # x'(u) below this (frames per unit u): a degenerate handle, not differentiated


class NotAnalytic(Exception):
    """The motion cannot be differentiated in closed form; str(exc) says why."""


def _bezier(c: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, d/du, d2/du2) of the cubic Bezier with control values c (4,) at parameters u (N,)."""
    s = 1 - u
    value = c[0] * s ** 3 + 3 * c[1] * s * s * u + 3 * c[2] * s * u * u + c[3] * u ** 3
    d1 = 3 * ((c[1] - c[0]) * s * s + 2 * (c[2] - c[1]) * s * u + (c[3] - c[2]) * u * u)
    d2 = 6 * ((c[2] - 2 * c[1] + c[0]) * s + (c[3] - 2 * c[2] + c[1]) * u)
    return value, d1, d2


def corrected_handles(k0, h0, h1, k1) -> tuple[np.ndarray, np.ndarray]:
    """Blender's BKE_fcurve_correct_bezpart: a handle reaching past the other key in x is shortened (x and y
    scaled together) to the segment's length. Points are (x, y); returns the new (h0, h1)."""
    k0, h0, h1, k1 = (np.asarray(p, np.float64) for p in (k0, h0, h1, k1))
    length, len0, len1 = k1[0] - k0[0], abs(k0[0] - h0[0]), abs(k1[0] - h1[0])
    if len0 + len1 == 0:
        return h0, h1
    if len0 > length:
        h0 = k0 - (length / len0) * (k0 - h0)
    if len1 > length:
        h1 = k1 - (length / len1) * (k1 - h1)
    return h0, h1


def bezier_segment(k0, h0, h1, k1, frames: np.ndarray) -> Jet:
    """(y, dy/dframe, d2y/dframe2) of one Bezier segment at frames inside [k0.x, k1.x]."""
    h0, h1 = corrected_handles(k0, h0, h1, k1)
    xs, ys = np.array([k0[0], h0[0], h1[0], k1[0]]), np.array([k0[1], h0[1], h1[1], k1[1]])
    lo, hi = np.zeros_like(frames), np.ones_like(frames)
    for _ in range(_BISECTIONS):                       # x(u) is non-decreasing once the handles are corrected
        mid = (lo + hi) / 2
        below = _bezier(xs, mid)[0] < frames
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    u = (lo + hi) / 2
    _, x1, x2 = _bezier(xs, u)
    y, y1, y2 = _bezier(ys, u)
    if np.any(np.abs(x1) < MIN_SLOPE):
        raise NotAnalytic("a Bezier handle of zero length in time (dx/du = 0)")
    return Jet(y, y1 / x1, (y2 * x1 - y1 * x2) / x1 ** 3)


def _extrapolated(fc, keys, frames: np.ndarray, first: bool) -> Jet:
    """Blender's extrapolation before the first / after the last key (fcurve_eval_keyframes_extrapolate)."""
    end, neighbour = (keys[0], keys[1] if len(keys) > 1 else None) if first else (
        keys[-1], keys[-2] if len(keys) > 1 else None)
    x, y = float(end.co[0]), float(end.co[1])
    slope = 0.0
    if fc.extrapolation == "LINEAR" and end.interpolation != "CONSTANT":
        if end.interpolation == "LINEAR":
            if neighbour is not None and float(neighbour.co[0]) != x:
                slope = (float(neighbour.co[1]) - y) / (float(neighbour.co[0]) - x)
        else:
            handle = end.handle_left if first else end.handle_right
            if float(handle[0]) != x:
                slope = (y - float(handle[1])) / (x - float(handle[0]))
    return Jet(y + slope * (frames - x), np.full_like(frames, slope), np.zeros_like(frames))


def _segment(k0, k1, frames: np.ndarray) -> Jet:
    interpolation = k0.interpolation
    (x0, y0), (x1, y1) = k0.co, k1.co
    if interpolation == "CONSTANT":
        return Jet(np.full_like(frames, y0), np.zeros_like(frames), np.zeros_like(frames))
    if interpolation == "LINEAR":
        slope = (y1 - y0) / (x1 - x0)
        return Jet(y0 + slope * (frames - x0), np.full_like(frames, slope), np.zeros_like(frames))
    if interpolation != "BEZIER":
        raise NotAnalytic(f"{interpolation} interpolation")
    points = [tuple(map(float, p)) for p in (k0.co, k0.handle_right, k1.handle_left, k1.co)]
    if max(p[1] for p in points) - min(p[1] for p in points) < np.finfo(np.float32).eps:   # Blender: flat segment
        return Jet(np.full_like(frames, points[0][1]), np.zeros_like(frames), np.zeros_like(frames))
    return bezier_segment(*points, frames)


def _keyframes_jet(fc, frames: np.ndarray) -> Jet:
    """(value, d/dframe, d2/dframe2) of an F-curve's keyframes (0 where it has none, as Blender starts modifiers)."""
    keys = list(fc.keyframe_points)
    if not keys:
        return Jet.constant(np.zeros_like(frames))
    xs = np.array([float(k.co[0]) for k in keys])
    out = Jet(np.empty_like(frames), np.empty_like(frames), np.empty_like(frames))
    before, after = frames < xs[0], frames >= xs[-1]       # at a key: the segment after it (right derivatives)
    parts = [(before, lambda f: _extrapolated(fc, keys, f, True)),
             (after & ~before, lambda f: _extrapolated(fc, keys, f, False))]
    inside = ~(before | after)
    seg = np.searchsorted(xs, frames, side="right") - 1
    for a in np.unique(seg[inside]):
        parts.append((inside & (seg == a), lambda f, a=a: _segment(keys[a], keys[a + 1], f)))
    for mask, fn in parts:
        if mask.any():
            j = fn(frames[mask])
            out.v[mask], out.d1[mask], out.d2[mask] = j.v, j.d1, j.d2
    return out


def _generator_jet(mod, frames: np.ndarray) -> Jet:
    """A Generator modifier (expanded polynomial sum_i c_i f^i) or a Built-In Function modifier (amplitude *
    sin|cos(phase_multiplier * f + phase_offset) + value_offset) at frames f."""
    if mod.type == "GENERATOR" and mod.mode == "POLYNOMIAL":
        c = [float(x) for x in mod.coefficients][:mod.poly_order + 1]
        p = np.polynomial.Polynomial(c)
        return Jet(p(frames), p.deriv(1)(frames), p.deriv(2)(frames))
    if mod.type == "FNGENERATOR" and mod.function_type in ("SIN", "COS"):
        arg = Jet(float(mod.phase_multiplier) * frames + float(mod.phase_offset),
                  np.full_like(frames, float(mod.phase_multiplier)), np.zeros_like(frames))
        wave = (jets.sin if mod.function_type == "SIN" else jets.cos)(arg).scaled(float(mod.amplitude))
        return wave + Jet.constant(np.full_like(frames, float(mod.value_offset)))
    kind = f"{mod.type} ({getattr(mod, 'mode', None) or getattr(mod, 'function_type', '')})"
    raise NotAnalytic(f"F-curve modifier {kind}")


def fcurve_jet(fc, frames: np.ndarray) -> Jet:
    """(value, d/dframe, d2/dframe2) of an F-curve at frames (N,) float64: its keyframes (CONSTANT, LINEAR, BEZIER
    segments and extrapolation), then its modifiers in order (polynomial Generator, sin/cos Built-In Function;
    additive or replacing); NotAnalytic for anything else, or a modifier with a restricted range or influence."""
    out = _keyframes_jet(fc, frames)
    for mod in fc.modifiers:
        if mod.mute:
            continue
        if mod.use_restricted_range or mod.use_influence:
            raise NotAnalytic(f"F-curve {fc.data_path}[{fc.array_index}]: modifier with restricted range or influence")
        value = _generator_jet(mod, frames)
        out = out + value if mod.use_additive else value
    return out


def _channel_jets(obj, frames: np.ndarray) -> dict:
    """{data_path: Jet (N, n)} of every transform channel (d/dframe); constant where no F-curve animates it."""
    out = {}
    for path, n in pose_eval._CHANNELS.items():
        out[path] = Jet.constant(np.broadcast_to(np.asarray(getattr(obj, path), np.float64), (frames.size, n)).copy())
    if obj.animation_data is not None and obj.animation_data.action is not None:
        for fc in blender_compat.fcurves(obj):
            if fc.data_path in pose_eval._CHANNELS and not fc.mute:
                j = fcurve_jet(fc, frames)
                for part in ("v", "d1", "d2"):
                    getattr(out[fc.data_path], part)[:, fc.array_index] = getattr(j, part)
    return out


def local_matrix_jet(obj, frames: np.ndarray) -> Jet:
    """(N, 4, 4) jet (d/dframe) of the object's local matrix: location, delta rotation @ rotation @ scale."""
    ch = _channel_jets(obj, frames)
    if obj.rotation_mode == "QUATERNION":
        R = jets.matmul(kin.quaternion_matrix(ch["delta_rotation_quaternion"]),
                        kin.quaternion_matrix(ch["rotation_quaternion"]))
    else:
        R = jets.matmul(kin.euler_matrix(ch["delta_rotation_euler"], obj.rotation_mode),
                        kin.euler_matrix(ch["rotation_euler"], obj.rotation_mode))
    size = jets.product(ch["scale"], ch["delta_scale"])
    diag = Jet(*(np.einsum("ni,ij->nij", x, np.eye(3)) for x in (size.v, size.d1, size.d2)))
    return kin.affine(jets.matmul(R, diag), ch["location"] + ch["delta_location"])


def world_matrix_jet(scene, clock, obj, times_ns) -> Jet:
    """(N, 4, 4) jet of `obj`'s matrix_world at times_ns (int or Fraction ns), derivatives per second; NotAnalytic
    (with the reason) when its motion is not plain F-curves and object parents."""
    reason = direct_evaluation_reason(scene, [obj])
    if reason is not None:
        raise NotAnalytic(reason)
    frames = np.array([float(clock.frame_of(t)) for t in times_ns], dtype=np.float64)
    frames_per_s = float(clock.frames_per_ns() * 1_000_000_000)
    return _world(obj, frames).time_scaled(frames_per_s)


def _world(obj, frames: np.ndarray) -> Jet:
    M = local_matrix_jet(obj, frames)
    if obj.parent is None:
        return M
    pinv = Jet.constant(np.broadcast_to(np.array(obj.matrix_parent_inverse, np.float64), M.v.shape))
    return jets.matmul(jets.matmul(_world(obj.parent, frames), pinv), M)
