"""The bpy child of rowbeam.farm.probe: `python -m rowbeam.blender.compat.blend_probe BLEND...` opens each .blend with
its embedded scripts disabled (blend_io.open_blend) and prints one line `ROWBEAM_PROBE <json>` per file."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from rowbeam.farm.probe import MARK
from rowbeam.util.errors import RowbeamError


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
