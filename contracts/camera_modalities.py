"""The declared meaning of every camera-event modality: one table, used to write and to check.

Image modalities are (H, W[, C]) on the camera's pixel grid (`opencv` convention). Vectors
are in the camera's OpenCV optical frame at the row's reference time.
"""
from __future__ import annotations

from dataclasses import dataclass

from .ontology import BACKGROUND_ID, VOID_ID

INVALID_NAN = {"policy": "validity_plane", "mask": "valid", "fill": "nan"}


@dataclass(frozen=True)
class ModalitySpec:
    name: str
    quantity: str
    units: str
    dtype: str
    channels: tuple | None      # EXR channel names; None for .npy payloads
    trailing_shape: tuple        # shape after the image/row dimensions
    grid: str                    # "image" (H, W, ...) or "rows" (H, ...)
    frame: str                   # template, {sensor} is replaced
    invalid: dict
    time_kind: str
    optional: bool = False

    @property
    def format(self) -> str:
        return "openexr" if self.channels else "npy"

    def shape(self, width: int, height: int) -> list[int]:
        lead = [height, width] if self.grid == "image" else [height]
        return lead + list(self.trailing_shape)

    def entry(self, sensor_id: str, width: int, height: int, exposure_ns: int) -> dict:
        """Manifest fields that follow from the contract (uri, hashes and storage are added by the writer)."""
        e = {"format": self.format, "shape": self.shape(width, height), "dtype": self.dtype,
             "quantity": self.quantity, "units": self.units, "frame": self.frame.format(sensor=sensor_id),
             "invalid": dict(self.invalid), "time_support": {"kind": self.time_kind}}
        if self.channels:
            e["channels"] = list(self.channels)
        if self.time_kind in ("per_row", "per_row_interval") and self.name != "row_time_ns":
            e["time_support"]["times"] = "row_time_ns"
        if self.time_kind == "per_row_interval":
            e["time_support"]["exposure_ns"] = exposure_ns
            e["time_support"]["interval"] = "[t_row - exposure_ns/2, t_row + exposure_ns/2]"
        return e


_XYZ = ("X", "Y", "Z")
CAMERA_MODALITIES = {m.name: m for m in [
    ModalitySpec("camera_z", "distance along the optical axis (camera z) of the surface on the pixel-centre ray",
                 "m", "float32", ("camera_z",), (), "image", "{sensor}:opencv_optical", INVALID_NAN, "per_row"),
    ModalitySpec("range", "Euclidean distance from the camera centre to the surface along the pixel-centre ray",
                 "m", "float32", ("range",), (), "image", "{sensor}:opencv_optical", INVALID_NAN, "per_row"),
    ModalitySpec("valid", "1 where the pixel-centre ray hits a surface, else 0",
                 "1", "uint8", ("valid",), (), "image", "{sensor}:image", {"policy": "always_valid"}, "per_row"),
    ModalitySpec("normal_geometric", "true (face) normal of the hit surface, unit, facing the camera",
                 "unit_vector", "float32", _XYZ, (3,), "image", "{sensor}:opencv_optical", INVALID_NAN, "per_row"),
    ModalitySpec("normal_shading", "shading normal (interpolated/normal-mapped) of the hit surface, unit, facing the camera",
                 "unit_vector", "float32", _XYZ, (3,), "image", "{sensor}:opencv_optical", INVALID_NAN, "per_row"),
    ModalitySpec("instance_id", "render index of the hit object; the manifest's objects table maps it to a stable 64-bit id",
                 "id", "uint32", ("instance_id",), (), "image", "{sensor}:image",
                 {"policy": "reserved_id", "background": BACKGROUND_ID}, "per_row"),
    ModalitySpec("semantic_id", "ontology class id of the hit object",
                 "id", "uint32", ("semantic_id",), (), "image", "{sensor}:image",
                 {"policy": "reserved_id", "background": BACKGROUND_ID, "void": VOID_ID}, "per_row"),
    ModalitySpec("row_time_ns", "reference (exposure-centre) time of each image row on the scene clock",
                 "ns", "int64", None, (), "rows", "scene_clock", {"policy": "always_valid"}, "per_row"),
    ModalitySpec("row_T_world_camera", "pose of the camera (OpenCV optical) at each row's reference time, T_world_camera",
                 "m", "float64", None, (4, 4), "rows", "world<-{sensor}:opencv_optical",
                 {"policy": "always_valid"}, "per_row"),
    ModalitySpec("rgb", "scene-linear radiance, Cycles path traced, each row integrated over its own exposure",
                 "scene_linear", "float32", ("R", "G", "B"), (3,), "image", "{sensor}:image",
                 {"policy": "always_valid"}, "per_row_interval", optional=True),
]}
LABEL_MODALITIES = [n for n, m in CAMERA_MODALITIES.items() if not m.optional]
