"""Lone UTF-16 surrogates escaped in JSON (`"a\\ud800b"`): what a string cut inside a surrogate pair
(an emoji, by a writer that counts UTF-16 units) leaves. JSON's grammar allows the escape, but no
Unicode text holds a lone surrogate, so no UTF-8 encodes it: orjson refuses the record ("no low
surrogate in string"), and JSON Lines rejected the line as malformed_json, under
`encoding_errors: replace` too. Now, like invalid UTF-8 bytes, each one is U+FFFD under replace, and
under skip the record is a `lone_surrogate` reject that says so; the rest of the record reads as it
always did. A pair (high then low) is one character, as JSON means it.

The other readers cannot meet one: CSV, text and Parquet strings come from UTF-8 bytes (decoded
strictly or with "replace", which gives U+FFFD for the bytes of an encoded surrogate), as do Arrow's
for saved Hugging Face datasets.
"""

from __future__ import annotations

import re

__all__ = ["REASON", "ESCAPE_ERROR", "mend_escapes", "mend_strings", "detail"]

REASON = "lone_surrogate"
# what orjson's refusal of such an escape says ("no low surrogate in string", "invalid high surrogate in
# string"); not its refusal of invalid UTF-8 bytes ("str is not valid UTF-8: surrogates not allowed")
ESCAPE_ERROR = "surrogate in string"

# each escape of a JSON text in turn: a high surrogate's escape then a low one's (a pair: kept), a lone
# surrogate's (group 1: mended), or any other escape (kept; `\\ud800` is an escaped backslash, then text)
_ESCAPE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})|\\.",
                     re.DOTALL)
_REPLACEMENT = rb"\ufffd"  # U+FFFD, escaped: the same 6 bytes, so later columns stay where they were


def mend_escapes(data: bytes) -> tuple[bytes, int]:
    """`data` (JSON text) with each lone surrogate's escape made U+FFFD's, and how many there were."""
    found = 0

    def mend(m: re.Match) -> bytes:
        nonlocal found
        if m.group(1) is None:
            return m.group(0)
        found += 1
        return _REPLACEMENT

    mended = _ESCAPE.sub(mend, data)
    return mended, found


def _mend(s: str) -> str:
    # through UTF-16, where Python's json has already joined each pair into one character: a lone one
    # does not encode but with surrogatepass, and does not decode back but as U+FFFD
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def mend_strings(value):
    """A parsed JSON value (Python's json keeps lone surrogates) with each lone surrogate in its
    strings, keys too, made U+FFFD."""
    if isinstance(value, str):
        return _mend(value)
    if isinstance(value, list):
        return [mend_strings(v) for v in value]
    if isinstance(value, dict):
        return {mend_strings(k): mend_strings(v) for k, v in value.items()}
    return value


def detail(found: int | None = None) -> str:
    """A reject's detail: what the record holds, and the fix."""
    count = f"{found} lone UTF-16 surrogate escape(s)" if found else "a lone UTF-16 surrogate escape"
    return (f"{count} (\\ud800-\\udfff, no low surrogate after a high one or the reverse: a string cut inside a "
            "surrogate pair?), which no UTF-8 text can hold; set source.encoding_errors: replace to read each as "
            "U+FFFD")
