"""The one error type users see: a message naming the file/line/field, the bad value and the fix.

The CLI prints `PrepError` as a single line and exits 1; anything else is a bug and keeps its traceback.
"""

__all__ = ["PrepError", "SchemaError", "closest"]

import difflib


class PrepError(ValueError):
    """A user-facing error: bad recipe, bad input, refused operation."""


class SchemaError(PrepError):
    """The input does not have the fields the recipe names (a text_field that is no column, or that no
    record of a file's first unit has). It stops the run under `on_bad_record: skip` too: it is the
    recipe's mistake, not a damaged file, and left alone it would give an empty dataset and exit 0."""


def closest(word: str, choices) -> str:
    """' (did you mean "x"?)' for the closest valid choice, or '' when nothing is close."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f' (did you mean "{match[0]}"?)' if match else ""
