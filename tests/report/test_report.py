"""`rowbeam report` on a real export (the running example at 80x45 with object labels, a 32 x 256 LiDAR
sweep, a radar frame, the state log and one flow pair), opened in headless Chromium from file:// (Debian's
chromium driven by Playwright with executable_path): one page of each kind (camera, flow, LiDAR, radar,
quarantined), no console errors, every image decodes, the depth overlay, its colour bar and the radar
overlays are not blank. Bad input: a failing bundle still gets its report (failures first, quarantined
folders with their reasons and overlays); a folder that is not a bundle: one line, exit 2, nothing written."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rowbeam.bundle.schema import schema_errors

from tests.conftest import REPO
from tests.helpers import run_on_a_terminal

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def dusk(dusk_all_sensors):
    return dusk_all_sensors


def _report(*args):
    return subprocess.run([sys.executable, "-m", "rowbeam", "report", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def report(dusk, tmp_path_factory):
    out = tmp_path_factory.mktemp("rep") / "report"
    r = _report(dusk, "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == ""                                  # piped: no progress output
    assert r.stdout.startswith("rowbeam report: PASS") and len(r.stdout.splitlines()) == 1
    return out


def test_report_json_lists_every_folder_and_every_residual(report):
    doc = json.loads((report / "report.json").read_text())
    assert schema_errors(doc, "rowbeam/report@1") == []
    items = {it["folder"]: it for it in doc["bundles"][0]["items"]}
    assert set(items) == {"events/camera_front/000030", "events/camera_front/000031", "events/lidar_top/000010",
                          "events/radar_front/000020", "events/imu_shuttle/000010", "flows/camera_front/000030-000031"}
    assert {it["kind"] for it in items.values()} == {"camera_event", "lidar_sweep", "radar_frame", "imu_samples", "flow"}
    assert all(it["overlays"] == "ok" and (report / it["page"]).is_file() for it in items.values())
    res = doc["residuals"]
    assert {"camera.z_range_m", "camera.normal_geometric_unit", "lidar.range_vs_point_m", "lidar_camera.z_residual_m",
            "lidar_camera.skew_ns", "flow.cycle_px", "flow.warp_rgb", "radar.range_vs_point_m"} <= set(res)
    # the residuals the checker bounds are inside its tolerances at every quantile (an independent recomputation)
    assert res["lidar_camera.z_residual_m"]["count"] > 0
    assert res["lidar_camera.skew_ns"]["quantiles"]["max"] <= 1_000_000
    assert res["lidar.range_vs_point_m"]["quantiles"]["max"] < 2e-5
    assert res["radar.range_vs_point_m"]["count"] > 0 and res["radar.range_vs_point_m"]["quantiles"]["max"] < 2e-5
    assert res["flow.cycle_px"]["quantiles"]["max"] <= 0.1
    for name in ("camera.z_range_m", "flow.cycle_px", "lidar.range_vs_point_m", "radar.range_vs_point_m"):
        assert {"distance", "speed", "class"} <= set(res[name]["slices"]), name
    assert "radius" in res["camera.z_range_m"]["slices"]
    st = doc["statistics"]
    assert st["counts"] == {"events": 5, "flows": 1, "quarantined": 0}
    assert abs(sum(st["class_pixel_share"].values()) - 1) < 1e-9 and st["class_pixel_share"]["road"] > 0
    assert 0 <= st["camera_invalid_rate"] < 1 and st["mean_visib_fract"] is not None


def test_speed_slices_follow_the_object_table_and_the_state_log(report, dusk):
    """Camera pixels and LiDAR returns on static objects are in the 0 m/s bin, those on the moving pedestrian in the
    bin of its logged speed (|velocity| of its state-log track), counted independently from the arrays."""
    from rowbeam.bundle.reader import Bundle
    from rowbeam.report.stats import SPEED_BINS_M_S, _bin_labels
    from rowbeam.model.state_log import load_state_log

    res = json.loads((report / "report.json").read_text())["residuals"]
    bundle = Bundle.open(dusk)
    labels = _bin_labels(SPEED_BINS_M_S, "m/s")
    expected = {"camera.z_range_m": {}, "lidar.range_vs_point_m": {}}
    for ev in bundle.events():
        if ev.sensor_type not in ("rolling_shutter_camera", "spinning_lidar"):
            continue
        objs = {o["render_index"]: o for o in ev.objects}
        tracks = load_state_log(dusk, ev.manifest["state"])[1]
        if ev.sensor_type == "spinning_lidar":
            ids, name = ev.array("points")["instance_id"], "lidar.range_vs_point_m"
        else:
            ids, name = ev.array("instance_id")[ev.array("valid") == 1], "camera.z_range_m"
        for i, n in zip(*np.unique(ids, return_counts=True), strict=True):
            o = objs.get(int(i), {})
            if o.get("motion") == "static":
                b = labels[0]
            elif o.get("name") == "pedestrian":
                speed = np.linalg.norm(tracks["pedestrian"].velocities(ev.reference_time_ns)[0])
                b = labels[int(np.searchsorted(SPEED_BINS_M_S, speed, side="right")) - 1]
            else:
                continue
            expected[name][b] = expected[name].get(b, 0) + int(n)
    for name, want in expected.items():
        got = {x["bin"]: x["count"] for x in res[name]["slices"]["speed"]}
        assert got[labels[0]] == want[labels[0]], name
        for b, n in want.items():
            assert got.get(b, 0) >= n, (name, b)


def test_overlay_images_are_the_bundle_arrays(report, dusk):
    """The camera_z overlay is the colour map of the exported camera_z (read independently with the loader)."""
    import cv2

    from rowbeam.bundle.reader import Bundle
    from rowbeam.report import colour

    ev = Bundle.open(dusk).event("camera_front", 30)
    z, valid = ev.array("camera_z"), ev.array("valid") == 1
    img = cv2.imread(str(report / "img/bundle/events/camera_front/000030/camera_z.png"))[..., ::-1]
    assert img.shape[:2] == z.shape
    assert (img[~valid] == colour.NO_DATA).all()
    lo, hi = np.percentile(z[valid], [1, 99])
    assert np.array_equal(img[valid], colour.colourise(z, lo, hi)[valid])
    near, far = np.unravel_index(np.nanargmin(z), z.shape), np.unravel_index(np.nanargmax(z), z.shape)
    assert colour.luminance(img[far]) > colour.luminance(img[near]) + 100


def test_instance_legend_gives_each_instance_the_colour_of_its_image(report, dusk):
    """The camera page's instance legend: one row per render index in instance_id, its swatch the colour
    instance_id.png shows at that index's pixels (decoded by OpenCV), its pixel count the array's."""
    import re

    import cv2

    from rowbeam.bundle.reader import Bundle

    ids = Bundle.open(dusk).event("camera_front", 30).array("instance_id")
    img = cv2.imread(str(report / "img/bundle/events/camera_front/000030/instance_id.png"))[..., ::-1]
    page = (report / "pages/bundle_events_camera_front_000030.html").read_text()
    legend = page[page.index("instance legend: "):]
    legend = legend[:legend.index("</details>")]
    rows = re.findall(r'<tr><td><span class="swatch" style="background:rgb\((\d+),(\d+),(\d+)\)"></span></td>'
                      r'<td>(\d+)</td>.*?<td>(\d+)</td></tr>', legend)
    assert sorted(int(r[3]) for r in rows) == np.unique(ids).tolist()
    assert len({r[:3] for r in rows}) == len(rows) > 5               # distinct colours, several instances
    for r, g, b, index, pixels in rows:
        at = ids == int(index)
        assert int(pixels) == at.sum()
        assert (img[at] == (int(r), int(g), int(b))).all()


# every overlay of the report by page kind: the full-resolution images each page links to
OVERLAYS = {
    "camera_event": {"rgb", "camera_z", "camera_z_log", "range", "range_log", "normal_geometric", "normal_shading",
                     "instance_id", "semantic_id", "timing_band", "objects", "lidar_lidar_top_10_residual",
                     "lidar_lidar_top_10_skew"},
    "flow": {"flow_forward", "wheel", "flags_forward", "warp_residual"},
    "lidar_sweep": {"range_image", "top_down_0", "top_down_1"},
    "radar_frame": {"range_azimuth", "range_doppler", "top_down", "camera_camera_front_30"},
}


def overlays_on(page: Path) -> set[str]:
    """Names of the full-resolution images a report page links to (colour bars left out)."""
    import re

    names = {Path(m).name.removesuffix(".thumb") for m in re.findall(r'(?:href|src)="\.\./img/([^"]+)\.png"',
                                                                      page.read_text())}
    return {n for n in names if not n.endswith("_bar")}


def check_every_overlay(report: Path) -> dict:
    """{page: missing overlay names} over the report's pages of the kinds in OVERLAYS."""
    doc = json.loads((report / "report.json").read_text())
    missing = {}
    for it in doc["bundles"][0]["items"]:
        want = set(OVERLAYS.get(it["kind"], ()))
        got = overlays_on(report / it["page"])
        if not want <= got:
            missing[it["page"]] = sorted(want - got)
    return missing


def test_every_overlay_of_the_issue_is_on_its_page(report):
    assert check_every_overlay(report) == {}
    kinds = {it["kind"] for it in json.loads((report / "report.json").read_text())["bundles"][0]["items"]}
    assert set(OVERLAYS) <= kinds
    page = (report / "pages/bundle_events_radar_front_000020.html").read_text()
    assert "radial velocity [m/s] (blue = approaching, red = receding)" in page       # colour bar with units
    camera = (report / "pages/bundle_events_camera_front_000030.html").read_text()
    table = camera.index("object table: ")                  # the long object table is folded, its rows all there
    n = int(camera[table:].split()[2])
    assert n > 20 and camera.rfind("<details>", 0, table) > camera.rfind("</details>", 0, table)
    assert camera.count("<tr>", table, camera.index("</details>", table)) == n + 1


def _browser():
    """A Playwright browser on Debian's chromium; under CI=true a missing browser fails the test."""
    missing = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing = "the playwright package is not installed (requirements.txt)"
    if missing is None and not os.path.exists(CHROMIUM):
        missing = f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs it)"
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    return sync_playwright


def test_report_opens_in_headless_chromium(report, bad_report, tmp_path):
    sync_playwright = _browser()
    pages = [report / "index.html"] + sorted((report / "pages").iterdir())
    assert len(pages) == 7                          # index + two camera events + sweep + radar frame + IMU + flow
    out, doc, _ = bad_report
    quarantined = {q["folder"]: q for q in doc["bundles"][0]["quarantine"]}["quarantine/events/radar_front/000020"]
    pages += [out / "index.html", out / quarantined["page"]]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        problems, requests = [], []
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
                else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
        page.on("request", lambda r: requests.append(r.url))
        for path in pages:
            page.goto(path.as_uri())
            page.wait_for_load_state("load")
            sizes = page.evaluate("""async () => { const imgs = [...document.images];
                imgs.forEach(i => { i.loading = 'eager'; });
                await Promise.all(imgs.map(i => i.decode().catch(() => null)));
                return imgs.map(i => [i.getAttribute('src'), i.naturalWidth, i.naturalHeight]); }""")
            assert all(w > 0 and h > 0 for _, w, h in sizes), (path, [s for s in sizes if not s[1]])
            if "imu" in path.name:                  # inline SVG plots of both channels, laid out
                svgs = page.evaluate("[...document.querySelectorAll('figure svg')].map(s => s.getBoundingClientRect())"
                                     ".map(r => [r.width, r.height])")
                assert len(svgs) >= 2 and all(w > 0 and h > 0 for w, h in svgs), (path, svgs)
            else:
                assert path.name == "index.html" or len(sizes) >= 5, path
            links = page.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.href)")
            for href in links:                      # thumbnails link to full-resolution files that exist
                assert href.startswith("file://"), href
        assert not problems, problems
        assert all(u.startswith("file://") for u in requests), [u for u in requests if not u.startswith("file://")]
        shots = {}
        for page_path, key, selector in (
                (report / "pages/bundle_events_camera_front_000030.html", "depth", "img[alt='camera_z']"),
                (report / "pages/bundle_events_camera_front_000030.html", "bar", "img.colourbar"),
                (report / "pages/bundle_events_radar_front_000020.html", "range_azimuth", "img[alt^='range-azimuth']"),
                (report / "pages/bundle_events_radar_front_000020.html", "radar_camera", "img[alt^='radar returns']"),
                (out / quarantined["page"], "quarantined_top_down", "img[alt^='top-down']")):
            page.goto(page_path.as_uri())
            el = page.locator(selector).first
            el.scroll_into_view_if_needed()
            shots[key] = tmp_path / f"{key}.png"
            el.screenshot(path=str(shots[key]))
        # on the quarantined page the failed checks come before the overlays
        page.goto((out / quarantined["page"]).as_uri())
        order = page.evaluate("""() => { const t = document.querySelector('table'), f = document.querySelector('figure');
            return !!(t && f && (t.compareDocumentPosition(f) & Node.DOCUMENT_POSITION_FOLLOWING)); }""")
        assert order, "failed checks are not shown before the overlays"
        browser.close()
    import cv2

    depth = cv2.imread(str(shots["depth"]))
    bar = cv2.imread(str(shots["bar"]))
    assert depth.shape[0] >= 45 and depth.std() > 20 and len(np.unique(depth.reshape(-1, 3), axis=0)) > 50
    lum = bar[bar.shape[0] // 2, :, ::-1].astype(float) @ [0.2126, 0.7152, 0.0722]
    assert lum[-5] - lum[5] > 150                   # dark (near) on the left, bright (far) on the right
    # every static return approaches the forward-moving shuttle: blue (b > r) on screen, in the plots and the camera
    for key in ("range_azimuth", "radar_camera", "quarantined_top_down"):
        rgb = cv2.imread(str(shots[key]))[..., ::-1].astype(int)
        blue = (rgb[..., 2] > rgb[..., 0] + 60).sum()
        red = (rgb[..., 0] > rgb[..., 2] + 60).sum()
        assert blue > 20, key
        assert red < blue / 10, key                 # little receding (the cyclist, if hit; the sensor marker is black)


@pytest.fixture(scope="module")
def bad_report(dusk, tmp_path_factory):
    """A dataset (a folder of bundles): a clean copy and a copy with a corrupt payload, its radar frame quarantined
    (moved to quarantine/ with a failing qa_report.json, as the exporter does) and a quarantined folder that kept
    only its qa_report.json. (report folder, report.json document, `rowbeam report` result)"""
    tmp = tmp_path_factory.mktemp("bad")
    shutil.copytree(dusk, tmp / "ds" / "good")
    bad = tmp / "ds" / "bad"
    shutil.copytree(dusk, bad)
    ev = bad / "events/camera_front/000031"
    m = json.loads((ev / "manifest.json").read_text())
    z = ev / m["modalities"]["camera_z"]["uri"]
    z.write_bytes(z.read_bytes()[:-7] + b"garbage")                       # sha256 no longer matches
    q = bad / "quarantine/events/camera_front/000032"
    q.mkdir(parents=True)
    (q / "qa_report.json").write_text(json.dumps({"schema": "rowbeam/event_qa@1", "status": "fail", "checks": [
        {"check": "verification", "status": "fail", "message": "range error 3.2 mm > 1 mm"}]}))
    qr = bad / "quarantine/events/radar_front/000020"
    qr.parent.mkdir(parents=True)
    os.rename(bad / "events/radar_front/000020", qr)
    os.rmdir(bad / "events/radar_front")
    (qr / "qa_report.json").write_text(json.dumps({"schema": "rowbeam/event_qa@1", "status": "fail", "checks": [
        {"check": "range_limits", "status": "pass", "message": "every return lies within the declared range limits"},
        {"check": "radial_velocity_vs_state_log", "status": "fail", "message": "radial velocity off by 0.4 m/s"}]}))
    out = tmp / "out"
    r = _report(tmp / "ds", "--out", out)
    return out, json.loads((out / "report.json").read_text()), r


def test_failing_bundle_gets_a_report_with_failures_first_and_quarantine_reasons(bad_report):
    out, doc, r = bad_report
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith("rowbeam report: FAIL")
    assert schema_errors(doc, "rowbeam/report@1") == []
    assert [(b["key"], b["qa_status"]) for b in doc["bundles"]] == [("bad", "fail"), ("good", "pass")]
    assert doc["statistics"]["counts"] == {"events": 9, "flows": 2, "quarantined": 2}
    b = doc["bundles"][0]
    assert b["items"][0]["qa_status"] == "fail"                           # failures first
    first_fail = [it["folder"] for it in b["items"] if it["qa_status"] == "fail"]
    assert "events/camera_front/000031" in first_fail
    q = {x["folder"]: x for x in b["quarantine"]}
    assert q["quarantine/events/camera_front/000032"]["reasons"] == ["verification: range error 3.2 mm > 1 mm"]
    assert q["quarantine/events/camera_front/000032"]["overlays"].startswith("unavailable: ")   # no manifest kept
    radar = q["quarantine/events/radar_front/000020"]
    assert radar["reasons"] == ["radial_velocity_vs_state_log: radial velocity off by 0.4 m/s"]
    assert radar["kind"] == "radar_frame" and radar["overlays"] == "ok"
    text = (out / radar["page"]).read_text()
    assert text.index("radial velocity off by 0.4 m/s") < text.index("every return lies within") < text.index("<figure")
    assert (out / "img/bad/quarantine/events/radar_front/000020/range_azimuth.png").is_file()
    bad_page = next(it for it in b["items"] if it["folder"] == "events/camera_front/000031")
    assert bad_page["overlays"].startswith("unavailable: ") and "sha256" in bad_page["overlays"]
    assert "overlays unavailable" in (out / bad_page["page"]).read_text()
    index = (out / "index.html").read_text()
    assert "range error 3.2 mm" in index and "sha256" in index and radar["page"] in index
    assert index.index("bad_events_camera_front_000031") < index.index("bad_events_camera_front_000030")  # failures first
    assert index.index("bad_quarantine_events_radar_front_000020") < index.index("bad_events_camera_front_000031")
    # quarantined folders do not count in the residuals: the good copy's radar frame only
    from rowbeam.bundle.reader import Bundle

    points = Bundle.open(out.parent / "ds" / "good").event("radar_front", 20).array("points")
    assert doc["residuals"]["radar.range_vs_point_m"]["count"] == len(points)


def test_not_a_bundle_is_one_line_exit_2_and_nothing_written(tmp_path):
    (tmp_path / "stuff").mkdir()
    out = tmp_path / "out"
    r = _report(tmp_path / "stuff", "--out", out)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("rowbeam report: error: ") and "stuff" in r.stderr
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["stuff"]


def test_out_holding_other_files_is_refused_and_kept(dusk, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    r = _report(dusk, "--out", out)
    assert r.returncode == 2 and "not empty" in r.stderr and r.stderr.count("\n") == 1
    assert os.listdir(out) == ["notes.txt"]


def _report_on_a_terminal(*args) -> tuple[int, str]:
    """Run `rowbeam report ARGS` with stdout and stderr on a pseudo-terminal; (exit status, everything shown)."""
    return run_on_a_terminal([sys.executable, "-m", "rowbeam", "report", *args], cwd=REPO)


def test_baseline_drift(report, dusk, tmp_path):
    rc, text = _report_on_a_terminal(dusk, "--out", tmp_path / "again", "--baseline", report)
    assert rc == 0, text
    assert "\rreport bundle: checking" in text and "\rreport bundle: overlays 6/6 folders" in text, text
    assert "rowbeam report: PASS" in text and "drift against" in text
    doc = json.loads((tmp_path / "again" / "report.json").read_text())
    assert doc["drift"]["status"] == "ok" and len(doc["drift"]["items"]) > 10
    pinned = tmp_path / "pinned"
    shutil.copytree(report, pinned)
    base = json.loads((pinned / "report.json").read_text())
    base["residuals"]["lidar_camera.skew_ns"]["quantiles"]["max"] /= 100   # a far tighter baseline (skew ~ 1e5 ns)
    base["statistics"]["counts"]["events"] = 6
    (pinned / "report.json").write_text(json.dumps(base))
    r = _report(dusk, "--out", tmp_path / "again", "--baseline", pinned)   # replaces the earlier report there
    assert r.returncode == 1 and "drift" in r.stdout
    flagged = {i["what"] for i in json.loads((tmp_path / "again" / "report.json").read_text())["drift"]["items"]
               if i["flagged"]}
    assert flagged == {"residual lidar_camera.skew_ns max (ns)", "events count"}
    assert "events count" in (tmp_path / "again" / "index.html").read_text()
    assert sorted(os.listdir(tmp_path)) == ["again", "pinned"]             # no staging or old copy left
