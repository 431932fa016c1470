"""The bpy child of rowbeam.farm.pack: `python -m rowbeam.blender.compat.blend_pack JOBS_JSON` copies each .blend's
external files into its scenario folder, rewrites their paths and saves the .blend there; one line
`ROWBEAM_PACK <json>` per job."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from rowbeam.farm.pack import MARK
from rowbeam.util.errors import RowbeamError

COLLECTIONS = ("images", "libraries", "sounds", "movieclips", "cache_files", "fonts", "volumes")


def _pack_one(blend: str, folder: str) -> dict:
    """In the bpy child: copy the dependencies of `blend` into folder/deps, rewrite, save folder/<name>.blend."""
    import bpy

    from rowbeam.blender.compat.blend_io import open_blend

    open_blend(blend)
    out = Path(folder)
    (out / "deps").mkdir(parents=True, exist_ok=True)
    copied, missing = {}, []
    for coll in COLLECTIONS:
        for block in getattr(bpy.data, coll, []):
            path = getattr(block, "filepath", "")
            if not path or path.startswith("<") or getattr(block, "packed_file", None) is not None:
                continue
            src = os.path.normpath(bpy.path.abspath(path, library=getattr(block, "library", None)))
            if not os.path.isfile(src):
                missing.append(src)
                continue
            if src not in copied:
                digest = hashlib.sha256(Path(src).read_bytes()).hexdigest()
                name = f"{digest[:16]}-{Path(src).name}"
                shutil.copyfile(src, out / "deps" / name)
                copied[src] = name
            block.filepath = f"//deps/{copied[src]}"
    if missing:
        return {"error": f"{blend}: uses missing external file(s): {', '.join(sorted(set(missing))[:5])}"}
    target = out / Path(blend).name
    bpy.ops.wm.save_as_mainfile(filepath=str(target), relative_remap=False, copy=True, compress=False)
    return {"blend": str(target), "copied": copied}


def main(argv: list[str]) -> int:
    from rowbeam.blender.export.run_temp import enter_process_temp

    enter_process_temp()
    for blend, folder in json.loads(argv[0]):
        try:
            doc = _pack_one(blend, folder)
        except RowbeamError as exc:
            doc = {"error": str(exc)}
        print(MARK + json.dumps(doc), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
