"""The OSL camera that renders a distorted (opencv / opencv_fisheye) or given-K camera directly (bpy for compiling).

Each Cycles pixel maps to its sensor pixel (u, v) in the `opencv` convention (raster position * size - 0.5,
raster y from the bottom; for bottom_to_top readout the sensor pixel (W-1-u, H-1-v), the image is
flipped back like the pinhole path's rolled camera), then to its undistorted ray by Newton's method in
float32, at most OSL_NEWTON_STEPS steps, started from a guess interpolated in a coarse table of exact rays
(`newton_start_table`: opencv (x, y) bilinear on a GUESS_NODES grid of pixels, fisheye theta linear in the
distorted radius; float32 of contracts.lens.unproject). A pixel leaves the loop at its first zero step (a float32
fixed point) or once it is in a 2-cycle at the value the last step gives, so its ray is bit for bit the one all
the steps from that start give (contracts/lens.py states the model; the exporter re-derives every label on the
exact float64 ray from contracts.lens.unproject_grid, so the labels do not depend on the start: bench event,
payloads sha256-identical with the plain start). A float32 numpy model of the loops (1280x720, the bench lenses)
gives 4.45 -> 2.94 passes per pixel (opencv; 89% of rays unchanged, the rest within the float32 loop's own error,
largest error vs the float64 ray 2.3e-7 -> 2.0e-7) and 2.66 -> 2.25 (fisheye; 99.4% unchanged). Pixels outside the
valid domain shoot no ray (throughput 0 -> no hit).
The render camera is a child of the sensor camera with identity local axes; Cycles' camera space is the
Blender-local frame with z negated, so an OpenCV ray (x, y, 1) is emitted as (x, -y, 1).
Rows keep the pinhole path's timing: the same TOP rolling shutter and half-row correction
(cycles_timing.label_shutter), measured for custom cameras too (DESIGN.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contracts.errors import RowbeamError
from contracts.lens import Lens, make_lens, unit_ray_grid, unit_rays, unproject, unproject_grid

from . import blender_compat
from .osl_camera import make_custom_camera

OSL_NEWTON_STEPS = 12
GUESS_NODES = 33          # nodes of the Newton start table along the image's longer side (fisheye: along the radius)
LENS_CAMERA_METHOD = ("generated OSL custom camera (exporter/lens_camera.py), child of the sensor camera: each pixel "
                      "centre unprojected through the lens (Newton, float32, started from a coarse table of exact "
                      "rays, at most osl_newton_steps, stopping at a fixed point or 2-cycle) to its ray; labels "
                      "re-derived on the exact float64 ray (contracts.lens.unproject); bottom_to_top readout: pixel "
                      "(W-1-u, H-1-v), image flipped back")

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
    float GX[{nodes}] = {{{gx}}};       // exact x, y of the table's pixels (float32), row-major
    float GY[{nodes}] = {{{gy}}};
    float gu = clamp(pu * {su}, 0.0, {nu1});
    float gv = clamp(pv * {sv}, 0.0, {nv1});
    int iu = min(int(floor(gu)), {nu2});
    int iv = min(int(floor(gv)), {nv2});
    float fu = gu - iu;
    float fv = gv - iv;
    int c = iv * {nu} + iu;
    float x = (GX[c] * (1.0 - fu) + GX[c + 1] * fu) * (1.0 - fv) + (GX[c + {nu}] * (1.0 - fu) + GX[c + {nu} + 1] * fu) * fv;
    float y = (GY[c] * (1.0 - fu) + GY[c + 1] * fu) * (1.0 - fv) + (GY[c + {nu}] * (1.0 - fu) + GY[c + {nu} + 1] * fu) * fv;
    float x1 = 1e30;                        // the iterate before the last (none yet)
    float y1 = 1e30;
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
        float x0 = x1;
        float y0 = y1;
        x1 = x;
        y1 = y;
        x -= sx;
        y -= sy;
        if (x == x0 && y == y0 && ({steps} - 1 - i) % 2 == 0)
            break;                          // a 2-cycle, at the value the last step gives
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
    float GT[{nodes}] = {{{gt}}};       // exact theta at distorted radii j / {sr} (float32)
    float gr = min(td * {sr}, {nr1});
    int j = min(int(floor(gr)), {nr2});
    float fr = gr - j;
    float th = min(GT[j] * (1.0 - fr) + GT[j + 1] * fr, {max_theta});
    float t1 = -1.0;                        // the iterate before the last (none yet)
    for (int i = 0; i < {steps}; i++) {{
        float t2 = th * th;
        float f = th * (1.0 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4)))) - td;
        float df = 1.0 + t2 * (3.0 * k1 + t2 * (5.0 * k2 + t2 * (7.0 * k3 + t2 * 9.0 * k4)));
        float next = clamp(th - f / df, 0.0, {max_theta});
        if (next == th)
            break;                          // a fixed point: every later step is zero too
        float t0 = t1;
        t1 = th;
        th = next;
        if (th == t0 && ({steps} - 1 - i) % 2 == 0)
            break;                          // a 2-cycle, at the value the last step gives
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
    if lens.model != "pinhole":
        fields.update(_table_fields(lens, newton_start_table(lens)))
    return head + BODY[lens.model].format(**fields)


def newton_start_table(lens: Lens) -> dict:
    """The lens camera's Newton start table, exact (float64, contracts.lens.unproject) and rounded to float32:
    opencv: {"x", "y"} (ny, nx) undistorted normalized coordinates at the pixels u = i (W-1)/(nx-1),
    v = j (H-1)/(ny-1) (GUESS_NODES along the longer side); fisheye: {"theta"} (n,) rad at distorted normalized
    radii r_j = j * step, j = 0..GUESS_NODES-1, up to the image's largest distorted radius, "step". Nodes outside
    the valid domain hold the loop's plain start (x_d, y_d) / min(r, max_theta)."""
    W, H = lens.width, lens.height
    K = lens.K
    if lens.model == "opencv":
        nu = GUESS_NODES if W >= H else max(2, round(GUESS_NODES * W / H))
        nv = GUESS_NODES if H > W else max(2, round(GUESS_NODES * H / W))
        u = np.linspace(0.0, W - 1.0, nu)[None, :]
        v = np.linspace(0.0, H - 1.0, nv)[:, None]
        rays, ok, _ = unproject(lens, u, v)
        xd, yd = np.broadcast_arrays((u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1])
        return {"x": np.where(ok, rays[..., 0], xd).astype(np.float32),
                "y": np.where(ok, rays[..., 1], yd).astype(np.float32)}
    corners = np.array([[0.0, 0.0], [W - 1.0, 0.0], [0.0, H - 1.0], [W - 1.0, H - 1.0]])
    r_top = float(np.hypot((corners[:, 0] - K[0, 2]) / K[0, 0], (corners[:, 1] - K[1, 2]) / K[1, 1]).max())
    r = np.linspace(0.0, r_top, GUESS_NODES)
    rays, ok, _ = unproject(lens, K[0, 2] + r * K[0, 0], np.full(r.shape, K[1, 2]))     # along +x from the centre
    theta = np.where(ok, np.arctan(np.abs(rays[:, 0])), np.minimum(r, lens.max_theta_rad))
    return {"theta": theta.astype(np.float32), "step": r_top / (GUESS_NODES - 1)}


def _table_fields(lens: Lens, table: dict) -> dict:
    """The OSL source fields of a newton_start_table (float32 values written exactly, in repr)."""
    def values(a):
        return ", ".join(repr(float(x)) for x in a.ravel())
    if "theta" in table:
        n = table["theta"].size
        return {"nodes": n, "gt": values(table["theta"]), "sr": _f(1.0 / table["step"]), "nr1": _f(n - 1),
                "nr2": n - 2}
    nv, nu = table["x"].shape
    return {"nodes": nu * nv, "gx": values(table["x"]), "gy": values(table["y"]), "nu": nu, "nu1": _f(nu - 1),
            "nu2": nu - 2, "nv1": _f(nv - 1), "nv2": nv - 2, "su": _f((nu - 1) / (lens.width - 1.0)),
            "sv": _f((nv - 1) / (lens.height - 1.0))}


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
    bottom_to_top readout come out rolled 180 deg like the pinhole path's (camera_event.unflip)."""
    source = lens_shader_source(lens, sensor_id, flip=direction != "top_to_bottom")
    return make_custom_camera(patch, scene, cam_obj, source, "rowbeam_lens_camera")


@dataclass(frozen=True)
class PixelRays:
    """The exact rays of image rows' pixel centres through a lens (contracts.lens.unit_rays of (x, y, 1)), NaN
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
    """Exact rays of pixel centres in rows first_row.. (read-only views of contracts.lens.unit_ray_grid, solved once
    per lens and process, shared with the checker); and the largest achieved unprojection residual (px) over valid
    pixels of those rows."""
    rows = lens.height - first_row if rows is None else rows
    _, ok, residual = (a[first_row:first_row + rows] for a in unproject_grid(lens))
    return PixelRays(*unit_ray_grid(lens))[first_row:first_row + rows], float(residual[ok].max(initial=0.0))
