"""rowbeam exporter: runs inside Blender (bpy). Schedules sensor events, drives Cycles,
derives labels and writes bundles. Timing and conventions come from `contracts`."""

ROWBEAM_VERSION = "0.1.0"
