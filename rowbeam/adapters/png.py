"""Minimal lossless PNG encoder (no dependency): 8- or 16-bit greyscale (H, W) or RGB (H, W, 3), filter 0."""
from __future__ import annotations

import struct
import zlib

import numpy as np


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bytes(image: np.ndarray, bit_depth: int) -> bytes:
    """PNG file bytes of a uint8 (bit_depth 8) or uint16 (bit_depth 16) image; samples are stored exactly."""
    a = np.asarray(image)
    if bit_depth not in (8, 16) or a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] != 3):
        raise ValueError(f"png_bytes: unsupported image {a.shape} / {bit_depth} bit")
    limit = (1 << bit_depth) - 1
    if a.size and (a.min() < 0 or a.max() > limit):
        raise ValueError(f"png_bytes: values outside 0..{limit}")
    H, W = a.shape[:2]
    colour = 0 if a.ndim == 2 else 2
    rows = np.ascontiguousarray(a.astype(">u2" if bit_depth == 16 else np.uint8)).reshape(H, -1)
    raw = b"".join(b"\x00" + rows[i].tobytes() for i in range(H))
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, bit_depth, colour, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(raw, 6)) + _chunk(b"IEND", b""))
