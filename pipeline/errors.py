"""The one error type users see: a message naming the file/line/field, the bad value and the fix.

The CLI prints `PrepError` as a single line and exits 1; anything else is a bug and keeps its traceback.
"""

__all__ = ["PrepError", "closest"]

import difflib


class PrepError(ValueError):
    """A user-facing error: bad recipe, bad input, refused operation."""


def closest(word: str, choices) -> str:
    """' (did you mean "x"?)' for the closest valid choice, or '' when nothing is close."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f' (did you mean "{match[0]}"?)' if match else ""
