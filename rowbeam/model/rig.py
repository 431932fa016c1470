"""Rig files (`rowbeam/rig@1`): parse, validate, fill documented defaults.

A rig lists sensors bound to Blender objects with their timing. The same document is stored
in a .blend (scene property `rowbeam_rig`) by the add-on.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import load_json
from rowbeam.model.sensor_clock import IDEAL, Timebase, parse_timebase
from rowbeam.model.surface_policy import parse_surface_policy
from rowbeam.sensors import sensor_type
from rowbeam.bundle.schema import MAX_USER_JSON_BYTES, loads_user_json, schema_errors, validator


@dataclass(frozen=True)
class Rig:
    sensors: tuple
    document: dict = field(repr=False)
    source: str = "<rig>"
    ontology: str | None = None
    lineage: dict | None = None
    state_log: dict | None = None      # {ego_object, ego_rate_hz, objects_rate_hz} (defaults filled), or None
    timebases: dict = field(default_factory=dict, repr=False)   # {sensor id: Timebase} of sensors declaring one

    def timebase(self, sensor_id: str) -> Timebase:
        """The sensor's clock and delivery (rig `clock`, `delivery`; rowbeam.model.sensor_clock), ideal by default."""
        return self.timebases.get(sensor_id, IDEAL)

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
    timebases = {raw["id"]: parse_timebase(raw) for raw in document["sensors"] if {"clock", "delivery"} & raw.keys()}
    state_log = None
    if "state_log" in document:
        props = validator("rowbeam/rig@1").schema["properties"]["state_log"]["properties"]
        state_log = {**{k: v["default"] for k, v in props.items() if "default" in v}, **document["state_log"]}
    return Rig(tuple(sensors), document, source, document.get("ontology"), document.get("lineage"), state_log,
               timebases)


def _parse_sensor(raw: dict, where: str):
    """The sensor spec of a schema-valid rig entry, by its type's parser (defaults from the rig schema), with its
    surface policy (rowbeam.model.surface_policy; every sensor type has one). Its `clock` and `delivery` are every
    type's too (Rig.timebase)."""
    policy = parse_surface_policy(raw.get("surface_policy"), where)
    if policy.layers and "layer_opacity" not in sensor_type(raw["type"]).modalities:
        raise RowbeamError(f"{where}.surface_policy.layers: a {raw['type']} writes no surface-layer stack "
                           "(camera only); leave it out or 0")
    fields = {k: v for k, v in raw.items() if k not in ("surface_policy", "clock", "delivery")}
    return replace(sensor_type(raw["type"]).parse(fields, _schema_defaults(raw["type"]), where), surface_policy=policy)


def parse_rig_text(text, source: str) -> Rig:
    """A rig from JSON text (str or bytes) of at most MAX_USER_JSON_BYTES, finite numbers only."""
    size = len(text.encode() if isinstance(text, str) else text)
    if size > MAX_USER_JSON_BYTES:
        raise RowbeamError(f"{source}: rig is {size} bytes; at most {MAX_USER_JSON_BYTES} are allowed")
    return parse_rig(loads_user_json(text, source, "rig"), source)


def load_rig(path) -> Rig:
    """Read a rig file: a regular file (a FIFO is never opened) of at most MAX_USER_JSON_BYTES, finite numbers."""
    return parse_rig(load_json(path, "rig", MAX_USER_JSON_BYTES), str(path))
