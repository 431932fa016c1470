"""Error types whose message is shown to the user as one line (no traceback), and the command lines' warning policy."""

import warnings


class RowbeamError(Exception):
    """A problem with user input: bad file, bad field, bad option. Message names the culprit."""

    exit_code = 2


class UnusableInput(RowbeamError):
    """The checker cannot interpret its input as a bundle at all (exit code 2)."""

    exit_code = 2


def quiet_numpy_float_warnings() -> None:
    """For command lines (not the library or the add-on): hide numpy's floating-point RuntimeWarnings (overflow,
    invalid value, divide by zero) raised in rowbeam's own modules. NaN, inf and float32-overflowing values are data
    there (invalid pixels, a hostile payload): every check tests for them and reports them in its own one-line
    message, so numpy's two-line warnings on stderr are noise. Other warnings and other modules' stay as they are."""
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"(contracts|exporter|rowbeam)(\..*)?$")
