"""What a sensor type's exporter registers (its "export" hook, from its module in rowbeam/blender/sensors/)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np


class Exporter(NamedTuple):
    """export(ctx, sensor, index[, write_early]) -> event output (arrays, dims, exposure_ns, ...);
    core(out, sensor, index) -> the manifest's sensor-specific part (rowbeam.blender.export.manifest);
    writes_early: export accepts write_early (payloads written on worker threads while it still renders)."""

    export: Callable
    core: Callable
    writes_early: bool = False


@dataclass
class SensorEventOutput:
    """One exported event of a sensor that is not a camera (a LiDAR sweep, a radar frame, an IMU block): its sensor,
    timing model, arrays, layout dims, reference pose T_world_mount (4x4) and method record."""
    sensor: object
    timing: object
    arrays: dict
    dims: dict
    reference_pose: np.ndarray
    method: dict
    seconds: dict = field(default_factory=dict)
    exposure_ns: int | None = None
    render_device: str = "CPU"

    @property
    def reference_time_ns(self) -> int:
        return self.timing.reference_time_ns()
