"""Tokenizer backends and the document-boundary policy.

`load_tokenizer(cfg)` runs once in the parent: it resolves the tokenizer (tokenizer.json path,
Hugging Face hub id, or `tiktoken:<encoding>`), finds BOS/EOS ids, and returns a small picklable
`TokenizerSpec`. Each worker calls `spec.build_encoder()` once and then `encode_batch(texts)`.

Three settings that real hub files get wrong for pretraining are forced here:
- truncation and padding in a tokenizer.json are switched off (GPT-2's hub file ships
  `truncation.max_length = 50`: a silent cut to 50 tokens per document);
- BPE dropout is switched off (a training-time augmentation: `tokenizers` then skips each merge at
  random, so two runs, or a resumed one, wrote other ids for the same text), with a note;
- special-token strings inside documents are plain text (`encode_special_tokens = True`), so a
  document that mentions `<|endoftext|>` does not produce the EOS id. Non-special added tokens
  (Qwen 2.5's `<tool_call>`, ...) keep their ids, as `tokenizers` gives them; the fast engines get
  them cut out in front (added_tokens.py).

Backends (`tokenizer.backend`): `hf` runs Hugging Face `tokenizers`; `tiktoken` runs tiktoken (a
`tiktoken:<encoding>` path, or a tiktoken encoding built from a byte-level BPE tokenizer.json); `auto`
(the default) runs the fastest engine proven to give the same ids as `tokenizers`: gigatoken when
installed, else tiktoken, else `tokenizers` itself, with a note saying why (see `fast_bpe.py`). The
proof: static checks of the tokenizer.json, identical ids on a torture sample here in the parent, and
identical ids on the run's first `VERIFY_CHARS` characters of documents, in the worker that encodes
them (a difference there stops the run with FastPathMismatch). The manifest records the backend.
The parent's part of the proof is cached across runs (`tokenizer_cache.py`); the per-run part is not.
"""

from __future__ import annotations

import array
import functools
import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from pipeline import hub, joined, tokenizer_cache, unicode_gaps
from pipeline.errors import PrepError
from pipeline.recipe import TokenizerConfig
from pipeline.tiktoken_encode import RegexLimit

log = logging.getLogger("prep")

__all__ = ["TokenizerSpec", "Encoder", "load_tokenizer", "FastPathMismatch", "VERIFY_CHARS"]

VERIFY_CHARS = 64 << 10  # characters of the run's first documents also encoded by `tokenizers` (~0.15 s)
# gigatoken caches every distinct pre-token it has seen (a hash table that grows by doubling): one
# engine over half of the 55 MB docs corpus +26 MiB, over all of it +35 MiB; over 55 MB whose words are
# all new (the docs with letters rotated) +58 MiB. 0.10 has no bound (later versions:
# set_max_cache_bytes, used when there).
# Rebuild the engine when the worker's resident memory has grown by this much since it was built
# (~0.06 s per rebuild from ranks, and a cold cache: ~2x slower for a while). Against 24 MiB, end to
# end on 2 workers: 8 copies of the docs corpus with all-new words peak at 362-378 against 328-333 MiB,
# but run 3.79 against 4.77 s (repeated copies: 2.97 against 3.24 s); profile report, session 14.
GIGATOKEN_CACHE_BYTES = 64 << 20

# Boundary ids go in by interleaving arrays for np.concatenate at or above this mean document length
# (tokens), by index arithmetic below it; see Encoder._add_boundaries. At 1024 tokens the interleaving
# costs ~1% of the encode, and index arithmetic would hold ~5 MB more per 512-document batch.
INTERLEAVE_TOKENS_PER_DOC = 1024

# Looked up (in order) when no tokenizer_config.json names the tokens and the recipe does not either.
# DeepSeek's (V3, R1) are "<｜end▁of▁sentence｜>" and "<｜begin▁of▁sentence｜>" (fullwidth bars, U+2581)
EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "<|im_end|>",
                  "<\uff5cend\u2581of\u2581sentence\uff5c>", "[SEP]")
BOS_CANDIDATES = ("<|begin_of_text|>", "<s>", "<bos>", "<|bos|>", "<|startoftext|>", "<|endoftext|>",
                  "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "[CLS]")


class FastPathMismatch(RuntimeError):
    """A fast engine gave other ids than `tokenizers` on a real document: a bug in prep's converter.

    Not a PrepError on purpose: it must stop the run, not be counted as one failed unit."""


@dataclass(frozen=True)
class TokenizerSpec:
    """Everything a worker needs to rebuild the encoder; also what the manifest records."""

    name: str           # as given in the recipe
    backend: str        # "hf" | "tiktoken" | "gigatoken" (the last two: ids proven equal to hf's)
    definition: str     # tokenizer.json text, or the tiktoken encoding name for `tiktoken:<name>`
    sha256: str         # of the definition
    vocab_size: int
    boundary: str
    bos_id: int | None
    eos_id: int | None
    backend_reason: str = ""   # one line for the CLI when auto could not use a fast engine
    backend_version: str = ""  # e.g. "tiktoken 0.14.0"
    # what the fast engine is built from, prepared once in the parent: gigatoken's tokenizer.json or
    # fast_bpe.GigatokenRanks, or tiktoken's fast_bpe.ByteLevelBPE (ranks); None: derived from
    # `definition` in each worker
    engine_data: object = field(default=None, repr=False, compare=False)
    # code points whose Unicode class the fast engine sees otherwise than tokenizers (inclusive ranges,
    # unicode_gaps.probe): documents holding one are encoded by tokenizers itself
    unicode_gaps: tuple = field(default=(), repr=False, compare=False)
    # the largest id the fast engine can give: the largest in the model's vocabulary (the only ids an
    # engine built from it knows: added tokens are not given to it) or of the non-special added tokens
    # cut out in front of it (`plain_added`). None: not known (the hf backend,
    # a `tiktoken:<name>` encoding, a spec cached before this field), so every batch is range-checked
    max_engine_id: int | None = field(default=None, repr=False, compare=False)
    # the non-special added tokens tokenizers cuts out of documents (Qwen 2.5's <tool_call>, ...), cut
    # out in front of the fast engine the same way (added_tokens.PlainAddedTokens); None: none
    plain_added: object = field(default=None, repr=False, compare=False)
    # the id gigatoken gives joined.SEPARATOR, when short documents are encoded a batch per call
    # (proven on the torture sample joined); None: one document per call
    join_id: int | None = field(default=None, repr=False, compare=False)
    # gigatoken cuts `plain_added` out itself, as its special tokens (fast_bpe.build_gigatoken_engines;
    # proven like the rest); False: cut out in Python in front of it
    native_added: bool = field(default=False, repr=False, compare=False)

    def manifest_dict(self) -> dict:
        return {"name": self.name, "backend": self.backend, "backend_version": self.backend_version,
                "sha256": self.sha256, "boundary": self.boundary, "bos_id": self.bos_id, "eos_id": self.eos_id,
                "vocab_size": self.vocab_size}

    @property
    def is_tiktoken_name(self) -> bool:
        return self.name.startswith("tiktoken:")

    def build_encoder(self) -> Encoder:
        if self.backend == "hf":
            tok = _hf_tokenizer(self.definition)
            return Encoder(self, encode_lists=lambda texts: [e.ids for e in tok.encode_batch_fast(
                texts, add_special_tokens=False)])
        if self.backend == "tiktoken" and self.is_tiktoken_name:
            from pipeline.fast_bpe import tiktoken_array_encoder
            return Encoder(self, encode_one=tiktoken_array_encoder(_tiktoken_encoding(self.definition)))
        if self.backend in ("tiktoken", "gigatoken"):
            encode, together = _build_fast_engines(self)
            return Encoder(self, encode_one=encode, encode_joined=together, reference=True)
        raise PrepError(f"tokenizer.backend: unknown backend {self.backend!r}")


class Encoder:
    """texts -> (concatenated ids uint32[N], lengths int64[docs]) with the boundary ids added.

    Engines either encode one text to a uint32 array (tiktoken, gigatoken: no Python int per token)
    or a batch to lists (tokenizers). After `verify_next_documents()` (the worker calls it for the
    run's first unit), a fast engine's ids on the next VERIFY_CHARS characters of documents are
    compared with `tokenizers`' (FastPathMismatch on any difference).
    """

    def __init__(self, spec: TokenizerSpec, encode_one: Callable[[str], np.ndarray] | None = None,
                 encode_lists: Callable[[list[str]], list[list[int]]] | None = None, reference: bool = False,
                 encode_joined: Callable | None = None):
        self.spec = spec
        self._encode_one = encode_one
        self._encode_joined = encode_joined  # joined.joined_encoder: short documents a batch per call
        self._encode_lists = encode_lists
        self.prefix = [spec.bos_id] if spec.boundary in ("bos", "both") else []
        self.suffix = [spec.eos_id] if spec.boundary in ("eos", "both") else []
        self._has_reference = reference  # a fast engine, to be checked against tokenizers
        self._verify_left = 0
        self._rss_limit = _rss_bytes() + GIGATOKEN_CACHE_BYTES if spec.backend == "gigatoken" else 0
        self.num_rebuilds = 0
        self._gaps = unicode_gaps.GapRouter(spec.unicode_gaps) if reference and spec.unicode_gaps else None
        self._reference = None
        self.num_referred = 0  # documents given to tokenizers because of a Unicode gap

    def verify_next_documents(self, chars: int | None = None) -> None:
        """Check the next `chars` (default VERIFY_CHARS) characters of documents against tokenizers
        (0.1 s to load it, ~1 MB/s to encode); no-op for the reference engines themselves."""
        if self._has_reference:
            self._verify_left = VERIFY_CHARS if chars is None else chars

    def encode_lists(self, texts: list[str]) -> list[list[int]]:
        """Raw ids per document, no boundary tokens."""
        if self._encode_lists is not None:
            return self._encode_lists(texts)
        return [a.tolist() for a in map(self._encode_one, texts)]

    def batch_docs(self, requested: int) -> int:
        """Documents per batch for a recipe's `batch_docs`: more where short documents are joined."""
        return requested * joined.JOIN_BATCH_FACTOR if self._encode_joined is not None else requested

    def fits(self, dtype) -> bool:
        """Whether every id this encoder can give (engine and boundary ids) is known to fit `dtype`:
        then `encode_batch(texts, dtype)` casts while concatenating (one pass over the tokens instead
        of concatenate, min/max and astype: 0.6 against 1.6-2.0 ms per 2.5 M tokens), and the caller
        need not range-check what it gets."""
        top = self.spec.max_engine_id
        if top is None or self._encode_one is None:
            return False
        return max([top, *self.prefix, *self.suffix]) <= np.iinfo(dtype).max

    def encode_batch(self, texts: list[str], dtype=np.uint32, chars: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ids, lengths); ids are `dtype` (cast unchecked: give a narrower one only where `fits`).
        `chars`: the texts' characters, where the caller counted them (a DocBatch's), so the join test
        below need not count them again."""
        if self._encode_one is None:
            return self._from_lists(self._encode_lists(texts))
        # before encoding: an engine that reads a str's UTF-8 leaves it cached in the object, and the
        # O(1) width test in unicode_gaps then sees every non-ASCII text as wide (57 MB: 5 -> 50 ms)
        referred = self._gaps.find(texts) if self._gaps is not None else []
        if (self._encode_joined is not None and not referred and len(texts) > 1
                and (sum(map(len, texts)) if chars is None else chars) < joined.JOIN_MEAN_CHARS * len(texts)):
            try:
                together = self._encode_joined(texts)
            except RegexLimit:  # one document at a time below, the refused one by tokenizers
                together = None
            if together is not None:
                if self._verify_left > 0:
                    self._verify(texts, joined.split_documents(*together), ())
                self._check_memory()
                return self._from_joined(*together, dtype)
        if self._encode_joined is not None:  # the engine gives the separator's id for its text
            referred = sorted({*referred, *joined.holding_separator(texts)})
        try:
            arrays = list(map(self._encode_one, texts))
        except RegexLimit:  # rare (a whitespace run of ~1 M characters): tiktoken refused a document
            arrays, refused = self._encode_each(texts)
            referred = sorted({*referred, *refused})
        for i in referred:  # rare: characters newer than tokenizers' Unicode tables, or joined.SEPARATOR
            arrays[i] = np.array(self._reference_encoder().encode(texts[i], add_special_tokens=False).ids,
                                 dtype=np.uint32)
            self.num_referred += 1
        if self._verify_left > 0:
            self._verify(texts, arrays, referred)
        self._check_memory()
        return self._from_arrays(arrays, dtype)

    def _encode_each(self, texts: list[str]) -> tuple[list[np.ndarray | None], list[int]]:
        """(the engine's ids per text, None where its regex refused the text; the indexes of those):
        they go to tokenizers, whose ids they must have (tiktoken_encode.RegexLimit)."""
        arrays: list[np.ndarray | None] = []
        for text in texts:
            try:
                arrays.append(self._encode_one(text))
            except RegexLimit:
                arrays.append(None)
        return arrays, [i for i, a in enumerate(arrays) if a is None]

    def _check_memory(self) -> None:
        if self._rss_limit and _rss_bytes() > self._rss_limit:
            self._rebuild()

    def _reference_encoder(self):
        if self._reference is None:
            self._reference = _hf_tokenizer(self.spec.definition)
        return self._reference

    def _from_arrays(self, arrays: list[np.ndarray], dtype=np.uint32) -> tuple[np.ndarray, np.ndarray]:
        raw = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        extra = len(self.prefix) + len(self.suffix)
        lengths = np.where(raw > 0, raw + extra, 0)  # an empty document gets no boundary ids either
        if not arrays:
            return np.zeros(0, dtype), lengths
        total = int(raw.sum())
        if extra and total and total >= INTERLEAVE_TOKENS_PER_DOC * len(arrays):
            pre, suf = np.array(self.prefix, np.uint32), np.array(self.suffix, np.uint32)
            arrays = [p for a in arrays if len(a) for p in (pre, a, suf)]
            return np.concatenate(arrays, dtype=dtype, casting="unsafe"), lengths
        ids = np.concatenate(arrays, dtype=dtype, casting="unsafe")
        if extra and ids.size:
            ids = self._add_boundaries(ids, raw, lengths)
        return ids, lengths

    def _from_joined(self, ids: np.ndarray, cuts: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray]:
        """`encode_joined`'s ids (separator ids at `cuts`) -> what `_from_arrays` gives."""
        raw = np.diff(cuts, prepend=-1, append=ids.size) - 1
        extra = len(self.prefix) + len(self.suffix)
        lengths = np.where(raw > 0, raw + extra, 0)
        if extra == 1 and raw.all():  # one boundary id per document, none empty: it takes the separators' places
            out = np.empty(ids.size + 1, dtype)
            if self.suffix:
                out[:-1] = ids  # an unchecked cast where `fits`, as np.concatenate's casting="unsafe"
                out[cuts] = out[-1] = self.suffix[0]
            else:
                out[1:] = ids
                out[cuts + 1] = out[0] = self.prefix[0]
            return out, lengths
        body = np.delete(ids, cuts)
        if extra and body.size:
            body = self._add_boundaries(body, raw, lengths)
        return body.astype(dtype, casting="unsafe", copy=False), lengths

    def _add_boundaries(self, ids: np.ndarray, raw: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Documents' ids uint32[sum(raw)] -> with prefix and suffix ids around each non-empty one,
        by index arithmetic: for short documents, where interleaving [pre, a, suf] arrays for one
        np.concatenate costs ~0.4 us per document (0.12 s per 324 K; this ~0.01 s). It holds the
        batch's ids twice (+5 bytes per token), which long documents' batches would feel."""
        out = np.empty(int(lengths.sum()), ids.dtype)
        body = np.ones(out.size, bool)
        starts = (np.cumsum(lengths) - lengths)[raw > 0]  # where each non-empty document begins in `out`
        for at, tokens in ((starts, self.prefix), (starts + len(self.prefix) + raw[raw > 0], self.suffix)):
            for k, token in enumerate(tokens):
                out[at + k] = token
                body[at + k] = False
        out[body] = ids
        return out

    def _from_lists(self, lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        # array('I').extend: ~17 ns/token, 3x np.fromiter over a chain of lists
        raw = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        extra = len(self.prefix) + len(self.suffix)
        lengths = np.where(raw > 0, raw + extra, 0)
        buf = array.array("I")
        pre, suf = self.prefix, self.suffix
        for x in lists:
            if x:
                buf.extend(pre)
                buf.extend(x)
                buf.extend(suf)
        return np.frombuffer(buf, dtype=np.uint32) if len(buf) else np.zeros(0, np.uint32), lengths

    def _verify(self, texts: list[str], arrays: list[np.ndarray], referred) -> None:
        """Compare the fast ids of the next `_verify_left` characters of `texts` with tokenizers'. A
        document longer than what is left is checked by its prefix of that length, which this engine
        encodes again: whole, one 50 MB document took 31 s of tokenizers in unit 0's worker. The
        documents in `referred` got tokenizers' own ids; they are skipped."""
        from pipeline import fast_bpe
        left = self._verify_left
        checked: list[str] = []
        fast: list[np.ndarray] = []
        skip = set(referred)
        for i, (text, ids) in enumerate(zip(texts, arrays)):
            if left <= 0:
                break
            if i in skip:
                continue
            if len(text) > left:
                text = text[:left]
                ids = self._encode_one(text)
            checked.append(text)
            fast.append(ids)
            left -= len(text)
        self._verify_left = left
        if not checked:
            return
        tok = _hf_tokenizer(self.spec.definition)
        want = [e.ids for e in tok.encode_batch_fast(checked, add_special_tokens=False)]
        found = fast_bpe.first_mismatch(want, fast)
        del tok, want
        _release_memory()
        if self._rss_limit:  # what tokenizers took is not gigatoken's cache
            self._rss_limit = max(self._rss_limit, _rss_bytes() + GIGATOKEN_CACHE_BYTES)
        if found is not None:
            raise FastPathMismatch(
                f"tokenizer backend {self.spec.backend} gave other ids than Hugging Face tokenizers for "
                f"{self.spec.name} on {fast_bpe.describe_mismatch(checked, found)}. This is a bug in prep's "
                "fast path (please report it with that text); set tokenizer.backend: hf to run the reference "
                "engine.")

    def _rebuild(self) -> None:
        """Drop gigatoken's pre-token cache (the only way with 0.10) by building a fresh engine.

        The old engine's heap goes back to the OS before the new limit is taken: freed but kept by
        malloc, it held the RSS up, so each rebuild let the next cache grow by another
        GIGATOKEN_CACHE_BYTES on top of it. One process on 30 units (250 MB) of new text, with a 24
        MiB bound: the limit climbed 124 -> 136 -> 152 MiB over 2 rebuilds; trimmed first, it stays
        at 130-137 MiB over 5 (an old engine dropped and trimmed: 41-68 -> 5-6 MiB above the first)."""
        self._encode_one = self._encode_joined = None
        _release_memory()
        self._encode_one, self._encode_joined = _build_fast_engines(self.spec)
        self._rss_limit = _rss_bytes() + GIGATOKEN_CACHE_BYTES
        self.num_rebuilds += 1


def _release_memory() -> None:
    """Give freed heap pages back to the OS (glibc malloc_trim), so a parent or worker that loaded a
    tokenizer only to check it does not carry that peak through the run. No-op elsewhere."""
    try:
        import ctypes
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _rss_bytes() -> int:
    """Resident memory of this process (Linux /proc; 0 elsewhere, which disables the cache guard)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _hf_tokenizer(definition: str):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_str(definition)
    _make_plain(tok)
    return tok


def _build_fast_engines(spec: TokenizerSpec) -> tuple[Callable[[str], np.ndarray], Callable | None]:
    """(encode one text, encode a batch joined or None): what the workers run."""
    from pipeline import fast_bpe
    data = spec.engine_data
    if spec.backend == "gigatoken":
        prepared = isinstance(data, (str, fast_bpe.GigatokenRanks))
        return fast_bpe.build_gigatoken_engines(data if prepared else spec.definition, prepared=prepared,
                                                cache_bytes=GIGATOKEN_CACHE_BYTES, join_id=spec.join_id,
                                                plain_added=spec.plain_added, native_added=spec.native_added)
    if not isinstance(data, fast_bpe.ByteLevelBPE):
        data, why = fast_bpe.analyze(spec.definition, check_whole_tokens=False)
        if data is None:  # the parent checked this definition: only an edited spec gets here
            raise PrepError(f"tokenizer backend tiktoken: {spec.name} is not convertible: {why}")
    return fast_bpe.build_tiktoken_engines(data, spec.join_id, spec.plain_added)


def _make_plain(tok) -> None:
    tok.no_truncation()
    tok.no_padding()
    tok.encode_special_tokens = True
    if getattr(tok.model, "dropout", None):  # BPE's only; `tok.model` shares the tokenizer's model
        tok.model.dropout = None


def _tiktoken_encoding(name: str):
    import tiktoken
    try:
        return tiktoken.get_encoding(name)
    except ValueError:  # tiktoken's message runs over 3 lines (plugins, version); the CLI prints one
        raise PrepError(f"tokenizer.path: tiktoken:{name} is not a tiktoken encoding; known: "
                        f"{', '.join(tiktoken.list_encoding_names())}") from None
    except Exception as e:  # network errors when the BPE file is not cached yet
        raise PrepError(f"tokenizer.path: tiktoken:{name} could not be loaded ({type(e).__name__}); it is "
                        "downloaded on first use: run once online, set TIKTOKEN_CACHE_DIR to a cached copy, "
                        "or give a tokenizer.json path") from None


def load_tokenizer(cfg: TokenizerConfig) -> TokenizerSpec:
    spec = _load_tiktoken(cfg) if cfg.path.startswith("tiktoken:") else _load_hf(cfg)
    _release_memory()  # the parsed tokenizer.json and the engines built for the proof: ~50 MiB
    return spec


def _load_tiktoken(cfg: TokenizerConfig) -> TokenizerSpec:
    name = cfg.path.split(":", 1)[1]
    if cfg.backend == "hf":
        raise PrepError(f"tokenizer.backend: hf cannot run {cfg.path}; use backend auto or tiktoken")
    enc = _tiktoken_encoding(name)
    special = dict(enc._special_tokens)
    vocab = _TiktokenVocab(enc._mergeable_ranks)  # a setting may name an ordinary token, as for a tokenizer.json
    eos = _pick(cfg.eos_token, special, EOS_CANDIDATES, "eos_token", cfg, vocab)
    bos = _pick(cfg.bos_token, special, BOS_CANDIDATES, "bos_token", cfg, vocab)
    h = hashlib.sha256(f"{name}\n{enc._pat_str}\n{sorted(special.items())}\n".encode())
    for token, rank in sorted(enc._mergeable_ranks.items(), key=lambda kv: kv[1]):
        h.update(token + b"\x00" + rank.to_bytes(4, "little"))
    ranks_sha = h.hexdigest()
    return _finish(TokenizerSpec(cfg.path, "tiktoken", name, ranks_sha, enc.n_vocab, cfg.boundary, bos, eos,
                                 backend_version=_version("tiktoken")), cfg)


class _TiktokenVocab:
    """tokenizers' token_to_id over a tiktoken encoding's ordinary tokens, for `_pick`: a tokenizer.json's
    eos_token/bos_token may be any token of its vocabulary (a Llama-style "</s>" is special, but "\n" or
    "." work too), and a tiktoken:<name> one was looked up among the special tokens only. Its
    vocabulary is bytes, so a setting names a token by its UTF-8."""

    def __init__(self, ranks: dict[bytes, int]):
        self.ranks = ranks

    def token_to_id(self, text: str) -> int | None:
        return self.ranks.get(text.encode("utf-8"))


_OTHER_TOKENIZER_FILES = {"tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "spiece.model",
                          "sentencepiece.bpe.model", "tokenizer_config.json"}
_CONVERT = ("; prep reads tokenizer.json files: transformers writes one for a model's tokenizer with "
            "AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR), or name a hub id")


def _convert_hint(folder: Path, given: Path | None = None) -> str:
    """How to get a tokenizer.json for the files in `folder`: for a GPT-2-style vocab.json + merges.txt
    (Megatron's gpt2-vocab.json and gpt2-merges.txt too), the tokenizers line that writes one; its ids
    equal GPT-2's hub tokenizer.json's (19,000 documents checked). transformers' AutoTokenizer, the
    general advice, is not installed with prep and needs a config beside such files."""
    if given is not None and given.name != "tokenizer.json" and (folder / "tokenizer.json").is_file():  # GPT-2's hub folder
        return f"; the tokenizer.json beside it is one: tokenizer.path: {folder / 'tokenizer.json'}"
    vocab = next(iter(sorted(folder.glob("*vocab.json"))), None)
    merges = next(iter(sorted(folder.glob("*merges.txt"))), None)
    if vocab is None or merges is None:
        return _CONVERT
    try:  # GPT-2's EOS is an ordinary entry of vocab.json: tokenizers must be told it is special
        eos = "<|endoftext|>" in json.loads(vocab.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        eos = False
    special = "t.add_special_tokens(['<|endoftext|>']); " if eos else ""
    return ("; prep reads tokenizer.json files, and tokenizers (installed with prep) writes one of a GPT-2-style "
            f"vocab.json and merges.txt: python -c \"from tokenizers import ByteLevelBPETokenizer as B; "
            f"t = B({str(vocab)!r}, {str(merges)!r}); {special}t.save({str(folder / 'tokenizer.json')!r})\"")


def _read_definition(path: str) -> tuple[str, Path | None]:
    """tokenizer.json text and the directory holding its tokenizer_config.json (for a hub id, the
    cache's folder of the repo's tokenizer_config.json; None when it has none)."""
    p = Path(os.path.expanduser(path))
    if p.is_dir():
        folder = p
        p = p / "tokenizer.json"
        if not p.is_file():
            has = sorted(f.name for f in folder.iterdir() if f.name in _OTHER_TOKENIZER_FILES
                         or f.name.endswith(("-vocab.json", "-merges.txt")))
            raise PrepError(f"tokenizer.path: {path} is a directory without tokenizer.json"
                            + (f" (it has {', '.join(has)}){_convert_hint(folder)}" if has else ""))
    if p.is_file():
        try:  # utf-8-sig: a byte order mark (Windows editors write one) is not JSON's first value
            return p.read_text(encoding="utf-8-sig"), p.parent
        except UnicodeDecodeError:
            raise PrepError(f"tokenizer.path: {path} is not a tokenizer.json (not UTF-8 text: a binary file such "
                            f"as a SentencePiece .model){_CONVERT}") from None
    if path.endswith(".json") or os.sep in path and not path.count("/") == 1:
        raise PrepError(f"tokenizer.path: {path} does not exist (a tokenizer.json path, a hub id such as "
                        "gpt2, or tiktoken:<encoding>)")
    reason = hub.unreachable()  # probed once: each probe may wait its 3 s timeout where packets are dropped
    return _from_hub(path, reason), _hub_config_folder(path, reason)


def _hub_config_folder(repo: str, unreachable: str | None) -> Path | None:
    """The local folder of a hub repo's tokenizer_config.json (fetched while the hub answers, else the
    cache's copy), or None. Without it a hub id took its boundary token from the built-in candidates
    while the same model as a folder took the config's: Qwen2.5-Instruct's eos <|im_end|> by folder,
    <|endoftext|> by hub id."""
    try:
        import huggingface_hub
        if unreachable is None:
            try:
                return Path(huggingface_hub.hf_hub_download(repo, "tokenizer_config.json")).parent
            except Exception:  # the repo has none (404), a gated repo: the cache may still hold one
                pass
        cached = huggingface_hub.try_to_load_from_cache(repo, "tokenizer_config.json")
    except Exception:  # not a valid repo id
        return None
    return Path(cached).parent if isinstance(cached, str) else None


def _from_hub(path: str, reason: str | None) -> str:
    """A hub id's tokenizer.json: fetched as tokenizers does while the hub answers; else (no network,
    or HF_HUB_OFFLINE=1) the copy in the local Hugging Face cache, at once. huggingface_hub retries a
    connection that fails 5 times (1 + 2 + 4 + 8 + 8 s), so offline every run waited ~23 s before it
    fell back to that copy or failed. `reason`: hub.unreachable()'s answer."""
    if reason is None:
        from tokenizers import Tokenizer
        try:
            return Tokenizer.from_pretrained(path).to_str()
        except Exception as e:
            reason = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    try:
        from huggingface_hub import try_to_load_from_cache
        cached = try_to_load_from_cache(path, "tokenizer.json")
    except Exception:  # not a valid repo id
        cached = None
    if isinstance(cached, str):
        log.warning("tokenizer.path: %s: the Hugging Face hub is not reachable (%s); using the copy in the "
                    "local cache, %s", path, reason, cached)
        return Path(cached).read_text(encoding="utf-8-sig")
    raise PrepError(f"tokenizer.path: {path!r} is not a local file, not in the local Hugging Face cache, and "
                    f"could not be fetched from the hub ({reason}); when offline, give the path of a "
                    "downloaded tokenizer.json")


def _load_hf(cfg: TokenizerConfig) -> TokenizerSpec:
    definition, folder = _read_definition(cfg.path)
    sha = hashlib.sha256(definition.encode()).hexdigest()  # of the file's text (a hub id: tokenizers' to_str)
    named = _config_tokens(folder)
    settings = {**{k: v for k, v in asdict(cfg).items() if k != "path"}, **{f"file_{k}": v for k, v in named.items()}}
    key = tokenizer_cache.spec_key(sha, settings)
    cached = tokenizer_cache.load(key)
    if isinstance(cached, TokenizerSpec) and cached.sha256 == sha:  # proven by an earlier run: 0.33 -> 0.05 s
        return replace(cached, name=cfg.path, definition=definition)
    spec = _prove_hf(cfg, definition, sha, named, folder)
    tokenizer_cache.store(key, replace(spec, definition=""))  # the definition is the file, read every run
    return spec


def _prove_hf(cfg: TokenizerConfig, definition: str, sha: str, named: dict,
              folder: Path | None = None) -> TokenizerSpec:
    from tokenizers import Tokenizer
    try:
        tok = Tokenizer.from_str(definition)
    except Exception as e:
        given = Path(os.path.expanduser(cfg.path))  # a hub id's is not a local file: no files beside it
        why = _why_not_tokenizer(definition, e, given if given.is_file() else None)
        raise PrepError(f"tokenizer.path: {cfg.path} is not a valid tokenizer.json ({why})") from None
    dropout = getattr(tok.model, "dropout", None)
    _make_plain(tok)
    special = {t.content: i for i, t in tok.get_added_tokens_decoder().items()}
    needs = _BOUNDARY_NEEDS[cfg.boundary]
    eos = _pick(cfg.eos_token, special, EOS_CANDIDATES, "eos_token", cfg, tok, named.get("eos_token"), "eos" in needs)
    bos = _pick(cfg.bos_token, special, BOS_CANDIDATES, "bos_token", cfg, tok, named.get("bos_token"), "bos" in needs)
    # the largest id, not the count of tokens: a vocabulary with holes (ids 0..788 and 5000) counts 790
    # tokens, and a size of 790 chose uint16 for an id of 70000 (every unit failed) or wrote 5000 into a
    # dataset whose manifest says 790, which `prep verify` then called damaged (20-35 ms, cached)
    max_id = max(tok.get_vocab(with_added_tokens=True).values(), default=-1)
    spec = TokenizerSpec(cfg.path, "hf", definition, sha, max_id + 1, cfg.boundary, bos, eos,
                         backend_version=_version("tokenizers"))
    spec = _finish(spec, cfg, special)
    spec = spec if cfg.backend == "hf" else _choose_fast(spec, cfg, tok, special)
    notes = [spec.backend_reason, _dropout_note(cfg, dropout) if dropout else "", _post_processor_note(cfg, tok, spec)]
    return replace(spec, backend_reason="; ".join(filter(None, notes)))


def _dropout_note(cfg: TokenizerConfig, dropout: float) -> str:
    return (f"the BPE dropout of {cfg.path} ({dropout}) is switched off: it skips merges at random, so no two runs "
            "would write the same ids")


def _post_processor_note(cfg: TokenizerConfig, tok, spec: TokenizerSpec) -> str:
    """A note when the tokenizer.json's post-processor (a TemplateProcessing: Llama 2's and Llama 3's hub
    files add BOS, BERT's [CLS] and [SEP]) adds ids that the boundary does not: prep encodes with
    add_special_tokens=False, so `tok.encode(text)` gives other ids than the dataset holds; "" when the
    boundary puts the same ids around each document, or the post-processor adds none (GPT-2's ByteLevel)."""
    if tok.post_processor is None:
        return ""
    try:
        body = tok.encode("a", add_special_tokens=False).ids
        full = tok.encode("a", add_special_tokens=True).ids
    except Exception:  # a post-processor that refuses a lone text: nothing to say about it
        return ""
    at = next((i for i in range(len(full) - len(body) + 1) if full[i:i + len(body)] == body), None)
    if at is None or not body:
        return ""
    before, after = full[:at], full[at + len(body):]
    uses = set(_BOUNDARY_NEEDS[cfg.boundary])
    missed_before = bool(before) and not (before == [spec.bos_id] and "bos" in uses)
    missed_after = bool(after) and not (after == [spec.eos_id] and "eos" in uses)
    if not (missed_before or missed_after):  # the boundary writes those ids (and maybe more)
        return ""

    def named(ids: list[int]) -> str:
        return " ".join(str(tok.id_to_token(i)) for i in ids)

    adds = " and ".join(filter(None, [f"{named(before)} before" if before else "", f"{named(after)} after" if after else ""]))
    # the boundary that writes what the post-processor adds, as well as what this one writes
    if before in ([], [spec.bos_id]) and after in ([], [spec.eos_id]):
        uses |= {"bos"} if before else set()
        uses |= {"eos"} if after else set()
        better = next(b for b, needs in _BOUNDARY_NEEDS.items() if set(needs) == uses)
        fix = f"; boundary: {better} writes them too"
    else:
        fix = ""
    return (f"the post-processor of {cfg.path} adds {adds} each text, which prep does not run: tokenizer.boundary "
            f"({cfg.boundary}) alone puts ids around each document{fix}")


def _why_not_tokenizer(definition: str, error: Exception, given: Path | None = None) -> str:
    """tokenizers' parse error, unless the text is JSON of another shape: for GPT-2's vocab.json (or any
    object without "model") tokenizers said "expected `,` or `}` at line 1 column 5" of valid JSON.
    `given`: the file, beside which the other file of a vocab.json + merges.txt pair may be."""
    hint = _CONVERT if given is None else _convert_hint(given.parent, given)
    try:
        d = json.loads(definition)
    except ValueError:  # GPT-2's merges.txt begins "#version: 0.2"
        return "it is a merges.txt" + hint if definition.startswith("#version") else str(error)
    # a "model" that is not an object is a token: GPT-2's vocab.json holds "model": 19849
    if isinstance(d, dict) and not isinstance(d.get("model"), dict):
        if d and all(isinstance(v, int) for v in d.values()):
            return "it is JSON with no \"model\": a vocab.json of token -> id" + hint
        return "it is JSON with no \"model\" key"
    return str(error)


def _choose_fast(spec: TokenizerSpec, cfg: TokenizerConfig, tok, special: dict[str, int]) -> TokenizerSpec:
    """The fastest engine proven to match `tokenizers` on this tokenizer.json, else `spec` (hf) with
    the reason; backend `tiktoken` given explicitly refuses instead of falling back."""
    from pipeline import fast_bpe

    def unavailable(why: str) -> TokenizerSpec:
        if cfg.backend == "tiktoken":
            raise PrepError(f"tokenizer.backend: tiktoken cannot run {cfg.path}: {why}; use backend auto "
                            "(falls back to Hugging Face tokenizers) or hf")
        return replace(spec, backend_reason=f"tokenizer backend hf (the reference engine, slower): {why}")

    import orjson

    from pipeline import added_tokens
    d = orjson.loads(spec.definition)
    if (d.get("model") or {}).get("dropout") is not None:  # off, as in every tokenizers.Tokenizer here (_make_plain)
        d["model"]["dropout"] = None
    plain, _ = added_tokens.from_definition(d)  # its refusal comes back through the structure checks
    found, why = fast_bpe.check_structure(d)
    nfc = found is not None and found[1] == "NFC"  # the Unicode probe then also compares the two NFCs
    # a SentencePiece-style BPE (Llama 2, Mistral 7B v0.1): only gigatoken's SentencePiece engine runs it
    # (a Unigram with byte_fallback is not one: it was refused as "not a SentencePiece-style BPE")
    sentencepiece = found is None and (d.get("model") or {}).get("type") == "BPE" and bool(d["model"].get("byte_fallback"))
    if sentencepiece:
        why = _sentencepiece_refusal(d, cfg)
    if why:
        return unavailable(f"no fast engine gives the same ids, because {why}")
    sample = fast_bpe.torture_sample(special)
    want = [e.ids for e in tok.encode_batch_fast(sample, add_special_tokens=False)]
    engines = fast_bpe.ENGINES if cfg.backend == "auto" else ("tiktoken",)
    failures = []
    analysis = functools.cache(lambda: fast_bpe.analyze(d, tok))  # once, for gigatoken's ranks and tiktoken

    # gigatoken and tiktoken encode short documents a batch per call (joined.py), the batch joined by
    # a separator they know as this id; not where non-special added tokens need two passes, nor behind
    # a Metaspace that prepends "▁" to a text's first piece only (the document after a separator would
    # lose its "▁"). A SentencePiece file with Llama 2's Prepend normalizer joins: tokenizers
    # normalizes each piece between special tokens alone, so each document keeps its "▁" (proven).
    first_only = (d.get("pre_tokenizer") or {}).get("prepend_scheme") == "first"
    joinable = (plain is None or plain.joinable) and not (sentencepiece and first_only)
    # (past the added tokens too: a cut-out token's id comes out of the engine's calls)
    join_id = max([*d["model"]["vocab"].values(), *(t["id"] for t in d.get("added_tokens") or ())]) + 1 if joinable else None

    # gigatoken cuts the non-special added tokens out itself where no special token can hide one
    # (added_tokens.PlainAddedTokens.engine_can_cut): tried first; failing its proof, they are cut out
    # in Python in front of it
    native = plain is not None and plain.engine_can_cut
    cutting = " cutting added tokens itself"

    def candidates():
        """(engine, label, what it is built from, native_added), fastest first."""
        if sentencepiece:
            if native:
                yield "gigatoken", "gigatoken (SentencePiece)" + cutting, fast_bpe.gigatoken_definition(d, join_id, plain), True
            yield "gigatoken", "gigatoken (SentencePiece)", fast_bpe.gigatoken_definition(d, join_id), False
            return
        for engine in engines:
            if engine == "gigatoken":
                if not fast_bpe.gigatoken_available():
                    continue  # optional: pip install gigatoken
                ranks = fast_bpe.gigatoken_ranks(d, tok, analysis)  # half the build time of the tokenizer.json
                # from ranks, NFC runs in Python before the engine, so before its cut: the tokenizer.json
                # then, whose NFC gigatoken runs after its cut, as tokenizers does
                if native and ranks is not None and ranks.normalizer is None:
                    yield engine, "gigatoken from ranks" + cutting, ranks, True
                elif native:
                    yield engine, engine + cutting, fast_bpe.gigatoken_definition(d, join_id, plain), True
                if ranks is not None:
                    yield engine, "gigatoken from ranks", ranks, False
                yield engine, engine, fast_bpe.gigatoken_definition(d, join_id), False
            else:
                data, why = analysis()
                if data is None:
                    failures.append(f"tiktoken cannot run it: {why}")
                    continue
                yield engine, engine, data, False

    def prove(engine: str, data, join: int | None, native_added: bool):
        """What the workers run (_build_fast_engines), built and compared with tokenizers on `sample`:
        (encode, encode_joined or None, the first mismatch or None)."""
        if engine == "gigatoken":
            encode, together = fast_bpe.build_gigatoken_engines(data, prepared=True, join_id=join, plain_added=plain,
                                                                native_added=native_added)
        else:
            encode, together = fast_bpe.build_tiktoken_engines(data, join, plain)
        return encode, together, fast_bpe.first_mismatch(want, [encode(t) for t in sample])

    for engine, label, data, native_added in candidates():
        join = join_id
        try:
            encode, together, found = prove(engine, data, join, native_added)
            if found is None and together is not None:
                joined_found = _joined_mismatch(together, sample, want)
                if joined_found:  # one document per call, from an engine that does not know the separator
                    failures.append(f"{label} cannot encode documents joined: {joined_found}")
                    join = None
                    if isinstance(data, str):  # gigatoken's tokenizer.json, which had the separator
                        data = fast_bpe.gigatoken_definition(d, None, plain if native_added else None)
                    encode, together, found = prove(engine, data, join, native_added)
        except Exception as e:  # gigatoken: no fast pre-tokenizer for this regex; anything else: not proven
            failures.append(f"{label} could not load it ({type(e).__name__}: {str(e).splitlines()[0][:100]})")
            continue
        if found is not None:
            failures.append(f"{label} gave other ids on {fast_bpe.describe_mismatch(sample, found)}")
            continue
        note = f"tokenizer backend {engine}; " + "; ".join(failures) if failures else ""
        gaps = unicode_gaps.probe(lambda docs: [e.ids for e in tok.encode_batch_fast(docs, add_special_tokens=False)],
                                  encode)
        if engine == "gigatoken" and not sentencepiece:  # its regex's classes, where no merge shows them
            gaps = unicode_gaps.merge(gaps, unicode_gaps.probe_classes())
        if nfc:  # tokenizers' NFC tables are older than its regex's, and than Python's and gigatoken's
            gaps = unicode_gaps.merge(gaps, unicode_gaps.probe_normalization(
                tok.normalizer.normalize_str, encode, _encode_unnormalized(engine, data, d)))
        return replace(spec, backend=engine, backend_version=_version(engine), backend_reason=note,
                       engine_data=data, unicode_gaps=gaps, plain_added=plain, join_id=join, native_added=native_added,
                       max_engine_id=max([*d["model"]["vocab"].values(), *(plain.ids if plain else ())]))
    return unavailable("; ".join(failures))


def _encode_unnormalized(engine: str, data, d: dict) -> Callable[[str], np.ndarray]:
    """The one-document encode of `engine` built from `data` (made from the tokenizer.json `d`) without
    its NFC, for text already normalized (unicode_gaps.probe_normalization). No join id, no added
    tokens: the probe's texts hold neither."""
    from pipeline import fast_bpe
    if isinstance(data, str):  # gigatoken over the tokenizer.json, which applies its NFC itself
        return fast_bpe.build_gigatoken_engines(fast_bpe.gigatoken_definition({**d, "normalizer": None}),
                                                prepared=True)[0]
    if engine == "gigatoken":  # ranks: the NFC runs in Python, in front of the engine
        return fast_bpe.build_gigatoken_engines(replace(data, normalizer=None), prepared=True)[0]
    return fast_bpe.build_tiktoken_engines(replace(data, normalizer=None))[0]


def _joined_mismatch(encode_joined, sample: list[str], want: list[list[int]]) -> str:
    """Why the torture sample encoded joined (joined.py) does not give tokenizers' ids, "" if it does."""
    from pipeline import fast_bpe
    together = encode_joined(sample)
    if together is None:
        return "the separator was not found between every two documents"
    found = fast_bpe.first_mismatch(want, joined.split_documents(*together))
    return "" if found is None else f"other ids on {fast_bpe.describe_mismatch(sample, found)}"


def _sentencepiece_refusal(d: dict, cfg: TokenizerConfig) -> str:
    """Why a SentencePiece-style BPE cannot run on gigatoken here ("" when it may, subject to the proof)."""
    from pipeline import fast_bpe
    _, why = fast_bpe.sentencepiece_structure(d)
    if not why and cfg.backend == "tiktoken":
        why = "it is a SentencePiece-style BPE (byte_fallback), which tiktoken cannot run"
    elif not why and not fast_bpe.gigatoken_available():
        why = "it is a SentencePiece-style BPE (byte_fallback), which only gigatoken runs (pip install gigatoken)"
    return why


def _version(package: str) -> str:
    found = tokenizer_cache.versions([package])[package]
    return f"{package} {found}" if found else package


def _config_tokens(folder: Path | None) -> dict:
    """bos_token/eos_token strings from a tokenizer_config.json beside the tokenizer.json, if any."""
    if folder is None or not (folder / "tokenizer_config.json").is_file():
        return {}
    path = folder / "tokenizer_config.json"
    try:  # utf-8-sig: a BOM'd config was skipped silently, and its eos_token with it (review)
        conf = json.loads(path.read_text(encoding="utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:  # skipped, a run wrote another boundary id
        raise PrepError(f"{path}: not valid JSON ({e}); prep reads its bos_token and eos_token: fix the file, "
                        "or move it out of the tokenizer's folder") from None
    if not isinstance(conf, dict):
        return {}
    out = {}
    for key in ("bos_token", "eos_token"):
        v = conf.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[key] = v
    return out


def _pick(given, special: dict, candidates, key: str, cfg: TokenizerConfig, tok=None, named: str | None = None,
          needed: bool = True) -> int | None:
    """The id of `given` (tokenizer.<key>), else of `named` (tokenizer_config.json's), else of the
    first candidate among the special tokens. A token the config names that is not in the vocabulary
    is an error only when the boundary uses it: a config's unused `bos_token: <s>` once refused a
    boundary-eos run, naming tokenizer.bos_token, a key the user never set."""
    if given is None and named is not None:
        tid = _token_id(named, special, tok)
        if tid is not None:
            return tid
        if needed:
            raise PrepError(f"tokenizer.{key}: {named!r}, named by the tokenizer_config.json beside {cfg.path}, is "
                            f"not a token of it; set tokenizer.{key} to the string of one that is")
    if given is not None:
        tid = _token_id(given, special, tok)
        if tid is None:
            raise PrepError(f"tokenizer.{key}: {given!r} is not a token of {cfg.path}")
        return tid
    for c in candidates:
        if c in special:
            return special[c]
    return None


def _token_id(text: str, special: dict, tok) -> int | None:
    tid = special.get(text)
    if tid is None and tok is not None:
        tid = tok.token_to_id(text)
        if tid is None and not isinstance(tok, _TiktokenVocab):
            tid = _one_token_of(tok, text)
    return tid


def _one_token_of(tok, text: str) -> int | None:
    """The id of the one token `tok` encodes `text` to and decodes back to it, else None: a byte-level
    vocabulary (GPT-2, Llama 3) holds "\n" as "Ċ" and " the" as "Ġthe", so `eos_token: "\n"`, the README's
    example, was "not a token" of every such tokenizer.json."""
    try:
        ids = tok.encode(text, add_special_tokens=False).ids
        if len(ids) != 1:
            return None
        # decoded after a word, not alone: a SentencePiece decoder strips a text's leading space, so
        # "token" alone came back from "▁token" and every boundary decoded as " token" (review)
        word = tok.encode("x", add_special_tokens=False).ids
        same = tok.decode(word + ids, skip_special_tokens=False) == tok.decode(word, skip_special_tokens=False) + text
        return ids[0] if same else None
    except Exception:  # a Unigram without unk on a character outside its vocabulary: not a token
        return None


_BOUNDARY_NEEDS = {"eos": ["eos"], "bos": ["bos"], "both": ["bos", "eos"], "none": []}


def _finish(spec: TokenizerSpec, cfg: TokenizerConfig, special: dict[str, int] | None = None) -> TokenizerSpec:
    """`spec`, once it has the boundary's ids; `special`: the tokenizer's added tokens, named when
    none of them is a known BOS/EOS (a tokenizer.json trained without special tokens has none)."""
    for which in _BOUNDARY_NEEDS[cfg.boundary]:
        if getattr(spec, f"{which}_id") is None:
            known = ", ".join((BOS_CANDIDATES if which == "bos" else EOS_CANDIDATES)[:3])
            if special is None:
                held = ""
            elif not special:
                held = " (it has no added or special tokens at all)"
            else:
                names = list(special)
                held = (f" (none of its added tokens, {', '.join(names[:4])}{', ...' if len(names) > 4 else ''}, is a "
                        f"known {which.upper()}: {known}, ...)")
            raise PrepError(f"tokenizer.boundary: {cfg.boundary} needs {'an' if which == 'eos' else 'a'} "
                            f"{which.upper()} token, and none was "
                            f"found in {cfg.path}{held}; set tokenizer.{which}_token to the string of one of its "
                            "tokens, or boundary: none")
    return spec
