"""Many short documents in one engine call: the batch's texts joined by a separator that the engine
knows as a special token, and its ids split back out at that token.

Why: encoding one document per call costs ~1.1 us per call beyond the encoding itself, and joining
one numpy array per document ~0.7 us more. On short documents that is as much CPU as the encoding:
per 100 K paragraphs of ~160 characters (benchmarks/data/docs.paragraphs.jsonl, GPT-2, gigatoken,
one process, warm engine), 249 ms one call per document against 135 ms joined, the same ids. On
documents of ~5,000 characters and more the calls are cheap and joining costs more than it saves
(a copy of the text, and the engine's scan for the separator: 64.7 against 77 ms per 20 MB of
~11,000-character documents), so the Encoder joins only batches whose mean length is under
JOIN_MEAN_CHARS.

Why it gives the same ids: an engine cuts special tokens out of a text before it normalizes or
pre-tokenizes it (as `tokenizers` does), so each document between two separators is encoded as if
alone. That is proved, not assumed: the parent's proof encodes the torture sample joined and compares
every document with `tokenizers` (tokenizers._choose_fast; a tokenizer on which it fails encodes one
document per call), and the run's check on its first documents goes through this path too.

The separator is two Unicode noncharacters, U+FDD0 U+FDD1, which Unicode reserves for a program's
internal use and will never assign. A document that holds them anyway gives more separator ids than
the batch has gaps; `encode_joined` then returns None and the Encoder encodes that batch one
document per call, giving the documents that hold the separator to `tokenizers` (their text stays
plain text, prep's policy for special-token strings). Its two characters differ, so an occurrence
cannot straddle a document and an inserted separator: the count is exact.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["SEPARATOR", "JOIN_MEAN_CHARS", "JOIN_BATCH_FACTOR", "joined_encoder", "holding_separator", "split_documents"]

SEPARATOR = "\ufdd0\ufdd1"
_SEPARATOR_BYTES = SEPARATOR.encode()
# Batches whose documents average fewer characters than this are joined. Measured on paragraphs
# grouped k at a time (one process, GPT-2, gigatoken, per 12 MB): one call per document against
# joined, 190 / 84 ms at 156 characters, 143 / 68 at 314, 87 / 53 at 631, 59 / 50 at 1,263,
# 51 / 41 at 2,529, 41 / 58 at 5,058.
JOIN_MEAN_CHARS = 2048
# An encoder that joins takes this many times the recipe's batch_docs per batch: the per-batch Python
# (the call, the split, the masks, the writes) then weighs less on short documents, while the Batcher's
# character cap (filters.BATCH_CHARS) still bounds a batch of long ones. 324 K paragraphs, 2 workers,
# 4096 against 512 documents: medians 1.136 against 1.198 s, 5 of 5 interleaved pairs, identical
# shards. One call per document loses with batches that large (8192: 4.24-4.74 against 3.70-4.38 s on
# 1.3 M paragraphs, session 13), so engines that do not join keep batch_docs.
JOIN_BATCH_FACTOR = 8


def joined_encoder(encode: Callable[[bytes], np.ndarray], separator_id: int, nfc: bool = False,
                   cut: tuple[Callable[[bytes], bool], Callable[[str], np.ndarray]] | None = None
                   ) -> Callable[[Sequence[str]], tuple[np.ndarray, np.ndarray] | None]:
    """texts -> (ids uint32 with a separator id between each two documents, the separators'
    positions int64[len(texts) - 1]), or None when a document holds the separator (or a lone
    surrogate, which has no UTF-8): encode that batch one document per call.

    `encode`: the engine's call (with any id shift), UTF-8 bytes -> uint32 ids, which gives SEPARATOR
    as `separator_id`; `nfc`: normalize each text first (what the one-document path does). `cut`:
    (whether UTF-8 text holds a non-special added token, the one-document encode that cuts those out
    first: added_tokens.PlainAddedTokens). A batch holding one goes whole through that encode, joined:
    it cuts the raw text, then normalizes and encodes each piece, as tokenizers does; a separator is
    never inside a token's match (its characters are in no token's string), so documents stay apart."""
    def encode_joined(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        try:
            # bytes, not a joined str: one wide (non-Latin-1) text would make the whole joined str 2-4
            # bytes per character, which the engine then converts to UTF-8 (631-character documents:
            # 79 against 53 ms per 12 MB); map, not a list comprehension: 12.9 against 18.4 ms per 100 K
            # paragraphs in batches of 4096
            data = _SEPARATOR_BYTES.join(map(str.encode, texts))
        except UnicodeEncodeError:
            return None
        if cut is not None and cut[0](data):  # matched on the raw text, before any normalizer
            ids = cut[1](SEPARATOR.join(texts))
        else:
            if nfc and not all(unicodedata.is_normalized("NFC", t) for t in texts):
                data = _SEPARATOR_BYTES.join(unicodedata.normalize("NFC", t).encode() for t in texts)
            ids = encode(data)
        cuts = np.flatnonzero(ids == separator_id)
        if cuts.size != len(texts) - 1:
            return None
        return ids, cuts
    return encode_joined


def holding_separator(texts: Sequence[str]) -> list[int]:
    """Indexes of the texts that hold SEPARATOR (an engine that knows it would give its id)."""
    return [i for i, t in enumerate(texts) if SEPARATOR in t]


def split_documents(ids: np.ndarray, cuts: np.ndarray) -> list[np.ndarray]:
    """`encode_joined`'s result as one array per document (views of one array without the separators)."""
    body = np.delete(ids, cuts)
    return np.split(body, cuts - np.arange(cuts.size))
