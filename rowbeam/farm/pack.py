"""`rowbeam plan DATASET.json --out DIR --pack PACK`: scenarios packed with their dependencies, for workers that
do not share the artist's disk.

Each scenario's .blend is opened in a bpy child (embedded scripts disabled), every external file it uses
(images, linked libraries, sounds, movie clips, caches, fonts, volumes) is copied to
PACK/<scenario>/deps/<sha256[:16]>-<name> and its path rewritten to that copy (relative: //deps/...), and the
.blend is saved as PACK/<scenario>/<name>.blend beside a copy of its rig. PACK/dataset.json is the spec with
those paths; the plan is made from it, so the plan records the packed files' hashes. A missing file is
refused with its path; nothing is left half-written (PACK is staged beside itself and renamed).
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

from rowbeam.farm.dataset import load_spec
from rowbeam.util.errors import RowbeamError
from rowbeam.bundle import ownership
from rowbeam.bundle.files import atomic_write_json, load_json

MARK = "ROWBEAM_PACK "
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


def pack_spec(spec_path, pack_dir) -> Path:
    """Pack every scenario of a spec into `pack_dir` (new); returns the packed spec PACK/dataset.json."""
    spec = load_spec(spec_path)
    pack = Path(pack_dir).resolve()
    if pack.exists():
        raise RowbeamError(f"--pack {pack}: exists; give a new folder")
    ownership.reclaim_siblings(pack, ".staging-")          # what killed pack runs left (owned, owner gone)
    stage = ownership.make_owned_dir(pack.with_name(f".{pack.name}.staging-{os.getpid()}-{secrets.token_hex(3)}"),
                                     "pack-staging")
    jobs = {}
    for s in spec.scenarios:
        jobs.setdefault(s.scenario, (str(s.blend), str(stage / s.scenario)))
    try:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                         os.environ.get("PYTHONPATH")])))
        proc = subprocess.run([sys.executable, "-m", "rowbeam.farm.pack", json.dumps(list(jobs.values()))],
                              capture_output=True, text=True, env=env, timeout=1800)
        results = [json.loads(line[len(MARK):]) for line in proc.stdout.splitlines() if line.startswith(MARK)]
        if len(results) != len(jobs):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RowbeamError(f"--pack: Blender could not pack the scenarios ({tail[0][:200]})")
        for r in results:
            if "error" in r:
                raise RowbeamError(r["error"])
        doc = json.loads(json.dumps(spec.document))
        for raw, s in zip(doc["scenarios"], spec.scenarios, strict=True):
            raw["blend"] = f"{s.scenario}/{s.blend.name}"
            if s.rig is not None:
                rig = load_json(s.rig, "rig")
                if isinstance(rig, dict) and rig.get("ontology"):       # the rig's ontology travels with it
                    onto = (s.rig.parent / rig["ontology"]).resolve()
                    shutil.copyfile(onto, stage / s.scenario / onto.name)
                    rig["ontology"] = onto.name
                atomic_write_json(stage / s.scenario / s.rig.name, rig)
                raw["rig"] = f"{s.scenario}/{s.rig.name}"
        atomic_write_json(stage / "dataset.json", doc)
        stage.rename(pack)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    load_json(pack / "dataset.json", "dataset spec")
    return pack / "dataset.json"


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
