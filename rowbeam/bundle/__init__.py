"""The bundle on disk without Blender: file primitives, payload arrays, JSON Schemas, the loader, associations."""
