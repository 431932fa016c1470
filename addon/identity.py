"""Stable object identity and semantic tags, kept on the objects themselves (bpy).

Each renderable object carries `rowbeam_id` (a random 64-bit id, 0x-hex, assigned once) and
optionally `rowbeam_class` (an ontology tag). Renaming keeps the id; a duplicate copies the custom
property, so after every change the handler gives the copy a fresh id: the original keeps its id
(the object already registered with it this session), or, for duplicates found in a loaded file,
the object whose name sorts first.
"""
from __future__ import annotations

import secrets

import bpy
from bpy.app.handlers import persistent

from rowbeam.blender.objects.object_table import (
    CLASS_PROPERTY,
    ID_PROPERTY,
    RENDERABLE_TYPES,
    format_object_id,
    parse_object_id,
)

_owner_of_id: dict[int, int] = {}          # id -> session_uid of the object that holds it
suspended = False                          # set while an export runs: its frame changes add no objects


def new_object_id() -> int:
    return secrets.randbits(64) or 1


def object_id(obj) -> int | None:
    raw = obj.get(ID_PROPERTY)
    if raw is None:
        return None
    try:
        return parse_object_id(raw, obj.name)
    except Exception:
        return None


def assign_id(obj) -> int:
    oid = new_object_id()
    obj[ID_PROPERTY] = format_object_id(oid)
    _owner_of_id[oid] = obj.session_uid
    return oid


def reconcile_ids(scene, auto_assign: bool) -> int:
    """Give duplicated (and, when auto_assign, missing) ids fresh values; returns how many changed."""
    alive = {o.session_uid for o in bpy.data.objects}
    changed = 0
    for obj in sorted(scene.objects, key=lambda o: o.name):
        if obj.type not in RENDERABLE_TYPES:
            continue
        oid = object_id(obj)
        if oid is None:
            if auto_assign and obj.library is None:
                assign_id(obj)
                changed += 1
            continue
        owner = _owner_of_id.get(oid)
        if owner is None or owner not in alive:
            _owner_of_id[oid] = obj.session_uid
        elif owner != obj.session_uid and obj.library is None:
            assign_id(obj)                       # a copy of another object: new identity
            changed += 1
    return changed


@persistent
def on_depsgraph_update(scene, depsgraph):
    if suspended or not hasattr(scene, "rowbeam") or not depsgraph.id_type_updated("OBJECT"):
        return
    reconcile_ids(scene, scene.rowbeam.auto_ids)


@persistent
def on_load(_filepath):
    _owner_of_id.clear()
    for scene in bpy.data.scenes:
        if hasattr(scene, "rowbeam"):
            reconcile_ids(scene, auto_assign=False)


def set_class(objects, tag: str) -> None:
    for obj in objects:
        obj[CLASS_PROPERTY] = tag


HANDLERS = ((bpy.app.handlers.depsgraph_update_post, on_depsgraph_update), (bpy.app.handlers.load_post, on_load))
