"""rowbeam Blender extension: configure sensors and labels, export events and check bundles.

The exporter and the contracts it runs are the same code as render_export.py; the extension
bundles them (and OpenEXR, jsonschema) as wheels.
"""
from __future__ import annotations

import bpy

from . import identity, operators, panels, rig_props, settings

HANDLERS = (*identity.HANDLERS, (bpy.app.handlers.load_post, rig_props.on_load))
_CLASSES = (rig_props.RowbeamSensor, settings.RowbeamSceneSettings, settings.RowbeamRunState,
            *operators.CLASSES, *panels.CLASSES)


def register():
    from rowbeam.blender.compat.blender_compat import support_problem

    problem = support_problem()
    if problem:                                 # refuse cleanly: one line, nothing registered
        print(f"rowbeam: {problem}")
        return
    for cls in _CLASSES:
        bpy.utils.register_class(cls)
    bpy.types.Scene.rowbeam = bpy.props.PointerProperty(type=settings.RowbeamSceneSettings)
    bpy.types.WindowManager.rowbeam_state = bpy.props.PointerProperty(type=settings.RowbeamRunState)
    for handlers, fn in HANDLERS:
        if fn not in handlers:
            handlers.append(fn)
    try:
        scenes = list(bpy.data.scenes)          # enabled with a file already open
    except AttributeError:                      # restricted data while Blender starts
        scenes = []
    for scene in scenes:
        rig_props.adopt_stored_rig(scene)


def unregister():
    if not hasattr(bpy.types.Scene, "rowbeam"):     # register() refused this Blender
        return
    for handlers, fn in HANDLERS:
        while fn in handlers:
            handlers.remove(fn)
    del bpy.types.WindowManager.rowbeam_state
    del bpy.types.Scene.rowbeam
    for cls in reversed(_CLASSES):
        bpy.utils.unregister_class(cls)
