"""Encode and decode payload arrays: OpenEXR (images) and NumPy .npy (int64/float64 tables).

OpenEXR stores FLOAT (float32), HALF and UINT (uint32) channels; a uint8 plane (validity)
is stored as UINT and decoded back to uint8. Compression is lossless ZIP. Row 0 is the top.
An array of shape (H, W, C) is stored as C channels named in the manifest's `channels`.
"""
from __future__ import annotations

import io
import os
import sys
import threading
from contextlib import contextmanager
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import OpenEXR

from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import fsync_path

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


_stderr = {"lock": threading.Lock(), "users": 0, "saved": None}


@contextmanager
def openexr_stderr_silenced():
    """Point file descriptor 2 at /dev/null while OpenEXR's C library reads (it prints its own diagnostics of a
    corrupt file there; rowbeam reports the same failure as one RowbeamError line). Reference-counted across
    threads: descriptor 2 comes back when the last reader leaves."""
    with _stderr["lock"]:
        if _stderr["users"] == 0:
            sys.stderr.flush()
            _stderr["saved"] = os.dup(2)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
        _stderr["users"] += 1
    try:
        yield
    finally:
        with _stderr["lock"]:
            _stderr["users"] -= 1
            if _stderr["users"] == 0:
                os.dup2(_stderr["saved"], 2)
                os.close(_stderr["saved"])


def read_exr_channels(path) -> tuple[dict, dict]:
    """{channel name: 2-D array} and the header of a single-part EXR; RowbeamError if unreadable."""
    try:
        with openexr_stderr_silenced(), OpenEXR.File(str(path), separate_channels=True) as f:
            channels = {name: _owned(ch.pixels) for name, ch in f.channels().items()}
            header = dict(f.header())
    except Exception as exc:  # OpenEXR raises RuntimeError for truncated or corrupt files
        raise RowbeamError(f"{path}: unreadable OpenEXR file ({exc}); truncated or corrupt") from None
    return channels, header


def read_exr_parts(path) -> dict:
    """{channel name: 2-D array} over every part of a (multi-part) EXR, e.g. a Cycles render."""
    try:
        with openexr_stderr_silenced(), OpenEXR.File(str(path), separate_channels=True) as f:
            return {name: _owned(ch.pixels) for part in f.parts for name, ch in part.channels.items()}
    except Exception as exc:
        raise RowbeamError(f"{path}: unreadable OpenEXR file ({exc})") from None


MAX_PAYLOAD_PIXELS = 1 << 26        # largest image payload decoded (pixels per channel; 8192 x 8192)


def check_exr_header(path, channels: list[str], shape=None) -> tuple[int, int]:
    """(H, W) of a single-part EXR from its header alone (no pixel is decoded): the data window must hold at
    most MAX_PAYLOAD_PIXELS pixels and match the declared `shape` ((H, W) or (H, W, C)), the channels must be
    exactly the declared ones, unsubsampled. Every failure is one RowbeamError naming the file."""
    try:
        with openexr_stderr_silenced(), OpenEXR.File(str(path), header_only=True) as f:
            parts = len(f.parts)
            header = dict(f.header())
    except Exception as exc:  # OpenEXR raises RuntimeError for truncated or corrupt files
        raise RowbeamError(f"{path}: unreadable OpenEXR file ({exc}); truncated or corrupt") from None
    if parts != 1:
        raise RowbeamError(f"{path}: {parts} parts; a payload is a single-part EXR")
    try:
        (x0, y0), (x1, y1) = (tuple(int(v) for v in c) for c in header["dataWindow"])
        stored = {c.name: (int(c.xSampling), int(c.ySampling)) for c in header["channels"]}
    except (KeyError, TypeError, ValueError, AttributeError):
        raise RowbeamError(f"{path}: OpenEXR header without a usable data window or channel list") from None
    h, w = y1 - y0 + 1, x1 - x0 + 1
    if h <= 0 or w <= 0 or h * w > MAX_PAYLOAD_PIXELS:
        raise RowbeamError(f"{path}: header claims {w}x{h} pixels; a payload holds 1 .. {MAX_PAYLOAD_PIXELS} "
                           "pixels per channel; not decoded")
    if shape is not None and [h, w] != [int(v) for v in list(shape)[:2]]:
        raise RowbeamError(f"{path}: decoded shape {[h, w]} (from the header), manifest declares {list(shape)}; "
                           "pixels not decoded")
    missing = [name for name in channels if name not in stored]
    if missing:
        raise RowbeamError(f"{path}: channel {missing[0]!r} is missing (has {sorted(stored)})")
    extra = sorted(set(stored) - set(channels))
    if extra:
        raise RowbeamError(f"{path}: undeclared channel(s) {extra}")
    if any(s != (1, 1) for s in stored.values()):
        raise RowbeamError(f"{path}: subsampled channels; payload channels hold every pixel")
    return h, w


def decode_exr_planes(path, channels: list[str], dtype: str, shape=None) -> list[np.ndarray]:
    """The named channels as (H, W) planes with the declared logical dtype, in `channels` order (each plane as
    the file stores it: contiguous, no copy into an interleaved array).

    Raises RowbeamError naming a missing channel or a stored pixel type that differs from the
    one the declared dtype requires. The header is checked first (check_exr_header: size bound, declared
    `shape` and channels), so a file claiming a huge image is refused before anything is allocated.
    """
    check_exr_header(path, channels, shape)
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
    if dtype == "uint8":
        if any(p.max(initial=0) > 255 for p in planes):
            raise RowbeamError(f"{path}: values above 255 in a uint8 plane")
        planes = [p.astype(np.uint8) for p in planes]
    return planes


def decode_exr(path, channels: list[str], dtype: str, shape=None) -> np.ndarray:
    """Stack the named channels into (H, W) or (H, W, C) with the declared logical dtype (decode_exr_planes)."""
    planes = decode_exr_planes(path, channels, dtype, shape)
    return planes[0] if len(planes) == 1 else np.stack(planes, axis=-1)


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
        return decode_exr(path, entry["channels"], entry["dtype"], entry.get("shape"))
    return decode_npy(path, declared_numpy_dtype(entry))


class DecodedArrays(Mapping):
    """{modality name: decoded array} as the checker holds an event's payloads. A multi-channel image can be added
    as its channel planes (decode_exr_planes); it is stacked into its declared (H, W, C) array, once, only when
    first read as `arrays[name]`, so checks that work channel by channel (`planes`) never pay for that copy.
    Reading a name gives exactly what decode_payload returns for it."""

    def __init__(self):
        self._items: dict = {}              # name: ndarray, or tuple of (H, W) planes not stacked yet

    def add(self, name: str, value) -> None:
        """value: the decoded array, or a list of >= 2 channel planes (declared channel order)."""
        self._items[name] = tuple(value) if isinstance(value, list) else value

    def __getitem__(self, name: str) -> np.ndarray:
        value = self._items[name]
        if isinstance(value, tuple):
            value = self._items[name] = np.stack(value, axis=-1)
        return value

    def __contains__(self, name) -> bool:        # Mapping's default would read (stack) the array
        return name in self._items

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def held_planes(self, name: str) -> list[np.ndarray] | None:
        """The channel planes of `name` while it is held unstacked (contiguous (H, W) arrays), else None."""
        value = self._items[name]
        return list(value) if isinstance(value, tuple) else None


def channel_planes(arrays, name: str) -> list[np.ndarray]:
    """The C planes (H, W) of the (H, W, C) array arrays[name]: the held planes of a DecodedArrays that has not
    stacked it, else views of the array's channels. Same values either way."""
    held = arrays.held_planes(name) if isinstance(arrays, DecodedArrays) else None
    if held is not None:
        return held
    a = arrays[name]
    return [a[..., c] for c in range(a.shape[-1])]
