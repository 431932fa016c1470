"""Rolling-shutter camera: the sensor spec, its rig parser and its registration (timing model:
`rowbeam.model.timing.RollingShutterTiming`, `rowbeam.rolling_shutter@1`).

Events start at first_event_ns + k/rate_hz (ns on the scene clock); row v of H is read
readout_ns*v'/H later and exposed for exposure_ns (v' = v top_to_bottom, H-1-v bottom_to_top).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction


from rowbeam.model.frames import T_BLENDER_CAMERA_OPENCV
from rowbeam.model.lens import LensSpec, make_lens, parse_lens_spec
from rowbeam.model.modalities import CAMERA_MODALITIES
from rowbeam.model.surface_policy import DEFAULT_POLICY, SurfacePolicy
from rowbeam.model.timing import NS_PER_S, RollingShutterTiming, exact, exact_ns_text, periodic_event_start_ns
from rowbeam.sensors.registry import SensorType, register
from rowbeam.util.errors import RowbeamError

CAMERA = "rolling_shutter_camera"


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
    rgb_denoise: bool = False
    rgb_adaptive_threshold: float = 0.0
    rgb_adaptive_min_samples: int = 0
    rgb_storage: str = "float32"
    lens: LensSpec = LensSpec()
    surface_policy: SurfacePolicy = DEFAULT_POLICY
    type: str = CAMERA

    def event_start_ns(self, index: int) -> int:
        return periodic_event_start_ns(self.first_event_ns, self.rate_hz, index)

    def timing(self, index: int, rows: int) -> RollingShutterTiming:
        return RollingShutterTiming(self.event_start_ns(index), self.readout_ns, self.exposure_ns,
                                    rows, self.readout_direction)

    def event_duration_ns(self) -> int:
        return self.readout_ns + self.exposure_ns

    def lossy_payloads(self) -> dict:
        """{modality: stored pixel type} of the declared lossy storage (rowbeam.bundle.arrays.LOSSY_PIXEL_TYPES)."""
        return {"rgb": "HALF"} if self.rgb_storage == "half" else {}

    def event_cost(self, size_px) -> int:
        """Declared render cost of one event: width x height x (1 label sample + rgb_samples) pixel-samples."""
        return int(size_px[0]) * int(size_px[1]) * (1 + int(self.rgb_samples))


def parse_camera_sensor(raw: dict, defaults: dict, where: str) -> CameraSensor:
    """Build a CameraSensor from a schema-valid rig entry; refuse what the schema cannot (one line naming the field)."""
    values = {**defaults, **raw}
    if values.get("image_size_px") is not None:
        values["image_size_px"] = tuple(values["image_size_px"])
    period = Fraction(NS_PER_S) / exact(values["rate_hz"])
    for key in ("readout_ns", "exposure_ns"):      # a row cannot expose or read out longer than a frame
        if values[key] > period:
            raise RowbeamError(f"{where}.{key}: {values[key]} ns is longer than the frame period "
                               f"{exact_ns_text(period)} (1/rate_hz)")
    values["lens"] = parse_lens_spec(values.get("lens"), f"{where}.lens")
    if values["lens"].K is not None and values.get("image_size_px"):     # else checked at export (K, size known)
        make_lens(values["lens"], None, *values["image_size_px"], where=f"{where}.lens")
    return CameraSensor(**values)


def camera_dims(manifest: dict) -> dict:
    """Named dimensions of a camera event or flow: W, H, packed widths, canvas rows, object counts O, T, M and
    the surface-layer count L."""
    W, H = manifest["calibration"]["image_size_px"]
    dims = {"W": W, "H": H, "Wp": (W + 7) // 8, "Hc": 3 * H, "Wcp": (3 * W + 7) // 8}
    for name, dim in (("amodal_masks", "O"), ("amodal_masks_canvas", "T"), ("object_row_T_world_object", "M")):
        shape = manifest["modalities"].get(name, {}).get("shape")
        dims[dim] = shape[0] if isinstance(shape, list) and shape and isinstance(shape[0], int) else 0
    layers = ((manifest.get("method") or {}).get("surface_policy") or {}).get("layers", 0)
    dims["L"] = layers if isinstance(layers, int) else 0          # the declared stack depth (rig surface_policy)
    return dims


def camera_poses(manifest: dict, arrays: dict):
    """(row times (H,) int64 ns, row poses (H, 4, 4) in the camera object's Blender axes, what) or None."""
    if {"row_time_ns", "row_T_world_camera"} <= arrays.keys():
        return arrays["row_time_ns"], arrays["row_T_world_camera"] @ T_BLENDER_CAMERA_OPENCV.T, "row poses"
    return None


CAMERA_TYPE = register(SensorType(
    name=CAMERA, label="Rolling-shutter camera", description="Camera with per-row acquisition times",
    parse=parse_camera_sensor, timing_from_manifest=RollingShutterTiming.from_manifest, start_key="frame_start_ns",
    modalities=CAMERA_MODALITIES, dims=camera_dims, pose_arrays=("row_time_ns", "row_T_world_camera"),
    poses=camera_poses, has_rows=True,
    modules={"check": "rowbeam.check.camera_checks", "report": "rowbeam.report.camera_page",
             "export": "rowbeam.blender.sensors.camera_event"}))
