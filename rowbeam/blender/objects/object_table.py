"""Stable object identity: 64-bit ids stored on objects, render indices, semantic classes (bpy).

An object's id lives in its custom property `rowbeam_id` as a decimal or 0x-hex string
(Blender integer properties are 32-bit). Its class tag lives in `rowbeam_class`; without one (or with a tag
the ontology lacks) the ontology's class rules (rowbeam.model.class_rules) read the tags the scene already
carries (custom properties, collections, names).
The render index (1..N, written into Cycles' Object Index pass) is assigned per export in a
deterministic order (by id) and mapped back to the id in the manifest's object table.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from rowbeam.util.errors import RowbeamError
from rowbeam.model.class_rules import ObjectTags, classify
from rowbeam.model.ontology import VOID_ID, Ontology

ID_PROPERTY = "rowbeam_id"
CLASS_PROPERTY = "rowbeam_class"
MAX_ID = 2**64 - 1
MAX_RENDER_INDEX = 2**24 - 1        # Object Index is a float32 pass: integers exact below 2^24
RENDERABLE_TYPES = {"MESH", "CURVE", "SURFACE", "META", "FONT", "CURVES", "POINTCLOUD", "VOLUME"}


def parse_object_id(text, where: str) -> int:
    try:
        value = int(str(text).strip(), 0)
    except ValueError:
        raise RowbeamError(f"{where}: {ID_PROPERTY} {text!r} is not an integer (decimal or 0x-hex)") from None
    if not 1 <= value <= MAX_ID:
        raise RowbeamError(f"{where}: {ID_PROPERTY} {text!r} is outside 1..2^64-1")
    return value


def format_object_id(value: int) -> str:
    return f"0x{value:016x}"


def name_hash_id(name: str) -> int:
    """Fallback id from the object name (unstable under renaming; declared as such)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little") or 1


@dataclass(frozen=True)
class ObjectEntry:
    obj_name: str
    id: int
    render_index: int
    class_id: int
    class_tag: str | None
    id_source: str
    motion: str = "static"
    class_source: str = ""
    instance: dict | None = None        # an instance's instancer, instanced object, path (objects/instances.py)

    def to_json(self) -> dict:
        return {"id": self.id, "render_index": self.render_index, "class_id": self.class_id,
                "class_tag": self.class_tag, "name": self.obj_name, "id_source": self.id_source,
                "motion": self.motion, **({"class_source": self.class_source} if self.class_source else {}),
                **({"instance": self.instance} if self.instance else {})}


def collection_parents(scene) -> dict:
    """{collection name: enclosing collection name} below the scene's master collection."""
    parents = {}

    def walk(collection, parent_name):
        for child in collection.children:
            if child.name not in parents:
                parents[child.name] = parent_name
                walk(child, child.name)

    walk(scene.collection, None)
    return parents


def object_tags(obj, parents: dict) -> ObjectTags:
    """ObjectTags of an object: its scalar custom properties and its collections, innermost first."""
    props = {}
    for key in obj.keys():
        value = obj[key]
        if isinstance(value, (int, float, str)):
            props[key] = value
    import bpy

    names = []
    for c in obj.users_collection:
        name = c.name if c.name in bpy.data.collections else None      # not a scene's master collection
        while name is not None and name not in names:
            names.append(name)
            name = parents.get(name)
    return ObjectTags(obj.name, props, tuple(names))


def classify_object(obj, ontology: Ontology, parents: dict) -> tuple[int, str | None, str]:
    """(class id, class tag, class source) of an object: its rowbeam_class when the ontology knows it, else the
    ontology's class rules, else VOID_ID with why."""
    tag = obj.get(CLASS_PROPERTY)
    if tag is not None and ontology.class_of(str(tag)) != VOID_ID:
        return ontology.class_of(str(tag)), str(tag), CLASS_PROPERTY
    cid, source = classify(ontology.class_rules, object_tags(obj, parents), ontology.resolve, ontology.class_ids)
    if cid is not None:
        return cid, ontology.class_name(cid), source
    why = [f"{CLASS_PROPERTY} {str(tag)!r} is no tag of the ontology" if tag is not None else f"no {CLASS_PROPERTY}"]
    why.append(source or ("no class rule matched" if ontology.class_rules else "the ontology has no class_rules"))
    return VOID_ID, (str(tag) if tag is not None else None), "unclassified: " + "; ".join(why)


def unclassified_summary(table) -> str | None:
    """One warning line naming the objects without a class (void), or None when every object has one."""
    void = [e for e in table if e.class_id == VOID_ID]
    if not void:
        return None
    names = ", ".join(repr(e.obj_name) for e in void[:5]) + (", ..." if len(void) > 5 else "")
    return (f"{len(void)} of {len(table)} object(s) have no class (void; objects[].class_source says why): {names}; "
            f"tag them ({CLASS_PROPERTY}) or add class_rules to the ontology (docs/objects.md)")


def renderable_objects(scene, view_layer) -> list:
    return [o for o in scene.objects
            if o.type in RENDERABLE_TYPES and not o.hide_render and o.visible_get(view_layer=view_layer)]


def _mesh_signature(obj, depsgraph) -> tuple:
    """(vertex count, triangle count, sha256 of the float32 local vertex coordinates) of the evaluated object's
    mesh: any moved vertex changes it."""
    ev = obj.evaluated_get(depsgraph)
    mesh = ev.to_mesh()
    try:
        mesh.calc_loop_triangles()
        co = np.empty(3 * len(mesh.vertices), dtype=np.float32)
        mesh.vertices.foreach_get("co", co)
        return len(mesh.vertices), len(mesh.loop_triangles), hashlib.sha256(co.tobytes()).hexdigest()
    finally:
        ev.to_mesh_clear()


def _deform_modified(obj, scene) -> bool:
    """Blender's is_deform_modified without Geometry Nodes: Blender counts every Geometry Nodes modifier as
    deforming, static or not; such objects are decided by their evaluated mesh over the range instead."""
    if not obj.is_deform_modified(scene, "RENDER"):
        return False
    enabled = [m for m in obj.modifiers if m.show_render]
    shape_keys = getattr(getattr(obj, "data", None), "shape_keys", None)
    animated_keys = shape_keys is not None and shape_keys.animation_data is not None
    return animated_keys or not enabled or any(m.type != "NODES" for m in enabled)


def moving_objects(scene, objects) -> set[str]:
    """Names of objects that move or deform: matrix_world differs between any two frames of the
    scene's range (every frame and half frame), a modifier other than Geometry Nodes deforms them, or the
    evaluated mesh of an object with modifiers changes (e.g. a Build or a time-dependent Geometry Nodes
    modifier; a static Geometry Nodes object is static).

    matrix_world of plain objects (`pose_eval.plain_reason`) is evaluated directly at every sample time,
    bit-identical to frame_set (none at all for `certainly_static` ones); frame_set runs only for the rest
    and for mesh signatures."""
    import bpy

    from rowbeam.blender.compat import pose_eval, scene_clock

    moving = {o.name for o in objects if _deform_modified(o, scene)}
    direct = not scene_clock.FORCE_FRAME_SET and scene.render.frame_map_old == scene.render.frame_map_new
    plain = [o for o in objects if direct and o.name not in moving and pose_eval.plain_reason([o]) is None]
    plain_names = {o.name for o in plain}
    sampled = [o for o in objects if o.name not in moving and o.name not in plain_names]
    meshed = [o for o in objects if o.name not in moving and o.modifiers]
    samples = [(f, half) for f in range(scene.frame_start, scene.frame_end + 1) for half in (0.0, 0.5)]
    animated = [o for o in plain if not pose_eval.certainly_static(o)]
    if animated:
        frames = [scene.frame_current] + [f for f, _ in samples]
        subframes = [scene.frame_subframe] + [h for _, h in samples]
        mats = pose_eval.world_matrices_direct(animated, frames, subframes)
        moving |= {o.name for o, m in zip(animated, mats, strict=True) if not (m[1:] == m[0]).all()}
    if not sampled and not meshed:
        return moving
    frame, sub = scene.frame_current, scene.frame_subframe
    first = {o.name: [list(r) for r in o.matrix_world] for o in sampled}
    first_mesh = {}
    for f, half in samples:
        scene.frame_set(f, subframe=half)
        moving |= {o.name for o in sampled if o.name not in moving and
                   [list(r) for r in o.matrix_world] != first[o.name]}
        if any(o.name not in moving for o in meshed):
            depsgraph = bpy.context.evaluated_depsgraph_get()
            for o in meshed:
                if o.name not in moving and first_mesh.setdefault(o.name, _mesh_signature(o, depsgraph)) \
                        != _mesh_signature(o, depsgraph):
                    moving.add(o.name)
    scene.frame_set(frame, subframe=sub)
    return moving


def build_object_table(scene, view_layer, ontology: Ontology) -> list[ObjectEntry]:
    """Object table for every renderable object, render indices 1..N in id order."""
    rows = []
    seen = {}
    parents = collection_parents(scene)
    for o in renderable_objects(scene, view_layer):
        raw = o.get(ID_PROPERTY)
        if raw is None:
            oid, source = name_hash_id(o.name), "name_hash_unstable"
        else:
            oid, source = parse_object_id(raw, f"object {o.name!r}"), "object_property"
        if oid in seen:
            raise RowbeamError(f"object {o.name!r}: {ID_PROPERTY} {format_object_id(oid)} is also used by "
                               f"{seen[oid]!r}; ids must be unique (a duplicated object needs a new id)")
        seen[oid] = o.name
        rows.append((oid, o.name, source, classify_object(o, ontology, parents)))
    if len(rows) > MAX_RENDER_INDEX:
        raise RowbeamError(f"scene has {len(rows)} renderable objects; at most {MAX_RENDER_INDEX} are supported")
    rows.sort()
    moving = moving_objects(scene, [scene.objects[name] for _, name, _, _ in rows])
    return [ObjectEntry(name, oid, i + 1, cid, tag, source, "moving" if name in moving else "static", why)
            for i, (oid, name, source, (cid, tag, why)) in enumerate(rows)]
