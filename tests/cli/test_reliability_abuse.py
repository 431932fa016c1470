"""Reliability under abuse, without Blender: user files planted where rowbeam deletes or replaces folders (they
must survive byte-identical, with one error line and exit 2), folders rowbeam left behind (removed only when
their owner marker proves them rowbeam's), links out of a bundle, lying EXR headers, non-finite values,
signals and full disks.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rowbeam.adapters import output
from rowbeam.bundle import ownership
from rowbeam.bundle.arrays import MAX_PAYLOAD_PIXELS, decode_payload, write_exr
from rowbeam.bundle.files import finite_json, is_inside, resolve_inside, sha256_file
from rowbeam.bundle.reader import Bundle
from rowbeam.util.errors import RowbeamError

from tests.conftest import REPO
from tests.helpers import snapshot

TIMEOUT_S = 60


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def plant_marker(folder: Path, pid: int, files=None, host: str | None = None, fmt: str = ownership.FORMAT) -> None:
    """The owner marker a rowbeam run of `pid` writes into a folder it creates (or a forged one)."""
    doc = {"format": fmt, "kind": "test", "pid": pid, "host": host or os.uname().nodename,
           "started": time.time() - 60, "token": "0123456789abcdef"}
    if files is not None:
        doc["files"] = files
    (folder / ownership.MARKER).write_text(json.dumps(doc))


def planted(tmp_path: Path, name: str, plant) -> tuple[Path, dict]:
    """A new folder `name` with `plant(folder)` applied, and the snapshot of everything under tmp_path."""
    folder = tmp_path / name
    folder.mkdir()
    plant(folder)
    return folder, snapshot(tmp_path)


def cli(*args, env=None, timeout=TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rowbeam", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=env)


def one_line(r: subprocess.CompletedProcess, status: int = 2, *fragments) -> None:
    assert r.returncode == status, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert all(f in r.stderr for f in fragments), r.stderr


def fake_bundle(root: Path) -> Path:
    """A folder that looks like a bundle to the report's argument checks (holds bundle.json)."""
    root.mkdir(parents=True)
    (root / "bundle.json").write_text("{}")
    return root


# ---------------------------------------------------------------------------------------------------
# report --out: never replaced while it holds a file rowbeam did not write

def _report_json(out: Path) -> None:
    (out / "report.json").write_text(json.dumps({"schema": "rowbeam/report@1", "bundles": []}))


def _user_paper(out):
    _report_json(out)
    (out / "paper.tex").write_text("\\section{mine}")


def _user_figs(out):
    _report_json(out)
    (out / "figs").mkdir()
    (out / "figs" / "fig1.png").write_bytes(b"\x89PNG mine")


def _marked_plus_paper(out):
    _report_json(out)
    (out / "index.html").write_text("<html></html>")
    plant_marker(out, os.getpid(), files=["index.html", "report.json"])
    (out / "paper.tex").write_text("mine")


def _marked_plus_nested(out):
    _report_json(out)
    plant_marker(out, os.getpid(), files=["report.json"])
    (out / "pages").mkdir()
    (out / "pages" / "notes.md").write_text("mine")


def _marked_whole_folder(out):
    _report_json(out)
    plant_marker(out, os.getpid())                      # a staging marker (no file list) proves no finished report
    (out / "paper.tex").write_text("mine")


def _forged_format(out):
    _report_json(out)
    plant_marker(out, os.getpid(), files=["report.json"], fmt="rowbeam/owner@0")


def _only_report_json(out):
    _report_json(out)                                   # an earlier report without a marker: not provably ours


def _marker_is_a_folder(out):
    _report_json(out)
    (out / ownership.MARKER).mkdir()


def _marker_link(out):
    _report_json(out)
    target = out.parent / "elsewhere.json"
    target.write_text(json.dumps({"format": ownership.FORMAT, "pid": 1, "files": ["report.json"]}))
    (out / ownership.MARKER).symlink_to(target)


def _empty_subfolder(out):
    _report_json(out)
    plant_marker(out, os.getpid(), files=["report.json"])
    (out / "drafts").mkdir()


REPORT_OUT_CASES = {f.__name__.strip("_"): f for f in (
    _user_paper, _user_figs, _marked_plus_paper, _marked_plus_nested, _marked_whole_folder, _forged_format,
    _only_report_json, _marker_is_a_folder, _marker_link, _empty_subfolder)}


@pytest.mark.parametrize("case", sorted(REPORT_OUT_CASES))
def test_report_out_holding_user_files_is_refused_and_kept(case, tmp_path):
    bundle = fake_bundle(tmp_path / "bundle")
    out, before = planted(tmp_path, "out", REPORT_OUT_CASES[case])
    r = cli("report", bundle, "--out", out)
    one_line(r, 2, str(out))
    assert snapshot(tmp_path) == before


def test_report_out_that_is_a_file_or_a_link_to_a_user_folder_is_refused(tmp_path):
    bundle = fake_bundle(tmp_path / "bundle")
    mine = tmp_path / "mine"
    mine.mkdir()
    _user_paper(mine)
    (tmp_path / "link").symlink_to(mine)
    (tmp_path / "file").write_text("mine")
    before = snapshot(tmp_path)
    for out in (tmp_path / "link", tmp_path / "file"):
        one_line(cli("report", bundle, "--out", out), 2)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("owner", ["dead", "no_marker", "live", "forged", "other_host"])
def test_report_litter_is_removed_only_when_its_marker_proves_a_dead_run(owner, tmp_path):
    """What a killed report left beside --out (`.NAME.report-staging-*`, `.NAME.report-old-*`) goes with the
    next report run on that folder; a user's folder of that name, or a live run's, stays."""
    bundle = fake_bundle(tmp_path / "bundle")
    out = tmp_path / "out"
    litter = [tmp_path / f".out.report-staging-{dead_pid()}-ab", tmp_path / f".out.report-old-{dead_pid()}"]
    for d in litter:
        (d / "pages").mkdir(parents=True)
        (d / "pages" / "x.html").write_text("<html>" + "x" * 10000)
        if owner == "dead":
            plant_marker(d, dead_pid())
        elif owner == "live":
            plant_marker(d, os.getpid())
        elif owner == "forged":
            plant_marker(d, dead_pid(), fmt="rowbeam/owner@9")
        elif owner == "other_host":
            plant_marker(d, dead_pid(), host="farm-node-7.invalid")
    before = snapshot(*litter)
    r = cli("report", bundle, "--out", out)
    assert r.returncode == 2 and "Traceback" not in r.stderr      # {} is no bundle; the clean-up ran before that
    if owner == "dead":
        assert not any(d.exists() for d in litter)
    else:
        assert snapshot(*litter) == before
    assert not [p for p in tmp_path.iterdir() if "report-staging" in p.name and p not in litter]


# ---------------------------------------------------------------------------------------------------
# adapter outputs: an existing file or sidecar is never overwritten; staging litter carries a marker

@pytest.mark.parametrize("existing", ["out", "sidecar", "both", "out_link", "sidecar_link"])
def test_adapter_file_output_never_overwrites(existing, tmp_path):
    source = tmp_path / "event"
    source.mkdir()
    out = tmp_path / "points.ply"
    side = tmp_path / "points.ply.json"
    mine = tmp_path / "mine.txt"
    mine.write_text("the user's file")
    if existing in ("out", "both"):
        out.write_text("the user's ply")
    if existing in ("sidecar", "both"):
        side.write_text('{"mine": true}')
    if existing == "out_link":
        out.symlink_to(mine)
    if existing == "sidecar_link":
        side.symlink_to(mine)
    before = snapshot(tmp_path)
    with pytest.raises(RowbeamError, match="exists"):
        for target in (out, side):
            output.check_output_file(target, source)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("owner", ["dead", "no_marker", "live", "forged"])
def test_adapter_staging_litter_is_removed_only_with_a_dead_owner(owner, tmp_path):
    target = tmp_path / "out"
    litter = tmp_path / f".out.tmp-{dead_pid()}-cd"
    (litter / "velodyne").mkdir(parents=True)
    (litter / "velodyne" / "000000.bin").write_bytes(b"\0" * 4096)
    if owner == "dead":
        plant_marker(litter, dead_pid())
    elif owner == "live":
        plant_marker(litter, os.getpid())
    elif owner == "forged":
        (litter / ownership.MARKER).write_text("not json")
    before = snapshot(litter)
    with output.staged_dir(target) as stage:
        (stage / "a.txt").write_text("new")
    assert sorted(os.listdir(target)) == [ownership.MARKER, "a.txt"]
    assert ownership.foreign_entries(target) == []
    if owner == "dead":
        assert not litter.exists()
    else:
        assert snapshot(litter) == before


def test_adapter_folder_output_with_user_files_is_not_replaced(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    with pytest.raises(OSError):
        with output.staged_dir(target) as stage:
            (stage / "a.txt").write_text("new")
            (target / "mine.txt").write_text("the user's, written meanwhile")
    assert os.listdir(target) == ["mine.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]        # the stage is gone


# ---------------------------------------------------------------------------------------------------
# rowbeam schemas DIR

def _schemas_same_name(d):
    (d / "bundle.schema.json").write_text('{"mine": true}')


def _schemas_other_file(d):
    (d / "notes.txt").write_text("mine")


def _schemas_earlier_plus_user(d):
    r = cli("schemas", d)
    assert r.returncode == 0, r.stderr
    (d / "notes.txt").write_text("mine")


def _schemas_earlier_edited(d):
    r = cli("schemas", d)
    assert r.returncode == 0, r.stderr
    (d / "extra.schema.json").write_text("{}")


def _schemas_forged_marker(d):
    plant_marker(d, os.getpid(), files=["notes.txt"], fmt="nope")
    (d / "notes.txt").write_text("mine")


def _schemas_whole_marker(d):
    plant_marker(d, os.getpid())
    (d / "bundle.schema.json").write_text('{"mine": true}')


SCHEMAS_CASES = {f.__name__.removeprefix("_schemas_"): f for f in (
    _schemas_same_name, _schemas_other_file, _schemas_earlier_plus_user, _schemas_earlier_edited,
    _schemas_forged_marker, _schemas_whole_marker)}


@pytest.mark.parametrize("case", sorted(SCHEMAS_CASES))
def test_schemas_refuses_a_folder_holding_user_files(case, tmp_path):
    d, before = planted(tmp_path, "schemas", SCHEMAS_CASES[case])
    one_line(cli("schemas", d), 2, str(d))
    assert snapshot(tmp_path) == before


def test_schemas_rewrites_its_own_folder(tmp_path):
    d = tmp_path / "schemas"
    assert cli("schemas", d).returncode == 0
    first = snapshot(d)
    r = cli("schemas", d)
    assert r.returncode == 0, r.stderr
    assert {k: v for k, v in snapshot(d).items() if not k.endswith(ownership.MARKER)} == \
        {k: v for k, v in first.items() if not k.endswith(ownership.MARKER)}


# ---------------------------------------------------------------------------------------------------
# export staging, publish trash and run temp folders (rowbeam.blender.export.bundle / run_temp import no bpy)

IDENTITY = {"blend_sha256": "0" * 64, "rig_sha256": "1" * 64, "ontology_sha256": "2" * 64, "scenario": "s",
            "lineage_group": "s"}


def put(root: Path, rel: str, text: str = "mine") -> None:
    """Write the user's file root/rel (folders created)."""
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def _staging_drafts(out):
    put(out, ".staging/drafts/chapter1.tex", "\\chapter{mine}")


def _staging_writer_named(out):
    put(out, f".staging/w-{dead_pid()}-0badcafe/notes.txt", "mine, in a folder named like a writer's")


def _staging_file(out):
    put(out, ".staging/todo.txt")


def _staging_lock_with_text(out):
    put(out, ".staging/locks/mine.lock", "not empty: mine")


def _staging_forged_marker(out):
    d = f".staging/w-{dead_pid()}-0badcafe"
    put(out, f"{d}/{ownership.MARKER}", '{"format": "rowbeam/owner@1"}')      # no pid: not a marker
    put(out, f"{d}/notes.txt")


def _bundle_tmp_named(out):
    (out / f".bundle.json.tmp-{dead_pid()}").write_text("my notes, in a file named like rowbeam's")


def _probe_named(out):
    (out / ".rowbeam-probe-mine").mkdir()
    (out / ".rowbeam-probe-mine" / "x.txt").write_text("mine")


STAGING_CASES = {f.__name__.strip("_"): f for f in (
    _staging_drafts, _staging_writer_named, _staging_file, _staging_lock_with_text, _staging_forged_marker,
    _bundle_tmp_named, _probe_named)}


@pytest.mark.parametrize("case", sorted(STAGING_CASES))
def test_export_refuses_a_folder_whose_hidden_entries_are_not_provably_rowbeams(case, tmp_path):
    from rowbeam.blender.export.bundle import BundleWriter

    out, before = planted(tmp_path, "out", STAGING_CASES[case])
    w = BundleWriter(out, IDENTITY)
    with pytest.raises(RowbeamError, match="not empty"):
        w.open()
    w.close()
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("case", sorted(STAGING_CASES))
def test_export_into_its_own_bundle_keeps_user_entries(case, tmp_path):
    """The same user entries in a bundle rowbeam already writes: reclaim and close leave them alone."""
    from rowbeam.blender.export.bundle import BundleWriter

    out = tmp_path / "out"
    w = BundleWriter(out, IDENTITY)
    w.open()
    w.close()
    STAGING_CASES[case](out)
    before = snapshot(out)
    w = BundleWriter(out, IDENTITY)
    w.open()
    staged = w.stage("events/cam/000000")
    (staged / "x").write_text("x")
    w.close()
    assert {k: v for k, v in snapshot(out).items() if k in before} == before


@pytest.mark.parametrize("owner", ["dead", "no_marker", "forged"])
def test_publish_trash_is_removed_only_with_a_marker(owner, tmp_path):
    from rowbeam.blender.export.bundle import BundleWriter

    out = tmp_path / "out"
    w = BundleWriter(out, IDENTITY)
    w.open()
    w.close()
    trash = out / "events" / "cam" / f".000001.old-{dead_pid()}"
    trash.mkdir(parents=True)
    (trash / "manifest.json").write_text('{"mine": 1}')
    if owner == "dead":
        plant_marker(trash, dead_pid())
    elif owner == "forged":
        (trash / ownership.MARKER).write_text("[]")
    before = snapshot(trash)
    w = BundleWriter(out, IDENTITY)
    w.open()
    w.close()
    assert (not trash.exists()) if owner == "dead" else snapshot(trash) == before


@pytest.mark.parametrize("owner", ["dead", "no_marker", "forged", "live_pid", "lock_held"])
def test_run_temp_folders_are_reclaimed_only_with_a_marker(owner, tmp_path):
    import fcntl

    from rowbeam.blender.export.run_temp import LOCK_NAME, reclaim_dead_runs

    pid = os.getpid() + 0 if owner == "live_pid" else dead_pid()
    d = tmp_path / f"rowbeam-run-{pid if owner != 'live_pid' else os.getppid()}-abcdefgh"
    d.mkdir()
    (d / "thesis.pdf").write_bytes(b"%PDF mine")
    fd = None
    if owner in ("dead", "live_pid", "lock_held"):
        plant_marker(d, pid)
    if owner == "forged":
        (d / ownership.MARKER).write_text('{"format": "rowbeam/owner@1", "pid": "1"}')
    if owner == "lock_held":
        fd = os.open(d / LOCK_NAME, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
    before = snapshot(d)
    try:
        removed = reclaim_dead_runs(tmp_path)
    finally:
        if fd is not None:
            os.close(fd)
    if owner == "dead":
        assert removed == [d] and not d.exists()
    else:
        assert removed == [] and snapshot(d) == before


# ---------------------------------------------------------------------------------------------------
# plan --out and pack staging

def test_plan_out_on_a_full_disk_is_one_line_and_leaves_no_folder(tmp_path, monkeypatch):
    from rowbeam.farm import plan as plan_mod

    def full(path, doc):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(plan_mod, "atomic_write_json", full)
    out = tmp_path / "plan"
    with pytest.raises(RowbeamError, match="No space left on device"):
        plan_mod.write_plan({"plan_sha256": "0" * 64}, out)
    assert not out.exists()


def test_plan_out_holding_user_files_is_refused(tmp_path):
    from rowbeam.farm.plan import write_plan

    out = tmp_path / "plan"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(RowbeamError, match="not an empty folder"):
        write_plan({"plan_sha256": "0" * 64}, out)
    assert os.listdir(out) == ["notes.txt"]


@pytest.mark.parametrize("owner", ["dead", "no_marker"])
def test_pack_staging_litter_goes_only_with_a_marker(owner, tmp_path, monkeypatch):
    from rowbeam.farm import pack

    litter = tmp_path / f".packed.staging-{dead_pid()}"
    litter.mkdir()
    (litter / "mine.blend").write_bytes(b"BLENDER mine")
    if owner == "dead":
        plant_marker(litter, dead_pid())
    before = snapshot(litter)
    monkeypatch.setattr(pack, "load_spec", lambda p: type("S", (), {"scenarios": []})())
    monkeypatch.setattr(pack.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "", "boom"))
    with pytest.raises((RowbeamError, Exception)):
        pack.pack_spec(tmp_path / "spec.json", tmp_path / "packed")
    assert (not litter.exists()) if owner == "dead" else snapshot(litter) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".packed.staging-") and p != litter]


# ---------------------------------------------------------------------------------------------------
# confinement: one function decides what is inside a bundle

@pytest.mark.parametrize("rel, inside", [
    ("events/cam/000000", True), ("events/../../bundle2/x", False), ("../bundle2/events", False),
    ("link_out/x", False), ("link_in/000000", True), ("link_sibling", False)])
def test_is_inside_follows_links_and_never_takes_a_sibling_prefix(rel, inside, tmp_path):
    root, sibling = tmp_path / "bundle", tmp_path / "bundle2"
    (root / "events" / "cam" / "000000").mkdir(parents=True)
    (sibling / "events").mkdir(parents=True)
    (root / "link_out").symlink_to(tmp_path)
    (root / "link_in").symlink_to(root / "events" / "cam")
    (root / "link_sibling").symlink_to(sibling)
    assert is_inside(root, root / rel) is inside


def _outside_event(tmp_path: Path) -> Path:
    outside = tmp_path / "outside" / "000000"
    outside.mkdir(parents=True)
    (outside / "manifest.json").write_text(json.dumps({"schema": "rowbeam/camera_event@1", "secret": "OUTSIDE"}))
    (outside / "qa_report.json").write_text(json.dumps({"checks": [{"check": "x", "status": "fail",
                                                                     "message": "SECRET TEXT OUTSIDE"}]}))
    return outside


@pytest.mark.parametrize("where", ["event", "sensor", "flow", "sibling_prefix"])
def test_reader_never_lists_folders_outside_the_bundle(where, tmp_path):
    outside = _outside_event(tmp_path)
    root = fake_bundle(tmp_path / "bundle")
    if where == "event":
        (root / "events" / "cam").mkdir(parents=True)
        (root / "events" / "cam" / "000000").symlink_to(outside)
    elif where == "sensor":
        (root / "events").mkdir()
        (root / "events" / "cam").symlink_to(outside.parent)
    elif where == "flow":
        (root / "flows" / "cam").mkdir(parents=True)
        (outside.parent / "000000-000001").mkdir()
        (outside.parent / "000000-000001" / "manifest.json").write_text("{}")
        (root / "flows" / "cam" / "000000-000001").symlink_to(outside.parent / "000000-000001")
    else:
        sib = fake_bundle(tmp_path / "bundle2")
        (sib / "events" / "cam" / "000000").mkdir(parents=True)
        (sib / "events" / "cam" / "000000" / "manifest.json").write_text("{}")
        (root / "events").mkdir()
        (root / "events" / "cam").symlink_to(sib / "events" / "cam")
    b = Bundle.open(root)
    assert list(b.events()) == [] and list(b.flows()) == []


def test_hidden_sensor_folders_are_not_listed(tmp_path):
    root = fake_bundle(tmp_path / "bundle")
    for name in ("..camera", ".cam", "cam"):
        (root / "events" / name / "000000").mkdir(parents=True)
        (root / "events" / name / "000000" / "manifest.json").write_text("{}")
    assert Bundle.open(root).sensors() == ["cam"]


@pytest.mark.parametrize("link", ["folder", "qa_report"])
def test_report_quarantine_entry_never_reads_outside(link, tmp_path):
    from rowbeam.report.build import _quarantine_entry

    outside = _outside_event(tmp_path)
    root = fake_bundle(tmp_path / "bundle")
    q = root / "quarantine" / "events" / "cam"
    q.mkdir(parents=True)
    if link == "folder":
        (q / "000000").symlink_to(outside)
    else:
        (q / "000000").mkdir()
        (q / "000000" / "qa_report.json").symlink_to(outside / "qa_report.json")
    entry = _quarantine_entry(root, "quarantine/events/cam/000000")
    assert "SECRET" not in json.dumps(entry) and entry["checks"] == []


# ---------------------------------------------------------------------------------------------------
# EXR headers are checked against the manifest before any pixel is decoded

def _exr(path: Path, h=6, w=9, channels=("camera_z",)) -> dict:
    write_exr(path, np.zeros((h, w, len(channels)) if len(channels) > 1 else (h, w), np.float32), list(channels),
              "float32")
    return {"uri": path.name, "format": "openexr", "channels": list(channels), "dtype": "float32",
            "shape": [h, w] + ([len(channels)] if len(channels) > 1 else []), "sha256": sha256_file(path)}


def _patch_data_window(path: Path, x1: int, y1: int) -> None:
    """Rewrite the header's dataWindow (box2i) in place: the file then claims an (x1+1) x (y1+1) image."""
    data = bytearray(path.read_bytes())
    key = b"dataWindow\0box2i\0"
    at = data.index(key) + len(key) + 4
    data[at:at + 16] = np.array([0, 0, x1, y1], "<i4").tobytes()
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("case, fragment", [
    ("claims_12000x12000", "pixels"), ("claims_more_rows", "decoded shape"), ("claims_wider", "decoded shape"),
    ("bound_plus_one", "pixels"), ("extra_channel", "undeclared"), ("missing_channel", "missing"),
    ("negative_window", "pixels|unreadable")])
def test_exr_header_is_refused_before_decoding(case, fragment, tmp_path):
    path = tmp_path / "camera_z.exr"
    entry = _exr(path)
    if case == "claims_12000x12000":
        _patch_data_window(path, 11999, 11999)
    elif case == "claims_more_rows":
        _patch_data_window(path, 8, 6)
    elif case == "claims_wider":
        _patch_data_window(path, 9, 5)
    elif case == "bound_plus_one":
        _patch_data_window(path, MAX_PAYLOAD_PIXELS, 0)
    elif case == "extra_channel":
        entry = dict(_exr(path, channels=("camera_z", "spare")), channels=["camera_z"], shape=[6, 9])
    elif case == "missing_channel":
        entry = dict(entry, channels=["camera_z", "range"], shape=[6, 9, 2])
    else:
        _patch_data_window(path, -5, -5)
    with pytest.raises(RowbeamError, match=fragment):
        decode_payload(path, entry)


def test_a_huge_header_is_refused_without_allocating(tmp_path):
    """A 12000 x 12000-claiming file in a child process: refused, and its peak memory stays small."""
    path = tmp_path / "camera_z.exr"
    entry = _exr(path)
    _patch_data_window(path, 11999, 11999)
    code = ("import json,resource,sys;from rowbeam.bundle.arrays import decode_payload;"
            "from rowbeam.util.errors import RowbeamError\n"
            "base=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            f"try: decode_payload({str(path)!r}, json.loads({json.dumps(json.dumps(entry))}))\n"
            "except RowbeamError as e: print('refused', e)\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss-base)")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("refused") and "12000x12000" in lines[0], r.stdout + r.stderr
    assert int(lines[1]) < 64 * 1024, f"grew {lines[1]} KiB"


# ---------------------------------------------------------------------------------------------------
# non-finite values: a failing check with null values, valid JSON everywhere

@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), np.float64("nan")])
def test_a_non_finite_check_value_fails_and_stays_json(value, tmp_path):
    from rowbeam.check.runner import EventReport

    rep = EventReport(tmp_path / "manifest.json")
    rep.add("some_check", True, "looked fine", worst=value, count=3)
    entry = rep.results[0]
    assert entry["status"] == "fail" and entry["values"] == {"worst": None, "count": 3}
    json.dumps(entry, allow_nan=False)


@pytest.mark.parametrize("values", [[np.nan] * 5, [1.0, np.nan, 2.0], [np.inf, -np.inf], [np.nan, 1.0, np.inf]])
def test_report_statistics_skip_non_finite_values_with_a_count(values):
    from rowbeam.report.build import _stat_quantiles

    v = np.sort(np.array(values, np.float64))
    q = _stat_quantiles(v, is_sorted=True)
    json.dumps(q, allow_nan=False)
    assert q["non_finite"] == int(np.sum(~np.isfinite(v)))


def test_finite_json_makes_any_document_valid_json():
    doc = {"a": [1.0, float("nan"), {"b": np.float64("inf")}], "c": (float("-inf"),), "d": "nan"}
    assert json.loads(json.dumps(finite_json(doc), allow_nan=False)) == {"a": [1.0, None, {"b": None}], "c": [None],
                                                                        "d": "nan"}


@pytest.mark.parametrize("items, status", [
    ([("pass", "pass")], "pass"), ([("pass", "fail")], "fail"), ([("pass", "pass"), ("pass", "unchecked")], "fail"),
    ([("fail", "pass")], "fail")])
def test_report_status_fails_when_any_listed_folder_failed_or_was_not_checked(items, status):
    from rowbeam.report.build import _overall_status

    docs = [{"qa_status": b, "items": [{"qa_status": "fail" if i == "unchecked" else i}]} for b, i in items]
    assert _overall_status(docs) == status


# ---------------------------------------------------------------------------------------------------
# signals: one line, 130 / 143, no traceback

SLEEPER = ("import sys,time\nfrom rowbeam.util.interrupt import guard, deferred, raise_pending\n"
           "def run():\n    print('ready', flush=True)\n"
           "    if sys.argv[1] == 'deferred':\n"
           "        with deferred():\n            time.sleep(1.5)\n            print('finished the safe stretch', flush=True)\n"
           "            raise_pending()\n"
           "    time.sleep(30)\n    return 0\n"
           "sys.exit(guard('rowbeam test', run))\n")


@pytest.mark.parametrize("sig, mode", [(signal.SIGINT, "plain"), (signal.SIGTERM, "plain"),
                                       (signal.SIGINT, "deferred"), (signal.SIGTERM, "deferred")])
def test_signals_stop_with_one_line_and_128_plus_signal(sig, mode):
    p = subprocess.Popen([sys.executable, "-c", SLEEPER, mode], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    p.send_signal(sig)
    out, err = p.communicate(timeout=TIMEOUT_S)
    assert p.returncode == 128 + sig, (p.returncode, err)
    assert err.count("\n") == 1 and "interrupted:" in err and "Traceback" not in err, err
    assert ("finished the safe stretch" in out) is (mode == "deferred")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_report_interrupted_leaves_nothing(sig, tmp_path):
    """A report stopped while it checks: one line, 130/143, no staging folder, --out not created."""
    bundle = fake_bundle(tmp_path / "bundle")
    (bundle / "events").mkdir()
    fifo_free_slow = ("import sys,time\nimport rowbeam.report.build as b\n"
                      "def slow(*a, **k):\n    print('ready', flush=True)\n    time.sleep(30)\n"
                      "b.check_bundle = slow\nfrom rowbeam.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    p = subprocess.Popen([sys.executable, "-c", fifo_free_slow, "report", str(bundle), "--out", str(tmp_path / "out")],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(sig)
    _, err = p.communicate(timeout=TIMEOUT_S)
    assert p.returncode == 128 + sig and err.count("\n") == 1 and "interrupted" in err, err
    assert sorted(os.listdir(tmp_path)) == ["bundle"]


# ---------------------------------------------------------------------------------------------------
# full disks: one line, exit 2, nothing left

def tmpfs(path: Path, size: str) -> None:
    path.mkdir()
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")


def fill(fs: Path, leave_bytes: int = 0) -> None:
    """Fill the file system at `fs` with `fs/filler`, then give back about `leave_bytes`."""
    with open(fs / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
        f.truncate(max(os.fstat(f.fileno()).st_size - leave_bytes, 0))


@pytest.mark.parametrize("command", ["schemas", "report"])
def test_full_disk_is_one_line_and_leaves_nothing(command, tmp_path):
    fs = tmp_path / "fs"
    tmpfs(fs, "256k")
    try:
        fill(fs)
        bundle = fake_bundle(tmp_path / "bundle")
        r = cli("schemas", fs / "out") if command == "schemas" else cli("report", bundle, "--out", fs / "out")
        one_line(r, 2)
        assert sorted(os.listdir(fs)) == ["filler"]
    finally:
        subprocess.run(["umount", str(fs)], capture_output=True)


def test_resolve_inside_is_the_one_rule(tmp_path):
    """resolve_inside refuses absolute, '..', and links leaving the root; the shared rule of the readers."""
    root = tmp_path / "bundle"
    root.mkdir()
    (root / "up").symlink_to(tmp_path)
    for uri in ("/etc/passwd", "../x", "up/x", "a/../../x"):
        with pytest.raises(RowbeamError):
            resolve_inside(root, uri)



@pytest.mark.parametrize("hidden", ["events/..camera/000000", "events/cam/.000001.old-5", "flows/.cam/000000-000001",
                                    "flows/cam/.000000-000001.tmp"])
def test_hidden_folders_among_events_make_the_report_fail(hidden, tmp_path):
    from rowbeam.report.build import _hidden_data_folders, _overall_status

    root = tmp_path / "bundle"
    (root / "events" / "cam" / "000000").mkdir(parents=True)
    (root / hidden).mkdir(parents=True)
    unchecked = _hidden_data_folders(root)
    assert unchecked and all(Path(u).name.startswith(".") for u in unchecked)
    assert _overall_status([{"qa_status": "pass", "items": [], "unchecked": unchecked}]) == "fail"


def _fin_dataset(d):
    (d / "dataset.json").write_text('{"my": "dataset description"}')


def _fin_qa(d):
    (d / "qa_summary.json").write_text("my notes")


def _fin_split_same_name(d):
    (d / "splits").mkdir()
    (d / "splits" / "train.txt").write_text("my hand-made split\n")


def _fin_split_extra(d):
    (d / "splits").mkdir()
    plant_marker(d / "splits", os.getpid(), files=["train.txt"])
    (d / "splits" / "train.txt").write_text("a\n")
    (d / "splits" / "README").write_text("mine")


FINALIZE_CASES = {f.__name__.removeprefix("_fin_"): f for f in (_fin_dataset, _fin_qa, _fin_split_same_name,
                                                                _fin_split_extra)}


@pytest.mark.parametrize("case", sorted(FINALIZE_CASES))
def test_finalize_never_overwrites_files_it_did_not_write(case, tmp_path):
    from rowbeam.farm.finalize import check_outputs_are_ours

    FINALIZE_CASES[case](tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(RowbeamError):
        check_outputs_are_ours(tmp_path)
    assert snapshot(tmp_path) == before


CONSOLE = ("import os,sys\nfrom rowbeam.blender.export.console import export_console\n"
           "with export_console(quiet=sys.argv[1] == 'quiet', verbose=sys.argv[1] == 'verbose'):\n"
           "    os.write(1, b'Read blend: x.blend\\n')\n"
           "    os.write(2, b'Warning: PyDriver auto-exec disabled\\n')\n"
           "    os.write(2, b'OpenEXR: warning, header attribute ignored\\n')\n"
           "    print('rowbeam: error: the one line', file=sys.stderr)\n")


@pytest.mark.parametrize("mode, shown", [("quiet", ["rowbeam: error"]),
                                         ("verbose", ["Read blend", "PyDriver", "OpenEXR", "rowbeam: error"])])
def test_quiet_silences_blender_and_openexr_lines_and_verbose_shows_them(mode, shown):
    r = subprocess.run([sys.executable, "-c", CONSOLE, mode], cwd=REPO, capture_output=True, text=True,
                       timeout=TIMEOUT_S)
    text = r.stdout + r.stderr
    for line in ("Read blend", "PyDriver", "OpenEXR", "rowbeam: error"):
        assert (line in text) is (line in shown), (mode, text)
