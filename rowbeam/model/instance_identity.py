"""Stable 64-bit ids of instances (no bpy): derived from the instancer's id and the instance's persistent path in
Blender's dependency graph, so the same instance gets the same id in every event, re-run and machine."""
from __future__ import annotations

import hashlib

MAX_INSTANCES = 1_000_000        # declared bound on the rendered instances of one instancer (export --max-instances)

INSTANCE_ID_RULE = ("id = little-endian uint64 of sha256(b'rowbeam-instance\\0' + instancer id as 16 hex digits + "
                    "b'\\0' + persistent path)[:8] (0 -> 1); instancer = DepsgraphObjectInstance.parent (the outermost "
                    "instancing object of the scene), persistent path = DepsgraphObjectInstance.persistent_id "
                    "without trailing 2^31-1 entries, '.'-joined")


def path_text(path) -> str:
    """'.'-joined persistent path."""
    return ".".join(str(int(p)) for p in path)


def instance_id(instancer_id: int, path) -> int:
    """The stable 64-bit id of an instance (INSTANCE_ID_RULE); never 0."""
    text = b"rowbeam-instance\0" + f"{instancer_id:016x}".encode() + b"\0" + path_text(path).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") or 1
