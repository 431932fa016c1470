"""One-way adapters from a rowbeam flow folder to external flow formats. Each writes the
file plus a JSON sidecar (`rowbeam/adapter_sidecar@1`) that records what the format lost and the
largest rounding error it introduced.

- Middlebury/Sintel .flo: "PIEH", int32 width, height, float32 (u, v) row-major from the top;
  unknown pixels = 1e10. Variant `valid` (dest_visible only) or `geometric` (every defined flow).
- KITTI 2015 flow PNG: 16-bit RGB, u = (R - 2^15)/64, v = (G - 2^15)/64, B = 1 where valid;
  variant `noc` (dest_visible) or `occ` (every defined flow); |flow| > 512 px is refused, never clamped.
- PFM: "PF" 3-channel (u, v, 0) float32, little-endian (scale -1), rows bottom to top; NaN kept.
"""
from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import numpy as np

from rowbeam.adapters.adapter import AdapterFormat
from rowbeam.adapters.output import check_output_file
from rowbeam.adapters.png import png_bytes
from rowbeam.bundle.reader import Flow
from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import atomic_write_bytes, canonical_json, load_json, sha256_file
from rowbeam.bundle.schema import schema_errors

FLO_MAGIC = 202021.25
FLO_UNKNOWN = 1e10
KITTI_LIMIT_PX = 512.0
KITTI_SCALE = 64.0
FORMATS = {"flo": ("middlebury_flo", ("valid", "geometric")),
           "kitti-flow": ("kitti2015_flow_png", ("noc", "occ")),
           "pfm": ("pfm", ("geometric",))}
DEPRECATED = {"kitti": "kitti-flow"}       # old name -> new name; still accepted


def load_flow(flow_dir: Path, direction: str) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray]:
    """(manifest, flow (H, W, 2) float32, dest_visible, correspondence_defined) with hashes verified."""
    flow_dir = Path(flow_dir)
    if not flow_dir.is_dir():
        raise RowbeamError(f"{flow_dir}: not a flow folder (flows/<sensor>/<i0>-<i1>)")
    flow = Flow(flow_dir)
    manifest = load_json(flow_dir / "manifest.json", "flow manifest")
    if not isinstance(manifest, dict) or manifest.get("schema") != "rowbeam/flow@1":
        raise RowbeamError(f"{flow_dir / 'manifest.json'}: not a rowbeam/flow@1 manifest")
    errors = schema_errors(manifest, "rowbeam/flow@1")
    if errors:
        raise RowbeamError(f"{flow_dir / 'manifest.json'}: violates rowbeam/flow@1: {errors[0]}")
    flow._manifest = manifest
    names = (f"flow_{direction}", f"flow_{direction}_dest_visible", f"flow_{direction}_correspondence_defined")
    return (manifest, *(flow.array(n) for n in names))


def write_flo(path: Path, flow: np.ndarray, known: np.ndarray) -> float:
    H, W = known.shape
    data = np.where(known[..., None], flow, np.float32(FLO_UNKNOWN)).astype("<f4")
    header = struct.pack("<fii", FLO_MAGIC, W, H)
    atomic_write_bytes(path, header + data.tobytes())
    return 0.0                                     # float32 in, float32 out


def read_flo(path: Path) -> np.ndarray:
    raw = Path(path).read_bytes()
    magic, W, H = struct.unpack("<fii", raw[:12])
    if magic != FLO_MAGIC:
        raise RowbeamError(f"{path}: not a .flo file")
    return np.frombuffer(raw[12:], "<f4").reshape(H, W, 2)


def write_png16(path: Path, rgb: np.ndarray) -> None:
    """16-bit RGB PNG (big-endian samples, filter 0 per row)."""
    atomic_write_bytes(path, png_bytes(rgb.astype(np.uint16), 16))


def read_png16(path: Path) -> np.ndarray:
    """Reader for PNGs written by write_png16 (filter 0 rows only)."""
    data = Path(path).read_bytes()
    pos, idat, W, H = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            W, H = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(H, 1 + W * 6)
    if rows[:, 0].any():
        raise RowbeamError(f"{path}: PNG row filters are not supported by this reader")
    return np.frombuffer(rows[:, 1:].tobytes(), ">u2").reshape(H, W, 3).astype(np.uint16)


def write_kitti(path: Path, flow: np.ndarray, known: np.ndarray) -> float:
    f = np.where(known[..., None], flow.astype(np.float64), 0.0)
    too_big = known & (np.abs(f) > KITTI_LIMIT_PX).any(axis=-1)
    if too_big.any():
        v, u = np.argwhere(too_big)[0]
        raise RowbeamError(f"KITTI flow PNG holds |flow| <= {KITTI_LIMIT_PX:g} px; pixel ({u}, {v}) has "
                           f"({f[v, u, 0]:.1f}, {f[v, u, 1]:.1f}) — refusing rather than clamping")
    q = np.rint(f * KITTI_SCALE) + 2**15
    rgb = np.zeros(known.shape + (3,), np.uint16)
    rgb[..., 0] = np.where(known, q[..., 0], 0)
    rgb[..., 1] = np.where(known, q[..., 1], 0)
    rgb[..., 2] = known
    write_png16(path, rgb)
    err = np.abs((q - 2**15) / KITTI_SCALE - f)[known]
    return float(err.max(initial=0.0))


def read_kitti(path: Path) -> tuple[np.ndarray, np.ndarray]:
    rgb = read_png16(path).astype(np.float64)
    return (rgb[..., :2] - 2**15) / KITTI_SCALE, rgb[..., 2] > 0


def write_pfm(path: Path, flow: np.ndarray, known: np.ndarray) -> float:
    H, W = known.shape
    data = np.zeros((H, W, 3), "<f4")
    data[..., :2] = np.where(known[..., None], flow, np.nan)
    atomic_write_bytes(path, f"PF\n{W} {H}\n-1.0\n".encode() + data[::-1].tobytes())
    return 0.0


def read_pfm(path: Path) -> np.ndarray:
    raw = Path(path).read_bytes()
    header, dims, scale, rest = raw.split(b"\n", 3)
    W, H = (int(x) for x in dims.split())
    channels = 3 if header == b"PF" else 1
    dtype = "<f4" if float(scale) < 0 else ">f4"
    return np.frombuffer(rest, dtype).reshape(H, W, channels)[::-1]


def export_flow(flow_dir, fmt: str, out_path, variant: str | None = None, direction: str = "forward") -> dict:
    """Write one flow direction of a rowbeam flow folder in an external format; return the sidecar."""
    fmt = DEPRECATED.get(fmt, fmt)
    if fmt not in FORMATS:
        raise RowbeamError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    name, variants = FORMATS[fmt]
    variant = variant or variants[0]
    if variant not in variants:
        raise RowbeamError(f"format {fmt}: variant {variant!r} is not one of {', '.join(variants)}")
    flow_dir, out_path = Path(flow_dir), Path(out_path)
    sidecar_path = out_path.with_name(out_path.name + ".json")
    manifest, flow, visible, defined = load_flow(flow_dir, direction)
    for target in (out_path, sidecar_path):
        check_output_file(target, flow_dir)
    known = (visible if variant in ("valid", "noc") else defined).astype(bool)
    writer = {"flo": write_flo, "kitti-flow": write_kitti, "pfm": write_pfm}[fmt]
    wrote = False
    try:
        max_err = writer(out_path, flow, known)
        wrote = True
        sidecar = _sidecar(fmt, name, flow_dir, out_path, manifest, direction, variant, known, max_err)
        atomic_write_bytes(sidecar_path, canonical_json(sidecar))
    except OSError as exc:
        if wrote:
            os.unlink(out_path)                     # never a file without its sidecar
        raise RowbeamError(f"{sidecar_path if wrote else out_path}: cannot write ({exc.strerror or exc})") from None
    return sidecar


def _sidecar(fmt, name, flow_dir, out_path, manifest, direction, variant, known, max_err) -> dict:
    lost = ["flags source_valid, dest_in_bounds, correspondence_defined and dest_visible (only one mask survives)",
            "scene flow, endpoint times, per-row timing and provenance (kept in the flow manifest)"]
    if fmt == "flo":
        lost.append(f"unknown pixels are written as {FLO_UNKNOWN:g}, indistinguishable from a real value of that size")
        lost.append("float32 (exact: rowbeam stores float32)")
    if fmt == "kitti-flow":
        lost.append(f"precision: rounded to 1/{KITTI_SCALE:g} px; range limited to +-{KITTI_LIMIT_PX:g} px (refused beyond)")
        lost.append("flow values at pixels marked invalid are set to zero")
    if fmt == "pfm":
        lost.append("channel meaning (recorded only in this sidecar); third channel is 0")
    return {
        "schema": "rowbeam/adapter_sidecar@1", "format": name, "file": out_path.name, "sha256": sha256_file(out_path),
        "source": {"flow_manifest": str(flow_dir / "manifest.json"), "flow_manifest_sha256":
                   sha256_file(flow_dir / "manifest.json"), "flow_id": manifest["flow_id"]},
        "direction": direction, "variant": variant, "units": "px",
        "grid": manifest["conventions"]["grid"], "channels": ["u (right)", "v (down)"] + (["zero"] if fmt == "pfm" else []),
        "lost": lost, "max_rounding_error_px": max_err,
        "unknown_value": FLO_UNKNOWN if fmt == "flo" else ("B = 0" if fmt == "kitti-flow" else "NaN"),
        "pixels_written_known": int(known.sum()),
    }


def _arguments(p) -> None:
    p.add_argument("flow_dir", help="a flow folder of a bundle: flows/<sensor>/<i0>-<i1>")
    p.add_argument("out", help="output file (its sidecar is written to OUT.json)")
    p.add_argument("--variant", help="flo: valid (dest_visible pixels, default) | geometric (every defined "
                   "correspondence); kitti-flow: noc (non-occluded: dest_visible, default) | occ (all defined)")
    p.add_argument("--direction", choices=("forward", "backward"), default="forward",
                   help="flow_forward (source grid, default) or flow_backward (destination grid)")


def _run(args) -> dict:
    return export_flow(args.flow_dir, args.format, args.out, args.variant, args.direction)


def _line(args, s: dict) -> str:
    return (f"rowbeam adapt: wrote {args.out} ({s['format']}, {s['variant']}, max rounding error "
            f"{s['max_rounding_error_px']:.4g} px); sidecar {args.out}.json")


ADAPTER_FORMATS = tuple(AdapterFormat(name, text, _arguments, _run, description=text, line=_line) for name, text in (
    ("flo", "Middlebury .flo of one flow folder: float32, unknown = 1e10"),
    ("kitti-flow", "KITTI 2015 flow PNG of one flow folder: 16-bit, 1/64 px, |flow| <= 512 px"),
    ("kitti", "deprecated alias of kitti-flow"),
    ("pfm", "PFM of one flow folder: float32 (u, v, 0), rows bottom to top, NaN kept")))
