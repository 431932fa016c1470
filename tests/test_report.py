"""`rowbeam report` on a real export (the running example at 80x45 with object labels, a 32 x 256 LiDAR
sweep and one flow pair), opened in headless Chromium from file:// (Debian's chromium driven by
Playwright with executable_path): no console errors, every image decodes, the depth overlay and its
colour bar are not blank. Bad input: a failing bundle still gets its report (failures first,
quarantine with reasons); a folder that is not a bundle: one line, exit 2, nothing written."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from contracts.schema import schema_errors

from .conftest import REPO, skip_without_custom_camera
from .helpers import run_on_a_terminal

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def dusk(tmp_path_factory):
    """camera_front events 30, 31 (rgb 2 spp, object labels) + flow 30->31, lidar_top sweep 10, one bundle."""
    from exporter.run import ExportRequest, plan_export, run_export
    from scenes import common, running_example

    tmp = tmp_path_factory.mktemp("report")
    running_example.build(80, 45)
    rig = running_example.rig(rgb_samples=2, verify_rows=1, object_labels=True,
                              lidar_fields={"azimuth_steps": 256, "preset": "uniform_32"})
    skip_without_custom_camera(rig)
    blend = common.save(tmp / "dusk.blend", rig)
    for sensor, first, n, flow in (("camera_front", 30, 2, True), ("lidar_top", 10, 1, False)):
        run_export(plan_export(ExportRequest(out=tmp / "bundle", blend=blend, rig=blend.with_suffix(".rig.json"),
                                             sensors=[sensor], first_event=first, count=n, device="cpu", flow=flow)))
    return tmp / "bundle"


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
                          "flows/camera_front/000030-000031"}
    assert {it["kind"] for it in items.values()} == {"camera_event", "lidar_sweep", "flow"}
    assert all(it["overlays"] == "ok" and (report / it["page"]).is_file() for it in items.values())
    res = doc["residuals"]
    assert {"camera.z_range_m", "camera.normal_geometric_unit", "lidar.range_vs_point_m", "lidar_camera.z_residual_m",
            "lidar_camera.skew_ns", "flow.cycle_px", "flow.warp_rgb"} <= set(res)
    # the residuals the checker bounds are inside its tolerances at every quantile (an independent recomputation)
    assert res["lidar_camera.z_residual_m"]["count"] > 0
    assert res["lidar_camera.skew_ns"]["quantiles"]["max"] <= 1_000_000
    assert res["lidar.range_vs_point_m"]["quantiles"]["max"] < 2e-5
    assert res["flow.cycle_px"]["quantiles"]["max"] <= 0.1
    assert {"distance", "radius", "class"} <= set(res["camera.z_range_m"]["slices"])
    assert {"distance", "radius", "speed", "class"} <= set(res["flow.cycle_px"]["slices"])
    st = doc["statistics"]
    assert st["counts"] == {"events": 3, "flows": 1, "quarantined": 0}
    assert abs(sum(st["class_pixel_share"].values()) - 1) < 1e-9 and st["class_pixel_share"]["road"] > 0
    assert 0 <= st["camera_invalid_rate"] < 1 and st["mean_visib_fract"] is not None


def test_overlay_images_are_the_bundle_arrays(report, dusk):
    """The camera_z overlay is the colour map of the exported camera_z (read independently with the loader)."""
    import cv2

    from contracts.bundle_reader import Bundle
    from contracts.report import colour

    ev = Bundle.open(dusk).event("camera_front", 30)
    z, valid = ev.array("camera_z"), ev.array("valid") == 1
    img = cv2.imread(str(report / "img/bundle/events/camera_front/000030/camera_z.png"))[..., ::-1]
    assert img.shape[:2] == z.shape
    assert (img[~valid] == colour.NO_DATA).all()
    lo, hi = np.percentile(z[valid], [1, 99])
    assert np.array_equal(img[valid], colour.colourise(z, lo, hi)[valid])
    near, far = np.unravel_index(np.nanargmin(z), z.shape), np.unravel_index(np.nanargmax(z), z.shape)
    assert colour.luminance(img[far]) > colour.luminance(img[near]) + 100


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


def test_report_opens_in_headless_chromium(report, tmp_path):
    sync_playwright = _browser()
    pages = ["index.html"] + sorted(f"pages/{p.name}" for p in (report / "pages").iterdir())
    assert len(pages) == 5                          # index + two camera events + one sweep + one flow
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        problems, requests = [], []
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
                else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
        page.on("request", lambda r: requests.append(r.url))
        for name in pages:
            page.goto((report / name).as_uri())
            page.wait_for_load_state("load")
            sizes = page.evaluate("""async () => { const imgs = [...document.images];
                imgs.forEach(i => { i.loading = 'eager'; });
                await Promise.all(imgs.map(i => i.decode().catch(() => null)));
                return imgs.map(i => [i.getAttribute('src'), i.naturalWidth, i.naturalHeight]); }""")
            assert all(w > 0 and h > 0 for _, w, h in sizes), (name, [s for s in sizes if not s[1]])
            assert name == "index.html" or len(sizes) >= 5, name
            links = page.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.href)")
            for href in links:                      # thumbnails link to full-resolution files that exist
                assert href.startswith("file://"), href
        assert not problems, problems
        assert all(u.startswith("file://") for u in requests), [u for u in requests if not u.startswith("file://")]
        # depth overlay and its colour bar on screen, not blank
        page.goto((report / "pages/bundle_events_camera_front_000030.html").as_uri())
        shots = {}
        for key, selector in (("depth", "img[alt='camera_z']"), ("bar", "img.colourbar")):
            el = page.locator(selector).first
            el.scroll_into_view_if_needed()
            path = tmp_path / f"{key}.png"
            el.screenshot(path=str(path))
            shots[key] = path
        browser.close()
    import cv2

    depth = cv2.imread(str(shots["depth"]))
    bar = cv2.imread(str(shots["bar"]))
    assert depth.shape[0] >= 45 and depth.std() > 20 and len(np.unique(depth.reshape(-1, 3), axis=0)) > 50
    lum = bar[bar.shape[0] // 2, :, ::-1].astype(float) @ [0.2126, 0.7152, 0.0722]
    assert lum[-5] - lum[5] > 150                   # dark (near) on the left, bright (far) on the right


def test_failing_bundle_gets_a_report_with_failures_first_and_quarantine_reasons(dusk, tmp_path):
    """A dataset (a folder of bundles): a clean copy and a copy with a corrupt payload and a quarantined event."""
    shutil.copytree(dusk, tmp_path / "ds" / "good")
    bad = tmp_path / "ds" / "bad"
    shutil.copytree(dusk, bad)
    ev = bad / "events/camera_front/000031"
    m = json.loads((ev / "manifest.json").read_text())
    z = ev / m["modalities"]["camera_z"]["uri"]
    z.write_bytes(z.read_bytes()[:-7] + b"garbage")                       # sha256 no longer matches
    q = bad / "quarantine/events/camera_front/000032"
    q.mkdir(parents=True)
    (q / "qa_report.json").write_text(json.dumps({"schema": "rowbeam/event_qa@1", "status": "fail", "checks": [
        {"check": "verification", "status": "fail", "message": "range error 3.2 mm > 1 mm"}]}))
    out = tmp_path / "out"
    r = _report(tmp_path / "ds", "--out", out)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith("rowbeam report: FAIL")
    doc = json.loads((out / "report.json").read_text())
    assert [(b["key"], b["qa_status"]) for b in doc["bundles"]] == [("bad", "fail"), ("good", "pass")]
    assert doc["statistics"]["counts"] == {"events": 6, "flows": 2, "quarantined": 1}
    b = doc["bundles"][0]
    assert b["items"][0]["qa_status"] == "fail"                           # failures first
    first_fail = [it["folder"] for it in b["items"] if it["qa_status"] == "fail"]
    assert "events/camera_front/000031" in first_fail
    assert b["quarantine"] == [{"folder": "quarantine/events/camera_front/000032",
                                "reasons": ["verification: range error 3.2 mm > 1 mm"]}]
    bad_page = next(it for it in b["items"] if it["folder"] == "events/camera_front/000031")
    assert bad_page["overlays"].startswith("unavailable: ") and "sha256" in bad_page["overlays"]
    assert "overlays unavailable" in (out / bad_page["page"]).read_text()
    index = (out / "index.html").read_text()
    assert "range error 3.2 mm" in index and "sha256" in index
    assert index.index("bad_events_camera_front_000031") < index.index("bad_events_camera_front_000030")  # failures first


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
    assert "\rreport bundle: checking" in text and "\rreport bundle: overlays 4/4 folders" in text, text
    assert "rowbeam report: PASS" in text and "drift against" in text
    doc = json.loads((tmp_path / "again" / "report.json").read_text())
    assert doc["drift"]["status"] == "ok" and len(doc["drift"]["items"]) > 10
    pinned = tmp_path / "pinned"
    shutil.copytree(report, pinned)
    base = json.loads((pinned / "report.json").read_text())
    base["residuals"]["lidar_camera.skew_ns"]["quantiles"]["max"] /= 100   # a far tighter baseline (skew ~ 1e5 ns)
    base["statistics"]["counts"]["events"] = 4
    (pinned / "report.json").write_text(json.dumps(base))
    r = _report(dusk, "--out", tmp_path / "again", "--baseline", pinned)   # replaces the earlier report there
    assert r.returncode == 1 and "drift" in r.stdout
    flagged = {i["what"] for i in json.loads((tmp_path / "again" / "report.json").read_text())["drift"]["items"]
               if i["flagged"]}
    assert flagged == {"residual lidar_camera.skew_ns max (ns)", "events count"}
    assert "events count" in (tmp_path / "again" / "index.html").read_text()
    assert sorted(os.listdir(tmp_path)) == ["again", "pinned"]             # no staging or old copy left
