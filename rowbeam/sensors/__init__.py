"""Sensor types without Blender: spec, rig parser and timing model of each, registered in `registry`.

Importing this package registers the built-in types (camera, lidar, radar modules); a new type is one
module here plus its line below (see docs/design.md, "Adding a sensor type").
"""
from rowbeam.sensors import camera, lidar, radar  # noqa: F401  (each registers its sensor type)
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
