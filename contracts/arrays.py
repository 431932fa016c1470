"""Encode and decode payload arrays: OpenEXR (images) and NumPy .npy (int64/float64 tables).

OpenEXR stores FLOAT (float32), HALF and UINT (uint32) channels; a uint8 plane (validity)
is stored as UINT and decoded back to uint8. Compression is lossless ZIP. Row 0 is the top.
An array of shape (H, W, C) is stored as C channels named in the manifest's `channels`.
"""
from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import OpenEXR

from .errors import RowbeamError
from .files import fsync_path

EXR_PIXEL_TYPE = {"float32": "FLOAT", "float16": "HALF", "uint32": "UINT", "uint8": "UINT"}
STORED_DTYPE = {"FLOAT": np.float32, "HALF": np.float16, "UINT": np.uint32}


def write_exr(path, array: np.ndarray, channels: list[str], dtype: str, attributes=None) -> dict:
    """Write `array` ((H, W) or (H, W, C)) losslessly; returns the manifest `storage` entry."""
    a = np.asarray(array)
    planes = [a] if a.ndim == 2 else [a[..., i] for i in range(a.shape[-1])]
    if len(planes) != len(channels):
        raise ValueError(f"{len(planes)} planes but channels {channels}")
    stored = STORED_DTYPE[EXR_PIXEL_TYPE[dtype]]
    data = {}
    for name, plane in zip(channels, planes, strict=True):
        if dtype == "uint8" and (plane.min(initial=0) < 0 or plane.max(initial=0) > 255):
            raise ValueError("uint8 plane out of range")
        data[name] = np.ascontiguousarray(plane.astype(stored, copy=False))
    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    header.update(attributes or {})
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with OpenEXR.File(header, data) as f:
        f.write(str(tmp))
    fsync_path(tmp)
    os.replace(tmp, path)
    return {"pixel_type": EXR_PIXEL_TYPE[dtype], "compression": "ZIP", "line_order": "increasing_y (row 0 at top)"}


def _owned(pixels: np.ndarray) -> np.ndarray:
    """The binding's pixel array itself when numpy owns its memory (OpenEXR 3.5: no second copy of a large
    image), else a copy that outlives the File."""
    return pixels if pixels.flags.owndata else pixels.copy()


def read_exr_channels(path) -> tuple[dict, dict]:
    """{channel name: 2-D array} and the header of a single-part EXR; RowbeamError if unreadable."""
    try:
        with OpenEXR.File(str(path), separate_channels=True) as f:
            channels = {name: _owned(ch.pixels) for name, ch in f.channels().items()}
            header = dict(f.header())
    except Exception as exc:  # OpenEXR raises RuntimeError for truncated or corrupt files
        raise RowbeamError(f"{path}: unreadable OpenEXR file ({exc}); truncated or corrupt") from None
    return channels, header


def read_exr_parts(path) -> dict:
    """{channel name: 2-D array} over every part of a (multi-part) EXR, e.g. a Cycles render."""
    try:
        with OpenEXR.File(str(path), separate_channels=True) as f:
            return {name: _owned(ch.pixels) for part in f.parts for name, ch in part.channels.items()}
    except Exception as exc:
        raise RowbeamError(f"{path}: unreadable OpenEXR file ({exc})") from None


def decode_exr(path, channels: list[str], dtype: str) -> np.ndarray:
    """Stack the named channels into (H, W) or (H, W, C) with the declared logical dtype.

    Raises RowbeamError naming a missing channel or a stored pixel type that differs from the
    one the declared dtype requires.
    """
    data, _ = read_exr_channels(path)
    want = STORED_DTYPE[EXR_PIXEL_TYPE[dtype]]
    planes = []
    for name in channels:
        if name not in data:
            raise RowbeamError(f"{path}: channel {name!r} is missing (has {sorted(data)})")
        if data[name].dtype != want:
            raise RowbeamError(f"{path}: channel {name!r} is stored as {data[name].dtype}, "
                               f"declared dtype {dtype} needs {np.dtype(want)}")
        planes.append(data[name])
    extra = sorted(set(data) - set(channels))
    if extra:
        raise RowbeamError(f"{path}: undeclared channel(s) {extra}")
    a = planes[0] if len(planes) == 1 else np.stack(planes, axis=-1)
    if dtype == "uint8":
        if a.max(initial=0) > 255:
            raise RowbeamError(f"{path}: values above 255 in a uint8 plane")
        a = a.astype(np.uint8)
    return a


def write_npy(path, array: np.ndarray) -> dict:
    """Little-endian .npy, no pickle; atomic. Returns the manifest `storage` entry."""
    a = np.asarray(array)
    a = a.astype(a.dtype.newbyteorder("<"), copy=False)
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(buf.getvalue())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return {"byte_order": "little", "npy_version": "1.0"}


def declared_numpy_dtype(entry: dict) -> np.dtype:
    """The little-endian numpy dtype a manifest entry declares (structured for dtype "record")."""
    if entry["dtype"] == "record":
        return np.dtype([(f["name"], np.dtype(f["dtype"]).newbyteorder("<")) for f in entry.get("fields", [])])
    return np.dtype(entry["dtype"]).newbyteorder("<")


def decode_npy(path, expected: np.dtype) -> np.ndarray:
    try:
        a = np.load(path, allow_pickle=False)
    except Exception as exc:
        raise RowbeamError(f"{path}: unreadable .npy file ({exc})") from None
    if a.dtype.newbyteorder("<") != expected or (a.dtype.byteorder == ">"):
        raise RowbeamError(f"{path}: stored dtype {a.dtype}, declared {expected}")
    return a


def decode_payload(path, entry: dict) -> np.ndarray:
    """Decode one manifest modality entry's file into its declared array (dtype verified)."""
    if entry["format"] == "openexr":
        return decode_exr(path, entry["channels"], entry["dtype"])
    return decode_npy(path, declared_numpy_dtype(entry))
