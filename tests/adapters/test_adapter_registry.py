"""Adapter formats register themselves: a module of rowbeam.adapters ending with ADAPTER_FORMATS is a
`rowbeam adapt` format (its arguments, its run, its summary line) with no other file edited."""
from __future__ import annotations

import sys

import pytest

import rowbeam.adapters
from rowbeam.adapters.registry import adapter_formats
from rowbeam.cli import main

PLUGIN = '''
from rowbeam.adapters.adapter import AdapterFormat


def _arguments(p):
    p.add_argument("bundle", help="a bundle folder")
    p.add_argument("--level", type=int, default=1, help="a number")


def _run(args):
    return {"file": f"{args.bundle}.out", "format": "toy", "lost": ["everything"], "max_rounding_error": {"m": 0.5}}


ADAPTER_FORMATS = (AdapterFormat("toy", "a toy format", _arguments, _run),)
'''


def test_the_shipped_formats_are_found_in_their_modules():
    formats = adapter_formats()
    assert set(formats) == {"flo", "kitti-flow", "kitti", "pfm", "kitti-lidar", "ply", "coco", "bop", "kitti-object",
                            "rectify", "mcap", "euroc-imu"}
    assert formats["coco"].run.__module__ == "rowbeam.adapters.coco"
    assert formats["ply"].run.__module__ == "rowbeam.adapters.lidar_formats"


@pytest.fixture
def toy_module(tmp_path, monkeypatch):
    (tmp_path / "toy_format.py").write_text(PLUGIN)
    monkeypatch.setattr(rowbeam.adapters, "__path__", [*rowbeam.adapters.__path__, str(tmp_path)])
    yield
    sys.modules.pop("rowbeam.adapters.toy_format", None)


def test_one_new_module_is_a_new_format(toy_module, capsys):
    assert "toy" in adapter_formats()
    assert main(["adapt", "toy", "b", "--level", "3"]) == 0
    assert capsys.readouterr().out == ("rowbeam adapt: wrote b.out (toy; max rounding error 0.5 m); 1 losses in the "
                                       "sidecar\n")
    with pytest.raises(SystemExit) as info:
        main(["adapt", "toy", "b", "--level", "x"])
    assert info.value.code == 2
    assert capsys.readouterr().err == "rowbeam adapt toy: error: argument --level: invalid int value: 'x'\n"
