"""User-facing errors.

Everything a user can get wrong (a path, a number, a file) raises :class:`CcvizError` with a one-line
message that says what to change; the CLI prints it without a traceback and the app shows it.
"""


class CcvizError(ValueError):
    """A problem with the user's input or environment, explained in one line."""
