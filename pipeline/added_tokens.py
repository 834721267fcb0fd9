"""Non-special added tokens in front of a fast engine, cut out of the text as Hugging Face does.

Qwen 2.5 and Qwen 3 list `<tool_call>`, `<|fim_prefix|>`, `<think>`, ... among their tokenizer.json's
added tokens with `special: false`. `tokenizers` cuts such a token out of the text wherever it occurs,
even with `encode_special_tokens = True` (prep's policy, which only keeps *special* tokens as plain
text), gives it its own id, and runs normalizer, pre-tokenizer and model on the pieces between them.
No fast engine does that, so until this module such files ran on `tokenizers` itself.

What `tokenizers` 0.23 does (added_vocabulary.rs; checked against it in the tests):
- every added token is matched, special or not, leftmost-longest and without overlaps, tokens with
  `normalized: false` on the raw text first, then tokens with `normalized: true` on each remaining
  piece after normalization;
- a special token's match is dropped (`encode_special_tokens`) and its text stays in the piece around
  it, so `<tool_call>` inside a longer special token's string is not cut out;
- each piece is normalized and pre-tokenized on its own: a Prepend normalizer adds its "▁" to every
  piece, a regex never joins text across a cut.

`PlainAddedTokens.wrap(encode)` does the same around an engine's encode(text) -> ids: a regex
alternation of the tokens, longest first, finds the leftmost-longest match (Python's `re` tries the
alternatives in order at each position, and `re.split` walks the text in C); pieces are encoded one
by one. Texts holding none of the non-special tokens (nearly all) take one regex search and go to
the engine whole.

Where no special token's match can hide a non-special one (`engine_can_cut`), gigatoken is first
given the non-special tokens as its own special tokens and cuts them out itself, before its
normalizer, in Rust (fast_bpe.build_gigatoken_engines, `native_added`); that is proved like the rest,
and `wrap` is what runs when it fails. A document holding such tokens then costs no Python per piece:
100 K chat-style paragraphs with Qwen 2.5's tokens, joined, ~0.2 against ~0.8-1.3 s.

Refused (the file stays on `tokenizers`, with the reason): a non-special token with lstrip, rstrip or
single_word (they widen or narrow the match), an empty one, and `normalized: true` non-special tokens
where there is a normalizer (they are matched on normalized text, which prep does not see).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["PlainAddedTokens", "from_definition"]

Matches = tuple[tuple[str, int | None], ...]  # (content, id); id None: a special token (match dropped)


@dataclass(frozen=True)
class PlainAddedTokens:
    """The added tokens `tokenizers` cuts out of documents (picklable; `wrap` compiles the regexes)."""

    raw: Matches          # normalized: false, matched on the document
    normalized: Matches   # normalized: true, matched on each piece (only without a normalizer)

    @property
    def ids(self) -> list[int]:
        return [tid for _, tid in self.raw + self.normalized if tid is not None]

    @property
    def strings(self) -> list[str]:
        return [s for s, tid in self.raw + self.normalized if tid is not None]

    @property
    def joinable(self) -> bool:
        """Whether `found_in_utf8` decides for `wrap` (one matching pass: no normalized non-special
        token), so a batch joined into one text (joined.py) can be cut like a document."""
        return all(tid is None for _, tid in self.normalized)

    @property
    def engine_can_cut(self) -> bool:
        """Whether an engine that cuts the non-special tokens out itself (given them as its special
        tokens, and none of the special ones, which stay text) can match tokenizers: one matching pass
        (`joinable`), and no special token's match can hide a non-special one. tokenizers matches both
        kinds leftmost-longest and then keeps a special match as text, so a non-special token inside a
        special one's string, or starting inside its last characters, is not cut there; such a file
        keeps `wrap`. Whatever passes this is still proved on the torture sample."""
        if not self.joinable:
            return False
        plain = [s for s, tid in self.raw if tid is not None]
        special = [s for s, tid in self.raw if tid is None]
        return not any(n in s or any(s.endswith(n[:k]) for k in range(1, min(len(n), len(s))))
                       for s in special for n in plain)

    def found_in_utf8(self) -> Callable[[bytes], bool]:
        """UTF-8 text -> whether a non-special token of the first pass occurs in it: the same answer as
        on the str, since a UTF-8 sequence matches only at character boundaries (one search over a
        joined batch, not one per document)."""
        plain = [s.encode() for s, tid in self.raw if tid is not None]
        search = re.compile(b"|".join(map(re.escape, plain))).search if plain else None
        return (lambda data: search(data) is not None) if search else (lambda data: False)

    def wrap(self, encode: Callable[[str], np.ndarray]) -> Callable[[str], np.ndarray]:
        """encode(text) -> ids with the non-special added tokens cut out first, as tokenizers does."""
        raw, normalized = _Matcher(self.raw), _Matcher(self.normalized)
        if normalized.active:  # rare (no normalizer, and normalized non-special tokens): two passes
            def encode_two_passes(text: str) -> np.ndarray:
                out = []
                for i, part in enumerate(raw.split(text) or [text]):
                    if i & 1:
                        out.append(raw.arrays[part])
                        continue
                    for j, sub in enumerate(normalized.split(part) or [part]):
                        if sub:
                            out.append(normalized.arrays[sub] if j & 1 else encode(sub))
                return np.concatenate(out, dtype=np.uint32) if out else np.zeros(0, np.uint32)
            return encode_two_passes

        def encode_cut(text: str) -> np.ndarray:
            parts = raw.split(text)
            if parts is None:  # nearly every document: one regex search, then the engine on all of it
                return encode(text)
            # pieces at even places, cut-out tokens (their strings) at odd ones. A document cut at every
            # newline (Gemma's "\n" as a non-special token, 55 MB: 2.6 M pieces) spends ~1 us per piece
            # here, so the loop is kept flat: one engine call per non-empty piece, cached 1-id arrays
            arrays = raw.arrays
            return np.concatenate([arrays[p] if i & 1 else encode(p) for i, p in enumerate(parts) if p],
                                  dtype=np.uint32)
        return encode_cut


class _Matcher:
    """The tokens of one matching pass: `split` cuts a text at the non-special ones."""

    def __init__(self, tokens: Matches):
        ids = dict(tokens)
        plain = [s for s, tid in tokens if tid is not None]
        self.active = bool(plain)
        self.arrays = {s: np.array([tid], np.uint32) for s, tid in ids.items() if tid is not None}
        self._special = {s for s, tid in ids.items() if tid is None}
        # a non-special token in the text is the only reason to cut: one search decides for most texts
        # (Qwen 2.5's 12 over 55 MB of docs: 23 ms, 2.4 GB/s on one core)
        self._any = re.compile("|".join(map(re.escape, plain))) if plain else None
        # one capturing group: re.split gives pieces and matches in turn; longest first, so that at each
        # place the longest token matches (leftmost-longest, as tokenizers' Aho-Corasick)
        self._split = re.compile("(" + "|".join(re.escape(s) for s in sorted(ids, key=len, reverse=True)) + ")")

    def split(self, text: str) -> list[str] | None:
        """[piece, token, piece, ..., piece] (pieces may be empty), or None when no non-special token
        occurs. A special token's match is kept in the text around it (tokenizers drops the match)."""
        if self._any is None or self._any.search(text) is None:
            return None
        parts = self._split.split(text)
        if not self._special or self._special.isdisjoint(parts[1::2]):
            return parts
        out = [parts[0]]
        for i in range(1, len(parts), 2):
            if parts[i] in self._special:
                out[-1] += parts[i] + parts[i + 1]
            else:
                out += (parts[i], parts[i + 1])
        return out


def from_definition(d: dict) -> tuple[PlainAddedTokens | None, str]:
    """(the non-special added tokens of a parsed tokenizer.json, "") -- None when it has none -- or
    (None, why a fast engine cannot follow them)."""
    added = d.get("added_tokens") or []
    plain = [t for t in added if not t.get("special")]
    if not plain:
        return None, ""
    for t in plain:
        flags = [f for f in ("lstrip", "rstrip", "single_word") if t.get(f)]
        if flags:
            return None, (f"its added token {t['content']!r} is not special and has {flags[0]} set; "
                          "tokenizers cuts it out of the text together with the whitespace or word around it")
        if not t["content"]:
            return None, "it has an empty added token"
    if d.get("normalizer") and any(_normalized(t) for t in plain):
        t = next(t for t in plain if _normalized(t))
        return None, (f"its added token {t['content']!r} is not special and is matched on normalized text "
                      "(normalized: true), which prep does not see")

    def matches(normalized: bool) -> Matches:
        group = [t for t in added if _normalized(t) == normalized and t["content"]]
        if not any(not t.get("special") for t in group):
            return ()  # only special tokens: their matches are all dropped, nothing is cut
        return tuple((t["content"], None if t.get("special") else int(t["id"])) for t in group)
    return PlainAddedTokens(matches(False), matches(True)), ""


def _normalized(token: dict) -> bool:
    """tokenizers' AddedToken default: normalized unless special."""
    return bool(token.get("normalized", not token.get("special")))
