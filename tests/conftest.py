"""Shared fixtures: calibration scenes built with bpy, exported once per session, cached."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


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
    with one line (tests/test_blender_compat.py), so tests that need a LiDAR export are skipped there."""
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
