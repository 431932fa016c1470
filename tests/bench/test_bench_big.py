"""Bench section `big` at test size: the scatter child (bench/bench_big.py, 1,000 instances at 80x45) exports,
checks and reports in a fresh process and finds no manifest entry for an instance the event does not show;
results.md keeps the latest value of every figure, from whichever run measured it last."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_big_scatter_child_small(tmp_path):
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_big.py"), "scatter", "1000", "16", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)},
                       cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    x = json.loads(r.stdout.strip().splitlines()[-1])
    assert x["image"] == [80, 45] and x["instances_in_scene"] == 1000
    assert x["check_status"] == "pass" and x["published"]
    assert 0 < x["instances_listed"] == x["instances_shown"] <= 500
    assert x["listed_not_shown"] == 0 and x["listed_behind"] == 0
    assert x["object_label_records"] >= x["instances_listed"]
    assert 0 < x["peak_rss_mb"] < 4096 and x["object_labels_s"] > 0 and x["label_export_s"] > 0


def test_results_keep_figures_of_sections_not_run(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import bench
    finally:
        sys.path.remove(str(REPO / "bench"))
    history = tmp_path / "results.jsonl"
    old = {"date": "d0", "revision": "r0", "arguments": "--only camera",
           "figures": [{"name": "camera x", "value": 1.25, "unit": "x", "target": "<= 1.3", "met": True, "note": ""},
                       {"name": "shared", "value": 9.0, "unit": "s", "target": None, "met": None, "note": "old"}]}
    history.write_text(json.dumps(old) + "\nnot json\n")
    monkeypatch.setattr(bench, "HISTORY", history)
    monkeypatch.setattr(bench, "RESULTS", tmp_path / "results.md")
    monkeypatch.setattr(bench, "FIGURES", [])
    bench.figure("shared", 2.0, "s", "<= 3")
    bench.write_results(["--only", "big"])
    text = (tmp_path / "results.md").read_text()
    assert "| shared | 2.000 s | <= 3 | met |" in text and "| shared | 9.000 s" not in text
    assert "| camera x | 1.250 x | <= 1.3 | met |  | d0, ? / ?, r0 |" in text
    assert len(history.read_text().splitlines()) == 3
