"""Reading exported events in tests."""
from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from rowbeam.bundle.reader import open_event


def load_event(event_dir, verify: bool = False) -> tuple[dict, dict]:
    """(manifest, {modality: array}) of one published event (or flow) folder, through the bundle loader.
    Hashes are not verified by default: tests edit payloads on purpose and check what the checker says."""
    event = open_event(event_dir)
    return event.manifest, event.arrays(verify=verify)


def rehash(event_dir, name) -> None:
    """After editing a payload in a test, update its hash so a check must catch the fault by content."""
    from rowbeam.bundle.files import sha256_file

    event_dir = Path(event_dir)
    m = json.loads((event_dir / "manifest.json").read_text())
    p = event_dir / m["modalities"][name]["uri"]
    m["modalities"][name].update(sha256=sha256_file(p), bytes=p.stat().st_size)
    (event_dir / "manifest.json").write_text(json.dumps(m))


def save_payload(event_dir, name, array) -> None:
    """Replace modality `name`'s file by `array` in the file format and storage its manifest entry declares (the
    writer the exporter uses), then rehash: a test plants a fault by content, whatever the encoding."""
    from rowbeam.bundle.arrays import write_exr, write_npy, write_npz

    event_dir = Path(event_dir)
    entry = json.loads((event_dir / "manifest.json").read_text())["modalities"][name]
    path = event_dir / entry["uri"]
    if entry["format"] == "openexr":
        storage = entry.get("storage") or {}
        encoding = {k: storage[k] for k in ("compression", "pixel_type") if k in storage}
        write_exr(path, array, entry["channels"], entry["dtype"], encoding=encoding)
    elif entry["format"] == "npz":
        write_npz(path, array)
    else:
        write_npy(path, array)
    rehash(event_dir, name)


def load_payload(event_dir, name):
    """The decoded array of modality `name` of an event folder (no sha256 check: for editing)."""
    from rowbeam.bundle.reader import read_payload

    event_dir = Path(event_dir)
    entry = json.loads((event_dir / "manifest.json").read_text())["modalities"][name]
    return read_payload(event_dir, entry, verify=False)


def failures(bundle_dir) -> tuple[dict, list]:
    from rowbeam.check.runner import check_bundle

    report = check_bundle(bundle_dir)
    return report, [c for e in report["events"] for c in e["checks"] if c["status"] == "fail"]


def assert_fails(bundle_dir, check, *fragments) -> None:
    report, fails = failures(bundle_dir)
    assert report["status"] == "fail"
    hits = [f for f in fails if f["check"] == check]
    assert hits, f"expected a failing {check!r}, got {[(f['check'], f['message']) for f in fails]}"
    for frag in fragments:
        assert any(frag in f["message"] for f in hits), (frag, hits)


def bundle_digest(bundle) -> dict:
    """{path relative to the bundle: sha256} of every file under it, for comparing two exports of one dataset.

    A manifest is hashed without its `run` block (host, python, seconds: the only per-run fields) and
    without `build.git_revision` (commits may land between the two exports), and a flow's endpoint
    `manifest_sha256` is first checked against the endpoint manifest file in the same bundle, then left
    out (it hashes the endpoint's run block)."""
    import hashlib

    from rowbeam.bundle.files import canonical_json, sha256_file

    bundle = Path(bundle)
    digest = {}
    for p in sorted(q for q in bundle.rglob("*") if q.is_file()):
        rel = p.relative_to(bundle).as_posix()
        if p.name != "manifest.json":
            digest[rel] = sha256_file(p)
            continue
        m = json.loads(p.read_text())
        m.pop("run", None)
        m.get("build", {}).pop("git_revision", None)
        for e in m.get("endpoints", {}).values():
            assert sha256_file(bundle / e.pop("manifest")) == e.pop("manifest_sha256"), (rel, "endpoint hash")
        digest[rel] = hashlib.sha256(canonical_json(m)).hexdigest()
    return digest


def save_plane_scene(path, scale: int):
    """A labels-only (rgb_samples 0) fronto-parallel plane scene (30 fps, frames 1..30) saved at `path`,
    (1280 / scale) x (720 / scale) pixels; returns the .blend path (its rig beside it as .rig.json)."""
    from rowbeam.blender.scenes import calibration, common

    _, rig = calibration.fronto_plane(scale=scale)
    rig["sensors"][0]["rgb_samples"] = 0
    return common.save(path, rig)


def object_scene_poses(scale: int = 16) -> dict:
    """T_camera_object (4x4, metres) of the static objects of rowbeam.blender.scenes.object_scenes.object_calibration, from the
    scene's declared pixel rectangles and depths (closed form through K), not from the built scene."""
    import numpy as np

    from rowbeam.blender.scenes import calibration, object_scenes

    K = calibration.seed_K(scale)
    f, cx, cy = K[0], K[1], K[2]
    out = {}
    for name, (u0, u1, v0, v1, z) in (("truncated", (59.5, 99.5, 10.5, 20.5, 10.0)),
                                      ("back", (9.5, 29.5, 24.5, 39.5, 12.0)),
                                      ("front", (19.5, 39.5, 29.5, 34.5, 6.0))):
        M = np.eye(4)
        M[:3, 3] = (((u0 + u1) / 2 - cx) * z / f, ((v0 + v1) / 2 - cy) * z / f, z)
        out[name] = M
    M = np.eye(4)
    M[:3, :3] = object_scenes._rot(0.4, -0.6, 0.3)
    M[:3, 3] = (-1.5, -1.2, 9.0)
    out["box"] = M
    return out


def run_on_a_terminal(argv, cwd, env=None, timeout=600) -> tuple[int, str]:
    """Run argv with stdout and stderr on a pseudo-terminal (as in a user's shell); (exit status, all it showed)."""
    import os
    import pty
    import subprocess
    main, child = pty.openpty()
    proc = subprocess.Popen([str(a) for a in argv], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=child,
                            stderr=child, close_fds=True)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 4096)
        except OSError:                                   # EIO once the child has closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    return proc.wait(timeout=timeout), b"".join(chunks).decode(errors="replace")


def snapshot(*roots) -> dict:
    """{path: sha256 of a regular file, or its kind} of everything under `roots` (never opens special files)."""
    out = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                st = os.lstat(p)
                out[str(p)] = (hashlib.sha256(p.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode)
                               else stat.S_IFMT(st.st_mode))
    return out


def scene_script(module: str, builder: str, then: str = "") -> str:
    """Python for build_blend: build rowbeam.blender.scenes.`module`.`builder`(scale=4), save it with its rig to
    sys.argv[1], then run `then` (names in scope: sys, json, common, the module, rig)."""
    return (f"import sys, json\nfrom rowbeam.blender.scenes import {module}, common\n"
            f"_, rig = {module}.{builder}(scale=4)\ncommon.save(sys.argv[1], rig)\n{then}")


def build_blend(code: str, blend, *args) -> None:
    """Run scene-building Python `code` in a fresh interpreter at the repository root (sys.argv[1] = blend path,
    then args); asserts it succeeded."""
    r = subprocess.run([sys.executable, "-c", code, str(blend), *map(str, args)], cwd=_REPO, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr


def export_first_event(blend, rig, out, *extra) -> str:
    """render_export.py of event 0 (one event) of `blend` with `rig` into `out` (extra: more CLI arguments);
    asserts it published. Returns the exporter's stderr."""
    r = subprocess.run([sys.executable, str(_REPO / "render_export.py"), str(blend), "--rig", str(rig), "--out",
                        str(out), "--first-event", "0", "--count", "1", *extra], cwd=_REPO, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    return r.stderr


_REPO = Path(__file__).resolve().parents[1]
