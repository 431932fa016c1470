"""Colour for overlays: a perceptually ordered colour map (viridis anchors: luminance rises monotonically),
colour bars, the Middlebury flow colour wheel, id colours, normals, scene-linear -> sRGB, and drawing
primitives (lines, points, boxes, contours) on (H, W, 3) uint8 images; pixel (u, v) = column u, row v
(OpenCV: centres at integers)."""
from __future__ import annotations

import functools

import numpy as np

from rowbeam.report.png import Indexed

# viridis sampled at 0, 1/9, ..., 1 (matplotlib's published table); interpolated linearly in RGB
VIRIDIS = np.array([[68, 1, 84], [72, 40, 120], [62, 73, 137], [49, 104, 142], [38, 130, 142],
                    [31, 158, 137], [53, 183, 121], [110, 206, 88], [181, 222, 43], [253, 231, 37]], dtype=np.float64)
NO_DATA = np.array([40, 40, 40], dtype=np.uint8)     # invalid / NaN pixels


def luminance(rgb) -> np.ndarray:
    """Rec. 709 luma of uint8 or float RGB (..., 3)."""
    rgb = np.asarray(rgb, dtype=np.float64)
    return rgb[..., 0] * 0.2126 + rgb[..., 1] * 0.7152 + rgb[..., 2] * 0.0722


def lut(n: int = 256) -> np.ndarray:
    """(n, 3) uint8 colour map table, index 0 = low."""
    x = np.linspace(0, len(VIRIDIS) - 1, n)
    i = np.minimum(np.floor(x).astype(int), len(VIRIDIS) - 2)
    f = (x - i)[:, None]
    return np.rint(VIRIDIS[i] * (1 - f) + VIRIDIS[i + 1] * f).astype(np.uint8)


_LUT = lut()
_LUT_NO_DATA = np.concatenate([_LUT, NO_DATA[None]])     # index 256 = no data: one lookup colours every pixel


def _distinct_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(palette, to_palette): the distinct rows of table in first-seen order, and each row's index among them
    (uint8: at most 256 distinct rows), so palette[to_palette] == table."""
    _, first, inverse = np.unique(table, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return table[first[order]], rank[inverse.ravel()].astype(np.uint8)


# the 257 colours of _LUT_NO_DATA as a palette of distinct colours (rounding makes two neighbours of lut() equal)
_PALETTE, _TO_PALETTE = _distinct_rows(_LUT_NO_DATA)
# lut() row k (< 256) is palette entry k - (the number of repeats at rows <= k: a row equal to the row before it)
_REPEATS = [int(k) for k in np.flatnonzero(np.diff(_TO_PALETTE[:len(_LUT)].astype(np.int16)) == 0) + 1]


def normalise(values, lo: float, hi: float, log: bool = False) -> np.ndarray:
    """values -> [0, 1] (clipped), linearly or in log10 (lo > 0); NaN stays NaN."""
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        if log:
            lo, hi = np.log10(max(lo, 1e-12)), np.log10(max(hi, lo * (1 + 1e-9), 1e-12))
            v = np.log10(np.where(v > 0, v, np.nan))
        t = (v - lo) / (hi - lo) if hi > lo else np.zeros_like(v)
    return np.where(np.isfinite(t), np.clip(t, 0.0, 1.0), np.nan)


BLOCK = 1 << 16      # pixels per block of colourise: its float64 working copy stays in cache and is reused


def colourise(values, lo: float, hi: float, log: bool = False, mask=None) -> np.ndarray:
    """Scalar image (H, W) -> (H, W, 3) uint8 with the colour map over [lo, hi]: colour_indices(...).rgb()."""
    return colour_indices(values, lo, hi, log, mask).rgb()


def colour_indices(values, lo: float, hi: float, log: bool = False, mask=None) -> Indexed:
    """Scalar image (H, W) -> Indexed image (palette of the 256 distinct colours of the map and NO_DATA) with the
    colour map over [lo, hi] (the 256-entry table of lut(), index rint(255 t), t = normalise(values)); NaN, values
    <= 0 with log, or ~mask -> NO_DATA. Computed block by block of BLOCK pixels in one reused float64 buffer
    (element by element: the same indices as the whole image)."""
    v = np.asarray(values)
    flat = v.reshape(-1)
    keep = None if mask is None else np.asarray(mask, dtype=bool).reshape(-1)
    if log:
        lo, hi = np.log10(max(lo, 1e-12)), np.log10(max(hi, lo * (1 + 1e-9), 1e-12))
    scale = 255.0 / (hi - lo) if hi > lo else 0.0
    out = np.empty(flat.size, dtype=np.uint8)
    t_buf, ok_buf = np.empty(min(BLOCK, flat.size)), np.empty(min(BLOCK, flat.size), dtype=bool)
    step_buf = np.empty(min(BLOCK, flat.size), dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        for start in range(0, flat.size, BLOCK):
            part = slice(start, min(start + BLOCK, flat.size))
            n = part.stop - part.start
            t, ok = t_buf[:n], ok_buf[:n]
            if log:
                np.log10(flat[part], out=t, dtype=np.float64)   # <= 0 -> -inf or NaN: not finite, no data
                t -= lo
            else:
                np.subtract(flat[part], lo, out=t, dtype=np.float64)
            t *= scale
            np.isfinite(t, out=ok)
            if keep is not None:
                ok &= keep[part]
            np.clip(t, 0.0, 255.0, out=t)
            np.rint(t, out=t)
            index = out[part]
            index[...] = t                          # the lut() row (no-data pixels: any row here, NO_DATA's below)
            for k in _REPEATS:                      # lut() row -> palette entry
                np.subtract(index, np.greater_equal(index, k, out=step_buf[:n]), out=index)
            np.logical_not(ok, out=ok)
            np.copyto(index, _TO_PALETTE[len(_LUT)], where=ok)
    return Indexed(out.reshape(v.shape), _PALETTE)


def percentiles(values, q, is_sorted: bool = False) -> np.ndarray:
    """np.percentile(values as float64, q) of finite values (method 'linear'): the same float64 numbers, with the
    order statistics around each percentile (order_statistics, in the values' own dtype: a float32 image is half the
    bytes of a float64 copy) interpolated as numpy does: a + (b - a) g, from g = 0.5 on b - (b - a)(1 - g).
    is_sorted: values are already ascending (read off them)."""
    v = np.asarray(values).ravel()
    n = v.size
    virtual = (n - 1) * (np.asarray(q, dtype=np.float64) / 100.0)
    below = np.minimum(np.floor(virtual), n - 1)
    i0, i1 = below.astype(np.intp), np.minimum(below + 1, n - 1).astype(np.intp)
    if is_sorted:
        a, b = v[i0].astype(np.float64), v[i1].astype(np.float64)
    else:
        a, b = np.split(order_statistics(v, np.concatenate([i0, i1])).astype(np.float64), 2)
    g = virtual - below
    diff = b - a
    return np.where(g >= 0.5, b - diff * (1 - g), a + diff * g)


SAMPLE_STRIDE = 64      # order_statistics: every 64th value, sorted, places its thresholds


def order_statistics(values, ranks) -> np.ndarray:
    """np.sort(values)[ranks] of 1-D values without NaN, with only the values beyond a threshold sorted when every rank
    lies in the lowest or highest few percent (the 1 and 99 % of a colour range: numpy's vectorised sort of those is
    faster than a partition, or a sort of the whole image). The thresholds are values of a strided sample a margin
    past the ranks; the values up to the lower one are the smallest order statistics exactly once they are more than
    the ranks asked below it (likewise above); else, or for ranks in between, the whole array is sorted."""
    v = np.asarray(values).ravel()
    r = np.asarray(ranks, dtype=np.intp)
    n = v.size
    margin = n // 200 + SAMPLE_STRIDE               # ranks past the asked ones (~6 sigma of the sample's rank error)
    low = r < n // 2
    if n < 64 * SAMPLE_STRIDE or (low.any() and r[low].max() >= n // 16) or ((~low).any() and r[~low].min() < n - n // 16):
        return np.sort(v)[r]
    sample = np.sort(v[::SAMPLE_STRIDE])
    out = np.empty(r.size, dtype=v.dtype)
    if low.any():
        part = v[v <= sample[min(sample.size - 1, (r[low].max() + margin) // SAMPLE_STRIDE)]]
        if part.size <= r[low].max():
            return np.sort(v)[r]
        part.sort()
        out[low] = part[r[low]]
    if (~low).any():
        part = v[v >= sample[max(0, (r[~low].min() - margin) // SAMPLE_STRIDE)]]
        first = n - part.size                     # the rank of part's smallest value
        if first > r[~low].min():
            return np.sort(v)[r]
        part.sort()
        out[~low] = part[r[~low] - first]
    return out


def robust_range(values, log: bool = False, q=(1.0, 99.0), is_sorted: bool = False) -> tuple[float, float]:
    """(lo, hi) percentiles of the finite (and, with log, positive) values; (0, 1) when there are none.
    is_sorted: values are ascending (NaN last, as np.sort puts them)."""
    v = np.asarray(values).ravel()
    keep = np.isfinite(v)
    if log:
        keep &= v > 0
    if not keep.all():
        v = v[keep]
    if v.size == 0:
        return (1e-3, 1.0) if log else (0.0, 1.0)
    lo, hi = percentiles(v, q, is_sorted)         # (a subset of an ascending array is ascending)
    if hi <= lo:
        hi = lo + (abs(lo) * 1e-3 or 1.0)
    return float(lo), float(hi)


@functools.cache
def colour_bar(width: int = 256, height: int = 16) -> np.ndarray:
    """(height, width, 3) uint8 horizontal bar, low on the left; one read-only array per size (the report's Writer
    encodes it once)."""
    bar = np.repeat(lut(width)[None], height, axis=0)
    bar.flags.writeable = False
    return bar


# diverging map for signed radial velocity (ColorBrewer RdBu anchors at -1, -1/2, 0, 1/2, 1): approaching
# (v_r < 0, range shrinking) blue, receding (v_r > 0) red, zero near white
VELOCITY = np.array([[33, 102, 172], [146, 197, 222], [247, 247, 247], [244, 165, 130], [178, 24, 43]],
                    dtype=np.float64)


def velocity_colour(v, v_max: float) -> np.ndarray:
    """Signed values (...,) (m/s, positive = receding) -> (..., 3) uint8 on the VELOCITY map over [-v_max, v_max]
    (clipped; linear between anchors); NaN -> NO_DATA."""
    x = np.asarray(v, dtype=np.float64)
    ok = np.isfinite(x)
    t = (np.clip(np.where(ok, x, 0.0) / max(float(v_max), 1e-12), -1.0, 1.0) + 1.0) * 2.0   # 0..4
    i = np.minimum(np.floor(t).astype(int), len(VELOCITY) - 2)
    f = (t - i)[..., None]
    out = np.rint(VELOCITY[i] * (1 - f) + VELOCITY[i + 1] * f).astype(np.uint8)
    out[~ok] = NO_DATA
    return out


def velocity_bar(width: int = 256, height: int = 16) -> np.ndarray:
    """(height, width, 3) uint8 bar of velocity_colour, -v_max on the left, +v_max on the right."""
    return np.repeat(velocity_colour(np.linspace(-1.0, 1.0, width), 1.0)[None], height, axis=0)


def ticks(lo: float, hi: float, log: bool, n: int = 5) -> list[tuple[float, float]]:
    """[(position 0..1 along the bar, value)] for n evenly placed labels."""
    pos = np.linspace(0, 1, n)
    if log:
        vals = 10 ** (np.log10(lo) + pos * (np.log10(hi) - np.log10(lo)))
    else:
        vals = lo + pos * (hi - lo)
    return [(float(p), float(v)) for p, v in zip(pos, vals, strict=True)]


def _flow_wheel() -> np.ndarray:
    """Baker et al. (Middlebury) colour wheel: 55 colours, (55, 3) float 0..255."""
    RY, YG, GC, CB, BM, MR = 15, 6, 4, 11, 13, 6
    wheel, col = np.zeros((RY + YG + GC + CB + BM + MR, 3)), 0
    for n, a, b, rising in ((RY, 0, 1, True), (YG, 1, 0, False), (GC, 1, 2, True), (CB, 2, 1, False),
                            (BM, 2, 0, True), (MR, 0, 2, False)):
        ramp = np.floor(255 * np.arange(n) / n)
        wheel[col:col + n, a] = 255
        wheel[col:col + n, b] = ramp if rising else 255 - ramp
        if not rising:
            wheel[col:col + n, a] = 255 - ramp
            wheel[col:col + n, b] = 255
        col += n
    return wheel


WHEEL = _flow_wheel()


def flow_colour(flow, max_magnitude: float | None = None, mask=None) -> np.ndarray:
    """(H, W, 2) px flow (u right, v down) -> (H, W, 3) uint8 Middlebury colours: hue = direction
    (u>0 red-ish ... as in the Middlebury wheel), saturation = |flow| / max_magnitude; NaN or ~mask -> NO_DATA."""
    f = np.asarray(flow, dtype=np.float64)
    u, v = f[..., 0], f[..., 1]
    ok = np.isfinite(u) & np.isfinite(v)
    if mask is not None:
        ok &= np.asarray(mask, dtype=bool)
    mag = np.hypot(np.where(ok, u, 0), np.where(ok, v, 0))
    if max_magnitude is None:
        max_magnitude = float(mag[ok].max()) if ok.any() else 1.0
    max_magnitude = max(max_magnitude, 1e-9)
    rad = np.clip(mag / max_magnitude, 0, 1)
    a = np.arctan2(-np.where(ok, v, 0), -np.where(ok, u, 0)) / np.pi
    fk = (a + 1) / 2 * (len(WHEEL) - 1)
    k0 = np.floor(fk).astype(int)
    k1 = (k0 + 1) % len(WHEEL)
    frac = (fk - k0)[..., None]
    col = ((1 - frac) * WHEEL[k0] + frac * WHEEL[k1]) / 255.0
    col = 1 - rad[..., None] * (1 - col)
    out = np.rint(col * 255).astype(np.uint8)
    out[~ok] = NO_DATA
    return out


def flow_wheel_legend(size: int = 96) -> np.ndarray:
    """(size, size, 3) uint8 key of flow_colour: pixel (u, v) shows the flow (u - c, v - c), c = centre."""
    c = (size - 1) / 2
    v, u = np.mgrid[0:size, 0:size].astype(np.float64)
    f = np.stack([u - c, v - c], -1)
    inside = np.hypot(*(f.transpose(2, 0, 1))) <= c
    out = flow_colour(f, c, inside)
    out[~inside] = 255
    return out


def id_colours(ids) -> np.ndarray:
    """Integer ids (...,) -> (..., 3) uint8 distinct colours from a hash; id 0 (background) black,
    0xFFFFFFFF (void) white."""
    ids = np.asarray(ids).astype(np.uint64)
    h = (ids * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    hue = (h & np.uint64(0xFFFF)).astype(np.float64) / 65536.0
    sat = 0.55 + 0.45 * ((h >> np.uint64(16)) & np.uint64(0xFF)).astype(np.float64) / 255.0
    out = hsv_to_rgb(hue, sat, np.full(hue.shape, 0.95))
    out[ids == 0] = 0
    out[ids == 0xFFFFFFFF] = 255
    return out


def hsv_to_rgb(h, s, v) -> np.ndarray:
    """Arrays in [0, 1] -> (..., 3) uint8."""
    i = np.floor(h * 6).astype(int) % 6
    f = h * 6 - np.floor(h * 6)
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    r = np.choose(i, [v, q, p, p, t, v])
    g = np.choose(i, [t, v, v, q, p, p])
    b = np.choose(i, [p, p, t, v, v, q])
    return np.rint(np.stack([r, g, b], -1) * 255).astype(np.uint8)


def normal_colour(normals, finite=None) -> np.ndarray:
    """Unit vectors (camera frame), as an (H, W, 3) array or its 3 channel planes (H, W) (rowbeam.bundle.arrays.
    channel_planes: no interleaved copy needed), -> (H, W, 3) uint8 RGB = (n + 1) / 2 (x red, y green, z blue); NaN
    -> NO_DATA. finite: the (H, W) bool mask of the pixels with every channel finite, when the caller already knows
    it (the checker's validity contract: finite exactly where valid)."""
    if isinstance(normals, (list, tuple)):
        planes = [np.asarray(p, dtype=np.float32) for p in normals]
    else:
        n = np.asarray(normals, dtype=np.float32)
        planes = [n[..., c] for c in range(n.shape[-1])]
    shape = planes[0].shape
    flats = [p.reshape(-1) for p in planes]            # (views, strided for an interleaved array's channels)
    size = flats[0].size
    out = np.empty((size, len(flats)), dtype=np.uint8)
    buf = np.empty(min(BLOCK, size), dtype=np.float32)  # float32 working copy of a block of one channel, reused
    with np.errstate(invalid="ignore"):               # NaN pixels: any byte here, NO_DATA below
        for start in range(0, size, BLOCK):
            part = slice(start, min(start + BLOCK, size))
            t = buf[:part.stop - part.start]
            for c, flat in enumerate(flats):
                _normal_bytes(flat[part], t, out[part, c])
    if finite is not None:
        ok = np.asarray(finite, dtype=bool)
    else:
        ok = np.isfinite(planes[0])
        for p in planes[1:]:
            ok &= np.isfinite(p)
    out[np.flatnonzero(~ok.reshape(-1))] = NO_DATA
    return out.reshape(*shape, len(flats))


def _normal_bytes(x, t, out) -> None:
    """out[...] = normal_colour's byte of each float32 normal component in x (NaN: any byte), through the float32
    buffer t of x's size: clip(x, -1, 1) * 127.5 + 128 in float32, truncated (= rint((x + 1) / 2 * 255))."""
    np.clip(x, -1.0, 1.0, out=t)
    t *= np.float32(127.5)
    t += np.float32(128.0)
    out[...] = t


def same_normal_colours(a, b, finite) -> bool:
    """Whether normal_colour(a, finite) == normal_colour(b, finite), for the channel planes a and b of two normal
    images of one shape that are both finite exactly at `finite` (the checker's validity contract): the bytes are
    computed only where the float values differ (equal values, -0 and +0 included, give equal bytes; off `finite`
    both images are NO_DATA)."""
    keep = np.asarray(finite, dtype=bool).reshape(-1)
    with np.errstate(invalid="ignore"):
        for pa, pb in zip(a, b, strict=True):
            fa, fb = np.asarray(pa, dtype=np.float32).reshape(-1), np.asarray(pb, dtype=np.float32).reshape(-1)
            idx = np.flatnonzero(np.logical_and(fa != fb, keep))
            t, bytes_a, bytes_b = np.empty(idx.size, np.float32), np.empty(idx.size, np.uint8), np.empty(idx.size, np.uint8)
            _normal_bytes(fa[idx], t, bytes_a)
            _normal_bytes(fb[idx], t, bytes_b)
            if not np.array_equal(bytes_a, bytes_b):
                return False
    return True


def srgb(linear, exposure: float = 1.0) -> np.ndarray:
    """Scene-linear RGB (..., 3) -> 8-bit sRGB (IEC 61966-2-1 transfer), clipped; NaN -> 0."""
    x = np.clip(np.nan_to_num(np.asarray(linear, dtype=np.float64) * exposure), 0.0, 1.0)
    y = np.where(x <= 0.0031308, 12.92 * x, 1.055 * np.power(x, 1 / 2.4) - 0.055)
    return np.rint(y * 255).astype(np.uint8)


# drawing -----------------------------------------------------------------------------------------------

def segment_pixels(p0, p1) -> np.ndarray:
    """(N, 2) int64 pixels (u, v) of the segment between continuous pixel coordinates p0 = (u, v) and p1: samples
    every half pixel (at most 20000), rounded; none when an end is not finite."""
    (u0, v0), (u1, v1) = p0, p1
    if not np.all(np.isfinite([u0, v0, u1, v1])):
        return np.zeros((0, 2), dtype=np.int64)
    n = int(max(abs(u1 - u0), abs(v1 - v0), 1) * 2) + 1
    n = min(n, 20000)
    t = np.linspace(0, 1, n)
    u = np.rint(u0 + t * (u1 - u0)).astype(np.int64)
    v = np.rint(v0 + t * (v1 - v0)).astype(np.int64)
    return np.stack([u, v], -1)


def draw_line(img: np.ndarray, p0, p1, colour, width: int = 1) -> None:
    """Draw the segment between continuous pixel coordinates p0 = (u, v) and p1 in place (clipped)."""
    draw_points(img, segment_pixels(p0, p1), colour, radius=(width - 1) // 2)


def draw_points(img: np.ndarray, uv, colours, radius: int = 0) -> None:
    """Set the pixel nearest to each (u, v) (and a (2r+1)^2 square around it) to its colour; off-image points
    are skipped. colours: one (3,) colour or (N, 3)."""
    H, W = img.shape[:2]
    uv = np.asarray(uv, dtype=np.float64).reshape(-1, 2)
    cols = np.broadcast_to(np.asarray(colours, dtype=np.uint8), (len(uv), 3))
    ok = np.isfinite(uv).all(-1)
    u = np.rint(uv[ok, 0]).astype(np.int64)
    v = np.rint(uv[ok, 1]).astype(np.int64)
    cols = cols[ok]
    for du in range(-radius, radius + 1):
        for dv in range(-radius, radius + 1):
            uu, vv = u + du, v + dv
            inside = (uu >= 0) & (uu < W) & (vv >= 0) & (vv < H)
            img[vv[inside], uu[inside]] = cols[inside]


def draw_box(img: np.ndarray, box_xywh, colour) -> None:
    """Outline of an inclusive pixel box [x, y, w, h] with w = x_max - x_min + 1 (rowbeam's box convention)."""
    x, y, w, h = box_xywh
    x1, y1 = x + w - 1, y + h - 1
    sides = (((x, y), (x1, y)), ((x1, y), (x1, y1)), ((x1, y1), (x, y1)), ((x, y1), (x, y)))
    draw_points(img, np.concatenate([segment_pixels(a, b) for a, b in sides]), colour)   # one colour: one call


def contour(mask) -> np.ndarray:
    """(H, W) bool: mask pixels with a 4-neighbour outside the mask (or on the image border)."""
    m = np.asarray(mask, dtype=bool)
    inner = np.zeros_like(m)                        # border pixels have a neighbour outside: never inner
    inner[1:-1, 1:-1] = m[:-2, 1:-1] & m[2:, 1:-1] & m[1:-1, :-2] & m[1:-1, 2:]
    return m & ~inner
