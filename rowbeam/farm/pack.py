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
        proc = subprocess.run([sys.executable, "-m", "rowbeam.blender.compat.blend_pack",
                               json.dumps(list(jobs.values()))],
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
