"""The one form of a user error on a command line: `rowbeam SUBCOMMAND: error: MESSAGE` on stderr, one line, exit 2
(nested subcommands name their whole path: `rowbeam farm run: error: ...`). argparse's own errors (missing,
unknown or bad arguments) take the same form, without the usage block."""
from __future__ import annotations

import argparse
import sys

from rowbeam.util.errors import RowbeamError

USAGE_ERROR = 2


class Parser(argparse.ArgumentParser):
    """argparse with rowbeam's error contract; its subparsers are Parsers too (argparse makes them of the parent's
    class)."""

    def error(self, message):
        self.exit(USAGE_ERROR, f"{error_line(self.prog, message)}\n")


def error_line(prog: str, message) -> str:
    """`PROG: error: MESSAGE` on one line (line breaks inside the message become spaces)."""
    return f"{prog}: error: {str(message).replace(chr(13), ' ').replace(chr(10), ' ')}"


def fail(prog: str, exc: RowbeamError) -> int:
    """Print the error's line on stderr; its exit status (2 for every user error)."""
    try:
        print(error_line(prog, exc), file=sys.stderr)
    except BrokenPipeError:
        pass
    return exc.exit_code
