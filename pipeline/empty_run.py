"""A run whose units all finished but produced no document: refused before its manifest is written.

Before, such a run wrote a complete, empty dataset and exited 0, with one note among the summary's
lines: a script (`prep tokenize ... && train.py`) went on to train on nothing, or failed later in the
loader with an error that did not say why. The input is often the cause (every record `invalid_utf8`,
`missing_field`, one big `input.txt` over `max_record_bytes`), so the error summarises the reasons
records were skipped, the fix for the most common one, and the first rejected record.

The run state stays (like a stop): `--allow-empty` re-runs the same command and finishes the dataset
from its journal without reading the input again; a fixed recipe or input needs `--overwrite`.
"""

from __future__ import annotations

import contextvars
import json
from pathlib import Path

from pipeline.errors import PrepError

__all__ = ["allow_empty_default", "refuse_empty_run"]

# what executor.tokenize's `allow_empty=None` means: True for library callers (they get the result and
# its note), the CLI's choice while it runs; a URL output's inner call (pipeline.remote, which has no
# such parameter) reads the outer call's choice from here
allow_empty_default: contextvars.ContextVar[bool] = contextvars.ContextVar("prep_allow_empty", default=True)

_FIRST_REJECT_CHARS = 80  # of the rejected text shown: enough to recognise a line, one terminal row


def refuse_empty_run(out: Path, results: dict[int, dict], skipped: dict[str, int], rejects_dir: Path, rejects_name,
                     hint: str) -> None:
    """PrepError when the finished units hold no document (some may have failed); `skipped`: the ok
    units' skipped records by reason; `hint` is the fix for the most common one ('; most were REASON:
    FIX', or '')."""
    ok = [results[i] for i in sorted(results) if results[i]["status"] == "ok"]
    if any(sum(r["num_docs"].values()) for r in ok):
        return
    failed = len(results) - len(ok)
    if skipped:
        counts = ", ".join(f"{reason} {n:,}" for reason, n in sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0])))
        what = f"every record was skipped ({counts}){hint}"
    else:
        what = "the input holds no records"
    if failed:
        error = next(results[i]["error"] for i in sorted(results) if results[i]["status"] != "ok")
        what += f"; {failed} unit(s) failed, the first: {error}"
    first = _first_reject(ok, rejects_dir, rejects_name)
    raise PrepError(f"{out}: the run produced no documents: {what}{first}. No dataset was written: fix the input "
                    "or the recipe and re-run with --overwrite, or re-run with --allow-empty to write the empty "
                    "dataset (and rejects.jsonl)")


def _first_reject(ok: list[dict], rejects_dir: Path, rejects_name) -> str:
    """'; the first: FILE line N: REASON (DETAIL): TEXT' from the first unit that rejected a record."""
    for r in ok:
        if not r.get("num_rejects"):
            continue
        try:
            with open(rejects_dir / rejects_name(r["unit"]), "rb") as f:
                row = json.loads(f.readline())
        except (OSError, ValueError):  # a reject file gone: the counts above still say what happened
            return ""
        where = row.get("source", "?")
        if row.get("line") is not None:
            where += f" line {row['line']}"
        elif row.get("position") is not None:
            where += f" byte {row['position']}"
        detail = f" ({row['detail']})" if row.get("detail") else ""
        text = str(row.get("text") or "")
        text = text if len(text) <= _FIRST_REJECT_CHARS else text[:_FIRST_REJECT_CHARS] + "..."
        return f"; the first: {where}: {row.get('reason')}{detail}" + (f": {text!r}" if text else "")
    return ""
