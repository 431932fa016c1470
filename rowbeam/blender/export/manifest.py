"""Write an event's payloads and assemble its `rowbeam/sample@1` manifest."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np

from rowbeam.bundle.arrays import exr_compression, write_exr, write_npz
from rowbeam.bundle.reader import read_payload
from rowbeam.model.camera_model import PIXEL_CONVENTION, PIXEL_CONVENTION_TEXT
from rowbeam.util.errors import RowbeamError
from rowbeam.sensors import MODALITIES, sensor_type
from rowbeam.bundle.files import atomic_write_json, sha256_file
from rowbeam.model.frames import Transform, invert_rigid
from rowbeam.model.sensor_clock import event_time
from rowbeam.bundle.schema import schema_errors
from rowbeam.util.worker_threads import WORKERS

CONVENTIONS = {
    "clock": "scene_monotonic_ns: integer ns, t = 0 at the scene's frame_start; "
             "t = (frame - frame_start + subframe) * fps_base / fps",
    "world_frame": "blender_world: right-handed, z up, metres",
    "camera_frame": "opencv_optical: x right, y down, z forward, metres, origin at the camera centre",
    "lidar_frame": "x forward, y left, z up, metres",
    "radar_frame": "x forward, y left, z up, metres (the mount's local axes); radial velocity positive = receding",
    "imu_frame": "the mount's local axes with scale removed; angular_velocity (rad/s) of the IMU frame relative to the "
                 "world and specific_force (m/s^2) = acceleration of the IMU origin minus calibration.gravity_mps2, "
                 "both in the IMU frame (at rest: +|g| on the axis pointing up)",
    "transform_naming": "T_a_b maps coordinates from frame b into frame a (4x4, metres)",
    "pixel": f"{PIXEL_CONVENTION}: {PIXEL_CONVENTION_TEXT}",
    "normals": "unit vectors in the sensor frame at the label's own time (camera: OpenCV optical at the row's "
               "reference time; LiDAR: LiDAR frame at the beam's time), facing the sensor (Cycles flips "
               "back-facing normals toward the incoming ray)",
    "ids": "instance_id holds render indices (0 = background / no return); objects[] maps each to a stable 64-bit id; "
           "semantic_id holds ontology class ids (0 = background, 4294967295 = void)",
    "invalid": "validity plane `valid`; float labels hold NaN where valid == 0",
    "motion": "objects[].motion = static when matrix_world is identical at every frame and half frame of the "
              "scene's range, no modifier deforms the object and the evaluated mesh of an object with modifiers is the same "
              "at all of them; else moving",
}


def write_payloads(event_dir: Path, arrays: dict, kind: str, sensor_id: str, dims: dict,
                   exposure_ns: int | None = None, started: PayloadWriter | None = None) -> dict:
    """Write each array as the modality contract of `kind` (a sensor type, or "flow") says;
    return the manifest `modalities` table (in `arrays`' order).

    started: the PayloadWriter of event_dir already writing some of `arrays` (handed over early, e.g. a camera
    event's labels while its verification renders); it writes the rest and waits for all. Else one is made here."""
    if started is not None:
        return started.finish(arrays, sensor_id, dims, exposure_ns)
    with PayloadWriter(event_dir, kind) as writer:
        return writer.finish(arrays, sensor_id, dims, exposure_ns)


class PayloadWriter:
    """Payload files of one folder written on worker threads while the caller goes on (bpy work stays in the
    caller's thread): OpenEXR's ZIP compression, numpy copies and fsync release the GIL.

    `submit(arrays)` starts files early (largest first), `withdraw(names)` takes them back; `finish(...)` starts
    the rest, waits and returns the modalities table. Each file is independent (its own temporary name, fsync and
    rename: rowbeam.bundle.arrays), so its bytes are those a sequential write gives. Leaving the `with` block waits for
    every started file (also on an error), so nothing is still written into a staging folder being removed; a
    write's error is raised by `finish`."""

    def __init__(self, event_dir: Path, kind: str, workers: int = WORKERS, read_back: tuple | None = None,
                 lossy: dict | None = None):
        """lossy: {modality name: stored pixel type} the rig declared (write_payload_file).
        read_back: (sensor_id, dims, exposure_ns) of the folder's manifest entries; given, each file is read back
        on its worker right after it is written, as the in-line check reads it (rowbeam.bundle.reader.read_payload,
        planes=True, with its manifest entry): `finish` then fills `read_back` {name: (entry, array or the error)}
        for rowbeam.check.runner.check_path."""
        self.event_dir, self.kind, self._entry_args, self.lossy = Path(event_dir), kind, read_back, lossy
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="rowbeam-payload")
        self._started: dict = {}          # name -> (array, future of (write_payload_file's fields, read-back))
        self.read_back: dict = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._pool.shutdown(wait=True)

    def submit(self, arrays: dict) -> None:
        """Start writing these arrays (modality name -> array) of `kind` while the caller goes on; they are made
        read-only, so what is written is what the event holds."""
        for array in arrays.values():
            if isinstance(array, np.ndarray):
                array.flags.writeable = False
        self._start(arrays)

    def withdraw(self, names) -> None:
        """Take back arrays handed over early that are no longer the folder's (a flow solve redone): their writes are
        waited for (a failed one is dropped) and the names may be handed over again; a new write of a name
        replaces its file (rowbeam.bundle.arrays writes a temporary file and renames it)."""
        wait([self._started.pop(name)[1] for name in names])

    def _start(self, arrays: dict) -> None:
        for name in sorted(arrays, key=lambda k: -getattr(arrays[k], "nbytes", 0)):
            if name in self._started:
                raise ValueError(f"payload {name!r} handed over twice")
            self._started[name] = (arrays[name], self._pool.submit(self._write, name, arrays[name]))

    def _write(self, name: str, array) -> tuple:
        """(write_payload_file's fields, (manifest entry, array read back or the error) or None) of one file."""
        fields = write_payload_file(self.event_dir, name, array, self.kind, self.lossy)
        if self._entry_args is None:
            return fields, None
        entry = {**MODALITIES[self.kind][name].entry(*self._entry_args), **fields}
        try:
            return fields, (entry, read_payload(self.event_dir, entry, planes=True))
        except (RowbeamError, OSError) as exc:          # reported by the check, as its own read would
            return fields, (entry, exc)

    def finish(self, arrays: dict, sensor_id: str, dims: dict, exposure_ns: int | None = None) -> dict:
        """The manifest `modalities` table of `arrays` (in their order), once every file is written; arrays not
        handed over yet are written now. Each handed-over name must be in `arrays` with the same array."""
        for name, (array, _) in self._started.items():
            if arrays.get(name) is not array:
                raise ValueError(f"payload {name!r} was written early but is not the event's array {name!r}")
        self._start({k: a for k, a in arrays.items() if k not in self._started})
        done = {name: future.result() for name, (_, future) in self._started.items()}
        self.read_back = {name: read for name, (_, read) in done.items() if read is not None}
        table = {}
        for name in arrays:
            entry = MODALITIES[self.kind][name].entry(sensor_id, dims, exposure_ns)
            entry.update(done[name][0])
            table[name] = entry
        return table


def write_payload_file(event_dir: Path, name: str, array, kind: str, lossy: dict | None = None) -> dict:
    """Write one array as modality `name` of `kind` into event_dir; return its manifest entry's file fields
    (uri, sha256, bytes, storage, format). Images: OpenEXR with the modality's lossless compression
    (rowbeam.bundle.arrays.exr_compression); tables and packed masks: deflated .npz. lossy: {modality name:
    stored pixel type} the rig asked for (rowbeam.bundle.arrays.LOSSY_PIXEL_TYPES, e.g. {"rgb": "HALF"})."""
    spec = MODALITIES[kind][name]
    if spec.channels:
        filename, fmt = f"{name}.exr", "openexr"
        encoding = {"compression": exr_compression(name)}
        if lossy and name in lossy:
            encoding["pixel_type"] = lossy[name]
        storage = write_exr(event_dir / filename, array, list(spec.channels), spec.dtype,
                            {"rowbeam_modality": name, "rowbeam_units": spec.units}, encoding)
    else:
        filename, fmt = f"{name}.npz", "npz"
        storage = write_npz(event_dir / filename, array.astype(spec.numpy_dtype(), copy=False))
    path = event_dir / filename
    return {"uri": filename, "sha256": sha256_file(path), "bytes": path.stat().st_size, "storage": storage,
            "format": fmt}


def camera_core(out, sensor, index: int) -> dict:
    """event, calibration and method of a camera event."""
    T_camera_world = Transform(sensor.id, "world", invert_rigid(out.reference_pose), out.timing.reference_time_ns())
    return {
        "event": {"index": index, "clock": "scene_monotonic_ns", **out.timing.to_manifest()},
        "calibration": {
            "image_size_px": [int(out.camera_params.resolution_x), int(out.camera_params.resolution_y)],
            "K": [[float(x) for x in row] for row in out.K],
            "pixel_convention": PIXEL_CONVENTION,
            **({"K_source": "rig"} if getattr(out, "lens", None) is not None and sensor.lens.K is not None else {}),
            "projection": out.lens.model if getattr(out, "lens", None) is not None else "pinhole",
            "distortion": out.lens.to_manifest() if getattr(out, "lens", None) is not None else
            {"model": "none", "coefficients": []},
            "blender_camera": out.camera_params.to_json(),
            "T_camera_world": T_camera_world.to_json(),
            "row_poses": {"modality": "row_T_world_camera", "method": out.method["row_poses"]},
        },
        "method": out.method,
        **({"object_labels": out.object_labels} if getattr(out, "object_labels", None) is not None else {}),
    }


def lidar_core(out, sensor, index: int) -> dict:
    """event, calibration (beam table, limits, poses) and method of a LiDAR sweep."""
    T_lidar_world = Transform(sensor.id, "world", invert_rigid(out.reference_pose), out.timing.reference_time_ns())
    return {
        "event": {"index": index, "clock": "scene_monotonic_ns", **out.timing.to_manifest()},
        "calibration": {
            "beams": {"channels": sensor.beam_table(), "start_azimuth_deg": float(sensor.start_azimuth_deg),
                      "spin_direction": sensor.spin_direction, "preset": sensor.preset,
                      "azimuth_definition": "azimuth(k, c) = start_azimuth_deg + s * 360 * rotation_hz * "
                                            "(t(k, c) - sweep_start) + azimuth_offset_deg[c], s = +1 ccw / -1 cw; "
                                            "direction = (cos el cos az, cos el sin az, sin el) in the LiDAR frame"},
            "range_limits_m": {"min": float(sensor.min_range_m), "max": float(sensor.max_range_m)},
            "T_lidar_world": T_lidar_world.to_json(),
            "firing_poses": {"modality": "firing_T_world_lidar", "method": out.method["firing_poses"]},
        },
        "method": out.method,
    }


def radar_core(out, sensor, index: int) -> dict:
    """event, calibration (beam table, limits, velocity convention, poses) and method of a radar frame."""
    from rowbeam.sensors.radar import GRID_DEFINITION, RADIAL_VELOCITY_SIGN

    T_radar_world = Transform(sensor.id, "world", invert_rigid(out.reference_pose), out.timing.reference_time_ns())
    return {
        "event": {"index": index, "clock": "scene_monotonic_ns", "rate_hz": sensor.rate_hz, **out.timing.to_manifest()},
        "calibration": {
            "beams": {"table": sensor.beam_table(), "grid": sensor.grid, "preset": sensor.preset,
                      "definition": GRID_DEFINITION if sensor.grid else "explicit beam table (rig beams_deg); direction "
                      "= (cos el cos az, cos el sin az, sin el) in the radar frame (x forward, y left, z up)"},
            "range_limits_m": {"min": float(sensor.min_range_m), "max": float(sensor.max_range_m)},
            "max_radial_velocity_mps": float(sensor.max_radial_velocity_mps),
            "radial_velocity": {"sign": RADIAL_VELOCITY_SIGN, "method": out.method["radial_velocity"]},
            "T_radar_world": T_radar_world.to_json(),
            "chirp_poses": {"modality": "chirp_T_world_radar", "method": out.method["chirp_poses"]},
        },
        "method": out.method,
    }


def time_block(timebase, sensor, core: dict) -> dict:
    """The manifest `time` block (rowbeam.model.sensor_clock.event_time) of an event whose `event` is core["event"]:
    acquisition span by the sensor type's timing model, device timestamp and delivery by the rig's `timebase`."""
    span = sensor_type(sensor.type).timing_from_manifest(core["event"]).span_ns()
    return event_time(timebase, span, core["event"]["index"])


def imu_core(out, sensor, index: int) -> dict:
    """event, calibration (frame, gravity, pose, derivative scheme, noise model) and method of an IMU event."""
    T_imu_world = Transform(sensor.id, "world", invert_rigid(out.reference_pose), out.timing.reference_time_ns())
    return {
        "event": {"index": index, "clock": "scene_monotonic_ns", **out.timing.to_manifest()},
        "calibration": {
            "frame": "the mount object's local axes, scale removed",
            "gravity_mps2": [float(g) for g in sensor.gravity_mps2],
            "samples_per_event": sensor.samples_per_event,
            "T_imu_world": T_imu_world.to_json(),
            "sample_poses": {"modality": "sample_T_world_imu", "method": out.method["sample_poses"]},
            "derivatives": out.method["derivatives"],
            **({"noise": sensor.noise.to_manifest()} if sensor.noise is not None else {}),
        },
        "method": out.method,
    }


def assemble_manifest(core: dict, *, sample_id, sensor, modalities, objects, ontology, build, lineage, run,
                      state: dict | None = None, time: dict | None = None) -> dict:
    return {
        "schema": "rowbeam/sample@1",
        "sample_id": sample_id,
        "sensor": {"id": sensor.id, "type": sensor.type, "object": sensor.object},
        **core,
        "conventions": CONVENTIONS,
        "objects": [e.to_json() for e in objects],
        "ontology": ontology.manifest_entry(),
        "modalities": modalities,
        "build": build,
        "lineage": lineage,
        "run": run,
        **({"state": state} if state else {}),
        **({"time": time} if time else {}),
    }


def write_manifest(event_dir: Path, manifest: dict) -> None:
    errors = schema_errors(manifest, manifest["schema"])
    if errors:  # an exporter bug, not a user error: never publish an invalid manifest
        raise AssertionError(f"exporter produced an invalid manifest: {errors[0]}")
    atomic_write_json(event_dir / "manifest.json", manifest)
