"""`make bench-gpu` fails clearly without a GPU: one line, exit 2, nothing run (never a silent CPU fallback)."""
from __future__ import annotations

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
