"""Operators of the rowbeam panel: sensors, rig files, labels, export (modal, Esc to cancel), check."""
from __future__ import annotations

from pathlib import Path

import bpy
from bpy.props import BoolProperty, EnumProperty, StringProperty
from bpy_extras.io_utils import ExportHelper, ImportHelper

from rowbeam.check.runner import check_bundle, summary_lines
from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import atomic_write_json
from rowbeam.model.ontology import load_ontology
from rowbeam.model.rig import load_rig, parse_rig
from rowbeam.sensors.camera import CAMERA
from rowbeam.sensors.radar import RADAR
from rowbeam.util.progress import Progress
from rowbeam.blender.cycles.render_stats import watch_cycles
from rowbeam.blender.export.run import ExportRequest, iter_export, new_summary, plan_export

from . import identity
from .rig_props import SENSOR_TYPES, load_rig_document, rig_document, sync_rig

CAMERA_PRESETS = {
    "seed_rolling": {"rate_hz": 30.0, "readout_ns": 12_000_000, "exposure_ns": 4_000_000,
                     "readout_direction": "top_to_bottom"},
    "global_shutter": {"rate_hz": 30.0, "readout_ns": 0, "exposure_ns": 0, "readout_direction": "top_to_bottom"},
}


def _settings(context):
    return context.scene.rowbeam


def _state(context):
    return context.window_manager.rowbeam_state


class _PanelSink:
    """Shows the exporter's stage progress (job, stage, samples, elapsed, ETA) as the Export panel's message."""

    def __init__(self, state):
        self.state = state

    def __call__(self, stage, now):
        self.state.message = stage.text(now)


def _watch_progress(plan, context):
    """Route the plan's stage progress to the panel; returns the undo."""
    plan.context.progress = Progress(_PanelSink(_state(context)))
    return watch_cycles(plan.context.progress)


class ROWBEAM_OT_sensor_add(bpy.types.Operator):
    """Add a sensor bound to the active object"""
    bl_idname = "rowbeam.sensor_add"
    bl_label = "Add Sensor"
    bl_options = {"REGISTER", "UNDO"}
    sensor_type: EnumProperty(items=[(name, label, "") for name, label, _ in SENSOR_TYPES])

    def execute(self, context):
        settings = _settings(context)
        taken = {s.sensor_id for s in settings.sensors}
        base = {CAMERA: "camera", RADAR: "radar"}.get(self.sensor_type, "lidar")
        n = 0
        while f"{base}_{n}" in taken:
            n += 1
        s = settings.sensors.add()
        s.sensor_type, s.sensor_id = self.sensor_type, f"{base}_{n}"
        if self.sensor_type == RADAR:
            s.rate_hz, s.min_range_m, s.max_range_m = 20.0, 0.5, 150.0
            s.radar_preset = "front_long_range"          # fills the chirp train and beam grid; editable after
        obj = context.active_object
        if obj is not None and (self.sensor_type != CAMERA or obj.type == "CAMERA"):
            s.target = obj
        settings.active_sensor = len(settings.sensors) - 1
        sync_rig(context=context)
        return {"FINISHED"}


class ROWBEAM_OT_sensor_remove(bpy.types.Operator):
    """Remove the selected sensor"""
    bl_idname = "rowbeam.sensor_remove"
    bl_label = "Remove Sensor"
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        settings = _settings(context)
        if 0 <= settings.active_sensor < len(settings.sensors):
            settings.sensors.remove(settings.active_sensor)
            settings.active_sensor = max(0, settings.active_sensor - 1)
            sync_rig(context=context)
        return {"FINISHED"}


class ROWBEAM_OT_sensor_move(bpy.types.Operator):
    """Move the selected sensor up or down"""
    bl_idname = "rowbeam.sensor_move"
    bl_label = "Move Sensor"
    bl_options = {"REGISTER", "UNDO"}
    direction: EnumProperty(items=[("UP", "Up", ""), ("DOWN", "Down", "")])

    def execute(self, context):
        settings = _settings(context)
        i = settings.active_sensor
        j = i - 1 if self.direction == "UP" else i + 1
        if 0 <= i < len(settings.sensors) and 0 <= j < len(settings.sensors):
            settings.sensors.move(i, j)
            settings.active_sensor = j
            sync_rig(context=context)
        return {"FINISHED"}


class ROWBEAM_OT_camera_preset(bpy.types.Operator):
    """Apply a timing preset to the selected camera sensor"""
    bl_idname = "rowbeam.camera_preset"
    bl_label = "Camera Preset"
    bl_options = {"REGISTER", "UNDO"}
    preset: EnumProperty(items=[("seed_rolling", "Rolling shutter 30 Hz, 12 ms readout, 4 ms exposure", ""),
                                ("global_shutter", "Global shutter 30 Hz, instantaneous", "")])

    def execute(self, context):
        settings = _settings(context)
        if not (0 <= settings.active_sensor < len(settings.sensors)):
            return {"CANCELLED"}
        s = settings.sensors[settings.active_sensor]
        for key, value in CAMERA_PRESETS[self.preset].items():
            setattr(s, key, value)
        return {"FINISHED"}


class RigFile:
    """File-browser settings shared by the rig import and export operators."""
    filename_ext = ".json"
    filter_glob: StringProperty(default="*.json", options={"HIDDEN"})


class ROWBEAM_OT_rig_import(RigFile, bpy.types.Operator, ImportHelper):
    """Replace the sensors with those of a rig file (rowbeam/rig@1)"""
    bl_idname = "rowbeam.rig_import"
    bl_label = "Import Rig"

    def execute(self, context):
        try:
            doc = load_rig(self.filepath).document     # bounded, finite numbers, schema and bounds checked
        except (OSError, RowbeamError) as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        load_rig_document(context.scene, doc)
        return {"FINISHED"}


class ROWBEAM_OT_rig_export(RigFile, bpy.types.Operator, ExportHelper):
    """Write the sensors as a rig file (rowbeam/rig@1)"""
    bl_idname = "rowbeam.rig_export"
    bl_label = "Export Rig"

    def execute(self, context):
        doc = rig_document(context.scene)
        try:
            parse_rig(doc, "rig")
        except RowbeamError as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        atomic_write_json(self.filepath, doc)
        return {"FINISHED"}


_class_items: list = []


def ontology_for(context):
    path = _settings(context).ontology_path
    return load_ontology(bpy.path.abspath(path) if path else None)


def _class_enum(self, context):
    _class_items.clear()
    try:
        onto = ontology_for(context)
    except RowbeamError as exc:
        _class_items.append(("NONE", "Ontology unreadable", str(exc)))
        return _class_items
    for cid, name, tags in onto.classes:
        _class_items.append((tags[0], f"{name} ({cid})", f"tag '{tags[0]}' -> class {cid} in {onto.name} {onto.version}"))
    return _class_items


class ROWBEAM_OT_set_class(bpy.types.Operator):
    """Tag the selected objects with a semantic class of the ontology"""
    bl_idname = "rowbeam.set_class"
    bl_label = "Set Class"
    bl_options = {"REGISTER", "UNDO"}
    bl_property = "tag"
    tag: EnumProperty(items=_class_enum, name="Class")

    def execute(self, context):
        if self.tag == "NONE":
            return {"CANCELLED"}
        identity.set_class(context.selected_objects or [context.active_object], self.tag)
        return {"FINISHED"}

    def invoke(self, context, event):
        context.window_manager.invoke_search_popup(self)
        return {"RUNNING_MODAL"}


class ROWBEAM_OT_assign_ids(bpy.types.Operator):
    """Give every renderable object without a rowbeam id a new stable 64-bit id (existing ids are kept)"""
    bl_idname = "rowbeam.assign_ids"
    bl_label = "Assign Missing Ids"
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        n = identity.reconcile_ids(context.scene, auto_assign=True)
        self.report({"INFO"}, f"{n} object id(s) assigned")
        return {"FINISHED"}


def export_request(context) -> ExportRequest:
    if not bpy.data.filepath:
        raise RowbeamError("save the .blend first: its sha256 is recorded in every manifest")
    # (bpy.data.is_dirty is only maintained in interactive sessions; in background it stays True)
    if bpy.data.is_dirty and not bpy.app.background:
        raise RowbeamError("the .blend has unsaved changes: save it so the export matches the file it names")
    settings = _settings(context)
    sensors = [s.strip() for s in settings.sensor_filter.split(",") if s.strip()] or None
    return ExportRequest(out=Path(bpy.path.abspath(settings.output_dir)), blend=None, rig=None, sensors=sensors,
                         first_event=settings.first_event, count=settings.event_count or None,
                         device=settings.device, flow=settings.flow)


class ROWBEAM_OT_export(bpy.types.Operator):
    """Export sensor events with the same exporter as render_export.py (Esc cancels between events)"""
    bl_idname = "rowbeam.export"
    bl_label = "Export Events"

    _steps = None
    _timer = None
    _summary = None
    _unwatch = None

    def execute(self, context):
        try:
            plan = plan_export(export_request(context))
        except RowbeamError as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        summary = new_summary(plan)
        identity.suspended = True
        unwatch = _watch_progress(plan, context)
        try:
            for done, total, text in iter_export(plan, summary):
                print(f"rowbeam: [{done}/{total}] {text}")
        finally:
            unwatch()
            identity.suspended = False
        self._finish(context, summary)
        return {"FINISHED"}

    def invoke(self, context, event):
        try:
            plan = plan_export(export_request(context))
        except RowbeamError as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        self._summary = new_summary(plan)
        self._unwatch = _watch_progress(plan, context)
        self._steps = iter_export(plan, self._summary)
        identity.suspended = True
        state = _state(context)
        state.running, state.progress, state.message = True, 0.0, f"{len(plan.jobs)} folder(s) to write"
        wm = context.window_manager
        wm.progress_begin(0.0, 1.0)
        self._timer = wm.event_timer_add(0.05, window=context.window)
        wm.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        if event.type == "ESC":
            self._steps.close()                      # staging discarded, scene restored
            self._finish(context, self._summary)
            self.report({"WARNING"}, "rowbeam export cancelled; published events are complete")
            return {"CANCELLED"}
        if event.type != "TIMER":
            return {"PASS_THROUGH"}
        try:
            done, total, text = next(self._steps)
        except StopIteration:
            self._finish(context, self._summary)
            return {"FINISHED"}
        except RowbeamError as exc:
            self._finish(context, self._summary)
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        state = _state(context)
        state.progress, state.message = done / max(total, 1), text
        context.window_manager.progress_update(state.progress)
        for area in context.screen.areas if context.screen else []:
            area.tag_redraw()
        return {"RUNNING_MODAL"}

    def _finish(self, context, summary):
        identity.suspended = False
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        wm = context.window_manager
        if self._timer is not None:
            wm.event_timer_remove(self._timer)
            self._timer = None
            wm.progress_end()
        state = _state(context)
        state.running = False
        state.message = (f"{'cancelled: ' if summary['cancelled'] else ''}published {len(summary['published'])}, "
                         f"quarantined {len(summary['quarantined'])}, skipped {len(summary['skipped'])}")
        self.report({"INFO"}, f"rowbeam: {state.message} -> {summary['out']}")


class ROWBEAM_OT_check(bpy.types.Operator):
    """Check the output bundle against its contracts and show the result"""
    bl_idname = "rowbeam.check"
    bl_label = "Check Bundle"

    def execute(self, context):
        out = Path(bpy.path.abspath(_settings(context).output_dir))
        state = _state(context)
        try:
            report = check_bundle(out)
        except RowbeamError as exc:
            state.check_status, state.check_lines, state.report_path = "unusable", str(exc), ""
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        path = out / "qa_report.json"
        atomic_write_json(path, report)
        lines = summary_lines(report)
        state.check_status, state.check_lines, state.report_path = report["status"], "\n".join(lines), str(path)
        self.report({"INFO"} if report["status"] == "pass" else {"WARNING"}, lines[0])
        return {"FINISHED"}


class ROWBEAM_OT_report(bpy.types.Operator):
    """Write the visual QA report of the output bundle (<output>_report/, beside it) and open it in the browser"""
    bl_idname = "rowbeam.report"
    bl_label = "Visual QA Report"

    open_browser: BoolProperty(default=True, options={"SKIP_SAVE"})

    def execute(self, context):
        from rowbeam.report.build import build_report

        out = Path(bpy.path.abspath(_settings(context).output_dir))
        target = out.parent / f"{out.name}_report"
        state = _state(context)
        try:
            doc = build_report(out, target)
        except RowbeamError as exc:
            state.report_html = ""
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        items = [it for b in doc["bundles"] for it in b["items"]]
        failed = [it for it in items if it["qa_status"] == "fail"]
        held = [q for b in doc["bundles"] for q in b["quarantine"]]
        lines = [f"report: {doc['status'].upper()} — {len(items)} folder(s), {len(failed)} failed QA, "
                 f"{len(held)} quarantined"]
        lines += [f"  FAIL {it['folder']}: {c['check']}: {c['message']}" for it in failed for c in it["failed_checks"][:2]]
        lines += [f"  QUARANTINED {q['folder']}: {q['reasons'][0]}" for q in held]
        state.check_status, state.check_lines = doc["status"], "\n".join(lines)
        state.report_html = str(target / "index.html")
        if self.open_browser:
            bpy.ops.wm.url_open(url=(target / "index.html").as_uri())
        self.report({"INFO"} if doc["status"] == "pass" else {"WARNING"}, f"rowbeam: {lines[0]} -> {state.report_html}")
        return {"FINISHED"}


def dataset_spec(context, spec_path) -> dict:
    """A rowbeam/dataset@1 spec for the open, saved .blend: one scenario (its stored rig, the panel's scenario,
    lineage group, split, sensors and event range), the explicit split rule; .blend path relative to the spec."""
    import os

    from rowbeam.model.sample_identity import token_from_name

    s = _settings(context)
    blend = bpy.data.filepath
    if not blend:
        raise RowbeamError("save the .blend first: the dataset spec names its file")
    scenario = s.scenario or token_from_name(Path(blend).stem)
    entry = {"blend": os.path.relpath(blend, Path(spec_path).resolve().parent), "scenario": scenario,
             "lineage_group": s.lineage_group or scenario, "split": s.split}
    sensors = [x for x in s.sensor_filter.split(",") if x]
    if sensors:
        entry["sensors"] = sensors
    entry["events"] = {"first": s.first_event, **({"count": s.event_count} if s.event_count else {})}
    return {"schema": "rowbeam/dataset@1", "name": scenario, "scenarios": [entry], "split": {"rule": "explicit"}}


class ROWBEAM_OT_dataset_spec(bpy.types.Operator, ExportHelper):
    """Write a dataset spec (rowbeam/dataset@1) for this .blend: scenario, lineage group, split, sensors, events"""
    bl_idname = "rowbeam.dataset_spec"
    bl_label = "Write Dataset Spec"
    filename_ext = ".json"
    filter_glob: StringProperty(default="*.json", options={"HIDDEN"})

    def execute(self, context):
        from rowbeam.bundle.schema import schema_errors

        try:
            doc = dataset_spec(context, self.filepath)
            errors = schema_errors(doc, "rowbeam/dataset@1")
            if errors:
                raise RowbeamError(f"dataset spec: {errors[0]}")
            atomic_write_json(self.filepath, doc)
        except (OSError, RowbeamError) as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        return {"FINISHED"}


CLASSES = (ROWBEAM_OT_sensor_add, ROWBEAM_OT_sensor_remove, ROWBEAM_OT_sensor_move, ROWBEAM_OT_camera_preset,
           ROWBEAM_OT_rig_import, ROWBEAM_OT_rig_export, ROWBEAM_OT_set_class, ROWBEAM_OT_assign_ids,
           ROWBEAM_OT_export, ROWBEAM_OT_check, ROWBEAM_OT_report, ROWBEAM_OT_dataset_spec)
