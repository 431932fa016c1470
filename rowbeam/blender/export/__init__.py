"""Export orchestration inside Blender: command line, runs, bundle output folders, manifests, verification."""
