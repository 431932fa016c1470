"""What a plan needs from each .blend, read in a child process with bpy (`python -m
rowbeam.blender.compat.blend_probe BLEND...`, which prints one line `ROWBEAM_PROBE <json>` per file): render size
(px, percentage applied), fps, fps_base, frame range, the lineage scene properties, the stored rig text, and the
external files Blender would read (bpy.utils.blend_paths, absolute, packed files left out) with whether each exists.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rowbeam.util.errors import RowbeamError

MARK = "ROWBEAM_PROBE "


def probe_blends(paths: list) -> dict:
    """{blend path: probe dict} for every .blend, read by one child process (bpy is not imported here)."""
    if not paths:
        return {}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                     os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "rowbeam.blender.compat.blend_probe", *map(str, paths)], capture_output=True,
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
