"""Checks on a weighted mix of datasets, before any sample order is built.

A mix interleaves token ids from several datasets into the same batches, so they must mean the same
text in each: datasets of different tokenizers are refused (the ids of one are noise to a model
trained on the other's vocabulary). Different document boundaries (eos / bos) of one tokenizer and
a dataset listed twice are legal but rarely meant, so they warn. Weights are checked here too, with
the dataset they belong to named.
"""

from __future__ import annotations

import math
import os
import warnings

from pipeline.errors import PrepError

from .samplers import MIX_PERIOD
from .shards import TokenShards

__all__ = ["check_weights", "check_mix"]


def check_weights(specs: list[tuple[os.PathLike | str, object]]) -> list[float]:
    """Each weight a finite number > 0 (a bool is no weight), named with its dataset."""
    out = []
    for path, w in specs:
        try:
            if isinstance(w, bool):  # True was taken as weight 1
                raise TypeError
            w = float(w)
        except (TypeError, ValueError):
            raise PrepError(f"mixture weight of {path} is {w!r}; give a number > 0 (weights are relative)") from None
        if not math.isfinite(w) or w <= 0:
            # 0 was refused as "mixture weights must be positive numbers, got [1.0, 0.0]", naming
            # neither the dataset nor what to do instead
            raise PrepError(f"mixture weight of {path} is {w!r}; weights must be finite numbers > 0 (they are "
                            "relative: 0.7/0.3 and 7/3 give the same mix); to leave a dataset out, drop its entry")
        out.append(w)
    total = sum(out)
    for (path, _), w in zip(specs, out):
        if w / total * MIX_PERIOD < 1:  # no position of the interleave's period would be this dataset's
            least = (total - w) / (MIX_PERIOD - 1)  # the weight whose share is exactly 1 / MIX_PERIOD
            step = 10.0 ** (math.floor(math.log10(least)) - 1)  # shown rounded up to 2 digits: 1.1e-05, not 1e-05
            raise PrepError(f"mixture weight of {path} is {w!r}, {w / total:.2g} of the total: under the 1 in "
                            f"{MIX_PERIOD:,} positions a mix can give a dataset; raise it to at least "
                            f"{math.ceil(least / step) * step:.2g}, or drop its entry")
    return out


def _tok_id(shards: TokenShards) -> str:
    t = shards.manifest.tokenizer
    return str(t.get("sha256") or t.get("name"))


def _tok_desc(shards: TokenShards) -> str:
    t = shards.manifest.tokenizer
    return f"{t.get('name')!r} (sha256 {str(t.get('sha256'))[:12]}...)"


def check_mix(shards: list[TokenShards], expect_tokenizer: str | None) -> None:
    """Refuse datasets of different tokenizers; warn on different boundaries and repeated datasets.

    Tokenizers are told apart by sha256. When `expect_tokenizer` is given every dataset already
    matched it (TokenShards checks), by name or sha256: the caller vouches that they share one
    vocabulary (the same tokenizer saved twice has two sha256s), so the mix is taken.
    """
    if len(shards) < 2:
        return
    first = shards[0]
    for s in shards[1:]:
        if _tok_id(s) != _tok_id(first) and expect_tokenizer is None:
            # they were mixed silently: ids of one vocabulary read as the other's
            raise PrepError(f"mixture of datasets tokenized with different tokenizers: {first.root} with "
                            f"{_tok_desc(first)}, {s.root} with {_tok_desc(s)}; a token id means different text "
                            "in each. Re-tokenize one with the other's tokenizer, or, if both are the same "
                            "vocabulary, pass expect_tokenizer=<its name> to mix them anyway")
    vocab = {str(s.root): s.manifest.vocab_size for s in shards}
    if len(set(vocab.values())) > 1:
        # one vocabulary vouched for (expect_tokenizer) but grown: a tokenizer saved with added tokens.
        # A model sized from one manifest's vocab_size got ids past its embedding from the other (a
        # CUDA device-side assert, or on CPU an IndexError, steps into the run)
        warnings.warn("mixture of datasets with different vocabulary sizes (" + ", ".join(f"{p}: {v}" for p, v in
                      vocab.items()) + f"): token ids reach {max(vocab.values()) - 1}; size the model's embedding "
                      f"for {max(vocab.values())} ids (the loader's vocab_size)", stacklevel=3)
    bounds = {str(s.root): s.manifest.tokenizer.get("boundary") for s in shards}
    if len(set(bounds.values())) > 1:
        warnings.warn("mixture of datasets with different document boundaries ("
                      + ", ".join(f"{p}: {b}" for p, b in bounds.items())
                      + "): batches will hold documents framed both ways; re-tokenize to one boundary "
                      "setting unless that is intended", stacklevel=3)
    seen: dict[str, list[int]] = {}
    for i, s in enumerate(shards):
        seen.setdefault(s.fingerprint, []).append(i)
    for entries in seen.values():
        if len(entries) > 1:
            warnings.warn(f"{shards[entries[0]].root} (split {shards[entries[0]].split!r}) is listed {len(entries)} "
                          f"times in the mix (entries {entries}): each entry draws all of its samples, so an epoch "
                          f"holds each one {len(entries)} times; to weight it up, give it one entry with the summed "
                          "weight", stacklevel=3)
