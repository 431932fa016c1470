"""Every user error of every subcommand, argparse's included: one line `rowbeam SUBCOMMAND: error: ...` on stderr,
exit 2, no usage block, no traceback, nothing on stdout (docs/cli.md). The real command line, in a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from rowbeam.cli import build_parser

from tests.conftest import REPO

# (subcommand path, arguments after it): missing arguments, an unknown option, a bad value
CASES = {
    "export": [[], ["x.blend", "--out", "o", "--bogus"], ["x.blend", "--out", "o", "--first-event", "-1"],
               ["x.blend", "--out", "o", "--device", "tpu"]],
    "check": [[], ["b", "--bogus"], ["b", "--report"]],
    "adapt": [[], ["zork", "b", "o"]],
    "adapt flo": [[], ["f", "o", "--bogus"], ["f", "o", "--direction", "up"]],
    "adapt kitti-flow": [["f"], ["f", "o", "--bogus"], ["f", "o", "--direction", "up"]],
    "adapt kitti": [[], ["f", "o", "--bogus"], ["f", "o", "--variant"]],
    "adapt pfm": [[], ["f", "o", "--bogus"], ["f", "o", "--direction", "up"]],
    "adapt kitti-lidar": [[], ["b", "o", "--bogus"], ["b", "o", "--frame", "world"]],
    "adapt ply": [["s"], ["s", "o", "--bogus"], ["s", "o", "extra"]],
    "adapt coco": [[], ["b", "o", "--bogus"], ["b", "o", "--sensor"]],
    "adapt bop": [[], ["b", "o", "--bogus"], ["b", "o", "--split"]],
    "adapt kitti-object": [[], ["b", "o", "--bogus"], ["b", "o", "--sensor"]],
    "adapt euroc-imu": [[], ["b", "o", "--bogus"], ["b", "o", "--sensor"]],
    "adapt rectify": [[], ["b", "o", "--bogus"], ["b", "o", "--format", "tiff"], ["b", "o", "--interpolation", "x"]],
    "adapt mcap": [[], ["b", "o", "--bogus"], ["b", "o", "--sensor"]],
    "view": [[], ["b", "--bogus"], ["b", "o", "extra"], ["b", "--sensor"]],
    "associate": [[], ["b", "--max-skew-us", "1", "--bogus"], ["b", "--max-skew-us", "abc"]],
    "scenes": [[], ["marker", "o.blend", "--bogus"], ["marker", "o.blend", "--scale", "x"], ["nope", "o.blend"]],
    "schemas": [[], ["d", "--bogus"], ["d", "e"]],
    "report": [[], ["b", "--out", "o", "--bogus"], ["b", "--out"]],
    "plan": [[], ["s", "--out", "o", "--bogus"], ["s", "--out"]],
    "farm": [[], ["zork"]],
    "farm run": [[], ["p", "--bogus"], ["p", "--engine", "x"], ["p", "--workers", "many"],
                  ["p", "--workers", "0"]],
    "farm status": [[], ["p", "--bogus"], ["p", "q"]],
    "farm worker": [[], ["p", "--bogus"], ["p", "--index", "x"]],
    "finalize": [[], ["p", "--bogus"], ["p", "q"]],
    "replay": [[], ["p", "s", "--bogus"], ["p"]],
}
BLENDER_CASES = [("export", ["x.blend", "--out", "o"]), ("scenes", ["marker", "o.blend"])]
# no Blender's Python module: `export` and `scenes` refuse in one line, their --help still works
WITHOUT = "import sys\nsys.modules['bpy'] = None\nfrom rowbeam.cli import main\nsys.exit(main(sys.argv[1:]))"
NEEDS = "needs Blender's Python module"


def _rowbeam(*args, code=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "rowbeam", *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)


def _assert_one_line(r: subprocess.CompletedProcess, prog: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stdout == "" and r.stderr.count("\n") == 1 and r.stderr.endswith("\n"), r.stderr
    assert r.stderr.startswith(f"{prog}: error: "), r.stderr
    assert "usage:" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    return r.stderr


@pytest.mark.parametrize("sub", CASES)
def test_every_user_error_is_one_line(sub):
    """Each case of the subcommand in its own process (several at once: the cases are independent)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda args: _rowbeam(*sub.split(), *args), CASES[sub]))
    for args, r in zip(CASES[sub], results, strict=True):
        assert r.returncode == 2, (args, r.stderr)
        _assert_one_line(r, f"rowbeam {sub}")


def test_every_subcommand_has_its_error_cases():
    """A new subcommand (or adapter format) is listed in CASES, so its errors are tried."""
    parser = build_parser()
    paths = set()

    def walk(p, path):
        nested = [a for a in p._actions if a.__class__.__name__ == "_SubParsersAction"]
        for action in nested:
            for name, child in action.choices.items():
                paths.add(" ".join([*path, name]))
                walk(child, [*path, name])

    walk(parser, [])
    assert paths == set(CASES)


def test_top_level_errors_are_one_line():
    _assert_one_line(_rowbeam("frobnicate"), "rowbeam")
    _assert_one_line(_rowbeam("--bogus"), "rowbeam")
    assert _rowbeam("--version").stdout.startswith("rowbeam ")


@pytest.mark.parametrize("sub, args", BLENDER_CASES)
def test_blender_commands_without_blender(sub, args, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", WITHOUT, sub, *args], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120, env=env)
    assert NEEDS in _assert_one_line(r, f"rowbeam {sub}")
    assert list(tmp_path.iterdir()) == []
    helped = subprocess.run([sys.executable, "-c", WITHOUT, sub, "--help"], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert helped.returncode == 0 and helped.stdout.startswith(f"usage: rowbeam {sub}"), helped.stderr


def test_scene_names_without_bpy_match_the_builders():
    """`rowbeam scenes` lists the scene and lens names without importing the builders: the same names."""
    from rowbeam.blender.scenes import build, calibration, lens_scenes

    assert build.NAMES == ("running_example", *calibration.SCENES, "lens_board", "surfaces", "street_surfaces")
    assert build.LENSES == tuple(sorted(lens_scenes.SCENE_LENSES))
