"""Label-render materials that follow a declared surface policy (rowbeam.model.surface_policy) (bpy).

Cycles traces a label ray with one sample and no bounces; a surface that is partly transparent is then sampled
at random (the ray passes it or ends there without a label: holes), a volume ends the ray at a random scattering
point, and the view layer's Alpha Threshold decides which layer gets the data passes. Here every material the
label render uses is patched (undone with the ScenePatch; the user's file is never changed) so that a label ray
meets only opaque or fully transparent surfaces, decided per shading point by the policy:
- Principled BSDF Alpha a -> (a >= t); a Mix Shader with a Transparent BSDF input: its opacity -> (opacity >= t);
- transmission "see_through": Glass / Refraction BSDF (and Principled BSDF with Transmission Weight >=
  TRANSMISSION_WEIGHT_SURFACE) become a Transparent BSDF; "surface": left as they are (opaque to a label ray);
- volumes: the Volume output is unlinked; "ignore" gives a volume-only material a Transparent BSDF surface,
  "surface" an opaque one;
- the true-normal AOV is written only where the point is opaque (an AOV is written on every layer a ray passes);
- node groups whose shader output feeds the surface are entered (recursively): the BSDFs and mixes inside are
  rewired the same way and the group's opacity and decision leave it through two extra group outputs;
- holdout "surface": holdout objects and collections are rendered as ordinary objects, Holdout shaders become a
  Diffuse BSDF; such points are decided (object property HOLDOUT_PROPERTY read by an Attribute node);
- backface "cull_if_material_culls": a material with Backface Culling on is transparent on back faces (decided);
- the `rowbeam_policy` AOV is 1 on every point transparency or the policy decided (opacity < 1, transmission,
  volume, holdout, culled back face), so a pixel whose value is > 0 met one (the camera's `policy_mask`).
Limits (declared in docs/conventions.md): an OSL Script node's output is not seen; `unseen_materials` names the
materials that have one (the exporter warns and lists them in the manifest).
"""
from __future__ import annotations

from rowbeam.model.surface_policy import LABEL_TRANSPARENT_BOUNCES, TRANSMISSION_WEIGHT_SURFACE, SurfacePolicy

POLICY_AOV = "rowbeam_policy"
GLASS_NODES = ("ShaderNodeBsdfGlass", "ShaderNodeBsdfRefraction")
HOLDOUT_PROPERTY = "rowbeam_holdout"          # 1.0 on objects the label render shows instead of holding out
HOLDOUT_STOP_PROPERTY = "rowbeam_holdout_stop"  # 1.0 on holdouts that end a layer peel (holdout "no_label")
GROUP_OUTPUTS = ("rowbeam_opacity", "rowbeam_decided")


class _Tree:
    """Node-tree edits recorded in a ScenePatch (new nodes removed, changed links and values restored)."""

    def __init__(self, patch, tree, groups: dict | None = None, continuous: bool = False):
        self.patch, self.tree = patch, tree
        self.groups = {} if groups is None else groups       # group tree name -> (opacity, decided) of its output
        self.continuous = continuous     # layer peel: opacities stay continuous, nothing is rewired to binary

    def node(self, kind: str, **values):
        n = self.tree.nodes.new(kind)
        for k, v in values.items():
            setattr(n, k, v)
        self.patch.on_restore(lambda: self.tree.nodes.remove(n))
        return n

    def link(self, out, inp) -> None:
        old = [lk.from_socket for lk in inp.links]
        self.tree.links.new(out, inp)

        def undo():
            for lk in list(inp.links):
                self.tree.links.remove(lk)
            for s in old:
                self.tree.links.new(s, inp)
        self.patch.on_restore(undo)

    def unlink(self, inp) -> None:
        old = [lk.from_socket for lk in inp.links]
        for lk in list(inp.links):
            self.tree.links.remove(lk)
        self.patch.on_restore(lambda: [self.tree.links.new(s, inp) for s in old])

    def math(self, op: str, a, b):
        """Math node op(a, b); a and b are sockets or numbers. Returns the output socket."""
        n = self.node("ShaderNodeMath", operation=op)
        for i, x in enumerate((a, b)):
            if isinstance(x, (int, float)):
                n.inputs[i].default_value = x
            else:
                self.tree.links.new(x, n.inputs[i])
        return n.outputs[0]


def _source(inp):
    """The socket feeding `inp`, or its constant value."""
    return inp.links[0].from_socket if inp.is_linked else float(inp.default_value)


def _step(t: _Tree, value, threshold: float):
    """1 where value >= threshold else 0 (a number when value is one)."""
    if isinstance(value, float):
        return 1.0 if value >= threshold else 0.0
    return t.math("SUBTRACT", 1.0, t.math("LESS_THAN", value, threshold))


def _not_opaque(t: _Tree, value):
    """1 where the opacity `value` < 1 (a ray may pass: transparency decides) else 0."""
    if isinstance(value, float):
        return 1.0 if value < 1.0 else 0.0
    return t.math("LESS_THAN", value, 1.0)


def _times(t: _Tree, a, b):
    if isinstance(a, float) and isinstance(b, float):
        return a * b
    if isinstance(a, float):
        a, b = b, a
    return a if b == 1.0 else t.math("MULTIPLY", a, b)


def _maximum(t: _Tree, a, b):
    if isinstance(a, float) and isinstance(b, float):
        return max(a, b)
    if isinstance(a, float):
        a, b = b, a
    return a if b == 0.0 else t.math("MAXIMUM", a, b)


def _upstream(output_socket) -> list:
    """Nodes reachable upstream of an input socket (this tree only, node groups not entered)."""
    seen, stack = [], [lk.from_node for lk in output_socket.links]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.append(n)
        stack.extend(lk.from_node for s in n.inputs for lk in s.links)
    return seen


def _transparent_input(mix) -> int | None:
    """Index (1 or 2) of a Mix Shader input fed directly by a Transparent BSDF, else None."""
    for i in (1, 2):
        s = mix.inputs[i]
        if s.is_linked and s.links[0].from_node.bl_idname == "ShaderNodeBsdfTransparent":
            return i
    return None


def _see_through(t: _Tree, node, kind: str = "ShaderNodeBsdfTransparent") -> None:
    """Feed everything `node`'s shader output fed from a new `kind` shader (a Transparent BSDF) instead."""
    clear = t.node(kind)
    for lk in list(node.outputs[0].links):
        t.link(clear.outputs[0], lk.to_socket)


def _principled(t: _Tree, node, policy: SurfacePolicy):
    """(opacity, decided) of a Principled BSDF, its Alpha rewired to the binary opacity."""
    alpha = _source(node.inputs["Alpha"])
    weight = node.inputs.get("Transmission Weight")
    glass = weight is not None and not weight.is_linked and weight.default_value >= TRANSMISSION_WEIGHT_SURFACE
    if glass and policy.transmission == "see_through":
        _see_through(t, node)
        return 0.0, 1.0
    if t.continuous:
        return alpha, 1.0 if glass else 0.0
    opaque, decided = _step(t, alpha, policy.alpha_threshold), _not_opaque(t, alpha)
    if isinstance(opaque, float):
        if opaque != alpha:
            t.patch.set(node.inputs["Alpha"], "default_value", opaque)
    else:
        t.link(opaque, node.inputs["Alpha"])
    return opaque, _maximum(t, decided, 1.0 if glass else 0.0)


def _mix(t: _Tree, node, clear: int, policy: SurfacePolicy):
    """(opacity, decided) of a Mix Shader with a Transparent BSDF input, its factor rewired to binary opacity."""
    fac = _source(node.inputs[0])
    opacity = fac if clear == 1 else (1.0 - fac if isinstance(fac, float) else t.math("SUBTRACT", 1.0, fac))
    if t.continuous:
        return opacity, 0.0
    opaque, decided = _step(t, opacity, policy.alpha_threshold), _not_opaque(t, opacity)
    new_fac = opaque if clear == 1 else (1.0 - opaque if isinstance(opaque, float) else t.math("SUBTRACT", 1.0, opaque))
    if isinstance(new_fac, float):
        if new_fac != fac:
            t.patch.set(node.inputs[0], "default_value", new_fac)
    else:
        t.link(new_fac, node.inputs[0])
    return opaque, decided


def _surface(t: _Tree, surface_input, policy: SurfacePolicy):
    """(opacity, decided) of the shader feeding the material output's Surface, rewired per the policy."""
    opacity, decided = 1.0, 0.0
    for node in _upstream(surface_input):
        kind = node.bl_idname
        if kind == "ShaderNodeBsdfPrincipled":
            o, d = _principled(t, node, policy)
        elif kind == "ShaderNodeMixShader" and _transparent_input(node):
            o, d = _mix(t, node, _transparent_input(node), policy)
        elif kind in GLASS_NODES:
            if policy.transmission == "see_through":
                _see_through(t, node)
            o, d = (0.0 if policy.transmission == "see_through" else 1.0), 1.0
        elif kind == "ShaderNodeHoldout" and policy.holdout == "surface":
            _see_through(t, node, "ShaderNodeBsdfDiffuse")
            o, d = 1.0, 1.0
        elif kind == "ShaderNodeGroup" and node.node_tree is not None and _shader_output(node) is not None:
            o, d = _group(t, node, policy)
        else:
            continue
        opacity, decided = _times(t, opacity, o), _maximum(t, decided, d)
    if surface_input.is_linked and surface_input.links[0].from_node.bl_idname == "ShaderNodeBsdfTransparent":
        opacity, decided = 0.0, 1.0
    return opacity, decided


def _shader_output(group_node):
    """The first linked shader output socket of a group node, or None."""
    return next((s for s in group_node.outputs if s.type == "SHADER" and s.is_linked), None)


def _group(t: _Tree, node, policy: SurfacePolicy):
    """(opacity, decided) of a node group's shader output: the group's own tree is patched once (shared by every
    user) and a socket value leaves it through the extra outputs GROUP_OUTPUTS."""
    tree = node.node_tree
    if tree.name not in t.groups:
        inner = _Tree(t.patch, tree, t.groups, t.continuous)
        out = next((n for n in tree.nodes if n.bl_idname == "NodeGroupOutput" and n.is_active_output), None)
        target = _by_id(out.inputs, _shader_output(node).identifier) if out is not None else None
        found = _surface(inner, target, policy) if target is not None else (1.0, 0.0)
        t.groups[tree.name] = tuple(v if isinstance(v, float) else _expose(inner, out, v, name)
                                    for v, name in zip(found, GROUP_OUTPUTS, strict=True))
    return tuple(v if isinstance(v, float) else _by_id(node.outputs, v) for v in t.groups[tree.name])


def _by_id(sockets, identifier: str):
    return next((s for s in sockets if s.identifier == identifier), None)


def _expose(t: _Tree, out, socket, name: str) -> str:
    """Add a float output `name` to the group of `t` fed by `socket` (removed on restore); returns its identifier."""
    item = t.tree.interface.new_socket(name, in_out="OUTPUT", socket_type="NodeSocketFloat")
    t.patch.on_restore(lambda: t.tree.interface.remove(item))
    t.tree.links.new(socket, _by_id(out.inputs, item.identifier))
    return item.identifier


def _cull_backfaces(t: _Tree, surface_input, opacity, decided):
    """Make the surface transparent on back faces; returns (opacity, decided) with back faces passed and decided."""
    back = t.node("ShaderNodeNewGeometry").outputs["Backfacing"]
    if surface_input.is_linked:
        mix, clear = t.node("ShaderNodeMixShader"), t.node("ShaderNodeBsdfTransparent")
        t.tree.links.new(back, mix.inputs[0])
        t.tree.links.new(surface_input.links[0].from_socket, mix.inputs[1])
        t.tree.links.new(clear.outputs[0], mix.inputs[2])
        t.link(mix.outputs[0], surface_input)
    front = t.math("SUBTRACT", 1.0, back)
    return _times(t, opacity, front), _maximum(t, decided, back)


def _holdout_decided(t: _Tree):
    """1 on objects whose holdout the policy turned off (object property HOLDOUT_PROPERTY), else 0."""
    attr = t.node("ShaderNodeAttribute", attribute_type="OBJECT", attribute_name=HOLDOUT_PROPERTY)
    return attr.outputs["Fac"]


def _volume(t: _Tree, out, policy: SurfacePolicy):
    """Unlink the Volume output; a volume-only material gets a transparent ("ignore") or opaque surface.
    Returns (opacity or None when the surface decides, decided)."""
    if not out.inputs["Volume"].is_linked:
        return None, 0.0
    t.unlink(out.inputs["Volume"])
    if out.inputs["Surface"].is_linked:
        return None, 1.0
    shader = t.node("ShaderNodeBsdfTransparent" if policy.volumes == "ignore" else "ShaderNodeBsdfDiffuse")
    t.link(shader.outputs[0], out.inputs["Surface"])
    return (0.0 if policy.volumes == "ignore" else 1.0), 1.0


def _gate_aov(t: _Tree, aov_name: str, opacity) -> None:
    """Scale the colour of the AOV `aov_name` by the binary opacity (written only where the ray stops)."""
    if opacity == 1.0:
        return
    for n in [n for n in t.tree.nodes if n.bl_idname == "ShaderNodeOutputAOV" and n.aov_name == aov_name]:
        src = _source(n.inputs["Color"]) if n.inputs["Color"].is_linked else None
        if src is None:
            continue
        scale = t.node("ShaderNodeVectorMath", operation="SCALE")
        t.tree.links.new(src, scale.inputs[0])
        if isinstance(opacity, float):
            scale.inputs["Scale"].default_value = opacity
        else:
            t.tree.links.new(opacity, scale.inputs["Scale"])
        t.link(scale.outputs[0], n.inputs["Color"])


def patch_material(patch, mat, policy: SurfacePolicy, normal_aov: str, groups: dict | None = None,
                   holdout: bool = False) -> bool:
    """Apply the policy to one material (node tree already rendered by Cycles); True when it decided a point.
    groups: node groups already patched in this label render (shared between materials); holdout: an object
    using the material had its holdout turned off by the policy."""
    tree = mat.node_tree
    out = tree.get_output_node("CYCLES") if tree else None
    if out is None:
        return False
    t = _Tree(patch, tree, groups)
    vol_opacity, vol_decided = _volume(t, out, policy)
    opacity, decided = _surface(t, out.inputs["Surface"], policy)
    if vol_opacity is not None:
        opacity = vol_opacity
    decided = _maximum(t, decided, vol_decided)
    if policy.backface == "cull_if_material_culls" and mat.use_backface_culling:
        opacity, decided = _cull_backfaces(t, out.inputs["Surface"], opacity, decided)
    if holdout:
        decided = _maximum(t, decided, _holdout_decided(t))
    _gate_aov(t, normal_aov, opacity)
    if decided == 0.0:
        return False
    aov = t.node("ShaderNodeOutputAOV", aov_name=POLICY_AOV)
    if isinstance(decided, float):
        aov.inputs["Value"].default_value = decided
    else:
        tree.links.new(decided, aov.inputs["Value"])
    return True


def apply_surface_policy(patch, scene, view_layer, objects, policy: SurfacePolicy, normal_aov: str) -> int:
    """Label-render state for `policy` on the rendered `objects`: patched materials, holdouts, the view layer's
    alpha threshold, enough transparent bounces, the policy AOV (only when a material decided something).
    Returns how many materials decided."""
    patch.set(view_layer, "pass_alpha_threshold", policy.alpha_threshold)
    patch.set(scene.cycles, "transparent_max_bounces", LABEL_TRANSPARENT_BOUNCES)
    shown = _show_holdouts(patch, view_layer, objects) if policy.holdout == "surface" else set()
    groups = {}
    decided = sum(patch_material(patch, m, policy, normal_aov, groups, m.name in _materials_of(shown))
                  for m in label_materials(objects))
    if decided and POLICY_AOV not in view_layer.aovs:
        aov = view_layer.aovs.add()
        aov.name, aov.type = POLICY_AOV, "VALUE"
        patch.on_restore(lambda: view_layer.aovs.remove(view_layer.aovs[POLICY_AOV]))
    return decided


def peel_material(patch, mat, policy: SurfacePolicy, normal_aov: str, layer: int, groups: dict) -> None:
    """Layer-peel state of one material: the label ray passes the first `layer` surface points it crosses (Light
    Path Transparent Depth < layer: a Transparent BSDF) and stops at the next one (a Diffuse BSDF); the POLICY_AOV
    holds that point's continuous opacity under the policy (alpha, Mix Shader share; glass 1 or 0 by
    `transmission`, a volume-only boundary 0 or 1 by `volumes`; a culled back face 0). Under holdout "no_label" a
    held-out object (HOLDOUT_STOP_PROPERTY) or a material with a Holdout shader always stops the ray without data:
    the stack ends there, as the label does."""
    tree = mat.node_tree
    out = tree.get_output_node("CYCLES") if tree else None
    if out is None:
        return
    t = _Tree(patch, tree, groups, continuous=True)
    if policy.holdout == "no_label" and any(n.bl_idname == "ShaderNodeHoldout" for n in _upstream(out.inputs["Surface"])):
        t.link(t.node("ShaderNodeHoldout").outputs[0], out.inputs["Surface"])
        return
    vol_opacity, _ = _volume(t, out, policy)
    opacity, _ = _surface(t, out.inputs["Surface"], policy)
    opacity = opacity if vol_opacity is None else vol_opacity
    if policy.backface == "cull_if_material_culls" and mat.use_backface_culling:
        front = t.math("SUBTRACT", 1.0, t.node("ShaderNodeNewGeometry").outputs["Backfacing"])
        opacity = _times(t, opacity, front)
    depth = t.node("ShaderNodeLightPath").outputs["Transparent Depth"]
    stop = t.math("SUBTRACT", 1.0, t.math("LESS_THAN", depth, layer - 0.5))
    held = t.node("ShaderNodeAttribute", attribute_type="OBJECT", attribute_name=HOLDOUT_STOP_PROPERTY)
    stop = t.math("MAXIMUM", stop, held.outputs["Fac"])        # a held-out object ends the stack (no data)
    mix, clear = t.node("ShaderNodeMixShader"), t.node("ShaderNodeBsdfTransparent")
    t.tree.links.new(stop, mix.inputs[0])
    t.tree.links.new(clear.outputs[0], mix.inputs[1])
    t.tree.links.new(t.node("ShaderNodeBsdfDiffuse").outputs[0], mix.inputs[2])
    t.link(mix.outputs[0], out.inputs["Surface"])
    _gate_aov(t, normal_aov, stop)
    aov = t.node("ShaderNodeOutputAOV", aov_name=POLICY_AOV)
    tree.links.new(t.math("MULTIPLY", stop, opacity) if not isinstance(opacity, float) or opacity != 1.0 else stop,
                   aov.inputs["Value"])


def apply_layer_peel(patch, view_layer, objects, policy: SurfacePolicy, normal_aov: str, layer: int) -> None:
    """Label-render state of layer `layer` (0 = the first surface point crossed) of the surface-layer stack: every
    material of `objects` peeled (`peel_material`), holdouts as the policy says, the POLICY_AOV added."""
    scene = view_layer.id_data
    patch.set(view_layer, "pass_alpha_threshold", 0.5)     # passed points have alpha 0, the stopping one 1
    patch.set(scene.cycles, "transparent_max_bounces", LABEL_TRANSPARENT_BOUNCES)
    if policy.holdout == "surface":
        _show_holdouts(patch, view_layer, objects)
    else:
        for o in _held_out(view_layer, objects)[0]:
            patch.set_item(o, HOLDOUT_STOP_PROPERTY, 1.0)
    groups = {}
    for m in label_materials(objects):
        peel_material(patch, m, policy, normal_aov, layer, groups)
    if POLICY_AOV not in view_layer.aovs:
        aov = view_layer.aovs.add()
        aov.name, aov.type = POLICY_AOV, "VALUE"
        patch.on_restore(lambda: view_layer.aovs.remove(view_layer.aovs[POLICY_AOV]))


def _held_out(view_layer, objects) -> tuple[list, list]:
    """(objects held out by their own Holdout or a holdout layer collection, those layer collections)."""
    held, collections = [o for o in objects if getattr(o, "is_holdout", False)], []
    stack = [view_layer.layer_collection]
    while stack:
        lc = stack.pop()
        if lc.holdout:
            collections.append(lc)
            held += list(lc.collection.all_objects)
        stack.extend(lc.children)
    return held, collections


def _show_holdouts(patch, view_layer, objects) -> set:
    """Turn off object and collection holdouts for the label render; mark those objects (HOLDOUT_PROPERTY).
    Returns the marked objects."""
    held, collections = _held_out(view_layer, objects)
    for lc in collections:
        patch.set(lc, "holdout", False)
    for o in held:
        if o.is_holdout:
            patch.set(o, "is_holdout", False)
        patch.set_item(o, HOLDOUT_PROPERTY, 1.0)
    return set(held)


def _materials_of(objects) -> set:
    return {m.name for m in label_materials(objects)}


def unseen_materials(materials) -> list:
    """Names of the materials whose node tree (or a group in it) holds an OSL Script node: its output (an alpha
    perhaps) is not seen by the policy."""
    def has_script(tree, seen) -> bool:
        if tree is None or tree.name in seen:
            return False
        seen.add(tree.name)
        return any(n.bl_idname == "ShaderNodeScript" or (n.bl_idname == "ShaderNodeGroup" and
                                                          has_script(n.node_tree, seen)) for n in tree.nodes)
    return sorted(m.name for m in materials if has_script(m.node_tree, set()))


def label_materials(objects) -> list:
    """The distinct materials of `objects` (after cycles_setup.add_true_normal_aov filled empty slots)."""
    seen = {}
    for o in objects:
        for s in getattr(o, "material_slots", ()):
            if s.material is not None:
                seen.setdefault(s.material.name, s.material)
    return list(seen.values())


__all__ = ["HOLDOUT_PROPERTY", "POLICY_AOV", "apply_layer_peel", "apply_surface_policy", "label_materials",
           "patch_material", "peel_material", "unseen_materials"]
