"""Conventions and models without Blender: clock and timing, frames, camera model, lenses, modalities,
ontology, rig files, state log, QA tolerances."""
