"""rowbeam benchmarks (`make bench`). Ratios are measured side by side in one run, interleaved,
median of `--repeat` rounds, because these machines are noisy. Not part of the test suite."""
from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import bpy  # noqa: E402

from contracts.arrays import decode_payload  # noqa: E402
from contracts.check import check_bundle  # noqa: E402
from exporter import cycles_setup as cs  # noqa: E402
from contracts.camera_model import intrinsics_from_blender  # noqa: E402
from exporter.camera_event import camera_params, exact_row_labels, setup_label_render  # noqa: E402
from exporter.run import ExportRequest, plan_export, run_export  # noqa: E402
from exporter.scene_clock import camera_poses, set_time  # noqa: E402
from exporter.scene_patch import ScenePatch  # noqa: E402
from scenes import common, running_example  # noqa: E402

EVENT = 30


def timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def camera_benchmark(work: Path, repeat: int, sample_rows: int) -> dict:
    running_example.build(1280, 720)
    blend = common.save(work / "dusk.blend", running_example.rig(rgb_samples=0))
    rig = blend.with_suffix(".rig.json")

    def plan(out):
        return plan_export(ExportRequest(out=out, blend=blend, rig=rig, first_event=EVENT, count=1, device="cpu"))

    def global_shutter_render():
        """(a) one plain 1-spp global-shutter render of the label passes at the event's reference time."""
        p = plan(work / "unused")
        ctx, sensor = p.context, p.events[0][0]
        with ScenePatch() as patch:
            setup_label_render(patch, ctx, sensor, 1280, 720)
            patch.set(ctx.scene.render, "use_motion_blur", False)
            set_time(ctx.scene, ctx.clock, sensor.timing(EVENT, 720).reference_time_ns())
            return timed(lambda: cs.render_passes(ctx.scene, ctx.view_layer))[0]

    def rowbeam_export(i):
        out = work / f"rs_{i}"
        p = plan(out)
        seconds, _ = timed(lambda: run_export(p))
        return seconds, out

    a_times, b_times, bundles = [], [], []
    for i in range(repeat):
        a_times.append(global_shutter_render())
        b, out = rowbeam_export(i)
        b_times.append(b)
        bundles.append(out)

    # (c) naive exact: one border render per row at its exact time, extrapolated from sample rows
    p = plan(work / "unused")
    ctx, sensor = p.context, p.events[0][0]
    cam = ctx.scene.objects[sensor.object]
    timing = sensor.timing(EVENT, 720)
    K = intrinsics_from_blender(camera_params(ctx.scene, cam, 1280, 720))
    rows = [round(k * 719 / (sample_rows - 1)) for k in range(sample_rows)]
    with ScenePatch() as patch:
        setup_label_render(patch, ctx, sensor, 1280, 720)
        patch.set(ctx.scene.render, "use_motion_blur", False)
        t0 = time.perf_counter()
        for v in rows:
            pose = camera_poses(ctx.scene, ctx.clock, cam, [timing.row_time_exact(v)])[0]
            exact_row_labels(ctx, sensor, timing, v, K, pose)
        per_row = (time.perf_counter() - t0) / len(rows)

    # (d) contracts check vs a raw decode of the same payloads
    event = next((bundles[-1] / "events").glob("*/*"))
    manifest = __import__("json").loads((event / "manifest.json").read_text())
    d_check, d_decode = [], []
    for _ in range(repeat):
        d_check.append(timed(lambda: check_bundle(bundles[-1]))[0])
        d_decode.append(timed(lambda: [decode_payload(event / e["uri"], e) for e in manifest["modalities"].values()])[0])

    a, b, dc, dd = (statistics.median(x) for x in (a_times, b_times, d_check, d_decode))
    return {"a_global_shutter_render_s": a, "b_rowbeam_label_export_s": b, "b_over_a": b / a,
            "b_breakdown_s": manifest["run"]["seconds"],
            "c_naive_per_row_render_s": per_row, "c_naive_event_extrapolated_s": per_row * 720,
            "c_over_b": per_row * 720 / b, "c_sample_rows": len(rows),
            "d_check_s": dc, "d_raw_decode_s": dd, "d_over_decode": dc / dd}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sample-rows", type=int, default=12)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rowbeam_bench_"))
    try:
        cam = camera_benchmark(work, args.repeat, args.sample_rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nrowbeam bench — running example, 1280x720, {len([o for o in bpy.data.objects if o.type == 'MESH'])} "
          f"objects, CPU, median of {args.repeat}")
    print(f"(a) global-shutter 1-spp label render         {cam['a_global_shutter_render_s']:8.3f} s")
    print(f"(b) rowbeam rolling-shutter label export       {cam['b_rowbeam_label_export_s']:8.3f} s   (b)/(a) = "
          f"{cam['b_over_a']:.2f}  [target <= 3]")
    print(f"    breakdown of (b): {cam['b_breakdown_s']}")
    print(f"(c) naive exact, one render per row            {cam['c_naive_event_extrapolated_s']:8.3f} s   "
          f"({cam['c_naive_per_row_render_s'] * 1e3:.1f} ms/row x 720, from {cam['c_sample_rows']} rows; "
          f"(c)/(b) = {cam['c_over_b']:.1f})")
    print(f"(d) contracts check                            {cam['d_check_s']:8.3f} s   vs raw decode "
          f"{cam['d_raw_decode_s']:.3f} s: {cam['d_over_decode']:.2f}x  [target <= 3]")
    print(f"peak RSS                                       {peak_mb:8.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
