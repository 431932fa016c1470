"""Sensor types without Blender: beam tables, presets and per-firing / per-chirp timing models."""
