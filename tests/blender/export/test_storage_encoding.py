"""A bundle's encoding does not change what it holds: the same export re-encoded as rowbeam wrote it before (ZIP EXR,
plain .npy) checks, loads the same arrays bit for bit and has the same sample content hashes (dataset hash)."""
import json
import shutil

from rowbeam.blender.scenes import object_scenes
from rowbeam.bundle.arrays import write_exr, write_npy
from rowbeam.bundle.files import sha256_file
from rowbeam.bundle.reader import Bundle
from rowbeam.check.runner import check_bundle
from rowbeam.farm.dataset import sample_content_hash


def _reencode_as_before(event) -> None:
    """Rewrite every payload of `event` in the earlier encoding and update its manifest entry."""
    manifest = json.loads((event.path / "manifest.json").read_text())
    for name, entry in manifest["modalities"].items():
        array = event.array(name)
        (event.path / entry["uri"]).unlink()
        if entry["format"] == "openexr":
            entry["storage"] = write_exr(event.path / entry["uri"], array, entry["channels"], entry["dtype"])
        else:
            entry.update(uri=f"{name}.npy", format="npy", storage=write_npy(event.path / f"{name}.npy", array))
        path = event.path / entry["uri"]
        entry.update(sha256=sha256_file(path), bytes=path.stat().st_size)
    (event.path / "manifest.json").write_text(json.dumps(manifest))


def test_the_earlier_encoding_checks_and_hashes_the_same(exports, tmp_path):
    e = exports("object_calibration", object_scenes.object_calibration, first_event=1, count=1)
    new = Bundle.open(e.bundle)
    event = next(new.events())
    formats = {entry["format"] for entry in event.manifest["modalities"].values()}
    assert formats == {"openexr", "npz"}
    assert event.manifest["modalities"]["amodal_masks"]["uri"].endswith(".npz")
    before = {n: event.array(n) for n in event.names}
    content, payloads = sample_content_hash(event.manifest, before)

    old_root = tmp_path / "old"
    shutil.copytree(e.bundle, old_root)
    old_event = next(Bundle.open(old_root).events())
    _reencode_as_before(old_event)
    reread = next(Bundle.open(old_root).events())
    assert {entry["format"] for entry in reread.manifest["modalities"].values()} == {"openexr", "npy"}
    after = {n: reread.array(n) for n in reread.names}
    assert all(after[n].dtype == before[n].dtype and after[n].tobytes() == before[n].tobytes() for n in before)
    assert sample_content_hash(reread.manifest, after) == (content, payloads)
    report = check_bundle(old_root)
    assert report["status"] == "pass", [c for ev in report["events"] for c in ev["checks"] if c["status"] == "fail"]
