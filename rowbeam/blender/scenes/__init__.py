"""Scripts that build rowbeam's calibration scenes and the running example (bpy)."""
