"""Differential fuzzing of the verified fast path: prep's Encoder, built as a run builds it
(load_tokenizer's proof, then spec.build_encoder()), against Hugging Face `tokenizers` itself.

A text on which the fast engine and `tokenizers` disagree, met after the proof, is written with other
ids and nothing notices, so every document of every batch must get exactly tokenizers' ids
(`encode(text, add_special_tokens=False)`, special-token strings as plain text: prep's policy),
whatever it holds and however the batch is encoded (joined, one call per document, cut at added
tokens, given to tokenizers for a Unicode gap).

Texts are built from fragments: any Unicode outside the surrogates (astral planes too), combining
marks, ZWJ emoji sequences, RTL, CJK, Hangul jamo, variation selectors, control characters, \\r\\n
mixes, long whitespace runs of mixed kinds, digit runs of every script, apostrophe contractions, the
tokenizer's added-token strings and their halves, and very long words and runs. Tokenizers: byte-level
BPEs trained here with GPT-2's ByteLevel regex and Llama 3 / Qwen 2 / GPT-4o (o200k) / Qwen 3.5 style
Split regexes, with added tokens of every kind (special and not, normalized and not, lstrip, rstrip,
single_word), a SentencePiece-style BPE with byte_fallback (Prepend/Replace and Metaspace), and the
real GPT-2 tokenizer.json when present. The `slow` variant runs more tokenizers and examples.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import fast_bpe, joined, tiktoken_encode
from pipeline import tokenizers as ptok
from pipeline.recipe import TokenizerConfig
from tests.conftest import GPT2_DIR

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

from tests.pipeline.test_fast_tokenizer import _train_sentencepiece as train_sentencepiece  # noqa: E402

TRAIN_TEXT = [
    "The quick brown fox jumps over the lazy dog. Don't panic; it's only 42 tokens, isn't it? I'LL SEE HE'S",
    "def tokenize(text):\n    return [ord(c) for c in text]  # 1234567890\n\n",
    "Unicode: naïve café résumé, 日本語のテキスト, 한국어, العربية, emoji 😀👍🏽, math ∑∫√ ≠ ≤ ≥. ٣٤٥ ３４５",
    "Whitespace   runs\t\tand\n\n\nnewlines    end here.  \r\n\r\n\u00a0\u00a0 \u3000\u3000 x",
    "<|endoftext|> special <think> and <tool_call> here's the end",
] * 40
LLAMA3 = fast_bpe.LLAMA3_PATTERN


def _train(pre_tokenizer, normalizer=None) -> dict:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=800, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>", "<|im_start|>"])
    tok.train_from_iterator(TRAIN_TEXT, trainer)
    return json.loads(tok.to_str())


def _train_sentencepiece(metaspace: str | None) -> dict:
    """Llama 2's layout: <unk> <s> </s>, then <0x00>..<0xFF> (byte fallback), then the learned tokens;
    "▁" for spaces through Prepend + Replace (metaspace None) or a Metaspace pre-tokenizer."""
    return json.loads(train_sentencepiece(metaspace is not None, 700, metaspace or "first"))


def _split(*patterns: str):
    return pre_tokenizers.Sequence([*(pre_tokenizers.Split(Regex(p), "isolated") for p in patterns),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def _added(d: dict, *tokens: dict) -> dict:
    """`d` with added tokens appended ({"content", and special/normalized/lstrip/rstrip/single_word}):
    the vocabulary's id for a string it has, else the next id past it."""
    vocab = d["model"]["vocab"]
    next_id = max([*vocab.values(), *(t["id"] for t in d["added_tokens"])]) + 1
    added = list(d["added_tokens"])
    for t in tokens:
        tid = vocab.get(t["content"])
        if tid is None:
            tid, next_id = next_id, next_id + 1
        special = t.get("special", False)
        added.append({"id": tid, "content": t["content"], "single_word": t.get("single_word", False),
                      "lstrip": t.get("lstrip", False), "rstrip": t.get("rstrip", False),
                      "normalized": t.get("normalized", not special), "special": special})
    return {**d, "added_tokens": added}


def _raw(content: str, **flags) -> dict:
    return {"content": content, "normalized": False, **flags}


# name -> (tokenizer.json as a dict, backend); the default run takes FAST, the slow one all
def _definitions() -> dict[str, tuple[dict, str]]:
    gpt2 = _train(pre_tokenizers.ByteLevel(add_prefix_space=False))
    llama3 = _train(_split(LLAMA3))
    qwen2 = _train(_split(LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")), normalizers.NFC())
    o200k = _train(_split(fast_bpe.O200K_PATTERN))
    qwen35 = _train(_split(fast_bpe.QWEN35_PATTERN), normalizers.NFC())
    llama2 = _train_sentencepiece(None)
    # added tokens of every kind: special ones stay text (their flags then do not matter), non-special
    # ones are cut out; overlapping ones ("ab"/"abc"), one inside a special one's string ("<|im"), a
    # vocabulary token ("the"), whitespace, and matched on normalized text (no normalizer here)
    mixed = _added(llama3, _raw("the"), {"content": "ab"}, {"content": "abc"}, _raw("<|im"), _raw("\n\n"), _raw(" x"),
                   {"content": "<|im_end|>", "special": True}, {"content": "<s>", "special": True, "normalized": True},
                   {"content": "<A>", "special": True, "lstrip": True}, {"content": "<B>", "special": True, "rstrip": True},
                   {"content": "word", "special": True, "single_word": True}, _raw("é"), {"content": "e\u0301"},
                   _raw("'s"), _raw("12"))
    # Qwen 2.5's layout: NFC, special tokens after the vocabulary, non-special ones matched on raw text
    qwen25 = _added(qwen2, *({"content": c, "special": True, "normalized": False} for c in ("<|im_end|>", "<|fim_pad|>")),
                    *(_raw(c) for c in ("<tool_call>", "</tool_call>", "<think>", "</think>", "<|fim_prefix|>")))
    # gigatoken cuts these itself (no special token can hide one), longest first
    native = _added(llama3, *(_raw(c) for c in ("ab", "abc", "bcd", "abcde", "cd", "x y", "\r\n", "d'")))
    o200k_added = _added(o200k, {"content": "<|endofprompt|>", "special": True}, _raw("<|channel|>"), _raw("<|end|>"),
                         _raw("<|endo"), _raw("\u3000"))
    llama2_added = _added(llama2, _raw("<start_of_turn>"), _raw("\n\n"), {"content": "<end_of_turn>", "special": True},
                          _raw(" "))
    metaspace = _added(_train_sentencepiece("always"), _raw("<start_of_turn>"), {"content": "<end_of_turn>", "special": True},
                       _raw("\t"), {"content": "\u2581x", "normalized": True})
    return {
        "gpt2_style": (gpt2, "auto"), "gpt2_style@tiktoken": (gpt2, "tiktoken"),
        "added_mixed": (mixed, "auto"), "added_mixed@tiktoken": (mixed, "tiktoken"),
        "qwen25_style": (qwen25, "auto"), "qwen25_style@tiktoken": (qwen25, "tiktoken"),
        "native_cut": (native, "auto"),
        "o200k_style": (o200k_added, "auto"), "o200k_style@tiktoken": (o200k_added, "tiktoken"),
        "qwen35_style": (qwen35, "auto"),
        "llama2_style": (llama2_added, "auto"), "metaspace_style": (metaspace, "auto"),
        "metaspace_first": (_train_sentencepiece("first"), "auto"),
    }


FAST = ("gpt2", "added_mixed", "qwen25_style@tiktoken", "llama2_style", "o200k_style")


GPT2_JSON = next((p for p in (GPT2_DIR / "tokenizer.json", Path("/work/shared/assets/gpt2/tokenizer.json")) if p.is_file()),
                 None)


class _Encoders(dict):
    """name -> (prep's Encoder as a worker builds it, tokenizers as the proof sets it up, the added
    tokens' strings), each tokenizer trained and proven on first use (~2-3 s each)."""

    def __init__(self, folder: Path):
        super().__init__()
        self.folder = folder
        self.definitions = None

    def names(self) -> list[str]:
        return [*(["gpt2"] if GPT2_JSON is not None else []), *self._definitions()]

    def _definitions(self) -> dict:
        if self.definitions is None:
            self.definitions = _definitions()
        return self.definitions

    def __missing__(self, name: str):
        if name == "gpt2":
            path, backend = GPT2_JSON, "auto"
        else:
            d, backend = self._definitions()[name]
            path = self.folder / f"{name.partition('@')[0]}.json"
            path.write_text(json.dumps(d))
        spec = ptok.load_tokenizer(TokenizerConfig(path=str(path), boundary="none", backend=backend))
        ref = ptok._hf_tokenizer(spec.definition)  # the reference exactly as the proof and the worker's check make it
        self[name] = (spec.build_encoder(), ref, [t.content for t in ref.get_added_tokens_decoder().values()])
        return self[name]


@pytest.fixture(scope="module")
def encoders(tmp_path_factory) -> _Encoders:
    return _Encoders(tmp_path_factory.mktemp("fuzz-tok"))


# -- text strategies ------------------------------------------------------------------------------
WHITESPACE = " \t\n\r\x0b\x0c\u00a0\u1680\u2000\u2009\u200a\u200b\u2028\u2029\u202f\u205f\u3000\u0085\ufeff"
PIECES = ["\r\n", "\r\r\n", "\n\r", "\r", "👨\u200d👩\u200d👧\u200d👦", "🏳\ufe0f\u200d🌈", "👩🏽\u200d💻", "🇩🇪",
          "1\ufe0f\u20e3", "✈\ufe0e", "'s", "'S", "'ll", "'LL", "'Ll", "'ve", "'RE", "'d", "'M", "'t", "’s", "’ll",
          "\u02bcs", "''s", "'", "'ſ", "'K", "'İ", "'ß", joined.SEPARATOR, "\ufdd0", "\ufdd1", "\u2581", "\u2581\u2581",
          "<0x41>", "e\u0301", "\u0627\u064e\u0898", "q\u09fe\u0334", "\u0338", "word ", " word", "x y", "\t\t"]


def _chars(*ranges: tuple[int, int]):
    return st.one_of(*(st.integers(a, b) for a, b in ranges)).map(chr)


def _fragment(added: list[str]):
    halves = [t[:k] for t in added for k in range(1, len(t))] + [t[k:] for t in added for k in range(1, len(t))]
    return st.one_of(
        st.text(st.characters(codec="utf-8"), max_size=30),  # all of Unicode but the surrogates
        st.text(st.characters(categories=["Mn", "Mc", "Me"]), min_size=1, max_size=4),  # combining marks
        st.text(_chars((0x590, 0x6FF), (0x200E, 0x200F), (0x202A, 0x202E), (0x2066, 0x2069)), max_size=12),  # RTL
        st.text(_chars((0x4E00, 0x9FFF), (0x3040, 0x30FF), (0xAC00, 0xD7A3), (0x1100, 0x11FF), (0x3130, 0x318F),
                       (0x20000, 0x2A6DF), (0x30000, 0x3134F)), max_size=12),  # CJK, kana, Hangul and its jamo
        st.text(_chars((0xFE00, 0xFE0F), (0xE0100, 0xE01EF), (0x1F3FB, 0x1F3FF), (0x200C, 0x200D)), max_size=3),
        st.text(_chars((0, 0x1F), (0x7F, 0x9F)), max_size=5),  # control characters
        st.text(st.sampled_from(WHITESPACE), min_size=1, max_size=40),  # whitespace runs of mixed kinds
        st.text(st.characters(categories=["Nd", "Nl", "No"]), min_size=1, max_size=12),  # digits of every script
        st.text(st.characters(categories=["Lu", "Ll", "Lt", "Lm", "Lo"]), min_size=1, max_size=10),
        st.text(st.characters(categories=["P", "S"]), min_size=1, max_size=5),
        st.text(st.sampled_from("abcdeXYZ0123 '’\n"), max_size=20),
        st.sampled_from(PIECES + added),
        *([st.sampled_from(halves)] if halves else []),  # near-misses of the added tokens
    )


def _documents(added: list[str]):
    short = st.lists(_fragment(added), max_size=16).map("".join)
    # very long words and runs (past JOIN_MEAN_CHARS: such batches go one document per call)
    long = st.tuples(short, st.sampled_from(["x", "ab", "é", "日", " ", "\t", "\n", "1", "\u00a0", "a'", "😀", "\u0301"]),
                     st.integers(500, 6000), short).map(lambda t: t[0] + t[1] * t[2] + t[3])
    return st.one_of(short, short, long)


@st.composite
def _case(draw, encoders, names):
    name = draw(st.sampled_from(names))
    return name, draw(st.lists(_documents(encoders[name][2]), min_size=1, max_size=10))


def _assert_tokenizers_ids(encoders, name: str, texts: list[str]) -> None:
    encoder, ref, _ = encoders[name]
    ids, lengths = encoder.encode_batch(texts)
    got = np.split(ids, np.cumsum(lengths)[:-1])
    want = [e.ids for e in ref.encode_batch_fast(texts, add_special_tokens=False)]
    for i, (text, g, w) in enumerate(zip(texts, got, want, strict=True)):
        assert g.tolist() == w, f"{name} ({encoder.spec.backend}), document {i}: {text[:200]!r}"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fast_path_gives_tokenizers_ids(encoders, data):
    name, texts = data.draw(_case(encoders, [n for n in encoders.names() if n in FAST]))
    _assert_tokenizers_ids(encoders, name, texts)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fast_path_gives_tokenizers_ids_everywhere(encoders, data):
    name, texts = data.draw(_case(encoders, encoders.names()))
    _assert_tokenizers_ids(encoders, name, texts)


def test_the_fuzzed_tokenizers_run_on_fast_engines(encoders):
    """Not vacuous: the tokenizers above are proven for a fast engine (gigatoken where installed),
    joined batches and cutting added tokens included."""
    names = [n for n in encoders.names() if n in FAST]
    backends = {name: encoders[name][0].spec.backend for name in names}
    assert all(b in ("gigatoken", "tiktoken") for b in backends.values()), backends
    assert all(backends[n] == "tiktoken" for n in backends if n.endswith("@tiktoken"))
    assert "gigatoken" in backends.values() or not fast_bpe.gigatoken_available()
    assert any(encoders[n][0].spec.join_id is not None for n in names)
    assert any(encoders[n][0].spec.plain_added is not None for n in names)


# -- found by the fuzzing -------------------------------------------------------------------------
RUN = 1_000_000  # whitespace characters: tiktoken 0.14's regex refuses 999,999 and more


@pytest.mark.parametrize("name", ["gpt2_style@tiktoken", "qwen25_style@tiktoken"])
def test_a_whitespace_run_past_tiktokens_limit_gets_tokenizers_ids(encoders, name):
    """tiktoken refuses a text with a whitespace run of ~1 M characters; prep split such a text with
    `regex` instead, whose Unicode tables are newer than tokenizers': U+A7CE (Unicode 16) and U+323B0
    (Unicode 17) are letters to it and unassigned to tokenizers 0.23, so "\\ua7ce's" was cut
    [U+A7CE]['s] against tokenizers' [U+A7CE'][s], and the document written with other ids, unnoticed
    (tiktoken's own tables agree with tokenizers': no Unicode gap sent it to tokenizers). Such a
    document now goes to tokenizers, alone or in a batch of short ones (the joined path)."""
    encoder, _, _ = encoders[name]
    assert encoder.spec.backend == "tiktoken"
    long_doc = " " * RUN + "\ua7ce's and \U000323b0's"
    before = encoder.num_referred
    _assert_tokenizers_ids(encoders, name, [long_doc])
    _assert_tokenizers_ids(encoders, name, ["short one", "\t" * RUN + "\ua7ce's", "", "last's"])
    assert encoder.num_referred == before + 2
    with pytest.raises(tiktoken_encode.RegexLimit):  # the engine no longer splits it in Python itself
        encoder._encode_one(long_doc)


def test_gpt2_asset_is_fuzzed_when_present(encoders):
    if GPT2_JSON is None:
        pytest.skip("GPT-2 tokenizer files not present (../shared/assets/gpt2)")
    assert encoders["gpt2"][0].spec.backend in ("gigatoken", "tiktoken")

