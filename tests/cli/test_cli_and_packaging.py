"""The `rowbeam` command, `pip install .` without Blender, quiet/progress output, the per-event RGB seed,
and the published schemas validating every JSON of a bundle with plain jsonschema (no network)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rowbeam.model.sample_identity import rgb_seed
from rowbeam.blender.scenes import calibration

from tests.conftest import REPO, build_and_export, run_python
from tests.helpers import assert_fails, load_event, run_on_a_terminal

BLENDER_NOISE = ("Saved:", "Read blend", "CUEW", "HIPEW", "rowbeam_render_")


@pytest.fixture(scope="module")
def rgb_bundle(tmp_path_factory):
    """Two events of a static fronto-parallel plane with 4-sample RGB, plus their flow."""
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export

    e = build_and_export(tmp_path_factory.mktemp("rgb"), "plane", calibration.fronto_plane, first_event=0, count=2,
                         scale=16)
    plan = plan_export(ExportRequest(out=e.bundle, blend=e.blend, rig=e.rig, first_event=0, count=2, device="cpu",
                                     flow=True))
    run_export(plan)
    return e


def _child_env() -> dict:
    """The environment as Python sees it. Importing bpy 5.3 in this process sets OCIO at the C level (not in
    os.environ); a child inheriting it prints `Using config from OCIO` before rowbeam can silence Blender,
    which a user's shell never does."""
    return dict(os.environ)


def _rowbeam(*args, python=sys.executable, **kw):
    return subprocess.run([python, "-m", "rowbeam", *map(str, args)], cwd=kw.pop("cwd", REPO), capture_output=True,
                          text=True, timeout=kw.pop("timeout", 300), env=kw.pop("env", _child_env()), **kw)


def test_rowbeam_help_documents_every_subcommand_and_option():
    top = _rowbeam("--help")
    assert top.returncode == 0
    for sub in ("export", "check", "adapt", "scenes", "schemas", "associate", "plan", "farm", "finalize", "replay"):
        assert f"  {sub} " in top.stdout, sub
    expected = {"export": ["blend", "--rig", "--out", "--sensors", "--first-event", "--count", "--device", "--flow",
                           "--flow-pairs", "--quiet", "--verbose"],
                "check": ["bundle", "--report"], "adapt": ["format"],
                "adapt kitti-flow": ["flow_dir", "out", "--variant", "--direction"],
                "adapt bop": ["bundle", "out_dir", "--split"], "adapt coco": ["bundle", "out", "--sensor"],
                "adapt kitti-object": ["bundle", "out_dir", "--sensor"], "adapt ply": ["source", "out"],
                "adapt kitti-lidar": ["bundle", "out_dir", "--sensor", "--frame", "--intensity"],
                "adapt rectify": ["bundle", "out_dir", "--sensor", "--K", "--size", "--alpha", "--format", "--png",
                                  "--interpolation"],
                "scenes": ["name", "out", "--scale", "--rgb-samples", "--object-labels"], "schemas": ["out"],
                "associate": ["bundle", "--max-skew-us"],
                "plan": ["spec", "--out"], "farm run": ["plan", "--engine", "--workers", "--retries", "--shards"],
                "farm status": ["plan"], "finalize": ["plan"], "replay": ["plan", "sample_id"]}
    for sub, options in expected.items():
        r = _rowbeam(*sub.split(), "--help")
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"usage: rowbeam {sub}"), r.stdout[:80]
        lines = r.stdout.splitlines()
        lines = lines[next(k for k, line in enumerate(lines) if line.endswith(("arguments:", "options:"))):]
        for opt in options:
            # every option and positional is listed with a help text on its line or the next
            i = next((k for k, line in enumerate(lines)
                      if re.match(rf"(-\w, )?{re.escape(opt)}\b", line.strip())), None)
            assert i is not None, (sub, opt)
            parts = re.split(r"\s{2,}", lines[i].strip(), maxsplit=1)
            described = parts[1] if len(parts) > 1 else lines[i + 1].strip()
            assert len(described.split()) >= 2 and not described.startswith("-"), (sub, opt, lines[i])
    bad = _rowbeam("frobnicate")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown subcommand" in bad.stderr


def test_export_is_quiet_except_for_its_own_lines(rgb_bundle, tmp_path):
    e = rgb_bundle
    base = [e.blend, "--rig", e.rig, "--first-event", 0, "--count", 1, "--device", "auto"]
    piped = _rowbeam("export", *base, "--out", tmp_path / "a")
    assert piped.returncode == 0, piped.stderr
    out = piped.stdout + piped.stderr
    assert not [n for n in BLENDER_NOISE if n in out], out
    assert all(line.startswith("rowbeam:") for line in piped.stdout.splitlines()), piped.stdout
    assert "published 1" in piped.stdout
    quiet = _rowbeam("export", *base, "--out", tmp_path / "b", "--quiet")
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == "", (quiet.stdout, quiet.stderr)
    assert (tmp_path / "b" / "events" / "camera_front" / "000000" / "manifest.json").is_file()
    verbose = _rowbeam("export", *base, "--out", tmp_path / "c", "--verbose")
    assert "Saved:" in verbose.stdout and "published 1" in verbose.stdout


def test_progress_on_a_terminal_rewrites_one_line(rgb_bundle, tmp_path):
    """On a TTY the stage line (job, stage, samples done/total, elapsed) is rewritten in place with \\r."""
    e = rgb_bundle
    rc, text = run_on_a_terminal([sys.executable, "-m", "rowbeam", "export", e.blend, "--rig", e.rig, "--out",
                                  tmp_path / "tty", "--count", "1", "--device", "cpu"], cwd=REPO, env=_child_env(),
                                 timeout=300)
    assert rc == 0, text
    assert "\r[1/1] camera_front event 0: rgb render" in text and "/4 samples" in text, text
    assert "label render" in text and "published 1" in text
    assert not [n for n in BLENDER_NOISE if n in text], text


def _high_pass(rgb: np.ndarray) -> np.ndarray:
    g = rgb.mean(axis=-1)
    return g[1:-1, 1:-1] - 0.25 * (g[:-2, 1:-1] + g[2:, 1:-1] + g[1:-1, :-2] + g[1:-1, 2:])


def test_rgb_noise_is_independent_per_event_and_reproducible(rgb_bundle, tmp_path):
    e = rgb_bundle
    (m0, a0), (m1, a1) = (load_event(e.bundle / "events" / "camera_front" / f"{i:06d}") for i in (0, 1))
    seeds = [m["method"]["rgb_render"]["seed"] for m in (m0, m1)]
    assert seeds == [rgb_seed(m0["sample_id"]), rgb_seed(m1["sample_id"])] and seeds[0] != seeds[1]
    # the static scene renders the same picture twice: only the noise can differ
    r0, r1 = _high_pass(a0["rgb"]), _high_pass(a1["rgb"])
    assert r0.std() > 1e-4                                            # there is noise to compare
    corr = float(np.corrcoef(r0.ravel(), r1.ravel())[0, 1])
    assert abs(corr) < 0.2, corr
    again = build_and_export(tmp_path, "plane", calibration.fronto_plane, first_event=1, count=1, scale=16)
    m1b, a1b = load_event(again.event)
    assert m1b["sample_id"] == m1["sample_id"]
    assert m1b["modalities"]["rgb"]["sha256"] == m1["modalities"]["rgb"]["sha256"]   # same seed, same pixels


def test_checker_refuses_a_seed_not_derived_from_the_sample_id(rgb_bundle, tmp_path):
    bundle = tmp_path / "b"
    shutil.copytree(rgb_bundle.bundle, bundle)
    shutil.rmtree(bundle / "flows")
    path = bundle / "events" / "camera_front" / "000001" / "manifest.json"
    m = json.loads(path.read_text())
    m["method"]["rgb_render"]["seed"] = 0                              # the old fixed seed
    path.write_text(json.dumps(m))
    assert_fails(bundle, "rgb_seed", "not")


def test_every_bundle_json_validates_with_plain_jsonschema_offline(rgb_bundle, tmp_path):
    """A second team: `rowbeam schemas DIR`, then jsonschema + a referencing.Registry of those files whose
    retrieve refuses any other URI (so nothing is fetched from the network)."""
    import jsonschema
    import referencing

    folder = tmp_path / "schemas"
    r = _rowbeam("schemas", folder)
    assert r.returncode == 0, r.stderr
    schemas = [json.loads(p.read_text()) for p in sorted(folder.glob("*.schema.json"))]

    def offline(uri):
        raise AssertionError(f"schema {uri} would be fetched from the network")

    registry = referencing.Registry(retrieve=offline).with_resources(
        (s["$id"], referencing.Resource.from_contents(s)) for s in schemas)
    by_name = {s["$id"].rsplit("/", 1)[1]: s for s in schemas}

    report = tmp_path / "report.json"
    assert _rowbeam("check", rgb_bundle.bundle, "--report", report).returncode == 0
    flow = next((rgb_bundle.bundle / "flows").glob("*/*"))
    sidecar_target = tmp_path / "f.flo"
    assert _rowbeam("adapt", "flo", flow, sidecar_target).returncode == 0
    documents = [*rgb_bundle.bundle.rglob("*.json"), report, Path(f"{sidecar_target}.json")]
    kinds = set()
    for path in documents:
        doc = json.loads(path.read_text())
        schema = by_name[doc["schema"].split("/", 1)[1]]
        jsonschema.Draft202012Validator(schema, registry=registry).validate(doc)
        kinds.add(doc["schema"])
    assert kinds == {"rowbeam/bundle@1", "rowbeam/sample@1", "rowbeam/flow@1", "rowbeam/event_qa@1",
                     "rowbeam/qa_report@1", "rowbeam/adapter_sidecar@1"}


def test_units_come_from_the_declared_vocabulary(rgb_bundle, tmp_path):
    from rowbeam.model.modalities import UNITS
    from rowbeam.sensors import MODALITIES
    from rowbeam.bundle.schema import _schemas, schema_errors

    assert set(_schemas()["rowbeam/sample@1"]["$defs"]["units"]["enum"]) == set(UNITS)
    declared = {s.units for table in MODALITIES.values() for s in table.values()}
    declared |= {f[2] for table in MODALITIES.values() for s in table.values() for f in (s.fields or ())}
    assert declared <= set(UNITS), declared - set(UNITS)
    m, _ = load_event(rgb_bundle.bundle / "events" / "camera_front" / "000000")
    assert not schema_errors(m, "rowbeam/sample@1")
    m["modalities"]["range"]["units"] = "meters"
    assert any("range.units" in e for e in schema_errors(m, "rowbeam/sample@1"))


def test_pip_install_without_blender_gives_a_working_checker(rgb_bundle, tmp_path):
    """`pip install .` in a fresh venv (no bpy): the `rowbeam` command checks a bundle; export says what it needs."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for package in ("rowbeam",):
        shutil.copytree(REPO / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
    py, exe = venv / "bin" / "python", venv / "bin" / "rowbeam"
    pip = subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", src],
                         capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-2000:]
    assert subprocess.run([py, "-c", "import bpy"], capture_output=True).returncode != 0   # truly without Blender
    # one top-level package of ours, with its public API; the old top-level names are gone
    api = subprocess.run([py, "-c", "import rowbeam, sys; print(rowbeam.__version__, rowbeam.Bundle.__name__, "
                          "rowbeam.check_bundle.__name__, rowbeam.load_rig.__name__, 'bpy' in sys.modules)"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert api.returncode == 0 and api.stdout.split()[1:] == ["Bundle", "check_bundle", "load_rig", "False"], api
    site = Path(subprocess.run([py, "-c", "import rowbeam, pathlib; print(pathlib.Path(rowbeam.__file__).parent.parent)"],
                               capture_output=True, text=True, cwd=tmp_path).stdout.strip())
    ours = {d.name for d in site.iterdir() if d.is_dir() and (d / "__init__.py").exists() and
            (d / "__init__.py").read_text().count("rowbeam")}
    assert ours == {"rowbeam"}, ours
    check = subprocess.run([exe, "check", rgb_bundle.bundle], capture_output=True, text=True, cwd=tmp_path)
    assert check.returncode == 0 and "PASS" in check.stdout, check.stdout + check.stderr
    export = subprocess.run([exe, "export", rgb_bundle.blend, "--out", tmp_path / "o"], capture_output=True,
                            text=True, cwd=tmp_path)
    assert export.returncode == 2 and export.stderr.count("\n") == 1 and "rowbeam[blender]" in export.stderr
    assert "Traceback" not in export.stderr and not (tmp_path / "o").exists()
    help_text = subprocess.run([exe, "export", "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert help_text.returncode == 0 and "--first-event" in help_text.stdout
    # the adapters ship too (rowbeam.adapters): a bundle without object labels is refused in one line
    coco = subprocess.run([exe, "adapt", "coco", rgb_bundle.bundle, tmp_path / "c.json"], capture_output=True,
                          text=True, cwd=tmp_path)
    assert coco.returncode == 2 and "no camera events with object labels" in coco.stderr, coco.stderr


def test_extension_core_wheel_declares_its_dependencies(rgb_bundle, tmp_path):
    """The rowbeam_core wheel bundled in the extension, installed alone in a fresh venv, brings what the checker
    needs (numpy, OpenEXR, jsonschema, referencing) and checks a bundle."""
    import tomllib
    import zipfile

    sys.path.insert(0, str(REPO / "tools"))
    from build_extension import build_core_wheel

    wheel = build_core_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        metadata = z.read(next(n for n in z.namelist() if n.endswith("METADATA"))).decode()
    declared = [line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist: ")]
    assert declared == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert {d.split(">")[0].split("=")[0].lower() for d in declared} >= {"numpy", "openexr", "jsonschema"}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
    py = venv / "bin" / "python"
    pip = subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel],
                         capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-2000:]
    check = subprocess.run([py, "-m", "rowbeam", "check", rgb_bundle.bundle], capture_output=True, text=True,
                           cwd=tmp_path)
    assert check.returncode == 0 and "PASS" in check.stdout, check.stdout + check.stderr


def test_render_export_and_python_m_contracts_keep_working(rgb_bundle):
    assert run_python("-m", "rowbeam", "check", rgb_bundle.bundle).returncode == 0
    r = run_python(REPO / "render_export.py", "--help")
    assert r.returncode == 0 and "--out" in r.stdout


def test_export_panel_shows_stage_progress(rgb_bundle, tmp_path):
    """The add-on's Export operator routes the same stage progress (with Cycles' sample counts) to its panel."""
    from types import SimpleNamespace

    from addon.operators import _watch_progress
    from rowbeam.blender.export.run import ExportRequest, iter_export, new_summary, plan_export

    class State:
        def __init__(self):
            self.seen = []

        message = property(lambda self: self.seen[-1], lambda self, text: self.seen.append(text))

    state = State()
    context = SimpleNamespace(window_manager=SimpleNamespace(rowbeam_state=state))
    e = rgb_bundle
    plan = plan_export(ExportRequest(out=tmp_path / "o", blend=e.blend, rig=e.rig, count=1, device="cpu"))
    unwatch = _watch_progress(plan, context)
    try:
        summary = new_summary(plan)
        list(iter_export(plan, summary))
    finally:
        unwatch()
    assert len(summary["published"]) == 1
    assert any("camera_front event 0: rgb render 4/4 samples" in m for m in state.seen), state.seen
    assert any(": label render" in m for m in state.seen) and any("write and check" in m for m in state.seen)


def test_a_blend_named_freely_exports_under_a_token_scenario(tmp_path):
    """No scenario declared: the scenario comes from the file name, made a safe token (`my scene (v2)` ->
    `my_scene__v2_`), and the bundle checks."""
    from rowbeam.check.runner import check_bundle
    from rowbeam.model.sample_identity import token_from_name

    assert token_from_name("my scene (v2)") == "my_scene__v2_"
    assert token_from_name("..hidden") == "hidden" and token_from_name("%%%") == "untitled"
    assert len(token_from_name("x" * 300)) == 64
    e = build_and_export(tmp_path, "my scene (v2)", calibration.fronto_plane, first_event=0, count=1, scale=16)
    m, _ = load_event(e.event)
    assert m["sample_id"].startswith("my_scene__v2_.camera_front.") and m["lineage"]["scenario"] == "my_scene__v2_"
    assert check_bundle(e.bundle)["status"] == "pass"
