"""Several exporter processes on one output folder at once (real processes, real renders).

Each group starts every process together on a folder that does not exist yet or is empty (so they
also race to create bundle.json), with overlapping, identical and disjoint event ranges, some with --flow.
Afterwards every expected folder must be published exactly once across all processes, nothing
quarantined or left behind, every exit code 0, the checker must pass, and the bundle must be
identical to one written by a single process.
"""
from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess

import pytest


from tests.conftest import REPO, python_command, run_python
from tests.helpers import bundle_digest, save_plane_scene

EXPORT = REPO / "render_export.py"
DONE = re.compile(r"^rowbeam: \[\d+/\d+\] .*: (published (\S+)|already complete, skipped)")


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """A 40x18-pixel fronto-parallel plane scene (30 fps, frames 1..30), no rgb."""
    return save_plane_scene(tmp_path_factory.mktemp("concurrency") / "a.blend", scale=32)


def expected_locations(ranges) -> set[str]:
    """Folders the ranges [(first, count, flow)] ask for: events first..first+count-1, and with flow the
    flows between consecutive events of the range (as docs/export.md documents --flow)."""
    out = set()
    for first, count, flow in ranges:
        out |= {f"events/camera_front/{i:06d}" for i in range(first, first + count)}
        if flow:
            out |= {f"flows/camera_front/{i:06d}-{i + 1:06d}" for i in range(first, first + count - 1)}
    return out


def _args(blend, out, first, count, flow):
    return [EXPORT, blend, "--rig", blend.with_suffix(".rig.json"), "--out", out, "--first-event", first,
            "--count", count, "--device", "cpu", *(["--flow"] if flow else [])]


def run_together(blend, out, ranges, work) -> list[tuple[int, str, str]]:
    """Start one exporter per range at once, each with its own private TMPDIR; (exit code, stdout, stderr)."""
    procs = []
    for k, r in enumerate(ranges):
        tmp = work / f"tmp{k}"
        tmp.mkdir()
        log_out, log_err = open(work / f"out{k}.txt", "w+"), open(work / f"err{k}.txt", "w+")
        procs.append((subprocess.Popen(python_command(*_args(blend, out, *r)), cwd=REPO, stdout=log_out,
                                       stderr=log_err, text=True, env={**os.environ, "TMPDIR": str(tmp)}),
                      log_out, log_err, tmp))
    results = []
    for p, log_out, log_err, tmp in procs:
        rc = p.wait(timeout=600)
        log_out.seek(0)
        log_err.seek(0)
        results.append((rc, log_out.read(), log_err.read()))
        log_out.close()
        log_err.close()
        assert not list(tmp.iterdir()), f"temporary files left in the exporter's TMPDIR: {list(tmp.iterdir())}"
    return results


def single_process_reference(blend, ranges, work):
    """The same folders written by one process into a fresh folder: every event of the ranges' span and
    the expected flows as --flow-pairs (events outside the ranges are removed afterwards)."""
    ref = work / "reference"
    wanted = expected_locations(ranges)
    first, last = min(r[0] for r in ranges), max(r[0] + r[1] for r in ranges)
    pairs = ",".join(f"{int(loc[-13:-7])}:{int(loc[-6:])}" for loc in sorted(wanted) if loc.startswith("flows/"))
    done = run_python(*_args(blend, ref, first, last - first, False), "--flow-pairs", pairs)
    assert done.returncode == 0, done.stderr
    for p in (ref / "events" / "camera_front").iterdir():
        if f"events/camera_front/{p.name}" not in wanted:
            shutil.rmtree(p)
    return ref


def assert_published_once(out, ranges, results):
    wanted = expected_locations(ranges)
    published = collections.Counter()
    for (rc, stdout, stderr), (_first, count, flow) in zip(results, ranges, strict=True):
        assert rc == 0 and "Traceback" not in stderr, (rc, stderr[-2000:])
        lines = [m for m in map(DONE.match, stdout.splitlines()) if m]
        assert len(lines) == count + (count - 1 if flow else 0), stdout      # every job reported once
        published.update(m.group(2) for m in lines if m.group(2))
    assert published == collections.Counter({loc: 1 for loc in wanted}), published
    on_disk = {p.relative_to(out).as_posix() for kind in ("events", "flows") for p in (out / kind).glob("*/*")}
    assert on_disk == wanted
    assert not (out / "quarantine").exists()
    hidden = [p for p in out.rglob(".*")]
    assert not hidden, f"litter left in the bundle: {hidden}"           # .staging, locks, trash, temp files
    check = run_python("-m", "rowbeam", "check", out)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("group, ranges", [
    ("pair", [(0, 4, True), (0, 3, True)]),                        # same start: they collide on every event
    ("eight", [(0, 3, True), (1, 3, True), (2, 3, False), (0, 3, True),   # overlapping and identical
               (4, 2, True), (5, 3, False), (6, 2, True), (0, 8, False)]),   # disjoint and covering
])
def test_concurrent_exporters_publish_every_folder_once(scene, tmp_path, group, ranges):
    out = tmp_path / "bundle"
    if group == "eight":
        out.mkdir()              # an existing empty folder: each sees the others' probes, temp files and staging
    results = run_together(scene, out, ranges, tmp_path)
    assert_published_once(out, ranges, results)
    assert bundle_digest(out) == bundle_digest(single_process_reference(scene, ranges, tmp_path)), group


def test_bundle_file_race_with_a_different_dataset(tmp_path):
    """Two writers both validate an empty folder, then open it: the second to create bundle.json finds the
    first's (hard-link creation cannot replace it) and is refused in one line if the identity differs; with
    the same identity it joins. Neither leaves a temporary file."""
    from rowbeam.util.errors import RowbeamError
    from rowbeam.blender.export.bundle import BundleWriter

    def identity(blend_byte):
        return {"blend_sha256": blend_byte * 64, "rig_sha256": "b" * 64, "ontology_sha256": "c" * 64,
                "scenario": "s", "lineage_group": "g"}
    out = tmp_path / "out"
    first, other, same = (BundleWriter(out, identity(c)) for c in "aea")
    for w in (first, other, same):
        w.validate()                                  # all see an empty (missing) folder
    first.open()
    with pytest.raises(RowbeamError, match="holds a different dataset .*blend_sha256"):
        other.open()
    same.open()
    assert json.loads((out / "bundle.json").read_text())["dataset_id"] == first.dataset_id
    assert sorted(p.name for p in out.iterdir()) == [".staging", "bundle.json"]
    for w in (first, same):
        w.close()
    assert sorted(p.name for p in out.iterdir()) == ["bundle.json"]
