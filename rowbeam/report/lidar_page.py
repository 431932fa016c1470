"""The report page of a spinning-LiDAR sweep (registered as the LiDAR type's "report_page")."""
from __future__ import annotations

import numpy as np

from rowbeam.report import colour, html, motion, overlays
from rowbeam.report.page_parts import PageContext, ReportPage, _class_names
from rowbeam.sensors import sensor_hook
from rowbeam.sensors.lidar import LIDAR


def lidar_page(ev, page: PageContext) -> str:
    """HTML body of a LiDAR sweep's page: range image, top-down views by time offset, motion compensation; adds the
    range-vs-point residuals to page.res and the valid-beam counts to page.stats."""
    w, rel, res, stats = page.w, page.rel, page.res, page.stats
    m = ev.manifest
    a = ev.arrays(verify=page.verify)
    beams = m["calibration"]["beams"]["channels"]
    names = _class_names(m)
    F, C = a["range"].shape
    parts = [f"<p>LiDAR sweep, {F} firings × {C} channels, sweep start {m['event']['sweep_start_ns']} ns, "
             f"reference time {m['event']['reference_time_ns']} ns</p>"]
    img, leg = overlays.lidar_range_image(a, [b["elevation_deg"] for b in beams])
    bar = w.image(f"{rel}/range_bar", colour.colour_bar())
    parts.append(html.figure(w.image(f"{rel}/range_image", img),
                             "range image: rows = channels by elevation (top = highest), columns = firings",
                             html.colour_bar(bar, leg, "range [m]")))
    pts = a["points"]
    xy = np.stack([pts["x"], pts["y"]], -1)
    dt = (pts["t_ns"] - int(m["event"]["sweep_start_ns"])).astype(np.float64)
    tlo, thi = 0.0, max(float(dt.max(initial=0)), 1.0)
    cols = colour.colourise(dt, tlo, thi)
    sets, cols_sets, captions = [xy], [cols], ["top-down, LiDAR frame at each point's own time (raw), coloured by time offset"]
    if "points_motion_compensated" in a:
        mc = a["points_motion_compensated"]
        sets.append(mc[:, :2])
        cols_sets.append(cols)
        captions.append("top-down, motion compensated to the reference time, coloured by time offset")
    imgs, extent = overlays.top_down(sets, cols_sets)
    tbar = w.image(f"{rel}/time_bar", colour.colour_bar())
    for i, (im, cap) in enumerate(zip(imgs, captions, strict=True)):
        parts.append(html.figure(w.image(f"{rel}/top_down_{i}", im), f"{cap}; x forward = up, y left = left, "
                                 f"half width {extent:.3g} m", html.colour_bar(tbar, {"lo": tlo, "hi": thi, "log": False},
                                                                                "time offset [ns]")))
    if len(sets) == 2:
        diff = np.linalg.norm(np.stack([pts["x"], pts["y"], pts["z"]], -1) - a["points_motion_compensated"], axis=-1)
        parts.append(f"<p>motion compensation moves points by {np.quantile(diff, 0.5) if diff.size else 0:.3g} m "
                     f"(median), {diff.max(initial=0):.3g} m (max)</p>")
    valid = a["valid"] == 1
    k, c = np.nonzero(valid)
    if k.size == len(pts):
        rng = a["range"][k, c].astype(np.float64)
        klass = pts["semantic_id"]
        res.class_names.update(names)
        xyz = np.stack([pts["x"], pts["y"], pts["z"]], -1)
        res.add("lidar.range_vs_point_m", "m", np.abs(np.linalg.norm(xyz, axis=-1) - rng),
                "|range − |point xyz|| (LiDAR frame at the beam's time)", distance=rng, klass=klass,
                speed=motion.beam_speeds(ev, pts))
    stats.lidar_valid += [int(valid.sum()), valid.size]
    return "".join(parts)


sensor_hook(LIDAR, "report_page")(ReportPage("lidar_sweep", lidar_page))
