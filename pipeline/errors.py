"""The one error type users see: a message naming the file/line/field, the bad value and the fix.

The CLI prints `PrepError` as a single line and exits 1; anything else is a bug and keeps its traceback.
"""

__all__ = ["PrepError", "SchemaError", "InputUnreachable", "EngineFailed", "STOPS_THE_RUN", "not_a_column", "refuse_repeated_columns", "closest", "RESUME_FIX", "FINISHED_FIX"]

import difflib

# The fix a damaged input's error ends with. True while the run that met it can resume: one that stopped
# on it (on_bad_record: error) keeps its state, and a re-run redoes the units of a replaced file
# (input_changes.accept), taking the replacement's plan where that differs (input_changes.replanned).
# A run that finishes under on_bad_record: skip deletes its state once the manifest is written, and a
# re-run of it only says "already complete", so finalize records these errors in the manifest's
# failed_units with FINISHED_FIX instead.
RESUME_FIX = "re-run to resume"
FINISHED_FIX = "re-run with --overwrite"


class PrepError(ValueError):
    """A user-facing error: bad recipe, bad input, refused operation."""


class SchemaError(PrepError):
    """The input does not have the fields the recipe names (a text_field that is no column, or that no
    record of a file's first unit has). It stops the run under `on_bad_record: skip` too: it is the
    recipe's mistake, not a damaged file, and left alone it would give an empty dataset and exit 0."""


class InputUnreachable(PrepError):
    """An input URL whose bytes could not be fetched (a network drop, an endpoint down, a timeout): not
    the file's fault. It stops the run under `on_bad_record: skip` too, as SchemaError does: failing the
    unit instead left its documents out of a dataset that a re-run then called complete, and the file
    is not marked as damaged (a replacement of it with units done is still refused). Re-run to resume."""


class EngineFailed(PrepError):
    """The tokenizer engine raised on a document: a fault of the engine (or of prep), not of the input,
    so it stops the run under `on_bad_record: skip` too, naming the document (it used to be a worker's
    traceback naming none). Re-run to resume; every backend gives the same ids, so `--set
    tokenizer.backend=hf` resumes the run on the reference engine (for a tokenizer.json: a
    `tiktoken:<name>` encoding has no other engine)."""


# errors that stop the run whatever on_bad_record says, and do not mark their file as damaged
STOPS_THE_RUN = (SchemaError, InputUnreachable, EngineFailed)


def not_a_column(path: str, name: str, columns: list[str], holder: str, template: bool) -> SchemaError:
    """"PATH: text_field 'x' is not a column; the header has 'a', 'b'; set source.text_field" (holder:
    "the header", "the file"; `template`: the name came from text_template)."""
    key = "text_template" if template else "text_field"
    what = "text_template field" if template else "text_field"
    return SchemaError(f"{path}: {what} {name!r} is not a column; {holder} has {shown_columns(columns)}; "
                       f"set source.{key}")


def refuse_repeated_columns(path: str, columns: list[str], names: list[str], holder: str, template: bool) -> None:
    """SchemaError when a column the text is read from (`columns`, of the file's `names`) is named more
    than once: a CSV header `text,id,text`, a Parquet schema of two `text` fields. The CSV reader took
    the first such column for text_field and the last for text_template ("{text}"), each silently; a
    Parquet read failed as "row group 0 does not decode ... replace the file"."""
    for column in columns:
        at = [i for i, n in enumerate(names) if n == column]
        if len(at) > 1:
            fix = ("use only columns named once in source.text_template" if template
                   else "set source.text_field to a column named once")
            raise SchemaError(f"{path}: {holder} has {len(at)} columns named {column!r} (columns "
                              f"{', '.join(str(i + 1) for i in at)}, counting from 1), so which holds the text is "
                              f"unclear; rename them apart in the file, or {fix}")


def shown_columns(columns: list[str]) -> str:
    """'a', 'b', ... : the first 20 column names, for an error."""
    return ", ".join(map(repr, columns[:20])) + (" ..." if len(columns) > 20 else "")


def closest(word: str, choices) -> str:
    """' (did you mean "x"?)' for the closest valid choice, or '' when nothing is close."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f' (did you mean "{match[0]}"?)' if match else ""
