"""Entry point of the rowbeam exporter.

    blender -b scene.blend -P render_export.py -- --out DIR [--rig RIG.json] [...]
    python render_export.py scene.blend --out DIR [--rig RIG.json] [...]      (bpy wheel)

Inside Blender the open file is reloaded with its scripts disabled before anything runs.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _entry() -> int:
    from rowbeam.util.interrupt import defer

    defer()            # first: every thread started later (numpy's, Blender's, Cycles') keeps SIGINT/SIGTERM blocked
    from rowbeam.blender.export.cli import main

    if "--" in sys.argv:                       # blender -b scene.blend -P render_export.py -- args
        import bpy

        args = sys.argv[sys.argv.index("--") + 1:]
        if bpy.data.filepath:
            return main([bpy.data.filepath, *args], blend_positional=True)
        return main(args, blend_positional=False)
    return main(sys.argv[1:], blend_positional=True)


if __name__ == "__main__":
    sys.exit(_entry())
