"""The one error type users see: a message naming the file/line/field, the bad value and the fix.

The CLI prints `PrepError` as a single line and exits 1; anything else is a bug and keeps its traceback.
"""

__all__ = ["PrepError", "SchemaError", "not_a_column", "closest"]

import difflib


class PrepError(ValueError):
    """A user-facing error: bad recipe, bad input, refused operation."""


class SchemaError(PrepError):
    """The input does not have the fields the recipe names (a text_field that is no column, or that no
    record of a file's first unit has). It stops the run under `on_bad_record: skip` too: it is the
    recipe's mistake, not a damaged file, and left alone it would give an empty dataset and exit 0."""


def not_a_column(path: str, name: str, columns: list[str], holder: str, template: bool) -> SchemaError:
    """"PATH: text_field 'x' is not a column; the header has 'a', 'b'; set source.text_field" (holder:
    "the header", "the file"; `template`: the name came from text_template)."""
    key = "text_template" if template else "text_field"
    what = "text_template field" if template else "text_field"
    shown = ", ".join(map(repr, columns[:20])) + (" ..." if len(columns) > 20 else "")
    return SchemaError(f"{path}: {what} {name!r} is not a column; {holder} has {shown}; set source.{key}")


def closest(word: str, choices) -> str:
    """' (did you mean "x"?)' for the closest valid choice, or '' when nothing is close."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f' (did you mean "{match[0]}"?)' if match else ""
