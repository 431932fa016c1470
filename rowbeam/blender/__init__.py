"""Everything under this folder needs Blender's Python module (bpy): the exporter and the scene builders.
Nothing outside it imports from it, except the command line when a command needs Blender."""
