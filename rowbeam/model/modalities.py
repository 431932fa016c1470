"""The declared meaning of every modality of every sensor type: one table, used to write and to check.

Shapes are templates over named dimensions: H, W (camera image rows/columns), F (LiDAR
firings), C (LiDAR channels), G (LiDAR channel time groups), K (radar chirps), B (radar beams), N (points),
S (IMU samples). Camera image
modalities are on the `opencv` pixel grid; LiDAR beam modalities are firings x channels with
row 0 = first firing.
"""
from __future__ import annotations

from dataclasses import dataclass

from rowbeam.model.ontology import BACKGROUND_ID, VOID_ID

INVALID_NAN = {"policy": "validity_plane", "mask": "valid", "fill": "nan"}
INSTANCE_INVALID = {"policy": "reserved_id", "background": BACKGROUND_ID}
SEMANTIC_INVALID = {"policy": "reserved_id", "background": BACKGROUND_ID, "void": VOID_ID}
ALWAYS_VALID = {"policy": "always_valid"}

# The units vocabulary a manifest may declare (the sample schema's $defs/units enum holds the same names).
UNITS = {
    "1": "dimensionless", "m": "metres", "m/s": "metres per second", "rad": "radians", "deg": "degrees",
    "ns": "nanoseconds on the scene clock",
    "rad/s": "radians per second", "m/s^2": "metres per second squared", "px": "pixels (OpenCV grid)", "id": "integer identifier",
    "index": "integer index", "unit_vector": "dimensionless unit 3-vector",
    "scene_linear": "Cycles scene-linear radiance", "record": "structured table; each field declares its units",
}


@dataclass(frozen=True)
class ModalitySpec:
    name: str
    quantity: str
    units: str
    dtype: str                   # numpy dtype name, or "record" for a structured table
    channels: tuple | None       # EXR channel names; None for .npy payloads
    shape: tuple                 # template: dimension names and integers
    frame: str                   # template, {sensor} is replaced
    invalid: dict
    time_kind: str
    times: str | None = None     # modality (or field) holding the times
    fields: tuple | None = None  # for dtype "record": ((name, dtype, units, frame), ...)
    optional: bool = False

    @property
    def format(self) -> str:
        return "openexr" if self.channels else "npy"

    def concrete_shape(self, dims: dict) -> list[int]:
        return [dims[d] if isinstance(d, str) else d for d in self.shape]

    def numpy_dtype(self):
        import numpy as np
        if self.dtype == "record":
            return np.dtype([(n, np.dtype(t).newbyteorder("<")) for n, t, _, _ in self.fields])
        return np.dtype(self.dtype)

    def entry(self, sensor_id: str, dims: dict, exposure_ns: int | None = None) -> dict:
        """Manifest fields that follow from the contract (uri, hashes and storage are added by the writer)."""
        e = {"format": self.format, "shape": self.concrete_shape(dims), "dtype": self.dtype,
             "quantity": self.quantity, "units": self.units, "frame": self.frame.format(sensor=sensor_id),
             "invalid": dict(self.invalid), "time_support": {"kind": self.time_kind}}
        if self.channels:
            e["channels"] = list(self.channels)
        if self.times:
            e["time_support"]["times"] = self.times
        if self.fields:
            e["fields"] = [{"name": n, "dtype": t, "units": u, "frame": f.format(sensor=sensor_id)}
                           for n, t, u, f in self.fields]
        if self.time_kind == "per_row_interval":
            e["time_support"].update(exposure_ns=exposure_ns,
                                     interval="[t_row - exposure_ns/2, t_row + exposure_ns/2]")
        return e


def _table(*specs) -> dict:
    return {s.name: s for s in specs}


_XYZ = ("X", "Y", "Z")
CAMERA_MODALITIES = _table(
    ModalitySpec("camera_z", "distance along the optical axis (camera z) of the surface on the pixel-centre ray",
                 "m", "float32", ("camera_z",), ("H", "W"), "{sensor}:opencv_optical", INVALID_NAN, "per_row",
                 "row_time_ns"),
    ModalitySpec("range", "Euclidean distance from the camera centre to the surface along the pixel-centre ray",
                 "m", "float32", ("range",), ("H", "W"), "{sensor}:opencv_optical", INVALID_NAN, "per_row",
                 "row_time_ns"),
    ModalitySpec("valid", "1 where the pixel-centre ray hits a surface, else 0",
                 "1", "uint8", ("valid",), ("H", "W"), "{sensor}:image", ALWAYS_VALID, "per_row", "row_time_ns"),
    ModalitySpec("normal_geometric", "true (face) normal of the hit surface, unit, facing the camera",
                 "unit_vector", "float32", _XYZ, ("H", "W", 3), "{sensor}:opencv_optical", INVALID_NAN, "per_row",
                 "row_time_ns"),
    ModalitySpec("normal_shading", "shading normal (interpolated/normal-mapped) of the hit surface, unit, facing the camera",
                 "unit_vector", "float32", _XYZ, ("H", "W", 3), "{sensor}:opencv_optical", INVALID_NAN, "per_row",
                 "row_time_ns"),
    ModalitySpec("instance_id", "render index of the hit object; the manifest's objects table maps it to a stable 64-bit id",
                 "id", "uint32", ("instance_id",), ("H", "W"), "{sensor}:image", INSTANCE_INVALID, "per_row",
                 "row_time_ns"),
    ModalitySpec("semantic_id", "ontology class id of the hit object",
                 "id", "uint32", ("semantic_id",), ("H", "W"), "{sensor}:image", SEMANTIC_INVALID, "per_row",
                 "row_time_ns"),
    ModalitySpec("row_time_ns", "reference (exposure-centre) time of each image row on the scene clock",
                 "ns", "int64", None, ("H",), "scene_clock", ALWAYS_VALID, "per_row"),
    ModalitySpec("row_T_world_camera", "pose of the camera (OpenCV optical) at each row's reference time, T_world_camera",
                 "m", "float64", None, ("H", 4, 4), "world<-{sensor}:opencv_optical", ALWAYS_VALID, "per_row",
                 "row_time_ns"),
    ModalitySpec("rgb", "scene-linear radiance, Cycles path traced, each row integrated over its own exposure",
                 "scene_linear", "float32", ("R", "G", "B"), ("H", "W", 3), "{sensor}:image", ALWAYS_VALID,
                 "per_row_interval", "row_time_ns", optional=True),
    ModalitySpec("rgb_coverage", "share of the rgb render's camera paths that met a surface rather than the background "
                 "(1 - transmittance to the background; Cycles Mist pass with the mist beyond the scene), averaged over "
                 "the pixel filter and samples: the label-independent coverage the labels are checked against",
                 "1", "float32", ("coverage",), ("H", "W"), "{sensor}:image", ALWAYS_VALID, "per_row_interval",
                 "row_time_ns", optional=True),
    ModalitySpec("policy_mask", "1 where the pixel-centre label ray met a surface decided by transparency or the surface "
                 "policy (opacity < 1, glass / transmission, volume; manifest method.surface_policy), else 0",
                 "1", "uint8", ("policy",), ("H", "W"), "{sensor}:image", ALWAYS_VALID, "per_row", "row_time_ns",
                 optional=True),
    ModalitySpec("layer_camera_z", "camera z of the l-th surface point the pixel-centre label ray crosses (l = 0 the "
                 "first; rig surface_policy.layers = L), NaN where it crossed fewer", "m", "float32", None,
                 ("H", "W", "L"), "{sensor}:opencv_optical", ALWAYS_VALID, "per_row", "row_time_ns", optional=True),
    ModalitySpec("layer_instance_id", "render instance id of the l-th surface point crossed (as instance_id), 0 where "
                 "the ray crossed fewer", "id", "uint32", None, ("H", "W", "L"), "{sensor}:image", ALWAYS_VALID,
                 "per_row", "row_time_ns", optional=True),
    ModalitySpec("layer_opacity", "opacity in [0, 1] of the l-th surface point crossed under the surface policy "
                 "(the label is the first layer whose opacity >= alpha_threshold), NaN where the ray crossed fewer",
                 "1", "float32", None, ("H", "W", "L"), "{sensor}:image", ALWAYS_VALID, "per_row", "row_time_ns",
                 optional=True),
    ModalitySpec("rgb_display", "8-bit sRGB-encoded display image of rgb through the scene's colour management (view "
                 "transform, look, exposure, gamma, display device: method.rgb_display), 0..255, for viewing and "
                 "image formats", "1", "uint8", None, ("H", "W", 3), "{sensor}:image", ALWAYS_VALID,
                 "per_row_interval", "row_time_ns", optional=True),
    # object labels (rig camera option object_labels; manifest block object_labels declares the objects)
    ModalitySpec("amodal_masks", "np.packbits(axis=-1) of each listed object's amodal mask in the image (row i <-> "
                 "object_labels.objects[k] with mask_index i)", "1", "uint8", None, ("O", "H", "Wp"),
                 "{sensor}:image", ALWAYS_VALID, "per_row", "row_time_ns", optional=True),
    ModalitySpec("amodal_masks_canvas", "np.packbits(axis=-1) of the amodal mask on the 3H x 3W canvas of each object "
                 "with pixels outside the image (row i <-> canvas_mask_index i)", "1", "uint8", None,
                 ("T", "Hc", "Wcp"), "{sensor}:canvas (u + W, v + H)", ALWAYS_VALID, "per_row",
                 "canvas_row_time_ns", optional=True),
    ModalitySpec("canvas_row_time_ns", "reference time of each canvas row c (image row c - H, extrapolated beyond "
                 "the image by the timing model)", "ns", "int64", None, ("Hc",), "scene_clock", ALWAYS_VALID,
                 "per_row", optional=True),
    ModalitySpec("canvas_row_T_world_camera", "camera pose (OpenCV optical) at each canvas row's time",
                 "m", "float64", None, ("Hc", 4, 4), "world<-{sensor}:opencv_optical", ALWAYS_VALID, "per_row",
                 "canvas_row_time_ns", optional=True),
    ModalitySpec("object_row_T_world_object", "rigid pose of each moving listed object (row_pose_index) at each "
                 "canvas row's time; the asset holds the scale", "m", "float64", None, ("M", "Hc", 4, 4),
                 "world<-object", ALWAYS_VALID, "per_row", "canvas_row_time_ns", optional=True),
)

_POINT_FIELDS = (
    ("t_ns", "int64", "ns", "scene_clock"),
    ("channel", "uint16", "index", "beam table"),
    ("firing", "uint32", "index", "sweep"),
    ("x", "float64", "m", "{sensor}:lidar at the point's own time"),
    ("y", "float64", "m", "{sensor}:lidar at the point's own time"),
    ("z", "float64", "m", "{sensor}:lidar at the point's own time"),
    ("x_world", "float64", "m", "world"),
    ("y_world", "float64", "m", "world"),
    ("z_world", "float64", "m", "world"),
    ("instance_id", "uint32", "id", "objects table render index"),
    ("semantic_id", "uint32", "id", "ontology class"),
)
LIDAR_MODALITIES = _table(
    ModalitySpec("range", "Euclidean distance from the LiDAR origin at the beam's time to the return",
                 "m", "float32", ("range",), ("F", "C"), "{sensor}:lidar", INVALID_NAN, "per_firing", "time_offset_ns"),
    ModalitySpec("valid", "1 where the beam returns from a surface within [min_range_m, max_range_m], else 0",
                 "1", "uint8", ("valid",), ("F", "C"), "{sensor}:beams", ALWAYS_VALID, "per_firing", "time_offset_ns"),
    ModalitySpec("instance_id", "render index of the hit object (objects table maps it to the 64-bit id)",
                 "id", "uint32", ("instance_id",), ("F", "C"), "{sensor}:beams", INSTANCE_INVALID, "per_firing",
                 "time_offset_ns"),
    ModalitySpec("semantic_id", "ontology class id of the hit object",
                 "id", "uint32", ("semantic_id",), ("F", "C"), "{sensor}:beams", SEMANTIC_INVALID, "per_firing",
                 "time_offset_ns"),
    ModalitySpec("normal_geometric", "true (face) normal of the hit surface in the LiDAR frame at the beam's time, "
                 "unit, facing the sensor", "unit_vector", "float32", _XYZ, ("F", "C", 3), "{sensor}:lidar",
                 INVALID_NAN, "per_firing", "time_offset_ns"),
    ModalitySpec("cos_incidence", "cosine of the angle between the beam and the surface normal (-n . d)",
                 "1", "float32", ("cos_incidence",), ("F", "C"), "{sensor}:lidar", INVALID_NAN, "per_firing",
                 "time_offset_ns"),
    ModalitySpec("time_offset_ns", "beam time minus sweep_start_ns",
                 "ns", "uint32", ("time_offset_ns",), ("F", "C"), "scene_clock", ALWAYS_VALID, "per_firing"),
    ModalitySpec("firing_T_world_lidar", "LiDAR pose at each firing's time for each channel time group "
                 "(group g = channels whose time offset is the g-th distinct one), T_world_lidar",
                 "m", "float64", None, ("F", "G", 4, 4), "world<-{sensor}:lidar", ALWAYS_VALID, "per_firing"),
    ModalitySpec("points", "one row per valid return, ordered by (firing, channel); xyz in the LiDAR frame at the "
                 "point's own time and in the world frame", "record", "record", None, ("N",), "{sensor}:lidar",
                 ALWAYS_VALID, "per_point", "t_ns", fields=_POINT_FIELDS),
    ModalitySpec("points_motion_compensated", "the points' positions expressed in the LiDAR frame at the event's "
                 "reference_time_ns (row i = points row i)", "m", "float64", None, ("N", 3),
                 "{sensor}:lidar at reference_time_ns", ALWAYS_VALID, "instant"),
)

_RADAR_POINT_FIELDS = (
    ("t_ns", "int64", "ns", "scene_clock"),
    ("chirp", "uint32", "index", "frame"),
    ("beam", "uint32", "index", "beam table"),
    ("x", "float64", "m", "{sensor}:radar at the point's own time"),
    ("y", "float64", "m", "{sensor}:radar at the point's own time"),
    ("z", "float64", "m", "{sensor}:radar at the point's own time"),
    ("x_world", "float64", "m", "world"),
    ("y_world", "float64", "m", "world"),
    ("z_world", "float64", "m", "world"),
    ("range", "float64", "m", "{sensor}:radar"),
    ("radial_velocity", "float64", "m/s", "{sensor}:radar, positive = receding"),
    ("instance_id", "uint32", "id", "objects table render index"),
    ("semantic_id", "uint32", "id", "ontology class"),
)
_PER_CHIRP = ("per_chirp", "time_offset_ns")
RADAR_MODALITIES = _table(
    ModalitySpec("range", "Euclidean distance from the radar origin at the chirp's time to the return",
                 "m", "float32", ("range",), ("K", "B"), "{sensor}:radar", INVALID_NAN, *_PER_CHIRP),
    ModalitySpec("radial_velocity", "velocity of the hit material point relative to the radar origin's velocity at the "
                 "chirp's time, projected on the beam direction; positive = receding", "m/s", "float32",
                 ("radial_velocity",), ("K", "B"), "{sensor}:radar", INVALID_NAN, *_PER_CHIRP),
    ModalitySpec("valid", "1 where the beam returns from a surface within the range limits and |radial_velocity| <= "
                 "max_radial_velocity_mps, else 0", "1", "uint8", ("valid",), ("K", "B"), "{sensor}:beams",
                 ALWAYS_VALID, *_PER_CHIRP),
    ModalitySpec("instance_id", "render index of the hit object (objects table maps it to the 64-bit id)",
                 "id", "uint32", ("instance_id",), ("K", "B"), "{sensor}:beams", INSTANCE_INVALID, *_PER_CHIRP),
    ModalitySpec("semantic_id", "ontology class id of the hit object",
                 "id", "uint32", ("semantic_id",), ("K", "B"), "{sensor}:beams", SEMANTIC_INVALID, *_PER_CHIRP),
    ModalitySpec("normal_geometric", "true (face) normal of the hit surface in the radar frame at the chirp's time, "
                 "unit, facing the sensor", "unit_vector", "float32", _XYZ, ("K", "B", 3), "{sensor}:radar",
                 INVALID_NAN, *_PER_CHIRP),
    ModalitySpec("cos_incidence", "cosine of the angle between the beam and the surface normal (-n . d)",
                 "1", "float32", ("cos_incidence",), ("K", "B"), "{sensor}:radar", INVALID_NAN, *_PER_CHIRP),
    ModalitySpec("time_offset_ns", "chirp time (centre of the chirp's interval) minus frame_start_ns",
                 "ns", "int64", None, ("K",), "scene_clock", ALWAYS_VALID, "per_chirp"),
    ModalitySpec("azimuth_deg", "azimuth of each beam in the radar frame, from +x toward +y",
                 "deg", "float64", None, ("B",), "{sensor}:radar", ALWAYS_VALID, "none"),
    ModalitySpec("elevation_deg", "elevation of each beam in the radar frame, up from the xy plane",
                 "deg", "float64", None, ("B",), "{sensor}:radar", ALWAYS_VALID, "none"),
    ModalitySpec("chirp_T_world_radar", "radar pose at each chirp's time, T_world_radar",
                 "m", "float64", None, ("K", 4, 4), "world<-{sensor}:radar", ALWAYS_VALID, *_PER_CHIRP),
    ModalitySpec("chirp_velocity_world", "velocity of the radar origin at each chirp's time (world frame)",
                 "m/s", "float64", None, ("K", 3), "world", ALWAYS_VALID, *_PER_CHIRP),
    ModalitySpec("points", "one row per valid return, ordered by (chirp, beam); xyz in the radar frame at the chirp's "
                 "time and in the world frame", "record", "record", None, ("N",), "{sensor}:radar", ALWAYS_VALID,
                 "per_point", "t_ns", fields=_RADAR_POINT_FIELDS),
)

_PER_SAMPLE = ("per_sample", "sample_time_ns")
IMU_MODALITIES = _table(
    ModalitySpec("sample_time_ns", "acquisition time of each IMU sample on the scene clock (rowbeam.imu@1)",
                 "ns", "int64", None, ("S",), "scene_clock", ALWAYS_VALID, "per_sample"),
    ModalitySpec("angular_velocity", "true angular velocity of the IMU frame relative to the world, in the IMU frame",
                 "rad/s", "float64", None, ("S", 3), "{sensor}:imu", ALWAYS_VALID, *_PER_SAMPLE),
    ModalitySpec("specific_force", "true specific force: acceleration of the IMU origin minus the declared gravity, "
                 "in the IMU frame (at rest: +|g| on the axis pointing up)", "m/s^2", "float64", None, ("S", 3),
                 "{sensor}:imu", ALWAYS_VALID, *_PER_SAMPLE),
    ModalitySpec("sample_T_world_imu", "IMU pose (mount local axes, scale removed) at each sample's time",
                 "m", "float64", None, ("S", 4, 4), "world<-{sensor}:imu", ALWAYS_VALID, *_PER_SAMPLE),
    ModalitySpec("angular_velocity_measured", "angular velocity through the declared noise model (calibration.noise)",
                 "rad/s", "float64", None, ("S", 3), "{sensor}:imu", ALWAYS_VALID, *_PER_SAMPLE, optional=True),
    ModalitySpec("specific_force_measured", "specific force through the declared noise model (calibration.noise)",
                 "m/s^2", "float64", None, ("S", 3), "{sensor}:imu", ALWAYS_VALID, *_PER_SAMPLE, optional=True),
)

FLAG_NAMES = ("source_valid", "dest_in_bounds", "dest_visible", "correspondence_defined")
FLAG_TEXT = {
    "source_valid": "the source pixel's ray hits a surface (the source event's valid)",
    "dest_in_bounds": "the moved point projects in front of the destination camera inside its image "
                      "(-0.5 <= u < W-0.5, -0.5 <= v < H-0.5)",
    "dest_visible": "the moved point wins the destination's visibility test: the nearest destination pixel shows "
                    "the same object and its camera_z (inverse-depth bilinear over the 2x2 neighbourhood when all "
                    "four show that object) is within method.depth_test.abs_m + rel * z of the point's z",
    "correspondence_defined": "the material point persists: the object is visible to the render at both times and "
                              "its evaluated mesh keeps its topology (rigid or affine objects, and deforming "
                              "ones: armatures, shape keys, deform modifiers); method.objects gives the reason "
                              "per object where it does not",
}


def _flow_specs(direction: str) -> list:
    grid = "source" if direction == "forward" else "destination"
    other = "destination" if direction == "forward" else "source"
    specs = [ModalitySpec(
        f"flow_{direction}", f"displacement (u right, v down) from each {grid}-event pixel centre to the projection "
        f"of the same material point in the {other} event at the time of the row it lands on",
        "px", "float32", ("u", "v"), ("H", "W", 2), f"{{sensor}}:image of the {grid} event",
        {"policy": "validity_plane", "mask": f"flow_{direction}_correspondence_defined", "fill": "nan"},
        "per_row", f"{grid} event row_time_ns -> {other} event row_time_ns at the landing row")]
    for flag in FLAG_NAMES:
        specs.append(ModalitySpec(f"flow_{direction}_{flag}", FLAG_TEXT[flag], "1", "uint8",
                                  (f"flow_{direction}_{flag}",), ("H", "W"), f"{{sensor}}:image of the {grid} event",
                                  ALWAYS_VALID, "per_row", f"{grid} event row_time_ns"))
    return specs


FLOW_MODALITIES = _table(
    *_flow_specs("forward"),
    *_flow_specs("backward"),
    ModalitySpec("scene_flow_world", "3D displacement of the source pixel's material point from the source row's "
                 "time to the destination row's time", "m", "float32", _XYZ, ("H", "W", 3), "world",
                 {"policy": "validity_plane", "mask": "flow_forward_correspondence_defined", "fill": "nan"},
                 "per_row", "source event row_time_ns -> destination landing row time"),
    ModalitySpec("scene_flow_source_camera", "scene_flow_world rotated into the source camera frame (OpenCV optical) "
                 "at the source row's time", "m", "float32", _XYZ, ("H", "W", 3),
                 "{sensor}:opencv_optical at the source row's time",
                 {"policy": "validity_plane", "mask": "flow_forward_correspondence_defined", "fill": "nan"},
                 "per_row", "source event row_time_ns -> destination landing row time"),
)
