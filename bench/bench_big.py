"""Bench section `big` (`make bench ONLY=big`): big scenes (rowbeam/blender/scenes/big_scenes.py).

A geometry-nodes scatter of 10^4 instanced crates (half in front of the camera, half behind it) and one heightfield
mesh of 10^6 faces, at 1/`scale` of 1280 x 720 (default 4: 320 x 180). Each scene runs in a fresh process (so its
peak RSS is its own, VmHWM): build and save the scene, export one camera event with object labels, `rowbeam check`
and `rowbeam report` of the bundle. Per scene: export, object-label, check and report seconds (wall and CPU),
object labels against the same event's label export (row poses + label render + derive + verify), peak RSS, the
manifest's size and how many instances it lists that the event does not show (must be 0: no per-instance payload
for an instance without a pixel).

    .venv/bin/python bench/bench.py --only big [--big-instances 10000] [--big-faces 1000000] [--big-scale 4]
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

EVENT = 1
RSS_TARGET_MB = 4096.0
OBJECT_LABEL_TARGET = 1.5          # object labels / the event's label export at 10^4 instances


def big_benchmark(work: Path, instances: int, faces: int, scale: int) -> dict:
    """{"scatter": child result, "mesh": child result}: each scene measured in a fresh process."""
    return {"scatter": _child(work, "scatter", instances, scale), "mesh": _child(work, "mesh", faces, scale)}


def _child(work: Path, kind: str, size: int, scale: int) -> dict:
    d = work / f"big_{kind}"
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, __file__, kind, str(size), str(scale), str(d)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError(f"bench big {kind} {size} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    result = json.loads(r.stdout.strip().splitlines()[-1])
    result["process_wall_s"] = time.perf_counter() - t0
    return result


def measure(kind: str, size: int, scale: int, work: Path) -> dict:
    """One scene in this (fresh) process: build, export one event with object labels, check, report."""
    from bench import _own_peak_rss_mb, cpu_timed
    from rowbeam.blender.export.allocator import keep_freed_memory
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export
    from rowbeam.blender.scenes import big_scenes, common
    from rowbeam.check.runner import check_bundle
    from rowbeam.report.build import build_report

    keep_freed_memory()
    build = big_scenes.instance_scatter if kind == "scatter" else big_scenes.big_mesh
    build_s, _, (truth, rig) = cpu_timed(lambda: build(size, scale=scale))
    blend = common.save(work / f"{kind}.blend", rig)
    build_rss = _own_peak_rss_mb()
    plan = plan_export(ExportRequest(out=work / "bundle", blend=blend, rig=blend.with_suffix(".rig.json"),
                                     sensors=["camera_front"], first_event=EVENT, count=1, device="cpu"))
    export_s, export_cpu, summary = cpu_timed(lambda: run_export(plan))
    export_rss = _own_peak_rss_mb()
    check_s, check_cpu, report = cpu_timed(lambda: check_bundle(work / "bundle"))
    report_s, report_cpu, _ = cpu_timed(lambda: build_report(work / "bundle", work / "report"))
    event = Path((summary["published"] or summary["quarantined"])[0])
    sec = json.loads((event / "manifest.json").read_text())["run"]["seconds"]
    label_s = sum(sec.get(k, 0.0) for k in ("row_poses", "label_render", "derive", "verify"))
    return {"kind": kind, "size": size, "image": list(truth["size"]), "build_s": build_s, "export_s": export_s,
            "export_cpu_s": export_cpu, "object_labels_s": sec.get("object_labels", 0.0), "label_export_s": label_s,
            "check_s": check_s, "check_cpu_s": check_cpu, "report_s": report_s, "report_cpu_s": report_cpu,
            "check_status": report["status"], "published": bool(summary["published"]),
            "peak_rss_mb": _own_peak_rss_mb(), "build_rss_mb": build_rss, "export_rss_mb": export_rss,
            **listing(event, truth)}


def listing(event: Path, truth: dict) -> dict:
    """What the event's manifest lists: its size, the instances it lists, those the event shows (a pixel of theirs
    in instance_id), listed instances not shown (must be 0), listed instances behind the camera (must be 0) and
    object-label records."""
    import numpy as np

    from rowbeam.bundle.arrays import decode_payload

    m = json.loads((event / "manifest.json").read_text())
    entry = m["modalities"]["instance_id"]
    shown = set(np.unique(decode_payload(event / entry["uri"], entry)).tolist())
    insts = [o for o in m["objects"] if "instance" in o]
    front = truth.get("visible_instances")
    behind = sum(o["instance"]["persistent_path"][-1] >= front for o in insts) if front is not None else 0
    return {"manifest_kb": (event / "manifest.json").stat().st_size / 1024, "instances_listed": len(insts),
            "instances_shown": len(shown & {o["render_index"] for o in insts}),
            "listed_not_shown": sum(o["render_index"] not in shown for o in insts), "listed_behind": int(behind),
            "object_label_records": len(m.get("object_labels", {}).get("objects", [])),
            "instances_in_scene": (front or 0) + truth.get("hidden_instances", 0)}


def print_big(r: dict, figure) -> None:
    """Print the section and record its figures with `figure` (bench.figure)."""
    for name, x in r.items():
        what = f"{x['size']:,} instances" if name == "scatter" else f"{x['size']:,} faces"
        tag = f"(B) {what} {x['image'][0]}x{x['image'][1]}"
        ratio = x["object_labels_s"] / x["label_export_s"]
        print(f"{tag}: build {x['build_s']:.1f} s, export {x['export_s']:.1f} s (CPU {x['export_cpu_s']:.1f}), object "
              f"labels {x['object_labels_s']:.2f} s vs label export {x['label_export_s']:.2f} s ({ratio:.2f}x), check "
              f"{x['check_s']:.2f} s ({x['check_status']}), report {x['report_s']:.2f} s, peak RSS "
              f"{x['peak_rss_mb']:.0f} MB (after build {x['build_rss_mb']:.0f}, after export {x['export_rss_mb']:.0f}); "
              f"manifest {x['manifest_kb']:.0f} KiB listing {x['instances_listed']} of {x['instances_in_scene']} "
              f"instances ({x['instances_shown']} shown), {x['object_label_records']} object-label records")
        figure(f"{tag} export wall", x["export_s"], "s", None, f"CPU {x['export_cpu_s']:.1f} s; build {x['build_s']:.1f} s")
        figure(f"{tag} object labels / label export", ratio, "x",
               f"<= {OBJECT_LABEL_TARGET}" if name == "scatter" else None,
               f"{x['object_labels_s']:.2f} s / {x['label_export_s']:.2f} s")
        figure(f"{tag} check wall", x["check_s"], "s", None, f"status {x['check_status']}; CPU {x['check_cpu_s']:.2f} s")
        figure(f"{tag} report wall", x["report_s"], "s", None, f"CPU {x['report_cpu_s']:.2f} s")
        figure(f"{tag} peak RSS", x["peak_rss_mb"], "MB", f"<= {RSS_TARGET_MB:.0f}",
               "export + check + report in one fresh process")
        figure(f"{tag} checker passes", float(x["check_status"] == "pass" and x["published"]), "", ">= 1")
        if name == "scatter":
            figure(f"{tag} manifest entries of unseen instances", x["listed_not_shown"] + x["listed_behind"], "",
                   "<= 0", f"manifest {x['manifest_kb']:.0f} KiB: {x['instances_listed']} of "
                   f"{x['instances_in_scene']} instances listed, {x['instances_shown']} shown")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    kind, size, scale, folder = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    print(json.dumps(measure(kind, size, scale, folder)))
