"""The OSL camera that renders a distorted (opencv / opencv_fisheye) or given-K camera directly (bpy for compiling).

Each Cycles pixel maps to its sensor pixel (u, v) in the `opencv` convention (raster position * size - 0.5,
raster y from the bottom; for bottom_to_top readout the sensor pixel (W-1-u, H-1-v), the image is
flipped back like the pinhole path's rolled camera), then to its undistorted ray by Newton's method in
float32, at most OSL_NEWTON_STEPS steps; a pixel leaves the loop at its first zero step (a float32 fixed point,
so the ray is bit for bit the one all the steps give; measured: 1280x720 opencv label render 2.60 -> 2.07 CPU s,
passes identical) (rowbeam/model/lens.py states the model; the exporter re-derives every label on the exact float64
ray from rowbeam.model.lens.unproject_grid). Pixels outside the valid domain shoot no ray (throughput 0 -> no hit).
The render camera is a child of the sensor camera with identity local axes; Cycles' camera space is the
Blender-local frame with z negated, so an OpenCV ray (x, y, 1) is emitted as (x, -y, 1).
Rows keep the pinhole path's timing: the same TOP rolling shutter and half-row correction
(cycles_timing.label_shutter), measured for custom cameras too (docs/design.md).
"""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from rowbeam.util.errors import RowbeamError
from rowbeam.model.lens import Lens, make_lens, unit_ray_grid, unit_rays, unproject_grid

from rowbeam.blender.compat import blender_compat
from rowbeam.blender.cycles.osl_camera import make_custom_camera

OSL_NEWTON_STEPS = 12
LENS_CAMERA_METHOD = ("generated OSL custom camera (rowbeam/blender/cycles/lens_camera.py), child of the sensor camera: "
                      "each pixel "
                      "centre unprojected through the lens (Newton, float32, at most osl_newton_steps, stopping at a fixed "
                      "point) to its ray; labels re-derived on the exact "
                      "float64 ray (rowbeam.model.lens.unproject); bottom_to_top readout: pixel (W-1-u, H-1-v), image "
                      "flipped back")

HEADER = """\
// rowbeam lens camera: generated for sensor {sensor_id}, model {model}
#include "stdcycles.h"

shader rowbeam_lens(output point position = point(0, 0, 0),
                    output vector direction = vector(0, 0, 1),
                    output color throughput = color(1, 1, 1))
{{
    float W = {width};
    float H = {height};
    point r = camera_shader_raster_position();
    float pu = r[0] * W - 0.5;              // sensor pixel (opencv convention); u, v are OSL globals
    float pv = (1.0 - r[1]) * H - 0.5;
    if ({flip}) {{
        pu = W - 1.0 - pu;
        pv = H - 1.0 - pv;
    }}
    float xd = (pu - {cx}) / {fx};
    float yd = (pv - {cy}) / {fy};
"""

BODY = {
    "pinhole": """\
    direction = vector(xd, -yd, 1.0);
}}
""",
    "opencv": """\
    float k1 = {k1}; float k2 = {k2}; float p1 = {p1}; float p2 = {p2}; float k3 = {k3};
    float k4 = {k4}; float k5 = {k5}; float k6 = {k6};
    float x = xd;
    float y = yd;
    for (int i = 0; i < {steps}; i++) {{
        float s = x * x + y * y;
        float num = 1.0 + s * (k1 + s * (k2 + s * k3));
        float den = 1.0 + s * (k4 + s * (k5 + s * k6));
        float R = num / den;
        float dR = ((k1 + s * (2.0 * k2 + 3.0 * s * k3)) * den - num * (k4 + s * (2.0 * k5 + 3.0 * s * k6))) / (den * den);
        float ex = x * R + 2.0 * p1 * x * y + p2 * (s + 2.0 * x * x) - xd;
        float ey = y * R + p1 * (s + 2.0 * y * y) + 2.0 * p2 * x * y - yd;
        float a = R + 2.0 * x * x * dR + 2.0 * p1 * y + 6.0 * p2 * x;
        float b = 2.0 * x * y * dR + 2.0 * p1 * x + 2.0 * p2 * y;
        float d = R + 2.0 * y * y * dR + 6.0 * p1 * y + 2.0 * p2 * x;
        float det = a * d - b * b;
        float sx = (d * ex - b * ey) / det;
        float sy = (a * ey - b * ex) / det;
        if (sx == 0.0 && sy == 0.0)
            break;                          // a fixed point: every later step is zero too
        x -= sx;
        y -= sy;
    }}
    direction = vector(x, -y, 1.0);
}}
""",
    "opencv_fisheye": """\
    float k1 = {k1}; float k2 = {k2}; float k3 = {k3}; float k4 = {k4};
    float td = hypot(xd, yd);
    if (td > {max_rd}) {{
        throughput = color(0, 0, 0);
        return;
    }}
    float th = min(td, {max_theta});
    for (int i = 0; i < {steps}; i++) {{
        float t2 = th * th;
        float f = th * (1.0 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4)))) - td;
        float df = 1.0 + t2 * (3.0 * k1 + t2 * (5.0 * k2 + t2 * (7.0 * k3 + t2 * 9.0 * k4)));
        float next = clamp(th - f / df, 0.0, {max_theta});
        if (next == th)
            break;                          // a fixed point: every later step is zero too
        th = next;
    }}
    float sc = td > 0.0 ? sin(th) / td : 1.0;
    direction = vector(xd * sc, -yd * sc, td > 0.0 ? cos(th) : 1.0);
}}
""",
}


def _f(x: float) -> str:
    return repr(float(x))


def lens_shader_source(lens: Lens, sensor_id: str, flip: bool) -> str:
    """OSL source for `lens` with K, D and the image size baked in (camera shaders take no parameters)."""
    K = lens.K
    head = HEADER.format(sensor_id=sensor_id, model=lens.model, width=_f(lens.width), height=_f(lens.height),
                         flip=1 if flip else 0, fx=_f(K[0, 0]), fy=_f(K[1, 1]), cx=_f(K[0, 2]), cy=_f(K[1, 2]))
    names = {"opencv": ("k1", "k2", "p1", "p2", "k3", "k4", "k5", "k6"), "opencv_fisheye": ("k1", "k2", "k3", "k4"),
             "pinhole": ()}[lens.model]
    D = list(lens.D) + [0.0] * (len(names) - len(lens.D))
    fields = {n: _f(d) for n, d in zip(names, D, strict=False)}
    fields.update(steps=OSL_NEWTON_STEPS, max_rd=_f(min(lens.max_distorted_radius, 1e30)),
                  max_theta=_f(lens.max_theta_rad))
    return head + BODY[lens.model].format(**fields)


def sensor_lens(sensor, K, width: int, height: int) -> Lens | None:
    """The sensor's Lens when it renders through the lens camera (distortion or a given K), else None (the
    Blender camera renders it). RowbeamError (one line) for coefficients this image cannot use, or on a
    Blender without custom cameras."""
    if not sensor.lens.needs_custom_camera:
        return None
    lens = make_lens(sensor.lens, K, width, height, where=f"sensor {sensor.id!r}: lens")   # bad coefficients first
    if not blender_compat.HAS_CUSTOM_CAMERA:
        need = blender_compat.CUSTOM_CAMERA_SINCE
        raise RowbeamError(f"sensor {sensor.id!r}: lens model {sensor.lens.model} renders through a custom (OSL) "
                           f"camera: needs Blender >= {need[0]}.{need[1]} (found {blender_compat.VERSION_STRING})")
    return lens


def use_lens_camera(patch, scene, cam_obj, lens: Lens, sensor_id: str, direction: str):
    """Make the lens camera (child of the sensor camera) the scene camera; images rendered through it for
    bottom_to_top readout come out rolled 180 deg like the pinhole path's (render_camera.unflip)."""
    source = lens_shader_source(lens, sensor_id, flip=direction != "top_to_bottom")
    return make_custom_camera(patch, scene, cam_obj, source, "rowbeam_lens_camera")


@dataclass(frozen=True)
class PixelRays:
    """The exact rays of image rows' pixel centres through a lens (rowbeam.model.lens.unit_rays of (x, y, 1)), NaN
    outside the valid domain: `unit` (h, w, 3) camera-frame unit directions, `length` (h, w) |(x, y, 1)| =
    range / camera_z. rays[r0:r1] are those of rows r0..r1-1."""

    unit: np.ndarray
    length: np.ndarray

    @classmethod
    def of(cls, rays: np.ndarray) -> PixelRays:
        """From rays (h, w, 3) = (x, y, 1)."""
        return cls(*unit_rays(rays))

    def __getitem__(self, rows: slice) -> PixelRays:
        return PixelRays(self.unit[rows], self.length[rows])


def pixel_rays(lens: Lens, first_row: int = 0, rows: int | None = None) -> tuple[PixelRays, float]:
    """Exact rays of pixel centres in rows first_row.. (read-only views of rowbeam.model.lens.unit_ray_grid, solved once
    per lens and process, shared with the checker); and the largest achieved unprojection residual (px) over valid
    pixels of those rows."""
    rows = lens.height - first_row if rows is None else rows
    _, ok, residual = (a[first_row:first_row + rows] for a in unproject_grid(lens))
    return PixelRays(*unit_ray_grid(lens))[first_row:first_row + rows], float(residual[ok].max(initial=0.0))


def start_pixel_rays(lens: Lens) -> Future:
    """Start pixel_rays(lens) (whole image) on a worker thread; the Future's result() is (PixelRays, largest
    residual px, seconds the solve took). The cold float64 unprojection (~0.2-0.3 s at 1280x720) then runs while
    Cycles renders, which releases the GIL (numpy releases it in its large operations too); the rays are the same
    arrays as a call on the main thread. The thread touches no bpy."""
    def solve():
        t0 = time.perf_counter()
        rays, residual = pixel_rays(lens)
        return rays, residual, time.perf_counter() - t0
    pool = ThreadPoolExecutor(1, thread_name_prefix="rowbeam-unproject")
    try:
        return pool.submit(solve)
    finally:
        pool.shutdown(wait=False)    # the thread ends with its one task
