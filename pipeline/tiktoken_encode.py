"""tiktoken as an engine: text -> uint32 ids, and a way past its regex's stack limit.

tiktoken pre-tokenizes with fancy-regex, whose backtracking stack is bounded. The `\\s+(?!\\S)`
alternative that GPT-2's pattern and OpenAI's (cl100k, o200k) and Llama 3's all hold pushes a frame per
character of a whitespace run, so a document holding a run of 999,999 or more whitespace characters
makes tiktoken raise ValueError ("Regex error while tokenizing: ... Max stack size exceeded for
backtracking"; tiktoken 0.14, GPT-2's pattern: 999,998 spaces encode, 999,999 fail; encode_ordinary
panics instead). Such runs occur in crawled pages and generated files, and one such document ended a
whole run with a traceback. `tokenizers` and gigatoken encode them (1.5 M spaces: 0.45 s and 0.06 s).

That text is split again here with `regex` (tiktoken's own dependency, the module its pattern strings
are written for, which has no such limit), and each piece goes through tiktoken's single-piece
byte-pair encoding: the same pieces, so the same ids as `tokenizers` (tests/pipeline/
test_tiktoken_long_runs.py). 1.5 M spaces: 0.06 s; 5 MB of runs: 0.7 s. Only a text tiktoken refused
takes this path, so no other document pays for it.

That holds only where `regex` classes every character as tiktoken and `tokenizers` do, and `regex`
follows a newer Unicode than tokenizers 0.23: a refused text that also held U+A7CE (Unicode 16) or
U+323B0 (Unicode 17) before "'s" was split [U+A7CE]['s] here and [U+A7CE'][s] by tokenizers, and
written with other ids, unnoticed (found by tests/pipeline/test_fast_path_fuzz.py). So an engine that
stands in for a tokenizer.json (fast_bpe.build_tiktoken_engines) raises `RegexLimit` instead, and the
Encoder gives that document to tokenizers itself (1.5 M spaces: ~0.5 s); only a `tiktoken:<name>`
encoding, which has no other engine, takes the split here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import numpy as np

__all__ = ["RegexLimit", "tiktoken_array_encoder", "encode_split_in_python"]

_REGEX_ERROR = "Regex error"  # the start of tiktoken's ValueError for a failed pre-tokenization


class RegexLimit(ValueError):
    """tiktoken's regex refused a text (a whitespace run of ~1 M characters); raised instead of
    splitting it in Python where the caller has the reference engine to give it to."""


def tiktoken_array_encoder(enc, allowed: Iterable[str] = (), split_past_limit: bool = True) -> Callable[[str], np.ndarray]:
    """text -> uint32 ids, special-token strings as plain text (= encode_ordinary) but those `allowed`.
    A text tiktoken's regex refuses is split with `regex` (`encode_split_in_python`), or with
    `split_past_limit` False raises RegexLimit (see the module docstring).

    encode_to_numpy returns tiktoken's own buffer: no Python int per token, 1.5x encode_ordinary
    on one core here (8.9 vs 5.9 MB/s, GPT-2, technical English)."""
    allowed = frozenset(allowed)

    def encode(text: str) -> np.ndarray:
        try:
            return enc.encode_to_numpy(text, allowed_special=allowed, disallowed_special=())
        except ValueError as e:
            if not str(e).startswith(_REGEX_ERROR):
                raise
            if not split_past_limit:
                raise RegexLimit(str(e)) from None
            return encode_split_in_python(enc, text, allowed)
    return encode


def encode_split_in_python(enc, text: str, allowed: frozenset[str] = frozenset()) -> np.ndarray:
    """What tiktoken's encode gives `text`, with the pattern run by `regex` instead of fancy-regex:
    the `allowed` special tokens cut out first (leftmost, as tiktoken finds them), then each piece
    byte-pair encoded alone."""
    import regex  # tiktoken requires it; imported here because only refused texts need it

    pattern = regex.compile(enc._pat_str)
    ids: list[int] = []
    for part, special in _special_parts(text, allowed):
        for piece in pattern.findall(part):
            ids.extend(enc._encode_single_piece(piece))
        if special is not None:
            ids.append(enc.encode_single_token(special))
    return np.array(ids, dtype=np.uint32)


def _special_parts(text: str, allowed: frozenset[str]) -> Iterable[tuple[str, str | None]]:
    """(text before a special token, that token) pairs; the last part has None."""
    if not allowed:
        yield text, None
        return
    # longest first, so that of two tokens starting at one place the longer is taken
    finder = re.compile("|".join(re.escape(s) for s in sorted(allowed, key=len, reverse=True)))
    start = 0
    for m in finder.finditer(text):
        yield text[start:m.start()], m.group()
        start = m.end()
    yield text[start:], None
