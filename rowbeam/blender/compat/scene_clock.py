"""Put a Blender scene at a scene-clock time and read poses there (bpy)."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from rowbeam.model.frames import T_BLENDER_CAMERA_OPENCV, rigid_parts
from rowbeam.model.timing import SceneClock

from rowbeam.blender.compat import pose_eval

FORCE_FRAME_SET = False     # tests and the bench set it to compare the direct path with frame_set


def scene_clock(scene) -> SceneClock:
    return SceneClock(scene.render.fps, scene.render.fps_base, scene.frame_start)


def set_time(scene, clock: SceneClock, t_ns) -> None:
    """scene.frame_set at the frame and subframe of t_ns (int or exact Fraction ns)."""
    frame, sub = clock.frame_subframe(t_ns)
    scene.frame_set(frame, subframe=sub)


def objects_world_matrices(scene, clock: SceneClock, objects, times_ns) -> np.ndarray:
    """matrix_world of each object at each time (len(objects), N, 4, 4), float64, scale kept.

    Plain motion (F-curves and object parents only, `pose_eval.plain_reason`) is evaluated directly,
    bit-identical to frame_set and leaving the scene's time as it was; anything else (constraints,
    drivers, NLA, physics, time remapping) takes one frame_set per time for all objects."""
    if len(times_ns) and direct_evaluation_reason(scene, objects) is None:
        frames, subframes = frames_subframes(clock, times_ns)
        return pose_eval.world_matrices_direct(objects, frames, subframes)
    out = np.empty((len(objects), len(times_ns), 4, 4))
    for i, t in enumerate(times_ns):
        set_time(scene, clock, t)
        for j, obj in enumerate(objects):
            out[j, i] = np.array(obj.matrix_world, dtype=np.float64)
    return out


def frames_subframes(clock: SceneClock, times_ns) -> tuple[list, list]:
    """clock.frame_subframe of each time (int or Fraction ns), in integer arithmetic with frames_per_ns taken once:
    the same (frame, subframe) values, without a Fraction per time."""
    fpn = clock.frames_per_ns()
    frames, subframes = [], []
    for t in times_ns:
        if isinstance(t, (int, np.integer)):
            num, den = int(t) * fpn.numerator, fpn.denominator
        elif isinstance(t, Fraction):
            num, den = t.numerator * fpn.numerator, t.denominator * fpn.denominator
        else:
            f, sub = clock.frame_subframe(t)
            frames.append(f)
            subframes.append(sub)
            continue
        whole = num // den
        frames.append(clock.frame_start + whole)
        subframes.append((num - whole * den) / den)        # int / int: correctly rounded, = float(Fraction)
    return frames, subframes


def direct_evaluation_reason(scene, objects) -> str | None:
    """None when `objects_world_matrices` evaluates these objects directly, else why it uses frame_set."""
    if FORCE_FRAME_SET:
        return "frame_set forced"
    if scene.render.frame_map_old != scene.render.frame_map_new:
        return "time remapping (frame_map_old/new)"
    return pose_eval.plain_reason(objects)


def pose_method(scene, objects) -> str:
    """How `objects_world_matrices` evaluates these objects' poses (the manifest's method text)."""
    reason = direct_evaluation_reason(scene, objects)
    if reason is None:
        return ("direct evaluation at each time's Blender frame + subframe: transform F-curves and object parent "
                "chains composed with Blender's float32 operations (identical to scene.frame_set)")
    return f"scene.frame_set(frame, subframe) at each time ({reason})"


def world_matrices(scene, clock: SceneClock, obj, times_ns) -> np.ndarray:
    """matrix_world of `obj` evaluated at each time (N, 4, 4), float64, scale kept."""
    return objects_world_matrices(scene, clock, [obj], times_ns)[0]


def camera_poses(scene, clock: SceneClock, camera_obj, times_ns) -> np.ndarray:
    """T_world_camera (OpenCV optical, rigid) of a Blender camera at each time, (N, 4, 4)."""
    return rigid_parts(world_matrices(scene, clock, camera_obj, times_ns)) @ T_BLENDER_CAMERA_OPENCV


def rigid_poses(scene, clock: SceneClock, obj, times_ns) -> np.ndarray:
    """Rigid part (scale removed) of `obj`'s matrix_world at each time, (N, 4, 4)."""
    return rigid_parts(world_matrices(scene, clock, obj, times_ns))
