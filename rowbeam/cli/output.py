"""Printing a command's result lines to stdout; a reader that closed the pipe early (`| head`) is not an error."""
from __future__ import annotations

import os
import sys


def emit(lines: list[str], status: int) -> int:
    """Print `lines` to stdout and return `status`, also when the reader has gone."""
    try:
        print("\n".join(lines))
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return status
