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

from rowbeam.bundle.arrays import decode_payload  # noqa: E402
from rowbeam.check.runner import check_bundle  # noqa: E402
from rowbeam.blender.sensors import camera_event
from rowbeam.blender.cycles import cycles_setup as cs  # noqa: E402
from rowbeam.model.camera_model import intrinsics_from_blender  # noqa: E402
from rowbeam.blender.sensors.camera_event import camera_params, exact_row_labels, setup_label_render  # noqa: E402
from rowbeam.blender.export.run import ExportRequest, plan_export, run_export  # noqa: E402
from rowbeam.blender.compat.scene_clock import camera_poses, set_time  # noqa: E402
from rowbeam.blender.compat.scene_patch import ScenePatch  # noqa: E402
from rowbeam.blender.sensors.lidar_event import export_lidar_event  # noqa: E402
from rowbeam.blender.sensors.lidar_labels import derive_lidar_labels, point_tables  # noqa: E402
from rowbeam.blender.sensors.lidar_layout import sweep_layout  # noqa: E402
from rowbeam.blender.sensors.lidar_osl import lidar_shader_source, make_lidar_camera  # noqa: E402
from rowbeam.blender.compat.scene_clock import rigid_poses  # noqa: E402
from rowbeam.blender.scenes import common, running_example  # noqa: E402

EVENT = 30
SWEEP = 10


def timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def cpu_timed(fn):
    """(wall s, CPU s of this process incl. Cycles' threads, result): CPU seconds are core-seconds, the cost a
    farm pays, and hold up when other jobs share the machine."""
    c0, t0 = time.process_time(), time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, time.process_time() - c0, result


class StageClock:
    """Wall and CPU seconds spent in named functions while active (`with StageClock(...) as sc:`): each target
    (module, attribute) is wrapped; a call made inside another tracked call counts to the outer one only (so
    the derivation of verification rows counts to verify). `sc.seconds` = {name: [wall s, CPU s]}, summed."""

    def __init__(self, targets: dict):
        self.targets, self.seconds, self._saved, self._depth = targets, {}, [], 0

    def _wrap(self, name, fn):
        def wrapped(*a, **k):
            if self._depth:
                return fn(*a, **k)
            self._depth += 1
            c0, t0 = time.process_time(), time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                acc = self.seconds.setdefault(name, [0.0, 0.0])
                acc[0] += time.perf_counter() - t0
                acc[1] += time.process_time() - c0
                self._depth -= 1
        return wrapped

    def __enter__(self):
        for name, (module, attr) in self.targets.items():
            self._saved.append((module, attr, getattr(module, attr)))
            setattr(module, attr, self._wrap(name, getattr(module, attr)))
        return self

    def __exit__(self, *exc):
        for module, attr, fn in reversed(self._saved):
            setattr(module, attr, fn)


def after_render_stages() -> dict:
    """StageClock targets of a camera event's stages after the label render: camera_event's derive_labels outside
    verification, verification (row renders included), row poses, payload writing (incl. fsync and sha256) and the
    in-line check. A camera event's labels are written on worker threads while its verification rows render
    (manifest.PayloadWriter): verify's wall and CPU seconds include that writing, write_payloads is what is left."""
    import rowbeam.blender.export.run as run_module

    return {"derive": (camera_event, "derive_labels"), "verify": (camera_event, "_verify"),
            "row_poses": (camera_event, "camera_poses"), "write_payloads": (run_module, "write_payloads"),
            "inline_check": (run_module, "check_path")}


# The summary table: one row per named figure, its target and met / not met. A new figure is one call to
# `figure(...)` where it is measured; `print_figures()` prints them all at the end.
FIGURES: list = []


def figure(name: str, value: float, unit: str = "", target: str | None = None, note: str = "") -> None:
    """Record figure `name` = value [unit]; target like "<= 1.3" or ">= 50" (None: informative only)."""
    met = None
    if target is not None:
        op, bound = target.split()
        met = value <= float(bound) if op == "<=" else value >= float(bound)
    FIGURES.append({"name": name, "value": value, "unit": unit, "target": target, "met": met, "note": note})


def print_figures() -> None:
    print("\nsummary (target: met / NOT MET)")
    width = max((len(f["name"]) for f in FIGURES), default=10)
    for f in FIGURES:
        verdict = "" if f["met"] is None else ("met" if f["met"] else "NOT MET")
        target = f"[target {f['target']}]" if f["target"] else ""
        print(f"  {f['name']:<{width}}  {f['value']:10.3f} {f['unit']:<6} {target:<16} {verdict:<8} {f['note']}")


RESULTS = REPO / "bench" / "results.md"
HISTORY = REPO / "bench" / "results.jsonl"
LOAD_AT_START = None


def _machine() -> str:
    """CPU model, cores this process may use, memory: the machine the figures belong to."""
    import os

    model = "unknown CPU"
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{model}, {len(os.sched_getaffinity(0))} cores, {mem:.0f} GiB"


def write_results(argv: list, results: Path | None = None, title: str = "rowbeam bench results",
                  command: str = "`make bench` (bench/bench.py)") -> None:
    """Append this run's figures to results.jsonl beside `results` (every run, one JSON line: date, machine, load,
    revision, the results file's name, each figure with its target and met / not met), then write `results`
    (default bench/results.md): the latest measurement of every figure in that history, with its run's date, load
    and revision, so a run of some sections keeps the others' latest figures."""
    import datetime
    import json
    import os
    import subprocess

    if not FIGURES:
        return
    results = results or RESULTS
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip() or "unknown"
    run = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": _machine(), "revision": rev, "arguments": " ".join(argv) or "(defaults)",
           "load_start": LOAD_AT_START, "load_end": round(os.getloadavg()[0], 2), "results": results.name,
           "figures": [{**f, "value": None if f["value"] != f["value"] else f["value"]} for f in FIGURES]}
    history = results.parent / HISTORY.name
    with history.open("a") as f:
        f.write(json.dumps(run, default=str) + "\n")
    render_results(results, title, command)


def render_results(results: Path, title: str = "rowbeam bench results",
                   command: str = "`make bench` (bench/bench.py)") -> None:
    """Write `results` from results.jsonl beside it: the latest measurement of every figure any run of this results
    file recorded, with that run's date, load and revision (a run of some sections keeps the others' figures)."""
    import json

    latest, last = {}, None                       # figure name -> (figure, its run), the last run that measured it
    for line in (results.parent / HISTORY.name).read_text().splitlines():
        try:
            past = json.loads(line)
        except ValueError:
            continue
        if past.get("results", RESULTS.name) == results.name:
            latest.update({f["name"]: (f, past) for f in past["figures"]})
            last = past
    if last is None:
        return
    results.write_text(
        f"# {title}\n\nWritten by {command} from bench/{HISTORY.name} (every run, appended): the latest "
        "measurement of each figure, with its run's date, 1-minute load average at start / end and revision. Ratios "
        "are measured side by side in one run.\n\n"
        f"- latest run: {last['date']}, {last.get('arguments', '')}\n- machine: {last.get('machine', '?')}\n\n"
        "| figure | measured | target | verdict | note | run (UTC, load, revision) |\n|---|---|---|---|---|---|\n"
        + "\n".join(_result_row(f, past) for f, past in latest.values()) + "\n")
    print(f"bench results: {results}")


def _result_row(f: dict, run: dict) -> str:
    measured = "unmeasured" if f["value"] is None else f"{f['value']:.3f} {f['unit']}"
    verdict = "—" if f["met"] is None else ("met" if f["met"] else "NOT MET")
    return (f"| {f['name']} | {measured} | {f['target'] or '—'} | {verdict} | {f['note']} | "
            f"{run['date']}, {run.get('load_start', '?')} / {run.get('load_end', '?')}, {run['revision']} |")


def fit_exponent(xs, ys) -> float:
    """Least-squares slope of log y against log x: the exponent of y ~ x^k."""
    return float(np.polyfit(np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float)), 1)[0])


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
        cs.data_pass_settings(p, scene, ctx.view_layer)          # as the sweep (lidar_event.render_beam_layout)
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


class CyclesPhases:
    """Process CPU seconds of a render's phases by Cycles' own status text (bpy.app.handlers.render_stats), while
    active: `sync` ('Initializing' and 'Synchronizing ...': scene sync, with motion blur one frame_set and object
    sync per motion time), `bvh` (BVH builds), `sample` (path tracing), `other` (kernels, lookup tables, film).
    Summed over the renders in the block; `seconds` = {phase: CPU s}."""

    def __init__(self):
        self.seconds, self._last = {}, None

    def _hook(self, *args):
        now, text = time.process_time(), str(args)
        if self._last is not None:
            phase = self._last[1]
            self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self._last[0]
        kind = ("sync" if "Initializing" in text or "Synchroniz" in text else "bvh" if "BVH" in text
                else "sample" if "Sample" in text else "other")
        self._last = None if "Finished" in text else (now, kind)

    def __enter__(self):
        bpy.app.handlers.render_stats.append(self._hook)
        return self

    def __exit__(self, *exc):
        bpy.app.handlers.render_stats.remove(self._hook)


def lidar_benchmark(work: Path, repeat: int, sample_firings: int) -> dict:
    """64 x 2048 sweep: rowbeam per-firing sweep vs (i) every beam at one time on the same engine and
    (ii) frame_set + scene.ray_cast per firing (extrapolated from sample firings)."""
    blend, rig = running_example_files(work)
    p = plan_export(ExportRequest(out=work / "lidar_bundle", blend=blend, rig=rig, sensors=["lidar_top"],
                                  first_event=SWEEP, count=1, device="cpu"))
    sensor, ctx = p.jobs[0].sensor, p.context
    scene, timing = ctx.scene, sensor.timing(SWEEP)
    per_firing, one_time, cpu, cpu_l, cpu_i, phases_l, phases_i = [], [], [], [], [], [], []
    for _ in range(repeat):
        with CyclesPhases() as ph_l:
            w_l, c_l, _ = cpu_timed(lambda: export_lidar_event(ctx, sensor, SWEEP))
        with CyclesPhases() as ph_i:
            w_i, c_i, _ = cpu_timed(lambda: one_time_sweep(ctx, sensor, timing))
        phases_l.append(ph_l.seconds)
        phases_i.append(ph_i.seconds)
        per_firing.append(w_l)
        one_time.append(w_i)
        cpu.append(c_l / c_i)
        cpu_l.append(c_l)
        cpu_i.append(c_i)
    export_s, export_cpu, _ = cpu_timed(lambda: run_export(p))
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
    return {"per_firing_s": a, "one_time_s": b, "over_one_time": a / b, "over_one_time_cpu": statistics.median(cpu),
            "per_firing_cpu_s": statistics.median(cpu_l), "one_time_cpu_s": statistics.median(cpu_i),
            "naive_s": naive,
            "naive_over_rowbeam": naive / a, "naive_per_firing_ms": naive_per_firing * 1e3,
            "sample_firings": len(firings), "shape": (sensor.azimuth_steps, sensor.channels),
            "export_s": export_s, "export_cpu_s": export_cpu, "breakdown": breakdown,
            "render_phases_cpu": {name: {k: round(statistics.median(p.get(k, 0.0) for p in runs), 3)
                                         for k in ("sync", "bvh", "sample", "other")}
                                  for name, runs in (("L", phases_l), ("i", phases_i))}}


def radar_benchmark(work: Path, repeat: int) -> dict:
    """(R) one radar frame, 128 chirps x 64 beams (preset bench_128x64: every beam of every chirp at the chirp's
    time, radial velocity from motion), against one 64 x 2048 LiDAR sweep of the same scene, interleaved."""
    import json

    from rowbeam.blender.sensors.radar_event import export_radar_event

    blend, rig = running_example_files(work)
    doc = json.loads(rig.read_text())
    doc["sensors"].append({"id": "radar_front", "type": "radar", "object": "radar_mount", "rate_hz": 20,
                           "first_frame_ns": 0, "preset": "bench_128x64", "min_range_m": 0.5, "max_range_m": 150.0,
                           "max_radial_velocity_mps": 60.0})
    radar_rig = work / "radar.rig.json"
    radar_rig.write_text(json.dumps(doc))
    p = plan_export(ExportRequest(out=work / "radar_bundle", blend=blend, rig=radar_rig,
                                  sensors=["radar_front", "lidar_top"], first_event=SWEEP, count=1, device="cpu"))
    by_id = {j.sensor.id: j.sensor for j in p.jobs}
    radar, lidar = [], []
    for _ in range(repeat):
        radar.append(timed(lambda: export_radar_event(p.context, by_id["radar_front"], SWEEP)))
        lidar.append(timed(lambda: export_lidar_event(p.context, by_id["lidar_top"], SWEEP))[0])
    a, b = statistics.median(r[0] for r in radar), statistics.median(lidar)
    out = radar[-1][1]
    return {"radar_s": a, "lidar_s": b, "ratio": a / b, "shape": (out.sensor.chirps, out.sensor.beams),
            "breakdown": {k: round(v, 3) for k, v in out.seconds.items()},
            "valid": int(out.arrays["valid"].sum())}


def flow_benchmark(work: Path, repeat: int) -> dict:
    """Flow for a 1280x720 pair (events 30 -> 31) vs the label export of one event, interleaved."""
    from rowbeam.blender.export.run import _export_event, _export_flow

    blend, rig = running_example_files(work)
    labels, flows, flow_cpu, label_cpu = [], [], [], []
    for i in range(repeat):
        p = plan_export(ExportRequest(out=work / f"flow_{i}", blend=blend, rig=rig, sensors=["camera_front"],
                                      first_event=EVENT, count=2, flow=True, device="cpu"))
        p.writer.open()
        event_jobs = [j for j in p.jobs if not j.is_flow]
        flow_job = next(j for j in p.jobs if j.is_flow)
        w_label, c_label, _ = cpu_timed(lambda j=event_jobs[0], p=p: _export_event(p, j))
        labels.append(w_label)
        label_cpu.append(c_label)
        _export_event(p, event_jobs[1])
        seconds, cpu, (final, passed) = cpu_timed(lambda p=p, j=flow_job: _export_flow(p, j))
        flows.append(seconds)
        flow_cpu.append(cpu)
    manifest = __import__("json").loads((final / "manifest.json").read_text())
    a, b = statistics.median(flows), statistics.median(labels)
    return {"flow_s": a, "label_s": b, "ratio": a / b, "passed": passed, "flow_cpu_s": statistics.median(flow_cpu),
            "label_cpu_s": statistics.median(label_cpu),
            "ratio_cpu": statistics.median(f / c for f, c in zip(flow_cpu, label_cpu, strict=True)),
            "deforming_mesh_rows": manifest["method"].get("deforming_mesh_rows"),
            "breakdown": manifest["run"]["seconds"],
            "forward": manifest["method"]["forward"]}


def object_label_benchmark(work: Path, width: int = 1280, height: int = 720, fractions=(0.25, 0.5, 1.0)) -> list:
    """Object labels on the running example's camera event: object-label seconds against the same
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
                    "rasterised": m["object_labels"]["method"].get("objects_rasterised", 0),
                    "raster_s": sec.get("object_label_rasterise", 0.0), "poses_s": sec.get("object_label_row_poses", 0.0),
                    "object_s": sec["object_labels"], "render_s": sec["object_label_renders"], "label_s": label,
                    "ratio": sec["object_labels"] / label, "passed": bool(summary["published"])})
    return out


LENS_BENCH = {"opencv": {"model": "opencv", "D": [-0.28, 0.07, 1e-3, -5e-4, 0.0]},
              "opencv_fisheye": {"model": "opencv_fisheye", "D": [-0.02, 0.01, -0.004, 0.0005]}}


def lens_benchmark(work: Path, repeat: int, models=tuple(LENS_BENCH)) -> dict:
    """(Lz) the same camera event exported through each lens model (OSL lens camera, labels on the exact ray)
    vs the pinhole Blender camera, interleaved; every export is checked at publish (passed = not quarantined).
    Cold: each export solves its lens's unprojection again (rowbeam.model.lens.unproject_grid's cache cleared), as the
    first event of a process does; later events of the same lens reuse it."""
    import json

    from rowbeam.model.lens import clear_grid_cache

    blend, rig = running_example_files(work)
    rigs = lens_rigs(rig, work, "rig", models)
    times = {k: [] for k in rigs}
    cpu = {k: [] for k in rigs}
    results = {}
    for i in range(repeat):
        for name, r in rigs.items():
            p = plan_export(ExportRequest(out=work / f"lens_{name}_{i}", blend=blend, rig=r, sensors=["camera_front"],
                                          first_event=EVENT, count=1, device="cpu"))
            clear_grid_cache()
            seconds, cpu_s, summary = cpu_timed(lambda p=p: run_export(p))
            times[name].append(seconds)
            cpu[name].append(cpu_s)
            event = next(iter(summary["published"]), None)
            manifest = json.loads((Path(event) / "manifest.json").read_text()) if event else None
            results[name] = {"passed": bool(summary["published"]) and not summary["quarantined"],
                             "breakdown": manifest["run"]["seconds"] if manifest else None,
                             "lens": manifest["method"].get("lens") if manifest else None,
                             "verification_m": manifest["method"]["verification"]["worst_range_error_m"]
                             if manifest else None}
    base, base_cpu = statistics.median(times["pinhole"]), statistics.median(cpu["pinhole"])
    return {name: {**results[name], "seconds": statistics.median(t), "ratio": statistics.median(t) / base,
                   "cpu_s": statistics.median(cpu[name]), "cpu_ratio": statistics.median(cpu[name]) / base_cpu}
            for name, t in times.items()}


def lens_rigs(rig: Path, work: Path, prefix: str, models) -> dict:
    """{"pinhole": rig, model: work/<prefix>_<model>.json}: the rig's camera_front alone, given each bench lens."""
    import json

    doc = json.loads(rig.read_text())
    rigs = {"pinhole": rig}
    for model in models:
        d = json.loads(json.dumps(doc))
        d["sensors"] = [dict(s, lens=LENS_BENCH[model]) for s in d["sensors"] if s["id"] == "camera_front"]
        rigs[model] = work / f"{prefix}_{model}.json"
        rigs[model].write_text(json.dumps(d))
    return rigs


def lens_object_label_benchmark(work: Path, repeat: int, models=tuple(LENS_BENCH)) -> dict:
    """(Lo) object labels of the running example's camera event at 1280x720 through each lens model (per-pixel lens
    rasterisation) vs the pinhole camera (rasterised / Cycles canvas renders), interleaved, median of `repeat`;
    object labels' wall (manifest) and CPU (StageClock on compute_object_labels) seconds."""
    import json

    import rowbeam.blender.objects.object_labels as object_labels_module

    blend = work / "dusk_objects.blend"
    if not blend.exists():
        running_example.build(1280, 720)
        common.save(blend, running_example.rig(lidar=False, rgb_samples=0, object_labels=True))
    rigs = lens_rigs(blend.with_suffix(".rig.json"), work, "rig_objects", models)
    obj_s = {k: [] for k in rigs}
    obj_cpu = {k: [] for k in rigs}
    results = {}
    for i in range(repeat):
        for name, r in rigs.items():
            p = plan_export(ExportRequest(out=work / f"lens_objects_{name}_{i}", blend=blend, rig=r,
                                          sensors=["camera_front"], first_event=EVENT, count=1, device="cpu"))
            with StageClock({"objects": (object_labels_module, "compute_object_labels")}) as sc:
                summary = run_export(p)
            event = Path((summary["published"] or summary["quarantined"])[0])
            m = json.loads((event / "manifest.json").read_text())
            sec = m["run"]["seconds"]
            obj_s[name].append(sec["object_labels"])
            obj_cpu[name].append(sc.seconds["objects"][1])
            results[name] = {"passed": bool(summary["published"]), "listed": len(m["object_labels"]["objects"]),
                             "skipped": len(m["object_labels"]["skipped"]),
                             "rasterise_s": sec.get("object_label_rasterise", 0.0),
                             "renders_s": sec.get("object_label_renders", 0.0), "total_s": sec.get("total", 0.0)}
    base, base_cpu = statistics.median(obj_s["pinhole"]), statistics.median(obj_cpu["pinhole"])
    return {name: {**results[name], "object_s": statistics.median(t), "ratio": statistics.median(t) / base,
                   "object_cpu_s": statistics.median(obj_cpu[name]),
                   "cpu_ratio": statistics.median(obj_cpu[name]) / base_cpu}
            for name, t in obj_s.items()}


def _print_lens_objects(rows: dict, repeat: int) -> None:
    print(f"Object labels through a lens, camera event {EVENT} of the running example, 1280x720, median of {repeat}:")
    for name, r in rows.items():
        print(f"(Lo) {name:15s} object labels {r['object_s']:8.3f} s (rasterise {r['rasterise_s']:.3f} s, canvas "
              f"renders {r['renders_s']:.3f} s; {r['listed']} listed, {r['skipped']} skipped)  ratio vs pinhole "
              f"{r['ratio']:.2f}; CPU {r['object_cpu_s']:.3f} s, ratio {r['cpu_ratio']:.2f}  "
              f"{'passed' if r['passed'] else 'QUARANTINED'}")


def _print_lens(rows: dict, repeat: int) -> None:
    print(f"Lens models, camera event {EVENT} of the running example, 1280x720, whole label export (render, derive, "
          f"verify, write, check), median of {repeat}:")
    for name, r in rows.items():
        extra = "" if name == "pinhole" else (f"   ratio {r['ratio']:.2f} (CPU {r['cpu_ratio']:.2f})  [target <= 1.3]  "
                                              f"unprojection residual "
                                              f"{r['lens']['max_unprojection_residual_px']:.2g} px, "
                                              f"{r['lens']['invalid_domain_pixels']} pixels outside the domain")
        print(f"(Lz) {name:15s} {r['seconds']:8.3f} s (CPU {r['cpu_s']:.3f} s){extra}  verify {r['verification_m']:.2g} m  "
              f"{'passed' if r['passed'] else 'QUARANTINED'}  ({r['breakdown']})")


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
            return cpu_timed(lambda: cs.render_passes(ctx.scene, ctx.view_layer))[:2]

    after_render = after_render_stages()
    stage_runs = []

    def rowbeam_export(i):
        out = work / f"rs_{i}"
        p = plan(out)
        with StageClock(after_render) as sc:
            seconds, cpu, _ = cpu_timed(lambda: run_export(p))
        if not str(i).startswith("full"):
            stage_runs.append(sc.seconds)
        return seconds, cpu, out

    a_times, b_times, a_cpu, b_cpu, bundles = [], [], [], [], []
    full = {"a_cpu": [], "b_cpu": []}        # label renders with the scene's lights and bounces (camera_event.FULL_SHADING)
    for i in range(repeat):
        a, ac = global_shutter_render()
        b, bc, out = rowbeam_export(i)
        a_times.append(a)
        a_cpu.append(ac)
        b_times.append(b)
        b_cpu.append(bc)
        bundles.append(out)
        camera_event.FULL_SHADING = True
        try:
            full["a_cpu"].append(global_shutter_render()[1])
            full["b_cpu"].append(rowbeam_export(f"full_{i}")[1])
        finally:
            camera_event.FULL_SHADING = False

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
    d_check, d_decode = [], []                    # (wall s, CPU s) pairs
    for _ in range(repeat):
        d_check.append(cpu_timed(lambda: check_bundle(bundles[-1]))[:2])
        d_decode.append(cpu_timed(lambda: [decode_payload(event / e["uri"], e) for e in manifest["modalities"].values()])[:2])
    d_check_cpu, d_decode_cpu = (statistics.median(x[1] for x in d) for d in (d_check, d_decode))
    d_check, d_decode = [x[0] for x in d_check], [x[0] for x in d_decode]

    a, b, dc, dd = (statistics.median(x) for x in (a_times, b_times, d_check, d_decode))
    return {"a_global_shutter_render_s": a, "b_rowbeam_label_export_s": b, "b_over_a": b / a,
            "a_cpu_s": statistics.median(a_cpu), "b_cpu_s": statistics.median(b_cpu),
            "b_over_a_cpu": statistics.median(b_cpu) / statistics.median(a_cpu),
            "b_breakdown_s": manifest["run"]["seconds"],
            "b_stages_wall_cpu_s": {k: [statistics.median(r[k][j] for r in stage_runs) for j in (0, 1)]
                                    for k in after_render if all(k in r for r in stage_runs)},
            "a_full_shading_cpu_s": statistics.median(full["a_cpu"]), "b_full_shading_cpu_s": statistics.median(full["b_cpu"]),
            "c_naive_per_row_render_s": per_row, "c_naive_event_extrapolated_s": per_row * 720,
            "c_over_b": per_row * 720 / b, "c_sample_rows": len(rows),
            "d_check_s": dc, "d_raw_decode_s": dd, "d_over_decode": dc / dd,
            "d_check_cpu_s": d_check_cpu, "d_raw_decode_cpu_s": d_decode_cpu, "d_over_decode_cpu": d_check_cpu / d_decode_cpu}


def multi_event_benchmark(work: Path, events: int) -> dict:
    """One run of `events` consecutive camera events from event 0 (labels only; at most the events the scene's
    frame range holds): wall and CPU seconds of each event, from the run's per-job progress (writing and the
    in-line check included)."""
    blend, rig = running_example_files(work)
    p = plan_export(ExportRequest(out=work / "multi", blend=blend, rig=rig, sensors=["camera_front"],
                                  first_event=0, device="cpu"))
    p.jobs[:] = p.jobs[:events]
    marks = [(time.perf_counter(), time.process_time())]
    per_event = []          # StageClock seconds of each event (after the label render)

    def progress(*_):
        marks.append((time.perf_counter(), time.process_time()))
        per_event.append(dict(sc.seconds))
        sc.seconds.clear()

    with StageClock(after_render_stages()) as sc:
        run_export(p, progress=progress)
    wall = [b[0] - a[0] for a, b in zip(marks, marks[1:], strict=False)]
    cpu = [b[1] - a[1] for a, b in zip(marks, marks[1:], strict=False)]
    stages = [__import__("json").loads(m.read_text())["run"]["seconds"]
              for m in sorted((work / "multi" / "events").glob("*/*/manifest.json"))]
    later = stages[1:] or stages
    mean = {k: statistics.fmean(st.get(k, 0.0) for st in later) for k in sorted({k for st in later for k in st})}
    later_clock = per_event[1:] or per_event
    after = {k: [statistics.fmean(e[k][j] for e in later_clock) for j in (0, 1)]
             for k in after_render_stages() if later_clock and all(k in e for e in later_clock)}
    return {"events": events, "wall_s": wall, "cpu_s": cpu, "stages_2_n_mean_s": mean,
            "after_render_2_n_mean_wall_cpu_s": after}


def pose_benchmark(work: Path, repeat: int) -> dict:
    """Per-row camera poses (720 rows) and per-firing LiDAR mount poses (64 x 2048 sweep) of the running example:
    direct F-curve/parent-chain evaluation vs frame_set per time (rowbeam.blender.compat.scene_clock)."""
    from rowbeam.blender.compat import scene_clock

    blend, rig = running_example_files(work)
    p = plan_export(ExportRequest(out=work / "poses", blend=blend, rig=rig, sensors=["camera_front"],
                                  first_event=EVENT, count=1, device="cpu"))
    ctx, cam_sensor, lidar = p.context, p.jobs[0].sensor, p.rig.sensor("lidar_top")
    cam, mount = ctx.scene.objects[cam_sensor.object], ctx.scene.objects[lidar.object]
    rt = cam_sensor.timing(EVENT, 720)
    row_times = [rt.row_time_exact(v) for v in range(720)]
    lt = lidar.timing(SWEEP)
    firing_times = [lt.firing_time_exact(k) for k in range(lidar.azimuth_steps)]
    out = {}
    for label, obj, times in (("camera rows", cam, row_times), ("lidar firings", mount, firing_times)):
        direct, frame_set = [], []
        for _ in range(repeat):
            direct.append(timed(lambda o=obj, t=times: scene_clock.world_matrices(ctx.scene, ctx.clock, o, t))[0])
            scene_clock.FORCE_FRAME_SET = True
            try:
                frame_set.append(timed(lambda o=obj, t=times: scene_clock.world_matrices(ctx.scene, ctx.clock, o, t))[0])
            finally:
                scene_clock.FORCE_FRAME_SET = False
        out[label] = {"n": len(times), "direct_s": statistics.median(direct), "frame_set_s": statistics.median(frame_set)}
    return out


def scale_child(kind: str, value: str, work: Path) -> dict:
    """One measurement in a fresh process (so peak RSS is this measurement's): kind camera (value WxH[:rgb
    samples]), lidar (value: channels, 2048 firings) or objects (value: mesh objects, 1280x720 camera event)."""
    import json

    if kind == "baseline":
        return _baseline_rss(work)
    width, height, rgb, sensors, lidar_fields, extra = 1280, 720, 0, ["camera_front"], None, {}
    if kind in ("camera", "lens_objects"):
        size, _, spp = value.partition(":")
        width, height = map(int, size.split("x"))
        rgb = int(spp or 0)
    elif kind == "lidar":
        width, height, sensors, lidar_fields = 64, 36, ["lidar_top"], {"preset": f"uniform_{int(value)}"}
    if kind == "lens_objects":
        extra = {"object_labels": True, "lens": LENS_BENCH["opencv"]}
    running_example.build(width, height)
    if kind == "objects":
        _add_objects(int(value))
    blend = common.save(work / "scale.blend", running_example.rig(rgb_samples=rgb, lidar_fields=lidar_fields,
                                                                  **{"object_labels": False, **extra}))
    p = plan_export(ExportRequest(out=work / "bundle", blend=blend, rig=blend.with_suffix(".rig.json"), sensors=sensors,
                                  first_event=SWEEP if kind == "lidar" else EVENT, count=1, device="cpu"))
    with CheckPeak() as check_peak:
        wall, cpu, summary = cpu_timed(lambda: run_export(p))
    event = Path((summary["published"] or summary["quarantined"])[0])
    seconds = json.loads((event / "manifest.json").read_text())["run"]["seconds"]
    peak = max(_own_peak_rss_mb(), check_peak.mb.get("peak_before_check_mb", 0.0))    # the kernel's peak was reset
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": peak, "published": bool(summary["published"]),
            "seconds": seconds, "objects": _scene_object_count(), **check_peak.mb}


class CheckPeak:
    """Within the block, peak RSS (MB) before the exporter's in-line check and during it (the kernel's peak reset
    at the check's start: /proc/self/clear_refs 5), in `.mb` = {"peak_before_check_mb", "peak_in_check_mb"}."""

    def __init__(self):
        import rowbeam.blender.export.run as run_module

        self.module, self.mb = run_module, {}

    def __enter__(self):
        self.saved = self.module.check_path

        def check_path(*a, **k):
            self.mb["peak_before_check_mb"] = _own_peak_rss_mb()
            try:
                Path("/proc/self/clear_refs").write_text("5")
            except OSError:
                return self.saved(*a, **k)
            try:
                return self.saved(*a, **k)
            finally:
                self.mb["peak_in_check_mb"] = _own_peak_rss_mb()
        self.module.check_path = check_path
        return self

    def __exit__(self, *exc):
        self.module.check_path = self.saved


def _baseline_rss(work: Path) -> dict:
    """Peak RSS (MB) of this fresh process after importing bpy and the exporter, after a Cycles render of an empty
    scene (64x36, 1 spp: Cycles' own baseline) and after building the running example: the part of every camera
    event's peak that does not grow with pixels."""
    from rowbeam.blender.cycles.cycles_setup import common_settings, render_passes

    out = {"import_mb": _own_peak_rss_mb()}
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    with ScenePatch() as p:
        common_settings(p, scene)
        cs.set_resolution(p, scene, 64, 36)
        p.set(scene.cycles, "samples", 1)
        cam = bpy.data.objects.new("cam", bpy.data.cameras.new("cam"))
        scene.collection.objects.link(cam)
        p.set(scene, "camera", cam)
        render_passes(scene, bpy.context.view_layer)
    out["empty_render_mb"] = _own_peak_rss_mb()
    running_example.build(1280, 720)
    out["running_example_mb"] = _own_peak_rss_mb()
    return out


def _own_peak_rss_mb() -> float:
    """This process's peak RSS (MB): VmHWM of its own address space. ru_maxrss is not used in the children:
    Linux carries the forking parent's peak across exec into it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _add_objects(total: int) -> None:
    """Grow the running example to `total` mesh objects: half of the missing ones as linked copies of its boxes
    (own ids, class 'building') on a grid behind the buildings on both sides, the other half as instances of
    10-box collections (one instancer empty per 10 instances, under the ground plane: in Cycles' BVH but never
    seen, since collection instances are not in the object table)."""
    meshes = [o for o in bpy.data.objects if o.type == "MESH" and o.name.startswith("building_")]
    scene = bpy.context.scene
    n = max(total - len([o for o in bpy.data.objects if o.type == "MESH"]), 0)
    copies = n - n // 2
    for i in range(copies):
        src = meshes[i % len(meshes)]
        o = bpy.data.objects.new(f"extra_{i:05d}", src.data)
        side = 1 if i % 2 else -1
        o.location = (-20 + (i // 2) % 60 * 5.0, side * (24 + (i // 120) * 10.0), src.location.z)
        scene.collection.objects.link(o)
        common.tag(o, 0x50000000 + i, "building")
    instanced = n // 2
    if instanced:
        coll = bpy.data.collections.new("bench_instanced_boxes")
        for j in range(min(10, instanced)):
            o = bpy.data.objects.new(f"instanced_box_{j}", meshes[j % len(meshes)].data)
            o.location = (j * 6.0, 0.0, 0.0)
            coll.objects.link(o)
        per = len(coll.objects)
        for k in range((instanced + per - 1) // per):
            inst = bpy.data.objects.new(f"instancer_{k:04d}", None)
            inst.instance_type, inst.instance_collection = "COLLECTION", coll
            inst.location = (-40 + (k % 20) * 60.0, -200 + (k // 20) * 40.0, -50.0)
            scene.collection.objects.link(inst)


def _scene_object_count() -> int:
    """Mesh objects Cycles renders: scene objects plus collection instances (the evaluated depsgraph's)."""
    depsgraph = bpy.context.evaluated_depsgraph_get()
    return sum(1 for i in depsgraph.object_instances if i.object.type == "MESH")


def scale_benchmark(work: Path, sizes, channels, object_counts, rgb_samples, lens_object_sizes=()) -> dict:
    """Run each scale measurement in a child process; returns {kind: [(value, result)]}."""
    import json
    import subprocess

    def child(kind, value):
        d = work / f"scale_{kind}_{value.replace(':', '_')}"
        d.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, __file__, "--child", kind, value, str(d)], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"bench child {kind} {value} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        result = json.loads(r.stdout.strip().splitlines()[-1])
        result["process_wall_s"] = time.perf_counter() - t0
        shutil.rmtree(d, ignore_errors=True)
        return result

    return {"baseline": [("baseline", child("baseline", "0"))] if sizes else [],
            "camera": [(v, child("camera", v)) for v in sizes],
            "rgb": [(n, child("camera", f"1280x720:{n}")) for n in rgb_samples],
            "lidar": [(c, child("lidar", str(c))) for c in channels],
            "objects": [(n, child("objects", str(n))) for n in object_counts],
            "lens_objects": [(v, child("lens_objects", v)) for v in lens_object_sizes]}


# Peak RSS targets (MB) of one labels-only event in a fresh process: {(kind, size): target}
PEAK_RSS_TARGETS_MB = {("lens_objects", "1336x1000"): 1200, ("camera", "3840x2160"): 2000}


def report_scale(scale: dict) -> None:
    for size, r in scale.get("lens_objects", []):
        target = PEAK_RSS_TARGETS_MB.get(("lens_objects", size))
        print(f"Camera event {size} through the opencv lens with object labels (labels only, fresh process): export "
              f"{r['wall_s']:.2f} s wall, {r['cpu_s']:.2f} s CPU, peak RSS {r['peak_rss_mb']:.0f} MB; {r['seconds']}")
        stages = (f"; before the in-line check {r['peak_before_check_mb']:.0f} MB, in it {r['peak_in_check_mb']:.0f} MB"
                  if "peak_in_check_mb" in r else "")
        figure(f"peak RSS {size} lens + object labels", r["peak_rss_mb"], "MB", target and f"<= {target}",
               f"{r['objects']} objects; {r['cpu_s']:.0f} CPU s{stages}")
    for _, r in scale.get("baseline", []):
        print(f"Baseline peak RSS (fresh process): bpy + rowbeam imported {r['import_mb']:.0f} MB; after an empty-scene "
              f"Cycles render {r['empty_render_mb']:.0f} MB; after building the running example "
              f"{r['running_example_mb']:.0f} MB")
        figure("baseline RSS: bpy + empty Cycles render", r["empty_render_mb"], "MB")
        figure("baseline RSS: + running example scene", r["running_example_mb"], "MB")
    cam = scale["camera"]
    if cam:
        print("Camera event (labels only, one event, fresh process) against image size:")
        px = []
        for size, r in cam:
            w, h = map(int, size.split("x"))
            px.append(w * h)
            limit_mb = min((0.5e9 + 150 * w * h) / 1e6, PEAK_RSS_TARGETS_MB.get(("camera", size), np.inf))
            print(f"    {size:>10}: export {r['wall_s']:7.2f} s wall, {r['cpu_s']:7.2f} s CPU; process incl. start-up "
                  f"{r['process_wall_s']:7.2f} s; peak RSS {r['peak_rss_mb']:6.0f} MB (target <= {limit_mb:.0f} MB)")
            figure(f"camera peak RSS {size}", r["peak_rss_mb"], "MB", f"<= {limit_mb:.0f}")
            figure(f"scale curve, pixels: camera labels event {size} CPU s", r["cpu_s"], "s", None,
                   f"wall {r['wall_s']:.2f} s; labels only, one event, fresh process")
        if len(cam) > 1:
            figure("camera time ~ pixels^k (CPU s)", fit_exponent(px, [r["cpu_s"] for _, r in cam]), "", "<= 1.0",
                   f"wall exponent {fit_exponent(px, [r['wall_s'] for _, r in cam]):.2f}")
            base = [r["empty_render_mb"] for _, r in scale.get("baseline", [])]
            above = [r["peak_rss_mb"] - base[0] for _, r in cam] if base else []
            figure("camera peak RSS ~ pixels^k", fit_exponent(px, [r["peak_rss_mb"] for _, r in cam]), "", None,
                   f"above the empty-render baseline: exponent {fit_exponent(px, above):.2f}, "
                   f"{statistics.median(np.array(above) * 1e6 / px):.0f} B/pixel" if base and min(above) > 0 else "")
    if scale["lidar"]:
        print("LiDAR sweep (2048 firings, fresh process) against channels:")
        for c, r in scale["lidar"]:
            print(f"    {c:4d} channels: export {r['wall_s']:7.2f} s wall, {r['cpu_s']:7.2f} s CPU, peak RSS "
                  f"{r['peak_rss_mb']:6.0f} MB; {r['seconds']}")
            figure(f"scale curve, beams: LiDAR sweep {c} x 2048 CPU s", r["cpu_s"], "s", None,
                   f"wall {r['wall_s']:.2f} s; peak RSS {r['peak_rss_mb']:.0f} MB; fresh process")
        if len(scale["lidar"]) > 1:
            cs_ = [c for c, _ in scale["lidar"]]
            figure("lidar time ~ channels^k (CPU s)", fit_exponent(cs_, [r["cpu_s"] for _, r in scale["lidar"]]))
            figure("lidar peak RSS ~ channels^k", fit_exponent(cs_, [r["peak_rss_mb"] for _, r in scale["lidar"]]))
    if scale["objects"]:
        print("Camera event 1280x720 (labels only, fresh process) against mesh objects in the scene:")
        for _n, r in scale["objects"]:
            print(f"    {r['objects']:5d} objects: export {r['wall_s']:7.2f} s wall, {r['cpu_s']:7.2f} s CPU, "
                  f"peak RSS {r['peak_rss_mb']:6.0f} MB; {r['seconds']}")
            figure(f"scale curve, objects: camera labels event 1280x720 with {r['objects']} objects CPU s", r["cpu_s"],
                   "s", None, f"wall {r['wall_s']:.2f} s; peak RSS {r['peak_rss_mb']:.0f} MB; fresh process")
        if len(scale["objects"]) > 1:
            ns = [r["objects"] for _, r in scale["objects"]]
            figure("camera time ~ objects^k (CPU s)", fit_exponent(ns, [r["cpu_s"] for _, r in scale["objects"]]))
            figure("camera peak RSS ~ objects^k", fit_exponent(ns, [r["peak_rss_mb"] for _, r in scale["objects"]]))


def checker_benchmark(work: Path, repeat: int, object_labels: bool = True) -> dict:
    """(d) and (Q) side by side on the same 1280x720 running-example event, interleaved: a raw decode of every payload
    (no sha256, no checks), `rowbeam check` of the event, and `rowbeam report` of its one-event bundle (its own check
    included); with object_labels also the same three on an event with object labels (~200 objects). Wall and CPU
    seconds (CPU: core-seconds of this process, steadier on a shared machine)."""
    import json

    from rowbeam.report.build import build_report

    blend, rig = running_example_files(work)
    variants = [("labels", rig)]
    if object_labels:
        obj_rig = work / "dusk_objects.rig.json"
        doc = json.loads(rig.read_text())
        for s_ in doc["sensors"]:
            if s_["id"] == "camera_front":
                s_["object_labels"] = True
        obj_rig.write_text(json.dumps(doc))
        variants.append(("object labels", obj_rig))
    out = {}
    for name, r in variants:
        bundle = work / f"checker_{name.replace(' ', '_')}"
        run_export(plan_export(ExportRequest(out=bundle, blend=blend, rig=r, sensors=["camera_front"],
                                             first_event=EVENT, count=1, device="cpu")))
        event = next((bundle / "events").glob("*/*"))
        manifest = json.loads((event / "manifest.json").read_text())
        t = {k: [] for k in ("decode", "check", "report", "decode_cpu", "check_cpu", "report_cpu")}
        entries = list(manifest["modalities"].values())
        for i in range(repeat):
            report_dir = work / f"checker_report_{name.replace(' ', '_')}_{i}"
            for k, fn in (("decode", lambda ev=event, es=entries: [decode_payload(ev / e["uri"], e) for e in es]),
                          ("check", lambda ev=event: check_bundle(ev)),
                          ("report", lambda b=bundle, d=report_dir: build_report(b, d))):
                wall, cpu, _ = cpu_timed(fn)
                t[k].append(wall)
                t[f"{k}_cpu"].append(cpu)
        m = {k: statistics.median(v) for k, v in t.items()}
        out[name] = {**m, "check_over_decode": m["check"] / m["decode"], "report_over_check": m["report"] / m["check"],
                     "check_over_decode_cpu": m["check_cpu"] / m["decode_cpu"],
                     "report_over_check_cpu": m["report_cpu"] / m["check_cpu"],
                     "objects": len(manifest.get("objects", []))}
    return out


def _print_checker(r: dict) -> None:
    for name, m in r.items():
        tag = "" if name == "labels" else f", {name} ({m['objects']} objects)"
        print(f"(d/Q) 1280x720 event{tag}: raw decode {m['decode']:.3f} s, check {m['check']:.3f} s, report "
              f"{m['report']:.3f} s wall; CPU {m['decode_cpu']:.3f} / {m['check_cpu']:.3f} / {m['report_cpu']:.3f} s")
        target = (lambda t: t) if name == "labels" else (lambda t: None)
        figure(f"(d) check / raw decode{tag}", m["check_over_decode"], "x", target("<= 1.5"),
               f"CPU {m['check_over_decode_cpu']:.2f}x")
        figure(f"(Q) report per event / check{tag}", m["report_over_check"], "x", target("<= 2"),
               f"CPU {m['report_over_check_cpu']:.2f}x")


def main() -> int:
    import os

    global LOAD_AT_START
    LOAD_AT_START = round(os.getloadavg()[0], 2)
    try:
        return _main()
    finally:
        write_results(sys.argv[1:])


def _main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sample-rows", type=int, default=12)
    parser.add_argument("--sample-firings", type=int, default=64)
    parser.add_argument("--objects-only", action="store_true", help="only the object-label figure (O)")
    parser.add_argument("--objects-size", default="1280x720", help="image size of the object-label figure")
    parser.add_argument("--events", type=int, default=30, help="events in the multi-event run (events 2..N warm)")
    parser.add_argument("--no-scale", action="store_true", help="skip the scale curves and the rgb throughput")
    parser.add_argument("--scale-sizes", default="1280x720,1920x1080,3840x2160")
    parser.add_argument("--lidar-channels", default="32,64,128")
    parser.add_argument("--object-counts", default="200,2000")
    parser.add_argument("--lens-object-sizes", default="1336x1000",
                        help="image sizes of the peak-RSS figure of a lens + object-label event")
    parser.add_argument("--rgb-samples", default="16,64", help="rgb samples per pixel of the throughput figures")
    parser.add_argument("--child", nargs=3, metavar=("KIND", "VALUE", "DIR"), help=argparse.SUPPRESS)
    parser.add_argument("--lens-only", action="store_true", help="only the lens-model figure (Lz)")
    parser.add_argument("--radar-only", action="store_true", help="only the radar figure (R)")
    parser.add_argument("--report-only", action="store_true",
                        help="only (d) check / raw decode and (Q) report / check, side by side, with and without "
                             "object labels")
    parser.add_argument("--big-instances", type=int, default=10_000, help="instances of the big scatter (section big)")
    parser.add_argument("--big-faces", type=int, default=1_000_000, help="faces of the big mesh (section big)")
    parser.add_argument("--big-scale", type=int, default=4, help="big scenes at 1/S of 1280x720 (default 4: 320x180)")
    parser.add_argument("--only", default="", help=f"comma-separated sections to run (default all): "
                        f"{','.join(SECTIONS)}")
    args = parser.parse_args()
    from rowbeam.blender.export.allocator import keep_freed_memory

    keep_freed_memory()                     # as the headless exporter process does (rowbeam.blender.export.cli)
    if args.report_only:
        work = Path(tempfile.mkdtemp(prefix="rowbeam_bench_"))
        try:
            _print_checker(checker_benchmark(work, args.repeat))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print_figures()
        return 0
    if args.child:
        import json

        print(json.dumps(scale_child(args.child[0], args.child[1], Path(args.child[2]))))
        return 0
    if args.lens_only:
        work = Path(tempfile.mkdtemp(prefix="rowbeam_bench_"))
        try:
            _print_lens(lens_benchmark(work, args.repeat), args.repeat)
            _print_lens_objects(lens_object_label_benchmark(work, args.repeat), args.repeat)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return 0
    if args.radar_only:
        work = Path(tempfile.mkdtemp(prefix="rowbeam_bench_"))
        try:
            _print_radar(radar_benchmark(work, args.repeat))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return 0
    if args.objects_only:
        work = Path(tempfile.mkdtemp(prefix="rowbeam_bench_"))
        try:
            _print_objects(object_label_benchmark(work, *map(int, args.objects_size.split("x"))), args.objects_size)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return 0
    import json
    import os

    only = _sections(args.only)
    work = Path(tempfile.mkdtemp(prefix="rowbeam_bench_"))
    r = {}
    try:
        for name in SECTIONS:
            if name not in only or (name in ("scale", "rgb") and args.no_scale):
                continue
            t0 = time.perf_counter()
            r[name] = _run_section(name, work, args)
            # the raw figures of each section as soon as it is done (kept if a long run is cut short)
            print(f"[bench] {name} done in {time.perf_counter() - t0:.0f} s (load {os.getloadavg()[0]:.1f}): "
                  f"{json.dumps(r[name], default=str)}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nrowbeam bench — running example, 1280x720, CPU, median of {args.repeat}; sections: {', '.join(r)}")
    cam, lidar, flow = r.get("camera"), r.get("lidar"), r.get("flow")
    if cam:
        print(f"(a) global-shutter 1-spp label render         {cam['a_global_shutter_render_s']:8.3f} s")
        print(f"(b) rowbeam rolling-shutter label export       {cam['b_rowbeam_label_export_s']:8.3f} s   (b)/(a) = "
              f"{cam['b_over_a']:.2f}  [target <= 1.3]")
        print(f"    breakdown of (b): {cam['b_breakdown_s']}")
        print("    after the render, wall / CPU s: " + ", ".join(
            f"{k} {w:.3f} / {c:.3f}" for k, (w, c) in cam.get("b_stages_wall_cpu_s", {}).items()))
        print(f"(c) naive exact, one render per row            {cam['c_naive_event_extrapolated_s']:8.3f} s   "
              f"({cam['c_naive_per_row_render_s'] * 1e3:.1f} ms/row x 720, from {cam['c_sample_rows']} rows; "
              f"(c)/(b) = {cam['c_over_b']:.1f})")
        print(f"(d) contracts check                            {cam['d_check_s']:8.3f} s   vs raw decode "
              f"{cam['d_raw_decode_s']:.3f} s: {cam['d_over_decode']:.2f}x  [target <= 1.5]; CPU "
              f"{cam['d_check_cpu_s']:.3f} / {cam['d_raw_decode_cpu_s']:.3f} s: {cam['d_over_decode_cpu']:.2f}x")
    if lidar:
        F, C = lidar["shape"]
        print(f"LiDAR {C} x {F} sweep of the same scene:")
        print(f"(L) rowbeam per-firing sweep                     {lidar['per_firing_s']:8.3f} s   (whole export with "
              f"writing and QA: {lidar['export_s']:.3f} s; {lidar['breakdown']})")
        print(f"(i) same engine, every beam at one time          {lidar['one_time_s']:8.3f} s   (L)/(i) = "
              f"{lidar['over_one_time']:.2f}  [target <= 1.5]")
        ph = lidar["render_phases_cpu"]
        print(f"    Cycles phases, CPU s (median): (L) {ph['L']}  (i) {ph['i']}")
        print(f"(ii) naive frame_set + scene.ray_cast per firing {lidar['naive_s']:8.3f} s   "
              f"({lidar['naive_per_firing_ms']:.2f} ms/firing x {F}, from {lidar['sample_firings']} firings; "
              f"(ii)/(L) = {lidar['naive_over_rowbeam']:.1f}  [target >= 50])")
        figure("(ii)/(L) naive per-firing ray_cast / rowbeam", lidar["naive_over_rowbeam"], "", ">= 50")
    if flow:
        print("Flow, 1280x720 pair (events 30 -> 31), both directions + scene flow, written and checked:")
        print(f"(F) flow pair export                             {flow['flow_s']:8.3f} s   vs one event's label export "
              f"{flow['label_s']:.3f} s: ratio {flow['ratio']:.2f}  [target <= 1.0]  ({flow['breakdown']}; "
              f"fixed-point iterations {flow['forward']['iterations']}, max row residual "
              f"{flow['forward']['max_row_residual']:.2g})")
    if "radar" in r:
        _print_radar(r["radar"])
    if "objects" in r:
        _print_objects(r["objects"], "1280x720")
    if "lens" in r:
        _print_lens(r["lens"], args.repeat)
    if "lens_objects" in r:
        _print_lens_objects(r["lens_objects"], args.repeat)
    if "report" in r:
        _print_checker(r["report"])
    if "surfaces" in r:
        from bench_surfaces import print_surfaces
        print_surfaces(r["surfaces"])
    if "big" in r:
        from bench_big import print_big
        print_big(r["big"], figure)
    if "farm" in r:
        from bench_farm import report_farm
        report_farm(r["farm"], figure)
    if "storage" in r:
        from bench_storage import print_storage
        print_storage(r["storage"], figure)
    if "rgb_quality" in r:
        from bench_rgb_quality import print_rgb_quality
        print_rgb_quality(r["rgb_quality"], figure)
    print(f"peak RSS of the bench process                    {peak_mb:8.0f} MB")
    _report_issue12(args, cam, lidar, flow, r.get("multi"), r.get("poses"),
                    {**r.get("scale", {}), **({"rgb": r["rgb"]} if "rgb" in r else {})})
    print("(GPU) GPU/CPU time ratios and label agreement: `make bench-gpu` (bench/bench_gpu.py; needs a CUDA/OptiX "
          "GPU, exits 2 without one)")
    print_figures()
    return 0


# `make bench ONLY=camera,scale` (bench.py --only ...) runs these sections alone, in this order.
SECTIONS = ("camera", "multi", "scale", "rgb", "lidar", "flow", "poses", "radar", "objects", "lens", "lens_objects",
            "surfaces", "report", "big", "farm", "storage", "rgb_quality")


def _sections(only: str) -> list:
    names = [x.strip() for x in (only or "").split(",") if x.strip()] or list(SECTIONS)
    unknown = sorted(set(names) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"bench.py: error: unknown section(s) {unknown}; sections: {', '.join(SECTIONS)}")
    return names


def _run_section(name: str, work: Path, args):
    ints = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
    if name == "camera":
        return camera_benchmark(work, args.repeat, args.sample_rows)
    if name == "lidar":
        return lidar_benchmark(work, args.repeat, args.sample_firings)
    if name == "flow":
        return flow_benchmark(work, args.repeat)
    if name == "radar":
        return radar_benchmark(work, args.repeat)
    if name == "objects":
        return object_label_benchmark(work)
    if name == "multi":
        return multi_event_benchmark(work, args.events)
    if name == "poses":
        return pose_benchmark(work, args.repeat)
    if name == "scale":
        return scale_benchmark(work, [x for x in args.scale_sizes.split(",") if x], ints(args.lidar_channels),
                               ints(args.object_counts), [], [x for x in args.lens_object_sizes.split(",") if x])
    if name == "rgb":
        return scale_benchmark(work, [], [], [], ints(args.rgb_samples))["rgb"]
    if name == "lens":
        return lens_benchmark(work, args.repeat)
    if name == "lens_objects":
        return lens_object_label_benchmark(work, args.repeat)
    if name == "surfaces":
        from bench_surfaces import surface_policy_benchmark
        return surface_policy_benchmark(work, args.repeat)
    if name == "big":
        from bench_big import big_benchmark
        return big_benchmark(work, args.big_instances, args.big_faces, args.big_scale)
    if name == "farm":
        from bench_farm import farm_benchmark
        return farm_benchmark(work, args.repeat)
    if name == "storage":
        from bench_storage import storage_benchmark
        return storage_benchmark(work)
    if name == "rgb_quality":
        from bench_rgb_quality import rgb_quality_benchmark
        return rgb_quality_benchmark(work)
    return checker_benchmark(work, args.repeat)       # (d) and (Q) side by side, with and without object labels


def _report_issue12(args, cam, lidar, flow, multi, poses, scale) -> None:
    """The label-export figures (of the sections that ran): details printed here, each figure recorded for the summary
    table."""
    import os

    if cam:
        b = cam["b_breakdown_s"]
        verify = b.get("verify", 0.0)
        print(f"(b) without its verification {cam['b_rowbeam_label_export_s'] - verify:8.3f} s; verification (on, "
              f"{verify:.3f} s) alone is {verify / cam['a_global_shutter_render_s']:.2f} x (a); CPU seconds (a) "
              f"{cam['a_cpu_s']:.3f}, (b) {cam['b_cpu_s']:.3f}; load {os.getloadavg()[0]:.1f}")
        figure("(b)/(a) one 1280x720 event", cam["b_over_a"], "", "<= 1.3", f"CPU-time ratio {cam['b_over_a_cpu']:.2f}")
        figure("(b - verify)/(a)", (cam["b_rowbeam_label_export_s"] - verify) / cam["a_global_shutter_render_s"])
        figure("verify/(a)", verify / cam["a_global_shutter_render_s"])
        figure("(a) CPU s", cam["a_cpu_s"], "s", None,
               f"with the scene's lights and bounces {cam['a_full_shading_cpu_s']:.2f} s")
        figure("(b) CPU s", cam["b_cpu_s"], "s", None,
               f"with the scene's lights and bounces {cam['b_full_shading_cpu_s']:.2f} s")
    if multi:
        wall, cpu = multi["wall_s"], multi["cpu_s"]
        print(f"Multi-event run, {multi['events']} camera events (labels only), per event wall s: "
              + " ".join(f"{x:.2f}" for x in wall) + "; CPU s: " + " ".join(f"{x:.2f}" for x in cpu))
        print("    mean stage seconds (wall) of events 2..N: "
              + ", ".join(f"{k} {v:.3f}" for k, v in multi["stages_2_n_mean_s"].items()))
        print("    mean after the label render of events 2..N, wall / CPU s: " + ", ".join(
            f"{k} {w:.3f} / {c:.3f}" for k, (w, c) in multi.get("after_render_2_n_mean_wall_cpu_s", {}).items()))
        if len(wall) > 1 and cam:
            later = statistics.median(wall[1:])
            figure(f"events 2..{len(wall)} median / (a)", later / cam["a_global_shutter_render_s"], "", "<= 1.0",
                   f"event 1 {wall[0] / cam['a_global_shutter_render_s']:.2f} x (a); CPU-time ratio "
                   f"{statistics.median(cpu[1:]) / cam['a_cpu_s']:.2f}")
        elif len(wall) > 1:
            figure(f"events 2..{len(wall)} median wall", statistics.median(wall[1:]), "s", None,
                   "run section camera too for the ratio to (a)")
    _lidar_flow_figures(lidar, flow)
    if cam:
        if not any(f["name"].startswith("(d) check / raw decode") for f in FIGURES):   # the report section measures it too
            figure("(d) check / raw decode", cam["d_over_decode"], "", "<= 1.5", f"CPU {cam['d_over_decode_cpu']:.2f}x")
    for label, r in (poses or {}).items():
        print(f"(P) {label}: {r['n']} poses direct {r['direct_s'] * 1e3:.1f} ms vs frame_set per time "
              f"{r['frame_set_s'] * 1e3:.1f} ms")
        figure(f"(P) {label} poses frame_set/direct", r["frame_set_s"] / r["direct_s"])
    if scale:
        report_scale({k: scale.get(k, []) for k in ("baseline", "camera", "rgb", "lidar", "objects", "lens_objects")})
    rows = [("camera labels 1280x720", cam["b_cpu_s"])] if cam else []
    rows += [(f"camera labels + rgb {n} spp", r["cpu_s"]) for n, r in (scale or {}).get("rgb", [])]
    rows += [("LiDAR sweep 64x2048", lidar["export_cpu_s"])] if lidar else []
    rows += [("flow pair 1280x720", flow["flow_cpu_s"])] if flow else []
    if rows:
        print(f"Throughput, running example, events per core-hour (3600 / CPU seconds of one event incl. writing and "
              f"the in-line check; {os.cpu_count()} cores here):")
    for label, cpu_s in rows:
        print(f"    {label:<32} {3600 / cpu_s:8.0f} events/core-hour ({cpu_s:.2f} CPU s)")
        figure(f"throughput {label}", 3600 / cpu_s, "ev/c-h")


def _lidar_flow_figures(lidar: dict | None, flow: dict | None) -> None:
    """The per-event and flow figures (of the sections that ran), wall and CPU side by side (CPU seconds hold up when other
    jobs share the machine)."""
    if lidar:
        _lidar_figures(lidar)
    if flow:
        _flow_figures(flow)


def _lidar_figures(lidar: dict) -> None:
    figure("(L)/(i) LiDAR 64x2048 wall", lidar["over_one_time"], "", "<= 1.5",
           f"{lidar['per_firing_s']:.2f} s / {lidar['one_time_s']:.2f} s; breakdown {lidar['breakdown']}")
    figure("(L)/(i) LiDAR 64x2048 CPU", lidar["over_one_time_cpu"], "", "<= 1.5",
           f"{lidar['per_firing_cpu_s']:.2f} / {lidar['one_time_cpu_s']:.2f} CPU s (median per round)")


def _flow_figures(flow: dict) -> None:
    figure("(F) flow pair / label export wall", flow["ratio"], "", "<= 1.0",
           f"{flow['flow_s']:.2f} s / {flow['label_s']:.2f} s; {flow['breakdown']}")
    figure("(F) flow pair / label export CPU", flow["ratio_cpu"], "", "<= 1.0",
           f"{flow['flow_cpu_s']:.2f} / {flow['label_cpu_s']:.2f} CPU s; deforming mesh rows {flow['deforming_mesh_rows']}")


def _print_radar(r: dict) -> None:
    K, B = r["shape"]
    print(f"Radar frame {K} chirps x {B} beams (each chirp at its own time, radial velocity from motion):")
    print(f"(R) radar frame                                  {r['radar_s']:8.3f} s   vs one 64 x 2048 LiDAR sweep "
          f"{r['lidar_s']:.3f} s: ratio {r['ratio']:.2f}  ({r['breakdown']}; {r['valid']} valid beams)")
    figure(f"(R) radar {K}x{B} / LiDAR 64x2048", r["ratio"], "", None, f"breakdown {r['breakdown']}")


def _print_objects(rows: list, size: str) -> None:
    print(f"Object labels (amodal masks on the 3x canvas, counts, boxes, poses, assets), camera event {EVENT}, {size}:")
    for r in rows:
        print(f"(O) {r['objects']:4d} objects kept ({r['listed']} listed, {r['visible']} visible): object labels "
              f"{r['object_s']:8.3f} s ({r['renders']} renders {r['render_s']:.3f} s covering {r['rendered_images']:.1f} "
              f"image areas, {r['from_modal']} from the modal "
              f"mask, {r['rasterised']} rasterised {r['raster_s']:.3f} s, canvas-row poses {r['poses_s']:.3f} s) "
              f"vs the event's label export {r['label_s']:.3f} s: ratio {r['ratio']:.2f}  [target <= 1.5]"
              f"{'' if r['passed'] else '  QUARANTINED'}")


if __name__ == "__main__":
    sys.exit(main())
