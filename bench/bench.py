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
import numpy as np  # noqa: E402

from contracts.arrays import decode_payload  # noqa: E402
from contracts.check import check_bundle  # noqa: E402
from exporter import cycles_setup as cs  # noqa: E402
from contracts.camera_model import intrinsics_from_blender  # noqa: E402
from exporter.camera_event import camera_params, exact_row_labels, setup_label_render  # noqa: E402
from exporter.run import ExportRequest, plan_export, run_export  # noqa: E402
from exporter.scene_clock import camera_poses, set_time  # noqa: E402
from exporter.scene_patch import ScenePatch  # noqa: E402
from exporter.lidar_event import export_lidar_event  # noqa: E402
from exporter.lidar_labels import derive_lidar_labels, point_tables  # noqa: E402
from exporter.lidar_layout import sweep_layout  # noqa: E402
from exporter.lidar_osl import lidar_shader_source, make_lidar_camera  # noqa: E402
from exporter.scene_clock import rigid_poses  # noqa: E402
from scenes import common, running_example  # noqa: E402

EVENT = 30
SWEEP = 10


def timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def running_example_files(work: Path):
    blend = work / "dusk.blend"
    if not blend.exists():
        running_example.build(1280, 720)
        common.save(blend, running_example.rig(rgb_samples=0, object_labels=False))   # (O) measures object labels
    return blend, blend.with_suffix(".rig.json")


def one_time_sweep(ctx, sensor, timing):
    """Baseline (i): the same OSL camera and label derivation, but one render with the whole scene
    frozen at the sweep centre and one mount pose for every beam (what per-tick simulators do)."""
    scene, mount = ctx.scene, ctx.scene.objects[sensor.object]
    layout = sweep_layout(sensor.azimuth_steps, timing.firing_period_ns, sensor.time_offsets_ns)
    with ScenePatch() as p:
        ctx.base_settings(p, layout.width, layout.rows)
        cs.label_settings(p, scene, ctx.view_layer)
        cs.add_true_normal_aov(p, ctx.render_objects())
        cs.set_render_indices(p, scene, ctx.table)
        make_lidar_camera(p, scene, mount, lidar_shader_source(sensor, layout))
        p.set(scene.render, "use_motion_blur", False)
        set_time(scene, ctx.clock, timing.reference_time_ns())
        passes = cs.render_passes(scene, ctx.view_layer)
    pose = rigid_poses(scene, ctx.clock, mount, [timing.reference_time_ns()])[0]
    poses = np.broadcast_to(pose, (sensor.azimuth_steps, sensor.channels, 4, 4))
    labels, _ = derive_lidar_labels(passes, layout, poses, sensor.directions(timing),
                                    (sensor.min_range_m, sensor.max_range_m), ctx.lut)
    return point_tables(labels, timing.beam_times_ns(), np.linalg.inv(pose))


def lidar_benchmark(work: Path, repeat: int, sample_firings: int) -> dict:
    """64 x 2048 sweep: rowbeam per-firing sweep vs (i) every beam at one time on the same engine and
    (ii) frame_set + scene.ray_cast per firing (extrapolated from sample firings)."""
    blend, rig = running_example_files(work)
    p = plan_export(ExportRequest(out=work / "lidar_bundle", blend=blend, rig=rig, sensors=["lidar_top"],
                                  first_event=SWEEP, count=1, device="cpu"))
    sensor, ctx = p.jobs[0].sensor, p.context
    scene, timing = ctx.scene, sensor.timing(SWEEP)
    per_firing, one_time = [], []
    for _ in range(repeat):
        per_firing.append(timed(lambda: export_lidar_event(ctx, sensor, SWEEP))[0])
        one_time.append(timed(lambda: one_time_sweep(ctx, sensor, timing))[0])
    export_s, _ = timed(lambda: run_export(p))
    mount = scene.objects[sensor.object]
    dirs = sensor.directions(timing)
    firings = np.linspace(0, sensor.azimuth_steps - 1, sample_firings).round().astype(int)
    t0 = time.perf_counter()
    for k in firings:
        set_time(scene, ctx.clock, timing.firing_time_exact(int(k)))
        depsgraph = bpy.context.evaluated_depsgraph_get()
        T = np.array(mount.matrix_world)
        for c in range(sensor.channels):
            scene.ray_cast(depsgraph, T[:3, 3].tolist(), (T[:3, :3] @ dirs[k, c]).tolist())
    naive_per_firing = (time.perf_counter() - t0) / len(firings)
    a, b = statistics.median(per_firing), statistics.median(one_time)
    naive = naive_per_firing * sensor.azimuth_steps
    breakdown = __import__("json").loads(next((work / "lidar_bundle" / "events").glob("*/*/manifest.json"))
                                         .read_text())["run"]["seconds"]
    return {"per_firing_s": a, "one_time_s": b, "over_one_time": a / b, "naive_s": naive,
            "naive_over_rowbeam": naive / a, "naive_per_firing_ms": naive_per_firing * 1e3,
            "sample_firings": len(firings), "shape": (sensor.azimuth_steps, sensor.channels),
            "export_s": export_s, "breakdown": breakdown}


def flow_benchmark(work: Path, repeat: int) -> dict:
    """Flow for a 1280x720 pair (events 30 -> 31) vs the label export of one event, interleaved."""
    from exporter.run import _export_event, _export_flow

    blend, rig = running_example_files(work)
    labels, flows = [], []
    for i in range(repeat):
        p = plan_export(ExportRequest(out=work / f"flow_{i}", blend=blend, rig=rig, sensors=["camera_front"],
                                      first_event=EVENT, count=2, flow=True, device="cpu"))
        p.writer.open()
        event_jobs = [j for j in p.jobs if not j.is_flow]
        flow_job = next(j for j in p.jobs if j.is_flow)
        labels.append(timed(lambda j=event_jobs[0], p=p: _export_event(p, j))[0])
        _export_event(p, event_jobs[1])
        seconds, (final, passed) = timed(lambda p=p, j=flow_job: _export_flow(p, j))
        flows.append(seconds)
    manifest = __import__("json").loads((final / "manifest.json").read_text())
    a, b = statistics.median(flows), statistics.median(labels)
    return {"flow_s": a, "label_s": b, "ratio": a / b, "passed": passed, "breakdown": manifest["run"]["seconds"],
            "forward": manifest["method"]["forward"]}


def object_label_benchmark(work: Path, width: int = 1280, height: int = 720, fractions=(0.25, 0.5, 1.0)) -> list:
    """Object labels (issue 10) on the running example's camera event: object-label seconds against the same
    event's label export (row poses + label render + derive + verify, measured in the same export), with a
    fraction of the objects kept (the others hide_render) to show how the cost scales with object count."""
    import json

    out = []
    for frac in fractions:
        running_example.build(width, height)
        objs = sorted((o for o in bpy.data.objects if o.type == "MESH"), key=lambda o: o.name)
        keep = set(o.name for o in objs[::max(1, round(1 / frac))]) if frac < 1 else {o.name for o in objs}
        for o in objs:
            o.hide_render = o.name not in keep
        blend = common.save(work / f"objects_{frac}.blend",
                            running_example.rig(lidar=False, rgb_samples=0, object_labels=True))
        p = plan_export(ExportRequest(out=work / f"objects_{frac}", blend=blend, rig=blend.with_suffix(".rig.json"),
                                      sensors=["camera_front"], first_event=EVENT, count=1, device="cpu"))
        summary = run_export(p)
        event = Path((summary["published"] or summary["quarantined"])[0])
        m = json.loads((event / "manifest.json").read_text())
        sec = m["run"]["seconds"]
        label = sum(sec.get(k, 0.0) for k in ("row_poses", "label_render", "derive", "verify"))
        objs_out = m["object_labels"]["objects"]
        out.append({"fraction": frac, "objects": len(keep), "listed": len(objs_out),
                    "visible": sum(o["px_count_visib"] > 0 for o in objs_out),
                    "renders": m["object_labels"]["method"]["renders"],
                    "rendered_images": m["object_labels"]["method"]["rendered_px"] / m["object_labels"]["method"]["image_px"],
                    "from_modal": m["object_labels"]["method"].get("objects_from_modal", 0),
                    "object_s": sec["object_labels"], "render_s": sec["object_label_renders"], "label_s": label,
                    "ratio": sec["object_labels"] / label, "passed": bool(summary["published"])})
    return out


def camera_benchmark(work: Path, repeat: int, sample_rows: int) -> dict:
    blend, rig = running_example_files(work)

    def plan(out):
        return plan_export(ExportRequest(out=out, blend=blend, rig=rig, sensors=["camera_front"], first_event=EVENT,
                                         count=1, device="cpu"))

    def global_shutter_render():
        """(a) one plain 1-spp global-shutter render of the label passes at the event's reference time."""
        p = plan(work / "unused")
        ctx, sensor = p.context, p.jobs[0].sensor
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
    ctx, sensor = p.context, p.jobs[0].sensor
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
    parser.add_argument("--sample-firings", type=int, default=64)
    parser.add_argument("--objects-only", action="store_true", help="only the object-label figure (O)")
    parser.add_argument("--objects-size", default="1280x720", help="image size of the object-label figure")
    args = parser.parse_args()
    if args.objects_only:
        work = Path(tempfile.mkdtemp(prefix="rowbeam_bench_"))
        try:
            _print_objects(object_label_benchmark(work, *map(int, args.objects_size.split("x"))), args.objects_size)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return 0
    work = Path(tempfile.mkdtemp(prefix="rowbeam_bench_"))
    try:
        cam = camera_benchmark(work, args.repeat, args.sample_rows)
        lidar = lidar_benchmark(work, args.repeat, args.sample_firings)
        flow = flow_benchmark(work, args.repeat)
        objects = object_label_benchmark(work)
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
    F, C = lidar["shape"]
    print(f"LiDAR {C} x {F} sweep of the same scene:")
    print(f"(L) rowbeam per-firing sweep                     {lidar['per_firing_s']:8.3f} s   (whole export with "
          f"writing and QA: {lidar['export_s']:.3f} s; {lidar['breakdown']})")
    print(f"(i) same engine, every beam at one time          {lidar['one_time_s']:8.3f} s   (L)/(i) = "
          f"{lidar['over_one_time']:.2f}  [target <= 3]")
    print(f"(ii) naive frame_set + scene.ray_cast per firing {lidar['naive_s']:8.3f} s   "
          f"({lidar['naive_per_firing_ms']:.2f} ms/firing x {F}, from {lidar['sample_firings']} firings; "
          f"(ii)/(L) = {lidar['naive_over_rowbeam']:.1f}  [target >= 50])")
    print("Flow, 1280x720 pair (events 30 -> 31), both directions + scene flow, written and checked:")
    print(f"(F) flow pair export                             {flow['flow_s']:8.3f} s   vs one event's label export "
          f"{flow['label_s']:.3f} s: ratio {flow['ratio']:.2f}  [target <= 1.0]  ({flow['breakdown']}; "
          f"fixed-point iterations {flow['forward']['iterations']}, max row residual "
          f"{flow['forward']['max_row_residual']:.2g})")
    _print_objects(objects, "1280x720")
    print(f"peak RSS                                         {peak_mb:8.0f} MB")
    return 0


def _print_objects(rows: list, size: str) -> None:
    print(f"Object labels (amodal masks on the 3x canvas, counts, boxes, poses, assets), camera event {EVENT}, {size}:")
    for r in rows:
        print(f"(O) {r['objects']:4d} objects kept ({r['listed']} listed, {r['visible']} visible): object labels "
              f"{r['object_s']:8.3f} s ({r['renders']} renders {r['render_s']:.3f} s covering {r['rendered_images']:.1f} "
              f"image areas, {r['from_modal']} from the modal "
              f"mask) vs the event's label export {r['label_s']:.3f} s: ratio {r['ratio']:.2f}  [target <= 1.5]"
              f"{'' if r['passed'] else '  QUARANTINED'}")


if __name__ == "__main__":
    sys.exit(main())
