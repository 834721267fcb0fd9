"""Verified fast engines for byte-level BPE tokenizer.json files: Hugging Face ids, 5-100x faster.

Hugging Face `tokenizers` and tiktoken run the same algorithm on a byte-level BPE (GPT-2, Llama 3,
Qwen 2, Mistral-Nemo style) when
  - the text reaches the model unchanged (no normalizer other than NFC, which we apply ourselves;
    no prefix space, no BPE dropout (prep switches it off), no byte fallback, no word prefixes/suffixes);
  - the pre-tokenizer is one regex (ByteLevel's own GPT-2 regex, one isolating Split + ByteLevel, or
    StarCoder 2's and SmolLM's Digits + ByteLevel, which one regex also does: `_digits_then_gpt2`);
  - merges are listed in rank order (merge i makes a token whose id is >= that of merge i - 1), every
    multi-byte token comes from a merge, and every byte has a token;
  - a piece that is itself a token becomes that token (tiktoken looks whole pieces up first; HF does
    so with `ignore_merges`, or when every token's merges rebuild it: checked here);
  - special tokens are plain text (prep's policy: `encode_special_tokens = True`); non-special added
    tokens (Qwen 2.5's `<tool_call>`, ...), which HF cuts out of the text, are cut out in front of the
    engine by `added_tokens.PlainAddedTokens`, as HF does.
`analyze()` checks all of this statically and returns a `ByteLevelBPE`, or the reason it can't.
gigatoken follows the tokenizer.json's merges like `tokenizers` does, so it needs only the first,
second and fifth conditions (`check_structure()`). Where the tokenizer meets them all and its regex is
one whose gigatoken pre-tokenizer is known (GPT-2's, Llama 3's, Qwen 2's, o200k's, Qwen 3.5's),
gigatoken is built from tiktoken-style ranks instead of the tokenizer.json (`GigatokenRanks`): the
same engine, in a half to a third of the time (GPT-2: 0.055 against 0.11 s per worker; a 128K
vocabulary: 0.2 against 0.6 s).
DeepSeek V3's pre-tokenizer, three Splits in sequence, is no one regex: tiktoken cannot run it and
gigatoken's tokenizer.json loader refuses it, but its "deepseek_v3" pre-tokenizer runs it from ranks.
The engine is then *proved*: `first_mismatch()` compares it with HF on `torture_sample()` in the
parent, and on the run's first documents in the worker that encodes them (`Encoder` in tokenizers.py).

SentencePiece-style BPEs converted to tokenizer.json (Llama 2, Mistral 7B v0.1 and Gemma layouts:
byte fallback to <0xNN> tokens, "▁" for spaces through a Prepend/Replace normalizer or a Metaspace
pre-tokenizer) are not byte-level, so tiktoken cannot run them; gigatoken's SentencePiece engine
loads them from the tokenizer.json (`sentencepiece_structure()` checks what it needs) and is proved
the same way. One core, one call per document of the 55 MB docs corpus, a Llama-2-layout vocabulary
trained on it: 53.3 against tokenizers' 2.9 MB/s with 32K tokens (benchmarks/bench_layouts.py),
5.7-6.2 against 2.3 with 8K.

Engines, fastest first (one core here, GPT-2, technical English; HF tokenizers ~1.3 MB/s):
gigatoken (optional, `pip install gigatoken`: a Rust BPE with its own pre-tokenizers for the known
regex families; ~140 MB/s) and tiktoken (built from the tokenizer.json's vocabulary, merges, regex
and special tokens; ~9 MB/s).
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from pipeline import joined
from pipeline.tiktoken_encode import tiktoken_array_encoder

__all__ = ["ByteLevelBPE", "GigatokenRanks", "check_structure", "sentencepiece_structure", "analyze", "gigatoken_definition",
           "gigatoken_ranks", "build_tiktoken", "build_tiktoken_engines",
           "build_gigatoken", "build_gigatoken_engines", "gigatoken_available", "tiktoken_array_encoder", "torture_sample", "first_mismatch",
           "describe_mismatch", "GPT2_PATTERN", "LLAMA3_PATTERN", "ENGINES"]

# tokenizers' ByteLevel pre-tokenizer regex (use_regex: true); tiktoken's r50k/gpt2 pattern is the same
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
ENGINES = ("gigatoken", "tiktoken")  # auto tries them in this order


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map, used by every ByteLevel vocabulary."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


_UNICODE_TO_BYTE = {c: b for b, c in bytes_to_unicode().items()}
_ALPHABET = frozenset(_UNICODE_TO_BYTE)
# str.translate table: byte-level character -> the latin-1 character of its byte; a latin-1 character
# outside the alphabet (a raw space, say) -> U+FFFF, which latin-1 cannot encode
_TO_LATIN1 = {**{i: 0xFFFF for i in range(256) if chr(i) not in _ALPHABET},
              **{ord(c): b for c, b in _UNICODE_TO_BYTE.items() if ord(c) != b}}


@dataclass(frozen=True)
class ByteLevelBPE:
    """What a tiktoken-style engine needs, derived from a tokenizer.json (see `analyze`)."""

    pat_str: str | tuple[str, ...]                   # the pre-tokenizer regex (a tuple: Splits in sequence)
    normalizer: str | None                           # None or "NFC"
    special_tokens: dict[str, int] = field(compare=False, repr=False)  # added tokens (as plain text in documents)
    mergeable_ranks: dict[bytes, int] = field(compare=False, repr=False)  # token bytes -> id (= rank)


def _regex_of_split(p: dict) -> str | None:
    pattern = p.get("pattern") or {}
    if p.get("behavior") != "Isolated" or p.get("invert"):
        return None
    return pattern.get("Regex")


def _loads(text: str) -> dict:
    import orjson
    return orjson.loads(text)


def _byte_level_ok(p: dict) -> bool:
    return p.get("type") == "ByteLevel" and not p.get("add_prefix_space")


def _digits_then_gpt2(individual: bool) -> str:
    """One regex for Digits + ByteLevel (StarCoder 2's and SmolLM's pre-tokenizer): Digits cuts the text
    at every numeric character (Rust's char::is_numeric, which is \\p{N}), one piece per character
    (individual_digits) or per run, and GPT-2's regex then splits each piece alone. So a number loses
    GPT-2's leading space, and whitespace before a number ends a piece, where `\\s+(?!\\S)` may take
    all of it: "a  12" is [a][  ][1][2], not GPT-2's [a][ ][ 12]."""
    numbers = r"\p{N}" if individual else r"\p{N}+"
    return GPT2_PATTERN.replace(r" ?\p{N}+", numbers).replace(r"\s+(?!\S)", r"\s+(?![^\s\p{N}])")


# DeepSeek V3's (and R1's) pre-tokenizer: three isolating Splits in sequence, then ByteLevel without its
# regex. No single regex does this, so tiktoken cannot run it; gigatoken's "deepseek_v3" pre-tokenizer
# does (proved like any other: 0 differences on the torture sample, the 55 MB docs corpus and the
# hypothesis tests).
DEEPSEEK_V3_SPLITS = (
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+""",
)
_KNOWN_SPLIT_SEQUENCES = {DEEPSEEK_V3_SPLITS: "DeepSeek V3's"}


def _pattern(pre: dict | None) -> tuple[str | tuple[str, ...] | None, str]:
    """(regex, "") or (None, reason) for a tokenizer.json pre_tokenizer; a tuple of regexes for a known
    sequence of Splits (`_KNOWN_SPLIT_SEQUENCES`), which only gigatoken runs."""
    if pre is None:
        return None, "it has no pre-tokenizer (not a byte-level BPE)"
    if pre.get("type") == "ByteLevel":
        if pre.get("add_prefix_space"):
            return None, "its ByteLevel pre-tokenizer adds a prefix space (add_prefix_space: true)"
        if not pre.get("use_regex", True):
            return None, "its ByteLevel pre-tokenizer does not split words (use_regex: false)"
        return GPT2_PATTERN, ""
    if pre.get("type") != "Sequence":
        return None, f"its pre-tokenizer {pre.get('type')} is not byte-level"
    parts = pre.get("pretokenizers") or []
    kinds = [p.get("type", "?") for p in parts]
    if len(parts) >= 2 and kinds[-1] == "ByteLevel" and parts[-1].get("add_prefix_space"):
        return None, "its ByteLevel pre-tokenizer adds a prefix space (add_prefix_space: true)"
    if len(parts) >= 2 and set(kinds[:-1]) == {"Split"} and _byte_level_ok(parts[-1]) \
            and parts[-1].get("use_regex") is False:
        regexes = tuple(_regex_of_split(p) for p in parts[:-1])
        if None in regexes:
            return None, "its Split pre-tokenizer is not a plain isolating regex"
        if len(regexes) == 1:
            return regexes[0], ""
        if regexes in _KNOWN_SPLIT_SEQUENCES:
            return regexes, ""
        return None, (f"its pre-tokenizer is a sequence of {len(regexes)} Split regexes (no single regex; "
                      f"the only such sequence a fast engine runs is {', '.join(_KNOWN_SPLIT_SEQUENCES.values())})")
    if kinds == ["Digits", "ByteLevel"] and _byte_level_ok(parts[1]) and parts[1].get("use_regex", True):
        return _digits_then_gpt2(bool(parts[0].get("individual_digits"))), ""
    return None, f"its pre-tokenizer sequence {'+'.join(kinds)} is not one Split regex + ByteLevel"


def _normalizer(norm: dict | None) -> tuple[str | None, str | None]:
    """(normalizer name or None, reason or None)."""
    if norm is None or (norm.get("type") == "Sequence" and not norm.get("normalizers")):
        return None, None
    if norm.get("type") == "NFC":
        return "NFC", None
    if norm.get("type") == "Sequence" and [n.get("type") for n in norm["normalizers"]] == ["NFC"]:
        return "NFC", None
    return None, f"it has a {norm.get('type')} normalizer"


def _merge_pairs(merges: list) -> Iterable[tuple[str, str]]:
    """("a", "b") per merge: tokenizer.json has "a b" strings (older) or ["a", "b"] lists."""
    for m in merges:
        yield m.split(" ", 1) if isinstance(m, str) else m


def check_structure(d: dict) -> tuple[tuple[str, str | None, dict[str, int]] | None, str]:
    """The checks every fast engine needs (model options, normalizer, pre-tokenizer, added tokens):
    ((regex, normalizer, special tokens), "") or (None, why not)."""
    model = d.get("model") or {}
    if model.get("type") != "BPE":
        return None, f"its model is {model.get('type')}, not BPE"
    if model.get("byte_fallback"):
        return None, "it uses byte_fallback (a SentencePiece-style BPE)"
    why = _plain_bpe(model)
    if why:
        return None, why
    normalizer, why = _normalizer(d.get("normalizer"))
    if why:
        return None, why
    pat, why = _pattern(d.get("pre_tokenizer"))
    if pat is None:
        return None, why
    special, why = _special_tokens(d)
    return ((pat, normalizer, special), "") if special is not None else (None, why)


def _plain_bpe(model: dict) -> str:
    """Why a BPE model's options change what merging gives ("" when they do not)."""
    if model.get("dropout") not in (None, 0, 0.0):
        return f"it uses BPE dropout ({model['dropout']})"
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            return f"its BPE has a {key} ({model[key]!r})"
    return ""


def _special_tokens(d: dict) -> tuple[dict[str, int] | None, str]:
    """The special added tokens (kept as plain text by prep's policy), or why not: the non-special
    ones `tokenizers` cuts out of the text, which `added_tokens.PlainAddedTokens` does in front of a
    fast engine, within limits."""
    from pipeline import added_tokens
    _, why = added_tokens.from_definition(d)
    if why:
        return None, why
    return {t["content"]: int(t["id"]) for t in d.get("added_tokens") or [] if t.get("special")}, ""


# What gigatoken 0.10's SentencePiece engine was proved on (every layout below, against tokenizers, on
# the torture sample and 28 MB of documents); its loader refuses other normalizers (NFKC, Lowercase).
_SENTENCEPIECE_NORMALIZERS = {"Prepend", "Replace"}
_SENTENCEPIECE_PRE_TOKENIZERS = (None, "Metaspace")


def sentencepiece_structure(d: dict) -> tuple[dict[str, int] | None, str]:
    """For a BPE with byte_fallback (a SentencePiece model converted to tokenizer.json): (special
    tokens, "") when gigatoken's SentencePiece engine may run it, subject to the proof, else (None,
    why not). Normalizer: none, or Prepend/Replace steps (Llama 2's "▁" prefix and spaces);
    pre-tokenizer: none, Metaspace, or a Split that never matches behind the normalizer (Gemma's)."""
    model = d.get("model") or {}
    if model.get("type") != "BPE" or not model.get("byte_fallback"):
        return None, "it is not a SentencePiece-style BPE (byte_fallback)"
    why = _plain_bpe(model)
    if why:
        return None, why
    if model.get("ignore_merges"):
        # tokenizers then keeps a word that is itself a token whole; gigatoken 0.10's SentencePiece engine
        # merges it anyway ("▁Жzq" not rebuilt by its merges: 5 ids against 1), and the torture sample
        # holds no such word to catch it. Llama 2, Mistral and Gemma files have ignore_merges: false.
        return None, ("its SentencePiece-style BPE has ignore_merges: true (a word that is itself a token stays "
                      "whole), which gigatoken's SentencePiece engine does not follow")
    norm = d.get("normalizer") or {}
    steps = (norm.get("normalizers") or []) if norm.get("type") == "Sequence" else [norm] if norm else []
    other = [n.get("type") for n in steps if n.get("type") not in _SENTENCEPIECE_NORMALIZERS]
    if other:
        return None, f"its SentencePiece-style BPE has a {other[0]} normalizer"
    pre = d.get("pre_tokenizer") or {}
    if pre.get("type") not in _SENTENCEPIECE_PRE_TOKENIZERS and not _split_never_matches(pre, steps):
        return None, f"its SentencePiece-style BPE has a {pre.get('type')} pre-tokenizer"
    if pre.get("prepend_scheme") == "first" and any(not t.get("special") for t in d.get("added_tokens") or []):
        # tokenizers prepends "▁" to the text's first piece only; the engine sees each piece alone
        return None, ("its Metaspace pre-tokenizer prepends only to the start of the text (prepend_scheme "
                      "first), and its non-special added tokens cut the text into pieces")
    return _special_tokens(d)


def _split_never_matches(pre: dict, normalizers: list[dict]) -> bool:
    """Whether `pre` is a Split on one character that the normalizer replaces everywhere and no later
    step puts back, so that it never matches and changes nothing: Gemma's tokenizer.json files (and
    T5Gemma's) have Replace(" " -> "▁") with Split(" ", merged_with_previous) behind it
    (transformers #43062 found it redundant). An inverted Split would not be a no-op."""
    pattern = (pre.get("pattern") or {}).get("String")
    if pre.get("type") != "Split" or pre.get("invert") or not isinstance(pattern, str) or len(pattern) != 1:
        return False
    gone = False
    for step in normalizers:
        inserted = step.get("prepend") if step.get("type") == "Prepend" else step.get("content")
        if pattern in (inserted or ""):
            gone = False
        elif step.get("type") == "Replace" and (step.get("pattern") or {}).get("String") == pattern:
            gone = True
    return gone


def analyze(definition: str | dict, hf_tokenizer=None, check_whole_tokens: bool = True
            ) -> tuple[ByteLevelBPE | None, str]:
    """All static checks for tiktoken (see the module docstring): (ByteLevelBPE, "") or (None, why not).

    `check_whole_tokens`: for BPEs without `ignore_merges`, check that every token's merges rebuild it
    (0.1-0.2 s for 50k tokens, through `hf_tokenizer`, a tokenizers.Tokenizer of the definition,
    built when not given).
    """
    d = _loads(definition) if isinstance(definition, str) else definition
    found, why = check_structure(d)
    if found is None:
        return None, why
    pat, normalizer, special = found
    model = d["model"]
    special_ids = set(special.values())
    vocab: dict[str, int] = model.get("vocab") or {}
    alphabet = _ALPHABET
    try:  # byte-level characters -> latin-1 code points -> bytes, in C
        ranks = {tok.translate(_TO_LATIN1).encode("latin-1"): int(tid) for tok, tid in vocab.items()
                 if tid not in special_ids}
    except UnicodeEncodeError:
        bad = next(t for t in vocab if vocab[t] not in special_ids and not set(t) <= alphabet)
        return None, f"its vocabulary has a token outside the byte-level alphabet ({bad!r})"
    if len(set(ranks.values())) != len(ranks):
        return None, "its vocabulary gives one id to two tokens"
    if any(bytes([b]) not in ranks for b in range(256)):
        return None, "not every byte has a token of its own (not a byte-level BPE)"
    # merges in rank order (tokenizers itself refuses merges of unknown tokens); every multi-byte
    # token is made by a merge
    try:
        made_ids = np.fromiter((vocab[a + b] for a, b in _merge_pairs(model.get("merges") or [])), dtype=np.int64)
    except KeyError as e:
        return None, f"a merge makes {e.args[0]!r}, which is missing from the vocabulary"
    if made_ids.size > 1 and (np.diff(made_ids) < 0).any():
        i = int(np.argmax(np.diff(made_ids) < 0)) + 1
        return None, (f"its merges are not in rank order (merge {i} makes id {made_ids[i]} after id "
                      f"{made_ids[i - 1]}); tiktoken ranks merges by the id of their result")
    made = set(made_ids.tolist())
    orphans = [t for t, tid in ranks.items() if len(t) > 1 and tid not in made]
    if orphans:
        return None, f"{len(orphans)} token(s) of the vocabulary are made by no merge (e.g. {orphans[0]!r})"
    if check_whole_tokens and not model.get("ignore_merges"):
        if hf_tokenizer is None:
            from tokenizers import Tokenizer
            hf_tokenizer = Tokenizer.from_str(json.dumps(d))
        tokenize = hf_tokenizer.model.tokenize
        for token, tid in vocab.items():
            if tid not in special_ids and len(tokenize(token)) != 1:
                return None, (f"token {token!r} is not rebuilt by its own merges (tiktoken would keep a "
                              "piece equal to it whole; tokenizers splits it)")
    return ByteLevelBPE(pat, normalizer, special, ranks), ""


# -- engines: each returns encode(text) -> uint32 array ------------------------------------------
def _nfc(encode: Callable[[str], np.ndarray]) -> Callable[[str], np.ndarray]:
    def encode_nfc(text: str) -> np.ndarray:
        if not unicodedata.is_normalized("NFC", text):
            text = unicodedata.normalize("NFC", text)
        return encode(text)
    return encode_nfc


def build_tiktoken(bpe: ByteLevelBPE, name: str = "prep-bytelevel") -> Callable[[str], np.ndarray]:
    """tiktoken.Encoding over the tokenizer.json's vocabulary; special-token strings are plain text."""
    return build_tiktoken_engines(bpe, name=name)[0]


def build_tiktoken_engines(bpe: ByteLevelBPE, join_id: int | None = None, plain_added=None,
                           name: str = "prep-bytelevel"):
    """(encode one text -> uint32 ids, encode a batch joined (joined.joined_encoder) or None), as
    `build_gigatoken_engines` over tiktoken: special-token strings are plain text; `plain_added`
    (added_tokens.PlainAddedTokens) cut out in Python in front of it (tiktoken's own special-token
    matching is not leftmost-longest); `join_id`: the id it gives joined.SEPARATOR, the one special
    token it splits the text at. Joined, 100 K paragraphs (SmolLM layout, one process):
    1.54-2.02 against 2.06-2.46 s one call per document. Both raise tiktoken_encode.RegexLimit on a
    text tiktoken's regex refuses (a whitespace run of ~1 M characters): give it to tokenizers."""
    import tiktoken
    if not isinstance(bpe.pat_str, str):
        raise ValueError(f"tiktoken runs one regex, not {len(bpe.pat_str)} Split regexes in sequence")
    special = dict(bpe.special_tokens)
    if join_id is not None:
        special[joined.SEPARATOR] = join_id
    enc = tiktoken.Encoding(name, pat_str=bpe.pat_str, mergeable_ranks=bpe.mergeable_ranks, special_tokens=special)
    joins = join_id is not None
    # as gigatoken's, the one-document call gives the separator its id too (the Encoder sends a text
    # holding it to tokenizers), so a batch holding a non-special token is cut through that call. A
    # text past tiktoken's regex limit raises tiktoken_encode.RegexLimit: `regex`'s split of it is not
    # proven to match tokenizers (newer Unicode tables), so the Encoder gives it to tokenizers
    encode = tiktoken_array_encoder(enc, {joined.SEPARATOR} if joins else (), split_past_limit=False)
    nfc = bpe.normalizer == "NFC"
    one = _nfc(encode) if nfc else encode
    if plain_added is not None:
        one = plain_added.wrap(one)
    if not joins:
        return one, None
    cut = None if plain_added is None else (plain_added.found_in_utf8(), one)
    # the joined UTF-8 decoded for tiktoken: ~10 ms per 100 K paragraphs
    return one, joined.joined_encoder(lambda data: encode(data.decode()), join_id, nfc, cut)


def gigatoken_available() -> bool:
    try:
        import gigatoken  # noqa: F401
    except Exception:
        return False
    return True


@dataclass(frozen=True)
class GigatokenRanks:
    """What gigatoken's `from_tiktoken` builds an engine from: a rank file's lines and the name of
    gigatoken's own pre-tokenizer for the regex. Made only by `gigatoken_ranks`."""

    scheme: str                                           # gigatoken's name for the regex ("gpt2")
    rank_lines: bytes = field(compare=False, repr=False)  # b"<base64 of the token's bytes> <rank>\n" per token
    normalizer: str | None = None                         # None or "NFC" (applied here, as for tiktoken)
    # id = rank + id_offset. gigatoken takes dense ranks only (0..n-1), and a vocabulary trained with
    # `tokenizers` has its special tokens first (ids 0, 1, ...: DeepSeek V3's three, most users' own),
    # so its ranks are its ids shifted down and its output is shifted back up: in place, 13 ms per
    # 14.5 M tokens (0.9 ns a token) against 25 ms saved per worker start for a 32K vocabulary (a
    # general id map, ids with gaps, cost 4 ns a token: those files keep the tokenizer.json path).
    id_offset: int = 0


# Llama 3's Split regex as its tokenizer.json writes it (Olmo 2/3 use the same; Qwen 2's has \p{N}
# for \p{N}{1,3}; some cl100k conversions have \s*[\r\n] for \s*[\r\n]+, which matches the same)
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# o200k_base's regex (gpt-oss, GPT-4o conversions) and Qwen 3.5's, as gigatoken's tokenizer.json loader
# takes them (both checked here on trained tokenizers: from ranks, same ids as tokenizers)
_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
O200K_PATTERN = (rf"[^\r\n\p{{L}}\p{{N}}]?[\p{{Lu}}\p{{Lt}}\p{{Lm}}\p{{Lo}}\p{{M}}]*[\p{{Ll}}\p{{Lm}}\p{{Lo}}\p{{M}}]+{_CONTRACTIONS}?"
                 rf"|[^\r\n\p{{L}}\p{{N}}]?[\p{{Lu}}\p{{Lt}}\p{{Lm}}\p{{Lo}}\p{{M}}]+[\p{{Ll}}\p{{Lm}}\p{{Lo}}\p{{M}}]*{_CONTRACTIONS}?"
                 r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_PATTERN = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
                  r"|\s+(?!\S)|\s+")
# Regex -> gigatoken's pre-tokenizer for it, for exactly the strings gigatoken's own tokenizer.json
# loader maps to that pre-tokenizer (GPT-2's is the ByteLevel pre-tokenizer's own). Any other
# string keeps the tokenizer.json path (`from_json`). Whichever is built, the proof runs on it.
_GIGATOKEN_SCHEMES = {
    GPT2_PATTERN: "gpt2",
    LLAMA3_PATTERN: "olmo3",
    LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}"): "qwen2",
    LLAMA3_PATTERN.replace(r"\s*[\r\n]+", r"\s*[\r\n]"): "gpt4",
    O200K_PATTERN: "o200k",
    QWEN35_PATTERN: "qwen35",
    DEEPSEEK_V3_SPLITS: "deepseek_v3",  # gigatoken's tokenizer.json loader does not take these Splits
}


def gigatoken_ranks(d: dict, hf_tokenizer=None, analysis=None) -> GigatokenRanks | None:
    """Ranks for gigatoken when the tokenizer is a tiktoken-equivalent byte-level BPE (`analyze`,
    which checks that every token's merges rebuild it, and that any normalizer is NFC: 0.1-0.2 s, once
    per proof) with a regex in `_GIGATOKEN_SCHEMES` and ids without gaps (from 0, or after the special
    tokens: `id_offset`); else None (build from the tokenizer.json). `analysis`: a callable giving
    `analyze(d, hf_tokenizer)`'s result, for a caller that may need it again (the proof's tiktoken
    candidate) and should not pay for it twice."""
    found, _ = check_structure(d)
    if found is None or found[0] not in _GIGATOKEN_SCHEMES:
        return None
    bpe, _ = analysis() if analysis is not None else analyze(d, hf_tokenizer)
    if bpe is None:
        return None
    ids = bpe.mergeable_ranks.values()  # distinct (analyze checked)
    offset = min(ids)
    if max(ids) != offset + len(ids) - 1:  # ids with gaps: build from the tokenizer.json
        return None
    # rank = id - offset: the same order, so the same merges (tiktoken-style BPE only compares ranks)
    lines = b"".join(base64.b64encode(token) + b" %d\n" % (tid - offset) for token, tid in bpe.mergeable_ranks.items())
    return GigatokenRanks(_GIGATOKEN_SCHEMES[bpe.pat_str], lines, bpe.normalizer, offset)


def _gigatoken_from_ranks(ranks: GigatokenRanks, separator_rank: int | None = None, cut: dict[str, int] | None = None):
    """gigatoken reads ranks only from a file (~0.7 MB for GPT-2): on Linux an anonymous in-memory
    one (memfd), so a full or read-only TMPDIR cannot fail a worker's start; elsewhere a temporary file.
    `separator_rank`: the rank it gives joined.SEPARATOR; `cut`: non-special added tokens it cuts out
    itself (string -> rank)."""
    import gigatoken
    # no special token of the file: special-token strings stay plain text (prep's policy)
    special = {**({} if separator_rank is None else {joined.SEPARATOR: separator_rank}), **(cut or {})} or None

    def build(path: str):
        return gigatoken.Tokenizer.from_tiktoken(path, pretokenizer=ranks.scheme, special_tokens=special)
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("prep-ranks")
        try:
            view = memoryview(ranks.rank_lines)
            while view:
                view = view[os.write(fd, view):]
            return build(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
    fd, path = tempfile.mkstemp(suffix=".tiktoken", prefix="prep-ranks-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(ranks.rank_lines)
        return build(path)
    finally:
        os.unlink(path)


def gigatoken_definition(d: dict, join_id: int | None = None, plain_added=None) -> str:
    """The tokenizer.json gigatoken loads: added tokens removed (so special-token strings stay plain
    text: prep's policy), truncation, padding and post-processing off. `join_id`: it knows
    joined.SEPARATOR as a special token with that id (outside the vocabulary). `plain_added`
    (added_tokens.PlainAddedTokens): the non-special added tokens become its special tokens, so it cuts
    them out itself, before its normalizer, as tokenizers does (`build_gigatoken_engines`)."""
    import orjson  # 10x json.dumps on a 2 MB tokenizer.json

    def token(content: str, tid: int) -> dict:
        return {"id": tid, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True}
    added = [] if join_id is None else [token(joined.SEPARATOR, join_id)]
    if plain_added is not None:
        added += [token(content, tid) for content, tid in zip(plain_added.strings, plain_added.ids, strict=True)]
    return orjson.dumps({**d, "added_tokens": added, "truncation": None, "padding": None,
                         "post_processor": None}).decode()


def build_gigatoken(definition: str | GigatokenRanks, prepared: bool = False, cache_bytes: int = 0
                    ) -> Callable[[str], np.ndarray]:
    """gigatoken's BPE, one document per call (`build_gigatoken_engines`)."""
    return build_gigatoken_engines(definition, prepared, cache_bytes)[0]


def build_gigatoken_engines(definition: str | GigatokenRanks, prepared: bool = False, cache_bytes: int = 0,
                            join_id: int | None = None, plain_added=None, native_added: bool = False):
    """gigatoken's BPE over a tokenizer.json (`prepared`: already made by `gigatoken_definition`, with
    the same `join_id` and `native_added`) or over `GigatokenRanks`: (encode one text -> uint32 ids,
    encode a batch joined (joined.joined_encoder) or None without `join_id`). `join_id`: the id the
    engine gives joined.SEPARATOR, one past the largest id of the vocabulary and the added tokens; the
    one-document call then gives it too, for a text holding the separator (the Encoder sends those to
    tokenizers). `plain_added` (added_tokens.PlainAddedTokens): non-special added tokens both calls
    cut out first: in Python around the engine, or with `native_added` by the engine itself, as its
    special tokens (only where `plain_added.engine_can_cut`, and never with a normalizer applied in
    Python, which would run before the cut: ranks with NFC). In the engine a document holding such
    tokens costs nothing more; around it each piece is one more call (~1 us): 100 K short documents
    with two of Qwen 2.5's tokens each, joined, 801-1323 against 194-390 ms.
    `cache_bytes` bounds its pre-token cache where gigatoken can (versions after 0.10). Raises when
    gigatoken has no fast pre-tokenizer for the regex (it implements the common families, GPT-2,
    Llama 3, Qwen, ..., not arbitrary regexes). 0.11 s for GPT-2's tokenizer.json, 0.055 s for its ranks."""
    import gigatoken
    if cache_bytes > 0 and hasattr(gigatoken, "set_max_cache_bytes"):  # gigatoken > 0.10
        gigatoken.set_max_cache_bytes(cache_bytes)
    offset = definition.id_offset if isinstance(definition, GigatokenRanks) else 0
    native = plain_added if native_added else None
    if isinstance(definition, GigatokenRanks):
        cut = None if native is None else {s: tid - offset for s, tid in zip(native.strings, native.ids, strict=True)}
        tok = _gigatoken_from_ranks(definition, None if join_id is None else join_id - offset, cut)
    else:
        tok = gigatoken.Tokenizer.from_json(
            definition if prepared else gigatoken_definition(_loads(definition), join_id, native))
    # Tokenizer.encode is a Python wrapper around its backend's: calling the backend directly saves
    # ~0.3 us per document (0.1 s per 324 K short documents). Whatever is called is what the proof
    # and the first-documents check run, so a changed backend cannot slip through unproven.
    backend = getattr(tok, "_backend", None)
    encode = backend.encode if callable(getattr(backend, "encode", None)) else tok.encode
    nfc = isinstance(definition, GigatokenRanks) and definition.normalizer == "NFC"
    if offset:  # the separator's rank comes back as join_id too
        encode = _shifted(encode, offset)
    # from ranks gigatoken knows no normalizer (from a tokenizer.json it applies NFC itself)
    one = _nfc(encode) if nfc else encode
    if nfc and native is not None:
        raise ValueError("non-special added tokens cut by the engine, behind an NFC applied in Python")
    if plain_added is not None and native is None:
        one = plain_added.wrap(one)
    cut = None if plain_added is None or native is not None else (plain_added.found_in_utf8(), one)
    together = None if join_id is None else joined.joined_encoder(encode, join_id, nfc, cut)
    return one, together


def _shifted(encode: Callable[[str], np.ndarray], offset: int) -> Callable[[str], np.ndarray]:
    def encode_shifted(text: str) -> np.ndarray:
        ids = encode(text)  # a new array per call (gigatoken 0.10: it owns its Rust buffer)
        if not ids.flags.writeable:
            return ids + np.uint32(offset)
        ids += np.uint32(offset)
        return ids
    return encode_shifted


# -- proof ----------------------------------------------------------------------------------------
_TORTURE = (
    "", " ", "  ", "   x", "x   ", "\n", "\n\n\n", " \n ", "a \n\n b", "\t\t x", "hello  world   ", "\r\n\r\n",
    "a\u00a0b \u00a0 c", "\u3000x\u3000\u3000", "\u2028\u2029\u0085\x0b\x0c", "zero\u200bwidth\ufeffbom",
    "123456789 1,234.56 0.5e-3 ３４５ ¾ ⅷ ٣٤٥ ²³ 2024-01-01T00:00:00Z", "0" * 700 + " 1 22 333 4444 55555",
    "don't I'll we've they'RE HE'S 'll 'd 'm 't 's'S ' s", "'ſ 'K 'İ", "Ǆǅǆ ﬁﬂ ß ẞ İı Σσς",
    "😀👍🏽👨‍👩‍👧 🇩🇪🇫🇷 ❤️ ✈︎", "日本語のテキストと漢字、カタカナ。", "한국어 텍스트 \u1100\u1161\u11a8", "עברית ערבית عربي ‎‏",
    "नमस्ते दुनिया", "ภาษาไทยไม่มีช่องว่าง", "e\u0301 \u00e9 A\u030a \u00c5 \u1e9b\u0323 \u0071\u0307\u0323",
    "\ud7ff\ue000\uf8ff\ufffd\uffff \U0010fffd \U000e0001\U000e0067", "\x00\x01\x1f\x7f\x80\x9f",
    "𝒜𝔘𝕏 𝟘𝟙𝟚 ꯍ ᏣᎳᎩ ⵜⴰⵎⴰⵣⵉⵖⵜ 𐌰𐌱 𞤀𞤁 \U00011f04\U00011f05 \U00010d50\U00010d51",
    "def f(x):\n    return x**2  # comment\n\n\tif x != y: pass\n", "https://example.com/a?b=c&d=e#frag <a href='x'>",
    "{\"key\": [1, 2.5, null], 'k2': \"v\\n\"}", "C:\\Users\\x\\file.txt ~/.config/**/*.yaml $HOME ${VAR}",
    "x" * 5000, " " * 3000 + "y", "ab" * 3000, "\n" * 500 + "z", "!!!???... ---- ==== ____ ****",
    "<|endoftext|>", "a<|endoftext|>b", " <|endoftext|> ", "<s></s><pad><unk>[CLS][SEP][MASK]",
    "<|im_start|>user<|im_end|><|begin_of_text|><|end_of_text|><|eot_id|>",
    "Mixed: The quick brown fox — “quoted” ‘single’ … naïve café résumé coöperate\u00ad soft-hyphen",
)


def torture_sample(special_tokens: Iterable[str] = ()) -> list[str]:
    """Edge cases for the proof: whitespace runs, digits, scripts, emoji, combining marks, recent
    Unicode, very long pieces, and every added token's string in text (special ones stay plain text,
    non-special ones are cut out), alone, beside each other and cut short."""
    out = list(_TORTURE)
    tokens = list(special_tokens)
    for tok in tokens:
        out += [tok, f"x{tok}y", f" {tok} ", f"{tok}{tok}\n{tok}", f"  {tok}\n\n", f"don't{tok}'s 12{tok}345",
                # a combining mark after it: NFC composes ">" + U+0338 into "≯", so a cut after the
                # normalizer would lose the token (tokenizers cuts first)
                f"{tok}\u0338{tok}\u0301 e\u0301{tok}"]
    if tokens:  # every one beside every other: where the non-special ones are cut out, and where not
        out += ["".join(tokens), " a\n".join(tokens), "".join(t[:-1] for t in tokens), "".join(t[1:] for t in tokens)]
    return out


def first_mismatch(want: Sequence[Sequence[int]], got: Sequence[np.ndarray]) -> tuple[int, list[int], list[int]] | None:
    """(index, reference ids, fast ids) of the first text where the two engines' ids differ, else None."""
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        if len(w) != len(g) or not np.array_equal(np.asarray(w, dtype=np.int64), np.asarray(g, dtype=np.int64)):
            return i, list(w), [int(x) for x in g]
    return None


def describe_mismatch(texts: Sequence[str], found: tuple[int, list[int], list[int]]) -> str:
    i, want, got = found
    k = next((j for j, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
    return (f"text {i} ({texts[i][:60]!r}{'...' if len(texts[i]) > 60 else ''}): token {k} is "
            f"{got[k:k + 4]} instead of {want[k:k + 4]}")
