"""Sensor types without Blender: spec, rig parser and timing model of each, registered in `registry`.

Importing this package registers the built-in types (camera, imu, lidar, radar modules); a new type is one
module here plus its line below (see docs/design.md, "Adding a sensor type").
"""
from rowbeam.sensors import camera, lidar, radar  # noqa: F401  (each registers its sensor type)
from rowbeam.sensors import imu  # noqa: F401, E402  (registered after the ray-cast types: their order is the registry's)
from rowbeam.sensors.registry import (  # noqa: F401  (the registry's API)
    MODALITIES,
    SensorType,
    find_sensor_type,
    load_layer,
    manifest_dims,
    register,
    required,
    sensor_hook,
    sensor_type,
    sensor_types,
    type_of,
)
