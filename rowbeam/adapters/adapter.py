"""What an adapter module declares to be a `rowbeam adapt FORMAT` command: a tuple `ADAPTER_FORMATS` of
AdapterFormat at the end of the module (rowbeam.adapters.registry finds it; nothing else to edit)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

FOLDER_OUT = "a new (or empty) output folder; staged beside it and renamed when complete"
BUNDLE_IN = "a rowbeam bundle folder (holds bundle.json)"


@dataclass(frozen=True)
class AdapterFormat:
    """One output format: its name on the command line, its help, its arguments and how it runs.

    run(args) writes the output and returns the adapter's summary: {"file", "format", "lost": [...],
    "max_rounding_error": {unit: value}, ...}; `line(args, summary)` is its one-line report on stdout (default:
    `rowbeam adapt: wrote FILE (FORMAT; max rounding error ...); N losses in the sidecar`)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], dict]
    description: str | None = None
    line: Callable[[argparse.Namespace, dict], str] | None = None


def bundle_to_folder(parser: argparse.ArgumentParser, sensor_help: str | None = None) -> None:
    """The arguments most adapters share: BUNDLE OUT_DIR [--sensor ID] (sensor_help None: no --sensor)."""
    parser.add_argument("bundle", help=BUNDLE_IN)
    parser.add_argument("out_dir", help=FOLDER_OUT)
    if sensor_help is not None:
        parser.add_argument("--sensor", help=sensor_help)
