"""rowbeam contracts: executable conventions, timing models, schemas and QA checks.

This package never imports bpy. The exporter (which runs inside Blender) imports the same
functions, so the code that schedules an event is the code that verifies it.
"""

CONTRACTS_VERSION = "1.0.0"
