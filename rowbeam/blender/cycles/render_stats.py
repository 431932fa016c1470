"""Cycles' render status (bpy.app.handlers.render_stats) forwarded to a rowbeam.util.progress.Progress."""
from __future__ import annotations

from rowbeam.util.progress import Progress


def watch_cycles(progress: Progress):
    """Forward Cycles' render status (`Sample a/b`) to `progress` while rendering; returns the undo (needs bpy)."""
    import bpy

    def handler(text, *_):
        progress.render_stats(text)

    bpy.app.handlers.render_stats.append(handler)
    return lambda: bpy.app.handlers.render_stats.remove(handler)
