"""The sensor-type registry: what each sensor type (`rig.sensors[].type`, `manifest.sensor.type`) is and can do.

A sensor type registers one `SensorType` from its own module in `rowbeam/sensors/` (spec, timing model, rig
parser). The layers above find its other parts by looking the type up here, never by testing its name:
- checks: `rowbeam.check.*` functions registered with `@sensor_hook(type, "check_event")` (and "check_rig");
- report page: a `rowbeam.report.*` function registered with `@sensor_hook(type, "report_page")`;
- exporter (needs Blender): registered from `rowbeam.blender.sensors.*` with `@sensor_hook(type, "export")`.
Each layer imports the modules the type names in `modules[layer]` (`load_layer`), so the no-Blender side
never imports the Blender side and no layer keeps a list of sensor types.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, Callable

from rowbeam.model.modalities import FLOW_MODALITIES
from rowbeam.util.errors import RowbeamError

LAYERS = ("check", "report", "export")       # the keys of SensorType.modules


@dataclass(frozen=True)
class SensorType:
    """One sensor type.

    name: the `type` string of rig entries and manifests. label / description: for user interfaces.
    parse(raw, defaults, where) -> sensor spec, from a schema-valid rig entry (defaults = the rig schema's).
    timing_from_manifest(manifest["event"]) -> the timing model (period_ns, span_ns(), times_span_ns()).
    start_key: the manifest `event` key holding the event's start time (ns on the scene clock).
    modalities: {name: ModalitySpec} the exporter writes and the checker reads (`rowbeam.model.modalities`).
    dims(manifest) -> named dimensions of an event (H, W / F, C, G, N / K, B, N).
    pose_arrays: payloads compared with the state log; poses(manifest, arrays) -> (times (M,) int64 ns,
    poses (M, 4, 4) in the sensor object's local axes, what) or None.
    has_rows: an image sensor with timed rows (lens, image size, object labels, rectification).
    timed_beams: range returns, each beam / chirp with its own time (points; associated with camera rows).
    modules: {layer: module} that registers this type's hooks for each layer in LAYERS.
    """

    name: str
    label: str
    description: str
    parse: Callable[[dict, dict, str], Any]
    timing_from_manifest: Callable[[dict], Any]
    start_key: str
    modalities: dict
    dims: Callable[[dict], dict]
    pose_arrays: tuple
    poses: Callable[[dict, dict], Any]
    has_rows: bool = False
    timed_beams: bool = False
    modules: dict = field(default_factory=dict)

    def hook(self, role: str):
        """The function this type registered for `role` (its layer loaded with load_layer); None if it has none."""
        return _HOOKS.get((self.name, role))

    def span_ns(self, manifest: dict) -> tuple[int, int]:
        """[start, end] (ns) of the event's acquisition interval, from its manifest's timing model."""
        return self.timing_from_manifest(manifest["event"]).span_ns()


_TYPES: dict[str, SensorType] = {}
_HOOKS: dict[tuple[str, str], Any] = {}
_LOADED: set[tuple[str, str]] = set()


def register(sensor_type: SensorType) -> SensorType:
    """Add a sensor type (once per name)."""
    if sensor_type.name in _TYPES:
        raise ValueError(f"sensor type {sensor_type.name!r} is registered twice")
    if set(sensor_type.modules) - set(LAYERS):
        raise ValueError(f"sensor type {sensor_type.name!r}: modules keys must be among {LAYERS}")
    _TYPES[sensor_type.name] = sensor_type
    return sensor_type


def sensor_hook(type_name: str, role: str):
    """Decorator: register `fn` as sensor type `type_name`'s function for `role` (e.g. "check_event")."""
    def decorate(fn):
        _HOOKS[(type_name, role)] = fn
        return fn
    return decorate


def sensor_type(name: str) -> SensorType:
    """The registered type `name`; RowbeamError naming the known types otherwise."""
    try:
        return _TYPES[name]
    except KeyError:
        raise RowbeamError(f"unknown sensor type {name!r} (known: {', '.join(_TYPES)})") from None


def find_sensor_type(name) -> SensorType | None:
    """The registered type `name`, or None."""
    return _TYPES.get(name)


def sensor_types() -> tuple[SensorType, ...]:
    """Every registered type, in registration order."""
    return tuple(_TYPES.values())


def type_of(manifest: dict) -> SensorType:
    """The sensor type of an event (or flow) manifest."""
    return sensor_type(manifest["sensor"]["type"])


def load_layer(layer: str) -> None:
    """Import every registered type's module for `layer` (which registers its hooks); called by that layer."""
    for t in sensor_types():
        if layer in t.modules and (t.name, layer) not in _LOADED:
            import_module(t.modules[layer])
            _LOADED.add((t.name, layer))


class ModalityTables(Mapping):
    """{sensor type name or "flow": {modality name: ModalitySpec}}, live over the registered types."""

    def __getitem__(self, kind: str) -> dict:
        if kind == "flow":
            return FLOW_MODALITIES
        return _TYPES[kind].modalities

    def __iter__(self):
        return iter([*_TYPES, "flow"])

    def __len__(self) -> int:
        return len(_TYPES) + 1


MODALITIES = ModalityTables()


def required(kind: str) -> list[str]:
    """Names of the modalities every event of `kind` (a sensor type name or "flow") must have."""
    return [n for n, m in MODALITIES[kind].items() if not m.optional]


def manifest_dims(manifest: dict) -> dict:
    """Named dimensions of an event or flow, from its manifest (a flow has its camera's)."""
    return type_of(manifest).dims(manifest)
