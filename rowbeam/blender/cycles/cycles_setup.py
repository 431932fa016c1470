"""Configure and run Cycles renders for labels, rgb and exact per-row references (bpy).

Label renders use what makes data passes exact (docs/design.md): 1 sample, Gaussian filter of
width 0.01 px (rays through pixel centres), no denoising, no adaptive sampling. Position,
Object Index and Depth are first-sample passes; Normal and the true-normal AOV come from
that same single sample.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import bpy
import numpy as np

from rowbeam.bundle.arrays import read_exr_parts
from rowbeam.util.errors import RowbeamError

from rowbeam.blender.compat import blender_compat
from rowbeam.blender.cycles.cycles_timing import CyclesShutter
from rowbeam.blender.compat.scene_clock import set_time
from rowbeam.blender.compat.scene_patch import ScenePatch
from rowbeam.blender.cycles.label_materials import POLICY_AOV

TRUE_NORMAL_AOV = "rowbeam_true_normal"
INSTANCE_RANDOM_AOV = "rowbeam_instance_random"     # rowbeam.blender.objects.instances: Object Info Random
GPU_BACKENDS = ("OPTIX", "CUDA", "HIP", "ONEAPI", "METAL")


def select_device(scene, patch: ScenePatch, preference: str, cycles_prefs=None) -> str:
    """Set scene.cycles.device from 'cpu' | 'gpu' | 'auto'; return a description of what is used.

    `cycles_prefs` defaults to the Cycles add-on preferences (tests pass a stand-in: no GPU here).
    """
    if preference == "cpu":
        patch.set(scene.cycles, "device", "CPU")
        return "CPU"
    prefs = cycles_prefs or bpy.context.preferences.addons["cycles"].preferences
    for backend in GPU_BACKENDS:
        try:
            prefs.compute_device_type = backend
        except TypeError:          # backend not compiled into this Blender
            continue
        prefs.refresh_devices()
        devices = [d for d in prefs.devices if d.type == backend]
        if devices:
            for d in prefs.devices:
                d.use = d.type == backend
            patch.set(scene.cycles, "device", "GPU")
            return f"GPU:{backend}:" + ",".join(d.name for d in devices)
    if preference == "gpu":
        raise RowbeamError("--device gpu: no GPU compute device (OptiX/CUDA/HIP/oneAPI/Metal) is available")
    patch.set(scene.cycles, "device", "CPU")
    return "CPU"


def common_settings(patch: ScenePatch, scene) -> None:
    """Settings every rowbeam render shares. Cycles persistent data is off: each render syncs the scene afresh and
    frees it after (the exact-row verification renders alone keep it, camera_event._verify). Measured on the running
    example (1280x720, CPU, 2 shared cores): keeping it across a run's events, with each event's label state
    (true-normal AOV nodes, pass indices, lights, world) restored and re-applied, gave payloads sha256-identical to
    cold renders but no CPU gain beyond noise (events 2..6, median CPU s per event, cold 2.89 / 2.36 vs warm
    2.70 / 2.57 in two interleaved pairs) and +80 MB peak RSS (684 -> 764 MB: the film is held through `derive`).
    By the render-stats phases of one cold label render (1.2-1.8 CPU s), scene sync with its 131 motion frame
    changes is 0.07-0.10 CPU s and the BVH build ~0.02; the rest is the 1-spp sampling of every pixel, which
    persistent data cannot save."""
    r = scene.render
    patch.set(r, "engine", "CYCLES")
    patch.set(r, "use_compositing", False)
    patch.set(r, "use_sequencer", False)
    patch.set(r, "use_border", False)
    patch.set(r, "use_crop_to_border", False)
    patch.set(r, "use_persistent_data", False)
    blender_compat.set_multilayer_exr(patch, r.image_settings)      # single-part (interleaved) on every version
    patch.set(r.image_settings, "color_depth", "32")
    patch.set(r.image_settings, "exr_codec", "NONE")
    patch.set(scene.cycles, "use_denoising", False)
    patch.set(scene.cycles, "use_adaptive_sampling", False)
    patch.set(scene.cycles, "seed", 0)
    patch.set(scene.cycles, "use_animated_seed", False)


def set_resolution(patch: ScenePatch, scene, width: int, height: int) -> None:
    patch.set(scene.render, "resolution_x", width)
    patch.set(scene.render, "resolution_y", height)
    patch.set(scene.render, "resolution_percentage", 100)


def label_settings(patch: ScenePatch, scene, view_layer) -> None:
    patch.set(scene.cycles, "samples", 1)
    patch.set(scene.cycles, "pixel_filter_type", "GAUSSIAN")
    patch.set(scene.cycles, "filter_width", 0.01)
    for attr in ("use_pass_position", "use_pass_normal", "use_pass_object_index", "use_pass_z"):
        patch.set(view_layer, attr, True)
    if TRUE_NORMAL_AOV not in view_layer.aovs:
        aov = view_layer.aovs.add()
        aov.name, aov.type = TRUE_NORMAL_AOV, "COLOR"
        patch.on_restore(lambda: view_layer.aovs.remove(view_layer.aovs[TRUE_NORMAL_AOV]))


def data_pass_settings(patch: ScenePatch, scene, view_layer) -> None:
    """Skip the shading work label passes never read: no bounces after the first hit (transparent bounces
    kept), lights and world off, no Combined pass. Position, Normal, Object Index, Depth and AOVs are
    written at the first hit from the camera ray's own random numbers, so they come out bit-identical
    (tests/blender/export/test_label_speed.py); measured on the 1280x720 running example (bpy 5.3, CPU): 5.9 -> 3.0 CPU s
    per global-shutter label render."""
    patch.set(scene.cycles, "max_bounces", 0)
    patch.set(scene, "world", None)
    for obj in scene.objects:
        if obj.type == "LIGHT" and not obj.hide_render:
            patch.set(obj, "hide_render", True)
    patch.set(view_layer, "use_pass_combined", False)


# Cycles' denoiser as the rgb option rgb_denoise sets it: OpenImageDenoise on the CPU with albedo and normal guides.
DENOISER = {"denoiser": "OPENIMAGEDENOISE", "denoising_input_passes": "RGB_ALBEDO_NORMAL",
            "denoising_prefilter": "ACCURATE", "denoising_quality": "HIGH", "denoising_use_gpu": False}


def rgb_settings(patch: ScenePatch, scene, view_layer, sensor, seed: int) -> dict:
    """Path-traced RGB of camera `sensor`: rgb_samples per pixel (the most a pixel takes with adaptive sampling),
    Cycles noise seed `seed` (rowbeam.model.sample_identity.rgb_seed), the sensor's adaptive sampling and denoiser
    options. Returns what was set beyond samples and seed, for the manifest's method.rgb_render (empty by default)."""
    c = scene.cycles
    patch.set(c, "samples", sensor.rgb_samples)
    patch.set(c, "seed", seed)
    declared = {}
    if sensor.rgb_adaptive_threshold > 0:
        patch.set(c, "use_adaptive_sampling", True)
        patch.set(c, "adaptive_threshold", float(sensor.rgb_adaptive_threshold))
        patch.set(c, "adaptive_min_samples", int(sensor.rgb_adaptive_min_samples))
        declared["adaptive_sampling"] = {"noise_threshold": float(sensor.rgb_adaptive_threshold),
                                         "min_samples": int(sensor.rgb_adaptive_min_samples),
                                         "max_samples": int(sensor.rgb_samples)}
    if sensor.rgb_denoise:
        patch.set(c, "use_denoising", True)
        set_here = {k: v for k, v in DENOISER.items() if hasattr(c, k)}     # older Blenders lack some settings
        for key, value in set_here.items():
            patch.set(c, key, value)
        patch.set(view_layer.cycles, "use_denoising", True)                  # the rendered layer's own switch
        declared["denoising"] = {"device": "CPU", **{k.removeprefix("denoising_"): v for k, v in set_here.items()
                                                     if k != "denoising_use_gpu"}}
    return declared


# Mist settings that turn Cycles' Mist pass into 1 - coverage: no point of the scene is beyond the mist start,
# so every surface a camera path meets before its first non-transparent bounce adds its opacity to the pass.
COVERAGE_MIST_START_M = 1.0e9


def coverage_settings(patch: ScenePatch, scene, view_layer) -> bool:
    """Add the Mist pass to an rgb render as the label-independent coverage (`rgb_coverage` = 1 - mist); False when
    the scene has no world (mist settings live on the world) and no coverage is written. Render passes are
    independent: the Combined pass is the same with or without it."""
    if scene.world is None:
        return False
    mist = scene.world.mist_settings
    patch.set(mist, "start", COVERAGE_MIST_START_M)
    patch.set(mist, "depth", 1.0)
    patch.set(mist, "falloff", "LINEAR")
    patch.set(view_layer, "use_pass_mist", True)
    return True


def apply_shutter(patch: ScenePatch, scene, clock, shutter: CyclesShutter, motion_steps: int, objects,
                  static_objects=()) -> None:
    """Motion blur with a TOP rolling shutter spanning `shutter`; scene put at its centre time. `objects` get
    `motion_steps`; `static_objects` (certainly static: pose_eval.certainly_static) get motion blur off, which
    renders them identically without motion sync (measured: the same passes bit for bit, ~10% less render CPU)."""
    r = scene.render
    if shutter.uses_motion_blur:
        patch.set(r, "use_motion_blur", True)
        patch.set(r, "motion_blur_position", "CENTER")
        patch.set(r, "motion_blur_shutter", clock.duration_frames(shutter.duration_ns))
        patch.set(scene.cycles, "rolling_shutter_type", "TOP")
        patch.set(scene.cycles, "rolling_shutter_duration", shutter.rolling_duration)
        _reset_shutter_curve(scene)
        for o in objects:
            patch.set(o.cycles, "motion_steps", motion_steps)
            patch.set(o.cycles, "use_motion_blur", True)
        for o in static_objects:
            patch.set(o.cycles, "use_motion_blur", False)
    else:
        patch.set(r, "use_motion_blur", False)
    set_time(scene, clock, shutter.centre_ns)


def _reset_shutter_curve(scene) -> None:
    """Cycles maps random shutter samples through this curve; a flat curve is a uniform exposure."""
    curve = scene.render.motion_blur_shutter_curve
    pts = curve.curves[0].points
    if all(abs(p.location[1] - 1.0) < 1e-9 for p in pts):
        return
    raise RowbeamError("scene.render.motion_blur_shutter_curve is not flat; rowbeam needs a uniform exposure "
                       "(reset the shutter curve in Render Properties > Motion Blur)")


def add_true_normal_aov(patch: ScenePatch, objects) -> None:
    """Write the Geometry node's True Normal into an AOV in every material the objects use.

    Objects without a material get a plain one so the AOV exists on every surface; so does geometry-nodes output
    without a material (`_fill_node_output_slots`).
    """
    default = bpy.data.materials.new("rowbeam_default_surface")
    patch.on_restore(lambda: bpy.data.materials.remove(default))
    done = set()
    _fill_node_output_slots(patch, objects, default)
    for o in objects:
        if not hasattr(o.data, "materials"):
            continue
        if len(o.material_slots) == 0:
            o.data.materials.append(default)
            data = o.data
            patch.on_restore(lambda data=data: data.materials.pop(index=len(data.materials) - 1))
        for slot in o.material_slots:
            if slot.material is None:
                patch.set(slot, "material", default)
    for mat in [default] + [s.material for o in objects for s in o.material_slots if s.material]:
        if mat.name in done:
            continue
        done.add(mat.name)
        blender_compat.ensure_node_tree(patch, mat)
        tree = mat.node_tree
        geo = tree.nodes.new("ShaderNodeNewGeometry")
        out = tree.nodes.new("ShaderNodeOutputAOV")
        out.aov_name = TRUE_NORMAL_AOV
        tree.links.new(geo.outputs["True Normal"], out.inputs["Color"])
        patch.on_restore(lambda tree=tree, geo=geo, out=out: (tree.nodes.remove(out), tree.nodes.remove(geo)))


def _fill_node_output_slots(patch: ScenePatch, objects, default) -> None:
    """Give `default` to geometry a Geometry Nodes object renders without a material. Its output carries its own
    material list (point clouds and curves: their own data), so a data material never reaches it: an object whose
    evaluated slots are all empty gets a label-render-only Set Material modifier (mesh, point cloud and curve
    components); an empty slot among filled ones gets an object-linked `default`. Objects without a Geometry Nodes
    modifier are left to add_true_normal_aov's data slots."""
    nodes = [o for o in objects if hasattr(o.data, "materials") and any(m.type == "NODES" for m in o.modifiers)]
    if not nodes:
        return
    depsgraph = bpy.context.evaluated_depsgraph_get()
    for o in nodes:
        evaluated = [s.material for s in o.evaluated_get(depsgraph).material_slots]
        if all(m is None for m in evaluated):
            _set_material_modifier(patch, o, default)
            continue
        for slot, mat in zip(o.material_slots, evaluated, strict=False):
            if mat is None:
                patch.set(slot, "link", "OBJECT")
                patch.set(slot, "material", default)


def _set_material_modifier(patch: ScenePatch, obj, material) -> None:
    """Append a Geometry Nodes modifier setting `material` on the whole output (undone by `patch`)."""
    tree = bpy.data.node_groups.new("rowbeam_label_material", "GeometryNodeTree")
    tree.interface.new_socket("Geometry", in_out="INPUT", socket_type="NodeSocketGeometry")
    tree.interface.new_socket("Geometry", in_out="OUTPUT", socket_type="NodeSocketGeometry")
    setter = tree.nodes.new("GeometryNodeSetMaterial")
    setter.inputs["Material"].default_value = material
    tree.links.new(tree.nodes.new("NodeGroupInput").outputs[0], setter.inputs["Geometry"])
    tree.links.new(setter.outputs["Geometry"], tree.nodes.new("NodeGroupOutput").inputs[0])
    mod = obj.modifiers.new("rowbeam_label_material", "NODES")
    mod.node_group = tree

    def remove():
        obj.modifiers.remove(mod)
        bpy.data.node_groups.remove(tree)
    patch.on_restore(remove)


def set_render_indices(patch: ScenePatch, scene, table) -> None:
    for entry in table:
        patch.set(scene.objects[entry.obj_name], "pass_index", entry.render_index)


def set_row_border(patch: ScenePatch, scene, row: int, height: int) -> None:
    """Render only image row `row` (0 = top) of a `height`-row image.

    Blender truncates border * height to integer pixel rows after storing the border as float32,
    so exact edges like 219/720 can land one row off; edges half a row inside are exact for
    every row (measured for all 720 rows of a 720-row image).
    """
    set_row_band(patch, scene, row, row + 1, height)


def set_row_band(patch: ScenePatch, scene, first: int, stop: int, height: int) -> None:
    """Render only image rows first..stop-1 (0 = top) of a `height`-row image, full width (edges half a row
    inside the band, as `set_row_border`)."""
    r = scene.render
    bottom = height - stop                      # Blender counts pixel rows from the bottom
    patch.set(r, "use_border", True)
    patch.set(r, "use_crop_to_border", True)
    patch.set(r, "border_min_x", 0.0)
    patch.set(r, "border_max_x", 1.0)
    patch.set(r, "border_min_y", (bottom + 0.5) / height)
    patch.set(r, "border_max_y", min(1.0, (height - first + 0.5) / height))


def render_passes(scene, view_layer) -> dict:
    """Render the scene once; return {pass: array} with row 0 at the top.

    Keys: combined (H,W,4), depth (H,W), position (H,W,3), normal (H,W,3), index (H,W),
    true_normal (H,W,3), vector (H,W,4) -- whichever passes are enabled.
    """
    fd, path = tempfile.mkstemp(prefix="rowbeam_render_", suffix=".exr")
    os.close(fd)
    old_path = scene.render.filepath
    try:
        scene.render.filepath = path
        layers = {vl.name: vl.use for vl in scene.view_layers}
        for vl in scene.view_layers:
            vl.use = vl == view_layer
        try:
            bpy.ops.render.render(write_still=True, scene=scene.name)
        finally:
            for vl in scene.view_layers:
                vl.use = layers[vl.name]
        try:
            channels = read_exr_parts(path)
        except RowbeamError as exc:
            raise _render_file_error(path, str(exc)) from None
    finally:
        scene.render.filepath = old_path
        Path(path).unlink(missing_ok=True)
    passes = _collect_passes(channels, view_layer.name)
    if view_layer.use_pass_z and "depth" not in passes:
        raise _render_file_error(path, "it holds no depth pass")
    return passes


def _render_file_error(path: str, why: str) -> RowbeamError:
    """One line for a render Blender could not write completely (a full temporary folder, mostly)."""
    folder = os.path.dirname(path)
    try:
        free = f"{shutil.disk_usage(folder).free} bytes free"
    except OSError:
        free = "free space unknown"
    return RowbeamError(f"{path}: Cycles' render file could not be read back ({why}); its temporary folder "
                        f"{folder} has {free}: free space in TMPDIR and rerun")


def _collect_passes(channels: dict, layer: str) -> dict:
    """Passes from the render's channels; each channel is popped once stacked, so a large image holds its planes
    and at most one stacked pass at a time (not every plane twice)."""
    def stack(pass_name, comps):
        names = [f"{layer}.{pass_name}.{c}" for c in comps]
        if all(n in channels for n in names):
            return np.stack([channels.pop(n) for n in names], axis=-1)
        return None

    out = {
        "combined": stack("Combined", "RGBA"),
        "position": stack("Position", "XYZ"),
        "normal": stack("Normal", "XYZ"),
        "true_normal": stack(TRUE_NORMAL_AOV, "RGB"),
        "vector": stack("Vector", "XYZW"),
        "instance_random": channels.pop(f"{layer}.{INSTANCE_RANDOM_AOV}.X", None),
    }
    for key, name in blender_compat.pass_channels(layer).items():
        if name in channels:
            out[key] = channels[name]
    for key, prefix in (("mist", f"{layer}.Mist."), ("policy", f"{layer}.{POLICY_AOV}.")):
        name = next((n for n in channels if n.startswith(prefix)), None)
        if name is not None:
            out[key] = channels.pop(name)
    return {k: v for k, v in out.items() if v is not None}
