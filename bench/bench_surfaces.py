"""Bench section `surfaces` (`make bench ONLY=surfaces`): cost of the surface policy on a foliage-heavy label render.

The production-like street (rowbeam/blender/scenes/street_surfaces.py, 48 alpha-cut leaf cards, decals, glass, fog)
at 1280x720: one global-shutter 1-spp label render per policy, interleaved, median CPU s of `repeat` rounds, against
the same render with the scene's own materials (no policy: camera_event.APPLY_SURFACE_POLICY off). A policy with
`layers` L adds the surface-layer stack's L peel renders to its label render's time.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

POLICIES = {
    "default (t=0.5, surface, ignore)": None,
    "t=0.1": {"alpha_threshold": 0.1},
    "t=1.0": {"alpha_threshold": 1.0},
    "see_through": {"transmission": "see_through"},
    "volumes surface": {"volumes": "surface"},
    "layers=2 (label + 2 peels)": {"layers": 2},
}


def surface_policy_benchmark(work: Path, repeat: int) -> dict:
    """{policy: {cpu_s, wall_s, over_no_policy}} plus the no-policy render's figures under 'no policy'."""
    from rowbeam.blender.compat.scene_clock import set_time
    from rowbeam.blender.compat.scene_patch import ScenePatch
    from rowbeam.blender.cycles import cycles_setup as cs
    from rowbeam.blender.export.run import ExportRequest, plan_export
    from rowbeam.blender.scenes import common, street_surfaces
    from rowbeam.blender.sensors import camera_event

    blend = work / "street.blend"
    rig = street_surfaces.street(scale=1)
    common.save(blend, rig)
    rigs = {}
    for name, policy in POLICIES.items():
        doc = json.loads(json.dumps(rig))
        doc["sensors"] = [dict(doc["sensors"][0], object_labels=False, rgb_samples=0,
                               **({"surface_policy": policy} if policy else {}))]
        rigs[name] = work / f"street_{len(rigs)}.rig.json"
        rigs[name].write_text(json.dumps(doc))

    def render(rig_path, apply_policy=True) -> tuple[float, float]:
        plan = plan_export(ExportRequest(out=work / "unused", blend=blend, rig=rig_path, sensors=["camera_front"],
                                         first_event=0, count=1, device="cpu"))
        ctx, sensor = plan.context, plan.jobs[0].sensor
        camera_event.APPLY_SURFACE_POLICY = apply_policy
        wall = cpu = 0.0
        try:
            for layer in (None, *range(sensor.surface_policy.layers)):
                with ScenePatch() as patch:
                    camera_event.setup_label_render(patch, ctx, sensor, 1280, 720, layer=layer)
                    patch.set(ctx.scene.render, "use_motion_blur", False)
                    set_time(ctx.scene, ctx.clock, sensor.timing(0, 720).reference_time_ns())
                    c0, t0 = time.process_time(), time.perf_counter()
                    cs.render_passes(ctx.scene, ctx.view_layer)
                    wall, cpu = wall + time.perf_counter() - t0, cpu + time.process_time() - c0
            return wall, cpu
        finally:
            camera_event.APPLY_SURFACE_POLICY = True

    runs = {name: [] for name in ["no policy", *POLICIES]}
    for _ in range(repeat):
        runs["no policy"].append(render(rigs[next(iter(POLICIES))], apply_policy=False))
        for name in POLICIES:
            runs[name].append(render(rigs[name]))
    out = {}
    for name, rows in runs.items():
        out[name] = {"wall_s": statistics.median(r[0] for r in rows), "cpu_s": statistics.median(r[1] for r in rows)}
    base = out["no policy"]["cpu_s"]
    for row in out.values():
        row["over_no_policy_cpu"] = row["cpu_s"] / base if base else float("nan")
    return out


def print_surfaces(r: dict) -> None:
    print("Surface policy, street of 48 alpha-cut leaf cards + decals + glass + fog, 1280x720 global-shutter "
          "1-spp label render (median):")
    for name, row in r.items():
        print(f"    {name:34s} {row['wall_s']:7.3f} s wall {row['cpu_s']:7.3f} s CPU   "
              f"x{row['over_no_policy_cpu']:.2f} of the render without a policy")
