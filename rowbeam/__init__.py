"""rowbeam: authoritative sensor ground truth from Blender scenes, and a checker that proves it.

The public API needs no Blender (numpy, OpenEXR, jsonschema):

    import rowbeam
    bundle = rowbeam.Bundle.open("out/bundle")          # the loader: events, flows, lazily decoded arrays
    report = rowbeam.check_bundle("out/bundle")         # the QA report (rowbeam/qa_report@1) as a dict
    rig = rowbeam.load_rig("scene.rig.json")            # a parsed, validated rig (rowbeam/rig@1)

`rowbeam.blender` (the exporter and the scene builders) needs Blender's Python module (bpy); nothing
here imports it. Names are resolved on first use, so `import rowbeam` stays light.
"""
from __future__ import annotations

import importlib

from rowbeam.version import CONTRACTS_VERSION, ROWBEAM_VERSION

__version__ = ROWBEAM_VERSION

_API = {
    # the loader (rowbeam.bundle.reader): one bundle, its events and flows, arrays decoded on demand
    "Bundle": "rowbeam.bundle.reader",
    "Event": "rowbeam.bundle.reader",
    "Flow": "rowbeam.bundle.reader",
    "open_event": "rowbeam.bundle.reader",
    "open_flow": "rowbeam.bundle.reader",
    "read_payload": "rowbeam.bundle.reader",
    # the checker: a bundle (or one folder) against its contracts -> rowbeam/qa_report@1 dict
    "check_bundle": "rowbeam.check.runner",
    # rigs: rowbeam/rig@1 files and documents -> Rig
    "load_rig": "rowbeam.model.rig",
    "parse_rig": "rowbeam.model.rig",
    "Rig": "rowbeam.model.rig",
    # the declared meaning (units, frame, time support, dtype) of every modality of every sensor type
    "MODALITIES": "rowbeam.sensors",
    # one-line user errors (every command prints these without a traceback and exits 2)
    "RowbeamError": "rowbeam.util.errors",
    "UnusableInput": "rowbeam.util.errors",
}

__all__ = ["__version__", "ROWBEAM_VERSION", "CONTRACTS_VERSION", *_API]


def __getattr__(name: str):
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'rowbeam' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
