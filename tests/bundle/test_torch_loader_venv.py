"""rowbeam.torch: without PyTorch its import is an ImportError naming the extra; with CPU torch (.venv-torch, Python
3.11, `make venv-torch`) tests/torch_loader runs on the small all-sensor bundle in DataLoaders with 2 workers.
Under CI=true a missing .venv-torch fails (make test builds it)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, TORCH_VENV_PYTHON


def test_import_without_torch_names_the_extra():
    code = "import sys; sys.modules['torch'] = None\ntry:\n import rowbeam.torch\nexcept ImportError as e:\n print(e)"
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "pip install 'rowbeam[torch]'" in r.stdout, r.stdout + r.stderr


def test_torch_loader_in_its_venv(dusk_all_sensors):
    if not TORCH_VENV_PYTHON.exists():
        message = f"{TORCH_VENV_PYTHON} is missing: make venv-torch (Python 3.11 + CPU torch)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    env = {**os.environ, "ROWBEAM_TORCH_BUNDLE": str(dusk_all_sensors), "PYTHONPATH": str(REPO)}
    r = subprocess.run([str(TORCH_VENV_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/torch_loader"],
                       cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    print(r.stdout[-3000:])
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout and "failed" not in r.stdout
