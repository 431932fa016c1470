"""`make bench-gpu` fails clearly without a GPU: one line, exit 2, nothing run (never a silent CPU fallback)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bench_gpu_without_a_gpu_fails_in_one_line_or_names_the_gpu():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_gpu.py"), "--detect-only"], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    if r.returncode == 0:                    # a GPU machine: the device is named, nothing falls back
        assert r.stdout.startswith("GPU: GPU:"), r.stdout
        return
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("rowbeam bench-gpu: error: --device gpu: no GPU"), r.stderr
    assert "Traceback" not in r.stderr and "never falls back" in lines[0]


def _bench_gpu(*args, timeout=900):
    return subprocess.run([sys.executable, str(REPO / "bench" / "bench_gpu.py"), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)


def _rows(results) -> dict:
    """{figure: (measured, target, verdict, note)} of a results file's table."""
    rows = [ln.strip(" |").split(" | ") for ln in results.read_text().splitlines() if ln.startswith("| ")][1:]
    return {r[0].strip(): tuple(x.strip() for x in r[1:]) for r in rows}


def test_bench_gpu_without_a_gpu_writes_unmeasured_figures(tmp_path):
    """No GPU backend of those asked: every figure is written as unmeasured (no value, no verdict), exit 2."""
    results = tmp_path / "results_gpu.md"
    r = _bench_gpu("--backends", "OPTIX,CUDA", "--results", results)
    if r.returncode == 0:                    # a GPU machine: measured instead
        return
    assert r.returncode == 2 and "unmeasured: no GPU available" in r.stderr, (r.returncode, r.stderr)
    rows = _rows(results)
    assert len(rows) == 8 and all(v[0] == "unmeasured" for v in rows.values()), rows
    assert all(v[2] == "—" and v[3].startswith("unmeasured: no GPU available") for v in rows.values()), rows
    assert "GPU/CPU wall, camera labels 1280x720 [CUDA]" in rows
    history = [json.loads(ln) for ln in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert history[-1]["results"] == "results_gpu.md" and len(history[-1]["figures"]) == 8
    assert all(f["value"] is None for f in history[-1]["figures"])


def test_bench_gpu_dry_run_compares_and_records_ratios(tmp_path):
    """The CPU standing in for the GPU (64x36): both exports, the label comparison and the results file run end to
    end; CPU against CPU the labels agree bitwise, so every tolerance figure is met."""
    results = tmp_path / "results_gpu.md"
    r = _bench_gpu("--dry-run", "--backends", "OPTIX", "--results", results)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = _rows(results)
    ratio = rows["GPU/CPU wall, camera labels 64x36 [OPTIX]"]
    assert float(ratio[0].split()[0]) > 0 and "dry run" in ratio[3], ratio
    assert "GPU/CPU wall, LiDAR sweep [OPTIX]" in rows
    tol = {k: v for k, v in rows.items() if k.startswith("GPU vs CPU")}
    assert len(tol) >= 6 and all(v[2] == "met" and float(v[0]) == 0.0 for v in tol.values()), tol
    assert "GPU vs CPU instance_id_mismatch_fraction, camera labels 64x36 [OPTIX]" in tol
