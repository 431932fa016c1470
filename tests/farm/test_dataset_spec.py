"""Dataset spec, split rule, content/dataset hash, reproducibility levels and the leakage audit (no Blender)."""
from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import OpenEXR
import pytest

from rowbeam.farm import dataset as ds
from rowbeam.util.errors import RowbeamError


def _spec(tmp_path, **over):
    for name in ("a", "b"):
        (tmp_path / f"{name}.blend").write_bytes(b"BLENDER-not-opened-here")
    doc = {"schema": "rowbeam/dataset@1", "name": "t",
           "scenarios": [{"blend": "a.blend", "scenario": "a", "lineage_group": "g1"},
                         {"blend": "b.blend", "scenario": "b", "lineage_group": "g2"}],
           "split": {"rule": "explicit", "map": {"g1": "train", "g2": "val"}}}
    doc.update(over)
    p = tmp_path / "spec.json"
    p.write_text(json.dumps(doc))
    return p


def test_hash_split_rule_matches_an_independent_computation():
    ratios = [{"split": "train", "ratio": 0.7}, {"split": "val", "ratio": 0.2}, {"split": "test", "ratio": 0.1}]
    for group in ("street_0001", "street_0002", "lab/ü", "x" * 200):
        u = int(hashlib.sha256(f"rowbeam.split@1:s1:{group}".encode()).hexdigest()[:16], 16) / 2 ** 64
        expected = "train" if u < 0.7 else "val" if u < 0.9 else "test"
        assert ds.hash_split(group, ratios, "s1") == expected
    counts = {}
    for i in range(4000):
        s = ds.hash_split(f"g{i}", ratios, "")
        counts[s] = counts.get(s, 0) + 1
    assert abs(counts["train"] / 4000 - 0.7) < 0.03 and abs(counts["test"] / 4000 - 0.1) < 0.02
    assert ds.hash_split("g", ratios, "a") == ds.hash_split("g", ratios, "a")     # deterministic


def test_spec_assigns_one_split_per_lineage_group(tmp_path):
    spec = ds.load_spec(_spec(tmp_path))
    assert ds.assign_splits(spec) == {"g1": "train", "g2": "val"}
    two_ways = [{"blend": "a.blend", "scenario": "a", "lineage_group": "g1", "split": "train"},
                {"blend": "b.blend", "scenario": "b", "lineage_group": "g1", "split": "test"}]
    with pytest.raises(RowbeamError, match=r"scenarios\[1\]\.split: lineage group 'g1' is split two ways"):
        ds.load_spec(_spec(tmp_path, scenarios=two_ways, split={"rule": "explicit"}))
    with pytest.raises(RowbeamError, match="has no split"):
        ds.load_spec(_spec(tmp_path, split={"rule": "explicit", "map": {"g1": "train"}}))
    hashed = ds.load_spec(_spec(tmp_path, split={"rule": "hash", "ratios": [{"split": "a", "ratio": 0.5},
                                                                             {"split": "b", "ratio": 0.5}]}))
    assert set(ds.assign_splits(hashed)) == {"g1", "g2"}


@pytest.mark.parametrize("change, message", [
    (lambda d: d["scenarios"][1].update(blend="missing.blend"), r"scenarios\[1\]\.blend: .*missing\.blend does not exist"),
    (lambda d: d["scenarios"][0].update(rig="nope.json"), r"scenarios\[0\]\.rig: .*nope\.json does not exist"),
    (lambda d: d["scenarios"][0].update(colour="red"), r"scenarios\[0\]: unknown field\(s\) 'colour'"),
    (lambda d: d.update(split={"rule": "hash", "ratios": [{"split": "a", "ratio": 0.5}]}), "add up to 0.5, not 1"),
    (lambda d: d["scenarios"][1].update(scenario="a"), r"scenarios\[1\]\.blend: scenario 'a' is also scenarios\[0\]"),
    (lambda d: d["scenarios"][0].update(events={"count": 1.5}), r"scenarios\[0\]\.events\.count"),
])
def test_bad_specs_are_refused_naming_the_field(tmp_path, change, message):
    p = _spec(tmp_path)
    doc = json.loads(p.read_text())
    change(doc)
    p.write_text(json.dumps(doc))
    with pytest.raises(RowbeamError, match=message):
        ds.load_spec(p)


def test_overlapping_event_ranges_are_refused():
    ds.check_ranges("s.json", [("scenarios[0]", "a", "cam", 0, 5), ("scenarios[1]", "a", "cam", 5, 5),
                               ("scenarios[2]", "a", "lidar", 0, 9)])
    with pytest.raises(RowbeamError, match=r"scenarios\[1\]\.events: events 4\.\.6 .* overlap scenarios\[0\] \(0\.\.4\)"):
        ds.check_ranges("s.json", [("scenarios[0]", "a", "cam", 0, 5), ("scenarios[1]", "a", "cam", 4, 3)])


def _manifest(**over):
    m = {"schema": "rowbeam/sample@1", "sample_id": "a.cam.5", "event": {"index": 0},
         "lineage": {"scenario": "a", "lineage_group": "g", "split": "train", "source": "x"},
         "build": {"blend_sha256": "1" * 64, "rig_sha256": "2" * 64, "contracts_version": "1", "git_revision": "r1",
                   "render_device": "CPU", "blender_version": "5.3.0"},
         "run": {"host": "h1", "seconds": {"total": 1.0}},
         "method": {"samples": 1, "verification": {"worst_range_error_m": 1e-9}},
         "modalities": {"camera_z": {"uri": "camera_z.exr", "sha256": "3" * 64, "bytes": 10, "units": "m",
                                     "storage": {"compression": "ZIP"}}}}
    m.update(over)
    return m


def test_content_hash_ignores_names_times_hosts_and_compression(tmp_path):
    z = np.full((4, 6), 8.0, np.float32)
    z[0, 0] = np.nan
    base, _ = ds.sample_content_hash(_manifest(), {"camera_z": z})
    moved = _manifest(run={"host": "other", "seconds": {"total": 9.0}},
                      build={**_manifest()["build"], "git_revision": "r2", "render_device": "GPU"},
                      modalities={"camera_z": {"uri": "renamed.exr", "sha256": "4" * 64, "bytes": 99, "units": "m",
                                               "storage": {"compression": "PIZ"}}})
    assert ds.sample_content_hash(moved, {"camera_z": z})[0] == base
    # the same array stored with two EXR compressions: different file bytes, same decoded content
    files = []
    for comp in (OpenEXR.ZIP_COMPRESSION, OpenEXR.PIZ_COMPRESSION):
        p = tmp_path / f"z{comp}.exr"
        with OpenEXR.File({"compression": comp, "type": OpenEXR.scanlineimage}, {"Z": z}) as f:
            f.write(str(p))
        with OpenEXR.File(str(p)) as f:
            files.append((p.read_bytes(), f.channels()["Z"].pixels.copy()))
    assert files[0][0] != files[1][0]
    assert ds.sample_content_hash(_manifest(), {"camera_z": files[1][1]})[0] == base
    # what must change the hash: content, split, ids, input hashes
    for other in (_manifest(lineage={**_manifest()["lineage"], "split": "val"}), _manifest(sample_id="a.cam.6"),
                  _manifest(build={**_manifest()["build"], "blend_sha256": "5" * 64})):
        assert ds.sample_content_hash(other, {"camera_z": z})[0] != base
    z2 = z.copy()
    z2[2, 3] = np.nextafter(np.float32(8.0), np.float32(9))            # 1 ulp: below the 1e-4 m tolerance
    assert ds.sample_content_hash(_manifest(), {"camera_z": z2})[0] == base
    z2[2, 3] = 8.001                                                   # 1 mm: above it
    assert ds.sample_content_hash(_manifest(), {"camera_z": z2})[0] != base
    ids = np.zeros((4, 6), np.uint32)
    ids2 = ids.copy()
    ids2[1, 1] = 1                                                     # ids are bitwise
    assert ds.sample_content_hash(_manifest(), {"instance_id": ids})[0] != \
        ds.sample_content_hash(_manifest(), {"instance_id": ids2})[0]


def test_dataset_hash_is_ordered_by_sample_id_and_matches_its_rule():
    h = {"b.cam.2": hashlib.sha256(b"x").hexdigest(), "a.cam.1": hashlib.sha256(b"y").hexdigest()}
    expected = hashlib.sha256(bytes.fromhex(h["a.cam.1"]) + bytes.fromhex(h["b.cam.2"])).hexdigest()
    assert ds.dataset_hash(h) == expected == ds.dataset_hash(dict(reversed(list(h.items()))))


def test_first_divergence_honours_levels():
    a = np.full((3, 4), 5.0, np.float32)
    b = a.copy()
    b[1, 2] += 5e-5
    assert ds.first_divergence("camera_z", a, b) is None                  # numeric, tol 1e-4 m
    b[2, 1] = np.nan
    assert ds.first_divergence("camera_z", a, b).startswith("camera_z[2, 1]: published")
    t = np.arange(4, dtype=np.float64)
    t2 = t.copy()
    t2[3] = np.nextafter(3.0, 4.0)
    assert "row_T_world_camera[3]" in ds.first_divergence("row_T_world_camera", t, t2)   # bitwise


def test_rgb_fingerprint_and_near_duplicates():
    rng = np.random.default_rng(1)
    yy, xx = np.mgrid[0:45, 0:80]
    scene = np.stack([xx / 80, yy / 45, 0.5 + 0 * xx], -1)
    noisy = scene * (1 + 0.05 * rng.standard_normal(scene.shape))        # same scene, other render noise
    other = np.stack([1 - xx / 80, yy / 45, 0.1 + 0 * xx], -1)
    f = np.array([ds.rgb_fingerprint(x) for x in (scene, noisy, other)])
    assert f.shape == (3, 256)
    # cell means: the top-left cell averages columns 0..4 (80 * 1 // 16 = 5 per cell) and rows 0..2
    lum = scene @ np.array([0.2126, 0.7152, 0.0722])
    assert f[0, 0] == pytest.approx(lum[:3, :5].mean())
    pairs = ds.near_duplicates(f[:1], f[1:])
    assert [(i, j) for i, j, _ in pairs] == [(0, 0)]


def test_leakage_audit_reports_each_planted_leak():
    def s(sid, split, group, z="h1", rgb_const=False):
        return {"sample_id": sid, "split": split, "lineage_group": group, "payloads": {"camera_z": z, "rgb": "r" + sid},
                "constant": {"camera_z": False, "rgb": rgb_const}}
    clean = [s("a.c.1", "train", "g1", "z1"), s("b.c.1", "val", "g2", "z2")]
    assert ds.leakage_audit(clean, {})["status"] == "pass"
    group_leak = ds.leakage_audit(clean + [s("c.c.1", "val", "g1", "z3")], {})
    assert group_leak["status"] == "fail"
    assert group_leak["lineage_groups_in_several_splits"][0]["lineage_group"] == "g1"
    payload_leak = ds.leakage_audit(clean + [s("d.c.1", "val", "g3", "z1")], {})
    assert payload_leak["identical_payloads_across_splits"][0]["samples"] == ["a.c.1", "d.c.1"]
    same_split = ds.leakage_audit(clean + [s("d.c.1", "train", "g3", "z1")], {})
    assert same_split["status"] == "pass"                                # a duplicate inside one split is no leak
    fp = {"a.c.1": np.ones(256), "b.c.1": np.ones(256) * 1.01}
    near = ds.leakage_audit(clean, fp)
    assert near["status"] == "fail" and near["near_duplicate_rgb_across_splits"][0]["samples"] == ["a.c.1", "b.c.1"]


def test_dataset_schemas_are_published(tmp_path):
    from rowbeam.cli import main

    assert main(["schemas", str(tmp_path)]) == 0
    for name in ("dataset", "plan", "dataset_manifest"):
        assert json.loads((tmp_path / f"{name}.schema.json").read_text())["$id"].endswith(f"/{name}@1")
    shutil.rmtree(tmp_path)
