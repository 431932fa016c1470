"""The rowbeam panels in Properties > Scene: Sensors, Labels, Export, Check."""
from __future__ import annotations

import bpy

from rowbeam.util.errors import RowbeamError
from rowbeam.model.rig import parse_rig
from rowbeam.sensors.camera import CAMERA
from rowbeam.sensors.radar import RADAR
from rowbeam.blender.objects.object_table import CLASS_PROPERTY, ID_PROPERTY

from .rig_props import rig_document


class ROWBEAM_UL_sensors(bpy.types.UIList):
    def draw_item(self, context, layout, data, item, icon, active_data, active_propname, index):
        icon = {CAMERA: "OUTLINER_OB_CAMERA", RADAR: "FORCE_WIND"}.get(item.sensor_type, "LIGHT_SPOT")
        row = layout.row(align=True)
        row.label(text=item.sensor_id, icon=icon)
        row.label(text=item.target.name if item.target else "(no object)")


class SceneButtons:
    bl_space_type = "PROPERTIES"
    bl_region_type = "WINDOW"
    bl_context = "scene"


class ROWBEAM_PT_main(SceneButtons, bpy.types.Panel):
    bl_label = "rowbeam"

    def draw(self, context):
        self.layout.label(text="Authoritative sensor ground truth", icon="OUTLINER_DATA_LIGHTPROBE")


class ROWBEAM_PT_sensors(SceneButtons, bpy.types.Panel):
    bl_label = "Sensors"
    bl_parent_id = "ROWBEAM_PT_main"

    def draw(self, context):
        layout = self.layout
        settings = context.scene.rowbeam
        row = layout.row()
        row.template_list("ROWBEAM_UL_sensors", "", settings, "sensors", settings, "active_sensor", rows=3)
        col = row.column(align=True)
        col.operator_menu_enum("rowbeam.sensor_add", "sensor_type", text="", icon="ADD")
        col.operator("rowbeam.sensor_remove", text="", icon="REMOVE")
        col.separator()
        col.operator("rowbeam.sensor_move", text="", icon="TRIA_UP").direction = "UP"
        col.operator("rowbeam.sensor_move", text="", icon="TRIA_DOWN").direction = "DOWN"
        row = layout.row(align=True)
        row.operator("rowbeam.rig_import", icon="IMPORT")
        row.operator("rowbeam.rig_export", icon="EXPORT")
        if 0 <= settings.active_sensor < len(settings.sensors):
            self.draw_sensor(layout, settings.sensors[settings.active_sensor])
        col = layout.column()
        col.prop(settings, "state_log_ego")
        if settings.state_log_ego is not None:
            col.prop(settings, "state_log_ego_rate_hz")
            col.prop(settings, "state_log_objects_rate_hz")
        try:
            parse_rig(rig_document(context.scene), "rig")
            layout.label(text="Rig is valid (stored in the .blend)", icon="CHECKMARK")
        except RowbeamError as exc:
            layout.label(text=str(exc), icon="ERROR")

    @staticmethod
    def draw_sensor(layout, s):
        layout.use_property_split = True
        col = layout.column()
        col.prop(s, "sensor_type")
        col.prop(s, "sensor_id")
        col.prop(s, "target")
        if s.sensor_type == CAMERA:
            col.operator_menu_enum("rowbeam.camera_preset", "preset", text="Timing Preset")
            for name in ("rate_hz", "first_event_ns", "readout_ns", "exposure_ns", "readout_direction",
                         "override_size"):
                col.prop(s, name)
            if s.override_size:
                col.prop(s, "width")
                col.prop(s, "height")
            for name in ("rgb_samples", "verify_rows", "motion_steps", "lens_model"):
                col.prop(s, name)
            if s.lens_model != "pinhole":
                col.prop(s, "lens_D")
            col.prop(s, "lens_given_K")
            if s.lens_given_K:
                col.prop(s, "lens_K")
            if s.lens_model == "opencv_fisheye":
                col.prop(s, "lens_fov_deg")
        elif s.sensor_type == RADAR:
            for name in ("radar_preset", "rate_hz", "first_event_ns", "chirps", "chirp_period_ns", "chirp_offset_ns",
                         "beam_table"):
                col.prop(s, name)
            if not s.beam_table.strip():
                for name in ("azimuth_fov_min", "azimuth_fov_max", "azimuth_beams", "elevation_fov_min",
                             "elevation_fov_max", "elevation_beams"):
                    col.prop(s, name)
            for name in ("min_range_m", "max_range_m", "max_radial_velocity_mps", "verify_chirps", "motion_steps"):
                col.prop(s, name)
        else:
            for name in ("rotation_hz", "azimuth_steps", "preset"):
                col.prop(s, name)
            if s.preset == "NONE":
                col.prop(s, "elevations")
            for name in ("first_sweep_ns", "min_range_m", "max_range_m", "spin_direction", "start_azimuth_deg",
                         "azimuth_offsets", "time_offsets", "verify_firings", "motion_steps"):
                col.prop(s, name)


class ROWBEAM_PT_labels(SceneButtons, bpy.types.Panel):
    bl_label = "Labels"
    bl_parent_id = "ROWBEAM_PT_main"

    def draw(self, context):
        layout = self.layout
        layout.use_property_split = True
        settings = context.scene.rowbeam
        col = layout.column()
        col.prop(settings, "scenario")
        col.prop(settings, "lineage_group")
        col.prop(settings, "ontology_path")
        col.prop(settings, "auto_ids")
        col.operator("rowbeam.assign_ids", icon="COPY_ID")
        obj = context.active_object
        if obj is None:
            return
        box = layout.box()
        box.label(text=obj.name, icon="OBJECT_DATA")
        box.label(text=f"Id: {obj.get(ID_PROPERTY, 'none')}")
        box.label(text=f"Class tag: {obj.get(CLASS_PROPERTY, 'none (void)')}")
        box.operator("rowbeam.set_class", icon="BOOKMARKS")


class ROWBEAM_PT_export(SceneButtons, bpy.types.Panel):
    bl_label = "Export"
    bl_parent_id = "ROWBEAM_PT_main"

    def draw(self, context):
        layout = self.layout
        layout.use_property_split = True
        settings, state = context.scene.rowbeam, context.window_manager.rowbeam_state
        col = layout.column()
        for name in ("output_dir", "sensor_filter", "first_event", "event_count", "device", "flow"):
            col.prop(settings, name)
        col.prop(settings, "split")
        if state.running:
            layout.progress(factor=state.progress, type="BAR", text=state.message or "exporting")
            layout.label(text="Esc cancels after the current event", icon="INFO")
        else:
            layout.operator("rowbeam.export", icon="RENDER_ANIMATION")
            layout.operator("rowbeam.dataset_spec", icon="FILE_NEW")
            if state.message:
                layout.label(text=state.message)


class ROWBEAM_PT_check(SceneButtons, bpy.types.Panel):
    bl_label = "Check"
    bl_parent_id = "ROWBEAM_PT_main"

    def draw(self, context):
        layout = self.layout
        state = context.window_manager.rowbeam_state
        layout.operator("rowbeam.check", icon="CHECKMARK")
        layout.operator("rowbeam.report", icon="URL")
        if state.check_status:
            icon = "CHECKMARK" if state.check_status == "pass" else "ERROR"
            col = layout.column(align=True)
            for i, line in enumerate(state.check_lines.splitlines()[:12]):
                col.label(text=line.strip(), icon=icon if i == 0 else "NONE")
            if state.report_path:
                layout.label(text=f"Report: {state.report_path}", icon="FILE_TEXT")
        if state.report_html:
            layout.label(text=f"Visual report: {state.report_html}", icon="URL")


CLASSES = (ROWBEAM_UL_sensors, ROWBEAM_PT_main, ROWBEAM_PT_sensors, ROWBEAM_PT_labels, ROWBEAM_PT_export,
           ROWBEAM_PT_check)
