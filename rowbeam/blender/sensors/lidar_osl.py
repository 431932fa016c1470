"""The OSL camera that turns a Cycles image into a LiDAR sweep (bpy for compiling).

The shader maps raster position to a beam: image row (k - K0)*S + s (0 = top) is firing k, slot s,
where K0 is the first firing of the render (0 unless the sweep is split across renders,
`lidar_layout.MAX_ROWS`); the column picks the channel fired in that slot. Direction = the beam in the LiDAR frame
(x forward, y left, z up), emitted from the mount's origin. The render camera is a child of
the mount with identity local axes, and Cycles' camera space is Blender-local with z negated,
so the shader outputs (x, y, -z). Raster y runs from 0 at the bottom (measured).
"""
from __future__ import annotations

import math

from rowbeam.sensors.lidar import LidarSensor

from rowbeam.blender.sensors.lidar_layout import LayoutRender, SweepLayout
from rowbeam.blender.cycles.osl_camera import make_custom_camera

SHADER_TEMPLATE = """\
// rowbeam LiDAR camera: generated for sensor {sensor_id}; one row per firing slot, one column per channel
#include "stdcycles.h"

shader rowbeam_lidar(output point position = point(0, 0, 0),
                     output vector direction = vector(0, 0, 1),
                     output color throughput = color(1, 1, 1))
{{
    int W = {width};
    int H = {height};
    int S = {slots};
    int K0 = {first_firing};
    int channel_at[{table_size}] = {{{channel_at}}};
    float elevation[{channels}] = {{{elevation}}};
    float azimuth_phase[{channels}] = {{{phase}}};
    float azimuth_step = {step};
    point r = camera_shader_raster_position();
    int col = clamp((int)floor(r[0] * W), 0, W - 1);
    int row = clamp(H - 1 - (int)floor(r[1] * H), 0, H - 1);
    int k = row / S;
    int c = channel_at[(row - k * S) * W + col];
    k += K0;
    if (c < 0) {{
        throughput = color(0, 0, 0);
        return;
    }}
    float az = azimuth_phase[c] + azimuth_step * k;
    float el = elevation[c];
    direction = vector(cos(el) * cos(az), cos(el) * sin(az), -sin(el));
}}
"""


def _floats(values) -> str:
    return ", ".join(repr(float(v)) for v in values)


def lidar_shader_source(sensor: LidarSensor, layout: SweepLayout, render: LayoutRender | None = None) -> str:
    """OSL source with the beam table baked in as constants (camera shaders take no array parameters),
    for one render of the layout (default: the whole sweep in one render)."""
    sign = 1.0 if sensor.spin_direction == "ccw" else -1.0
    hz = float(sensor.rotation_hz)
    phase = [math.radians(sensor.start_azimuth_deg + sensor.azimuth_offsets_deg[c])
             + sign * 2.0 * math.pi * hz * sensor.time_offsets_ns[c] * 1e-9 for c in range(sensor.channels)]
    return beam_camera_source(sensor.id, layout, render, [math.radians(e) for e in sensor.elevations_deg], phase,
                              sign * 2.0 * math.pi / sensor.azimuth_steps)


def beam_camera_source(sensor_id: str, layout: SweepLayout, render: LayoutRender | None, elevations_rad,
                       azimuths_rad, azimuth_step_rad: float) -> str:
    """OSL camera for any beam table: column/slot -> beam c (layout), row -> firing k; beam c of firing k points
    at azimuth azimuths_rad[c] + azimuth_step_rad*k, elevation elevations_rad[c] (sensor frame x forward, y left,
    z up). A spinning LiDAR steps the azimuth per firing; a radar's beams are fixed (step 0, rows = chirps)."""
    render = render or LayoutRender(0, layout.firings, layout.slots)
    table = layout.channel_table().ravel()
    return SHADER_TEMPLATE.format(
        sensor_id=sensor_id, width=layout.width, height=render.rows, slots=layout.slots, first_firing=render.first_firing,
        table_size=table.size, channel_at=", ".join(str(int(c)) for c in table), channels=len(elevations_rad),
        elevation=_floats(elevations_rad), phase=_floats(azimuths_rad), step=repr(float(azimuth_step_rad)))


def make_lidar_camera(patch, scene, mount, source: str):
    """A custom (OSL) camera parented to `mount` with identity local axes; made the scene camera."""
    return make_custom_camera(patch, scene, mount, source, "rowbeam_lidar")
