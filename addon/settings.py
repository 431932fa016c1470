"""Scene-level rowbeam settings (saved in the .blend) and window-level run state (not saved)."""
from __future__ import annotations

import bpy
from bpy.props import (BoolProperty, CollectionProperty, EnumProperty, FloatProperty, IntProperty, PointerProperty,
                       StringProperty)

from rowbeam.blender.export.run import LINEAGE_PROPERTY, SCENARIO_PROPERTY

from .rig_props import RowbeamSensor, sync_rig


def _write_lineage(self, context):
    scene = context.scene
    scene[SCENARIO_PROPERTY] = self.scenario
    scene[LINEAGE_PROPERTY] = self.lineage_group


class RowbeamSceneSettings(bpy.types.PropertyGroup):
    sensors: CollectionProperty(type=RowbeamSensor)
    active_sensor: IntProperty(name="Active sensor", default=0)
    ontology_path: StringProperty(name="Ontology", subtype="FILE_PATH", default="", update=sync_rig,
                                  description="rowbeam/ontology@1 file; empty = the bundled street ontology")
    state_log_ego: PointerProperty(type=bpy.types.Object, name="State log ego", update=sync_rig,
                                   description="Rig root (ego body) of the bundle's state log; empty = no state log")
    state_log_ego_rate_hz: FloatProperty(name="Ego rate (Hz)", default=200.0, min=1e-3, max=1e6, update=sync_rig)
    state_log_objects_rate_hz: FloatProperty(name="Objects rate (Hz)", default=200.0, min=1e-3, max=1e6,
                                             update=sync_rig)
    scenario: StringProperty(name="Scenario", default="", update=_write_lineage)
    lineage_group: StringProperty(name="Lineage group", default="", update=_write_lineage,
                                  description="Everything sharing causal ancestry: keep it in one split")
    split: StringProperty(name="Split", default="train",
                          description="Dataset split of this scenario's lineage group (written into the dataset spec)")
    auto_ids: BoolProperty(name="Assign ids automatically", default=True,
                           description="Give new and duplicated objects their own stable 64-bit id")
    output_dir: StringProperty(name="Output", subtype="DIR_PATH", default="//rowbeam_bundle")
    sensor_filter: StringProperty(name="Sensors", default="", description="Comma-separated ids; empty = all")
    first_event: IntProperty(name="First event", default=0, min=0)
    event_count: IntProperty(name="Events", default=1, min=0,
                             description="Events per sensor; 0 = every event inside the frame range")
    device: EnumProperty(items=[("auto", "Auto", "GPU when Cycles finds one"), ("cpu", "CPU", ""), ("gpu", "GPU", "")],
                         name="Device")
    flow: BoolProperty(name="Flow", default=False, description="Flow between consecutive camera events")


class RowbeamRunState(bpy.types.PropertyGroup):
    """Progress and the last check, per window manager (not saved in the .blend)."""
    running: BoolProperty(default=False)
    progress: FloatProperty(default=0.0, min=0.0, max=1.0, subtype="FACTOR")
    message: StringProperty(default="")
    check_status: StringProperty(default="")
    check_lines: StringProperty(default="")
    report_path: StringProperty(default="")
    report_html: StringProperty(default="")          # index.html of the last visual QA report
