"""Big scenes, small manifests: a geometry-nodes scatter (half its instances behind the camera) lists in each event
only the instances the event shows, each with its labels; the others carry no per-instance record. An instancer
with more instances than the declared bound (--max-instances) is refused with one line, exit 2, nothing written.
The 10^4-instance and 10^6-face figures are `make bench ONLY=big` (bench/bench_big.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from rowbeam.blender.scenes import big_scenes

from tests.helpers import failures, load_event

COUNT = 400


def small_scatter():
    return big_scenes.instance_scatter(COUNT, scale=16)


@pytest.fixture(scope="module")
def scatter(exports):
    return exports("small_scatter", small_scatter, first_event=1, count=2)


def test_event_lists_only_the_instances_it_shows(scatter):
    front = scatter.truth["visible_instances"]
    for event in sorted(scatter.bundle.glob("events/*/*")):
        m, a = load_event(event)
        insts = [o for o in m["objects"] if "instance" in o]
        shown = set(np.unique(a["instance_id"]).tolist())
        assert {o["render_index"] for o in insts} == shown - {o["render_index"] for o in m["objects"]
                                                               if "instance" not in o} - {0}
        assert 0 < len(insts) <= front                                       # never one behind the camera
        assert all(o["instance"]["persistent_path"][-1] < front for o in insts), "an instance behind the camera"
        labelled = {o["instance_id"] for o in m["object_labels"]["objects"]}
        assert {o["render_index"] for o in insts} <= labelled
        size = (event / "manifest.json").stat().st_size
        print(f"{event.name}: {len(insts)} of {COUNT} instances listed (shown), manifest {size} bytes")
    report, failed = failures(scatter.bundle)
    assert report["status"] == "pass", [(f["check"], f["message"]) for f in failed]


def test_shown_instances_keep_their_ids_across_events(scatter):
    ids = []
    for p in sorted(scatter.bundle.glob("events/*/*/manifest.json")):
        ids.append({o["name"]: o["id"] for o in json.loads(p.read_text())["objects"] if "instance" in o})
    common = set(ids[0]) & set(ids[1])
    assert common and all(ids[0][n] == ids[1][n] for n in common)


def test_instancer_beyond_the_declared_bound_is_one_line_exit_2(scatter, tmp_path):
    from tests.conftest import run_python

    r = run_python("render_export.py", scatter.blend, "--rig", scatter.rig, "--out", tmp_path / "b",
                   "--first-event", 1, "--count", 1, "--max-instances", COUNT - 1, "-q")
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("rowbeam export: error: instancer 'scatter' makes more than") and \
        f"{COUNT - 1}" in lines[0] and "--max-instances" in lines[0], lines
    assert not (tmp_path / "b").exists()
    r = run_python("render_export.py", scatter.blend, "--rig", scatter.rig, "--out", tmp_path / "b",
                   "--first-event", 1, "--count", 1, "--max-instances", "-3", "-q")
    assert r.returncode == 2 and "--max-instances" in r.stderr and len(r.stderr.strip().splitlines()) == 1
