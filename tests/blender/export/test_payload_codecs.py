"""Payload encodings (rowbeam.bundle.arrays; writer rowbeam.blender.export.manifest.write_payload_file, no Blender):
every modality of every sensor type and flow decodes bit for bit as written, hard values included (NaN payloads,
-0, subnormals, inf, the largest ids); the file bytes are reproducible; the one lossy option (rgb as HALF) is
declared and refused where undeclared; an .npz that would inflate beyond its declared shape is refused; files in
the earlier encoding (ZIP EXR, plain .npy) read the same."""
import json
import zipfile
import zlib

import numpy as np
import OpenEXR
import pytest

from rowbeam.blender.export.manifest import write_payload_file
from rowbeam.bundle import arrays as codecs
from rowbeam.bundle.reader import read_payload
from rowbeam.sensors import MODALITIES
from rowbeam.util.errors import RowbeamError

DIMS = {"W": 37, "H": 21, "Wp": 5, "Hc": 63, "Wcp": 14, "O": 3, "T": 2, "M": 2, "F": 19, "C": 7, "G": 2, "K": 9,
        "B": 6, "N": 23, "L": 2, "S": 4}
SENSOR = "s"


def _hard_floats(rng, shape, dtype) -> np.ndarray:
    """Smooth values with NaN (two payloads), -0, subnormals, +-inf and extremes planted in."""
    a = (np.cumsum(rng.normal(size=shape), axis=0) + 5.0).astype(dtype)
    flat = a.reshape(-1)
    if flat.size >= 12:
        specials = np.array([np.nan, -0.0, np.inf, -np.inf, np.finfo(dtype).tiny / 4, np.finfo(dtype).max,
                             -np.finfo(dtype).max, np.finfo(dtype).eps], dtype)
        flat[:specials.size] = specials
        bits = flat.view(np.uint32 if dtype == np.float32 else np.uint64)
        bits[specials.size] = 0x7FC12345 if dtype == np.float32 else 0x7FF8000000012345   # NaN with a payload
    return a


def _synthetic(spec, rng) -> np.ndarray:
    shape = tuple(spec.concrete_shape(DIMS))
    dtype = spec.numpy_dtype()
    if dtype.names:
        a = np.zeros(shape, dtype)
        for field in dtype.names:
            a[field] = _synthetic_plain(np.dtype(dtype[field]), shape, rng)
        return a
    return _synthetic_plain(dtype, shape, rng)


def _synthetic_plain(dtype, shape, rng) -> np.ndarray:
    if dtype.kind == "f":
        return _hard_floats(rng, shape, dtype.type)
    if dtype == np.uint8:
        return rng.integers(0, 256, shape, dtype=np.uint8)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    a.reshape(-1)[:2] = (info.min, info.max)
    return a


CASES = [(kind, name) for kind, table in MODALITIES.items() for name in table]


@pytest.mark.parametrize("kind,name", CASES, ids=[f"{k}:{n}" for k, n in CASES])
def test_every_modality_decodes_bit_identical(tmp_path, kind, name):
    spec = MODALITIES[kind][name]
    array = _synthetic(spec, np.random.default_rng(zlib.crc32(f"{kind}:{name}".encode())))
    fields = write_payload_file(tmp_path, name, array, kind)
    entry = {**spec.entry(SENSOR, DIMS, 7), **fields}
    back = read_payload(tmp_path, entry)
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == array.tobytes()
    if spec.channels:
        assert fields["storage"]["compression"] == codecs.exr_compression(name) and "lossy" not in fields["storage"]
    else:
        assert entry["format"] == "npz" and np.load(tmp_path / entry["uri"])["array"].tobytes() == array.tobytes()


def test_file_bytes_are_reproducible(tmp_path):
    rng = np.random.default_rng(3)
    rgb = _hard_floats(rng, (21, 37, 3), np.float32)
    masks = rng.integers(0, 256, (3, 21, 5), dtype=np.uint8)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    kind = "rolling_shutter_camera"
    for name, arr in (("rgb", rgb), ("amodal_masks", masks)):
        assert write_payload_file(a, name, arr, kind)["sha256"] == write_payload_file(b, name, arr, kind)["sha256"]


def test_every_lossless_compression_keeps_every_bit(tmp_path):
    rng = np.random.default_rng(4)
    planes = {"f": _hard_floats(rng, (33, 40), np.float32),
              "u": rng.integers(0, 2**32, (33, 40), dtype=np.uint64).astype(np.uint32)}
    for compression in codecs.LOSSLESS_EXR:
        for key, dtype in (("f", "float32"), ("u", "uint32")):
            path = tmp_path / f"{compression}_{key}.exr"
            storage = codecs.write_exr(path, planes[key], ["Y"], dtype, encoding={"compression": compression})
            back = codecs.decode_exr(path, ["Y"], dtype, storage=storage)
            assert back.tobytes() == planes[key].tobytes(), compression


def test_lossy_half_rgb_is_declared_and_decodes_as_float32(tmp_path):
    rgb = np.random.default_rng(5).uniform(0, 70000, (21, 37, 3)).astype(np.float32)
    kind, spec = "rolling_shutter_camera", MODALITIES["rolling_shutter_camera"]["rgb"]
    fields = write_payload_file(tmp_path, "rgb", rgb, kind, lossy={"rgb": "HALF"})
    assert fields["storage"]["pixel_type"] == "HALF" and "half" in fields["storage"]["lossy"]
    entry = {**spec.entry(SENSOR, DIMS, 7), **fields}
    back = read_payload(tmp_path, entry)
    assert back.dtype == np.float32
    with np.errstate(over="ignore"):
        assert back.tobytes() == rgb.astype(np.float16).astype(np.float32).tobytes()
    assert not np.array_equal(back, rgb)
    undeclared = {**entry, "storage": {k: v for k, v in entry["storage"].items() if k != "lossy"}}
    with pytest.raises(RowbeamError, match="stored as float16"):
        read_payload(tmp_path, undeclared)
    with pytest.raises(ValueError, match="unsupported encoding"):
        write_payload_file(tmp_path, "camera_z", rgb[..., 0], kind, lossy={"camera_z": "UINT"})


def test_lossy_exr_compressions_are_never_written(tmp_path):
    with pytest.raises(ValueError, match="unsupported encoding"):
        codecs.write_exr(tmp_path / "x.exr", np.zeros((4, 4), np.float32), ["Y"], "float32",
                         encoding={"compression": "PXR24"})
    assert not {"PXR24", "B44", "B44A", "DWAA", "DWAB", "LJ2K"} & set(codecs.LOSSLESS_EXR)


def _npz_with(path, members: dict) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)


def test_npz_refuses_bombs_and_extra_members(tmp_path):
    import io

    buf = io.BytesIO()
    np.save(buf, np.zeros(1 << 20, np.uint8))                 # inflates to 1 MiB; the manifest declares 8 bytes
    bomb, extra = tmp_path / "bomb.npz", tmp_path / "extra.npz"
    _npz_with(bomb, {codecs.NPZ_MEMBER: buf.getvalue()})
    _npz_with(extra, {codecs.NPZ_MEMBER: buf.getvalue(), "other.npy": b""})
    with pytest.raises(RowbeamError, match="inflates to"):
        codecs.decode_npz(bomb, np.dtype("uint8"), [8])
    assert codecs.decode_npz(bomb, np.dtype("uint8"), [1 << 20]).shape == (1 << 20,)
    with pytest.raises(RowbeamError, match="exactly one member"):
        codecs.decode_npz(extra, np.dtype("uint8"), [1 << 20])
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(RowbeamError, match="unreadable .npz"):
        codecs.decode_npz(tmp_path / "junk.npz", np.dtype("uint8"), [8])


def test_earlier_encoding_zip_exr_and_plain_npy_still_reads(tmp_path):
    """A bundle written before: EXR with ZIP and storage {pixel_type, compression: ZIP, line_order}, tables as .npy."""
    rng = np.random.default_rng(6)
    z = _hard_floats(rng, (21, 37), np.float32)
    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    with OpenEXR.File(header, {"camera_z": z}) as f:
        f.write(str(tmp_path / "camera_z.exr"))
    t = np.arange(21, dtype=np.int64) * 12345
    np.save(tmp_path / "row_time_ns.npy", t)
    cam = MODALITIES["rolling_shutter_camera"]
    for name, uri, arr in (("camera_z", "camera_z.exr", z), ("row_time_ns", "row_time_ns.npy", t)):
        entry = {**cam[name].entry(SENSOR, DIMS, 7), "uri": uri, "storage": json.loads(json.dumps(
            {"pixel_type": "FLOAT", "compression": "ZIP"} if name == "camera_z" else {"byte_order": "little"}))}
        assert read_payload(tmp_path, entry, verify=False).tobytes() == arr.tobytes()
