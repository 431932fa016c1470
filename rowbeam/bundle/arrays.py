"""Encode and decode payload arrays: OpenEXR (images), NumPy .npy and deflated .npz (tables, packed masks).

OpenEXR stores FLOAT (float32), HALF and UINT (uint32) channels; a uint8 plane (validity)
is stored as UINT and decoded back to uint8. Row 0 is the top. An array of shape (H, W, C) is stored as C
channels named in the manifest's `channels`. Compression is lossless (EXR_COMPRESSION per modality name,
else ZIP; a reader takes whatever the file's header says); the one lossy choice is an explicit stored pixel
type HALF for a declared float32 payload (manifest `storage.lossy`), decoded back to float32.
An .npz payload is a zip archive holding one deflated member `array.npy` (np.load(path)["array"]).
"""
from __future__ import annotations

import io
import os
import sys
import threading
import zipfile
from contextlib import contextmanager
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import OpenEXR

from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import fsync_path

EXR_PIXEL_TYPE = {"float32": "FLOAT", "float16": "HALF", "uint32": "UINT", "uint8": "UINT"}
STORED_DTYPE = {"FLOAT": np.float32, "HALF": np.float16, "UINT": np.uint32}
# Compressions that give back every bit of FLOAT, HALF and UINT channels (NaN payloads, -0, subnormals included;
# tests/blender/export/test_payload_codecs.py). PXR24, B44(A), DWAA/DWAB and LJ2K are lossy and never written.
LOSSLESS_EXR = {"NONE": OpenEXR.NO_COMPRESSION, "ZIP": OpenEXR.ZIP_COMPRESSION, "ZIPS": OpenEXR.ZIPS_COMPRESSION,
                "PIZ": OpenEXR.PIZ_COMPRESSION, "RLE": OpenEXR.RLE_COMPRESSION, "ZSTD": OpenEXR.ZSTD_COMPRESSION,
                "HTJ2K256": OpenEXR.HTJ2K256_COMPRESSION, "HTJ2K32": OpenEXR.HTJ2K32_COMPRESSION}
# The smallest lossless compression per modality name where it is not ZIP (measured on the running example at
# 1280x720: docs/format.md, `make bench` section storage); HTJ2K needs an OpenEXR >= 3.4 reader.
EXR_COMPRESSION = {"rgb": "HTJ2K256", "range": "HTJ2K256", "camera_z": "HTJ2K256", "cos_incidence": "HTJ2K256",
                   "time_offset_ns": "HTJ2K256", "flow_forward": "HTJ2K256", "flow_backward": "HTJ2K256"}
DEFAULT_EXR_COMPRESSION = "ZIP"
# Declared lossy storage: (declared dtype, stored pixel type) pairs a writer may be asked for and a reader accepts
# when the manifest entry's storage says so; the decoded array has the declared dtype.
LOSSY_PIXEL_TYPES = {("float32", "HALF"): "float32 rounded to IEEE half (11 significant bits, |x| <= 65504; "
                                          "larger values become inf)"}
LINE_ORDER = "increasing_y (row 0 at top)"


def exr_compression(name: str) -> str:
    """The lossless compression written for modality `name` (EXR_COMPRESSION, else DEFAULT_EXR_COMPRESSION)."""
    return EXR_COMPRESSION.get(name, DEFAULT_EXR_COMPRESSION)


def write_exr(path, array: np.ndarray, channels: list[str], dtype: str, attributes=None,
              encoding: dict | None = None) -> dict:
    """Write `array` ((H, W) or (H, W, C)); returns the manifest `storage` entry.

    encoding: {"compression": a LOSSLESS_EXR name (default ZIP), "pixel_type": a stored pixel type other than the
    dtype's own, only a LOSSY_PIXEL_TYPES pair (storage then declares `lossy`)}."""
    a = np.asarray(array)
    planes = [a] if a.ndim == 2 else [a[..., i] for i in range(a.shape[-1])]
    if len(planes) != len(channels):
        raise ValueError(f"{len(planes)} planes but channels {channels}")
    encoding = encoding or {}
    compression = encoding.get("compression", DEFAULT_EXR_COMPRESSION)
    pixel_type = encoding.get("pixel_type", EXR_PIXEL_TYPE[dtype])
    lossy = LOSSY_PIXEL_TYPES.get((dtype, pixel_type)) if pixel_type != EXR_PIXEL_TYPE[dtype] else None
    if compression not in LOSSLESS_EXR or (pixel_type != EXR_PIXEL_TYPE[dtype] and lossy is None):
        raise ValueError(f"unsupported encoding {encoding} for dtype {dtype}")
    stored = STORED_DTYPE[pixel_type]
    data = {}
    for name, plane in zip(channels, planes, strict=True):
        if dtype == "uint8" and (plane.min(initial=0) < 0 or plane.max(initial=0) > 255):
            raise ValueError("uint8 plane out of range")
        with np.errstate(over="ignore"):           # declared lossy HALF: beyond 65504 becomes inf
            data[name] = np.ascontiguousarray(plane.astype(stored, copy=False))
    header = {"compression": LOSSLESS_EXR[compression], "type": OpenEXR.scanlineimage}
    header.update(attributes or {})
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with OpenEXR.File(header, data) as f:
        f.write(str(tmp))
    fsync_path(tmp)
    os.replace(tmp, path)
    storage = {"pixel_type": pixel_type, "compression": compression, "line_order": LINE_ORDER}
    return {**storage, "lossy": lossy} if lossy else storage


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


def stored_pixel_type(dtype: str, storage) -> str:
    """The pixel type a payload's file must hold: the declared dtype's own, or the LOSSY_PIXEL_TYPES one its
    manifest `storage` declares (with `lossy`)."""
    declared = storage.get("pixel_type") if isinstance(storage, dict) else None
    if declared and (dtype, declared) in LOSSY_PIXEL_TYPES and storage.get("lossy"):
        return declared
    return EXR_PIXEL_TYPE[dtype]


def decode_exr_planes(path, channels: list[str], dtype: str, shape=None, storage=None) -> list[np.ndarray]:
    """The named channels as (H, W) planes with the declared logical dtype, in `channels` order (each plane as
    the file stores it: contiguous, no copy into an interleaved array).

    Raises RowbeamError naming a missing channel or a stored pixel type that differs from the
    one the declared dtype requires (or the declared lossy one of `storage`: stored_pixel_type). The header is
    checked first (check_exr_header: size bound, declared `shape` and channels), so a file claiming a huge image
    is refused before anything is allocated.
    """
    check_exr_header(path, channels, shape)
    data, _ = read_exr_channels(path)
    want = STORED_DTYPE[stored_pixel_type(dtype, storage)]
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
    elif want != STORED_DTYPE[EXR_PIXEL_TYPE[dtype]]:
        planes = [p.astype(dtype) for p in planes]
    return planes


def decode_exr(path, channels: list[str], dtype: str, shape=None, storage=None) -> np.ndarray:
    """Stack the named channels into (H, W) or (H, W, C) with the declared logical dtype (decode_exr_planes)."""
    planes = decode_exr_planes(path, channels, dtype, shape, storage)
    return planes[0] if len(planes) == 1 else np.stack(planes, axis=-1)


def _npy_bytes(array) -> bytes:
    a = np.asarray(array)
    a = a.astype(a.dtype.newbyteorder("<"), copy=False)
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _write_atomic(path, data: bytes) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_npy(path, array: np.ndarray) -> dict:
    """Little-endian .npy, no pickle; atomic. Returns the manifest `storage` entry."""
    _write_atomic(path, _npy_bytes(array))
    return {"byte_order": "little", "npy_version": "1.0"}


NPZ_MEMBER = "array.npy"
NPZ_LEVEL = 6                 # zlib level: 9 is 3x slower for < 1 % on rowbeam's tables and masks
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)   # fixed member time: the same array gives the same file bytes


def write_npz(path, array: np.ndarray) -> dict:
    """The little-endian .npy of `array` as the one deflated member `array.npy` of a zip archive (.npz; np.load
    reads it), member time fixed; atomic. Returns the manifest `storage` entry."""
    info = zipfile.ZipInfo(NPZ_MEMBER, date_time=_ZIP_EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(info, _npy_bytes(array), compresslevel=NPZ_LEVEL)
    _write_atomic(path, buf.getvalue())
    return {"byte_order": "little", "npy_version": "1.0", "container": "zip", "member": NPZ_MEMBER,
            "compression": f"deflate level {NPZ_LEVEL}"}


def declared_numpy_dtype(entry: dict) -> np.dtype:
    """The little-endian numpy dtype a manifest entry declares (structured for dtype "record")."""
    if entry["dtype"] == "record":
        return np.dtype([(f["name"], np.dtype(f["dtype"]).newbyteorder("<")) for f in entry.get("fields", [])])
    return np.dtype(entry["dtype"]).newbyteorder("<")


def _dtype_checked(path, a: np.ndarray, expected: np.dtype) -> np.ndarray:
    if a.dtype.newbyteorder("<") != expected or (a.dtype.byteorder == ">"):
        raise RowbeamError(f"{path}: stored dtype {a.dtype}, declared {expected}")
    return a


def decode_npy(path, expected: np.dtype) -> np.ndarray:
    try:
        a = np.load(path, allow_pickle=False)
    except Exception as exc:
        raise RowbeamError(f"{path}: unreadable .npy file ({exc})") from None
    if not isinstance(a, np.ndarray):
        raise RowbeamError(f"{path}: not a .npy array")
    return _dtype_checked(path, a, expected)


NPY_HEADER_SLACK = 1 << 16          # bytes an .npy header may add to its array's bytes


def decode_npz(path, expected: np.dtype, shape=None) -> np.ndarray:
    """The array of an .npz payload (write_npz): exactly one member `array.npy`, whose declared uncompressed size is
    at most the declared shape's bytes + NPY_HEADER_SLACK before anything is inflated; dtype verified."""
    limit = (int(np.prod(shape, dtype=np.int64)) * expected.itemsize if shape is not None else MAX_NPZ_BYTES) \
        + NPY_HEADER_SLACK
    try:
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
            if [i.filename for i in infos] != [NPZ_MEMBER]:
                raise RowbeamError(f"{path}: an .npz payload holds exactly one member {NPZ_MEMBER!r} "
                                   f"(has {[i.filename for i in infos][:4]})")
            if infos[0].file_size > limit:
                raise RowbeamError(f"{path}: member inflates to {infos[0].file_size} bytes, more than the declared "
                                   f"shape allows ({limit}); not inflated")
            with z.open(infos[0]) as f:
                a = np.lib.format.read_array(f, allow_pickle=False)
    except RowbeamError:
        raise
    except Exception as exc:                 # BadZipFile, zlib.error, ValueError of a bad .npy header, EOFError
        raise RowbeamError(f"{path}: unreadable .npz file ({exc})") from None
    return _dtype_checked(path, a, expected)


MAX_NPZ_BYTES = 1 << 34             # bound on an .npz member without a declared shape (16 GiB)
PAYLOAD_FORMATS = {"openexr": ("openexr",), "npy": ("npy", "npz")}     # contract format -> file formats allowed


def decode_payload(path, entry: dict) -> np.ndarray:
    """Decode one manifest modality entry's file into its declared array (dtype verified)."""
    if entry["format"] == "openexr":
        return decode_exr(path, entry["channels"], entry["dtype"], entry.get("shape"), entry.get("storage"))
    if entry["format"] == "npz":
        return decode_npz(path, declared_numpy_dtype(entry), entry.get("shape"))
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
