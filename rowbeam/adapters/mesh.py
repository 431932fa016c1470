"""Object assets (rowbeam.check.rasterize reads and writes them) for the adapters: reading a label's asset,
writing a model PLY in other units/precision, and a mesh's diameter."""
from __future__ import annotations

import numpy as np

from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import open_regular, regular_file, resolve_inside, sha256_file
from rowbeam.check.rasterize import read_ply

MAX_ASSET_BYTES = 1 << 30


def read_asset(event, label: dict) -> tuple[np.ndarray, np.ndarray]:
    """(vertices (N, 3) float64 m, triangles (M, 3) int64) of an object label's asset, sha256 verified.
    The uri is relative to the bundle root when the label says `relative_to: bundle root`, else to the event."""
    asset = label.get("asset")
    if not asset:
        raise RowbeamError(f"{event.path}: object {label.get('id')} has no asset")
    base = event.root if asset.get("relative_to") == "bundle root" else event.path
    path = resolve_inside(base, asset["uri"], event.root)
    if sha256_file(path) != asset["sha256"]:
        raise RowbeamError(f"{asset['uri']}: sha256 does not match the object label")
    if regular_file(path).st_size > MAX_ASSET_BYTES:
        raise RowbeamError(f"{asset['uri']}: larger than {MAX_ASSET_BYTES >> 20} MiB")
    with open_regular(path) as f:
        return read_ply(f.read())


def mesh_ply_bytes(vertices: np.ndarray, faces: np.ndarray, vertex_type: str = "float",
                   comments: tuple = ()) -> bytes:
    """Binary little-endian PLY: vertex x y z (`vertex_type` float or double), triangle faces uchar/int."""
    vt = {"float": "<f4", "double": "<f8"}[vertex_type]
    head = ["ply", "format binary_little_endian 1.0", *[f"comment {c}" for c in comments],
            f"element vertex {len(vertices)}", *[f"property {vertex_type} {a}" for a in "xyz"],
            f"element face {len(faces)}", "property list uchar int vertex_indices", "end_header"]
    rec = np.zeros(len(faces), [("n", "u1"), ("i", "<i4", (3,))])
    rec["n"] = 3
    rec["i"] = faces
    return ("\n".join(head) + "\n").encode("ascii") + np.asarray(vertices, vt).tobytes() + rec.tobytes()


def diameter(vertices: np.ndarray) -> float:
    """Largest distance between two vertices, exact. A lower bound L from the vertices extreme along 64
    directions prunes every vertex v with |v - c| + R <= L (c = centre of the bounding box, R = the largest
    |u - c|: no partner of v is farther than that); the rest are compared pairwise in blocks (quadratic in
    the vertices left: a mesh of 10^5 vertices on a sphere, which prunes nothing, takes minutes)."""
    v = np.unique(np.asarray(vertices, np.float64).reshape(-1, 3), axis=0)
    if len(v) < 2:
        return 0.0
    dirs = np.random.default_rng(0).normal(size=(64, 3))
    proj = v @ dirs.T
    cand = v[np.unique(np.concatenate([proj.argmax(0), proj.argmin(0)]))]
    best = float(np.sqrt(((cand[:, None] - cand[None]) ** 2).sum(-1).max()))
    c = (v.min(0) + v.max(0)) / 2
    r = np.linalg.norm(v - c, axis=1)
    keep = v[r + r.max() > best]
    chunk = max(1, 4_000_000 // max(1, len(keep)))          # rows per block: ~100 MB of float64 differences
    for i in range(0, len(keep), chunk):
        d = ((keep[i:i + chunk, None, :] - keep[None, :, :]) ** 2).sum(-1)
        best = max(best, float(np.sqrt(d.max(initial=0.0))))
    return best
