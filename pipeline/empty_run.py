"""A run whose units all finished but produced no document: refused before its manifest is written.

Before, such a run wrote a complete, empty dataset and exited 0, with one note among the summary's
lines: a script (`prep tokenize ... && train.py`) went on to train on nothing, or failed later in the
loader with an error that did not say why. The input is often the cause (every record `invalid_utf8`,
`missing_field`, one big `input.txt` over `max_record_bytes`), so the error summarises the reasons
records were skipped, the fix for the most common one, and the first rejected record.

The run state stays (like a stop): `--allow-empty` re-runs the same command and finishes the dataset
from its journal without reading the input again; a fixed recipe or input needs `--overwrite`.
An empty dataset written anyway (`--allow-empty`, library callers) gets the same hint in its note.
"""

from __future__ import annotations

import contextvars
import json
from pathlib import Path

from pipeline.errors import PrepError
from pipeline.readers.text import whole_file_fix
from pipeline.recipe import Recipe

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


# the fix for a dataset left empty by one kind of skipped record, by the most common reason
_EMPTY_HINTS = {
    "invalid_utf8": "the input is not UTF-8: convert it (iconv -f CP1252 -t UTF-8 for a Windows export, "
                    "say) or set source.encoding_errors: replace",
    "record_too_large": "raise source.max_record_bytes",
    "too_short": "lower source.min_chars",
    "too_long": "raise source.max_chars",
    "malformed_json": "rejects.jsonl shows how each line begins; is the input JSON Lines?",
    "lone_surrogate": "the text holds lone UTF-16 surrogates (\\ud800-\\udfff escaped in JSON, strings cut inside "
                      "an emoji's pair?, or made by a text_template {n:c}), which no UTF-8 holds; set "
                      "source.encoding_errors: replace to read each as U+FFFD",
}


# peak memory of tokenizing one huge document, per MB of its text: measured on 20-300 MB of English-like
# lines with the gpt2 tokenizer (0.25 tokens a byte), peak RSS less a tiny run's: gigatoken and tiktoken
# ~3.3 (70 MB: 0.22 GB more; 300 MB: 1.0 GB), hf ~117 (its per-token Encoding; 70 MB: 8.2 GB more)
_WHOLE_DOC_MB_PER_MB = {"hf": 120}
_WHOLE_DOC_MB_PER_MB_FAST = 3.5


def _empty_hint(skipped: dict[str, int], recipe: Recipe, backend: str) -> str:
    """'; most were REASON: FIX' when over half of an empty dataset's skipped records were REASON, or ''.
    Too large records where a text source reads each file whole: most likely one big input.txt (as
    nanoGPT's data is) that was meant as many documents, so the fix names doc_separator first."""
    reason = max(skipped, key=skipped.get, default=None)
    if reason not in _EMPTY_HINTS or 2 * skipped[reason] <= sum(skipped.values()):
        return ""
    whole = [i for i, s in enumerate(recipe.sources) if s.resolved_format() == "text" and s.doc_separator is None]
    if reason != "record_too_large" or not whole:
        return f"; most were {reason}: {_EMPTY_HINTS[reason]}"
    where = "source" if len(recipe.sources) == 1 else f"sources[{whole[0]}]"
    per_mb = _WHOLE_DOC_MB_PER_MB.get(backend, _WHOLE_DOC_MB_PER_MB_FAST)
    return (f"; most were {reason}: {whole_file_fix(where)}, which takes about {per_mb} MB of memory per MB of "
            f"text to tokenize (tokenizer backend {backend})")
