"""`contracts check` and `contracts adapt` under abuse: copied, renamed and trash folders, a tampered
bundle.json, special files, unbounded JSON, unwritable outputs and a closed pipe.

A tiny real bundle (tilted plane, 32x18, events 0 and 1 and the flow 0->1) is exported once; every case
mutates a private copy. The table-driven corpus runs the real CLI in a subprocess and asserts the exit
status and either the single error line (exit 2: nothing written, no temporary litter, bundle unchanged)
or exactly the set of failing checks and warnings in the written QA report.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from rowbeam.check.runner import check_bundle
from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import atomic_write_bytes, canonical_sha256, load_json
from rowbeam.bundle.schema import schema_errors
from rowbeam.blender.scenes import calibration

from tests.conftest import REPO, run_python
from tests.helpers import snapshot

CAMERA = "camera_front"
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def clean(exports):
    """Bundle with events 0 and 1 of a 32x18 camera and the flow between them."""
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export

    e = exports("abuse_tilted_32x18", calibration.tilted_plane, scale=40, first_event=0, count=2)
    if not (e.bundle / "flows").exists():
        run_export(plan_export(ExportRequest(out=e.bundle, blend=e.blend, rig=e.rig, first_event=0, count=2,
                                             flow=True, device="cpu")))
    return e.bundle


@dataclass
class Ctx:
    """Paths of a private bundle copy: root, its two events, its flow, and a folder for outputs."""
    root: Path
    out: Path

    @property
    def e0(self) -> Path:
        return self.root / "events" / CAMERA / "000000"

    @property
    def e1(self) -> Path:
        return self.root / "events" / CAMERA / "000001"

    @property
    def flow(self) -> Path:
        return self.root / "flows" / CAMERA / "000000-000001"

    @property
    def report(self) -> Path:
        return self.out / "report.json"


@pytest.fixture
def ctx(clean, tmp_path) -> Ctx:
    shutil.copytree(clean, tmp_path / "bundle")
    (tmp_path / "out").mkdir()
    return Ctx(tmp_path / "bundle", tmp_path / "out")


def cli(*args) -> object:
    return run_python("-m", "rowbeam", *args, timeout=TIMEOUT_S)


def tmp_litter(*roots) -> list[str]:
    return [str(p) for r in roots for p in Path(r).rglob(".*.tmp-*")]


def failing(report: dict, status: str = "fail") -> set[str]:
    """Names of checks with `status` anywhere in a QA report (bundle-level and per folder)."""
    entries = [report["bundle"], *report["events"]]
    return {c["check"] for e in entries for c in e["checks"] if c["status"] == status}


# ---------------------------------------------------------------------------------------------------
# mutations

def _read(p: Path) -> dict:
    return json.loads(p.read_text())


def _write(p: Path, doc) -> None:
    p.write_text(json.dumps(doc))


def _edit_bundle(c: Ctx, edit: Callable[[dict], None], rehash_rig=False, rehash_identity=False) -> None:
    doc = _read(c.root / "bundle.json")
    edit(doc)
    if rehash_rig:
        doc["identity"]["rig_sha256"] = canonical_sha256(doc["rig"])
    if rehash_identity:
        doc["dataset_id"] = canonical_sha256(doc["identity"])
    _write(c.root / "bundle.json", doc)


def _edit_manifest(folder: Path, edit: Callable[[dict], None]) -> None:
    m = _read(folder / "manifest.json")
    edit(m)
    _write(folder / "manifest.json", m)


def _replace(p: Path, kind: str, text: str = "") -> None:
    """Put a FIFO, a folder, a file of `text`, or a 65 MiB sparse file where `p` was."""
    if p.is_dir():
        shutil.rmtree(p)
    elif os.path.lexists(p):
        p.unlink()
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dir":
        p.mkdir()
    elif kind == "huge":
        with open(p, "wb") as f:
            f.write(b"{}")
            f.truncate(65 << 20)
    else:
        p.write_bytes(text.encode() if isinstance(text, str) else text)


DEEP = "[" * 5000 + "]" * 5000


def _nan_manifest(folder: Path) -> None:
    text = (folder / "manifest.json").read_text()
    (folder / "manifest.json").write_text(text.replace('"exposure_ns": 4000000', '"exposure_ns": NaN', 1))


# ---------------------------------------------------------------------------------------------------
# the corpus

@dataclass
class Case:
    id: str
    mutate: Callable[[Ctx], None]
    rc: int
    expect: str | set = field(default_factory=set)   # exit 2: fragment of the error line; else failing checks
    warn: set = field(default_factory=set)            # exit 0/1: expected warnings
    argv: Callable[[Ctx], list] | None = None         # default: check ROOT --report OUT/report.json
    adapt: bool = False


def _noop(c):
    pass


def _check(c: Ctx, target=None, report=None) -> list:
    return ["check", target or c.root, "--report", report or c.report]


def _adapt_argv(out_name="f.flo", fmt="flo", flow=None, extra=()):
    return lambda c: ["adapt", fmt, flow(c) if flow else c.flow,
                      out_name(c) if callable(out_name) else c.out / out_name, *extra]


def _rate_15(doc):
    doc["rig"]["sensors"][0]["rate_hz"] = 15


def _scenario(doc):
    doc["identity"]["scenario"] = "another_scenario"


def _blend(doc):
    doc["identity"]["blend_sha256"] = "0" * 64


_READ_ONLY: list = []


def _readonly_dir() -> Path | None:
    """A folder even root cannot write: sysfs, else (as root) a read-only tmpfs mounted once for the session and
    unmounted at exit; None when this machine has neither."""
    if _READ_ONLY:
        return _READ_ONLY[0]
    p = Path("/sys")
    try:
        (p / ".rowbeam_probe").write_bytes(b"")
    except OSError:
        _READ_ONLY.append(p)
        return p
    (p / ".rowbeam_probe").unlink()
    if os.geteuid() != 0:
        return None
    import atexit
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="rowbeam_ro_"))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(d)], capture_output=True).returncode:
        d.rmdir()
        return None
    atexit.register(lambda: subprocess.run(["umount", str(d)], capture_output=True).returncode or d.rmdir())
    _READ_ONLY.append(d)
    return d


CHECKER = [
    # copied, renamed and stray folders and files
    Case("event_copied_as_000007", lambda c: shutil.copytree(c.e0, c.e0.with_name("000007")), 1,
         {"location", "sample_ids_unique"}),
    Case("event_copied_as_000000_copy", lambda c: shutil.copytree(c.e0, c.e0.with_name("000000 copy")), 1,
         {"layout"}),
    Case("sensor_folder_copied", lambda c: shutil.copytree(c.e0.parent, c.e0.parent.with_name("camera_back")), 1,
         {"location", "sample_ids_unique"}),
    Case("flow_copied_into_events", lambda c: shutil.copytree(c.flow, c.e0.with_name("000009")), 1,
         {"location", "sample_ids_unique"}),
    Case("flow_folder_renamed", lambda c: c.flow.rename(c.flow.with_name("000000-000002")), 1, {"location"}),
    Case("flow_copied_under_odd_name", lambda c: shutil.copytree(c.flow, c.flow.with_name("latest")), 1,
         {"layout"}),
    Case("stray_file_in_sensor_folder", lambda c: (c.e0.parent / "notes.txt").write_text("x"), 1, {"layout"}),
    Case("stray_file_in_events", lambda c: (c.root / "events" / "README").write_text("x"), 1, {"layout"}),
    Case("event_folder_without_manifest", lambda c: c.e0.with_name("000005").mkdir(), 1, {"layout"}),
    Case("publish_trash_is_a_warning", lambda c: shutil.copytree(c.e1, c.e1.with_name(".000001.old-999")), 0,
         set(), {"layout_litter"}),
    Case("stray_copy_in_an_event_folder_is_a_warning",
         lambda c: shutil.copy(c.e0 / "range.exr", c.e0 / "range (1).exr"), 0, set(), {"folder_contents"}),
    Case("temporary_payload_in_a_flow_folder_is_a_warning",
         lambda c: (c.flow / ".flow_forward.exr.tmp-77").write_bytes(b""), 0, set(), {"folder_contents"}),
    Case("staging_leftover_is_a_warning", lambda c: shutil.copytree(c.e1, c.root / ".staging" / "w-999-ab"), 0,
         set(), {"layout_litter"}),
    Case("empty_staging_folders_are_not_litter", lambda c: (c.root / ".staging" / "locks").mkdir(parents=True), 0),
    Case("bundle_tmp_leftover_is_a_warning", lambda c: (c.root / ".bundle.json.tmp-4242").write_bytes(b""), 0,
         set(), {"layout_litter"}),
    # bundle.json: tampered but readable -> hard failures
    Case("bundle_schema_invalid", lambda c: _edit_bundle(c, lambda d: d.pop("layout")), 1, {"bundle_schema"}),
    Case("bundle_dataset_id_tampered", lambda c: _edit_bundle(c, lambda d: d.update(dataset_id="ab" * 32)), 1,
         {"bundle_dataset_id"}),
    Case("bundle_blend_identity_tampered", lambda c: _edit_bundle(c, _blend, rehash_identity=True), 1,
         {"identity"}),
    Case("bundle_scenario_tampered", lambda c: _edit_bundle(c, _scenario, rehash_identity=True), 1, {"identity"}),
    Case("bundle_rig_tampered", lambda c: _edit_bundle(c, _rate_15), 1, {"bundle_rig"}),
    Case("bundle_rig_consistently_replaced", lambda c: _edit_bundle(c, _rate_15, True, True), 1,
         {"identity", "schedule"}),
    # manifests: moved, edited, special or unbounded (the flow's endpoint check sees the change too)
    Case("event_index_edited", lambda c: _edit_manifest(c.e1, lambda m: m["event"].update(index=7)), 1,
         {"location", "schedule", "endpoint:destination"}),
    Case("sample_id_edited", lambda c: _edit_manifest(c.e1, lambda m: m.update(sample_id="x.camera_front.1")), 1,
         {"location", "endpoint:destination"}),
    Case("flow_lineage_emptied", lambda c: _edit_manifest(c.flow, lambda m: m.update(lineage={})), 1,
         {"location", "identity"}),
    Case("manifest_is_a_fifo", lambda c: _replace(c.e0 / "manifest.json", "fifo"), 1,
         {"manifest_json", "endpoint:source"}),
    Case("manifest_is_a_folder", lambda c: _replace(c.e0 / "manifest.json", "dir"), 1,
         {"manifest_json", "endpoint:source"}),
    Case("manifest_nested_5000_deep", lambda c: _replace(c.e0 / "manifest.json", "text", DEEP), 1,
         {"manifest_json", "endpoint:source"}),
    Case("manifest_with_nan", lambda c: _nan_manifest(c.e0), 1, {"manifest_json", "endpoint:source"}),
    Case("manifest_over_64_mib", lambda c: _replace(c.e1 / "manifest.json", "huge"), 1,
         {"manifest_json", "endpoint:destination"}),
    Case("manifest_5000_digit_number", lambda c: _replace(c.e1 / "manifest.json", "text", "[" + "9" * 5000 + "]"),
         1, {"manifest_json", "endpoint:destination"}),
    Case("manifest_is_a_json_array", lambda c: _replace(c.e1 / "manifest.json", "text", "[]"), 1,
         {"schema", "endpoint:destination"}),
    Case("single_event_with_fifo_manifest", lambda c: _replace(c.e0 / "manifest.json", "fifo"), 1,
         {"manifest_json"}, argv=lambda c: _check(c, c.e0)),
    # payloads: special files are refused without being opened
    Case("payload_is_a_fifo", lambda c: _replace(c.e1 / "semantic_id.exr", "fifo"), 1, {"payload:semantic_id"}),
    Case("payload_is_a_folder", lambda c: _replace(c.e1 / "semantic_id.exr", "dir"), 1, {"payload:semantic_id"}),
    Case("payload_links_to_dev_zero", lambda c: (_replace(c.e1 / "semantic_id.exr", "dir"),
                                                 os.rmdir(c.e1 / "semantic_id.exr"),
                                                 os.symlink("/dev/zero", c.e1 / "semantic_id.exr")), 1,
         {"payload:semantic_id"}),
    # unusable input: one line, exit 2
    Case("bundle_json_is_a_fifo", lambda c: _replace(c.root / "bundle.json", "fifo"), 2, "bundle.json: is a FIFO"),
    Case("bundle_json_is_a_folder", lambda c: _replace(c.root / "bundle.json", "dir"), 2, "is a folder"),
    Case("bundle_json_nested_5000_deep", lambda c: _replace(c.root / "bundle.json", "text", DEEP), 2,
         "nested deeper than 64 levels"),
    Case("bundle_json_not_json", lambda c: _replace(c.root / "bundle.json", "text", "{bundle"), 2,
         "not valid JSON"),
    Case("bundle_json_infinity", lambda c: _replace(c.root / "bundle.json", "text", '{"a": -Infinity}'), 2,
         "holds the number -Infinity"),
    Case("bundle_json_1e999", lambda c: _replace(c.root / "bundle.json", "text", '{"a": 1e999}'), 2,
         "holds the number 1e999"),
    Case("bundle_json_over_64_mib", lambda c: _replace(c.root / "bundle.json", "huge"), 2,
         f"{65 << 20} bytes; a bundle.json may hold at most 64 MiB"),
    Case("bundle_json_not_utf8", lambda c: _replace(c.root / "bundle.json", "text", b'{"a": "\xff"}'), 2,
         "can't decode byte 0xff"),
    Case("bundle_json_is_an_array", lambda c: _replace(c.root / "bundle.json", "text", "[]"), 2,
         "not a JSON object"),
    Case("bundle_without_events", lambda c: (shutil.rmtree(c.root / "events"), shutil.rmtree(c.root / "flows")), 2,
         "holds no events"),
    Case("no_such_bundle", _noop, 2, "no such file or folder", argv=lambda c: _check(c, c.root / "nope")),
    Case("report_is_a_folder", _noop, 2, "is a folder", argv=lambda c: _check(c, report=c.out)),
    Case("report_folder_missing", _noop, 2, "does not exist", argv=lambda c: _check(c, report=c.out / "no" / "r.json")),
    Case("report_under_a_file", lambda c: (c.out / "f").write_text("x"), 2, "is not a folder",
         argv=lambda c: _check(c, report=c.out / "f" / "r.json")),
    Case("report_refused_before_the_check", _noop, 2, "--report",
         argv=lambda c: _check(c, c.root / "nope", report=c.out)),
    Case("report_inside_events", _noop, 2, "inside the bundle",
         argv=lambda c: _check(c, report=c.root / "events" / "r.json")),
    Case("report_over_a_payload", _noop, 2, "inside the bundle",
         argv=lambda c: _check(c, report=c.e0 / "range.exr")),
    Case("report_over_bundle_json", _noop, 2, "inside the bundle",
         argv=lambda c: _check(c, report=c.root / "bundle.json")),
    Case("report_on_read_only_mount", _noop, 2, "Permission denied",
         argv=lambda c: _check(c, report=_readonly_dir() / "rowbeam_report.json")),
    Case("event_link_outside", lambda c: _link_outside(c, c.e1, c.root / "events" / CAMERA / "000002"), 1,
         {"layout"}),
    Case("sensor_link_outside", lambda c: _link_outside(c, c.e1.parent, c.root / "events" / "camera_rear"), 1,
         {"layout"}),
    Case("event_link_to_sibling_prefix", lambda c: _link_sibling(c, "events/camera_front/000001", "000002"), 1,
         {"layout"}),
]


def _user_file_and_link(mine: Path, link: Path) -> None:
    mine.write_text("the user's file")
    link.symlink_to(mine)


def _link_outside(c: Ctx, copy_of: Path, link: Path) -> None:
    """`link` -> a copy of `copy_of` outside the bundle (beside it)."""
    outside = c.root.parent / "outside" / copy_of.name
    shutil.copytree(copy_of, outside)
    link.symlink_to(outside)


def _link_sibling(c: Ctx, rel: str, name: str) -> None:
    """A link into a sibling folder whose name starts with the bundle's (`bundle` vs `bundle2`)."""
    sibling = c.root.with_name(c.root.name + "2")
    shutil.copytree(c.root / rel, sibling / rel)
    (c.root / rel).parent.joinpath(name).symlink_to(sibling / rel)

ADAPTER = [
    Case("adapt_out_is_a_folder", _noop, 2, "exists and is not a regular file", argv=_adapt_argv(lambda c: c.out)),
    Case("adapt_out_folder_missing", _noop, 2, "does not exist", argv=_adapt_argv("no/f.flo")),
    Case("adapt_out_under_a_file", lambda c: (c.out / "f").write_text("x"), 2, "is not a folder",
         argv=_adapt_argv("f/f.flo")),
    Case("adapt_sidecar_path_is_a_folder", lambda c: (c.out / "f.flo.json").mkdir(), 2,
         "exists and is not a regular file", argv=_adapt_argv()),
    Case("adapt_out_inside_the_flow", _noop, 2, "inside the bundle", argv=_adapt_argv(lambda c: c.flow / "f.flo")),
    Case("adapt_out_over_a_payload", _noop, 2, "inside the bundle",
         argv=_adapt_argv(lambda c: c.e0 / "range.exr", fmt="pfm")),
    Case("adapt_out_on_read_only_mount", _noop, 2, "Permission denied",
         argv=_adapt_argv(lambda c: _readonly_dir() / "rowbeam.flo")),
    Case("adapt_flow_folder_missing", _noop, 2, "not a flow folder", argv=_adapt_argv(flow=lambda c: c.out / "x")),
    Case("adapt_event_folder_given", _noop, 2, "not a rowbeam/flow@1 manifest", argv=_adapt_argv(flow=lambda c: c.e0)),
    Case("adapt_flow_manifest_fifo", lambda c: _replace(c.flow / "manifest.json", "fifo"), 2, "is a FIFO",
         argv=_adapt_argv()),
    Case("adapt_flow_manifest_deep", lambda c: _replace(c.flow / "manifest.json", "text", DEEP), 2,
         "nested deeper than 64 levels", argv=_adapt_argv()),
    Case("adapt_flow_manifest_schema_invalid",
         lambda c: _edit_manifest(c.flow, lambda m: m["endpoints"].pop("source")), 2, "violates rowbeam/flow@1",
         argv=_adapt_argv()),
    Case("adapt_flow_payload_fifo", lambda c: _replace(c.flow / "flow_forward.exr", "fifo"), 2, "is a FIFO",
         argv=_adapt_argv()),
    Case("adapt_flow_payload_changed", lambda c: (c.flow / "flow_forward.exr").write_bytes(b"x"), 2,
         "sha256 does not match", argv=_adapt_argv(fmt="kitti", out_name="f.png")),
    Case("adapt_bad_variant", _noop, 2, "variant 'occ' is not one of valid, geometric",
         argv=_adapt_argv(extra=("--variant", "occ"))),
    Case("adapt_out_file_exists", lambda c: (c.out / "f.flo").write_text("mine"), 2, "never overwrites",
         argv=_adapt_argv()),
    Case("adapt_sidecar_exists", lambda c: (c.out / "f.flo.json").write_text("{}"), 2, "never overwrites",
         argv=_adapt_argv()),
    Case("adapt_pfm_out_exists", lambda c: (c.out / "f.pfm").write_text("mine"), 2, "never overwrites",
         argv=_adapt_argv("f.pfm", fmt="pfm")),
    Case("adapt_kitti_out_is_a_link", lambda c: _user_file_and_link(c.out / "mine.txt", c.out / "f.png"), 2,
         "never overwrites", argv=_adapt_argv("f.png", fmt="kitti-flow")),
]
ADAPTER = [Case(**{**c.__dict__, "adapt": True}) for c in ADAPTER]
CORPUS = CHECKER + ADAPTER
NEEDS_READ_ONLY = {"report_on_read_only_mount", "adapt_out_on_read_only_mount"}


def test_corpus_size():
    assert len(CORPUS) >= 60 and len({c.id for c in CORPUS}) == len(CORPUS)


def _in_process(argv, capsys) -> subprocess.CompletedProcess:
    """The CLI's main() in this process (an escaping exception fails the test like a traceback would)."""
    from rowbeam.cli import main

    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return subprocess.CompletedProcess(argv, rc, out.out, out.err)


@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_malformed_input(case: Case, ctx: Ctx, capsys):
    """Exit-2 cases and every FIFO case run `python -m rowbeam` in a subprocess (with a timeout: a checker
    that opened the FIFO would block); the others call the same main() in-process (2 CPUs shared)."""
    if case.id in NEEDS_READ_ONLY and _readonly_dir() is None:
        pytest.skip("no read-only folder on this machine (sysfs is writable)")
    case.mutate(ctx)
    argv = (case.argv or _check)(ctx)
    before, litter = snapshot(ctx.root, ctx.out), tmp_litter(ctx.root, ctx.out)
    r = cli(*argv) if case.rc == 2 or "fifo" in case.id else _in_process(argv, capsys)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == case.rc, (r.returncode, r.stdout, r.stderr)
    assert snapshot(ctx.root) == {k: v for k, v in before.items() if k.startswith(str(ctx.root))}, \
        "the checker or adapter changed the bundle"
    assert tmp_litter(ctx.root, ctx.out) == litter
    if case.rc == 2:
        prog = f"rowbeam adapt {argv[1]}" if case.adapt else "rowbeam check"     # adapt errors name the format
        assert r.stderr.endswith("\n") and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith(f"{prog}: error: ") and case.expect in r.stderr, r.stderr
        assert r.stdout == ""
        assert snapshot(ctx.out) == {k: v for k, v in before.items() if k.startswith(str(ctx.out))}, \
            "something was written"
        return
    report = json.loads(ctx.report.read_text())
    assert not schema_errors(report, "rowbeam/qa_report@1")
    assert failing(report) == case.expect, [(c["check"], c["message"]) for e in [report["bundle"], *report["events"]]
                                            for c in e["checks"] if c["status"] != "pass"]
    assert failing(report, "warn") == case.warn
    assert r.stderr == ""
    shown = [line for line in r.stdout.splitlines() if line.startswith(("  FAIL", "  WARN"))]
    assert len(shown) == report["summary"]["failed_checks"] + report["summary"]["warnings"]


# ---------------------------------------------------------------------------------------------------
# behaviour around the corpus

def test_clean_bundle_passes_every_bundle_check(clean):
    report = check_bundle(clean)
    assert report["status"] == "pass" and not failing(report) and not failing(report, "warn")
    assert {c["check"] for c in report["bundle"]["checks"]} == {
        "bundle_schema", "bundle_dataset_id", "bundle_rig", "layout", "sample_ids_unique", "causality"}
    bundle = json.loads((clean / "bundle.json").read_text())
    for e in report["events"]:
        names = {c["check"] for c in e["checks"]}
        flow = "flows/" in e["manifest"]
        assert {"location", "identity"} | (set() if flow else {"schedule", "clock_model", "delivery", "time_rig"}) \
            <= names, (e["manifest"], names)
        manifest = json.loads((clean / e["manifest"]).read_text())
        assert manifest["build"]["blend_sha256"] == bundle["identity"]["blend_sha256"]
    assert report["summary"]["events"] == 3 and report["quarantine"] == []


def test_sample_ids_follow_scenario_sensor_and_time(clean):
    """The checker's sample-id rule agrees with what the exporter wrote (scenario . sensor . reference ns)."""
    for folder in sorted((clean / "events" / CAMERA).iterdir()):
        m = json.loads((folder / "manifest.json").read_text())
        assert m["sample_id"].split(".") == [m["lineage"]["scenario"], CAMERA, str(m["event"]["reference_time_ns"])]
        assert folder.name == f"{m['event']['index']:06d}"


def test_quarantine_is_listed_not_checked(ctx):
    q = ctx.root / "quarantine" / "events" / CAMERA / "000001"
    shutil.copytree(ctx.e1, q)
    (q / "range.exr").write_bytes(b"broken")          # would fail if it were checked
    report = check_bundle(ctx.root)
    assert report["status"] == "pass" and report["summary"]["events"] == 3
    assert report["quarantine"] == [f"quarantine/events/{CAMERA}/000001"]
    r = cli("check", ctx.root)
    assert r.returncode == 0 and "quarantine: 1 folder(s)" in r.stdout


def test_closed_pipe_exits_cleanly(ctx):
    """`contracts check B | head -0`: the reader is gone before anything is written; exit with the check status."""
    (ctx.e0.parent / "notes.txt").write_text("x")     # a failing bundle: status 1 must survive the closed pipe
    for args, rc in ((["check", ctx.root], 1), (["adapt", "pfm", ctx.flow, ctx.out / "f.pfm"], 0)):
        read, write = os.pipe()
        os.close(read)
        try:
            r = subprocess.run([sys.executable, "-m", "rowbeam", *map(str, args)], cwd=REPO, stdout=write,
                               stderr=subprocess.PIPE, text=True, timeout=TIMEOUT_S)
        finally:
            os.close(write)
        assert r.returncode == rc and r.stderr == "", (args, r.returncode, r.stderr)


def test_atomic_write_bytes_leaves_no_temporary_on_failure(tmp_path):
    (tmp_path / "target").mkdir()
    with pytest.raises(OSError):
        atomic_write_bytes(tmp_path / "target", b"data")          # rename over a folder fails
    with pytest.raises(OSError):
        atomic_write_bytes(tmp_path / "missing" / "x", b"data")   # no parent folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"] and not any((tmp_path / "target").iterdir())
    atomic_write_bytes(tmp_path / "ok", b"data")
    assert (tmp_path / "ok").read_bytes() == b"data" and sorted(p.name for p in tmp_path.iterdir()) == ["ok", "target"]


def _depth(doc) -> int:
    """Independent nesting depth of a parsed JSON value (recursive)."""
    if isinstance(doc, dict):
        return 1 + max(map(_depth, doc.values()), default=0)
    if isinstance(doc, list):
        return 1 + max(map(_depth, doc), default=0)
    return 0


def test_load_json_bounds(tmp_path):
    """Size is bounded before reading; nesting and numbers by the parser shared with rig files."""
    p = tmp_path / "d.json"
    p.write_text("[" * 64 + "]" * 64)
    assert _depth(load_json(p, "manifest")) == 64
    p.write_text("[" * 65 + "]" * 65)
    with pytest.raises(RowbeamError, match="manifest: nested deeper than 64 levels"):
        load_json(p, "manifest")
    p.write_text('{"k": "' + "x" * 2000 + '"}')
    assert load_json(p, "manifest", max_bytes=2010) == {"k": "x" * 2000}
    with pytest.raises(RowbeamError, match="2009 bytes; a manifest may hold at most"):
        load_json(p, "manifest", max_bytes=2000)
    for text, fragment in (("[NaN]", "holds the number NaN"), ("[Infinity]", "holds the number Infinity"),
                           ("[-1e400]", "holds the number -1e400"), ("[1,]", "not valid JSON")):
        p.write_text(text)
        with pytest.raises(RowbeamError, match=fragment) as exc:
            load_json(p, "manifest")
        assert str(p) in str(exc.value) and "\n" not in str(exc.value)


def test_non_finite_payload_values_print_no_numpy_warnings(ctx):
    """NaN, inf and float32-overflowing values planted on valid pixels (payload hashes updated, so the checks must
    read them): the checker fails the event and prints only its own lines, no numpy RuntimeWarning (the lines
    numpy prints for overflowing or invalid arithmetic are not the one-line messages a user gets)."""
    from rowbeam.bundle.reader import open_event
    from rowbeam.blender.export.manifest import write_payload_file

    from tests.helpers import rehash

    arrays = open_event(ctx.e0).arrays(("normal_geometric", "normal_shading", "camera_z", "range"), verify=False)
    for name, value in (("normal_geometric", np.inf), ("normal_shading", 3e38), ("camera_z", np.nan),
                        ("range", 3e38)):
        a = arrays[name].copy()
        a[2:4, 3:9] = value
        write_payload_file(ctx.e0, name, a, "rolling_shutter_camera")
        rehash(ctx.e0, name)
    r = cli("check", ctx.root)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert r.stderr == "", r.stderr
    assert "Warning" not in r.stdout and "FAIL events/camera_front/000000" in r.stdout, r.stdout
