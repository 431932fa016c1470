"""`make bench-gpu`: the running example's camera label export (and LiDAR sweep) on the GPU against the CPU.

Labels are compared with the CPU run (ids and validity bitwise; camera_z, range, normals and LiDAR ranges within
the tolerances below) and GPU/CPU time ratios printed. With no CUDA/OptiX/HIP/oneAPI/Metal device it stops at
once with one line and exit 2: it never falls back to the CPU silently. `--detect-only` only finds the device.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# Declared tolerances, GPU vs CPU: Cycles' GPU kernels intersect in float32 with other instruction orders,
# so a hit moves by a few float32 ulps of its distance (~1e-6 relative); 1e-4 m is the per-row tolerance of
# the calibration tests.
TOL_DEPTH_M = 1e-4
TOL_NORMAL = 1e-4
MAX_ID_MISMATCH_FRACTION = 0.0     # ids and validity bitwise
EVENT, SWEEP = 30, 10


def fail(message: str) -> int:
    print(f"rowbeam bench-gpu: error: {message}", file=sys.stderr)
    return 2


def find_gpu() -> str:
    """The GPU description cycles_setup.select_device picks with preference 'gpu' (raises RowbeamError if none)."""
    import bpy

    from rowbeam.blender.cycles import cycles_setup as cs
    from rowbeam.blender.compat.scene_patch import ScenePatch

    with ScenePatch() as p:
        return cs.select_device(bpy.context.scene, p, "gpu")


def export(work: Path, blend: Path, device: str, sensors: list, first: int):
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export

    out = work / f"bundle_{device}_{sensors[0]}"
    p = plan_export(ExportRequest(out=out, blend=blend, rig=blend.with_suffix(".rig.json"), sensors=sensors,
                                  first_event=first, count=1, device=device))
    t0 = time.perf_counter()
    summary = run_export(p)
    seconds = time.perf_counter() - t0
    event = Path((summary["published"] or summary["quarantined"])[0])
    return seconds, event, bool(summary["published"])


def compare(cpu_event: Path, gpu_event: Path, depth_keys, normal_keys) -> dict:
    import numpy as np

    from rowbeam.bundle.reader import open_event

    a, b = open_event(cpu_event).arrays(), open_event(gpu_event).arrays()
    out = {}
    for key in ("instance_id", "semantic_id", "valid"):
        if key in a:
            out[f"{key}_mismatch_fraction"] = float(np.mean(a[key] != b[key]))
    both = (a["valid"] == 1) & (b["valid"] == 1) & (a["instance_id"] == b["instance_id"])
    for key in depth_keys + normal_keys:
        if key in a:
            diff = np.abs(a[key].astype(np.float64) - b[key].astype(np.float64))[both]
            out[f"{key}_max_abs_diff"] = float(diff.max(initial=0.0))
    ok = all(v <= MAX_ID_MISMATCH_FRACTION for k, v in out.items() if k.endswith("fraction"))
    ok &= all(out.get(f"{k}_max_abs_diff", 0.0) <= TOL_DEPTH_M for k in depth_keys)
    ok &= all(out.get(f"{k}_max_abs_diff", 0.0) <= TOL_NORMAL for k in normal_keys)
    out["within_tolerance"] = bool(ok)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--detect-only", action="store_true", help="find the GPU, print it and stop")
    args = parser.parse_args()
    from rowbeam.util.errors import RowbeamError

    try:
        gpu = find_gpu()
    except RowbeamError as exc:
        return fail(f"{exc}; nothing was run (this bench never falls back to the CPU)")
    print(f"GPU: {gpu}")
    if args.detect_only:
        return 0
    from rowbeam.blender.scenes import common, running_example

    work = Path(tempfile.mkdtemp(prefix="rowbeam_bench_gpu_"))
    try:
        running_example.build(1280, 720)
        blend = common.save(work / "dusk.blend", running_example.rig(rgb_samples=0, object_labels=False))
        rows, ok = [], True
        for label, sensors, first, depth, normals in (
                ("camera labels 1280x720", ["camera_front"], EVENT, ["camera_z", "range"],
                 ["normal_geometric", "normal_shading"]),
                ("LiDAR sweep 64x2048", ["lidar_top"], SWEEP, ["range"], [])):
            cpu_s, cpu_event, cpu_ok = export(work, blend, "cpu", sensors, first)
            gpu_s, gpu_event, gpu_ok = export(work, blend, "gpu", sensors, first)
            device = json.loads((gpu_event / "manifest.json").read_text())["build"]["render_device"]
            diff = compare(cpu_event, gpu_event, depth, normals)
            ok &= diff["within_tolerance"] and cpu_ok and gpu_ok
            rows.append((label, cpu_s, gpu_s, device, diff, cpu_ok, gpu_ok))
        for label, cpu_s, gpu_s, device, diff, cpu_ok, gpu_ok in rows:
            print(f"{label}: CPU {cpu_s:.3f} s, GPU {gpu_s:.3f} s ({device}): GPU/CPU = {gpu_s / cpu_s:.2f}; "
                  f"published CPU {cpu_ok} GPU {gpu_ok}; {diff}")
        print(f"labels GPU vs CPU: {'within' if ok else 'NOT within'} the declared tolerances (ids and validity "
              f"bitwise, depths {TOL_DEPTH_M} m, normals {TOL_NORMAL})")
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
