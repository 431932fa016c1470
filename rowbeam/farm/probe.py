"""What a plan needs from each .blend, read in a child process with bpy (`python -m rowbeam.farm.probe BLEND...`).

The .blend is opened with its embedded scripts disabled (rowbeam.blender.compat.blend_io.open_blend). Prints one line
`ROWBEAM_PROBE <json>` per file: render size (px, percentage applied), fps, fps_base, frame range, the
lineage scene properties, the stored rig text, and the external files Blender would read
(bpy.utils.blend_paths, absolute, packed files left out) with whether each exists.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rowbeam.util.errors import RowbeamError

MARK = "ROWBEAM_PROBE "


def _probe_one(path: str) -> dict:
    import bpy

    from rowbeam.blender.compat.blend_io import open_blend
    from rowbeam.blender.export.run import LINEAGE_PROPERTY, RIG_PROPERTY, SCENARIO_PROPERTY

    open_blend(path)
    scene = bpy.context.scene
    r = scene.render
    deps, tracer = trace_dependencies(path)
    rig = scene.get(RIG_PROPERTY)
    return {"blend": path, "size_px": [r.resolution_x * r.resolution_percentage // 100,
                                        r.resolution_y * r.resolution_percentage // 100],
            "fps": int(r.fps), "fps_base": float(r.fps_base), "frame_start": int(scene.frame_start),
            "frame_end": int(scene.frame_end), "scenario_property": scene.get(SCENARIO_PROPERTY),
            "lineage_property": scene.get(LINEAGE_PROPERTY), "stored_rig": rig if isinstance(rig, str) else None,
            "tracer": tracer,
            "dependencies": [{"path": os.path.normpath(d), "exists": os.path.isfile(d)} for d in deps]}


def trace_dependencies(path: str) -> tuple[list[str], str]:
    """(absolute paths of the external files the open .blend uses, tracer name). Blender Asset Tracer's
    tracer (2.x traces through bpy, on the file opened by our loader, so no embedded script runs; its own
    CLI opens files with Blender's default script setting, so rowbeam never calls it); without BAT,
    bpy.utils.blend_paths (images, libraries, caches; no recursion into linked libraries)."""
    import bpy

    try:
        from blender_asset_tracer import __version__ as bat_version
        from blender_asset_tracer import file_usage
    except ImportError:
        deps = bpy.utils.blend_paths(absolute=True, packed=False, local=False)
        return sorted({os.path.abspath(d) for d in deps}), "bpy.utils.blend_paths"
    source = Path(path).resolve()
    repo = file_usage.dependencies_of_current_blendfile(source.parent)
    deps = {os.path.abspath(p) for p in repo.file_infoes if Path(p).resolve() != source}
    return sorted(deps), f"blender-asset-tracer {bat_version}"


def probe_blends(paths: list) -> dict:
    """{blend path: probe dict} for every .blend, read by one child process (bpy is not imported here)."""
    if not paths:
        return {}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                     os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "rowbeam.farm.probe", *map(str, paths)], capture_output=True,
                          text=True, env=env, timeout=600)
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            doc = json.loads(line[len(MARK):])
            if "error" in doc:
                raise RowbeamError(doc["error"])
            out[doc["blend"]] = doc
    missing = [p for p in map(str, paths) if p not in out]
    if missing:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RowbeamError(f"{missing[0]}: could not be read with Blender ({tail[0][:200]})")
    return out


def main(argv: list[str]) -> int:
    from rowbeam.blender.export.run_temp import enter_process_temp

    enter_process_temp()
    for path in argv:
        try:
            doc = _probe_one(path)
        except RowbeamError as exc:
            doc = {"blend": path, "error": str(exc)}
        print(MARK + json.dumps(doc), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
