"""Payload files written on worker threads (rowbeam.blender.export.manifest.PayloadWriter; no Blender): the files and the
modalities table are those of one-by-one writes, arrays handed over early are frozen, and errors surface."""
import hashlib

import numpy as np
import pytest

from rowbeam.bundle.arrays import decode_payload
from rowbeam.blender.export import manifest
from rowbeam.blender.export.manifest import PayloadWriter, write_payload_file, write_payloads

KIND, SENSOR, DIMS = "rolling_shutter_camera", "cam", {"W": 40, "H": 24}


def _arrays(seed=5, h=24, w=40):
    rng = np.random.default_rng(seed)
    z = rng.uniform(1.0, 80.0, (h, w)).astype(np.float32)
    z[rng.random((h, w)) < 0.2] = np.nan
    n = rng.normal(size=(h, w, 3)).astype(np.float32)
    return {"row_time_ns": np.arange(h, dtype=np.int64) * 1000, "camera_z": z, "range": z * np.float32(1.1),
            "normal_geometric": n, "valid": (~np.isnan(z)).astype(np.uint8),
            "instance_id": rng.integers(0, 9, (h, w)).astype(np.uint32)}


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


def test_openexr_threads_decode_the_same_arrays_and_restore_the_pool(tmp_path):
    import OpenEXR

    from rowbeam.bundle.arrays import read_exr_channels
    from rowbeam.util.worker_threads import openexr_threads

    arrays = _arrays(h=200, w=64)           # 13 ZIP line blocks per plane: decoded on the pool's threads
    table = write_payloads(tmp_path, arrays, KIND, SENSOR, {"W": 64, "H": 200}, 7)
    before = OpenEXR.global_thread_count()
    plain = {k: read_exr_channels(tmp_path / e["uri"])[0] for k, e in table.items() if e["uri"].endswith(".exr")}
    with openexr_threads(3):
        assert OpenEXR.global_thread_count() == 3
        threaded = {k: read_exr_channels(tmp_path / e["uri"])[0] for k, e in table.items() if e["uri"].endswith(".exr")}
    assert OpenEXR.global_thread_count() == before
    for k in plain:
        assert plain[k].keys() == threaded[k].keys()
        for c in plain[k]:
            assert plain[k][c].dtype == threaded[k][c].dtype
            assert np.array_equal(plain[k][c], threaded[k][c], equal_nan=True), (k, c)


def test_a_withdrawn_array_is_written_again_as_the_final_one(tmp_path):
    arrays = _arrays()
    first = {"camera_z": arrays["camera_z"] * np.float32(2.0)}
    with PayloadWriter(tmp_path, KIND) as w:
        w.submit(first)                       # a solve later redone: its file is taken back and written again
        w.withdraw(["camera_z"])
        w.submit({"camera_z": arrays["camera_z"]})
        table = w.finish(arrays, SENSOR, DIMS, 7)
    entry = table["camera_z"]
    assert _sha(tmp_path / entry["uri"]) == entry["sha256"]
    assert np.array_equal(decode_payload(tmp_path / entry["uri"], entry), arrays["camera_z"], equal_nan=True)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())       # no temporary file left


def test_read_back_is_the_checks_read_of_each_written_file(tmp_path):
    from rowbeam.bundle.reader import read_payload

    arrays = _arrays()
    with PayloadWriter(tmp_path, KIND, read_back=(SENSOR, DIMS, 7)) as w:
        w.submit({"normal_geometric": arrays["normal_geometric"]})
        table = w.finish(arrays, SENSOR, DIMS, 7)
    assert w.read_back.keys() == table.keys()
    for name, (entry, value) in w.read_back.items():
        assert entry == table[name]                                   # the manifest's entry, as the check sees it
        again = read_payload(tmp_path, entry, planes=True)
        for a, b in zip(value if isinstance(value, list) else [value], again if isinstance(again, list) else [again],
                        strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), name


def test_the_check_takes_a_read_back_only_for_the_same_entry_of_an_unchanged_file(tmp_path, monkeypatch):
    from rowbeam.check import runner as check
    from rowbeam.util.errors import RowbeamError

    arrays = _arrays()
    with PayloadWriter(tmp_path, KIND, read_back=(SENSOR, DIMS, 7)) as w:
        table = w.finish(arrays, SENSOR, DIMS, 7)
    entry, value = w.read_back["camera_z"]
    decoded = []
    real = check.read_payload
    monkeypatch.setattr(check, "read_payload", lambda *a, **k: decoded.append(a[1]["uri"]) or real(*a, **k))
    assert check._read(tmp_path, table["camera_z"], tmp_path, (entry, value)) is value and not decoded
    other = {**table["camera_z"], "units": "feet"}                 # another entry: the file is decoded again
    assert np.array_equal(check._read(tmp_path, other, tmp_path, (entry, value)), arrays["camera_z"], equal_nan=True)
    assert decoded == ["camera_z.exr"]
    with pytest.raises(RowbeamError, match="earlier"):             # a read-back's error is the check's
        check._read(tmp_path, table["camera_z"], tmp_path, (entry, RowbeamError("camera_z.exr: earlier")))
    (tmp_path / "camera_z.exr").write_bytes(b"changed after it was read back")
    with pytest.raises(RowbeamError, match="sha256"):              # the file is verified again
        check._read(tmp_path, table["camera_z"], tmp_path, (entry, value))
