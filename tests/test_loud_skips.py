"""Loud skips: under CI=true a skip not in tests/skip_allowlist.txt fails; an allowed one stays a skip."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.conftest import REPO, skip_allowed, skip_allowlist

CONFTEST = textwrap.dedent("""
    from pathlib import Path
    import tests.conftest as c
    from tests.conftest import pytest_runtest_makereport  # noqa: F401  (the hook under test)
    c.SKIP_ALLOWLIST = Path(__file__).parent / "allow.txt"
""")
TESTS = textwrap.dedent("""
    import pytest

    def test_unlisted():
        pytest.skip("no frobnicator on this machine")

    def test_listed():
        pytest.skip("needs the widget service")

    @pytest.fixture
    def needs_root():
        pytest.skip("needs root for a tmpfs")

    def test_fixture_skip(needs_root):
        pass

    def test_runs():
        pass
""")


def _run(tmp_path, ci: str):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_sk.py").write_text(TESTS)
    (tmp_path / "allow.txt").write_text("# comment\ntest_sk.py::test_listed | widget service | fixture of this test\n")
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_unlisted_skips_fail_under_ci(tmp_path):
    r = _run(tmp_path, "true")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 failed, 1 passed, 1 skipped, 1 error" in r.stdout, r.stdout          # a fixture skip: a setup error
    assert "no entry of tests/skip_allowlist.txt allows it: no frobnicator" in r.stdout
    assert "SKIPPED" in r.stdout and "needs the widget service" in r.stdout          # -rs lists the allowed skip


def test_skips_stay_skips_outside_ci(tmp_path):
    r = _run(tmp_path, "")
    assert r.returncode == 0 and "1 passed, 3 skipped" in r.stdout, r.stdout


def test_the_allowlist_parses_and_matches_by_node_id_and_reason():
    entries = skip_allowlist()
    assert entries and all(len(e) == 3 for e in entries)
    assert skip_allowed("tests/sensors/test_lidar.py::test_x", "spinning LiDAR needs Blender >= 4.5 (custom OSL camera); "
                        "this is 4.2.1", entries)
    assert not skip_allowed("tests/sensors/test_lidar.py::test_x", "cv2 not installed", entries)
    assert not skip_allowed("tests/blender/export/test_crash_recovery.py::test_disk_full",
                            "disk-full test mounts a small tmpfs, which needs root on Linux", entries)
