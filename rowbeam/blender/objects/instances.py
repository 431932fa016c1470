"""Instances are objects (bpy): collection instances (nested too), geometry-nodes instances and particle instances
get rows of the object table -- a stable 64-bit id, a class, a render index -- and per-pixel identity from what
Cycles traced.

Id (rowbeam.model.instance_identity.INSTANCE_ID_RULE): from the instancer's id and the instance's persistent path.
The instancer is the scene object that creates the instance (`DepsgraphObjectInstance.parent`, the outermost one
when instances nest); the persistent path is `DepsgraphObjectInstance.persistent_id` without its unused trailing
entries: the same instance gets the same id in every event, re-run and machine, and a changed scene keeps the ids
of the instances whose instancer and path are unchanged.

Per-pixel identity (PIXEL_RULE): Cycles writes, at each traced hit, the Object Index pass (pass_index of the
instanced object; of the instancer for geometry-nodes instances) and, in the AOV `rowbeam_instance_random`, the
Object Info node's Random output, which for an instance is float32(random_id) * 2^-32 with random_id =
`DepsgraphObjectInstance.random_id` read as unsigned (measured bit-exact on Blender 5.3 Cycles). A pixel belongs
to the instance whose (pass index, random) pair it holds; pixels of the pass index with no instance's random are the
object itself when it is in the object table, else unresolved (invalid).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from rowbeam.blender.objects.object_table import (
    ID_PROPERTY,
    MAX_RENDER_INDEX,
    RENDERABLE_TYPES,
    ObjectEntry,
    classify_object,
    format_object_id,
    name_hash_id,
    parse_object_id,
)
from rowbeam.blender.objects.meshes import triangles_of
from rowbeam.model.instance_identity import MAX_INSTANCES, instance_id, path_text
from rowbeam.model.ontology import VOID_ID
from rowbeam.util.errors import RowbeamError

INSTANCE_RANDOM_AOV = "rowbeam_instance_random"
INSTANCE_CLASS_PROPERTY = "rowbeam_instance_class"     # on an instancer: the class of all its instances
UNUSED_PATH = 2**31 - 1
PIXEL_RULE = ("Cycles Object Index pass (pass_index of the instanced object; of the instancer for geometry-nodes "
              "instances) and AOV rowbeam_instance_random = Object Info Random = float32(random_id) * 2^-32 "
              "(random_id = DepsgraphObjectInstance.random_id, unsigned): a pixel is the instance whose pair it holds")


@dataclass
class InstanceSet:
    """The scene's instances: object-table rows (render indices after the objects'), each one's instancer,
    instanced object and random key; `keys` {pass-index key: (sorted float32 randoms, render indices)} resolves
    pixels; `ambiguous` lists instances whose (key, random) pair another instance shares (left unresolved)."""
    entries: list = field(default_factory=list)
    instancer: dict = field(default_factory=dict)       # render index -> instancer object name
    proto: dict = field(default_factory=dict)           # render index -> instanced object name (original)
    path: dict = field(default_factory=dict)            # render index -> persistent path tuple
    instancer_id: dict = field(default_factory=dict)    # render index -> the instancer's 64-bit id
    random: dict = field(default_factory=dict)          # render index -> float32 random
    proto_key: dict = field(default_factory=dict)       # instanced object name -> pass index it renders with
    materials: set = field(default_factory=set)         # material names instanced geometry renders with
    keys: dict = field(default_factory=dict)
    ambiguous: list = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.entries)


def random_key(random_id: int) -> np.float32:
    """Cycles' Object Info Random of an instance: float32(random_id as uint32) * 2^-32 (float32)."""
    return np.float32(np.float32(int(random_id) & 0xFFFFFFFF) * np.float32(1.0 / 0xFFFFFFFF))


def _trim(pid) -> tuple:
    path = [int(p) for p in pid]
    while path and path[-1] == UNUSED_PATH:
        path.pop()
    return tuple(path)


def _object_id(obj) -> tuple[int, str]:
    raw = obj.get(ID_PROPERTY)
    if raw is None:
        return name_hash_id(obj.name), "instance_path_name_hash_unstable"
    return parse_object_id(raw, f"object {obj.name!r}"), "instance_path"


def _visible_instancer(obj, view_layer) -> bool:
    return not obj.hide_render and obj.visible_get(view_layer=view_layer)


def collect_instances(scene, view_layer, bound: int | None = None) -> list[dict]:
    """One dict per rendered instance of the evaluated scene: instancer and instanced object names (originals),
    persistent path, random_id, world matrix (4, 4) and the instanced geometry's material names. RowbeamError (one
    line naming it) when one instancer makes more than `bound` (default MAX_INSTANCES) instances."""
    import bpy

    bound = MAX_INSTANCES if bound is None else bound
    dg = bpy.context.evaluated_depsgraph_get()
    out, per = [], {}
    for inst in dg.object_instances:
        if not inst.is_instance or not inst.show_self or inst.object.type not in RENDERABLE_TYPES:
            continue
        parent = inst.parent.original
        if parent.name not in scene.objects or not _visible_instancer(parent, view_layer):
            continue
        out.append({"instancer": parent.name, "proto": inst.object.original.name, "path": _trim(inst.persistent_id),
                    "random_id": int(inst.random_id) & 0xFFFFFFFF,
                    "matrix": np.array(inst.matrix_world, dtype=np.float64),
                    "materials": [s.material.original.name for s in inst.object.material_slots if s.material]})
        per[parent.name] = per.get(parent.name, 0) + 1
        if per[parent.name] > bound:
            raise RowbeamError(f"instancer {parent.name!r} makes more than {bound} rendered instances (the declared "
                               "bound, --max-instances); raise the bound, or realize or hide its instances")
    return _without_own_geometry(out)


def _without_own_geometry(found: list[dict]) -> list[dict]:
    """Drop what is an object's own evaluated geometry rather than an instance: Blender lists a non-mesh component
    of an object's Geometry Nodes output (a point cloud, curves) as an instance of the object itself at a persistent
    path of length 1. It stays that object (one id, its pixels resolve to it); instances the node tree makes sit
    one level deeper (a single one too)."""
    return [d for d in found if not (d["proto"] == d["instancer"] and len(d["path"]) <= 1)]


def build_instances(scene, view_layer, table: list, ontology, parents: dict, bound: int | None = None) -> InstanceSet:
    """The InstanceSet of the scene at its current frame: ids (INSTANCE_ID_RULE), classes (_instance_class),
    motion (moving_instances), render indices after the table's, in id order; RowbeamError (one line) on a
    duplicate id, an instancer with more than `bound` instances (collect_instances) or too many render indices."""
    rows, seen = [], {e.id: e.obj_name for e in table}
    now = collect_instances(scene, view_layer, bound)
    moving = moving_instances(scene, view_layer) if now else set()
    for d in now:
        instancer = scene.objects[d["instancer"]]
        iid, source = _object_id(instancer)
        oid = instance_id(iid, d["path"])
        name = f"{d['instancer']}/{path_text(d['path'])}:{d['proto']}"
        d["instancer_id"] = iid
        if oid in seen:
            raise RowbeamError(f"instance {name!r}: id {format_object_id(oid)} is also used by {seen[oid]!r}")
        seen[oid] = name
        d["motion"] = "moving" if (d["instancer"], d["path"]) in moving else "static"
        rows.append((oid, name, source, _instance_class(instancer, d["proto"], ontology, parents), d))
    last = max((e.render_index for e in table), default=0)
    if last + len(rows) > MAX_RENDER_INDEX:
        raise RowbeamError(f"scene has {last + len(rows)} objects and instances; at most {MAX_RENDER_INDEX}")
    rows.sort(key=lambda r: r[0])
    out = InstanceSet()
    for i, (oid, name, source, (cid, tag, why), d) in enumerate(rows):
        ri = last + 1 + i
        out.entries.append(ObjectEntry(name, oid, ri, cid, tag, source, d["motion"], why))
        out.instancer[ri], out.proto[ri], out.path[ri] = d["instancer"], d["proto"], d["path"]
        out.instancer_id[ri] = d["instancer_id"]
        out.random[ri] = random_key(d["random_id"])
        out.materials.update(d["materials"])
    _assign_keys(out, table)
    amb = set(out.ambiguous)
    out.entries = [replace(e, instance={
        "instancer": out.instancer[e.render_index], "object": out.proto[e.render_index],
        "persistent_path": list(out.path[e.render_index]), "instancer_id": out.instancer_id[e.render_index],
        "random": float(out.random[e.render_index]),
        "pixel_identity": "ambiguous: another instance with the same pass index has the same random; pixels "
                          "unresolved" if e.render_index in amb else "cycles_index_and_random"}) for e in out.entries]
    return out


def moving_instances(scene, view_layer) -> set:
    """(instancer, persistent path) of the instances whose world matrix differs between the scene's first, middle
    and last frame (each at subframes 0 and 0.5), or that are rendered at some of them only."""
    frame, sub = scene.frame_current, scene.frame_subframe
    first, moving = None, set()
    for f in sorted({scene.frame_start, (scene.frame_start + scene.frame_end) // 2, scene.frame_end}):
        for half in (0.0, 0.5):
            scene.frame_set(f, subframe=half)
            got = {(d["instancer"], d["path"]): d["matrix"] for d in collect_instances(scene, view_layer)}
            if first is None:
                first = got
                continue
            moving |= {k for k in set(first) | set(got)
                       if k not in first or k not in got or not np.array_equal(first[k], got[k])}
    scene.frame_set(frame, subframe=sub)
    return moving


def _instance_class(instancer, proto_name: str, ontology, parents: dict):
    """(class id, tag, source): the instancer's INSTANCE_CLASS_PROPERTY overrides; else the instanced object's
    class (the instancer's own for geometry-nodes geometry, whose instanced object is the instancer)."""
    import bpy

    tag = instancer.get(INSTANCE_CLASS_PROPERTY)
    if tag is not None:
        cid = ontology.class_of(str(tag))
        if cid == VOID_ID:
            raise RowbeamError(f"object {instancer.name!r}: {INSTANCE_CLASS_PROPERTY} {str(tag)!r} is no tag of the "
                               "ontology")
        return cid, str(tag), f"{INSTANCE_CLASS_PROPERTY} of the instancer {instancer.name!r}"
    proto = bpy.data.objects.get(proto_name)
    if proto is None or proto.name == instancer.name:       # geometry-nodes instances: the instancer's own class
        return classify_object(instancer, ontology, parents)
    cid, tag, source = classify_object(proto, ontology, parents)
    return cid, tag, f"instanced object {proto_name!r}: {source}"


def _assign_keys(out: InstanceSet, table: list) -> None:
    """Pass-index key of every instanced object (its render index when it is in the table, else a fresh index
    after every render index) and the resolution map of each key."""
    index_of = {e.obj_name: e.render_index for e in table}
    nxt = max([e.render_index for e in table] + [e.render_index for e in out.entries] + [0]) + 1
    for ri in sorted(out.proto):
        p = out.proto[ri]
        if p not in out.proto_key:
            out.proto_key[p] = index_of.get(p) or nxt
            nxt += p not in index_of
    if nxt > MAX_RENDER_INDEX:
        raise RowbeamError(f"scene needs {nxt} pass indices for objects and instances; at most {MAX_RENDER_INDEX}")
    groups: dict = {}
    for ri, p in out.proto.items():
        groups.setdefault(out.proto_key[p], []).append((out.random[ri], ri))
    for key, pairs in groups.items():
        pairs.sort()
        r = np.array([p[0] for p in pairs], dtype=np.float32)
        dup = np.zeros(len(r), bool)
        if len(r) > 1:
            same = r[1:] == r[:-1]
            dup[1:] |= same
            dup[:-1] |= same
        out.ambiguous += [ri for (_, ri), d in zip(pairs, dup, strict=True) if d]
        ris = np.array([p[1] for p in pairs], dtype=np.int64)
        out.keys[key] = (r[~dup], ris[~dup], key if key in index_of.values() else 0)


def setup_instance_passes(patch, scene, view_layer, insts: InstanceSet, render_objects: list) -> None:
    """Label-render state for instances: each instanced object's pass index (its key), the random AOV in the view
    layer and in every material the render objects and instanced geometry use, the true-normal AOV in the
    instanced geometry's materials."""
    import bpy

    from rowbeam.blender.compat import blender_compat
    from rowbeam.blender.cycles import cycles_setup as cs

    if not insts:
        return
    for name, key in insts.proto_key.items():
        patch.set(bpy.data.objects[name], "pass_index", key)
    if INSTANCE_RANDOM_AOV not in view_layer.aovs:
        aov = view_layer.aovs.add()
        aov.name, aov.type = INSTANCE_RANDOM_AOV, "VALUE"
        patch.on_restore(lambda: view_layer.aovs.remove(view_layer.aovs[INSTANCE_RANDOM_AOV]))
    own = {s.material.name for o in render_objects for s in o.material_slots if s.material}
    default = _default_surface(patch)
    names = sorted(own | insts.materials | {default.name})
    for name in names:
        mat = bpy.data.materials.get(name)
        if mat is None:
            continue
        blender_compat.ensure_node_tree(patch, mat)
        _add_aov(patch, mat.node_tree, "ShaderNodeObjectInfo", "Random", INSTANCE_RANDOM_AOV, "Value")
        if name not in own:
            _add_aov(patch, mat.node_tree, "ShaderNodeNewGeometry", "True Normal", cs.TRUE_NORMAL_AOV, "Color")


def _default_surface(patch):
    """A plain material, given (until the patch is restored) to every mesh without one: instanced geometry of a
    mesh without material would otherwise render with Cycles' built-in surface, which writes no AOV."""
    import bpy

    from rowbeam.blender.compat import blender_compat

    default = blender_compat.new_material("rowbeam_instance_surface")
    patch.on_restore(lambda: bpy.data.materials.remove(default))
    for me in bpy.data.meshes:
        if me.users and len(me.materials) == 0:
            me.materials.append(default)
            patch.on_restore(lambda me=me: me.materials.pop(index=len(me.materials) - 1))
    return default


def _add_aov(patch, tree, node_type: str, output: str, aov_name: str, socket: str) -> None:
    src = tree.nodes.new(node_type)
    out = tree.nodes.new("ShaderNodeOutputAOV")
    out.aov_name = aov_name
    tree.links.new(src.outputs[output], out.inputs[socket])
    patch.on_restore(lambda: (tree.nodes.remove(out), tree.nodes.remove(src)))


def resolve_index(index_pass, random_pass, insts: InstanceSet) -> np.ndarray:
    """(H, W) float64 render indices: Object Index pixels of an instanced object's key become the render index of
    the instance whose random they hold (PIXEL_RULE); those matching none become the key's own object, or 0
    (unresolved) when that object is not in the table."""
    idx = np.rint(np.asarray(index_pass)).astype(np.int64)
    out = idx.astype(np.float64)
    if random_pass is None:
        raise RuntimeError(f"the label render has no {INSTANCE_RANDOM_AOV} pass")
    rnd = np.asarray(random_pass, dtype=np.float32)
    for key, (randoms, ris, default) in insts.keys.items():
        sel = idx == key
        if not sel.any():
            continue
        r = rnd[sel]
        j = np.clip(np.searchsorted(randoms, r), 0, max(len(randoms) - 1, 0))
        hit = (randoms[j] == r) if len(randoms) else np.zeros(r.shape, bool)
        out[sel] = np.where(hit, ris[j] if len(ris) else 0, default)
    return out


def instance_lookup(insts: InstanceSet):
    """A function (hit object, hit matrix (4, 4)) -> render index of the instance a scene.ray_cast hit (object and
    matrix as ray_cast returns them) belongs to, or None; built from the evaluated scene now (its current time)."""
    import bpy

    want = {(insts.instancer[ri], insts.path[ri]): ri for ri in insts.instancer}
    by_object: dict = {}
    for inst in bpy.context.evaluated_depsgraph_get().object_instances:
        if inst.is_instance and inst.show_self:
            ri = want.get((inst.parent.original.name, _trim(inst.persistent_id)))
            if ri is not None:
                by_object.setdefault(inst.object.original.name, []).append(
                    (np.array(inst.matrix_world, dtype=np.float64), ri))

    def lookup(obj, matrix):
        M = np.array(matrix, dtype=np.float64)
        for Mi, ri in by_object.get(obj.original.name if obj is not None else None, ()):
            if np.allclose(Mi, M, rtol=0.0, atol=1e-6):
                return ri
        return None
    return lookup


def instance_geometry(scene, view_layer, insts: InstanceSet) -> dict:
    """{render index: (world matrix (4, 4), local vertices (V, 3), triangles (F, 3))} of the instances rendered in
    the evaluated scene now (its current time); an instance without mesh geometry is left out. Meshes are read
    once per instanced geometry."""
    import bpy

    want = {(insts.instancer[ri], insts.path[ri]): ri for ri in insts.instancer}
    dg = bpy.context.evaluated_depsgraph_get()
    meshes, out = {}, {}
    for inst in dg.object_instances:
        if not inst.is_instance or not inst.show_self:
            continue
        ri = want.get((inst.parent.original.name, _trim(inst.persistent_id)))
        if ri is None:
            continue
        key = (inst.object.original.name, inst.object.data.as_pointer() if inst.object.data else 0)
        if key not in meshes:
            meshes[key] = triangles_of(inst.object)
        if meshes[key] is not None:
            out[ri] = (np.array(inst.matrix_world, dtype=np.float64), *meshes[key])
    return out


FOLLOW_SAMPLES = 5                # times (first .. last, evenly) at which an instance is compared with its instancer
INSTANCE_MOTION_RULE = (
    "world <- instance at time t: M_instancer(t) @ M_instancer(t_s)^-1 @ M_instance(t_s) when the instance's matrix "
    f"relative to its instancer is the same at {FOLLOW_SAMPLES} times spread over the rows (atol 1e-6; the instancer "
    "alone moves, evaluated like any object); else the instance's own matrix after a frame_set at every time")


def _instances_now(want: dict) -> dict:
    """{render index: world matrix (4, 4)} of the wanted instances ({(instancer, path): render index}) in the
    evaluated scene now."""
    import bpy

    out = {}
    for inst in bpy.context.evaluated_depsgraph_get().object_instances:
        if inst.is_instance and inst.show_self:
            ri = want.get((inst.parent.original.name, _trim(inst.persistent_id)))
            if ri is not None:
                out[ri] = np.array(inst.matrix_world, dtype=np.float64)
    return out


def instance_matrices(scene, clock, insts: InstanceSet, indices: list, times_ns: list) -> np.ndarray:
    """(len(indices), len(times_ns), 4, 4) float64 world matrices (scale kept) of the instances with these render
    indices at each time (INSTANCE_MOTION_RULE); NaN where an instance is not rendered at a time. Leaves the
    scene's time where it was."""
    from rowbeam.blender.compat.scene_clock import objects_world_matrices, set_time

    frame, sub = scene.frame_current, scene.frame_subframe
    want = {(insts.instancer[ri], insts.path[ri]): ri for ri in indices}
    parents = sorted({insts.instancer[ri] for ri in indices})
    P = objects_world_matrices(scene, clock, [scene.objects[n] for n in parents], times_ns)
    slot = {n: i for i, n in enumerate(parents)}
    out = np.full((len(indices), len(times_ns), 4, 4), np.nan)
    pos = {ri: i for i, ri in enumerate(indices)}
    picks = np.unique(np.linspace(0, len(times_ns) - 1, FOLLOW_SAMPLES).round().astype(int)) if times_ns else []
    rel: dict = {}
    for s in picks:
        set_time(scene, clock, times_ns[s])
        now = _instances_now(want)
        for ri in indices:
            p = P[slot[insts.instancer[ri]], s]
            rel.setdefault(ri, []).append(np.linalg.inv(p) @ now[ri] if ri in now else None)
    follow = [ri for ri in indices if all(r is not None and np.allclose(r, rel[ri][0], rtol=0, atol=1e-6)
                                          for r in rel[ri])]
    for i, ri in enumerate(indices):
        if ri in follow:
            out[i] = np.einsum("tij,jk->tik", P[slot[insts.instancer[ri]]], rel[ri][0])
    follow = set(follow)
    rest = [ri for ri in indices if ri not in follow]
    if rest:
        sub_want = {k: v for k, v in want.items() if v in rest}
        for j, t in enumerate(times_ns):
            set_time(scene, clock, t)
            for ri, M in _instances_now(sub_want).items():
                out[pos[ri], j] = M
    scene.frame_set(frame, subframe=sub)
    return out


def shown_instances(insts: InstanceSet, instance_id) -> list:
    """The object-table rows of the instances an event shows: whose render index is in its instance_id payload
    (pixels, beams, chirps; None: none). An event's manifest lists these only; the others carry no per-instance
    record in it (a 10^4-instance scatter lists the few hundred a camera sees)."""
    if not insts or instance_id is None:
        return []
    seen = set(np.unique(np.asarray(instance_id)).tolist())
    return [e for e in insts.entries if e.render_index in seen]
