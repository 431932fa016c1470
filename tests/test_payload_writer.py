"""Payload files written on worker threads (exporter.manifest.PayloadWriter; no Blender): the files and the
modalities table are those of one-by-one writes, arrays handed over early are frozen, and errors surface."""
import hashlib

import numpy as np
import pytest

from contracts.arrays import decode_payload
from exporter import manifest
from exporter.manifest import PayloadWriter, write_payload_file, write_payloads

KIND, SENSOR, DIMS = "rolling_shutter_camera", "cam", {"W": 40, "H": 24}


def _arrays(seed=5):
    rng = np.random.default_rng(seed)
    z = rng.uniform(1.0, 80.0, (24, 40)).astype(np.float32)
    z[rng.random((24, 40)) < 0.2] = np.nan
    n = rng.normal(size=(24, 40, 3)).astype(np.float32)
    return {"row_time_ns": np.arange(24, dtype=np.int64) * 1000, "camera_z": z, "range": z * np.float32(1.1),
            "normal_geometric": n, "valid": (~np.isnan(z)).astype(np.uint8),
            "instance_id": rng.integers(0, 9, (24, 40)).astype(np.uint32)}


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_threaded_and_early_writes_equal_one_by_one(tmp_path):
    arrays = _arrays()
    one = tmp_path / "one"
    one.mkdir()
    sequential = {}
    for name, a in arrays.items():         # the plain sequential writer, file by file
        entry = manifest.MODALITIES[KIND][name].entry(SENSOR, DIMS, 7)
        entry.update(write_payload_file(one, name, a, KIND))
        sequential[name] = entry
    threaded, early = tmp_path / "threaded", tmp_path / "early"
    threaded.mkdir()
    early.mkdir()
    table = write_payloads(threaded, arrays, KIND, SENSOR, DIMS, 7)
    with PayloadWriter(early, KIND) as w:
        w.submit({k: arrays[k] for k in ("camera_z", "normal_geometric")})
        assert not arrays["camera_z"].flags.writeable          # frozen: what is written is what the event holds
        early_table = write_payloads(early, arrays, KIND, SENSOR, DIMS, 7, started=w)
    assert list(table) == list(early_table) == list(arrays)
    assert table == sequential == early_table
    for name, entry in table.items():
        for folder in (one, threaded, early):
            assert _sha(folder / entry["uri"]) == entry["sha256"]
        back = decode_payload(early / entry["uri"], entry)
        assert np.array_equal(back, arrays[name], equal_nan=True)


def test_an_array_replaced_after_handover_or_a_failed_write_is_refused(tmp_path, monkeypatch):
    arrays = _arrays()
    with PayloadWriter(tmp_path, KIND) as w:
        w.submit({"camera_z": arrays["camera_z"]})
        with pytest.raises(ValueError, match="camera_z"):
            w.finish({**arrays, "camera_z": arrays["camera_z"].copy()}, SENSOR, DIMS, 7)

    def full_disk(path, *a, **k):
        if path.name == "range.exr":
            raise RuntimeError(f"{path}: No space left on device")
        return real(path, *a, **k)

    real = manifest.write_exr
    monkeypatch.setattr(manifest, "write_exr", full_disk)
    out = tmp_path / "full"
    out.mkdir()
    with pytest.raises(RuntimeError, match="No space left"):
        write_payloads(out, _arrays(), KIND, SENSOR, DIMS, 7)
    assert (out / "camera_z.exr").is_file()          # the other files were finished before the error was raised
