"""Crashes and full disks with real processes: kill -9 at random moments then resume, what killed
writers leave behind, and a full file system (a small tmpfs when this platform lets us mount one)."""
from __future__ import annotations

import fcntl
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from rowbeam.blender.export.bundle import BundleWriter
from rowbeam.blender.scenes import common
from rowbeam.bundle import ownership

from tests.conftest import REPO, python_command, run_python
from tests.helpers import bundle_digest, save_plane_scene

EXPORT = REPO / "render_export.py"


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """A 40x18-pixel fronto-parallel plane scene (30 fps, frames 1..30), no rgb."""
    return save_plane_scene(tmp_path_factory.mktemp("crash") / "a.blend", scale=32)


def export_args(blend, out, *extra):
    return [EXPORT, blend, "--rig", blend.with_suffix(".rig.json"), "--out", out, "--device", "cpu", *extra]


def run_export_process(args, tmpdir: Path) -> subprocess.CompletedProcess:
    return run_python(*args, env={**os.environ, "TMPDIR": str(tmpdir)})


def dead_pid() -> int:
    """The pid of a process that has exited (reaped), so nothing on this host runs under it now."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def published_folders(out: Path) -> list[Path]:
    return sorted(p for kind in ("events", "flows") for p in (out / kind).glob("*/*"))


def assert_no_litter(out: Path, tmpdir: Path) -> None:
    hidden = sorted(str(p.relative_to(out)) for p in out.rglob(".*"))
    assert not hidden, f"left in the bundle: {hidden}"           # .staging, locks, .NAME.old-PID, temp files
    assert not (out / "quarantine").exists()
    assert not list(tmpdir.iterdir()), f"left in TMPDIR: {sorted(os.listdir(tmpdir))}"


def kill_after(args, tmpdir: Path, folders_done: int, delay_s: float) -> bool:
    """Start an exporter, SIGKILL it `delay_s` after it reported `folders_done` finished folders (0: after
    its plan line); True if it was still running when killed."""
    p = subprocess.Popen(python_command(*args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, env={**os.environ, "TMPDIR": str(tmpdir)})
    for line in p.stdout:
        if (folders_done == 0 and "flow pair(s) ->" in line) or line.startswith(f"rowbeam: [{folders_done}/"):
            break
    time.sleep(delay_s)
    alive = p.poll() is None
    p.send_signal(signal.SIGKILL)
    p.stdout.close()
    p.wait()
    return alive


def test_kill_9_at_random_moments_then_resume_is_identical(scene, tmp_path):
    """Seven exporters of a 4-event + 3-flow export killed with SIGKILL one after another on the same
    folder, each a random 0-0.5 s after it finished its k-th folder (k = 0..6, so kills land in every
    event, flow and publish); after each kill every published folder is byte-identical to an
    uninterrupted export's; a final run completes the bundle identically, with no staging, trash or
    temporary files left (in the bundle or in the exporters' TMPDIR)."""
    extra = ("--count", "4", "--flow")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    ref = run_export_process(export_args(scene, tmp_path / "reference", *extra), tmpdir)
    assert ref.returncode == 0, ref.stderr
    truth = bundle_digest(tmp_path / "reference")
    out = tmp_path / "out"
    rng = random.Random(8)
    killed, corrupt = 0, 0
    for k in range(7):
        killed += kill_after(export_args(scene, out, *extra), tmpdir, k, rng.uniform(0.0, 0.5))
        now = bundle_digest(out)
        corrupt += sum(now[f] != truth.get(f) for f in now if f.startswith(("events/", "flows/", "bundle.json")))
    assert killed >= 4, f"only {killed} of 7 exporters were still running when killed"
    assert corrupt == 0
    final = run_export_process(export_args(scene, out, *extra), tmpdir)
    assert final.returncode == 0 and "Traceback" not in final.stderr, final.stderr
    assert bundle_digest(out) == truth
    assert_no_litter(out, tmpdir)
    check = run_python("-m", "rowbeam", "check", out)
    assert check.returncode == 0, check.stdout + check.stderr


def test_what_killed_writers_leave_is_reclaimed(scene, tmp_path):
    """A 0-byte .bundle.json.tmp-PID (a kill during the first bundle.json write) or a write probe must not make
    the folder 'foreign'; a dead writer's staging, publish trash of a dead pid and a dead run's temporary folder are
    removed by the next run, while a live writer's staging (its owner lock held here) is kept; another
    host's staging is kept while its heartbeat is recent (FOREIGN_STALE_S)."""
    out, tmpdir, pid = tmp_path / "out", tmp_path / "tmp", dead_pid()
    out.mkdir()
    tmpdir.mkdir()
    (out / f".bundle.json.tmp-{pid}").write_bytes(b"")
    probe = out / ".rowbeam-probe-k1ll3d"                # a kill inside run._probe_writable
    probe.mkdir()
    os.utime(probe, (time.time() - 120, time.time() - 120))
    dead_staging = out / ".staging" / f"w-{pid}-0badcafe"
    (dead_staging / "events+camera_front+000001").mkdir(parents=True)
    (dead_staging / ".owner").write_text(json.dumps({"host": os.uname().nodename, "pid": pid}))
    plant_marker(dead_staging, pid)
    (dead_staging / "events+camera_front+000001" / "range.exr").write_bytes(b"partial")
    live_staging = out / ".staging" / f"w-{os.getpid()}-live0000"
    live_staging.mkdir()
    plant_marker(live_staging, os.getpid())
    owner = os.open(live_staging / ".owner", os.O_RDWR | os.O_CREAT)
    fcntl.flock(owner, fcntl.LOCK_EX)
    os.write(owner, json.dumps({"host": os.uname().nodename, "pid": os.getpid()}).encode())
    foreign = {}                                  # writers on other hosts sharing the folder: by heartbeat age
    for name, age_s in (("w-4242-f0f0f0f0", 60.0), ("w-4243-0e0e0e0e", 7 * 3600.0)):
        (out / ".staging" / name).mkdir()
        owner_file = out / ".staging" / name / ".owner"
        owner_file.write_text(json.dumps({"host": "farm-node-7.invalid", "pid": 4242}))
        plant_marker(owner_file.parent, 4242, "farm-node-7.invalid")
        os.utime(owner_file, (time.time() - age_s, time.time() - age_s))
        foreign[name] = out / ".staging" / name
    dead_run = tmpdir / f"rowbeam-run-{pid}-abcdefgh"
    (dead_run / "blender_x1y2z3").mkdir(parents=True)
    (dead_run / "rowbeam_render_1234.exr").write_bytes(b"half a render")
    (dead_run / "tmpabcd.oso").write_text("OpenShadingLanguage 1.00")
    plant_marker(dead_run, pid)
    try:
        first = run_export_process(export_args(scene, out, "--count", "2"), tmpdir)
        assert first.returncode == 0, first.stderr
        trash = out / "events" / "camera_front" / f".000001.old-{pid}"
        trash.mkdir()
        (trash / "manifest.json").write_text("{}")
        plant_marker(trash, pid)
        damaged = out / "events" / "camera_front" / "000000" / "range.exr"
        damaged.write_bytes(damaged.read_bytes()[:-8])      # republished: the old folder goes through trash
        second = run_export_process(export_args(scene, out, "--count", "2"), tmpdir)
        assert second.returncode == 0 and "published 1," in second.stdout and "skipped 1" in second.stdout, \
            second.stdout + second.stderr
        assert sorted(os.listdir(out / "events" / "camera_front")) == ["000000", "000001"]
        assert BundleWriter(out, {}).is_complete("events/camera_front/000000")
        assert json.loads((out / "bundle.json").read_text())["schema"] == "rowbeam/bundle@1"
        assert not (out / f".bundle.json.tmp-{pid}").exists() and not dead_staging.exists() and not probe.exists()
        assert not trash.exists() and not dead_run.exists()
        # the live writer's is kept, and another host's touched a minute ago; its 7-hour-old one is not
        assert sorted(os.listdir(out / ".staging")) == sorted([live_staging.name, "w-4242-f0f0f0f0"])
        assert sorted(os.listdir(live_staging)) == [".owner", ownership.MARKER]
    finally:
        os.close(owner)
    assert not list(tmpdir.iterdir())


def plant_marker(folder: Path, pid: int, host: str | None = None) -> None:
    """The owner marker a rowbeam run of `pid` on `host` writes into the folders it creates."""
    doc = {"format": ownership.FORMAT, "kind": "test", "pid": pid, "host": host or os.uname().nodename,
           "started": time.time() - 60, "token": "0123456789abcdef"}
    (folder / ownership.MARKER).write_text(json.dumps(doc))


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir()
    if os.name != "posix" or not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("disk-full test mounts a small tmpfs, which needs root on Linux")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {(r.stderr or r.stdout).strip()}")


def _fill(fs: Path, leave_bytes: int) -> Path:
    """Fill the file system at `fs` until only about `leave_bytes` remain free."""
    filler = fs / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    size = filler.stat().st_size
    os.truncate(filler, max(size - leave_bytes, 0))
    return filler


def _one_line(r, *fragments) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    errors = [line for line in r.stderr.splitlines() if line.startswith("rowbeam export: error:")]
    assert len(errors) == 1, r.stderr
    for f in fragments:
        assert f in errors[0], (f, errors[0])
    return errors[0]


def test_disk_full_is_one_line_and_leaves_nothing_half_written(scene, tmp_path):
    """On a 2 MiB tmpfs: completely full -> one line naming bundle.json, no folder created; 28 KiB free
    (bundle.json fits, an event does not) -> one line naming the output, only complete folders, no staging,
    a valid bundle.json; space freed -> the rerun completes the bundle and the checker passes."""
    fs, tmpdir = tmp_path / "fs", tmp_path / "tmp"
    tmpdir.mkdir()
    _mount_tmpfs(fs, "2m")
    try:
        out = fs / "out"
        filler = _fill(fs, 0)
        r = run_export_process(export_args(scene, out, "--count", "3"), tmpdir)
        _one_line(r, "No space left on device", str(out / "bundle.json"), "nothing written")
        assert sorted(os.listdir(fs)) == ["filler"]
        filler.unlink()
        filler = _fill(fs, 7 * 4096)
        r = run_export_process(export_args(scene, out, "--count", "3"), tmpdir)
        _one_line(r, "No space left on device", str(out), "not published")
        assert json.loads((out / "bundle.json").read_text())["schema"] == "rowbeam/bundle@1"
        writer = BundleWriter(out, {})
        assert all(writer.is_complete(p.relative_to(out).as_posix()) for p in published_folders(out))
        assert not [p for p in out.rglob(".*")], sorted(out.rglob(".*"))
        filler.unlink()
        r = run_export_process(export_args(scene, out, "--count", "3"), tmpdir)
        assert r.returncode == 0, r.stderr
        assert [p.name for p in published_folders(out)] == ["000000", "000001", "000002"]
        check = run_python("-m", "rowbeam", "check", out)
        assert check.returncode == 0, check.stdout + check.stderr
        assert not list(tmpdir.iterdir())
    finally:
        subprocess.run(["umount", str(fs)], capture_output=True)


def test_temporary_files_live_in_one_per_run_folder(tmp_path):
    """A LiDAR sweep export (Blender's Cycles add-on compiles its OSL camera into a tmp*.oso it never
    deletes) leaves nothing in the exporter's TMPDIR: renders, shaders and Blender's own session folder
    go to the run's folder, removed on exit. In-process (as the add-on runs it), the run restores this
    process's temp directory and Blender's, which must still exist afterwards."""
    import tempfile

    import bpy

    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export
    from rowbeam.blender.scenes import lidar_calibration

    _, rig = lidar_calibration.box_room(steps=64)
    blend = common.save(tmp_path / "room.blend", rig)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    r = run_export_process([EXPORT, blend, "--rig", blend.with_suffix(".rig.json"), "--out", tmp_path / "cli",
                            "--count", "2", "--device", "cpu"], tmpdir)
    assert r.returncode == 0, r.stderr
    assert not list(tmpdir.iterdir()), sorted(os.listdir(tmpdir))
    before = (tempfile.gettempdir(), bpy.app.tempdir, bpy.context.preferences.filepaths.temporary_directory)
    summary = run_export(plan_export(ExportRequest(out=tmp_path / "inproc", blend=blend,
                                                   rig=blend.with_suffix(".rig.json"), count=1, device="cpu")))
    assert len(summary["published"]) == 1
    after = (tempfile.gettempdir(), bpy.app.tempdir, bpy.context.preferences.filepaths.temporary_directory)
    assert after[0] == before[0] and after[2] == before[2] and Path(after[1]).is_dir()
    assert not [p for p in Path(before[0]).glob(f"rowbeam-run-{os.getpid()}-*")]
