"""Surface policy: what a label ray (camera pixel, LiDAR beam, radar beam) reports as "the first surface".

One definition shared by the exporter (which builds the label render from it) and the checker (which reads it
from the manifest). A label ray passes every surface the policy makes transparent and stops at the first one it
makes opaque; camera_z, range, normals, ids, flow, object masks and LiDAR / radar returns all come from that
surface. The RGB render is never changed by the policy.

- alpha_threshold t in (0, 1]: a surface whose opacity (Principled BSDF Alpha, or the share of a Mix Shader that is
  not a Transparent BSDF) is >= t is a surface; below t the ray passes it. Opacity is decided per shading point,
  so an alpha-cut card is a surface exactly where its alpha mask reaches t.
- transmission: "surface" (glass / refraction and Principled BSDF with Transmission Weight >= 0.5 stop the ray:
  the pane is labelled) or "see_through" (the ray passes them unbent: what lies straight behind is labelled).
- volumes: "ignore" (volume shaders never stop a label ray; a volume-only object is invisible to labels) or
  "surface" (the boundary mesh of a volume-only object is an opaque surface).
- holdout: "no_label" (a holdout object, collection or Holdout shader gives no label, as the rgb shows nothing) or
  "surface" (it is labelled like an opaque surface; its points are policy-decided).
- backface: "both_sides" (both sides of single-sided geometry are surfaces, as Cycles renders them) or
  "cull_if_material_culls" (the back side of a face whose material has Backface Culling on is passed; such points
  are policy-decided, since the rgb shows them).
- layers L in 0 .. MAX_LAYERS (camera; 0: off): also write the surface-layer stack, the first L surface points the
  pixel-centre label ray crosses, in order, each with its camera_z, instance id and continuous opacity under the
  policy (alpha, Mix Shader share; glass 1 under "surface" and 0 under "see_through"; a volume-only boundary 0
  under "ignore" and 1 under "surface"). The label is the first layer whose opacity >= alpha_threshold.
Pixels / beams whose label ray met a surface decided by transparency or the policy (opacity < 1, transmission,
volume) are counted
in the manifest and marked in the camera's `policy_mask`; the label-vs-RGB coverage check does not judge them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from rowbeam.util.errors import RowbeamError

TRANSMISSION = ("surface", "see_through")
VOLUMES = ("ignore", "surface")
HOLDOUT = ("no_label", "surface")
BACKFACE = ("both_sides", "cull_if_material_culls")
CHOICES = {"transmission": TRANSMISSION, "volumes": VOLUMES, "holdout": HOLDOUT, "backface": BACKFACE}
TRANSMISSION_WEIGHT_SURFACE = 0.5        # Principled Transmission Weight at or above which a material is glass
LABEL_TRANSPARENT_BOUNCES = 64           # transparent layers a label ray may pass before it ends (then: no label)
MAX_LAYERS = 8                           # the surface-layer stack's bound (one label render per layer)


@dataclass(frozen=True)
class SurfacePolicy:
    alpha_threshold: float = 0.5
    transmission: str = "surface"
    volumes: str = "ignore"
    holdout: str = "no_label"
    backface: str = "both_sides"
    layers: int = 0

    def manifest_block(self) -> dict:
        """The policy as written into every manifest (method.surface_policy)."""
        return {**asdict(self), "max_transparent_layers": LABEL_TRANSPARENT_BOUNCES,
                "transmission_weight_surface": TRANSMISSION_WEIGHT_SURFACE,
                "definition": "a label ray stops at the first surface whose opacity >= alpha_threshold; "
                              "transmission, volumes, holdout and backface as named; see docs/conventions.md (surface policy)"}


DEFAULT_POLICY = SurfacePolicy()


def parse_surface_policy(raw, where: str) -> SurfacePolicy:
    """SurfacePolicy from a rig entry's `surface_policy` object (None: the default); RowbeamError naming the field."""
    if raw is None:
        return DEFAULT_POLICY
    if not isinstance(raw, dict):
        raise RowbeamError(f"{where}.surface_policy: must be an object")
    known = set(SurfacePolicy.__dataclass_fields__)
    for key in raw:
        if key not in known:
            raise RowbeamError(f"{where}.surface_policy.{key}: unknown field (known: {', '.join(sorted(known))})")
    t = raw.get("alpha_threshold", DEFAULT_POLICY.alpha_threshold)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 < t <= 1.0:
        raise RowbeamError(f"{where}.surface_policy.alpha_threshold: {t!r} is not in (0, 1]")
    for key, allowed in CHOICES.items():
        value = raw.get(key, getattr(DEFAULT_POLICY, key))
        if value not in allowed:
            raise RowbeamError(f"{where}.surface_policy.{key}: {value!r} is not one of {', '.join(allowed)}")
    layers = raw.get("layers", 0)
    if isinstance(layers, bool) or not isinstance(layers, int) or not 0 <= layers <= MAX_LAYERS:
        raise RowbeamError(f"{where}.surface_policy.layers: {layers!r} is not an integer in 0 .. {MAX_LAYERS}")
    return SurfacePolicy(float(t), **{key: raw.get(key, getattr(DEFAULT_POLICY, key)) for key in CHOICES},
                         layers=layers)


def policy_from_manifest(manifest: dict) -> SurfacePolicy | None:
    """The policy an event was exported with (None for bundles written before policies were declared)."""
    block = (manifest.get("method") or {}).get("surface_policy")
    if not isinstance(block, dict):
        return None
    return parse_surface_policy({k: block[k] for k in SurfacePolicy.__dataclass_fields__ if k in block},
                                "manifest.method")
