"""Run inside a fresh Python with only the bpy wheel (no rowbeam checkout on sys.path): install the
extension zip, configure sensors and labels through its operators and properties, save, export and
check from the UI operators, then uninstall. Prints RESULT{json}. Driven by test_extension.py."""
import json
import sys

import bpy

args = json.loads(sys.argv[sys.argv.index("--") + 1] if "--" in sys.argv else sys.argv[1])
res = {}
bpy.ops.wm.open_mainfile(filepath=args["blend"], use_scripts=False)
bpy.ops.extensions.package_install_files(filepath=args["zip"], repo="user_default", enable_on_install=True)
import rowbeam  # noqa: E402  (from the extension's bundled wheel)

res["contracts_file"] = rowbeam.__file__
scene = bpy.context.scene
view_layer = bpy.context.view_layer
res["adopted"] = [s.sensor_id for s in scene.rowbeam.sensors]    # rig stored without the add-on
bpy.ops.rowbeam.sensor_remove()

# sensors through the operators
view_layer.objects.active = scene.objects["camera_front"]
bpy.ops.rowbeam.sensor_add(sensor_type="rolling_shutter_camera")
bpy.ops.rowbeam.camera_preset(preset="seed_rolling")
cam = scene.rowbeam.sensors[0]
cam.sensor_id, cam.rgb_samples, cam.verify_rows = "camera_front", 2, 2
view_layer.objects.active = scene.objects["lidar_mount"]
bpy.ops.rowbeam.sensor_add(sensor_type="spinning_lidar")
lidar = scene.rowbeam.sensors[1]
lidar.sensor_id, lidar.preset, lidar.azimuth_steps, lidar.verify_firings = "lidar_top", "uniform_32", 256, 2
bpy.ops.rowbeam.sensor_move(direction="UP")              # reorder: lidar first ...
res["order_after_move"] = [s.sensor_id for s in scene.rowbeam.sensors]
bpy.ops.rowbeam.sensor_move(direction="DOWN")            # ... and back
bpy.ops.rowbeam.rig_export(filepath=args["rig_out"])

# labels: classes and ids
for obj in scene.objects:
    obj.select_set(obj.type == "MESH")
bpy.ops.rowbeam.set_class(tag="building")
bpy.ops.rowbeam.assign_ids()
plane = scene.objects["plane_z8"]
res["id_before"] = plane["rowbeam_id"]
plane.name = "renamed_plane"
view_layer.update()
res["id_after_rename"] = plane["rowbeam_id"]
dup = plane.copy()
scene.collection.objects.link(dup)
view_layer.update()                                        # the handler sees a copy sharing the id
res["dup_id"] = dup["rowbeam_id"]
res["plane_id_after_dup"] = plane["rowbeam_id"]
bpy.data.objects.remove(dup)
scene.rowbeam.scenario, scene.rowbeam.lineage_group = "ui_test", "ui_test/group"

# export and check from the UI operators
settings = scene.rowbeam
settings.output_dir, settings.first_event, settings.event_count, settings.device = args["out_ui"], 1, 1, "cpu"
bpy.ops.wm.save_mainfile()
res["blender"] = list(bpy.app.version)
if bpy.app.version < (4, 5, 0):        # no custom (OSL) camera: the LiDAR is refused by name, the camera exports
    try:
        bpy.ops.rowbeam.export()
    except RuntimeError as exc:       # the operator reported an ERROR
        res["lidar_refused"] = str(exc)
    settings.sensor_filter = "camera_front"
    bpy.ops.wm.save_mainfile()
res["export"] = list(bpy.ops.rowbeam.export())
bpy.ops.rowbeam.check()
state = bpy.context.window_manager.rowbeam_state
res["check_status"], res["check_lines"], res["report_path"] = state.check_status, state.check_lines, state.report_path
bpy.ops.rowbeam.report()        # the visual QA report beside the bundle, opened through $BROWSER (a recorder here)
res["report_html"], res["report_status"] = state.report_html, state.check_status
res["stored_rig"] = json.loads(scene["rowbeam_rig"])
settings.split = "val"
res["dataset_spec_op"] = list(bpy.ops.rowbeam.dataset_spec(filepath=args["spec_out"]))

# every panel draws without error, and everything it draws exists (layout stand-in: no UI here)
class Layout:
    def __init__(self):
        self.problems = problems

    def prop(self, data, name, **kw):
        if not (name.startswith('["') or name in data.bl_rna.properties):
            problems.append(f"prop {type(data).__name__}.{name} does not exist")
        return self

    def operator(self, idname, **kw):
        if not hasattr(bpy.types, idname.split(".")[0].upper() + "_OT_" + idname.split(".")[1]):
            problems.append(f"operator {idname} does not exist")
        return type("Props", (), {})()

    def operator_menu_enum(self, idname, prop, **kw):
        return self.operator(idname)

    def label(self, text="", **kw):
        labels.append(text)
        return self

    def template_list(self, list_type, *a, **kw):
        if not hasattr(bpy.types, list_type):
            problems.append(f"UI list {list_type} does not exist")

    def __getattr__(self, name):
        return lambda *a, **kw: self


problems, labels = [], []
context = type("Context", (), {"scene": scene, "window_manager": bpy.context.window_manager,
                                "active_object": scene.objects["camera_front"]})()
for name in [n for n in dir(bpy.types) if n.startswith("ROWBEAM_PT")]:
    panel = getattr(bpy.types, name)
    stub = type("Stub", (), {"layout": Layout(), "draw_sensor": staticmethod(getattr(panel, "draw_sensor", print))})()
    for i in range(len(scene.rowbeam.sensors)):
        scene.rowbeam.active_sensor = i
        panel.draw(stub, context)
bpy.context.window_manager.rowbeam_state.running = True
bpy.types.ROWBEAM_PT_export.draw(type("Stub", (), {"layout": Layout()})(), context)
labels.clear()
bpy.types.ROWBEAM_PT_check.draw(type("Stub", (), {"layout": Layout()})(), context)
res["check_panel_labels"] = list(labels)
res["panel_problems"] = problems
res["panels"] = sorted(n for n in dir(bpy.types) if n.startswith("ROWBEAM_PT"))

# uninstall: nothing of rowbeam may stay registered
repos = [r.module for r in bpy.context.preferences.extensions.repos]
bpy.ops.extensions.package_uninstall(repo_index=repos.index("user_default"), pkg_id="rowbeam")
res["leftover_classes"] = [n for n in dir(bpy.types) if n.upper().startswith("ROWBEAM")]
res["leftover_handlers"] = [f.__module__ for h in (bpy.app.handlers.depsgraph_update_post, bpy.app.handlers.load_post)
                            for f in h if "rowbeam" in f.__module__]
res["scene_attr"] = hasattr(bpy.types.Scene, "rowbeam") or hasattr(bpy.types.WindowManager, "rowbeam_state")
res["addons"] = list(bpy.context.preferences.addons.keys())
print("RESULT" + json.dumps(res))
