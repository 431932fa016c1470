"""Error types whose message is shown to the user as one line (no traceback)."""


class RowbeamError(Exception):
    """A problem with user input: bad file, bad field, bad option. Message names the culprit."""

    exit_code = 2


class UnusableInput(RowbeamError):
    """The checker cannot interpret its input as a bundle at all (exit code 2)."""

    exit_code = 2
