"""Sensor settings as Blender properties, and their exact conversion to and from `rowbeam/rig@1`.

The rig document stored on the scene (scene["rowbeam_rig"], JSON) is what the exporter reads; the
properties are its editor. Every edit rewrites the document. Times that can exceed 32-bit
integers (first event / first sweep) are edited as decimal ns strings so no value is rounded.
"""
from __future__ import annotations

import json

import bpy
from bpy.app.handlers import persistent
from bpy.props import (BoolProperty, EnumProperty, FloatProperty, IntProperty, PointerProperty, StringProperty)

from rowbeam.util.errors import RowbeamError
from rowbeam.sensors import sensor_types
from rowbeam.sensors.camera import CAMERA
from rowbeam.sensors.radar import PRESETS as RADAR_PRESET_VALUES
from rowbeam.sensors.radar import RADAR
from rowbeam.model.rig import parse_rig_text
from rowbeam.model.timing import MAX_IMAGE_SIDE_PX, MAX_RATE_HZ, MIN_IMAGE_SIDE_PX, MIN_RATE_HZ

RIG_PROPERTY = "rowbeam_rig"
SENSOR_TYPES = [(t.name, t.label, t.description) for t in sensor_types()]     # the registered sensor types
RADAR_PRESETS = [("NONE", "Custom", "Chirp train and beam grid typed below")] + [
    (name, name.replace("_", " ").capitalize(), f"{v['chirps']} chirps x {v['azimuth_beams'] * v['elevation_beams']} "
     f"beams, azimuth {v['azimuth_fov_deg']} deg") for name, v in RADAR_PRESET_VALUES.items()]
LENS_MODELS = [("pinhole", "Pinhole", "No distortion (the Blender camera, or the K typed below)"),
               ("opencv", "OpenCV (Brown-Conrady)", "k1, k2, p1, p2[, k3[, k4, k5, k6]] as cv2.projectPoints"),
               ("opencv_fisheye", "OpenCV fisheye", "Kannala-Brandt k1, k2, k3, k4 as cv2.fisheye")]
LIDAR_PRESETS = [("NONE", "Custom table", "Channel elevations typed below"),
                 ("uniform_32", "Uniform 32", "32 channels from -25 to +15 deg"),
                 ("uniform_64", "Uniform 64", "64 channels from -25 to +15 deg"),
                 ("uniform_128", "Uniform 128", "128 channels from -25 to +15 deg"),
                 ("vlp16", "VLP-16-like", "16 lasers 2 deg apart, fired 2.304 us apart")]


def sync_rig(self=None, context=None):
    """Rewrite the scene's rig document from the sensor properties."""
    scene = self.id_data if isinstance(getattr(self, "id_data", None), bpy.types.Scene) else (context or bpy.context).scene
    scene[RIG_PROPERTY] = json.dumps(rig_document(scene), sort_keys=True)


def apply_radar_preset(self, context=None):
    """Copy a radar preset's chirp train and beam grid into the editable fields (then sync the rig)."""
    values = RADAR_PRESET_VALUES.get(self.radar_preset)
    if values:
        self.chirps, self.chirp_period_ns = values["chirps"], values["chirp_period_ns"]
        self.azimuth_fov_min, self.azimuth_fov_max = values["azimuth_fov_deg"]
        self.elevation_fov_min, self.elevation_fov_max = values["elevation_fov_deg"]
        self.azimuth_beams, self.elevation_beams = values["azimuth_beams"], values["elevation_beams"]
        self.beam_table = ""
    sync_rig(self, context)


def _ns_text_ok(text: str) -> bool:
    return text.strip().isdigit()


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.replace(";", ",").split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.replace(";", ",").split(",") if x.strip()]


class RowbeamSensor(bpy.types.PropertyGroup):
    sensor_type: EnumProperty(items=SENSOR_TYPES, name="Type", update=sync_rig)
    sensor_id: StringProperty(name="Id", default="sensor", update=sync_rig,
                              description="Sensor id in manifests and folder names (letters, digits, _ . -)")
    target: PointerProperty(type=bpy.types.Object, name="Object", update=sync_rig,
                            description="Camera object, or the LiDAR mount (its local axes: x forward, y left, z up)")
    # rolling-shutter camera
    rate_hz: FloatProperty(name="Rate (Hz)", default=30.0, min=MIN_RATE_HZ, max=MAX_RATE_HZ, update=sync_rig)
    first_event_ns: StringProperty(name="First event (ns)", default="0", update=sync_rig)
    readout_ns: IntProperty(name="Readout (ns)", default=12_000_000, min=0, update=sync_rig)
    exposure_ns: IntProperty(name="Exposure (ns)", default=4_000_000, min=0, update=sync_rig)
    readout_direction: EnumProperty(items=[("top_to_bottom", "Top to bottom", ""), ("bottom_to_top", "Bottom to top", "")],
                                    name="Readout", update=sync_rig)
    override_size: BoolProperty(name="Own image size", default=False, update=sync_rig)
    width: IntProperty(name="Width", default=1280, min=MIN_IMAGE_SIDE_PX, max=MAX_IMAGE_SIDE_PX, update=sync_rig)
    height: IntProperty(name="Height", default=720, min=MIN_IMAGE_SIDE_PX, max=MAX_IMAGE_SIDE_PX, update=sync_rig)
    rgb_samples: IntProperty(name="RGB samples", default=64, min=0, update=sync_rig)
    verify_rows: IntProperty(name="Verified rows", default=3, min=0, update=sync_rig)
    lens_model: EnumProperty(items=LENS_MODELS, name="Lens", update=sync_rig,
                             description="Lens model in OpenCV conventions; distorted models render through an "
                             "OSL camera (Blender >= 4.5)")
    lens_D: StringProperty(name="Distortion D", default="", update=sync_rig,
                           description="Coefficients in OpenCV order, comma separated")
    lens_given_K: BoolProperty(name="Own K", default=False, update=sync_rig,
                               description="Use the K typed below instead of the Blender camera's")
    lens_K: StringProperty(name="fx, fy, cx, cy (px)", default="", update=sync_rig,
                           description="Pinhole intrinsics in the OpenCV pixel convention (pixel centres at integers)")
    lens_fov_deg: FloatProperty(name="Fisheye FOV (deg)", default=0.0, min=0.0, update=sync_rig,
                                description="Fisheye only: the field of view the lens must reach (0 = not declared)")
    # spinning LiDAR
    rotation_hz: FloatProperty(name="Rotation (Hz)", default=10.0, min=MIN_RATE_HZ, max=MAX_RATE_HZ, update=sync_rig)
    azimuth_steps: IntProperty(name="Firings per sweep", default=2048, min=1, update=sync_rig)
    preset: EnumProperty(items=LIDAR_PRESETS, name="Channels", default="uniform_64", update=sync_rig)
    elevations: StringProperty(name="Elevations (deg)", default="-15, -5, 5, 15", update=sync_rig,
                               description="One elevation per channel, comma separated")
    first_sweep_ns: StringProperty(name="First sweep (ns)", default="0", update=sync_rig)
    min_range_m: FloatProperty(name="Min range (m)", default=0.3, min=0.0, update=sync_rig)
    max_range_m: FloatProperty(name="Max range (m)", default=120.0, min=1e-3, update=sync_rig)
    spin_direction: EnumProperty(items=[("ccw", "Counter-clockwise", ""), ("cw", "Clockwise", "")],
                                 name="Spin", update=sync_rig)
    start_azimuth_deg: FloatProperty(name="Start azimuth (deg)", default=0.0, update=sync_rig)
    azimuth_offsets: StringProperty(name="Azimuth offsets (deg)", default="", update=sync_rig,
                                    description="Per channel, comma separated; empty = 0")
    time_offsets: StringProperty(name="Time offsets (ns)", default="", update=sync_rig,
                                 description="Per channel, comma separated; empty = 0")
    verify_firings: IntProperty(name="Verified firings", default=8, min=0, update=sync_rig)
    # radar (rate_hz, first_event_ns = first_frame_ns, min/max range and motion_steps are shared)
    radar_preset: EnumProperty(items=RADAR_PRESETS, name="Preset", default="NONE", update=apply_radar_preset)
    chirps: IntProperty(name="Chirps per frame", default=128, min=1, max=65536, update=sync_rig)
    chirp_period_ns: IntProperty(name="Chirp period (ns)", default=50_000, min=1, update=sync_rig)
    chirp_offset_ns: IntProperty(name="First chirp offset (ns)", default=0, min=0, update=sync_rig)
    azimuth_fov_min: FloatProperty(name="Azimuth from (deg)", default=-45.0, min=-180, max=180, update=sync_rig)
    azimuth_fov_max: FloatProperty(name="Azimuth to (deg)", default=45.0, min=-180, max=180, update=sync_rig)
    elevation_fov_min: FloatProperty(name="Elevation from (deg)", default=-5.0, min=-90, max=90, update=sync_rig)
    elevation_fov_max: FloatProperty(name="Elevation to (deg)", default=5.0, min=-90, max=90, update=sync_rig)
    azimuth_beams: IntProperty(name="Azimuth beams", default=32, min=1, max=16384, update=sync_rig)
    elevation_beams: IntProperty(name="Elevation beams", default=2, min=1, max=16384, update=sync_rig)
    beam_table: StringProperty(name="Beam table (deg)", default="", update=sync_rig,
                               description="Explicit beams 'azimuth elevation; ...' instead of the grid; empty = grid")
    max_radial_velocity_mps: FloatProperty(name="Max |radial velocity| (m/s)", default=60.0, min=1e-3, update=sync_rig)
    verify_chirps: IntProperty(name="Verified chirps", default=4, min=0, update=sync_rig)
    # both
    motion_steps: IntProperty(name="Motion steps", default=7, min=1, max=7, update=sync_rig)


def sensor_document(s: RowbeamSensor) -> dict:
    """The rig entry of one sensor (values that do not parse are passed through for the schema to name)."""
    doc = {"id": s.sensor_id, "type": s.sensor_type, "object": s.target.name if s.target else "",
           "motion_steps": s.motion_steps}
    if s.sensor_type == CAMERA:
        doc.update(rate_hz=s.rate_hz, readout_ns=s.readout_ns, exposure_ns=s.exposure_ns,
                   readout_direction=s.readout_direction, rgb_samples=s.rgb_samples, verify_rows=s.verify_rows,
                   first_event_ns=int(s.first_event_ns) if _ns_text_ok(s.first_event_ns) else s.first_event_ns)
        if s.override_size:
            doc["image_size_px"] = [s.width, s.height]
        lens = lens_document(s)
        if lens:
            doc["lens"] = lens
        return doc
    if s.sensor_type == RADAR:
        return radar_document(s, doc)
    doc.update(rotation_hz=s.rotation_hz, azimuth_steps=s.azimuth_steps, min_range_m=s.min_range_m,
               max_range_m=s.max_range_m, spin_direction=s.spin_direction, start_azimuth_deg=s.start_azimuth_deg,
               verify_firings=s.verify_firings,
               first_sweep_ns=int(s.first_sweep_ns) if _ns_text_ok(s.first_sweep_ns) else s.first_sweep_ns)
    try:
        if s.preset == "NONE":
            doc["elevations_deg"] = _floats(s.elevations)
        else:
            doc["preset"] = s.preset
        if s.azimuth_offsets.strip():
            doc["azimuth_offsets_deg"] = _floats(s.azimuth_offsets)
        if s.time_offsets.strip():
            doc["time_offsets_ns"] = _ints(s.time_offsets)
    except ValueError:
        doc["elevations_deg"] = s.elevations           # let the schema report the bad text
    return doc


def radar_document(s: RowbeamSensor, doc: dict) -> dict:
    """A radar's rig entry: explicit chirp train and beam grid (or table) as edited."""
    doc.update(rate_hz=s.rate_hz, chirps=s.chirps, chirp_period_ns=s.chirp_period_ns, chirp_offset_ns=s.chirp_offset_ns,
               min_range_m=s.min_range_m, max_range_m=s.max_range_m, verify_chirps=s.verify_chirps,
               max_radial_velocity_mps=s.max_radial_velocity_mps,
               first_frame_ns=int(s.first_event_ns) if _ns_text_ok(s.first_event_ns) else s.first_event_ns)
    if s.beam_table.strip():
        try:
            doc["beams_deg"] = [_floats(b.replace(" ", ",")) for b in s.beam_table.split(";") if b.strip()]
        except ValueError:
            doc["beams_deg"] = s.beam_table             # let the schema report the bad text
    else:
        doc.update(azimuth_fov_deg=[s.azimuth_fov_min, s.azimuth_fov_max],
                   elevation_fov_deg=[s.elevation_fov_min, s.elevation_fov_max],
                   azimuth_beams=s.azimuth_beams, elevation_beams=s.elevation_beams)
    return doc


def lens_document(s: RowbeamSensor) -> dict | None:
    """The camera's rig `lens` (None: the plain Blender pinhole); text that does not parse is passed through."""
    if s.lens_model == "pinhole" and not s.lens_given_K:
        return None
    lens = {"model": s.lens_model}
    try:
        lens["D"] = _floats(s.lens_D)
    except ValueError:
        lens["D"] = s.lens_D                            # let the schema report the bad text
    if s.lens_given_K:
        try:
            fx, fy, cx, cy = _floats(s.lens_K)
            lens["K"] = [[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]]
        except ValueError:
            lens["K"] = s.lens_K
    if s.lens_model == "opencv_fisheye" and s.lens_fov_deg > 0:
        lens["fov_deg"] = s.lens_fov_deg
    return lens


def rig_document(scene) -> dict:
    settings = scene.rowbeam
    doc = {"schema": "rowbeam/rig@1", "sensors": [sensor_document(s) for s in settings.sensors]}
    if settings.ontology_path:
        doc["ontology"] = ontology_reference(settings.ontology_path)
    if settings.state_log_ego is not None:
        doc["state_log"] = {"ego_object": settings.state_log_ego.name, "ego_rate_hz": settings.state_log_ego_rate_hz,
                            "objects_rate_hz": settings.state_log_objects_rate_hz}
    return doc


def ontology_reference(path: str) -> str:
    """Ontology path as the exporter resolves it: relative to the .blend's folder when saved."""
    import os

    absolute = bpy.path.abspath(path)
    if bpy.data.filepath:
        return os.path.relpath(absolute, os.path.dirname(bpy.data.filepath)).replace(os.sep, "/")
    return absolute


def load_rig_document(scene, doc: dict) -> None:
    """Replace the scene's sensors with those of a (validated) rig document."""
    settings = scene.rowbeam
    settings.sensors.clear()
    for raw in doc.get("sensors", []):
        s = settings.sensors.add()
        s.sensor_type = raw["type"]
        s.sensor_id = raw["id"]
        s.target = scene.objects.get(raw["object"])
        s.motion_steps = raw.get("motion_steps", 7)
        if raw["type"] == CAMERA:
            s.rate_hz, s.readout_ns, s.exposure_ns = raw["rate_hz"], raw["readout_ns"], raw["exposure_ns"]
            s.first_event_ns = str(raw["first_event_ns"])
            s.readout_direction = raw["readout_direction"]
            s.rgb_samples, s.verify_rows = raw.get("rgb_samples", 64), raw.get("verify_rows", 3)
            if raw.get("image_size_px"):
                s.override_size, (s.width, s.height) = True, raw["image_size_px"]
            lens = raw.get("lens") or {"model": "pinhole"}
            s.lens_model = lens["model"]
            s.lens_D = ", ".join(repr(float(d)) for d in lens.get("D", []))
            s.lens_given_K = "K" in lens
            if "K" in lens:
                K = lens["K"]
                s.lens_K = ", ".join(repr(float(x)) for x in (K[0][0], K[1][1], K[0][2], K[1][2]))
            s.lens_fov_deg = lens.get("fov_deg", 0.0)
        elif raw["type"] == RADAR:
            _load_radar(s, raw)
        else:
            s.rotation_hz, s.azimuth_steps = raw["rotation_hz"], raw["azimuth_steps"]
            s.first_sweep_ns = str(raw["first_sweep_ns"])
            s.min_range_m, s.max_range_m = raw["min_range_m"], raw["max_range_m"]
            s.spin_direction = raw.get("spin_direction", "ccw")
            s.start_azimuth_deg = raw.get("start_azimuth_deg", 0.0)
            s.verify_firings = raw.get("verify_firings", 8)
            if "preset" in raw:
                s.preset = raw["preset"]
            else:
                s.preset, s.elevations = "NONE", ", ".join(repr(float(e)) for e in raw["elevations_deg"])
            s.azimuth_offsets = ", ".join(repr(float(e)) for e in raw.get("azimuth_offsets_deg", []))
            s.time_offsets = ", ".join(str(int(e)) for e in raw.get("time_offsets_ns", []))
    if doc.get("ontology"):
        settings.ontology_path = doc["ontology"] if doc["ontology"].startswith("/") else "//" + doc["ontology"]
    if doc.get("state_log"):
        settings.state_log_ego = scene.objects.get(doc["state_log"]["ego_object"])
        settings.state_log_ego_rate_hz = doc["state_log"].get("ego_rate_hz", 200)
        settings.state_log_objects_rate_hz = doc["state_log"].get("objects_rate_hz", 200)
    scene[RIG_PROPERTY] = json.dumps(rig_document(scene), sort_keys=True)


def _load_radar(s: RowbeamSensor, raw: dict) -> None:
    """Radar fields from a rig entry; a preset is resolved to its values (rowbeam.sensors.radar), so it stays editable."""
    values = {**RADAR_PRESET_VALUES.get(raw.get("preset"), {}), **raw}
    s.rate_hz, s.first_event_ns = raw["rate_hz"], str(raw["first_frame_ns"])
    s.chirps, s.chirp_period_ns = values["chirps"], values["chirp_period_ns"]
    s.chirp_offset_ns = values.get("chirp_offset_ns", 0)
    s.min_range_m, s.max_range_m = raw["min_range_m"], raw["max_range_m"]
    s.max_radial_velocity_mps, s.verify_chirps = raw["max_radial_velocity_mps"], raw.get("verify_chirps", 4)
    if "beams_deg" in values:
        s.beam_table = "; ".join(f"{float(a)!r} {float(e)!r}" for a, e in values["beams_deg"])
    else:
        s.azimuth_fov_min, s.azimuth_fov_max = values["azimuth_fov_deg"]
        s.elevation_fov_min, s.elevation_fov_max = values["elevation_fov_deg"]
        s.azimuth_beams, s.elevation_beams = values["azimuth_beams"], values["elevation_beams"]


def adopt_stored_rig(scene) -> None:
    """A .blend whose rig was stored without the add-on (a script, a farm tool) gets editable sensors,
    instead of the first edit overwriting the stored document with an empty rig."""
    text = scene.get(RIG_PROPERTY)
    if isinstance(text, str) and text and len(scene.rowbeam.sensors) == 0:
        try:
            doc = parse_rig_text(text, f"{scene.name}: stored rig").document
        except RowbeamError:
            return                      # an invalid stored rig is reported when an export reads it
        load_rig_document(scene, doc)


@persistent
def on_load(_filepath):
    for scene in bpy.data.scenes:
        adopt_stored_rig(scene)
