"""How `prep inspect --docs` prints a decoded document on a terminal.

A corpus holds whatever was scraped: ANSI escape sequences (ESC [2J clears the screen, ESC ]0; sets
the window title), carriage returns and backspaces that overprint the line, NULs, bidirectional
overrides that reverse the text after them. Printed raw, a document could restyle or wipe the
terminal; rich drops some of them (BEL, BS, CR, VT, FF) without a trace, so the text shown was not
the text stored. Each is shown as a visible escape instead (\\x1b, \\r, \\u202e); newlines and tabs stay.
A document can also be a whole book: one of 200,000 tokens printed ~200 KB, scrolling the summary
away; it is cut at `max_chars`, saying how much was left out.
"""

from __future__ import annotations

import re

__all__ = ["shown_text", "DEFAULT_MAX_CHARS"]

DEFAULT_MAX_CHARS = 2000  # ~25 lines of 80 columns: a document's start, with the summary still on screen

# C0 controls but \t and \n, DEL, C1 controls, and the bidirectional embeddings/overrides/isolates
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\r": "\\r", "\x0b": "\\v", "\x0c": "\\f", "\x08": "\\b", "\x00": "\\0"}


def _escape(m: re.Match) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def shown_text(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """`text` as inspect prints it: invisible controls escaped, cut after `max_chars` characters of the
    document (0: never cut) with a note of what was left out."""
    cut = max_chars and len(text) > max_chars
    shown = _INVISIBLE.sub(_escape, text[:max_chars] if cut else text)
    if cut:
        shown += f"\n[... {len(text) - max_chars:,} more characters; --max-chars 0 prints the whole document]"
    return shown
