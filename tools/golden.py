"""Golden hashes: build scenes, export them through the public CLI, and hash every payload and every
derived output (check, report, adapters), so a change that must not alter what is computed can be proved.

    python tools/golden.py OUT_DIR            writes OUT_DIR/golden.json (run from the repository root)
    python tools/golden.py --compare A.json B.json
Only the public interfaces are used (`rowbeam scenes|export|check|report|adapt|associate`).
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

PY = sys.executable
VOLATILE = re.compile(r'"(seconds|wall_s|cpu_s|created|created_utc|started|finished|elapsed_s|host|hostname|'
                      r'pid|generated|generated_utc|date|time_utc|duration_s|timings|timing_s)"')


def run(*args, check=True):
    r = subprocess.run([PY, "-m", "rowbeam", *map(str, args)], capture_output=True, text=True)
    if check and r.returncode not in (0, 1):
        raise SystemExit(f"failed: {args}\n{r.stdout}\n{r.stderr}")
    return r


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def hashes(root: Path, skip_json=True) -> dict:
    out = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file() or "/.staging" in str(p) or p.name.endswith(".lock"):
            continue
        rel = str(p.relative_to(root))
        if p.suffix in (".json", ".html", ".txt", ".log") and skip_json:
            out[rel] = "json"
            continue
        out[rel] = sha(p)
    return out


def payload_hashes(bundle: Path) -> dict:
    """sha256 of every binary payload file under the bundle (EXR, npy, PLY, ...), by relative path."""
    out = {}
    for p in sorted(bundle.rglob("*")):
        if p.is_file() and p.suffix in (".exr", ".npy", ".png", ".bin", ".ply", ".flo", ".pfm"):
            out[str(p.relative_to(bundle))] = sha(p)
    return out


def export(blend, rig, out, *extra):
    r = subprocess.run([PY, "render_export.py", str(blend), "--rig", str(rig), "--out", str(out), "-q", *map(str, extra)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"export failed {blend} {extra}: {r.stdout}{r.stderr}")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    golden = {}
    scenes = out / "scenes"
    scenes.mkdir(exist_ok=True)
    jobs = [("running_example", ["--scale", "8", "--rgb-samples", "2"]),
            *[(n, ["--scale", "8"]) for n in ("fronto_plane", "marker", "tilted_plane", "moving_plane",
                                                "ego_forward", "ego_yaw")],
            ("lens_board", ["--scale", "8"]), ("lens_board_fisheye", ["--scale", "8", "--lens", "opencv_fisheye"])]
    for name, extra in jobs:
        scene = "lens_board" if name.startswith("lens_board") else name
        blend = scenes / f"{name}.blend"
        if not blend.exists():
            r = run("scenes", scene, blend, *extra)
            if r.returncode != 0:
                raise SystemExit(r.stderr)
        rig = blend.with_suffix(".rig.json")
        bundle = out / f"bundle_{name}"
        if name == "running_example":
            export(blend, rig, bundle, "--sensors", "camera_front", "--first-event", 30, "--count", 2, "--flow")
            export(blend, rig, bundle, "--sensors", "lidar_top", "--first-event", 10, "--count", 1)
            export(blend, rig, bundle, "--sensors", "radar_front", "--first-event", 20, "--count", 1)
            run("associate", bundle, "--max-skew-us", 100)
        else:
            export(blend, rig, bundle, "--first-event", 1, "--count", 2, "--flow")
        golden[f"{name}/payloads"] = payload_hashes(bundle)
        r = run("check", bundle, "--report", out / f"qa_{name}.json")
        golden[f"{name}/check_rc"] = r.returncode
        golden[f"{name}/check_stdout"] = hashlib.sha256(re.sub(r"[0-9.]+ s\b", "", r.stdout.replace(str(out), "<OUT>"))
                                                        .encode()).hexdigest()
        qa = (out / f"qa_{name}.json").read_text().replace(str(out), "<OUT>")   # comparable across folders
        golden[f"{name}/qa"] = hashlib.sha256(re.sub(r'"seconds": [0-9.e-]+', "", qa).encode()).hexdigest()
        rep = out / f"report_{name}"
        r = run("report", bundle, "--out", rep)
        golden[f"{name}/report_rc"] = r.returncode
        golden[f"{name}/report_files"] = {k: v for k, v in hashes(rep).items() if k.endswith(".png")}
        if name == "running_example":
            flows = sorted(p.parent for p in bundle.glob("flows/*/*/manifest.json"))
            for fmt, dst in (("flo", "f.flo"), ("kitti-flow", "kf.png"), ("pfm", "f.pfm")):
                r = run("adapt", fmt, flows[0], out / f"ad_{dst}")
                golden[f"adapt/{fmt}"] = (r.returncode, sha(out / f"ad_{dst}") if (out / f"ad_{dst}").exists() else None)
            for fmt in ("kitti-lidar", "bop", "kitti-object"):
                r = run("adapt", fmt, bundle, out / f"ad_{fmt}")
                golden[f"adapt/{fmt}"] = (r.returncode, hashes(out / f"ad_{fmt}"))
            r = run("adapt", "coco", bundle, out / "ad_coco.json")
            golden["adapt/coco"] = (r.returncode, sha(out / "ad_coco.json") if (out / "ad_coco.json").exists() else None)
        if name.startswith("lens_board"):
            r = run("adapt", "rectify", bundle, out / f"ad_rectify_{name}")
            golden[f"adapt/rectify/{name}"] = (r.returncode, hashes(out / f"ad_rectify_{name}"))
    (out / "golden.json").write_text(json.dumps(golden, indent=1, sort_keys=True))
    n = sum(len(v) for k, v in golden.items() if k.endswith("/payloads"))
    print(f"golden: {n} payloads, {len(golden)} entries -> {out / 'golden.json'}")


def compare(a_path: str, b_path: str) -> int:
    """Print every entry that differs between two golden.json files; exit 1 when any does."""
    a, b = json.loads(Path(a_path).read_text()), json.loads(Path(b_path).read_text())
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    for k in differ:
        print(f"differs: {k}")
    print(f"golden: {len(a)} entries, {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    main(Path(sys.argv[1]).resolve())
