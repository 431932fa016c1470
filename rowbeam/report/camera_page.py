"""The report page of a rolling-shutter camera event: images, legends, row timing, objects, the camera contracts'
residuals and the time-matched LiDAR returns (registered as the camera type's "report_page")."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rowbeam.bundle.arrays import channel_planes
from rowbeam.check.camera_checks import manifest_lens
from rowbeam.check.coverage_checks import coverage_disagreement, edge_radius
from rowbeam.model.camera_model import norm, ray_directions
from rowbeam.model.lens import image_rays
from rowbeam.report import colour, html, motion, overlays
from rowbeam.report.page_parts import (
    OPEN_TABLE_ROWS,
    PageContext,
    ReportPage,
    _class_counts,
    _class_names,
    _finite_on,
    _id_counts,
    _instance_legend,
    _radius,
    _scalar_block,
    auto_exposure,
)
from rowbeam.report.stats import sample_pixels
from rowbeam.sensors import sensor_hook
from rowbeam.sensors.camera import CAMERA
from rowbeam.sensors.lidar import LIDAR
from rowbeam.util.errors import RowbeamError


@dataclass
class _View:
    """One camera event's arrays as the page reads them. a: decoded arrays (the checker's when it kept them);
    K (3, 3); H, W px; valid (H, W) bool; names {class id: name}; checked_valid: the checker's validity_consistency
    passed (every float label finite exactly where valid), checked_ids: its semantic_matches_instance passed."""

    ev: object
    a: dict
    K: np.ndarray
    H: int
    W: int
    valid: np.ndarray
    names: dict
    checked_valid: bool
    checked_ids: bool


def camera_page(ev, page: PageContext) -> str:
    """HTML body of a camera event's page; adds its residuals to page.res and its statistics to page.stats."""
    m = ev.manifest
    checked = None if page.verify else (page.checked or {}).get(ev.path.resolve())
    a = checked if checked is not None and all(n in checked for n in ev.names) else ev.arrays(verify=page.verify)
    H, W = a["camera_z"].shape
    cam = _View(ev, a, np.array(m["calibration"]["K"], dtype=np.float64), H, W, a["valid"] == 1, _class_names(m),
                page.passed("validity_consistency"), page.passed("semantic_matches_instance"))
    lidars = page.events_of(lambda t: t.name == LIDAR)
    parts = [f"<p>camera event, {W}×{H} px, reference time {m['event']['reference_time_ns']} ns, "
             f"sample {html.esc(m['sample_id'])}</p><h2>Images</h2>"]
    logs = {} if ev.object_labels or lidars else None     # the camera_z (log) image, when a backdrop needs it
    z_valid = _images(cam, page, parts, logs)
    _id_images(cam, page, parts)
    if "rgb_coverage" in a:
        parts.append(_surface_policy(cam, page))
    if "layer_camera_z" in a:
        parts.append(_surface_layers(cam, page))
    parts.append(_timing_band(cam, page))
    base = None                                     # the grey backdrop, only for overlays drawn on it
    if ev.object_labels or lidars:
        base = overlays.backdrop(a) if "rgb" in a else overlays.greyscale(logs["camera_z"])   # = backdrop(a)
    if ev.object_labels:
        parts.append(_objects(cam, page, base))
    for o in m["objects"]:
        page.stats.objects[(o.get("class_tag"), str(o["id"]))] = o.get("motion")
    _residuals(cam, page)
    page.stats.camera_valid += [int(np.count_nonzero(cam.valid)), cam.valid.size]
    page.stats.depth.append(z_valid)               # (ascending, its own dtype: the statistics read it as float64)
    for lid in lidars:                              # LiDAR returns in the time-matched camera rows
        parts.append(_lidar_in_camera(cam, page, lid, base))
    return "".join(parts)


def _images(cam: _View, page: PageContext, parts: list, logs) -> np.ndarray:
    """rgb, camera_z, range and normal figures appended to parts; returns camera_z at the valid pixels, sorted."""
    a, w, rel, valid = cam.a, page.w, page.rel, cam.valid
    if "rgb" in a:
        gain = auto_exposure(a["rgb"])
        parts.append(html.figure(w.image(f"{rel}/rgb", colour.srgb(a["rgb"], gain)),
                                 f"rgb (scene linear × {gain:.3g} → sRGB, clipped)"))
    else:
        parts.append("<p>no rgb exported (rgb_samples 0)</p>")
    z_valid = a["camera_z"][valid]                 # its percentiles (colour range) and the depth statistics:
    z_valid.sort()                                 # (a fresh array: sorted in place)
    parts.append(_scalar_block(w, rel, "camera_z", a["camera_z"], valid, "camera_z [m]", "camera_z", logs, z_valid))
    parts.append(_scalar_block(w, rel, "range", a["range"], valid, "range [m]", "range"))
    both = "normal_geometric" in a and "normal_shading" in a      # often the same image (flat shading): encoded once
    for n in ("normal_geometric", "normal_shading"):       # images made on the Writer's threads from `a`
        if n in a:
            planes = channel_planes(a, n)                 # (taken here: the worker reads only these arrays)
            img = lambda p=planes: colour.normal_colour(p, valid if cam.checked_valid else None)  # noqa: E731
            pair = {"keep": both} if n == "normal_geometric" else {"same_as": f"{rel}/normal_geometric" if both else None}
            if both and cam.checked_valid and n == "normal_shading":   # both finite exactly where valid: compare the
                g = channel_planes(a, "normal_geometric")              # bytes where the floats differ, before the image
                pair["same"] = lambda p=planes, g=g: colour.same_normal_colours(p, g, valid)
            parts.append(html.figure(w.image(f"{rel}/{n}", img, shape=(cam.H, cam.W), **pair),
                                     f"{n} (camera frame: RGB = (n+1)/2, x right red, y down green, z forward blue)"))
    return z_valid


def _id_images(cam: _View, page: PageContext, parts: list) -> None:
    """instance_id and semantic_id figures with their legends appended to parts; class pixel counts into stats."""
    a, w, rel, m, names = cam.a, page.w, page.rel, cam.ev.manifest, cam.names
    parts.append(html.figure(w.image(f"{rel}/instance_id", lambda: overlays.id_indexed(a["instance_id"], m["objects"]),
                                     shape=(cam.H, cam.W)), "instance_id (colour of the stable 64-bit id)"))
    instances = _id_counts(a["instance_id"])
    parts.append(_instance_legend(*instances, m["objects"], names))
    parts.append(html.figure(w.image(f"{rel}/semantic_id", lambda: overlays.semantic_indexed(a["semantic_id"]),
                                     shape=(cam.H, cam.W)), "semantic_id"))
    present, counts = _class_counts(*instances, m["objects"]) if cam.checked_ids else _id_counts(a["semantic_id"])
    parts.append("<h3>Class legend</h3>" + html.table(
        ["", "semantic id", "class", "pixels"],
        [[html.swatch(overlays.semantic_colour(int(c))), int(c), html.esc(names.get(int(c), "?")), int(n)]
         for c, n in zip(present, counts, strict=True)]))
    for c, n in zip(present, counts, strict=True):             # share of all pixels, background included
        label = names.get(int(c), str(int(c)))
        page.stats.class_pixels[label] = page.stats.class_pixels.get(label, 0) + int(n)


def _surface_policy(cam: _View, page: PageContext) -> str:
    """Where the surface policy decided (magenta) and where labels and rgb coverage disagree (red)."""
    m, a = cam.ev.manifest, cam.a
    d = coverage_disagreement(a["valid"], a["rgb_coverage"], a.get("policy_mask"), edge_radius(m))
    img = overlays.surface_policy_overlay(a, d["hole"] | d["phantom"])
    policy = m.get("method", {}).get("surface_policy", {})
    return "<h2>Surface policy</h2>" + html.figure(
        page.w.image(f"{page.rel}/surface_policy", img),
        f"magenta: pixels decided by transparency or the surface policy (alpha_threshold "
        f"{policy.get('alpha_threshold', '?')}, transmission {policy.get('transmission', '?')}, volumes "
        f"{policy.get('volumes', '?')}); red: label holes or labels where the rgb saw no surface (label_coverage)")


def _surface_layers(cam: _View, page: PageContext) -> str:
    """The surface-layer stack (rig surface_policy.layers = L): for each layer l, the camera_z (linear and log) and
    opacity (colour map over [0, 1]) of the l-th surface each label ray crossed, and its instance ids; NO_DATA colour
    where the ray crossed fewer than l + 1 surfaces."""
    a, w, rel, m = cam.a, page.w, page.rel, cam.ev.manifest
    L = a["layer_camera_z"].shape[2]
    parts = [f"<h2>Surface layers</h2><p>the first {L} surfaces along each pixel-centre label ray, nearest first; the "
             "label is the first layer whose opacity reaches the alpha threshold</p>"]
    bar = w.image(f"{rel}/layer_opacity_bar", colour.colour_bar())
    for k in range(L):
        z = np.ascontiguousarray(a["layer_camera_z"][..., k])
        present = np.isfinite(z)
        parts.append(_scalar_block(w, rel, f"layer_{k}_camera_z", z, present, "camera_z [m]",
                                   f"layer {k} camera_z ({int(np.count_nonzero(present))} px)"))
        op = np.ascontiguousarray(a["layer_opacity"][..., k])
        parts.append(html.figure(w.image(f"{rel}/layer_{k}_opacity", lambda op=op, p=present: colour.colour_indices(
            op, 0.0, 1.0, False, p), shape=(cam.H, cam.W)), f"layer {k} opacity",
            html.colour_bar(bar, {"lo": 0.0, "hi": 1.0, "log": False}, "opacity")))
        ids = np.ascontiguousarray(a["layer_instance_id"][..., k])
        parts.append(html.figure(w.image(f"{rel}/layer_{k}_instance_id", lambda ids=ids: overlays.id_indexed(
            ids, m["objects"]), shape=(cam.H, cam.W)), f"layer {k} instance_id (colour of the stable 64-bit id)"))
    return "".join(parts)


def _timing_band(cam: _View, page: PageContext) -> str:
    """The rolling-shutter timing figure: each row's reference time and exposure window."""
    ev_t = cam.ev.manifest["event"]
    band, leg = overlays.timing_band(cam.a["row_time_ns"], int(ev_t["exposure_ns"]))
    return "<h2>Rolling-shutter timing</h2>" + html.figure(
        page.w.image(f"{page.rel}/timing_band", band),
        f"row time vs row (row v of this image = image row v; {ev_t['readout_direction']}): dark = row reference "
        f"time, light = exposure window of {ev_t['exposure_ns'] / 1e6:g} ms; x from {leg['t0_ns']} ns (left) to "
        f"{leg['t1_ns']} ns (right), readout {ev_t['readout_ns'] / 1e6:g} ms")


def _objects(cam: _View, page: PageContext, base) -> str:
    """The object overlay and table; visibility and asset counts into stats."""
    ev, stats = cam.ev, page.stats
    img, rows = overlays.object_overlay(ev, cam.a, base)
    out = "<h2>Objects</h2>" + html.figure(page.w.image(f"{page.rel}/objects", img),
                                           "modal contour + box (cyan), amodal contour + clipped box (yellow), axes at "
                                           "T_camera_object_reference (x red, y green, z blue)")
    table = html.table(["id", "name", "class", "px visible", "px all", "visib_fract", "truncation", "occlusion"],
                       [[html.fmt(r[k]) for k in ("id", "name", "class", "px_count_visib", "px_count_all",
                                                   "visib_fract", "truncation_fraction", "occlusion_fraction")]
                        for r in rows])
    shown = " open" if len(rows) <= OPEN_TABLE_ROWS else ""   # a long table: folded, the overlays below stay near
    out += (f"<details{shown}><summary>object table: {len(rows)} objects (pixel counts, visib_fract, "
            f"truncation, occlusion)</summary>{table}</details>")
    stats.visib += [r["visib_fract"] for r in rows if r["visib_fract"] is not None]
    for o in ev.object_labels:
        sha = (o.get("asset") or {}).get("sha256")
        if sha:
            stats.assets[sha[:12]] = stats.assets.get(sha[:12], 0) + 1
    return out


def _residuals(cam: _View, page: PageContext) -> None:
    """Residuals of the camera contracts at the valid pixels, computed at the subset Residuals keeps of them
    (stats.sample_pixels) when the inputs are finite there (so is every residual), else at every valid pixel."""
    a, res, K, W, H = cam.a, page.res, cam.K, cam.W, cam.H
    normals = [n for n in ("normal_geometric", "normal_shading") if n in a]
    if cam.checked_valid or _finite_on(cam.valid, [a["camera_z"], a["range"], *(a[n] for n in normals)]):
        pix, count = sample_pixels(cam.valid)
    else:
        pix, count = np.flatnonzero(cam.valid), None
    v, u = (x.astype(np.float64) for x in np.divmod(pix, W))     # pixel centres (camera_model.pixel_grid)
    res.class_names.update(cam.names)
    z = a["camera_z"].ravel()[pix].astype(np.float64)
    lens = manifest_lens(cam.ev.manifest["calibration"])   # a distorted camera: rays through the lens (model.lens)
    d = ray_directions(K, u, v) if lens is None else image_rays(lens, W, H).reshape(-1, 3)[pix]
    keys = {"distance": z, "radius": _radius(K, W, H, u, v), "klass": a["semantic_id"].ravel()[pix],
            "speed": motion.camera_speeds(cam.ev, a, pix, d)}   # sliced by class id; res.class_names names them
    factor = norm(d)             # range / camera_z on each pixel-centre ray
    res.add("camera.z_range_m", "m", np.abs(a["range"].ravel()[pix] - z * factor),
            "|range − camera_z·|ray|| per valid pixel (ray = (x_n, y_n, 1) through the pixel centre)", **keys, count=count)
    for n in normals:
        nv = [p.reshape(-1)[pix].astype(np.float64) for p in channel_planes(a, n)]    # at the sampled pixels (x, y, z)
        res.add(f"camera.{n}_unit", "1", np.abs(norm(nv) - 1), f"| |{n}| - 1 | per valid pixel", **keys, count=count)
        if n == "normal_geometric":
            facing = nv[0] * (d[:, 0] / factor)     # n_g · d / |d|, summed x, y, z in that order (as (n * d).sum(-1))
            for c in (1, 2):
                facing += nv[c] * (d[:, c] / factor)
            res.add("camera.geometric_facing", "1", np.maximum(0.0, facing, out=facing),
                    "max(0, n_g · ray direction): > 0 means a geometric normal facing away from the camera", **keys,
                    count=count)


def _lidar_in_camera(cam: _View, page: PageContext, lid, base) -> str:
    """One LiDAR sweep's returns in the time-matched camera rows: residual and skew figures, their residuals."""
    w, rel, m, a = page.w, page.rel, cam.ev.manifest, cam.a
    try:
        pairs = overlays.lidar_in_camera(lid.manifest, {"points": lid.array("points")}, m, a, base)
    except (RowbeamError, KeyError, ValueError) as exc:
        return f"<p class=\"warn\">LiDAR {html.esc(lid.path.name)}: {html.esc(exc)}</p>"
    if pairs is None:
        return ""
    name = f"{rel}/lidar_{lid.sensor}_{lid.index}"
    bar1 = w.image(f"{name}_res_bar", colour.colour_bar())
    bar2 = w.image(f"{name}_skew_bar", colour.colour_bar())
    out = (f"<h2>LiDAR {html.esc(lid.sensor)}/{lid.index:06d} in time-matched camera rows</h2>"
           f"<p>{pairs['pairs']} static returns paired (of {pairs['inside']} projected inside the image; "
           "grey = inside but not paired: other surface, edge or skew)</p>")
    out += html.figure(w.image(f"{name}_residual", pairs["residual"]), "|camera_z − return's z| at the matched row",
                       html.colour_bar(bar1, pairs["residual_legend"], "m"))
    out += html.figure(w.image(f"{name}_skew", pairs["skew"]), "|row time − return time|",
                       html.colour_bar(bar2, pairs["skew_legend"], "ns"))
    p = pairs["pairs_data"]
    ok = p["paired"]
    if ok.any():
        r = np.clip(np.rint(p["uv"][ok, 1]).astype(int), 0, cam.H - 1)
        c = np.clip(np.rint(p["uv"][ok, 0]).astype(int), 0, cam.W - 1)
        pk = {"distance": p["z"][ok], "radius": _radius(cam.K, cam.W, cam.H, c, r), "klass": a["semantic_id"][r, c],
              "speed": motion.beam_speeds(lid, p["points"][ok])}
        page.res.add("lidar_camera.z_residual_m", "m", np.abs(p["residual_m"][ok]),
                     "|camera_z (1/z-interpolated) − LiDAR return z| at the time-matched row", **pk)
        page.res.add("lidar_camera.skew_ns", "ns", p["skew_ns"][ok], "|row time − return time| of paired returns", **pk)
    return out


sensor_hook(CAMERA, "report_page")(ReportPage("camera_event", camera_page))
