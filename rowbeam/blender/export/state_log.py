"""Sample and write the bundle's state log (`rowbeam/state_log@1`, rowbeam/model/state_log.py) (bpy).

Bodies: the ego (rig `state_log.ego_object`) and every planned sensor's object at `ego_rate_hz`, every moving
object of the object table at `objects_rate_hz`, over the span of the planned events. Each pose is matrix_world
(scale removed) at the sample's integer-ns time (`scene_clock.objects_world_matrices`: direct F-curve evaluation,
identical to frame_set, or frame_set); velocities by central differences.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import atomic_write_bytes, canonical_json, sha256_file
from rowbeam.model.frames import rigid_part
from rowbeam.model.state_log import (
    INTERPOLATION,
    SCHEMA,
    STATE_DIR,
    VELOCITY_METHOD,
    VELOCITY_STEP_NS,
    angular_velocity,
    sample_times_ns,
)

from rowbeam.blender.compat.scene_clock import objects_world_matrices
from rowbeam.bundle.files import load_json
from rowbeam.bundle.schema import MAX_USER_JSON_BYTES
from rowbeam.model.command_track import COMMAND_PROPERTY, SEMANTICS, parse_command_track, parse_command_track_text
from rowbeam.blender.objects.instances import instance_matrices


def check_state_log_config(scene, rig) -> None:
    """The ego object named in the rig must be in the scene (one line naming the field)."""
    cfg = rig.state_log
    if cfg and scene.objects.get(cfg["ego_object"]) is None:
        raise RowbeamError(f"{rig.source}: state_log.ego_object: object {cfg['ego_object']!r} is not in scene "
                           f"{scene.name!r}")


def load_command_tracks(scene, rig, rig_dir) -> list[dict]:
    """The command tracks the state log carries (rowbeam.model.command_track): the rig's `state_log.command_tracks`
    files (relative to rig_dir), then every scene object's COMMAND_PROPERTY, each validated and its controller in
    the scene; [] without a rig state_log. RowbeamError (one line naming the source and field) otherwise."""
    if not rig.state_log:
        return []
    tracks = [parse_command_track(load_json(Path(rig_dir) / rel, "command track", MAX_USER_JSON_BYTES),
                                  str(Path(rig_dir) / rel)) for rel in rig.state_log.get("command_tracks", [])]
    for obj in sorted(scene.objects, key=lambda o: o.name):
        text = obj.get(COMMAND_PROPERTY)
        if text is None:
            continue
        source = f"object {obj.name!r} property {COMMAND_PROPERTY!r}"
        if not isinstance(text, str):
            raise RowbeamError(f"{source}: holds a value of type {type(text).__name__}, not command track JSON text")
        tracks.append(parse_command_track_text(text, source, obj.name))
    for t in tracks:
        if scene.objects.get(t["controller"]) is None:
            raise RowbeamError(f"{t['source']}: controller: object {t['controller']!r} is not in scene {scene.name!r}")
    return tracks


def plan_bodies(ctx, rig, sensors) -> list[tuple[str, str, float, str | None]]:
    """[(object name, role, rate_hz, 64-bit id or None)]: ego, the objects of `sensors` (every rig sensor, so
    associations find both partners' poses), moving objects and moving instances (object-table names; each once)."""
    cfg = rig.state_log
    bodies, seen = [], set()
    for name, role, rate, oid in ([(cfg["ego_object"], "ego", cfg["ego_rate_hz"], None)]
                                  + [(s.object, "sensor", cfg["ego_rate_hz"], None) for s in sensors
                                     if ctx.scene.objects.get(s.object) is not None]
                                  + [(e.obj_name, "object", cfg["objects_rate_hz"], str(e.id))
                                     for e in list(ctx.table) + list(ctx.instances.entries) if e.motion != "static"]):
        if name not in seen:
            seen.add(name)
            bodies.append((name, role, rate, oid))
    return bodies


def sample_body_tracks(ctx, bodies, start_ns: int, end_ns: int) -> dict:
    """{name: (t_ns, T (N,4,4), v (N,3), w (N,3))} sampled per rate group."""
    out = {}
    for rate in sorted({b[2] for b in bodies}):
        names = [b[0] for b in bodies if b[2] == rate]
        t = sample_times_ns(rate, start_ns, end_ns)
        M = _body_matrices(ctx, names, t.tolist())
        before = _body_matrices(ctx, names, [int(x) - VELOCITY_STEP_NS for x in t])
        after = _body_matrices(ctx, names, [int(x) + VELOCITY_STEP_NS for x in t])
        h2 = 2 * VELOCITY_STEP_NS * 1e-9
        for i, n in enumerate(names):
            T = np.stack([rigid_part(m) for m in M[i]])
            Rb = np.stack([rigid_part(m)[:3, :3] for m in before[i]])
            Ra = np.stack([rigid_part(m)[:3, :3] for m in after[i]])
            v = (after[i][:, :3, 3] - before[i][:, :3, 3]) / h2
            out[n] = (t, T, v, angular_velocity(Rb, Ra, h2))
    return out


def _body_matrices(ctx, names: list, times_ns: list) -> np.ndarray:
    """(len(names), N, 4, 4) matrix_world of scene objects and instances (object-table names of ctx.instances:
    instances.instance_matrices) at each time."""
    index = {e.obj_name: e.render_index for e in ctx.instances.entries}
    objs = [n for n in names if n not in index]
    out = np.empty((len(names), len(times_ns), 4, 4))
    if objs:
        out[[names.index(n) for n in objs]] = objects_world_matrices(ctx.scene, ctx.clock,
                                                                     [ctx.scene.objects[n] for n in objs], times_ns)
    insts = [n for n in names if n in index]
    if insts:
        out[[names.index(n) for n in insts]] = instance_matrices(ctx.scene, ctx.clock, ctx.instances,
                                                                 [index[n] for n in insts], times_ns)
    return out


def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a.astype(a.dtype.newbyteorder("<"), copy=False), allow_pickle=False)
    return buf.getvalue()


def _write_once(path: Path, data: bytes, sha: str) -> None:
    if path.exists() and sha256_file(path) == sha:
        return
    atomic_write_bytes(path, data)


def write_state_log(root, ctx, rig, sensors, span_ns: tuple[int, int], commands=()) -> dict:
    """Write state/<sha>.npy arrays and state/state_log_<sha>.json under bundle `root` (with the command tracks
    `commands`, load_command_tracks); return the manifest pointer {"log": uri relative to the bundle root, "sha256"}."""
    import hashlib

    bodies = plan_bodies(ctx, rig, sensors)
    tracks = sample_body_tracks(ctx, bodies, *span_ns)
    d = Path(root) / STATE_DIR
    d.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, role, rate, oid in bodies:
        arrays = {}
        for key, a in zip(("t_ns", "T_world_object", "velocity", "angular_velocity"), tracks[name], strict=True):
            data = _npy_bytes(np.asarray(a))
            sha = hashlib.sha256(data).hexdigest()
            _write_once(d / f"{sha}.npy", data, sha)
            arrays[key] = {"uri": f"{STATE_DIR}/{sha}.npy", "sha256": sha, "bytes": len(data), "format": "npy",
                           "dtype": str(np.asarray(a).dtype), "shape": list(np.asarray(a).shape)}
        entries.append({"name": name, "role": role, "rate_hz": rate, **({"id": oid} if oid else {}),
                        "samples": int(len(tracks[name][0])), "arrays": arrays})
    doc = {"schema": SCHEMA, "clock": "scene_monotonic_ns", "span_ns": [int(span_ns[0]), int(span_ns[1])],
           "frames": "T_world_object: world <- the object's local axes (Blender), scale removed; velocity: the object "
                     "origin's, world, m/s; angular_velocity: world, rad/s",
           "interpolation": INTERPOLATION, "velocity_method": VELOCITY_METHOD, "bodies": entries,
           **({"command_semantics": SEMANTICS, "commands": list(commands)} if commands else {})}
    data = canonical_json(doc)
    sha = hashlib.sha256(data).hexdigest()
    uri = f"{STATE_DIR}/state_log_{sha}.json"
    _write_once(Path(root) / uri, data, sha)
    return {"log": uri, "sha256": sha}
