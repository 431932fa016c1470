"""Put a Blender scene at a scene-clock time and read poses there (bpy)."""
from __future__ import annotations

import numpy as np

from contracts.frames import rigid_part, world_from_opencv_camera
from contracts.timing import SceneClock


def scene_clock(scene) -> SceneClock:
    return SceneClock(scene.render.fps, scene.render.fps_base, scene.frame_start)


def set_time(scene, clock: SceneClock, t_ns) -> None:
    """scene.frame_set at the frame and subframe of t_ns (int or exact Fraction ns)."""
    frame, sub = clock.frame_subframe(t_ns)
    scene.frame_set(frame, subframe=sub)


def objects_world_matrices(scene, clock: SceneClock, objects, times_ns) -> np.ndarray:
    """matrix_world of each object at each time (len(objects), N, 4, 4), float64, scale kept;
    one frame_set per time for all objects."""
    out = np.empty((len(objects), len(times_ns), 4, 4))
    for i, t in enumerate(times_ns):
        set_time(scene, clock, t)
        for j, obj in enumerate(objects):
            out[j, i] = np.array(obj.matrix_world, dtype=np.float64)
    return out


def world_matrices(scene, clock: SceneClock, obj, times_ns) -> np.ndarray:
    """matrix_world of `obj` evaluated at each time (N, 4, 4), float64, scale kept."""
    return objects_world_matrices(scene, clock, [obj], times_ns)[0]


def camera_poses(scene, clock: SceneClock, camera_obj, times_ns) -> np.ndarray:
    """T_world_camera (OpenCV optical, rigid) of a Blender camera at each time, (N, 4, 4)."""
    return np.stack([world_from_opencv_camera(m) for m in world_matrices(scene, clock, camera_obj, times_ns)])


def rigid_poses(scene, clock: SceneClock, obj, times_ns) -> np.ndarray:
    """Rigid part (scale removed) of `obj`'s matrix_world at each time, (N, 4, 4)."""
    return np.stack([rigid_part(m) for m in world_matrices(scene, clock, obj, times_ns)])
