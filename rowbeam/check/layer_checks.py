"""The surface-layer stack (rig surface_policy.layers = L; check `surface_layers`).

Layer l of a pixel is the l-th surface point its pixel-centre label ray crosses (l = 0 the first): layer_camera_z,
layer_instance_id, layer_opacity (H, W, L). The contract:
- a layer exists where its camera_z is finite; then its opacity is finite and its id non-zero, else NaN and 0;
  layers are contiguous (none after a missing one) and ordered along the ray (camera_z non-decreasing);
- opacities lie in [0, 1], so the compositing weights w_l = o_l * prod_{j<l} (1 - o_j) sum to at most 1;
- the label is the first layer whose opacity >= alpha_threshold: there valid is 1 and instance_id and camera_z are
  that layer's; where no layer reaches the threshold and the stack ended before L, valid is 0.
"""
from __future__ import annotations

import numpy as np

from rowbeam.model.surface_policy import policy_from_manifest

LAYER_Z_TOL_M = 1e-4          # camera_z of the label vs its layer: two renders of one ray (float32 passes)
WEIGHT_SUM_TOL = 1e-6
STACK = ("layer_camera_z", "layer_instance_id", "layer_opacity")


def layer_faults(arrays: dict, threshold: float) -> dict:
    """{fault name: (H, W) bool} of the stack's contract (see the module docstring)."""
    z, ids, o = arrays["layer_camera_z"], arrays["layer_instance_id"], arrays["layer_opacity"]
    exists = np.isfinite(z)
    behind = np.where(exists[..., 1:] & exists[..., :-1], np.diff(np.where(exists, z, 0.0), axis=-1), 0.0)
    faults = {"presence": (np.isfinite(o) != exists).any(-1) | ((ids != 0) != exists).any(-1),
              "contiguity": (exists[..., 1:] & ~exists[..., :-1]).any(-1),
              "order": (behind < -LAYER_Z_TOL_M).any(-1),
              "opacity_range": (exists & ~((o >= 0) & (o <= 1))).any(-1)}
    oo = np.where(exists, np.clip(np.nan_to_num(o), 0.0, 1.0), 0.0).astype(np.float64)
    through = np.cumprod(np.concatenate([np.ones_like(oo[..., :1]), 1.0 - oo[..., :-1]], -1), -1)
    faults["weight_sum"] = (oo * through).sum(-1) > 1.0 + WEIGHT_SUM_TOL
    stops = exists & (o >= np.float32(threshold))           # float32, as the label render compares
    has = stops.any(-1)
    first = np.argmax(stops, -1)[..., None]
    lz, lid = np.take_along_axis(z, first, -1)[..., 0], np.take_along_axis(ids, first, -1)[..., 0]
    valid = arrays["valid"] == 1
    faults["label"] = has & ~(valid & (arrays["instance_id"] == lid)
                              & (np.abs(arrays["camera_z"].astype(np.float64) - lz) <= LAYER_Z_TOL_M))
    faults["label"] |= ~has & ~exists[..., -1] & valid
    return faults


def check_surface_layers(manifest: dict, arrays: dict, add) -> None:
    """Fail when the stack breaks its contract at any pixel, or when the policy declares layers and the event has
    no stack; values count the pixels per fault. Nothing is added for an event without either."""
    policy = policy_from_manifest(manifest)
    missing = [n for n in STACK if n not in arrays]
    if len(missing) == len(STACK) and not (policy is not None and policy.layers):
        return
    if missing:
        add("surface_layers", False, f"surface_policy.layers is {policy.layers if policy else '?'} but the event has "
            f"no {', '.join(missing)}", missing_arrays=len(missing))
        return
    faults = layer_faults(arrays, policy.alpha_threshold if policy else 0.5)
    counts = {name: int(np.count_nonzero(mask)) for name, mask in faults.items()}
    bad = {k: v for k, v in counts.items() if v}
    first = np.argwhere(np.logical_or.reduce(list(faults.values())))
    where = f" (first at row {first[0][0]}, column {first[0][1]})" if len(first) else ""
    add("surface_layers", not bad, ", ".join(f"{v} pixels break {k}" for k, v in bad.items()) + where if bad else
        f"the {arrays['layer_opacity'].shape[-1]}-layer stack is ordered, its opacities in [0, 1], and the label is "
        "its first layer at or above the alpha threshold", **{f"{k}_pixels": v for k, v in counts.items()})
