"""Code points on which a fast engine's Unicode tables disagree with `tokenizers`', and the documents
that hold them.

A pre-tokenizer regex classes characters by Unicode category (\\p{L}, \\p{N}, \\s). Engines built on
different Unicode versions class newly assigned characters differently: gigatoken 0.10 knows Unicode
17, tokenizers 0.23 does not, so on "\\U000323b0's" (a CJK Extension J ideograph) gigatoken splits
[ideograph]['s] and tokenizers [ideograph'][s], and the ids differ (found by the hypothesis test in
tests/pipeline/test_fast_tokenizer.py). `probe()` tries every code point that any
two Unicode versions may class otherwise (see `_candidates`: 162,756 in planes 0-3 and 14): for GPT-2
and gigatoken, 4,657 code points in 26 ranges (8 in the BMP); tiktoken: none.
Behind an NFC normalizer, `probe_normalization()` also compares the engine's NFC with tokenizers'
among combining marks (tokenizers' normalization tables are older still: 31-38 more ranges, marks of
Unicode 10-14). Both run with the parent's proof (once per tokenizer and engine version: the result
is cached with the spec, see tokenizer_cache.py).

`GapRouter.find(texts)` then names the documents that contain one, so the Encoder gives them to the
reference engine. Cost per document: ASCII and Latin-1 text, none (str.isascii and the string's
width are O(1)); BMP text, one str.find per BMP gap character; text beyond the BMP (emoji), a
lookup of every code point.
"""

from __future__ import annotations

import functools
import sys
import unicodedata
from array import array
from collections.abc import Callable, Sequence
from itertools import chain, compress
from operator import not_

import numpy as np

__all__ = ["probe", "probe_classes", "probe_normalization", "merge", "GapRouter"]

# Each candidate x is tried in these contexts (a contraction after it, letters and digits around it,
# a space before, a newline after): together they tell apart the regex classes L, N, space, other.
_PROBE = "{x}'s a{x}1 {x}\n"
# probe_normalization's contexts. Behind an NFC normalizer a combining mark's canonical combining
# class (ccc) decides how NFC orders marks and whether one blocks a composition. tokenizers 0.23
# normalizes with older tables than its regex's: U+0898 (Unicode 14) has ccc 230 to Python and to
# gigatoken, 0 to tokenizers, so NFC reorders alef + fatha (ccc 30) + U+0898 in one and not in the
# other, and the ids differ. A ccc never changes once assigned (Unicode's stability policy), so two
# tables disagree only as 0 (unassigned) against some c > 0: x before U+0334 (ccc 1) shows any c > 1,
# x after U+0301 (ccc 230) any c < 230; "q" composes with neither mark.
_PROBE_NFC = "q{x}\u0334 q\u0301{x}\n"
_CHUNK = 256  # candidates per probe document; a chunk whose ids differ is probed one by one
# probe documents per call of the reference: its ids (and tokenizers' Encoding objects) for all 636 at
# once held ~190 MiB more at the parent's peak (GPT-2: 396-408 -> 203-215 MiB per process with 16-64),
# and took longer (load and proof 2.4-2.9 -> 1.9-2.3 s)
_PER_CALL = 32


@functools.cache  # 0.05 s; both passes of a tokenizer with NFC use it
def _candidates() -> array:
    """Code points whose class two engines' Unicode tables may disagree on, whichever Unicode version
    this Python's own tables are: those unassigned in Unicode 3.2 (`unicodedata.ucd_3_2_0`, which
    every Python 3 keeps for IDNA), and the ~185 whose category changed since. Not just those this
    Python leaves unassigned: Python 3.15 knows Unicode 17, as gigatoken 0.10 does, and tokenizers
    0.23 does not, so Extension J (U+323B0...) would go unprobed there. Planes 0-3 and 14; no Unicode
    version up to 17.0 assigns anything in planes 4-13. 162,756 code points on Pythons 3.10-3.13
    alike, ~1.5x Python 3.11's unassigned ones (109,271): a tokenizer's first run (no proof cache)
    takes ~0.5 s longer (55 MB, GPT-2, 2 workers, 3 interleaved pairs: 3.28 -> 3.75 s median).
    An array of uint32, not a tuple: kept for the process's life, a tuple of int objects held 6.5 MB
    of the parent (tracemalloc), the array 0.65 MB."""
    old, cat = unicodedata.ucd_3_2_0.category, unicodedata.category
    planes = chain(range(0xD800), range(0xE000, 0x40000), range(0xE0000, 0xE1000))
    return array("I", (cp for cp in planes if (c := old(chr(cp))) == "Cn" or c != cat(chr(cp))))


def probe(reference_batch: Callable[[list[str]], list[list[int]]],
          encode: Callable[[str], np.ndarray]) -> tuple[tuple[int, int], ...]:
    """Inclusive ranges of code points where `encode` and `reference_batch` (tokenizers) give other
    ids. ~1.5 s for GPT-2 on 2 cores, nearly all of it in tokenizers (its pre-tokenizer's regex)."""
    return _probe(_PROBE, reference_batch, encode)


def probe_normalization(normalize: Callable[[str], str], encode: Callable[[str], np.ndarray],
                        encode_normalized: Callable[[str], np.ndarray]) -> tuple[tuple[int, int], ...]:
    """For a tokenizer with an NFC normalizer: inclusive ranges of code points among combining marks
    (_PROBE_NFC) where the engine's NFC and tokenizers' differ. `normalize`: tokenizers' normalizer
    (normalize_str); `encode`: the engine, which normalizes itself; `encode_normalized`: the same
    engine without its normalizer. Where the two NFCs agree on a text, encode(text) ==
    encode_normalized(normalize(text)); the pre-tokenizer and BPE are `probe`'s business. No
    tokenizers encode, so ~0.5 s, where tokenizers itself would take ~1.5 s more on these texts."""
    return _probe(_PROBE_NFC, lambda docs: [encode_normalized(normalize(doc)) for doc in docs], encode)


@functools.cache  # a parent with PREP_CACHE_DIR=off that loads several tokenizers probes once
def probe_classes() -> tuple[tuple[int, int], ...]:
    """Inclusive ranges of code points that gigatoken's pre-tokenizer classes otherwise than tokenizers'
    (GPT-2's regex in both, compared by where they cut `_PROBE`'s texts: \\p{L}, \\p{N} and \\s, the
    classes every byte-level regex uses), whatever the vocabulary. `probe` sees a class only where a
    merge crosses the cut: for a vocabulary with no merge from "a" into an Extension J ideograph's bytes
    it found no gap, and "\\U000323b0数据" got other ids than tokenizers' from a tokenizer whose merges
    join that ideograph's last byte to 数's first (a Chinese-trained one). For gigatoken 0.10 and
    tokenizers 0.23: the 4,657 code points in 26 ranges that `probe` finds for GPT-2's rich vocabulary.
    ~1.5 s, kept in prep's cache (it depends only on the engines' versions and this code)."""
    from pipeline import tokenizer_cache
    key = tokenizer_cache.spec_key("unicode_gaps.probe_classes", {})
    cached = tokenizer_cache.load(key)
    if isinstance(cached, tuple):
        return cached
    import gigatoken
    from tokenizers import pre_tokenizers
    regex = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)

    def cuts(text: str) -> tuple[list[int], list[int]]:
        """Characters per pre-token: tokenizers', gigatoken's."""
        return ([end - start for _, (start, end) in regex.pre_tokenize_str(text)],
                [len(piece.decode("utf-8")) for piece in gigatoken.pretokenizer(text.encode("utf-8"))])

    cands = _candidates()
    gaps: list[tuple[int, int]] = []
    for i in range(0, len(cands), _CHUNK):
        chunk = cands[i:i + _CHUNK]
        want, got = cuts("".join(_PROBE.format(x=chr(c)) for c in chunk))
        if want != got:
            gaps += [(c, c) for c in chunk if (pair := cuts(_PROBE.format(x=chr(c))))[0] != pair[1]]
    found = merge(gaps)
    tokenizer_cache.store(key, found)
    return found


def merge(*ranges: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The union of inclusive ranges: sorted, overlapping and adjacent ones joined."""
    out: list[list[int]] = []
    for a, b in sorted(r for group in ranges for r in group):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def _probe(template: str, reference_batch: Callable[[list[str]], Sequence[Sequence[int]]],
           encode: Callable[[str], np.ndarray]) -> tuple[tuple[int, int], ...]:
    cands = _candidates()
    chunks = [cands[i:i + _CHUNK] for i in range(0, len(cands), _CHUNK)]
    suspects: list[int] = []
    for i in range(0, len(chunks), _PER_CALL):
        part = chunks[i:i + _PER_CALL]
        docs = ["".join(template.format(x=chr(c)) for c in chunk) for chunk in part]
        for chunk, doc, want in zip(part, docs, reference_batch(docs), strict=True):
            if not _same(want, encode(doc)):
                suspects.extend(chunk)
    gaps: list[tuple[int, int]] = []
    if suspects:
        singles = [template.format(x=chr(c)) for c in suspects]
        gaps = [(c, c) for c, doc, want in zip(suspects, singles, reference_batch(singles), strict=True)
                if not _same(want, encode(doc))]
    return merge(gaps)


def _same(want: Sequence[int], got: np.ndarray) -> bool:
    return len(want) == len(got) and np.array_equal(np.asarray(want, dtype=np.int64), got.astype(np.int64))


# A compact str's size is a fixed header plus width x (length + 1) bytes; calibrated here, not assumed,
# on two-character strings: from 3.12 a one-character Latin-1 string is a static singleton 3 bytes
# larger (59 against 56), which counted every Latin-1 document as width 4 (fully checked).
_HEAD = {w: sys.getsizeof(s) - w * (len(s) + 1) for w, s in ((1, "\xe9" * 2), (2, "\u0100" * 2), (4, "\U00010000" * 2))}


def _width(text: str) -> int:
    """Bytes per character of a non-ASCII `text`'s storage: 1 (Latin-1), 2 (BMP), else 4. A string
    stored some other way, or whose UTF-8 form C code has cached in it (after an encoder read it),
    is larger than both formulas and counts as 4: fully checked, slower, never wrong."""
    size, n = sys.getsizeof(text), len(text) + 1
    return 1 if size == _HEAD[1] + n else 2 if size == _HEAD[2] + 2 * n else 4


class GapRouter:
    """Finds the documents holding any code point of `gaps` (inclusive ranges)."""

    def __init__(self, gaps: Sequence[tuple[int, int]]):
        self.gaps = tuple(gaps)
        table = np.zeros(0x110000, dtype=bool)
        for a, b in self.gaps:
            table[a:b + 1] = True
        self._table = table
        bmp = [cp for a, b in self.gaps for cp in range(a, min(b, 0xFFFF) + 1)]
        self._latin1 = [chr(cp) for cp in bmp if cp < 0x100]
        # few BMP gap characters: a substring search each (memchr speed); many: a table lookup
        self._bmp = [chr(cp) for cp in bmp] if len(bmp) <= 32 else None

    def find(self, texts: Sequence[str]) -> list[int]:
        if not self.gaps:
            return []
        out = []
        # only non-ASCII texts can hold a gap; finding them with C-level loops: 324 K short texts,
        # 0.11 s as a Python loop -> ~0.02 s
        for i in compress(range(len(texts)), map(not_, map(str.isascii, texts))):
            t = texts[i]
            w = _width(t)
            if w == 1:
                hit = any(ch in t for ch in self._latin1)
            elif w == 2 and self._bmp is not None:
                hit = any(ch in t for ch in self._bmp)
            else:
                hit = bool(self._table[np.frombuffer(t.encode("utf-32-le"), dtype=np.uint32)].any())
            if hit:
                out.append(i)
        return out
