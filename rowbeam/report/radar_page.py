"""The report page of one radar frame: range-azimuth and range-Doppler images of its returns, a top-down plot and
the returns in the time-matched rows of every camera event that overlaps the frame in time, all coloured by radial
velocity (m/s, positive = receding, rowbeam.sensors.radar); its range residual with distance, speed and class slices."""
from __future__ import annotations

import math

import numpy as np

from rowbeam.model import qa_profile as tol
from rowbeam.bundle.associations import span_ns
from rowbeam.util.errors import RowbeamError
from rowbeam.report import colour, html, motion, overlays
from rowbeam.report.page_parts import PageContext, ReportPage
from rowbeam.sensors import sensor_hook
from rowbeam.sensors.radar import RADAR

CAMERA_ARRAYS = ["row_time_ns", "row_T_world_camera", "camera_z", "valid"]


def velocity_limit(radial_velocity) -> float:
    """Colour range ±v_max (m/s) of a frame: the largest |v_r| rounded up to a whole m/s, at least 1."""
    v = np.asarray(radial_velocity, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(max(1, math.ceil(np.abs(v).max(initial=0.0))))


def radar_page(ev, page: PageContext) -> str:
    """HTML body of a radar frame's page; images through the report Writer page.w under img/<page.rel>/."""
    w, rel, res = page.w, page.rel, page.res
    cameras = page.events_of(lambda t: t.has_rows)
    m = ev.manifest
    a = ev.arrays(verify=page.verify)
    K, B = a["range"].shape
    cal = m["calibration"]
    valid = a["valid"] == 1
    pts = a["points"]
    vr = pts["radial_velocity"]
    v_max = velocity_limit(vr)
    r_max = float(cal["range_limits_m"]["max"])
    r_shown = min(r_max, max(1.0, float(np.ceil(pts["range"].max(initial=1.0) * 1.05))))
    vleg = {"lo": -v_max, "hi": v_max, "log": False}
    vbar = w.image(f"{rel}/velocity_bar", colour.velocity_bar())
    vunit = "radial velocity [m/s] (blue = approaching, red = receding)"
    parts = [f"<p>radar frame, {K} chirps × {B} beams, frame start {m['event']['frame_start_ns']} ns, reference time "
             f"{m['event']['reference_time_ns']} ns; {int(valid.sum())} returns, radial velocity "
             + (f"{float(vr.min()):.3g}…{float(vr.max()):.3g} m/s" if vr.size else "–") + " (positive = receding)</p>"]
    img, leg = overlays.radar_range_azimuth(a["range"], a["azimuth_deg"], a["radial_velocity"], a["valid"], r_shown,
                                            v_max)
    az = leg["azimuths_deg"]
    parts.append(html.figure(w.image(f"{rel}/range_azimuth", img),
                             f"range-azimuth: columns = beam azimuths {az[0]:+.3g}° (left) … {az[-1]:+.3g}° (right), "
                             f"rows = range 0 m (bottom) … {r_shown:g} m (top); cell = mean radial velocity, "
                             "white = no return", html.colour_bar(vbar, vleg, vunit)))
    img, leg = overlays.radar_range_doppler(a["range"], a["radial_velocity"], a["valid"], r_shown, v_max)
    cbar = w.image(f"{rel}/count_bar", colour.colour_bar())
    parts.append(html.figure(w.image(f"{rel}/range_doppler", img),
                             f"range-Doppler: columns = radial velocity −{v_max:g} (left) … +{v_max:g} m/s (right), "
                             f"rows = range 0 m (bottom) … {r_shown:g} m (top); colour = returns per cell",
                             html.colour_bar(cbar, leg, "returns")))
    cols = colour.velocity_colour(vr, v_max)
    imgs, extent = overlays.top_down([np.stack([pts["x"], pts["y"]], -1)], [cols], radius=1)
    parts.append(html.figure(w.image(f"{rel}/top_down", imgs[0]),
                             f"top-down, radar frame at each chirp's time (x forward = up, y left = left, half width "
                             f"{extent:.3g} m), coloured by radial velocity", html.colour_bar(vbar, vleg, vunit)))
    parts.append(_in_cameras(ev, pts, cameras, w, rel, v_max, vbar, vleg, vunit))
    names = {c["id"]: c["name"] for c in m.get("ontology", {}).get("classes", [])}
    res.class_names.update(names)
    xyz = np.stack([pts["x"], pts["y"], pts["z"]], -1)
    res.add("radar.range_vs_point_m", "m", np.abs(np.linalg.norm(xyz, axis=-1) - pts["range"]),
            "|range − |point xyz|| (radar frame at the chirp's time)", distance=pts["range"],
            speed=motion.beam_speeds(ev, pts), klass=pts["semantic_id"])
    return "".join(parts)


def _in_cameras(ev, pts, cameras, w, rel, v_max, vbar, vleg, vunit) -> str:
    """The radar returns in the time-matched rows of each camera event overlapping the frame (within the skew
    tolerance), with the rows the association rule (rowbeam.bundle.associations) pairs with chirps."""
    out = []
    r0, r1 = span_ns(ev.manifest)
    max_skew = tol.LIDAR_CAMERA_MAX_SKEW_NS
    for cam in cameras:
        try:
            c0, c1 = span_ns(cam.manifest)
            if c1 < r0 - max_skew or c0 > r1 + max_skew:
                continue
            ca = cam.arrays(CAMERA_ARRAYS + (["rgb"] if "rgb" in cam.names else []), verify=False)
            got = overlays.radar_in_camera(ev.manifest, pts, cam.manifest, ca, overlays.backdrop(ca), v_max, max_skew)
        except (RowbeamError, OSError, KeyError, ValueError) as exc:
            out.append(f"<p class=\"warn\">camera {html.esc(cam.path.name)}: {html.esc(exc)}</p>")
            continue
        name = f"camera_{cam.sensor}_{cam.index}"
        out.append(f"<h2>In camera {html.esc(cam.sensor)}/{cam.index:06d}, time-matched rows</h2><p>"
                   f"{got['rows_paired']} camera rows pair with {len(got['chirp_row'])} chirps within "
                   f"{max_skew / 1e6:g} ms (rowbeam/associations@1 rule); {got['matched']} returns of those chirps "
                   f"land in the image (coloured squares); grey dots: returns of the other chirps ({got['inside']} "
                   "inside in all)</p>")
        out.append(html.figure(w.image(f"{rel}/{name}", got["image"]),
                               "radar returns projected with the pose of the camera row paired with their chirp "
                               "(through the lens when the camera has one), coloured by radial velocity",
                               html.colour_bar(vbar, vleg, vunit)))
    return "".join(out)


sensor_hook(RADAR, "report_page")(ReportPage("radar_frame", radar_page))
