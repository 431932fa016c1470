"""Export orchestration shared by the CLI, the add-on and farm jobs (bpy).

`plan_export` validates every input and creates nothing; `run_export` renders, writes,
checks and publishes event by event.
"""
from __future__ import annotations

import hashlib
import os
import platform
import stat
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import bpy

from rowbeam.version import CONTRACTS_VERSION
from rowbeam.check.runner import check_path
from rowbeam.check.flow_checks import ENDPOINT_NEEDS
from rowbeam.model.camera_model import intrinsics_from_blender
from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import atomic_write_json, canonical_json, load_json, regular_file, sha256_file
from rowbeam.model.ontology import load_ontology
from rowbeam.model.rig import Rig, load_rig, parse_rig_text
from rowbeam.model.sensor_clock import TIME_CONCEPTS
from rowbeam.sensors import load_layer, sensor_type
from rowbeam.sensors.camera import CameraSensor
from rowbeam.bundle.schema import schema_errors
from rowbeam.model.sample_identity import sample_id, token_from_name
from rowbeam.model.timing import MAX_EVENT_INDEX, MAX_IMAGE_SIDE_PX, MIN_IMAGE_SIDE_PX, periodic_event_count
from rowbeam.util.worker_threads import WORKERS, openexr_threads

from rowbeam.version import ROWBEAM_VERSION
from rowbeam.blender.compat import blender_compat
from rowbeam.blender.cycles import cycles_setup as cs
from rowbeam.blender.compat.blend_io import check_linked_libraries, git_revision, open_blend
from rowbeam.blender.export.allocator import release_free_memory
from rowbeam.blender.export.bundle import BundleWriter, event_location, flow_location, write_error
from rowbeam.blender.sensors.camera_labels import semantic_lut
from rowbeam.blender.flow.flow_pair import NEEDED, compute_flow_pair, endpoint, flow_manifest, load_event
from rowbeam.blender.export.manifest import (
    PayloadWriter,
    assemble_manifest,
    time_block,
    write_manifest,
    write_payloads,
)
from rowbeam.blender.objects.object_labels import check_object_scales, release_canvas_rays, write_assets
from rowbeam.blender.objects.instances import InstanceSet, build_instances, shown_instances
from rowbeam.blender.objects.object_table import build_object_table, collection_parents
from rowbeam.util.progress import Progress
from rowbeam.blender.export.run_temp import run_temp
from rowbeam.util.interrupt import Interrupted, raise_pending
from rowbeam.util.watchdog import watchdog
from rowbeam.blender.compat.scene_clock import scene_clock
from rowbeam.blender.compat.scene_patch import ScenePatch
from rowbeam.blender.export.state_log import check_state_log_config, load_command_tracks, write_state_log

RIG_PROPERTY = "rowbeam_rig"          # rig JSON stored on the scene by the add-on
SCENARIO_PROPERTY = "rowbeam_scenario"
LINEAGE_PROPERTY = "rowbeam_lineage_group"


@dataclass
class ExportRequest:
    out: Path
    blend: Path | None = None          # None: use the file already open in Blender
    rig: Path | None = None            # None: the rig stored in the .blend
    sensors: list | None = None
    first_event: int = 0
    count: int | None = None
    device: str = "auto"
    flow: bool = False                 # flow between consecutive exported events of each camera
    flow_pairs: list | None = None     # explicit (source index, destination index) pairs for every camera
    lineage: dict | None = None        # {scenario, lineage_group} from a dataset plan: overrides rig and scene
    split: str | None = None           # dataset split assigned before rendering (a dataset plan); into every manifest
    max_instances: int | None = None   # refuse an instancer with more rendered instances (None: MAX_INSTANCES)


@dataclass(frozen=True)
class Job:
    """One folder to produce: a sensor event, or the flow between two events of a camera."""

    sensor: object
    index: int
    index1: int | None = None

    @property
    def is_flow(self) -> bool:
        return self.index1 is not None

    @property
    def location(self) -> str:
        if self.is_flow:
            return flow_location(self.sensor.id, self.index, self.index1)
        return event_location(self.sensor.id, self.index)

    @property
    def label(self) -> str:
        if self.is_flow:
            return f"{self.sensor.id} flow {self.index}->{self.index1}"
        return f"{self.sensor.id} event {self.index}"


@dataclass
class ExportContext:
    """Scene-wide state every event needs."""

    scene: object
    view_layer: object
    clock: object
    table: list
    lut: object
    ontology: object
    device_patch: ScenePatch = field(default_factory=ScenePatch)
    device: str = "CPU"
    scenario: str = "untitled"         # lineage scenario: the first part of every sample id
    progress: Progress = field(default_factory=Progress)   # stage progress inside each job (silent by default)
    instances: InstanceSet = field(default_factory=InstanceSet)   # instances as objects (objects/instances.py)

    def image_size(self, sensor) -> tuple[int, int]:
        if sensor.image_size_px:
            return tuple(sensor.image_size_px)
        r = self.scene.render
        return r.resolution_x * r.resolution_percentage // 100, r.resolution_y * r.resolution_percentage // 100

    def render_objects(self) -> list:
        return [self.scene.objects[e.obj_name] for e in self.table]

    def shutter_objects(self) -> tuple[list, list]:
        """(render objects that may move: motion blur, render objects certainly static: motion blur off) --
        static in the object table (matrix_world and evaluated mesh constant over the range), nothing
        animates their transform (pose_eval.certainly_static) and none of their instances moves."""
        from rowbeam.blender.compat.pose_eval import certainly_static

        moving, static = [], []
        carriers = {self.instances.instancer[e.render_index] for e in self.instances.entries if e.motion != "static"}
        for e in self.table:
            obj = self.scene.objects[e.obj_name]
            still = e.motion == "static" and e.obj_name not in carriers and certainly_static(obj)
            (static if still else moving).append(obj)
        return moving, static

    def base_settings(self, patch: ScenePatch, width: int, height: int) -> None:
        cs.common_settings(patch, self.scene)
        cs.set_resolution(patch, self.scene, width, height)


@dataclass
class ExportPlan:
    request: ExportRequest
    rig: Rig
    rig_sha256: str
    blend_sha256: str
    jobs: list                        # [Job]: events first, then flows
    lineage: dict
    writer: BundleWriter
    context: ExportContext
    state: dict | None = None          # the state log pointer every event manifest carries (rig state_log)
    commands: tuple = ()               # command tracks the state log carries (state_log.load_command_tracks)


def _load_rig(request: ExportRequest, scene) -> Rig:
    if request.rig is not None:
        return load_rig(request.rig)
    text = scene.get(RIG_PROPERTY)
    if text is None or text == "":
        raise RowbeamError("no --rig given and the .blend stores no rig (scene property 'rowbeam_rig')")
    source = f"{bpy.data.filepath}: rig stored in scene property {RIG_PROPERTY!r}"
    if not isinstance(text, str):
        raise RowbeamError(f"{source}: holds a value of type {type(text).__name__}, not rig JSON text")
    return parse_rig_text(text, source)


def _check_sensor_object(scene, sensor) -> None:
    blender_compat.require_sensor_support(sensor.id, sensor.type)     # e.g. LiDAR needs Blender >= 4.5
    obj = scene.objects.get(sensor.object)
    if obj is None:
        raise RowbeamError(f"sensor {sensor.id!r}: object {sensor.object!r} is not in scene {scene.name!r}")
    check_plan = sensor_type(sensor.type).hook("check_plan")       # a type's own refusals (e.g. an IMU mount)
    if check_plan is not None:
        check_plan(scene, sensor)
    if isinstance(sensor, CameraSensor):
        if obj.type != "CAMERA":
            raise RowbeamError(f"sensor {sensor.id!r}: object {sensor.object!r} is a {obj.type}, not a camera")
        if obj.data.type != "PERSP":
            raise RowbeamError(f"sensor {sensor.id!r}: camera {sensor.object!r} is {obj.data.type}; "
                               "only perspective cameras are supported")


def _lineage(rig: Rig, scene, blend_path: str, request: ExportRequest | None = None) -> dict:
    if request is not None and request.lineage:
        return {**request.lineage, "source": "dataset plan (--scenario/--lineage-group)"}
    if rig.lineage:
        return {**rig.lineage, "source": "rig"}
    scenario = scene.get(SCENARIO_PROPERTY)
    if scenario:
        return {"scenario": str(scenario), "lineage_group": str(scene.get(LINEAGE_PROPERTY) or scenario),
                "source": "blend scene properties"}
    stem = token_from_name(Path(blend_path).stem)
    return {"scenario": stem, "lineage_group": stem, "source": "blend file name (no scenario declared)"}


def _default_event_count(scene, clock, sensor) -> int:
    """Events (from index 0) whose whole acquisition ends by the scene's frame_end; closed form for every
    sensor type (first_event_ns, rate_hz, event_duration_ns()); refused beyond the indices a bundle has."""
    n = periodic_event_count(sensor.first_event_ns, sensor.rate_hz, sensor.event_duration_ns(),
                             clock.ns_of(scene.frame_end))
    if n > MAX_EVENT_INDEX + 1:
        raise RowbeamError(f"sensor {sensor.id!r}: frames {scene.frame_start}..{scene.frame_end} hold {n} events, more "
                           f"than the {MAX_EVENT_INDEX + 1} event indices of a bundle; choose them with --first-event "
                           "and --count")
    return n


def plan_export(request: ExportRequest) -> ExportPlan:
    """Validate everything (files, rig, objects, output folder); create nothing."""
    blender_compat.check_supported()                                  # Blender/Python/numpy in the matrix
    if request.blend is not None:
        with watchdog(f"opening {request.blend}"):
            open_blend(request.blend)
    blend_path = bpy.data.filepath
    if not blend_path:
        raise RowbeamError("the scene has never been saved; save the .blend before exporting")
    check_linked_libraries()                                          # a missing one empties its instances
    with watchdog(f"tracing the external files of {blend_path}"):
        check_external_files(blend_path)                              # a FIFO texture would block the render
    scene = bpy.context.scene
    rig = _load_rig(request, scene)
    if request.sensors is not None and (len(set(request.sensors)) != len(request.sensors) or not request.sensors):
        raise RowbeamError(f"--sensors: {','.join(request.sensors)!r} names no sensor or one twice")
    sensor_ids = request.sensors or [s.id for s in rig.sensors]
    sensors = [rig.sensor(sid) for sid in sensor_ids]
    for s in sensors:
        _check_sensor_object(scene, s)
    check_state_log_config(scene, rig)
    for flag, value in (("--first-event", request.first_event), ("--count", request.count)):
        if value is not None and not 0 <= value <= MAX_EVENT_INDEX + (flag == "--count"):
            raise RowbeamError(f"{flag} {value}: must be 0 .. {MAX_EVENT_INDEX + (flag == '--count')}")
    rig_dir = Path(request.rig).parent if request.rig else Path(blend_path).parent
    ontology = load_ontology(rig_dir / rig.ontology if rig.ontology else None)
    commands = tuple(load_command_tracks(scene, rig, rig_dir))
    view_layer = bpy.context.view_layer
    clock = scene_clock(scene)
    table = build_object_table(scene, view_layer, ontology)
    instances = build_instances(scene, view_layer, table, ontology, collection_parents(scene), request.max_instances)
    check_object_scales(scene, table, sensors)                        # object labels: no mirroring scale
    jobs = []
    for s in sensors:
        count = request.count if request.count is not None else max(
            _default_event_count(scene, clock, s) - request.first_event, 0)
        jobs += [Job(s, request.first_event + k) for k in range(count)]
    jobs += _flow_jobs(request, sensors, jobs)
    _check_event_range(request, scene, clock, sensors, jobs)
    lineage = _lineage(rig, scene, blend_path, request)
    _check_lineage(lineage, blend_path)
    if request.split is not None:
        lineage["split"] = _check_split(request.split)
    rig_sha = hashlib.sha256(canonical_json(rig.document)).hexdigest()
    blend_sha = sha256_file(blend_path)
    identity = {"blend_sha256": blend_sha, "rig_sha256": rig_sha, "ontology_sha256": ontology.sha256,
                "scenario": lineage["scenario"], "lineage_group": lineage["lineage_group"]}
    writer = BundleWriter(request.out, identity, {"rig": rig.document, "time_concepts": TIME_CONCEPTS, "created_by":
                          {"rowbeam_version": ROWBEAM_VERSION, "blender_version": bpy.app.version_string}})
    out_base = _out_folder_base(Path(request.out))
    writer.validate()
    ctx = ExportContext(scene, view_layer, clock, table, semantic_lut(table + instances.entries), ontology,
                        scenario=lineage["scenario"], instances=instances)
    for s in sensors:
        if isinstance(s, CameraSensor):
            _check_image_size(s, ctx.image_size(s), blend_path)
            _check_lens(scene, s, ctx.image_size(s))
    _probe_writable(Path(request.out), out_base)
    ctx.device = cs.select_device(scene, ctx.device_patch, request.device)
    return ExportPlan(request, rig, rig_sha, blend_sha, jobs, lineage, writer, ctx, commands=commands)


def check_external_files(blend_path: str) -> None:
    """Refuse (one line naming the file) a FIFO, device or socket among the files the open .blend makes
    Blender read (images, libraries, caches, fonts, sequences, volumes: bpy.utils.blend_paths, the tracer
    `rowbeam plan` falls back to); they are stat-ed, never opened. Missing files are Blender's to report."""
    deps = sorted({os.path.abspath(d) for d in bpy.utils.blend_paths(absolute=True, packed=False, local=False)})
    for dep in deps:
        for path in _with_folder_entries(dep):
            try:
                mode = os.stat(path).st_mode
            except OSError:
                continue
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                regular_file(path)          # raises: "<path>: is a FIFO, not a regular file; refusing to open it"


def _with_folder_entries(path: str) -> list[str]:
    """`path`, and the entries of its folder when it is one (a cache or sequence folder)."""
    try:
        return [path, *(os.path.join(path, n) for n in sorted(os.listdir(path)))] if os.path.isdir(path) else [path]
    except OSError:
        return [path]


def _check_event_range(request: ExportRequest, scene, clock, sensors, jobs) -> None:
    """Every planned event's whole acquisition must lie inside the scene's frame range (where Blender
    evaluates the scene); refuse naming how many events the range holds. An empty default plan is refused."""
    end_ns = clock.ns_of(scene.frame_end)
    last = {}
    for j in jobs:
        if not j.is_flow:
            last[j.sensor.id] = max(last.get(j.sensor.id, -1), j.index)
    if not jobs and request.count is None:
        s = sensors[0]
        n = _default_event_count(scene, clock, s)
        raise RowbeamError(f"--first-event {request.first_event}: sensor {s.id!r} has {n} event(s) (0 .. {n - 1}) "
                           f"inside frames {scene.frame_start}..{scene.frame_end}; nothing to export")
    for s in sensors:
        k = last.get(s.id)
        if k is not None and (k > MAX_EVENT_INDEX or s.event_start_ns(k) + s.event_duration_ns() > end_ns):
            n = _default_event_count(scene, clock, s)
            raise RowbeamError(f"sensor {s.id!r}: event {k} ends after frame {scene.frame_end}; frames "
                               f"{scene.frame_start}..{scene.frame_end} hold {n} event(s) (0 .. {n - 1}), "
                               f"{max(n - request.first_event, 0)} from --first-event {request.first_event}")


def _check_lineage(lineage: dict, blend_path: str) -> None:
    """Scenario and lineage group (from the rig, the scene properties or the file name) obey the rig schema."""
    doc = {"schema": "rowbeam/rig@1", "sensors": [], "lineage": {k: lineage[k] for k in ("scenario", "lineage_group")}}
    errors = [e for e in schema_errors(doc, "rowbeam/rig@1") if e.startswith("lineage")]
    if errors:
        raise RowbeamError(f"{blend_path}: {errors[0]} (taken from the {lineage['source']}; set lineage in the rig)")


def _check_split(split: str) -> str:
    """--split: a token (the sample schema's `lineage.split` pattern)."""
    from rowbeam.model.sample_identity import token_from_name

    if not split or token_from_name(split) != split:
        raise RowbeamError(f"--split {split[:80]!r}: a split name is 1-64 of [A-Za-z0-9_.-], starting with a letter "
                           "or digit")
    return split


def _out_folder_base(out: Path) -> Path:
    """--out itself when it exists, else its nearest existing ancestor, which must be a folder. Names the
    path on anything that makes the folder impossible (a file on the way, a dangling link, names too long)."""
    long_part = next((p for p in out.parts if len(os.fsencode(p)) > 255), None)
    if long_part is not None or len(os.fsencode(str(out.absolute()))) > 4095:
        raise RowbeamError(f"--out {str(out)[:80]}...: path too long ("
                           + (f"a path component is {len(os.fsencode(long_part))} bytes, at most 255)"
                              if long_part is not None else "more than 4095 bytes)"))
    base = out
    try:
        while not base.exists() and base != base.parent:
            if base.is_symlink():
                raise RowbeamError(f"--out {out}: {base} is a dangling symbolic link")
            base = base.parent
        if not base.is_dir():
            raise RowbeamError(f"--out {out}: {base} is not a folder")
    except OSError as exc:
        raise RowbeamError(f"--out {out}: {exc.strerror}") from None
    return base


def _probe_writable(out: Path, base: Path) -> None:
    """`base` (from _out_folder_base) must take new entries: probed with a temporary folder created and removed
    at once, since permission bits lie on read-only mounts and to root."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".rowbeam-probe-", dir=base))
    except OSError as exc:
        raise RowbeamError(f"--out {out}: cannot write in {base} ({exc.strerror})") from None


def _check_lens(scene, sensor, size) -> None:
    """A lens the image cannot use (or this Blender cannot render) is refused before anything is written."""
    from rowbeam.blender.sensors.camera_event import camera_params
    from rowbeam.blender.cycles.lens_camera import sensor_lens

    if sensor.lens.needs_custom_camera:
        sensor_lens(sensor, intrinsics_from_blender(camera_params(scene, scene.objects[sensor.object], *size)), *size)


def _check_image_size(sensor, size, blend_path: str) -> None:
    """Rig image_size_px (schema-bounded) or the scene's render resolution: MIN..MAX_IMAGE_SIDE_PX per side."""
    if not all(MIN_IMAGE_SIDE_PX <= v <= MAX_IMAGE_SIDE_PX for v in size):
        raise RowbeamError(f"{blend_path}: sensor {sensor.id!r}: render resolution {size[0]}x{size[1]} px "
                           f"(x percentage) is outside {MIN_IMAGE_SIDE_PX}..{MAX_IMAGE_SIDE_PX} px per side; "
                           "set image_size_px in the rig")


def _flow_jobs(request: ExportRequest, sensors, event_jobs) -> list:
    """Flow jobs (and any endpoint events not already planned) for --flow / --flow-pairs."""
    if not request.flow and not request.flow_pairs:
        return []
    cameras = [s for s in sensors if isinstance(s, CameraSensor)]
    if not cameras:
        raise RowbeamError("--flow needs a rolling_shutter_camera among the selected sensors")
    jobs, planned = [], {(j.sensor.id, j.index) for j in event_jobs}
    for cam in cameras:
        pairs = list(request.flow_pairs or [])
        if request.flow:
            indices = sorted(j.index for j in event_jobs if j.sensor is cam)
            pairs += list(zip(indices, indices[1:], strict=False))
        for i0, i1 in dict.fromkeys(pairs):
            if i0 == i1 or min(i0, i1) < 0:
                raise RowbeamError(f"--flow-pairs: {i0}:{i1} needs two different non-negative event indices")
            for i in (i0, i1):
                if (cam.id, i) not in planned:
                    planned.add((cam.id, i))
                    jobs.insert(0, Job(cam, i))
            jobs.append(Job(cam, i0, i1))
    return jobs


def new_summary(plan: ExportPlan) -> dict:
    return {"out": str(plan.writer.root), "published": [], "quarantined": [], "skipped": [], "reclaimed": [],
            "cancelled": True}


def iter_export(plan: ExportPlan, summary: dict):
    """Produce the planned folders one at a time (events, then flows), recording them in `summary`
    and yielding (done, total, text) after each. Each folder is checked, rendered and published under
    its lock, so concurrent writers on one folder produce it once (the others skip it). Closing the
    generator early (a cancel) or an error leaves only complete, published folders: staging and the
    run's temporary folder are removed and the scene restored in `finally`. A full disk or a
    permission error on the output is raised as one RowbeamError line naming the path."""
    ctx, writer = plan.context, plan.writer
    frame = (ctx.scene.frame_current, ctx.scene.frame_subframe)
    total, job = len(plan.jobs), None
    with run_temp(), openexr_threads():
        try:
            writer.open()
            summary["reclaimed"] = list(writer.reclaimed)
            _write_state_log(plan)
            for done, job in enumerate(plan.jobs):
                raise_pending()                 # a safe point: SIGINT / SIGTERM stop here (util/interrupt.py)
                t0 = time.perf_counter()
                ctx.progress.start_job(f"[{done + 1}/{total}] {job.label}")
                with writer.claim(job.location):
                    result = None if writer.is_complete(job.location) else (
                        (_export_flow if job.is_flow else _export_event)(plan, job))
                if result is None:
                    summary["skipped"].append(str(writer.root / job.location))
                    yield done + 1, total, f"{job.label}: already complete, skipped"
                    continue
                final, passed = result
                (summary["published"] if passed else summary["quarantined"]).append(str(final))
                yield done + 1, total, (f"{job.label}: {'published' if passed else 'QUARANTINED'} "
                                        f"{final.relative_to(writer.root)} ({time.perf_counter() - t0:.1f} s)")
            summary["cancelled"] = False
        except (OSError, RuntimeError) as exc:
            context = (f"{job.label} not published (published folders are complete; free space or fix "
                       "permissions and rerun to resume)" if job else f"nothing written to {writer.root}")
            error = write_error(exc, writer.root, context)
            if error is None:
                raise
            raise error from None
        finally:
            writer.close()
            ctx.scene.frame_set(frame[0], subframe=frame[1])
            ctx.device_patch.restore()


def _write_state_log(plan: ExportPlan) -> None:
    """The state log over the planned events' span (rig state_log), written once; events point at it."""
    events = [j for j in plan.jobs if not j.is_flow]
    if not plan.rig.state_log or not events:
        return
    start = min(j.sensor.event_start_ns(j.index) for j in events)
    end = max(j.sensor.event_start_ns(j.index) + j.sensor.event_duration_ns() for j in events)
    plan.state = write_state_log(plan.writer.root, plan.context, plan.rig, plan.rig.sensors, (start, end),
                                 plan.commands)


def run_export(plan: ExportPlan, progress=None, should_cancel=None) -> dict:
    """Produce every planned folder. `progress(done, total, text)` after each; `should_cancel()`
    is polled between folders."""
    summary = new_summary(plan)
    steps = iter_export(plan, summary)
    try:
        for done, total, text in steps:
            _report(progress, done, total, text)
            if should_cancel and should_cancel() and done < total:
                steps.close()
                break
    except Interrupted as exc:
        exc.published = len(summary["published"])
        raise
    return summary


def _report(progress, done, total, text):
    if progress:
        progress(done, total, text)


load_layer("export")    # each sensor type's exporter (its "export" hook, rowbeam.blender.sensors.exporter.Exporter)


def _build_info(plan: ExportPlan, render_device: str) -> dict:
    return {"blender_version": bpy.app.version_string, "rowbeam_version": ROWBEAM_VERSION,
            "git_revision": git_revision(), "blend_sha256": plan.blend_sha256, "rig_sha256": plan.rig_sha256,
            "render_device": render_device, "contracts_version": CONTRACTS_VERSION}


def _lineage_info(plan: ExportPlan) -> dict:
    return {"scenario": plan.lineage["scenario"], "lineage_group": plan.lineage["lineage_group"],
            "source": plan.lineage["source"], **({"split": plan.lineage["split"]} if "split" in plan.lineage else {})}


def _run_info(seconds: dict, t0: float) -> dict:
    return {"host": platform.node(), "python": platform.python_version(),
            "seconds": {k: round(v, 3) for k, v in {**seconds, "total": time.perf_counter() - t0}.items()}}


def _check_and_publish(plan: ExportPlan, staged: Path, location: str, manifest: dict, kept: dict | None = None,
                       read_back: dict | None = None):
    plan.context.progress.stage("write and check")
    write_manifest(staged, manifest)
    release_free_memory()                       # the export's freed arrays, before the check's own peak
    report = check_path(staged / "manifest.json", staged, plan.writer.root, kept, read_back)
    atomic_write_json(staged / "qa_report.json", {"schema": "rowbeam/event_qa@1", "status":
                                                   "fail" if report.failed else "pass", "checks": report.results})
    return plan.writer.publish(staged, location, not report.failed), not report.failed


def _export_event(plan: ExportPlan, job: Job):
    ctx, sensor, index = plan.context, job.sensor, job.index
    t0 = time.perf_counter()
    exporter = sensor_type(sensor.type).hook("export")
    staged = plan.writer.stage(job.location)
    lossy = sensor.lossy_payloads() if hasattr(sensor, "lossy_payloads") else None    # rig-declared lossy storage
    with PayloadWriter(staged, sensor.type, lossy=lossy) as payloads:
        # a camera event's labels are written on worker threads while its verification rows render (bpy)
        early = {"write_early": payloads.submit} if exporter.writes_early else {}
        out = exporter.export(ctx, sensor, index, **early)
        if getattr(out, "assets", None):
            write_assets(plan.writer.root, out.assets)       # content-addressed meshes the manifest refers to
        modalities = write_payloads(staged, out.arrays, sensor.type, sensor.id, out.dims, out.exposure_ns,
                                    started=payloads)
    if not _sensor_again(plan, job):
        release_canvas_rays()                   # no later event reuses this camera's canvas rays: free for the check
    core = exporter.core(out, sensor, index)
    manifest = assemble_manifest(
        core, sample_id=sample_id(ctx.scenario, sensor.id, out.reference_time_ns),
        sensor=sensor, modalities=modalities, ontology=ctx.ontology,
        objects=ctx.table + shown_instances(ctx.instances, out.arrays.get("instance_id")),
        build=_build_info(plan, out.render_device), lineage=_lineage_info(plan), run=_run_info(out.seconds, t0),
        state=plan.state, time=time_block(plan.rig.timebase(sensor.id), sensor, core))
    return _check_and_publish(plan, staged, job.location, manifest)


def _sensor_again(plan: ExportPlan, job: Job) -> bool:
    """Whether an event of job's sensor comes after job in the plan (state it keeps for that sensor is reused)."""
    later = plan.jobs[next(i for i, j in enumerate(plan.jobs) if j is job) + 1:]
    return any(j.sensor is job.sensor and not j.is_flow for j in later)


def _export_flow(plan: ExportPlan, job: Job):
    ctx, writer, sensor = plan.context, plan.writer, job.sensor
    t0 = time.perf_counter()
    src, dst = writer.event_dir(sensor.id, job.index), writer.event_dir(sensor.id, job.index1)
    for d in (src, dst):
        if not writer.is_complete(d.relative_to(writer.root).as_posix()):
            raise RowbeamError(f"{job.label}: endpoint {d.relative_to(writer.root)} is not a complete published event")
    ctx.progress.stage("flow")
    staged = writer.stage(job.location)
    W, H = load_json(src / "manifest.json", "manifest")["calibration"]["image_size_px"]
    dims = {"W": W, "H": H}
    # the endpoints' payloads only the in-line check reads are decoded while the poses are evaluated and the solve
    # runs; the forward payloads are written (and read back for the check) on the cores the backward solve leaves
    with ThreadPoolExecutor(1, thread_name_prefix="rowbeam-endpoints") as pool, \
            PayloadWriter(staged, "flow", max(1, WORKERS - 1), read_back=(sensor.id, dims, None)) as payloads:
        checked = [pool.submit(_check_only_arrays, d) for d in (src, dst)]
        arrays, method, ((m0, a0), (m1, a1)) = compute_flow_pair(ctx, src, dst, early=payloads)
        modalities = write_payloads(staged, arrays, "flow", sensor.id, dims, started=payloads)
    manifest = flow_manifest(
        flow_id=f"{plan.lineage['scenario']}.{sensor.id}.flow.{job.index}-{job.index1}", sensor=sensor,
        endpoints={"source": endpoint(writer.root, src, m0), "destination": endpoint(writer.root, dst, m1)},
        calibration={"image_size_px": [W, H], "K": m0["calibration"]["K"],
                     **{k: m0["calibration"][k] for k in ("projection", "distortion") if k in m0["calibration"]}},
        modalities=modalities,
        method=method, build=_build_info(plan, "CPU (numpy)"), lineage=_lineage_info(plan),
        run=_run_info(method.pop("seconds"), t0))
    # the endpoints' payloads decoded here (published, hash-verified) are not decoded again by the QA
    kept = {d.resolve(): {**a, **c.result()} for d, a, c in ((src, a0, checked[0]), (dst, a1, checked[1]))}
    return _check_and_publish(plan, staged, job.location, manifest, kept, payloads.read_back)


def _check_only_arrays(event_dir: Path) -> dict:
    """{name: array} of the endpoint event's payloads that only the flow's in-line check reads (ENDPOINT_NEEDS beyond
    the solve's), decoded as the check would (hash-verified); {} when one cannot be read: the check then reads it
    and reports why."""
    try:
        return load_event(event_dir, [n for n in ENDPOINT_NEEDS if n not in NEEDED])[1]
    except (RowbeamError, OSError):
        return {}
