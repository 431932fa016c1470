"""Rig files (`rowbeam/rig@1`): parse, validate, fill documented defaults.

A rig lists sensors bound to Blender objects with their timing. The same document is stored
in a .blend (scene property `rowbeam_rig`) by the add-on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import load_json
from rowbeam.model.lens import LensSpec, make_lens, parse_lens_spec
from rowbeam.sensors.lidar import parse_lidar_sensor
from rowbeam.sensors.radar import parse_radar_sensor
from rowbeam.bundle.schema import MAX_USER_JSON_BYTES, loads_user_json, schema_errors, validator
from rowbeam.model.timing import MIN_FIRING_PERIOD_NS, NS_PER_S, RollingShutterTiming, exact, periodic_event_start_ns


@dataclass(frozen=True)
class CameraSensor:
    """A rolling-shutter camera: events at first_event_ns + k/rate_hz (ns on the scene clock)."""

    id: str
    object: str
    rate_hz: float
    first_event_ns: int
    readout_ns: int
    exposure_ns: int
    readout_direction: str
    image_size_px: tuple[int, int] | None = None
    rgb_samples: int = 64
    motion_steps: int = 7
    verify_rows: int = 3
    object_labels: bool = False
    lens: LensSpec = LensSpec()
    type: str = "rolling_shutter_camera"

    def event_start_ns(self, index: int) -> int:
        return periodic_event_start_ns(self.first_event_ns, self.rate_hz, index)

    def timing(self, index: int, rows: int) -> RollingShutterTiming:
        return RollingShutterTiming(self.event_start_ns(index), self.readout_ns, self.exposure_ns,
                                    rows, self.readout_direction)

    def event_duration_ns(self) -> int:
        return self.readout_ns + self.exposure_ns


@dataclass(frozen=True)
class Rig:
    sensors: tuple
    document: dict = field(repr=False)
    source: str = "<rig>"
    ontology: str | None = None
    lineage: dict | None = None
    state_log: dict | None = None      # {ego_object, ego_rate_hz, objects_rate_hz} (defaults filled), or None

    def sensor(self, sensor_id: str):
        for s in self.sensors:
            if s.id == sensor_id:
                return s
        raise RowbeamError(f"{self.source}: sensor id {sensor_id!r} is not in the rig "
                           f"(known: {', '.join(s.id for s in self.sensors)})")


def _schema_defaults(sensor_type: str) -> dict:
    props = validator("rowbeam/rig@1").schema["$defs"][sensor_type]["properties"]
    return {k: v["default"] for k, v in props.items() if "default" in v}


def parse_rig(document, source: str = "<rig>") -> Rig:
    """Validate a rig document; raise RowbeamError naming the file and the first bad field."""
    if not isinstance(document, dict):
        raise RowbeamError(f"{source}: a rig must be a JSON object")
    errors = schema_errors(document, "rowbeam/rig@1")
    if errors:
        raise RowbeamError(f"{source}: invalid rig: {errors[0]}")
    sensors = []
    seen = set()
    for i, raw in enumerate(document["sensors"]):
        if raw["id"] in seen:
            raise RowbeamError(f"{source}: sensors[{i}].id: duplicate sensor id {raw['id']!r}")
        seen.add(raw["id"])
        sensors.append(_parse_sensor(raw, f"{source}: sensors[{i}]"))
    state_log = None
    if "state_log" in document:
        props = validator("rowbeam/rig@1").schema["properties"]["state_log"]["properties"]
        state_log = {**{k: v["default"] for k, v in props.items() if "default" in v}, **document["state_log"]}
    return Rig(tuple(sensors), document, source, document.get("ontology"), document.get("lineage"), state_log)


def _parse_sensor(raw: dict, where: str):
    if raw["type"] == "rolling_shutter_camera":
        values = {**_schema_defaults("rolling_shutter_camera"), **raw}
        if values.get("image_size_px") is not None:
            values["image_size_px"] = tuple(values["image_size_px"])
        period = Fraction(NS_PER_S) / exact(values["rate_hz"])
        for key in ("readout_ns", "exposure_ns"):      # a row cannot expose or read out longer than a frame
            if values[key] > period:
                raise RowbeamError(f"{where}.{key}: {values[key]} ns is longer than the frame period "
                                   f"{float(period):.0f} ns (1/rate_hz)")
        values["lens"] = parse_lens_spec(values.get("lens"), f"{where}.lens")
        if values["lens"].K is not None and values.get("image_size_px"):     # else checked at export (K, size known)
            make_lens(values["lens"], None, *values["image_size_px"], where=f"{where}.lens")
        return CameraSensor(**values)
    if raw["type"] == "radar":
        return parse_radar_sensor(raw, _schema_defaults("radar"), where)
    sensor = parse_lidar_sensor(raw, _schema_defaults("spinning_lidar"), where)
    if sensor.timing(0).firing_period_ns < MIN_FIRING_PERIOD_NS:
        raise RowbeamError(f"{where}.azimuth_steps: {sensor.azimuth_steps} firings per sweep at "
                           f"{sensor.rotation_hz} Hz fire more than once per ns")
    return sensor


def parse_rig_text(text, source: str) -> Rig:
    """A rig from JSON text (str or bytes) of at most MAX_USER_JSON_BYTES, finite numbers only."""
    size = len(text.encode() if isinstance(text, str) else text)
    if size > MAX_USER_JSON_BYTES:
        raise RowbeamError(f"{source}: rig is {size} bytes; at most {MAX_USER_JSON_BYTES} are allowed")
    return parse_rig(loads_user_json(text, source, "rig"), source)


def load_rig(path) -> Rig:
    """Read a rig file: a regular file (a FIFO is never opened) of at most MAX_USER_JSON_BYTES, finite numbers."""
    return parse_rig(load_json(path, "rig", MAX_USER_JSON_BYTES), str(path))
