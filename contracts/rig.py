"""Rig files (`rowbeam/rig@1`): parse, validate, fill documented defaults.

A rig lists sensors bound to Blender objects with their timing. The same document is stored
in a .blend (scene property `rowbeam_rig`) by the add-on.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .errors import RowbeamError
from .lidar import parse_lidar_sensor
from .schema import schema_errors, validator
from .timing import RollingShutterTiming, periodic_event_start_ns


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
    return Rig(tuple(sensors), document, source, document.get("ontology"), document.get("lineage"))


def _parse_sensor(raw: dict, where: str):
    if raw["type"] == "rolling_shutter_camera":
        values = {**_schema_defaults("rolling_shutter_camera"), **raw}
        if values.get("image_size_px") is not None:
            values["image_size_px"] = tuple(values["image_size_px"])
        return CameraSensor(**values)
    return parse_lidar_sensor(raw, _schema_defaults("spinning_lidar"), where)


def load_rig(path) -> Rig:
    path = Path(path)
    if not path.is_file():
        raise RowbeamError(f"{path}: rig file does not exist")
    try:
        document = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RowbeamError(f"{path}: rig is not valid JSON ({exc})") from None
    return parse_rig(document, str(path))
