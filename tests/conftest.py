"""Shared fixtures: calibration scenes built with bpy, exported once per session, cached."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TORCH_VENV_PYTHON = REPO / ".venv-torch" / "bin" / "python"
# tests/torch_loader needs PyTorch: it runs in .venv-torch (tests/bundle/test_torch_loader_venv.py starts it there)
collect_ignore = [] if importlib.util.find_spec("torch") else ["torch_loader"]

# Markers (pyproject.toml declares them): `pytest -m "not bpy"` runs the Blender-free tests.
#   bpy      the test or one of its fixtures uses Blender (bpy, a scene builder, an export, a Blender child process)
#   cycles   it renders with Cycles (an export or a render)
#   engines  it starts a farm engine (Slurm daemons, a Ray cluster, worker processes)
#   browser  it drives a real Chromium
#   slow     it takes longer than ~20 s on its own on 2 cores
# bpy and cycles are read from the source of the test and of every fixture it uses (so a new test is marked
# without a table); the others come from the tables below.
_CYCLES_SIGNS = ("build_and_export", "exports(", "render_export", "run_export(", "plan_export(", "farm_run",
                 "bpy.ops.render", "render_rows", "render_labels", "bpy.ops.wm.save")
_BPY_SIGNS = _CYCLES_SIGNS + ("bpy", "scenes.", "common.save", "rowbeam.blender", "extension_session", "scenes ",
                              "\"scenes\"", "blender_binary")
_FILE_MARKS = {
    "test_farm_engines.py": ("engines", "slow"),
    "test_persistent_worker.py": ("engines", "slow"),
    "test_extension.py": ("slow",),
    "test_crash_recovery.py": ("slow",),
    "test_concurrency.py": ("slow",),
    "test_memory.py": ("slow",),
    "test_label_speed.py": ("slow",),
    "test_foreign_files.py": ("slow",),
}
_TEST_MARKS = {"test_report_opens_in_headless_chromium": ("browser",)}
_SOURCE_CACHE: dict = {}


def _source(func) -> str:
    import inspect

    if func not in _SOURCE_CACHE:
        try:
            _SOURCE_CACHE[func] = inspect.getsource(func)
        except (OSError, TypeError):
            _SOURCE_CACHE[func] = ""
    return _SOURCE_CACHE[func]


def _names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names(const)
    return names


def _reach(func, seen: set) -> list[str]:
    """The source of `func` and of every test-side function it reaches by name (helpers in the test modules),
    plus a marker text for any rowbeam.blender / bpy object it names."""
    if func is None or func in seen or not hasattr(func, "__code__"):
        return []
    seen.add(func)
    texts = [_source(func)]
    for name in _names(func.__code__):
        obj = func.__globals__.get(name)
        module = getattr(obj, "__module__", None) or getattr(obj, "__name__", "")
        if module == "bpy" or str(module).startswith(("rowbeam.blender", "bpy")):
            texts.append("rowbeam.blender")
        if callable(obj) and str(getattr(obj, "__module__", "")).startswith(("tests", "conftest", "helpers")):
            texts += _reach(obj, seen)
    return texts


def _sources(item) -> list[str]:
    seen: set = set()
    texts = _reach(getattr(item, "function", None), seen)
    for defs in item._fixtureinfo.name2fixturedefs.values() if hasattr(item, "_fixtureinfo") else ():
        for d in defs:
            if not d.func.__module__.startswith("_pytest"):
                texts += _reach(d.func, seen)
    return texts


def pytest_collection_modifyitems(config, items):
    for item in items:
        texts = _sources(item)
        marks = set(_FILE_MARKS.get(item.path.name, ())) | set(_TEST_MARKS.get(getattr(item, "originalname", ""), ()))
        if any(sign in t for t in texts for sign in _CYCLES_SIGNS):
            marks |= {"cycles", "bpy"}
        elif any(sign in t for t in texts for sign in _BPY_SIGNS):
            marks.add("bpy")
        if getattr(getattr(item, "module", None), "bpy", None) is not None:
            marks.add("bpy")                      # the module itself imports bpy
        if marks & {"engines", "browser"}:
            marks.add("bpy")                      # their fixtures export bundles
        for name in sorted(marks):
            item.add_marker(getattr(pytest.mark, name))


# Loud skips: under CI=true a skip that is not in tests/skip_allowlist.txt fails the test (CI must provide what the
# test needs: OpenCV, root for tmpfs mounts, Slurm, Chromium). `make test` prints every skip reason (-rs).
SKIP_ALLOWLIST = REPO / "tests" / "skip_allowlist.txt"


def skip_allowlist(path=None) -> list[tuple[str, str, str]]:
    """[(node id glob, text the skip reason contains, why)] from the allow-list file ('#' comments, '|' fields)."""
    entries = []
    path = path or SKIP_ALLOWLIST
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in line.split("|")]
        if len(fields) != 3 or not all(fields):
            raise ValueError(f"{path}:{n}: expected 'NODE-ID GLOB | REASON TEXT | WHY', got {line!r}")
        entries.append(tuple(fields))
    return entries


def skip_allowed(nodeid: str, reason: str, entries) -> bool:
    import fnmatch

    return any(fnmatch.fnmatchcase(nodeid, glob) and text in reason for glob, text, _ in entries)


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and not hasattr(report, "wasxfail") and os.environ.get("CI") == "true"
            and not skip_allowed(report.nodeid, _skip_reason(report), skip_allowlist())):
        report.outcome = "failed"
        report.longrepr = (f"skipped under CI=true, and no entry of tests/skip_allowlist.txt allows it: "
                           f"{_skip_reason(report)}")


@dataclass
class Exported:
    truth: object
    blend: Path
    rig: Path
    bundle: Path
    summary: dict

    @property
    def event(self) -> Path:
        return Path(self.summary["published"][0])


def build_and_export(tmp: Path, name: str, builder, first_event=1, count=1, events=None, **kw) -> Exported:
    """Build a scene, save it, export events into one bundle. `events` = {sensor_id: (first, count)}
    exports each sensor's own range; otherwise every sensor exports `count` events from `first_event`."""
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export
    from rowbeam.blender.scenes import common

    truth, rig = builder(**kw)
    skip_without_custom_camera(rig)
    blend = common.save(tmp / f"{name}.blend", rig)
    bundle = tmp / f"{name}_bundle"
    summary = {"published": [], "quarantined": []}
    for sensors, (first, n) in (events or {None: (first_event, count)}).items():
        plan = plan_export(ExportRequest(out=bundle, blend=blend, rig=blend.with_suffix(".rig.json"),
                                         sensors=[sensors] if sensors else None, first_event=first, count=n,
                                         device="cpu"))
        part = run_export(plan)
        summary["published"] += part["published"]
        summary["quarantined"] += part["quarantined"]
    return Exported(truth, blend, blend.with_suffix(".rig.json"), bundle, summary)


def skip_without_custom_camera(rig: dict) -> None:
    """A spinning LiDAR renders through a custom (OSL) camera: Blender >= 4.5. On 4.2 the exporter refuses it
    with one line (tests/blender/compat/test_blender_compat.py), so tests that need a LiDAR export are skipped there."""
    from rowbeam.blender.compat import blender_compat

    if not blender_compat.HAS_CUSTOM_CAMERA and any(s["type"] in ("spinning_lidar", "radar") for s in rig["sensors"]):
        pytest.skip(f"spinning LiDAR needs Blender >= 4.5 (custom OSL camera); this is {blender_compat.VERSION_STRING}")
    if not blender_compat.HAS_CUSTOM_CAMERA and any(s.get("lens") for s in rig["sensors"]):
        pytest.skip(f"a camera lens needs Blender >= 4.5 (custom OSL camera); this is {blender_compat.VERSION_STRING}")


@pytest.fixture(scope="session")
def exports(tmp_path_factory):
    """exports(name, builder, **kw) -> Exported, cached by name for the session."""
    cache = {}
    root = tmp_path_factory.mktemp("exports")

    def get(name, builder, **kw):
        if name not in cache:
            cache[name] = build_and_export(root, name, builder, **kw)
        return cache[name]
    return get


@pytest.fixture(scope="session")
def dusk_all_sensors(tmp_path_factory) -> Path:
    """One small bundle with every sensor type, read only by its users: the running example at 80x45 with
    camera_front events 30, 31 (rgb 2 spp, object labels) + flow 30->31, lidar_top sweep 10 (32 x 256), radar_front
    frame 20 (its chirp train overlaps camera event 30's first rows), imu_shuttle event 10 (20 samples at 200 Hz)
    and the state log."""
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export
    from rowbeam.blender.scenes import common, running_example

    tmp = tmp_path_factory.mktemp("dusk_all")
    running_example.build(80, 45)
    rig = running_example.rig(rgb_samples=2, verify_rows=1, object_labels=True, radar=True, state_log=True, imu=True,
                              lidar_fields={"azimuth_steps": 256, "preset": "uniform_32"})
    skip_without_custom_camera(rig)
    blend = common.save(tmp / "dusk.blend", rig)
    for sensor, first, n, flow in (("camera_front", 30, 2, True), ("lidar_top", 10, 1, False),
                                   ("radar_front", 20, 1, False), ("imu_shuttle", 10, 1, False)):
        run_export(plan_export(ExportRequest(out=tmp / "bundle", blend=blend, rig=blend.with_suffix(".rig.json"),
                                             sensors=[sensor], first_event=first, count=n, device="cpu", flow=flow)))
    return tmp / "bundle"


def blender_binary() -> str | None:
    """The Blender executable when the suite runs inside one (make test-blender); None with the bpy wheel."""
    import bpy

    return bpy.app.binary_path or None


def python_command(*args) -> list[str]:
    """The command line of `python ARGS...` the way this interpreter can run it: with the bpy wheel, the
    test interpreter; inside a real Blender, Python scripts that need bpy run as
    `blender -b [file.blend] -P script -- args` and everything else (the checker) with Blender's bundled Python."""
    args = [str(a) for a in args]
    blender = blender_binary()
    if blender and args and args[0].endswith(".py"):
        script, rest = args[0], args[1:]
        blend = [rest.pop(0)] if rest and rest[0].endswith(".blend") else []
        return [blender, "-b", *blend, "--factory-startup", "-P", script, "--", *rest]
    return [sys.executable, *args]


def run_python(*args, cwd=REPO, timeout=600, env=None) -> subprocess.CompletedProcess:
    """Run `python ARGS...` (see python_command) to completion, capturing its output."""
    return subprocess.run(python_command(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def script_args() -> list[str]:
    """Arguments of a test helper script, whether run by python or by `blender -b -P script -- args`."""
    return sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else sys.argv[1:]
