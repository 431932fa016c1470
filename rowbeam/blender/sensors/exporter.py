"""What a sensor type's exporter registers (its "export" hook, from its module in rowbeam/blender/sensors/)."""
from __future__ import annotations

from typing import Callable, NamedTuple


class Exporter(NamedTuple):
    """export(ctx, sensor, index[, write_early]) -> event output (arrays, dims, exposure_ns, ...);
    core(out, sensor, index) -> the manifest's sensor-specific part (rowbeam.blender.export.manifest);
    writes_early: export accepts write_early (payloads written on worker threads while it still renders)."""

    export: Callable
    core: Callable
    writes_early: bool = False
