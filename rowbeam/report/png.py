"""PNG encoding with zlib (8-bit RGB/RGBA/grey, or palette for an Indexed image; no filter) and area-averaged
thumbnails."""
from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

import numpy as np


class Indexed(NamedTuple):
    """An RGB image kept as indices into a colour table: rgb() = palette[index]. index (H, W) integers in
    [0, len(palette)), palette (N, 3) uint8 (any N; PNG stores a palette of at most 256 colours: one byte a pixel,
    a third of the RGB bytes to compress)."""
    index: np.ndarray
    palette: np.ndarray

    @property
    def shape(self) -> tuple[int, int, int]:
        return (*self.index.shape, 3)

    def rgb(self) -> np.ndarray:
        """(H, W, 3) uint8."""
        return np.take(self.palette, self.index, axis=0)

    def rgbx(self) -> np.ndarray:
        """(H, W, 4) uint8: the RGB and a zero byte per pixel, from one 4-byte lookup per pixel (a gather of whole
        words: faster than rgb()'s 3-byte rows where every channel is read again anyway, as by thumbnail())."""
        words = np.zeros(len(self.palette), dtype=np.uint32)
        words.view(np.uint8).reshape(-1, 4)[:, :3] = self.palette
        return np.take(words, self.index).view(np.uint8).reshape(*self.index.shape, 4)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(image, level: int = 3) -> bytes:
    """(H, W, 3|4) or (H, W) uint8 -> PNG bytes (colour type 2, 6 or 0); an Indexed image with at most 256 colours ->
    colour type 3 (palette; more colours: as its RGB). Filter 'None' on every row."""
    palette = b""
    if isinstance(image, Indexed):
        if len(image.palette) > 256:
            return encode_png(image.rgb(), level)
        palette = np.ascontiguousarray(image.palette, dtype=np.uint8).tobytes()
        img = image.index.astype(np.uint8, copy=False)[..., None]
    else:
        img = np.ascontiguousarray(image, dtype=np.uint8)
    if img.ndim == 2:
        img = img[..., None]
    H, W, C = img.shape
    colour_type = 3 if palette else {1: 0, 3: 2, 4: 6}[C]
    raw = np.empty((H, W * C + 1), dtype=np.uint8)
    raw[:, 0] = 0                                   # filter type 0 (None) before each row
    raw[:, 1:] = img.reshape(H, W * C)
    header = struct.pack(">IIBBBBB", W, H, 8, colour_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + (_chunk(b"PLTE", palette) if palette else b"")
            + _chunk(b"IDAT", zlib.compress(raw, level)) + _chunk(b"IEND", b""))


def decode_png(data: bytes) -> np.ndarray:
    """Inverse of encode_png for unfiltered 8-bit images (tests and round trips); (H, W, C) uint8 (a palette image:
    its RGB)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, W, palette = 8, b"", 0, None
    while pos < len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            W, H, _, ct = struct.unpack(">IIBB", body[:10])
            C = {0: 1, 2: 3, 3: 1, 6: 4}[ct]
        elif kind == b"PLTE":
            palette = np.frombuffer(body, dtype=np.uint8).reshape(-1, 3)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(H, W * C + 1)
    if raw[:, 0].any():
        raise ValueError("filtered PNG rows are not supported by this decoder")
    img = raw[:, 1:].reshape(H, W, C)
    return palette[img[..., 0]] if ct == 3 else img


def thumbnail_factor(height: int, width: int, max_side: int = 320) -> int:
    """The integer downscale factor f of thumbnail(): the smallest with max(height, width) / f <= max_side; the
    thumbnail is (height // f, width // f) px (the image itself when f is 1)."""
    return max(1, -(-max(height, width) // max_side))


def thumbnail(image, max_side: int = 320) -> np.ndarray:
    """Downscale (H, W, C) uint8 (or an Indexed image's RGB) by an integer factor (area average) so the longer side
    is <= max_side."""
    H, W = image.shape[:2]
    f = thumbnail_factor(H, W, max_side)
    if isinstance(image, Indexed):
        if 1 < f <= 16 and f % 2 == 0 and len(image.palette) <= 256:
            return _thumbnail_pairs(image, f)
        return thumbnail(image.rgbx(), max_side)[..., :3]  # (the area average of each channel: the zero 4th dropped)
    if f == 1:
        return image
    h, w = H // f, W // f
    rows = image[0:h * f:f, :w * f].astype(np.uint16 if f * f * 255 <= 0xFFFF else np.uint32)
    for i in range(1, f):                           # sum f rows (contiguous runs), then f columns of the sums
        rows += image[i:h * f:f, :w * f]
    acc = rows[:, 0::f].copy()
    for j in range(1, f):
        acc += rows[:, j::f]
    return ((acc + (f * f) // 2) // (f * f)).astype(np.uint8)


def _thumbnail_pairs(image: Indexed, f: int) -> np.ndarray:
    """thumbnail() of an Indexed image of at most 256 colours for an even factor f, by one lookup per two pixels: the
    byte indices of two horizontal neighbours read as one uint16 pick the sum of their two colours from a 65536-entry
    table, each channel in its own 16-bit lane of a uint64 (at most f * f * 255 <= 65535 in a lane for f <= 16, so
    the lanes never carry); then the same row and column sums and rounding as for an RGB image."""
    H, W = image.index.shape
    h, w = H // f, W // f
    words = np.zeros(256, dtype=np.uint64)
    words.view(np.uint16).reshape(-1, 4)[:len(image.palette), :3] = image.palette
    table = (words[:, None] + words[None, :]).ravel()        # [a + 256 b] = colour a + colour b (symmetric)
    index = np.ascontiguousarray(image.index[:h * f, :w * f], dtype=np.uint8)
    pairs = np.take(table, index.view(np.uint16))            # (h f, w f / 2)
    rows = pairs[0::f].copy()
    for i in range(1, f):
        rows += pairs[i::f]
    acc = rows[:, 0::f // 2].copy()
    for j in range(1, f // 2):
        acc += rows[:, j::f // 2]
    sums = acc.view(np.uint16).reshape(h, w, 4)[..., :3]
    return ((sums + (f * f) // 2) // (f * f)).astype(np.uint8)


def upscale(image: np.ndarray, min_side: int) -> np.ndarray:
    """Nearest-neighbour enlargement by an integer factor so the shorter side is >= min_side (tiny images)."""
    f = max(1, -(-min_side // min(image.shape[:2])))
    return image if f == 1 else np.repeat(np.repeat(image, f, axis=0), f, axis=1)
