"""`make bench-gpu`: the running example's camera label export (and LiDAR sweep) on the GPU against the CPU.

Labels are compared with the CPU run (ids and validity bitwise; camera_z, range, normals and LiDAR ranges within
the tolerances below) and GPU/CPU time ratios recorded, for each GPU backend asked for (`--backends`, default
OptiX then CUDA: each one this machine has). Figures go to bench/results_gpu.md (and bench/results.jsonl) with
their tolerance and met / not met. With no CUDA/OptiX/HIP/oneAPI/Metal device it writes every figure as
"unmeasured: no GPU available" and stops with one line and exit 2: it never falls back to the CPU silently.
`--detect-only` only finds the device (writes nothing). `--dry-run` runs the same plumbing at a tiny size with
the CPU standing in for the GPU (figures marked so; for the tests, not a measurement).
"""
from __future__ import annotations

import argparse
import json
import os
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
RESULTS = REPO / "bench" / "results_gpu.md"
BACKENDS = ("OPTIX", "CUDA")
UNMEASURED = "unmeasured: no GPU available"
# (label, sensors, first event, depth keys, normal keys)
WORKLOADS = (("camera labels", ["camera_front"], EVENT, ["camera_z", "range"], ["normal_geometric", "normal_shading"]),
             ("LiDAR sweep", ["lidar_top"], SWEEP, ["range"], []))


def fail(message: str) -> int:
    print(f"rowbeam bench-gpu: error: {message}", file=sys.stderr)
    return 2


def find_gpu(backends=None) -> str:
    """The GPU description cycles_setup.select_device picks with preference 'gpu', trying only `backends` (default
    every backend it knows, OptiX first); raises RowbeamError if none."""
    import bpy

    from rowbeam.blender.compat.scene_patch import ScenePatch
    from rowbeam.blender.cycles import cycles_setup as cs

    with only_backends(backends), ScenePatch() as p:
        return cs.select_device(bpy.context.scene, p, "gpu")


class only_backends:
    """Within the block the exporter's GPU selection tries only `backends` (None: all), in that order."""

    def __init__(self, backends):
        self.backends = backends

    def __enter__(self):
        from rowbeam.blender.cycles import cycles_setup as cs

        self.saved = cs.GPU_BACKENDS
        if self.backends:
            cs.GPU_BACKENDS = tuple(self.backends)
        return self

    def __exit__(self, *exc):
        from rowbeam.blender.cycles import cycles_setup as cs

        cs.GPU_BACKENDS = self.saved


def export(work: Path, blend: Path, device: str, sensors: list, first: int, tag: str):
    """(wall s, event folder, published) of one event exported on `device` ('cpu' | 'gpu') into work/bundle_<tag>."""
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export

    out = work / f"bundle_{tag}_{sensors[0]}"
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


def build_scene(work: Path, dry_run: bool) -> tuple:
    """The running example, labels only: (blend, image size). A dry run: 64x36 and a small LiDAR sweep."""
    from rowbeam.blender.scenes import common, running_example

    size = (64, 36) if dry_run else (1280, 720)
    running_example.build(*size)
    lidar = {"azimuth_steps": 128, "preset": "uniform_32"} if dry_run else None
    blend = common.save(work / "dusk.blend", running_example.rig(rgb_samples=0, object_labels=False,
                                                                 lidar_fields=lidar))
    return blend, size


def measure(work: Path, blend: Path, backend: str, dry_run: bool, size: tuple) -> bool:
    """Each workload on the CPU and on `backend` (the CPU again in a dry run): time ratio and label agreement
    recorded as bench figures; True when every label agreed within the declared tolerances."""
    from bench import figure

    ok = True
    for label, sensors, first, depth, normals in WORKLOADS:
        name = f"{label} {size[0]}x{size[1]}" if sensors == ["camera_front"] else label
        cpu_s, cpu_event, cpu_ok = export(work, blend, "cpu", sensors, first, f"cpu_{backend}")
        with only_backends([backend]):
            gpu_s, gpu_event, gpu_ok = export(work, blend, "cpu" if dry_run else "gpu", sensors, first, backend)
        device = json.loads((gpu_event / "manifest.json").read_text())["build"]["render_device"]
        diff = compare(cpu_event, gpu_event, depth, normals)
        ok &= diff["within_tolerance"] and cpu_ok and gpu_ok
        note = f"{device}{' (dry run: the CPU stands in for the GPU)' if dry_run else ''}; published CPU {cpu_ok} " \
               f"GPU {gpu_ok}"
        print(f"{name} [{backend}]: CPU {cpu_s:.3f} s, GPU {gpu_s:.3f} s ({note}): GPU/CPU = {gpu_s / cpu_s:.2f}; {diff}")
        figure(f"GPU/CPU wall, {name} [{backend}]", gpu_s / cpu_s, "x", None, f"CPU {cpu_s:.3f} s, GPU {gpu_s:.3f} s; {note}")
        for key, value in diff.items():
            if key != "within_tolerance":
                tol = (MAX_ID_MISMATCH_FRACTION if key.endswith("fraction") else
                       TOL_DEPTH_M if key.removesuffix("_max_abs_diff") in depth else TOL_NORMAL)
                figure(f"GPU vs CPU {key}, {name} [{backend}]", value, "", f"<= {tol:g}", note)
    return ok


def record_unmeasured(backends) -> None:
    """Every figure this bench would measure, as 'unmeasured: no GPU available' (no value, no verdict)."""
    from bench import figure

    for backend in backends:
        for label, sensors, _, _, normals in WORKLOADS:
            name = "camera labels 1280x720" if sensors == ["camera_front"] else label
            figure(f"GPU/CPU wall, {name} [{backend}]", float("nan"), "x", None, UNMEASURED)
            figure(f"GPU vs CPU labels within the declared tolerances, {name} [{backend}]", float("nan"), "", None,
                   f"{UNMEASURED} (ids, validity bitwise; depths {TOL_DEPTH_M} m"
                   + (f", normals {TOL_NORMAL})" if normals else ")"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--detect-only", action="store_true", help="find the GPU, print it and stop (writes nothing)")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help="GPU backends to measure, each one present (default OPTIX,CUDA)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="results file (default bench/results_gpu.md)")
    parser.add_argument("--dry-run", action="store_true", help="the CPU stands in for the GPU at 64x36: checks "
                        "this bench's plumbing, measures nothing")
    args = parser.parse_args()
    import bench
    from rowbeam.util.errors import RowbeamError

    bench.LOAD_AT_START = round(os.getloadavg()[0], 2)
    backends = [b.strip().upper() for b in args.backends.split(",") if b.strip()]
    found = {}
    for backend in backends:
        try:
            found[backend] = "CPU (dry run)" if args.dry_run else find_gpu([backend])
        except RowbeamError:
            continue
    if args.detect_only:
        if not found:
            return fail(f"--device gpu: no GPU compute device ({'/'.join(backends)}) is available; nothing was run "
                        "(this bench never falls back to the CPU)")
        print("\n".join(f"GPU: {d}" for d in found.values()))
        return 0
    argv = sys.argv[1:]
    if not found:
        record_unmeasured(backends)
        bench.write_results(argv, args.results, "rowbeam GPU bench results", "`make bench-gpu` (bench/bench_gpu.py)")
        return fail(f"--device gpu: no GPU compute device ({'/'.join(backends)}) is available; nothing was run "
                    f"(this bench never falls back to the CPU); {args.results.name} says {UNMEASURED!r}")
    work = Path(tempfile.mkdtemp(prefix="rowbeam_bench_gpu_"))
    try:
        blend, size = build_scene(work, args.dry_run)
        ok = True
        for backend, device in found.items():
            print(f"GPU: {device}")
            ok &= measure(work, blend, backend, args.dry_run, size)
        print(f"labels GPU vs CPU: {'within' if ok else 'NOT within'} the declared tolerances (ids and validity "
              f"bitwise, depths {TOL_DEPTH_M} m, normals {TOL_NORMAL})")
        bench.write_results(argv, args.results, "rowbeam GPU bench results", "`make bench-gpu` (bench/bench_gpu.py)")
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
