"""The commands that need Blender's Python module: `rowbeam export` and `rowbeam scenes`. Their modules live in
rowbeam.blender and are imported here, inside functions, only when that command is parsed; they import no bpy
themselves, so `--help` works without Blender (rowbeam.cli checks for bpy before running them)."""
from __future__ import annotations

import argparse


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    from rowbeam.blender.export.cli import add_arguments

    add_arguments(p, blend_positional=True)


def run_export(args: argparse.Namespace) -> int:
    from rowbeam.blender.export.cli import run

    return run(args, blend_positional=True)


def add_scenes_arguments(p: argparse.ArgumentParser) -> None:
    from rowbeam.blender.scenes.build import add_arguments

    add_arguments(p)


def run_scenes(args: argparse.Namespace) -> int:
    from rowbeam.blender.scenes.build import run

    return run(args)
