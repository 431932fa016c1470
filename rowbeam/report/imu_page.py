"""The report page of one IMU event: angular velocity and specific force per axis over the event's samples (truth,
and the measured channel where the event has one), as inline SVG plots, with the derivative scheme and noise model."""
from __future__ import annotations

import numpy as np

from rowbeam.report import html
from rowbeam.report.page_parts import PageContext, ReportPage
from rowbeam.sensors import sensor_hook
from rowbeam.sensors.imu import IMU

AXIS_COLOURS = ("#d62728", "#2ca02c", "#1f77b4")          # x red, y green, z blue
WIDTH, HEIGHT = 640, 180


def svg_plot(t_s: np.ndarray, series: list, title: str, unit: str) -> str:
    """Inline SVG of (S, 3) series over t_s (S,): solid truth, dotted further series; axes labelled with the range."""
    values = np.concatenate([s.ravel() for s in series])
    lo, hi = float(values.min()), float(values.max())
    if hi - lo < 1e-12:
        lo, hi = lo - 1.0, hi + 1.0
    t0, t1 = float(t_s[0]), float(t_s[-1]) if len(t_s) > 1 else float(t_s[0]) + 1.0
    span = (t1 - t0) or 1.0

    def points(y):
        x = 40 + (t_s - t0) / span * (WIDTH - 50)
        yy = HEIGHT - 20 - (y - lo) / (hi - lo) * (HEIGHT - 40)
        return " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(x, yy, strict=True))

    lines = []
    for k, s in enumerate(series):
        dash = "" if k == 0 else " stroke-dasharray=\"2,3\""
        for axis in range(3):
            lines.append(f"<polyline fill=\"none\" stroke=\"{AXIS_COLOURS[axis]}\" stroke-width=\"1.5\"{dash} "
                         f"points=\"{points(s[:, axis])}\"/>")
    return (f"<figure><svg width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" "
            f"aria-label=\"{html.esc(title)}\"><rect width=\"100%\" height=\"100%\" fill=\"white\"/>"
            f"<text x=\"2\" y=\"14\" font-size=\"11\">{hi:.4g}</text>"
            f"<text x=\"2\" y=\"{HEIGHT - 22}\" font-size=\"11\">{lo:.4g}</text>{''.join(lines)}</svg>"
            f"<figcaption>{html.esc(title)} [{html.esc(unit)}] over {span:.4g} s; x red, y green, z blue (IMU frame)"
            f"{'; dotted: measured (noise model)' if len(series) > 1 else ''}</figcaption></figure>")


def imu_page(ev, page: PageContext) -> str:
    """HTML body of an IMU event's page."""
    m = ev.manifest
    a = ev.arrays(verify=page.verify)
    t = a["sample_time_ns"]
    t_s = (t - t[0]) * 1e-9
    cal = m["calibration"]
    d = cal["derivatives"]
    parts = [f"<p>IMU event, {len(t)} samples at {m['event']['rate_hz']} Hz from {int(t[0])} ns; derivatives: "
             f"{html.esc(d['scheme'])}" + (f" (step {d['step_ns']} ns, {html.esc(d.get('reason', ''))}; estimated "
                                         f"error {html.esc(d.get('estimated_error'))})" if "step_ns" in d else "")
             + f"; gravity {cal['gravity_mps2']} m/s² (world)"
             + ("; noise model seed " + str(cal["noise"]["seed"]) if "noise" in cal else "") + "</p>"]
    for name, unit in (("angular_velocity", "rad/s"), ("specific_force", "m/s²")):
        series = [a[name]] + ([a[f"{name}_measured"]] if f"{name}_measured" in a else [])
        parts.append(svg_plot(t_s, series, name.replace("_", " "), unit))
    return "".join(parts)


sensor_hook(IMU, "report_page")(ReportPage("imu_samples", imu_page))
