"""The fast tokenizer path gives exactly Hugging Face `tokenizers`' ids, or is not used.

Engines under test: tiktoken built from a tokenizer.json (always) and gigatoken (when installed).
Tokenizers: the real GPT-2 tokenizer.json (skipped when the asset is absent) and small BPEs trained
here (always run): GPT-2 style (ByteLevel regex), Llama 3 style (Split regex + ByteLevel), Qwen 2
style (that + an NFC normalizer), Qwen 2.5 style (that + non-special added tokens), SentencePiece
style (Llama 2's byte fallback and "▁" spaces; with non-special added tokens), SmolLM / StarCoder 2
style (Digits + ByteLevel), DeepSeek V3 style (three Splits in sequence, with non-special added tokens),
and one with added tokens placed where cutting them out is subtle.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import added_tokens, fast_bpe, joined, unicode_gaps
from pipeline import tokenizers as ptok
from pipeline.errors import PrepError
from pipeline.recipe import TokenizerConfig
from pipeline.tokenizers import FastPathMismatch, load_tokenizer
from tests.conftest import DEMO_TOKENIZER

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

GPT2_JSON = Path("/work/shared/assets/gpt2/tokenizer.json")
LLAMA3_PATTERN = fast_bpe.LLAMA3_PATTERN
TRAIN_TEXT = [
    "The quick brown fox jumps over the lazy dog. Don't panic; it's only 42 tokens, isn't it?",
    "def tokenize(text):\n    return [ord(c) for c in text]  # 1234567890\n\n",
    "Unicode: naïve café résumé, 日本語のテキスト, 한국어, العربية, emoji 😀👍🏽, math ∑∫√ ≠ ≤ ≥.",
    "Whitespace   runs\t\tand\n\n\nnewlines    end here.  ",
] * 40
ENGINES = [e for e in fast_bpe.ENGINES if e != "gigatoken" or fast_bpe.gigatoken_available()]
if fast_bpe.gigatoken_available():  # gigatoken built from ranks (fast_bpe.GigatokenRanks), where it can be
    ENGINES.append("gigatoken-ranks")


def _train(pre_tokenizer, normalizer=None, vocab_size=700) -> str:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>", "<|im_start|>"])
    tok.train_from_iterator(TRAIN_TEXT, trainer)
    return tok.to_str()


def _train_sentencepiece(metaspace: bool, vocab_size=600, prepend_scheme: str = "first") -> str:
    """A SentencePiece BPE as converted to tokenizer.json: byte fallback to <0xNN> tokens (ids 3-258
    after <unk> <s> </s>, Llama 2's layout) and "▁" for spaces, through Llama 2's Prepend + Replace
    normalizer or a Metaspace pre-tokenizer (newer conversions)."""
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=prepend_scheme, split=True)
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(TRAIN_TEXT, trainer)
    d = json.loads(tok.to_str())
    learned = [t for t, _ in sorted(d["model"]["vocab"].items(), key=lambda kv: kv[1]) if t not in ("<unk>", "<s>", "</s>")]
    order = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *learned]
    d["model"]["vocab"] = {t: i for i, t in enumerate(order)}
    for t in d["added_tokens"]:
        t["id"] = d["model"]["vocab"][t["content"]]
    return json.dumps(d)


SENTENCEPIECE = ("llama2_style", "metaspace_style", "llama2_added", "gemma_style")  # only gigatoken runs these

# Qwen 2.5's added tokens after its vocabulary (Qwen 3 adds the last four): the special ones stay plain
# text under prep's policy, the non-special ones tokenizers cuts out of the text
QWEN25_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                  "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                  "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
QWEN25_PLAIN = ["<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
# where cutting is subtle: a vocabulary token ("the"), one token a prefix of another ("ab"/"abc": the
# longest wins), one inside a special token's string ("<|im" in "<|im_start|>": not cut there), whitespace
# ("\t\t", "\n\n": pre-tokenizing around it changes), and one matched on normalized text (no normalizer)
TRICKY_PLAIN = [("the", False), ("ab", False), ("abc", False), ("<|im", False), ("\t\t", False), ("\n\n", False),
                ("zz", True)]


def _with_added(definition: str, tokens: list[tuple[str, bool, bool]]) -> str:
    """The tokenizer.json with added tokens (content, special, normalized) appended: the vocabulary's id
    for a string it has, else the next id past it (as Qwen 2.5's are)."""
    d = json.loads(definition)
    vocab = d["model"]["vocab"]
    next_id = max([*vocab.values(), *(t["id"] for t in d["added_tokens"])]) + 1
    for content, special, normalized in tokens:
        tid = vocab.get(content)
        if tid is None:
            tid, next_id = next_id, next_id + 1
        d["added_tokens"].append({"id": tid, "content": content, "single_word": False, "lstrip": False,
                                  "rstrip": False, "normalized": normalized, "special": special})
    return json.dumps(d)


def _specials_last(definition: str) -> str:
    """The trainer gives the special tokens the first ids; GPT-2 has its one last (dense ranks 0..n-1)."""
    d = json.loads(definition)
    special = {t["content"] for t in d["added_tokens"]}
    order = sorted(d["model"]["vocab"].items(), key=lambda kv: (kv[0] in special, kv[1]))
    d["model"]["vocab"] = {token: i for i, (token, _) in enumerate(order)}
    for t in d["added_tokens"]:
        t["id"] = d["model"]["vocab"][t["content"]]
    return json.dumps(d)


def _split_byte_level(*patterns: str):
    return pre_tokenizers.Sequence([*(pre_tokenizers.Split(Regex(p), "isolated") for p in patterns),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def _digits_byte_level(individual: bool):
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=individual),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False)])


# tiktoken runs one regex: DeepSeek V3's Splits in sequence run on gigatoken from ranks only
RANKS_ONLY = ("deepseek_v3_style",)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tok")
    out = {}
    for name, pre, norm in (
        ("gpt2_style", pre_tokenizers.ByteLevel(add_prefix_space=False), None),
        ("gpt2_specials_last", pre_tokenizers.ByteLevel(add_prefix_space=False), None),
        ("llama3_style", _split_byte_level(LLAMA3_PATTERN), None),
        ("llama3_specials_last", _split_byte_level(LLAMA3_PATTERN), None),
        ("qwen2_style", _split_byte_level(LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")), normalizers.NFC()),
        ("smollm_style", _digits_byte_level(True), None),         # StarCoder 2, SmolLM 1 and 2
        ("digit_runs_style", _digits_byte_level(False), None),
        ("deepseek_v3_base", _split_byte_level(*fast_bpe.DEEPSEEK_V3_SPLITS), None),
    ):
        p = d / f"{name}.json"
        p.write_text(_specials_last(_train(pre, norm)) if name.endswith("_specials_last") else _train(pre, norm))
        out[name] = p
    for name in SENTENCEPIECE:
        out[name] = d / f"{name}.json"
        out[name].write_text(_train_sentencepiece(metaspace=name.startswith("metaspace")))
    added = {  # non-special added tokens, cut out in front of the engine (pipeline/added_tokens.py)
        "qwen25_style": (_specials_last(out["qwen2_style"].read_text()),
                         [(t, True, False) for t in QWEN25_SPECIAL[2:]] + [(t, False, False) for t in QWEN25_PLAIN]),
        "added_tricky": (out["gpt2_style"].read_text(),
                         [(c, False, n) for c, n in TRICKY_PLAIN] + [("<|im_end|>", True, False)]),
        # the same in one matching pass (no normalized one): joinable, so a batch is cut as one text
        "added_tricky_raw": (out["gpt2_style"].read_text(),
                             [(c, False, n) for c, n in TRICKY_PLAIN if not n] + [("<|im_end|>", True, False)]),
        # a Prepend normalizer: tokenizers normalizes each piece alone, so each gets its own "▁"
        "llama2_added": (out["llama2_style"].read_text(),
                         [("<start_of_turn>", False, False), ("\n\n", False, False), ("<end_of_turn>", True, False)]),
    }
    # DeepSeek V3 / R1: <｜User｜>, <think>, ... are not special; its BOS/EOS are (ids 0 and 1 here)
    added["deepseek_v3_style"] = (out.pop("deepseek_v3_base").read_text(),
                                  [("<\uff5cUser\uff5c>", False, False), ("<think>", False, False),
                                   ("</think>", False, False), ("<\uff5cend\u2581of\u2581sentence\uff5c>", True, False)])
    # Gemma's layout: no "▁" prefix, and a Split on " " behind the normalizer that replaced every " "
    gemma = json.loads(out["llama2_style"].read_text())
    gemma["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    gemma["pre_tokenizer"] = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                              "invert": False}
    added["gemma_style"] = (json.dumps(gemma), [("<start_of_turn>", True, False), ("<end_of_turn>", True, False),
                                                ("\n\n", False, False), ("\t", False, False)])
    for name, (definition, tokens) in added.items():
        out[name] = d / f"{name}.json"
        out[name].write_text(_with_added(definition, tokens))
    return out


def _hf(path: Path) -> Tokenizer:
    tok = Tokenizer.from_file(str(path))
    ptok._make_plain(tok)
    return tok


def _engine(engine: str, definition: str):
    """The engine as prep runs it: with the non-special added tokens cut out in front of it."""
    plain, why = added_tokens.from_definition(json.loads(definition))
    assert not why, why
    encode = _bare_engine(engine, definition)
    return plain.wrap(encode) if plain is not None else encode


def _bare_engine(engine: str, definition: str):
    if engine == "gigatoken":
        return fast_bpe.build_gigatoken(definition)
    if engine == "gigatoken-ranks":
        ranks = fast_bpe.gigatoken_ranks(json.loads(definition))
        if ranks is None:
            raise RuntimeError("gigatoken is built from this tokenizer.json, not from ranks")
        return fast_bpe.build_gigatoken(ranks)
    bpe, why = fast_bpe.analyze(definition)
    if bpe is None:
        raise RuntimeError(f"tiktoken cannot run it: {why}")
    return fast_bpe.build_tiktoken(bpe)


def _assert_same(tok: Tokenizer, encode, texts: list[str]) -> None:
    want = [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]
    found = fast_bpe.first_mismatch(want, [encode(t) for t in texts])
    assert found is None, fast_bpe.describe_mismatch(texts, found)
    assert sum(map(len, want)) > 0 or not any(texts)  # not vacuous


def _may_refuse(name: str, engine: str) -> bool:
    """Whether `engine` may not load tokenizer `name`: tiktoken runs byte-level BPEs with one regex only,
    gigatoken from ranks only some of those, gigatoken from a tokenizer.json has pre-tokenizers for the
    known regex families and must run every SentencePiece-style one here; DeepSeek V3's Splits run on
    gigatoken from ranks only."""
    if name in SENTENCEPIECE:
        return engine != "gigatoken"
    if name in RANKS_ONLY:
        return engine != "gigatoken-ranks"
    return engine.startswith("gigatoken")


def _tokenizer_files(trained) -> list[tuple[str, Path]]:
    files = [(k, v) for k, v in trained.items()]
    if GPT2_JSON.is_file():
        files.append(("gpt2", GPT2_JSON))
    return files


# -- identical ids --------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_torture_sample_identical(trained, engine):
    for _name, path in _tokenizer_files(trained):
        definition = path.read_text()
        try:
            encode = _engine(engine, definition)
        except (RuntimeError, ValueError) as e:  # gigatoken lacks a pre-tokenizer, tiktoken runs one regex
            assert _may_refuse(_name, engine), e
            continue
        tok = _hf(path)
        special = [t.content for t in tok.get_added_tokens_decoder().values()]
        _assert_same(tok, encode, fast_bpe.torture_sample(special))


@pytest.mark.skipif(not GPT2_JSON.is_file(), reason="GPT-2 tokenizer.json asset absent")
def test_gpt2_ranks_match_merges():
    bpe, why = fast_bpe.analyze(GPT2_JSON.read_text())
    assert bpe is not None, why
    assert len(bpe.mergeable_ranks) == 50256 and bpe.special_tokens == {"<|endoftext|>": 50256}
    assert bpe.mergeable_ranks[b" the"] == 262 and bpe.mergeable_ranks[b"!"] == 0
    assert bpe.pat_str == fast_bpe.GPT2_PATTERN


_unicode = st.text(st.characters(codec="utf-8"), max_size=120)
_mixed = st.lists(st.one_of(_unicode, st.sampled_from([" ", "  ", "\n", "\n\n", "\t", "'s", "'LL", "123", "<|endoftext|>",
                                                       "don't", " the", "ー", "e\u0301", "😀", "\u00a0", "<tool_call>",
                                                       "<|im", "<|im_start|>", "abc", "zz", "<start_of_turn>",
                                                       "\u0338", "\u0301", "<think>",
                                                       # marks NFC reorders: alef + fatha, a Unicode 14 mark
                                                       # that tokenizers' NFC tables lack, ccc 1, Bengali
                                                       "\u0627\u064e", "\u0898", "\u0334", "q\u09fe"])),
                  max_size=12).map("".join)
# words and whitespace in turn: the pre-tokenizers' edge cases (contractions after letters, digit runs,
# spaces before newlines, NBSP, U+2028, U+3000, "▁" itself), which random code points rarely line up
_words = st.lists(st.tuples(
    st.one_of(st.text(min_size=1, max_size=8),
              st.sampled_from(["'s", "'S", "'ll", "'LL", "'ve", "don't", "123", "4567", "３４", "é", "e\u0301", "😀",
                               "<|endoftext|>", "<s>", "\u2581", "\u2581\u2581x", "ǅ", "ß", "<0x41>", "<think>", "</tool_call>",
                               "<|im_end|>", "ab", "the", "<start_of_turn>", "<end_of_turn>"])),
    st.text(st.sampled_from(list(" \t\n\r\x0b\x0c\u00a0\u2028\u3000\u200b\u0085")), max_size=6)),
    max_size=12).map(lambda pairs: "".join(w + s for w, s in pairs))


def _routed(tok: Tokenizer, encode, reference=None, unnormalized=None):
    """`encode`, with documents that hold a code point of its Unicode gaps (unicode_gaps.probe) given to
    `tok`, as the Encoder does: the fast path prep actually runs. `reference`: tok's ids of a batch of
    probe documents, when a caller shares them between engines. `unnormalized`: for a tokenizer with
    NFC, the engine without it (unicode_gaps.probe_normalization)."""
    reference = reference or (lambda docs: [e.ids for e in tok.encode_batch_fast(docs, add_special_tokens=False)])
    gaps = unicode_gaps.probe(reference, encode)
    if unnormalized is not None:
        gaps = unicode_gaps.merge(gaps, unicode_gaps.probe_normalization(tok.normalizer.normalize_str, encode,
                                                                         unnormalized))
    router = unicode_gaps.GapRouter(gaps)

    def run(text: str) -> np.ndarray:
        if router.find([text]):
            return np.array(tok.encode(text, add_special_tokens=False).ids, dtype=np.uint32)
        return encode(text)
    return run


def _has_nfc(definition: str) -> bool:
    return (json.loads(definition).get("normalizer") or {}).get("type") == "NFC"


def _without_nfc(definition: str) -> str:
    d = json.loads(definition)
    d["normalizer"] = None
    return json.dumps(d)


def _shared_reference(tok: Tokenizer):
    """tok's ids of a batch of documents, computed once per batch: every engine's probe sends tokenizers
    the same 636 documents of candidate code points, 32 per call (about 1.5 s each time)."""
    seen: dict[tuple[str, ...], list[list[int]]] = {}

    def reference(docs: list[str]) -> list[list[int]]:
        key = tuple(docs)
        if key not in seen:
            seen[key] = [e.ids for e in tok.encode_batch_fast(docs, add_special_tokens=False)]
        return seen[key]
    return reference


@pytest.fixture(scope="module")
def engines_under_test(trained):
    """(label, hf tokenizer, fast encode with its Unicode gaps routed) for every tokenizer x engine."""
    out = []
    for name, path in _tokenizer_files(trained):
        tok = _hf(path)
        reference = _shared_reference(tok)
        for engine in ENGINES:
            try:
                text = path.read_text()
                unnormalized = _engine(engine, _without_nfc(text)) if _has_nfc(text) else None
                out.append((f"{name}/{engine}", tok, _routed(tok, _engine(engine, text), reference, unnormalized)))
            except (RuntimeError, ValueError) as e:  # ValueError: tiktoken on a sequence of regexes
                assert _may_refuse(name, engine), e
    assert len(out) >= 3
    return out


def test_characters_newer_than_tokenizers_unicode_tables_go_to_the_reference(trained):
    """gigatoken 0.10 knows Unicode 17, tokenizers 0.23 does not: U+323B0 (CJK Extension J) is a letter
    to one and punctuation to the other, so "\U000323b0's" splits differently. The probe finds such
    code points; the Encoder gives documents holding one to tokenizers."""
    if not fast_bpe.gigatoken_available():
        pytest.skip("gigatoken not installed")
    path = trained["gpt2_style"]
    tok = _hf(path)
    raw = _engine("gigatoken", path.read_text())
    text = "\U000323b0's and \ua7ce's, then plain text's"
    want = tok.encode(text, add_special_tokens=False).ids
    gaps = unicode_gaps.probe(lambda docs: [e.ids for e in tok.encode_batch_fast(docs, add_special_tokens=False)], raw)
    if list(raw(text)) == want:  # a gigatoken with older tables, or a tokenizers with newer ones
        pytest.skip("these engine versions agree on U+323B0")
    assert any(a <= 0x323B0 <= b for a, b in gaps)
    spec = load_tokenizer(TokenizerConfig(path=str(path), boundary="none"))
    # (with the classes unicode_gaps.probe_classes finds where no merge shows them)
    assert spec.backend == "gigatoken" and unicode_gaps.merge(gaps, spec.unicode_gaps) == spec.unicode_gaps
    enc = spec.build_encoder()
    ids, lengths = enc.encode_batch([text, "plain text's", "caf\u00e9 \u2019s \U0001f600"])
    assert ids[:lengths[0]].tolist() == want and enc.num_referred == 1


def test_a_class_no_merge_from_ascii_shows_still_goes_to_the_reference(tmp_path):
    """`probe` saw U+323B0's class (a letter to gigatoken, not to tokenizers) only through a merge that
    crosses the cut in its ASCII contexts ("a\U000323b0"): a vocabulary trained on Chinese has none, but
    joins the ideograph's last byte (B0) to the lead byte of 数 (E6), so "\U000323b0数据" got other ids
    on gigatoken than on tokenizers (found by fuzzing). probe_classes compares where the two engines' regexes
    cut, whatever the merges."""
    if not fast_bpe.gigatoken_available():
        pytest.skip("gigatoken not installed")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["数据 处理 数据数据 中文的数据"] * 50 + ["plain text and more text"] * 50,
                            trainers.BpeTrainer(vocab_size=400, show_progress=False, special_tokens=["<|endoftext|>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    texts = ["\U000323b0数据", "x\U000323b0数据 plain", "数据 plain text"]
    raw = _engine("gigatoken", path.read_text())
    want = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    if list(raw(texts[0])) == want[0]:  # a gigatoken with older tables, or a tokenizers with newer ones
        pytest.skip("these engine versions agree on U+323B0")
    spec = load_tokenizer(TokenizerConfig(path=str(path), boundary="none"))
    assert spec.backend == "gigatoken" and any(a <= 0x323B0 <= b for a, b in spec.unicode_gaps)
    enc = spec.build_encoder()
    ids, lengths = enc.encode_batch(texts)
    assert [a.tolist() for a in np.split(ids, np.cumsum(lengths)[:-1])] == want
    assert enc.num_referred == 2


def test_combining_marks_that_tokenizers_nfc_does_not_know_go_to_the_reference(trained):
    """tokenizers 0.23 normalizes with tables older than Unicode 14: U+0898 (an Arabic Quranic mark,
    Unicode 14) has canonical combining class 230 to Python and gigatoken, 0 to tokenizers. So NFC
    reorders alef + fatha (ccc 30) + U+0898 in Python (and in gigatoken) but not in tokenizers, and a
    Qwen-2-style tokenizer (NFC) gave other ids on the fast path. unicode_gaps.probe_normalization
    finds such marks; the Encoder gives documents holding one to tokenizers."""
    path = trained["qwen2_style"]
    tok = _hf(path)
    text = "\u0627\u064e\u0898 and q\u09fe\u0334, then plain text's"
    want = tok.encode(text, add_special_tokens=False).ids
    spec = load_tokenizer(TokenizerConfig(path=str(path), boundary="none"))
    assert spec.backend in ("gigatoken", "tiktoken")
    enc = spec.build_encoder()
    # which marks the engine normalizes otherwise depends on its NFC's tables: Python 3.10's
    # unicodedata (Unicode 13) leaves U+0898 unassigned, as tokenizers does, but not U+09FE (Unicode 11)
    differing = [mark for piece, mark in (("\u0627\u064e\u0898", 0x898), ("q\u09fe\u0334", 0x9fe))
                 if enc._encode_one(piece).tolist() != tok.encode(piece, add_special_tokens=False).ids]
    if not differing:  # tokenizers with newer NFC tables
        pytest.skip("this tokenizers and this engine normalize U+0898 and U+09FE alike")
    assert all(any(a <= mark <= b for a, b in spec.unicode_gaps) for mark in differing)
    ids, lengths = enc.encode_batch([text, "plain text's", "caf\u00e9 \u2019s"])
    assert ids[:lengths[0]].tolist() == want and enc.num_referred == 1
    assert unicode_gaps.merge([(1, 3), (9, 9)], [(4, 5), (7, 8), (20, 30)], [(25, 26)]) == ((1, 5), (7, 9), (20, 30))


def test_probe_candidates_do_not_depend_on_this_pythons_unicode_tables(monkeypatch):
    """Python 3.15's unicodedata knows Unicode 17, which assigns Extension J (U+323B0-U+3347F). There,
    Python's unassigned code points alone would leave out the very ones gigatoken 0.10 (Unicode 17)
    and tokenizers 0.23 (Unicode 16) class otherwise. Simulated here: a unicodedata whose tables assign
    every code point Python 3.11's leave unassigned, as a far newer Unicode would."""
    base = unicode_gaps._candidates()
    real = unicode_gaps.unicodedata
    newest = SimpleNamespace(ucd_3_2_0=real.ucd_3_2_0,
                             category=lambda ch: "Lo" if real.category(ch) == "Cn" else real.category(ch))
    monkeypatch.setattr(unicode_gaps, "unicodedata", newest)
    assert unicode_gaps._candidates.__wrapped__() == base  # the same candidates, whatever this Python knows
    cands = set(base)
    assert {0x323B0, 0x3347F, 0xA7CE, 0x2EBF0, 0x31350, 0x1C89} <= cands  # Unicode 17, 16, 15.1, 15.0 additions
    assert all(cp in cands for cp in range(0x40000)
               if not 0xD800 <= cp < 0xE000 and real.category(chr(cp)) == "Cn")  # never fewer than before
    assert not {ord("a"), ord("1"), ord(" "), 0x4E00, 0x0416} & cands  # assigned by Unicode 3.2, never reclassed


def test_gap_router_checks_each_string_width():
    router = unicode_gaps.GapRouter([(0xE9, 0xE9), (0xA7CE, 0xA7CF), (0x323B0, 0x3347F)])
    texts = ["ascii only", "caf\u00e9", "na\u00efve", "\u2019quote\u2019", "x\ua7cfy", "\U0001f600 emoji",
             "\U00033000 ext J", "\u2019 \U00033479"]
    assert router.find(texts) == [1, 4, 6, 7]
    assert unicode_gaps.GapRouter(()).find(texts) == []
    assert [unicode_gaps._width(t) for t in texts[1:8]] == [1, 1, 2, 2, 4, 4, 4]  # O(1) on fresh strings
    if fast_bpe.gigatoken_available():  # an engine that read the UTF-8 leaves it cached: wider, still right
        encode = fast_bpe.build_gigatoken(DEMO_TOKENIZER.read_text())
        for t in texts:
            encode(t)
        assert router.find(texts) == [1, 4, 6, 7]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.one_of(_unicode, _mixed, _words), min_size=1, max_size=8))
def test_random_unicode_identical(engines_under_test, texts):
    for _label, tok, encode in engines_under_test:
        _assert_same(tok, encode, texts)


# -- choosing the backend -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gpt2_style", "llama3_style", "qwen2_style", "smollm_style", "digit_runs_style"])
def test_auto_picks_a_fast_engine(trained, name):
    spec = load_tokenizer(TokenizerConfig(path=str(trained[name])))
    assert spec.backend in ("tiktoken", "gigatoken")
    assert spec.manifest_dict()["backend"] == spec.backend
    spec = load_tokenizer(TokenizerConfig(path=str(trained[name]), backend="tiktoken"))
    assert spec.backend == "tiktoken" and spec.backend_reason == ""
    assert load_tokenizer(TokenizerConfig(path=str(trained[name]), backend="hf")).backend == "hf"


@pytest.mark.skipif(not fast_bpe.gigatoken_available(), reason="gigatoken not installed")
@pytest.mark.parametrize("name", SENTENCEPIECE)
def test_sentencepiece_style_runs_on_gigatoken(trained, name, monkeypatch):
    """Llama 2 / Mistral 7B v0.1 layouts (byte fallback, "▁" spaces): tiktoken cannot run them,
    gigatoken's SentencePiece engine is proved like the byte-level ones and used by auto."""
    monkeypatch.setenv("PREP_CACHE_DIR", "off")
    path = trained[name]
    spec = load_tokenizer(TokenizerConfig(path=str(path)))
    assert (spec.backend, spec.backend_reason) == ("gigatoken", "")
    assert isinstance(spec.engine_data, str) and (spec.bos_id, spec.eos_id) == (1, 2)
    texts = ["Hello there, Zürich! 日本語 😀 x", "  leading and trailing  ", "", "<s> and </s> stay text", "\n\n1234"]
    ids, lengths = spec.build_encoder().encode_batch(texts)
    tok = _hf(path)
    want = [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]
    assert ids.tolist() == [i for w in want if w for i in (*w, 2)] and lengths.tolist() == [len(w) + bool(w) for w in want]
    assert any(3 <= i <= 258 for i in ids.tolist())  # byte fallback ran (H, Z, ü are not in the vocabulary)
    with pytest.raises(PrepError, match="SentencePiece-style BPE .* tiktoken cannot run"):
        load_tokenizer(TokenizerConfig(path=str(path), backend="tiktoken"))
    monkeypatch.setattr(fast_bpe, "gigatoken_available", lambda: False)
    spec = load_tokenizer(TokenizerConfig(path=str(path)))
    assert spec.backend == "hf" and "only gigatoken runs" in spec.backend_reason


@pytest.mark.parametrize("change, reason", [
    (lambda d: d.update(normalizer={"type": "Lowercase"}), "Lowercase normalizer"),
    (lambda d: d["normalizer"]["normalizers"].insert(0, {"type": "NFKC"}), "NFKC normalizer"),
    (lambda d: d.update(pre_tokenizer={"type": "Digits", "individual_digits": True}), "Digits pre-tokenizer"),
    (lambda d: d["model"].update(ignore_merges=True), "ignore_merges"),
    (lambda d: d["added_tokens"].append(_added("<0x00>", rstrip=True)), "has rstrip set"),
    # Gemma's Split on " " is a no-op only because the normalizer replaced every " " before it
    (lambda d: d.update(pre_tokenizer={"type": "Split", "pattern": {"String": "."}, "behavior": "MergedWithPrevious",
                                       "invert": False}), "Split pre-tokenizer"),
    (lambda d: d.update(pre_tokenizer={"type": "Split", "pattern": {"String": " "}, "behavior": "Removed",
                                       "invert": True}), "Split pre-tokenizer"),
    (lambda d: d.update(pre_tokenizer={"type": "Split", "pattern": {"String": " "}, "behavior": "Isolated",
                                       "invert": False},
                        normalizer={"type": "Sequence", "normalizers": [
                            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
                            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}]}), "Split pre-tokenizer"),
    # Metaspace prepends to the text's first piece only; the engine sees each piece alone
    (lambda d: d.update(normalizer=None, pre_tokenizer={"type": "Metaspace", "replacement": "\u2581",
                                                        "prepend_scheme": "first", "split": True},
                        added_tokens=d["added_tokens"] + [_added("<x>")]), "prepend_scheme first"),
])
def test_sentencepiece_style_outside_what_was_proved_falls_back_to_hf(trained, tmp_path, change, reason):
    spec = load_tokenizer(TokenizerConfig(path=str(_edit(trained["llama2_style"], tmp_path, change))))
    assert spec.backend == "hf" and reason in spec.backend_reason


@pytest.mark.parametrize("metaspace", [False, True])
def test_sentencepiece_style_with_ignore_merges_keeps_a_token_word_whole(trained, tmp_path, monkeypatch, metaspace):
    """With ignore_merges: true, tokenizers keeps a word that is itself a token whole, even one its
    merges do not rebuild; gigatoken's SentencePiece engine merged it anyway and auto ran it: "Жzq"
    gave 5 ids instead of the one token "▁Жzq". Such a file now runs on tokenizers, with the reason."""
    monkeypatch.setenv("PREP_CACHE_DIR", "off")

    def whole_word_token(d: dict) -> None:
        d["model"]["ignore_merges"] = True
        d["model"]["vocab"]["\u2581\u0416zq"] = max(d["model"]["vocab"].values()) + 1  # "▁Жzq", made by no merge
        if metaspace:
            d.update(normalizer=None, pre_tokenizer={"type": "Metaspace", "replacement": "\u2581",
                                                     "prepend_scheme": "always", "split": True})
    path = _edit(trained["llama2_style"], tmp_path, whole_word_token)
    spec = load_tokenizer(TokenizerConfig(path=str(path), boundary="none"))
    texts = ["\u0416zq", "a \u0416zq b", "\u0416zqq"]
    ids, lengths = spec.build_encoder().encode_batch(texts)
    want = [e.ids for e in _hf(path).encode_batch_fast(texts, add_special_tokens=False)]
    assert want[0] == [json.loads(path.read_text())["model"]["vocab"]["\u2581\u0416zq"]]  # not vacuous
    assert ids.tolist() == [i for w in want for i in w] and lengths.tolist() == list(map(len, want))
    assert spec.backend == "hf" and "ignore_merges: true" in spec.backend_reason


def test_a_unigram_with_byte_fallback_is_named_as_unigram(tmp_path):
    """A Unigram model with byte_fallback was taken for a SentencePiece-style BPE and refused as "not a
    SentencePiece-style BPE (byte_fallback)", a reason that names neither its model nor the fix."""
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(TRAIN_TEXT, trainers.UnigramTrainer(vocab_size=120, show_progress=False,
                                                                 special_tokens=["<unk>", "</s>"], unk_token="<unk>"))
    d = json.loads(tok.to_str())
    d["model"]["byte_fallback"] = True
    path = tmp_path / "unigram.json"
    path.write_text(json.dumps(d))
    spec = load_tokenizer(TokenizerConfig(path=str(path)))
    assert (spec.backend, spec.eos_id) == ("hf", 1)
    assert spec.backend_reason.endswith("because its model is Unigram, not BPE"), spec.backend_reason
    with pytest.raises(PrepError, match="because its model is Unigram, not BPE; use backend auto"):
        load_tokenizer(TokenizerConfig(path=str(path), backend="tiktoken"))


def _with_dropout(path: Path, tmp_path: Path) -> tuple[Path, Tokenizer]:
    """The tokenizer.json with BPE dropout 0.5, and tokenizers' Tokenizer of it without the dropout."""
    edited = _edit(path, tmp_path, lambda d: d["model"].update(dropout=0.5))
    reference = Tokenizer.from_str(path.read_text())
    ptok._make_plain(reference)
    return edited, reference


@pytest.mark.parametrize("name", ["gpt2_style", "llama2_style"])
def test_bpe_dropout_is_switched_off(trained, tmp_path, monkeypatch, name):
    """BPE dropout skips each merge at random in tokenizers: prep's hf backend wrote other ids on every
    run (a resumed run mixed two tokenizations), and auto refused every fast engine for it. It is
    switched off everywhere, like truncation and padding, with a note; a fast engine then runs it."""
    monkeypatch.setenv("PREP_CACHE_DIR", "off")
    path, reference = _with_dropout(trained[name], tmp_path)
    texts = [" ".join(TRAIN_TEXT[:5]) * 4, "Don't panic; it's only 42 tokens", "The quick brown fox"]
    want = [e.ids for e in reference.encode_batch_fast(texts, add_special_tokens=False)]
    for backend in ("hf", "auto"):
        spec = load_tokenizer(TokenizerConfig(path=str(path), boundary="none", backend=backend))
        for _ in range(3):  # a new encoder each time: each worker builds its own
            ids, lengths = spec.build_encoder().encode_batch(texts)
            assert ids.tolist() == [i for w in want for i in w] and lengths.tolist() == list(map(len, want))
        assert (spec.backend == "hf") == (backend == "hf")
        assert "BPE dropout of" in spec.backend_reason and "(0.5) is switched off" in spec.backend_reason


def test_qwen25_style_added_tokens_take_the_fast_path(trained, tmp_path, monkeypatch):
    """Qwen 2.5 / Qwen 3 list <tool_call>, <think>, ... as non-special added tokens; tokenizers cuts them
    out of documents. The fast engines run with them cut out the same way, proved like the rest, and
    the cut-out ids (past the vocabulary) are counted in the ids the engine may give."""
    monkeypatch.setenv("PREP_CACHE_DIR", str(tmp_path / "cache"))
    path = trained["qwen25_style"]
    tok = _hf(path)
    ids = {t: tok.token_to_id(t) for t in QWEN25_PLAIN + QWEN25_SPECIAL}
    for backend in ("auto", "tiktoken", "auto"):  # the second auto comes from the cache
        spec = load_tokenizer(TokenizerConfig(path=str(path), backend=backend, boundary="none"))
        assert spec.backend == ("tiktoken" if backend == "tiktoken" or not fast_bpe.gigatoken_available()
                                else "gigatoken") and spec.backend_reason == ""
        assert spec.plain_added is not None and sorted(spec.plain_added.strings) == sorted(QWEN25_PLAIN)
        assert spec.max_engine_id == max(ids.values())
        texts = ["<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<|im_start|>user\n<think>hm</think><|im_end|>",
                 "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>", "plain text", ""]
        got, lengths = spec.build_encoder().encode_batch(texts)
        want = [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]
        assert got.tolist() == [i for w in want for i in w] and lengths.tolist() == list(map(len, want))
        assert {ids["<tool_call>"], ids["</tool_call>"], ids["<think>"], ids["<|fim_middle|>"]} <= set(got.tolist())
        assert ids["<|im_start|>"] not in got.tolist()  # special: plain text (prep's policy)


def test_added_tokens_are_cut_where_tokenizers_cuts_them(trained):
    """Leftmost-longest, a special token's string not cut inside, raw tokens before normalized ones,
    each piece encoded alone (a Prepend normalizer gives each its "▁")."""
    for name, texts in (
        ("added_tricky", ["abcd", "xab abc", "<|im_start|>", "<|im_end|>", "<|imx", "a\t\t\tb", "\n\n\n x", "thethe",
                          "zzz", "the zz<|im"]),
        ("llama2_added", ["Hello<start_of_turn>user\n\nhi", "<end_of_turn>\n\n", "a \n\n b"]),
    ):
        path = trained[name]
        tok = _hf(path)
        encode = _engine("gigatoken" if name in SENTENCEPIECE else "tiktoken", path.read_text())
        _assert_same(tok, encode, texts)
    plain, _ = added_tokens.from_definition(json.loads(trained["added_tricky"].read_text()))
    cut = _bare_cuts(plain)
    assert cut("xab abcd") == ["x", "ab", " ", "abc", "d"]
    assert cut("<|im_start|><|imx") == ["<|im_start|>", "<|im", "x"]  # "<|im" is cut only outside the special
    assert cut("the zz") == ["the", " ", "zz"] and cut("") == [] and cut("none here") == ["none here"]


def test_engine_cuts_added_tokens_only_where_no_special_token_can_hide_one():
    """tokenizers matches special and non-special tokens together (leftmost-longest) and keeps a
    special match as text: a non-special token inside a special one, or starting in its last
    characters, is then not cut, so the engine (which knows only the non-special ones) must not cut."""
    def plain(*tokens):
        return added_tokens.PlainAddedTokens(tuple(tokens), ())
    assert plain(("<a>", None), ("<b>", 7)).engine_can_cut
    assert plain(("im", None), ("<|im|>", 7)).engine_can_cut        # the special inside the plain one
    assert plain(("<b", None), ("<b>", 7)).engine_can_cut           # same start: the longer plain wins
    assert not plain(("<|im_end|>", None), ("<|im", 7)).engine_can_cut  # the plain inside the special
    assert not plain(("<a>", None), (">b", 7)).engine_can_cut       # the special's end starts the plain
    assert not added_tokens.PlainAddedTokens((("x", 7),), (("y", 8),)).engine_can_cut  # two passes


@pytest.mark.skipif(not fast_bpe.gigatoken_available(), reason="gigatoken not installed")
def test_which_tokenizers_have_gigatoken_cut_their_added_tokens(trained, monkeypatch):
    """Cut by the engine: from ranks without a normalizer (DeepSeek V3), from a tokenizer.json
    (SentencePiece layouts; Qwen 2.5, whose NFC runs in Python before the engine when built from
    ranks, but in gigatoken after its cut from the tokenizer.json); in Python where a special token
    holds a non-special one (added_tricky_raw's "<|im" in "<|im_end|>")."""
    monkeypatch.setenv("PREP_CACHE_DIR", "off")
    for name, native, ranks in (("deepseek_v3_style", True, True), ("gemma_style", True, False),
                                ("llama2_added", True, False), ("qwen25_style", True, False),
                                ("added_tricky_raw", False, True)):
        spec = _load_joined_spec(trained, name, bos_token="<s>" if name in SENTENCEPIECE else None)
        assert (spec.backend, spec.native_added, spec.backend_reason) == ("gigatoken", native, ""), name
        assert isinstance(spec.engine_data, fast_bpe.GigatokenRanks) == ranks, name
    # the proof is what decides: an engine told to cut "<|im" cuts it inside "<|im_end|>" too, fails on
    # the torture sample, and the tokens are cut in Python instead (saying why)
    monkeypatch.setattr(added_tokens.PlainAddedTokens, "engine_can_cut", property(lambda self: True))
    spec = _load_joined_spec(trained, "added_tricky_raw", boundary="none")
    assert spec.backend == "gigatoken" and not spec.native_added
    assert "cutting added tokens itself gave other ids" in spec.backend_reason
    hf = _hf(trained["added_tricky_raw"])
    texts = ["<|im_end|> x<|im", "abc\t\tthe"]
    got, lengths = spec.build_encoder().encode_batch(texts)
    want = [e.ids for e in hf.encode_batch_fast(texts, add_special_tokens=False)]
    assert got.tolist() == [i for w in want for i in w] and lengths.tolist() == list(map(len, want))


def _bare_cuts(plain):
    """text -> what `plain.wrap` makes of it: the pieces the engine is given and the cut-out tokens
    (as their strings), in order (the stand-in engine gives each piece one marker id)."""
    names = {tid: s for s, tid in plain.raw + plain.normalized if tid is not None}
    marker = 1 << 31

    def cut(text):
        pieces = []

        def engine(piece):
            pieces.append(piece)
            return np.array([marker + len(pieces) - 1], np.uint32)
        return [pieces[i - marker] if i >= marker else names[i] for i in plain.wrap(engine)(text).tolist()]
    return cut


@pytest.mark.skipif(not fast_bpe.gigatoken_available(), reason="gigatoken not installed")
def test_gigatoken_is_built_from_ranks(trained, tmp_path):
    """GPT-2's ByteLevel regex: gigatoken's from_tiktoken with its "gpt2" pre-tokenizer (half the
    build time), proven like the tokenizer.json path. gigatoken takes dense ranks only: with the
    special tokens first in the vocabulary (as `tokenizers` trains them), the ranks are the ids shifted
    down and the engine's ids are shifted back. Ids with gaps, or merges tiktoken cannot follow: the
    tokenizer.json path (other regexes: the next test)."""
    sample = fast_bpe.torture_sample(["<|endoftext|>", "<|im_start|>"])
    for name, offset in (("gpt2_specials_last", 0), ("gpt2_style", 2), ("llama3_style", 2), ("qwen2_style", 2)):
        path = trained[name]
        spec = load_tokenizer(TokenizerConfig(path=str(path)))
        assert spec.backend == "gigatoken" and isinstance(spec.engine_data, fast_bpe.GigatokenRanks), name
        assert spec.engine_data.id_offset == offset, name
        from_json = _engine("gigatoken", path.read_text())
        from_ranks = spec.build_encoder()._encode_one
        assert [list(from_ranks(t)) for t in sample] == [list(from_json(t)) for t in sample]
        _assert_same(_hf(path), from_ranks, sample + TRAIN_TEXT[:4])
    # a special token amid the vocabulary's ids (a gap): the tokenizer.json path
    gap = _edit(trained["gpt2_specials_last"], tmp_path, _special_at_id_5)
    assert fast_bpe.gigatoken_ranks(json.loads(gap.read_text())) is None
    spec = load_tokenizer(TokenizerConfig(path=str(gap)))
    assert spec.backend == "gigatoken" and isinstance(spec.engine_data, str)
    _assert_same(_hf(gap), spec.build_encoder()._encode_one, sample)
    # merges out of rank order: tiktoken-style ranks would merge otherwise than the merges list
    reversed_merges = _edit(trained["gpt2_specials_last"], tmp_path, lambda d: d["model"]["merges"].reverse())
    assert fast_bpe.gigatoken_ranks(json.loads(reversed_merges.read_text())) is None
    spec = load_tokenizer(TokenizerConfig(path=str(reversed_merges)))
    assert not isinstance(spec.engine_data, fast_bpe.GigatokenRanks)


def _special_at_id_5(d: dict) -> None:
    vocab = d["model"]["vocab"]
    byte_token = next(t for t, i in vocab.items() if i == 5)
    eot = next(t for t in d["added_tokens"] if t["content"] == "<|endoftext|>")
    vocab[byte_token], vocab[eot["content"]] = eot["id"], 5  # merges order by id: still in rank order
    eot["id"] = 5


@pytest.mark.skipif(not fast_bpe.gigatoken_available(), reason="gigatoken not installed")
@pytest.mark.parametrize("regex, normalizer, scheme", [
    (LLAMA3_PATTERN, None, "olmo3"),
    (LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}"), "NFC", "qwen2"),        # Qwen 2, with its NFC
    (LLAMA3_PATTERN.replace(r"\s*[\r\n]+", r"\s*[\r\n]"), None, "gpt4"),   # a cl100k conversion
    (fast_bpe.O200K_PATTERN, None, "o200k"),                                  # gpt-oss
    (fast_bpe.QWEN35_PATTERN, None, "qwen35"),
    (LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}{1,2}"), None, None),       # unknown: the tokenizer.json path
])
def test_split_regexes_gigatoken_knows_are_built_from_ranks(trained, tmp_path, regex, normalizer, scheme):
    path = tmp_path / "split.json"
    path.write_text(_specials_last(_train(_split_byte_level(regex), normalizers.NFC() if normalizer else None)))
    ranks = fast_bpe.gigatoken_ranks(json.loads(path.read_text()))
    assert (ranks and (ranks.scheme, ranks.normalizer)) == (scheme and (scheme, normalizer))
    spec = load_tokenizer(TokenizerConfig(path=str(path)))
    sample = fast_bpe.torture_sample(["<|endoftext|>", "<|im_start|>"]) + TRAIN_TEXT[:10]
    if scheme is None:  # gigatoken has no pre-tokenizer for it: auto takes the next engine
        assert spec.backend == "tiktoken"
        return
    assert spec.backend == "gigatoken" and spec.engine_data == ranks
    from_ranks = spec.build_encoder()._encode_one
    _assert_same(_hf(path), from_ranks, sample)
    from_json = _engine("gigatoken", path.read_text())
    assert [list(from_ranks(t)) for t in sample] == [list(from_json(t)) for t in sample]


@pytest.mark.skipif(not fast_bpe.gigatoken_available(), reason="gigatoken not installed")
def test_gigatoken_falls_back_to_the_tokenizer_json_not_to_a_slower_engine(trained, monkeypatch):
    monkeypatch.setenv("PREP_CACHE_DIR", "off")  # prove it again

    def refuse(ranks, separator_rank=None, cut=None):
        raise RuntimeError("ranks must be dense")
    monkeypatch.setattr(fast_bpe, "_gigatoken_from_ranks", refuse)
    spec = load_tokenizer(TokenizerConfig(path=str(trained["gpt2_specials_last"])))
    assert spec.backend == "gigatoken" and isinstance(spec.engine_data, str)
    assert "gigatoken from ranks could not load it (RuntimeError: ranks must be dense)" in spec.backend_reason


@pytest.mark.skipif(not fast_bpe.gigatoken_available() or not hasattr(os, "memfd_create"),
                    reason="gigatoken not installed, or no memfd (not Linux)")
def test_gigatoken_from_ranks_needs_no_writable_tmpdir(trained, tmp_path, monkeypatch):
    """Each worker builds its engine from the ranks: a full or missing TMPDIR must not fail it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-dir"))
    path = trained["gpt2_specials_last"]
    encode = fast_bpe.build_gigatoken(fast_bpe.gigatoken_ranks(json.loads(path.read_text())))
    _assert_same(_hf(path), encode, TRAIN_TEXT[:20])
    assert not (tmp_path / "no-such-dir").exists()


# digits, Japanese kana and CJK ideographs, combining marks, punctuation before letters: where DeepSeek
# V3's three Splits and SmolLM's Digits cut otherwise than one regex over the whole text would
SPLIT_EDGES = ["a  12", "x 3.14159 ٣٤٥ ²³ ⅷ", "abc123def  4567  ", "日本語のテキスト123カタカナ ひらがな漢字",
               "!!Hello .World ,x 'quoted' --flag", "e\u0301\u0302 ñ \u0915\u093f", "  \n\n 12\n\n34", "1234567890" * 3,
               "<think>2+2=4</think> <\uff5cUser\uff5c>ok"]


@pytest.mark.skipif(not fast_bpe.gigatoken_available(), reason="gigatoken not installed")
def test_deepseek_v3_style_runs_on_gigatoken_from_ranks(trained, tmp_path, monkeypatch):
    """Three Splits in sequence are no one regex, so tiktoken cannot run them; gigatoken's "deepseek_v3"
    pre-tokenizer can, from ranks (its tokenizer.json loader refuses the Splits)."""
    path = _edit(trained["deepseek_v3_style"], tmp_path, _deepseek_bos)  # as DeepSeek's, id 0 its BOS
    spec = load_tokenizer(TokenizerConfig(path=str(path), boundary="both"))  # BOS and EOS found by name
    assert (spec.bos_id, spec.eos_id) == (0, _hf(path).token_to_id("<\uff5cend\u2581of\u2581sentence\uff5c>"))
    assert spec.backend == "gigatoken" and spec.engine_data.scheme == "deepseek_v3"
    assert spec.engine_data.id_offset == 2 and spec.plain_added is not None  # specials first; <think>
    _assert_same(_hf(path), spec.build_encoder()._encode_one, SPLIT_EDGES + TRAIN_TEXT[:4])
    with pytest.raises(PrepError, match="3 Split regexes in sequence"):
        load_tokenizer(TokenizerConfig(path=str(path), backend="tiktoken", boundary="none"))
    monkeypatch.setenv("PREP_CACHE_DIR", "off")
    monkeypatch.setattr(fast_bpe, "gigatoken_available", lambda: False)
    spec = load_tokenizer(TokenizerConfig(path=str(path), boundary="none"))
    assert spec.backend == "hf" and "3 Split regexes in sequence" in spec.backend_reason


def _deepseek_bos(d: dict) -> None:
    bos = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
    d["model"]["vocab"][bos] = d["model"]["vocab"].pop("<|endoftext|>")
    next(t for t in d["added_tokens"] if t["content"] == "<|endoftext|>")["content"] = bos


def test_digits_then_byte_level_is_one_regex(trained):
    """SmolLM's and StarCoder 2's Digits + ByteLevel: one regex (fast_bpe._digits_then_gpt2) on tiktoken."""
    for name in ("smollm_style", "digit_runs_style"):
        spec = load_tokenizer(TokenizerConfig(path=str(trained[name]), boundary="none"))
        assert spec.backend == "tiktoken"
        _assert_same(_hf(trained[name]), spec.build_encoder()._encode_one, SPLIT_EDGES + TRAIN_TEXT[:4])
    tok = _hf(trained["smollm_style"])
    assert tok.encode("a  12", add_special_tokens=False).tokens == ["a", "ĠĠ", "1", "2"]  # not GPT-2's [a][Ġ][Ġ12]


# code points Python's Unicode database assigns (Cn excluded): the regex module's newer tables and
# tokenizers' older ones agree on those (newer ones are the Unicode-gap probe's business)
_assigned = st.text(st.characters(codec="utf-8", exclude_categories=("Cn", "Cs")), max_size=60)


@settings(max_examples=400, deadline=None)
@given(text=st.lists(st.one_of(_assigned, st.sampled_from(["1", "23", " 4", "  56", "\n7", "٣", "²", "Ⅻ", "'s", " ",
                                                           "\t", "x", "?!"])), max_size=10).map("".join))
def test_digits_regex_cuts_where_tokenizers_cuts(text):
    """`_digits_then_gpt2`'s regex gives the pieces of Digits + ByteLevel, not only the same ids on a
    small vocabulary (where "  12" and " 12" may well encode alike)."""
    regex = pytest.importorskip("regex")  # tiktoken's own dependency
    to_byte_level = fast_bpe.bytes_to_unicode()
    for individual in (True, False):
        want = [piece for piece, _ in _digits_byte_level(individual).pre_tokenize_str(text)]
        found = regex.findall(fast_bpe._digits_then_gpt2(individual), text)
        assert "".join(found) == text
        assert ["".join(to_byte_level[b] for b in p.encode()) for p in found] == want


def _added(content: str, special=False, normalized=False, **flags) -> dict:
    return {"id": 700, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": normalized, "special": special, **flags}


def test_a_normalized_added_token_behind_a_normalizer_falls_back_to_hf(trained, tmp_path):
    """Matched on normalized text (after Qwen 2's NFC), which prep does not see: not cut out here."""
    path = _edit(trained["qwen2_style"], tmp_path, lambda d: d["added_tokens"].append(_added("foo", normalized=True)))
    spec = load_tokenizer(TokenizerConfig(path=str(path), boundary="none"))
    assert spec.backend == "hf" and "matched on normalized text" in spec.backend_reason


def _edit(path: Path, tmp_path: Path, fn) -> Path:
    d = json.loads(path.read_text())
    fn(d)
    out = tmp_path / "edited.json"
    out.write_text(json.dumps(d))
    return out


def _split_sequence(*patterns: str) -> dict:
    """A tokenizer.json pre_tokenizer: isolating Splits in sequence, then ByteLevel without its regex."""
    splits = [{"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False} for p in patterns]
    return {"type": "Sequence", "pretokenizers": [
        *splits, {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}


def _wordpiece(tmp_path: Path) -> Path:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(TRAIN_TEXT, trainers.WordPieceTrainer(vocab_size=300, show_progress=False,
                                                                   special_tokens=["[UNK]", "[SEP]"]))
    p = tmp_path / "wordpiece.json"
    p.write_text(tok.to_str())
    return p


@pytest.mark.parametrize("change, reason", [
    (lambda d: d.update(normalizer={"type": "Lowercase"}), "Lowercase normalizer"),
    (lambda d: d["pre_tokenizer"].update(add_prefix_space=True), "prefix space"),
    (lambda d: d["added_tokens"].append(_added("foo", lstrip=True)), "has lstrip set"),
    (lambda d: d["added_tokens"].append(_added("foo", single_word=True)), "has single_word set"),
    (lambda d: d["added_tokens"].append(_added("")), "empty added token"),
    (None, "WordPiece"),
    (lambda d: d.update(pre_tokenizer=_split_sequence(r"\p{N}{1,2}", r"\s+")), "sequence of 2 Split regexes"),
    (lambda d: d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        {"type": "Digits", "individual_digits": True}]}), "sequence ByteLevel+Digits"),
])
def test_not_convertible_falls_back_to_hf(trained, tmp_path, change, reason):
    path = _wordpiece(tmp_path) if change is None else _edit(trained["gpt2_style"], tmp_path, change)
    spec = load_tokenizer(TokenizerConfig(path=str(path), boundary="none"))
    assert spec.backend == "hf"
    assert reason in spec.backend_reason and spec.backend_reason.startswith("tokenizer backend hf")
    with pytest.raises(PrepError, match="tiktoken cannot run"):
        load_tokenizer(TokenizerConfig(path=str(path), backend="tiktoken", boundary="none"))


def test_merges_out_of_rank_order_rule_out_tiktoken_only(trained, tmp_path):
    """tiktoken ranks merges by their result's id; gigatoken follows the merges list like tokenizers."""
    path = _edit(trained["gpt2_style"], tmp_path, lambda d: d["model"]["merges"].reverse())
    spec = load_tokenizer(TokenizerConfig(path=str(path)))
    assert spec.backend in ("hf", "gigatoken")
    if spec.backend == "hf":
        assert "rank order" in spec.backend_reason
    with pytest.raises(PrepError, match="rank order"):
        load_tokenizer(TokenizerConfig(path=str(path), backend="tiktoken"))


def test_torture_mismatch_falls_back(trained, monkeypatch):
    """An engine that passes the static checks but gives other ids is not used."""
    monkeypatch.setenv("PREP_CACHE_DIR", "off")  # an earlier test proved this tokenizer: prove it again
    real = fast_bpe.build_tiktoken_engines

    def off_by_one(bpe, join_id=None, plain_added=None):
        enc, _ = real(bpe, None, plain_added)
        return (lambda text: enc(text.replace("7", "8"))), None
    monkeypatch.setattr(fast_bpe, "build_tiktoken_engines", off_by_one)
    monkeypatch.setattr(fast_bpe, "gigatoken_available", lambda: False)
    spec = load_tokenizer(TokenizerConfig(path=str(trained["gpt2_style"])))
    assert spec.backend == "hf" and "tiktoken gave other ids" in spec.backend_reason


# -- the encoder ----------------------------------------------------------------------------------
@pytest.mark.parametrize("boundary", ["eos", "bos", "both", "none"])
def test_encoder_boundaries_match_hf_encoder(trained, boundary):
    texts = ["hello world", "", "x", "<|endoftext|> as text", " \n "]
    cfg = TokenizerConfig(path=str(trained["gpt2_style"]), boundary=boundary, bos_token="<|im_start|>")
    fast = load_tokenizer(cfg)
    hf = load_tokenizer(TokenizerConfig(path=cfg.path, boundary=boundary, bos_token="<|im_start|>", backend="hf"))
    ids_f, len_f = fast.build_encoder().encode_batch(texts)
    ids_h, len_h = hf.build_encoder().encode_batch(texts)
    assert ids_f.dtype == ids_h.dtype == np.uint32
    np.testing.assert_array_equal(ids_f, ids_h)
    np.testing.assert_array_equal(len_f, len_h)
    assert len_f[1] == 0 and int(len_f.sum()) == ids_f.size
    # a proven engine's ids are known to fit uint16: cast while concatenating, no range check
    fast_enc, hf_enc = fast.build_encoder(), hf.build_encoder()
    assert fast_enc.fits(np.uint16) and not hf_enc.fits(np.uint16)
    narrow, narrow_len = fast_enc.encode_batch(texts, np.uint16)
    assert narrow.dtype == np.uint16
    np.testing.assert_array_equal(narrow, ids_h)
    np.testing.assert_array_equal(narrow_len, len_h)


# -- short documents a batch per call (pipeline/joined.py) ------------------------------------------
# gigatoken from ranks (special tokens first: ids shifted; last), a Split regex, an NFC normalizer; and
# from the tokenizer.json ("@json": gigatoken applies the normalizer itself)
JOINED = ["gpt2_style", "gpt2_specials_last", "llama3_style", "qwen2_style", "gpt2_style@json", "qwen2_style@json",
          "qwen25_style", "deepseek_v3_style", "added_tricky_raw",  # these 3: non-special added tokens cut out
          # SentencePiece: Llama 2's Prepend normalizer gives each piece between special tokens its "▁";
          # Gemma's has none; llama2_added also cuts non-special tokens out
          "llama2_style", "gemma_style", "llama2_added",
          # tiktoken: SmolLM's Digits + ByteLevel (no gigatoken pre-tokenizer for it), and backend tiktoken
          # given (Qwen 2.5: NFC, non-special tokens cut in Python)
          "smollm_style", "gpt2_style@tiktoken", "qwen25_style@tiktoken"]
TIKTOKEN_JOINED = ("smollm_style", "gpt2_style@tiktoken", "qwen25_style@tiktoken")
_joined_encoders: dict = {}


def _joined_spec(trained, name: str, backend: str = "auto"):
    """The spec of tokenizer `name` (bos <|im_start|>, <s> for SentencePiece), proven once per module."""
    key = ("spec", name, backend)
    if key not in _joined_encoders:
        bos = "<s>" if name in SENTENCEPIECE else "<|im_start|>"
        _joined_encoders[key] = _load_joined_spec(trained, name, bos_token=bos, backend=backend)
    return _joined_encoders[key]


def _load_joined_spec(trained, name: str, **cfg):
    from unittest import mock
    name, _, source = name.partition("@")
    if source == "tiktoken" and cfg.get("backend", "auto") != "hf":
        cfg["backend"] = "tiktoken"
    cfg = TokenizerConfig(path=str(trained[name]), **cfg)
    if source != "json":
        return load_tokenizer(cfg)
    with mock.patch.dict(os.environ, {"PREP_CACHE_DIR": "off"}), \
            mock.patch.object(fast_bpe, "gigatoken_ranks", lambda *a, **k: None):
        spec = load_tokenizer(cfg)
    assert cfg.backend == "hf" or isinstance(spec.engine_data, str)
    return spec


def _joined_pair(trained, name: str, boundary: str):
    """(hf encoder, the fast encoder as workers build it) for tokenizer `name`, made once per module."""
    from dataclasses import replace
    key = (name, boundary)  # proven once per tokenizer: the boundary does not change the proof
    if key not in _joined_encoders:
        _joined_encoders[key] = tuple(replace(_joined_spec(trained, name, backend), boundary=boundary).build_encoder()
                                      for backend in ("hf", "auto"))
    return _joined_encoders[key]


@pytest.mark.skipif(not fast_bpe.gigatoken_available(), reason="gigatoken not installed")
def test_gigatoken_joins_short_documents_where_proven(trained):
    for name in JOINED:
        spec = _joined_spec(trained, name)
        d = json.loads(trained[name.partition("@")[0]].read_text())
        ids = [*d["model"]["vocab"].values(), *(t["id"] for t in d["added_tokens"])]
        engine = "tiktoken" if name in TIKTOKEN_JOINED else "gigatoken"
        assert spec.backend == engine and spec.join_id == max(ids) + 1, name
        assert spec.build_encoder()._encode_joined is not None
    # not behind a Metaspace that prepends "▁" to the first piece only, nor where non-special added
    # tokens are matched in two passes
    for name in ("metaspace_style", "added_tricky"):
        spec = load_tokenizer(TokenizerConfig(path=str(trained[name])))
        assert spec.backend == "gigatoken" and spec.join_id is None, name
        assert spec.build_encoder()._encode_joined is None


@pytest.mark.skipif(not fast_bpe.gigatoken_available(), reason="gigatoken not installed")
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.one_of(_unicode, _mixed, _words, st.sampled_from(["", joined.SEPARATOR, f"a{joined.SEPARATOR}b",
                                                                         "\ufdd0", "\ufdd1 x"])),
                      min_size=2, max_size=10),
       name=st.sampled_from(JOINED), boundary=st.sampled_from(["eos", "bos", "both", "none"]),
       dtype=st.sampled_from([np.uint32, np.uint16]))
def test_joined_batches_give_tokenizers_ids(trained, texts, name, boundary, dtype):
    """Whatever the batch holds (empty documents, the separator itself, halves of it, any Unicode):
    the same ids and lengths as tokenizers, with every boundary policy and output dtype."""
    hf, fast = _joined_pair(trained, name, boundary)
    want, want_len = hf.encode_batch(texts)
    got, got_len = fast.encode_batch(texts, dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want.astype(dtype))
    np.testing.assert_array_equal(got_len, want_len)
    assert int(got_len.sum()) == got.size


@pytest.mark.skipif(not fast_bpe.gigatoken_available(), reason="gigatoken not installed")
def test_joined_path_is_taken_for_short_documents_only(trained, monkeypatch):
    hf = _joined_pair(trained, "gpt2_style", "eos")[0]
    fast = _joined_spec(trained, "gpt2_style").build_encoder()
    # no rebuild by the memory guard: it would replace the patched call (the suite's RSS grows)
    fast._rss_limit = 0
    calls = []
    real = fast._encode_joined
    monkeypatch.setattr(fast, "_encode_joined", lambda texts: calls.append(len(texts)) or real(texts))
    short = TRAIN_TEXT[:6]
    long = [t * 60 for t in TRAIN_TEXT[:6]]  # ~5,000 characters each
    for texts in (short, long, short[:1]):
        np.testing.assert_array_equal(fast.encode_batch(texts)[0], hf.encode_batch(texts)[0])
    assert calls == [6]  # not for long documents, nor for a batch of one
    assert fast.batch_docs(512) == 512 * joined.JOIN_BATCH_FACTOR and hf.batch_docs(512) == 512
    # a document holding the separator: that batch one document per call, that document by tokenizers
    held = ["x", f"plain {joined.SEPARATOR} text", "y"]
    before = fast.num_referred
    np.testing.assert_array_equal(fast.encode_batch(held)[0], hf.encode_batch(held)[0])
    assert calls == [6, 3] and fast.num_referred == before + 1


@pytest.mark.skipif(not fast_bpe.gigatoken_available(), reason="gigatoken not installed")
def test_worker_verification_checks_the_joined_path(trained):
    spec = load_tokenizer(TokenizerConfig(path=str(trained["gpt2_style"])))
    enc = spec.build_encoder()
    enc._rss_limit = 0  # no rebuild by the memory guard: it would replace the patched call
    good = enc._encode_joined
    enc._encode_joined = lambda texts: good([t.replace("fox", "cat") for t in texts])
    texts = ["the quick brown fox", "jumps"]
    enc.encode_batch(texts)  # not armed: not checked
    enc.verify_next_documents()
    with pytest.raises(FastPathMismatch, match="text 0"):
        enc.encode_batch(texts)


@pytest.mark.skipif(not fast_bpe.gigatoken_available(), reason="gigatoken not installed")
def test_a_joined_mismatch_in_the_proof_keeps_one_document_per_call(trained, monkeypatch):
    monkeypatch.setenv("PREP_CACHE_DIR", "off")  # prove it again
    real = joined.joined_encoder

    def off_by_one(*args, **kwargs):
        together = real(*args, **kwargs)

        def wrong(texts):
            ids, cuts = together(texts)
            ids[-1] = 3 if ids[-1] != 3 else 4
            return ids, cuts
        return wrong
    monkeypatch.setattr(joined, "joined_encoder", off_by_one)
    for name in ("gpt2_style", "gpt2_style@json"):  # from ranks, from a tokenizer.json
        spec = _load_joined_spec(trained, name)
        assert spec.backend == "gigatoken" and spec.join_id is None
        assert "cannot encode documents joined: other ids on text" in spec.backend_reason
        enc = spec.build_encoder()
        assert enc._encode_joined is None
        hf = _joined_spec(trained, name, backend="hf").build_encoder()
        held = ["x", f"plain {joined.SEPARATOR} text"]  # the engine does not know the separator now:
        np.testing.assert_array_equal(enc.encode_batch(held)[0], hf.encode_batch(held)[0])
        assert enc.num_referred == 0  # its own ids, no detour through tokenizers


def test_an_engine_id_past_the_dtype_keeps_the_range_check(trained, tmp_path):
    """A vocabulary that names an id past what its size implies (transformers#2825's shape): the
    spec's size covers the id (int32 shards), and were a spec's size ever short of it (here set so),
    the encoder does not claim its ids fit, and the worker's range check refuses the run instead of
    wrapping the id."""
    from dataclasses import replace

    from pipeline.readers import plan_units
    from pipeline.recipe import Recipe
    from pipeline.worker import WorkerContext, process_unit

    def move_id(d):
        vocab = d["model"]["vocab"]
        vocab[max(vocab, key=vocab.get)] = 70_000  # the last merge's token, common in the text below
    path = _edit(trained["gpt2_style"], tmp_path, move_id)
    spec = load_tokenizer(TokenizerConfig(path=str(path)))
    assert spec.backend != "hf" and spec.max_engine_id == 70_000 and spec.vocab_size == 70_001
    spec = replace(spec, vocab_size=len(json.loads(path.read_text())["model"]["vocab"]))  # the count of tokens
    assert not spec.build_encoder().fits(np.uint16) and spec.build_encoder().fits(np.uint32)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in TRAIN_TEXT) * 20)
    recipe = Recipe.from_dict({"name": "t", "source": {"path": str(corpus)}, "tokenizer": {"path": str(path)},
                               "output": {"dir": str(tmp_path / "out")}})
    ctx = WorkerContext(recipe, spec, tmp_path / "parts", tmp_path / "rejects")
    with pytest.raises(PrepError, match="70000 does not fit uint16"):
        for unit in plan_units(recipe, 1):
            process_unit(unit, ctx)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2**32 - 1), max_size=6), max_size=12),
       st.sampled_from(["eos", "bos", "both", "none"]), st.sampled_from([0, 3, 10**9]))
def test_boundary_ids_go_around_every_non_empty_document(docs, boundary, interleave_at):
    """Encoder._from_arrays (index arithmetic for short documents, interleaved arrays for long ones)
    == [bos, ids, eos] around each non-empty document."""
    from unittest import mock
    spec = SimpleNamespace(boundary=boundary, bos_id=7, eos_id=9, backend="tiktoken", unicode_gaps=())
    enc = ptok.Encoder(spec, encode_one=lambda text: np.zeros(0, np.uint32))
    with mock.patch.object(ptok, "INTERLEAVE_TOKENS_PER_DOC", interleave_at):
        ids, lengths = enc._from_arrays([np.array(d, np.uint32) for d in docs])
    pre = [7] if boundary in ("bos", "both") else []
    suf = [9] if boundary in ("eos", "both") else []
    want = [t for d in docs if d for t in (*pre, *d, *suf)]
    assert ids.dtype == np.uint32 and ids.tolist() == want
    assert lengths.tolist() == [len(d) + len(pre) + len(suf) if d else 0 for d in docs]
    with mock.patch.object(ptok, "INTERLEAVE_TOKENS_PER_DOC", interleave_at):  # cast while concatenating
        narrow, narrow_lengths = enc._from_arrays([np.array(d, np.uint32) & 0xFFFF for d in docs], np.uint16)
    assert narrow.dtype == np.uint16 and narrow.tolist() == [t & 0xFFFF for t in want]
    assert narrow_lengths.tolist() == lengths.tolist()


def test_worker_verification_catches_a_mismatch(trained):
    spec = load_tokenizer(TokenizerConfig(path=str(trained["gpt2_style"])))
    enc = spec.build_encoder()
    enc._rss_limit = 0  # no rebuild by the memory guard: it would replace the patched call
    good = enc._encode_one
    enc._encode_one = lambda text: good(text.replace("fox", "cat"))
    enc.encode_batch(["the quick brown fox"])  # not armed: not checked
    enc.verify_next_documents()
    with pytest.raises(FastPathMismatch, match="backend: hf"):
        enc.encode_batch(["the quick brown fox"])
    # past VERIFY_CHARS, documents are not checked any more
    enc = spec.build_encoder()
    enc.verify_next_documents()
    enc.encode_batch(["a" * ptok.VERIFY_CHARS])
    enc._encode_one = lambda text: np.zeros(1, np.uint32)
    enc.encode_batch(["the quick brown fox"])


def test_a_long_document_is_verified_by_its_prefix(trained, monkeypatch):
    """The check encodes at most VERIFY_CHARS characters with tokenizers: a document longer than that
    is checked by its prefix, which the fast engine encodes again (a 50 MB first document took 31 s)."""
    spec = load_tokenizer(TokenizerConfig(path=str(trained["gpt2_style"])))
    real = ptok._hf_tokenizer
    seen: list[int] = []

    def counting(definition):
        tok = real(definition)
        return SimpleNamespace(encode_batch_fast=lambda texts, **kw: seen.extend(map(len, texts))
                               or tok.encode_batch_fast(texts, **kw))
    monkeypatch.setattr(ptok, "_hf_tokenizer", counting)
    long_doc = " ".join(["the quick brown fox jumps"] * (ptok.VERIFY_CHARS // 10))  # ~2.5 x VERIFY_CHARS
    for early in (False, True):
        enc = spec.build_encoder()
        enc._rss_limit = 0
        good = enc._encode_one
        # a wrong id early in the document (fox -> cat) is inside the prefix; one past it is not
        enc._encode_one = (lambda text, good=good: good(text.replace("fox", "cat", 1))) if early else (
            lambda text, good=good: good(text[:-5] + text[-5:].replace("jumps", "leaps")))
        enc.verify_next_documents()
        seen.clear()
        if early:
            with pytest.raises(FastPathMismatch, match=r"text 1 \('the quick brown fox jumps"):
                enc.encode_batch(["short one", long_doc])
        else:
            enc.encode_batch(["short one", long_doc])  # the prefix is right: no mismatch
            enc.encode_batch(["not checked any more"])
        assert seen == [9, ptok.VERIFY_CHARS - 9]


def test_documents_given_to_tokenizers_are_not_verified_again(trained, monkeypatch):
    spec = load_tokenizer(TokenizerConfig(path=str(trained["gpt2_style"])))
    enc = spec.build_encoder()
    held = f"plain {joined.SEPARATOR} text"  # goes to tokenizers whole
    real = ptok._hf_tokenizer
    seen: list[str] = []

    def recording(definition):
        tok = real(definition)
        return SimpleNamespace(encode_batch_fast=lambda texts, **kw: seen.extend(texts) or tok.encode_batch_fast(texts, **kw),
                               encode=tok.encode)
    monkeypatch.setattr(ptok, "_hf_tokenizer", recording)
    enc.verify_next_documents()
    enc.encode_batch(["x", held, "y"])
    assert seen == ["x", "y"] and enc.num_referred == 1


def test_first_unit_is_verified_in_the_worker(trained, tmp_path, monkeypatch):
    """process_unit arms the check for unit 0: a wrong engine stops the run (not a failed unit)."""
    from pipeline.executor import tokenize
    from pipeline.recipe import Recipe
    real = ptok._build_fast_engines

    def wrong(spec):  # both ways of encoding give other ids
        encode, together = real(spec)
        return (lambda t: encode(t.replace("o", "0"))), together and (lambda ts: together([t.replace("o", "0") for t in ts]))
    monkeypatch.setattr(ptok, "_build_fast_engines", wrong)
    _corpus(tmp_path / "corpus.jsonl", 40)
    recipe = Recipe.from_dict({"name": "t", "source": {"path": str(tmp_path / "corpus.jsonl")},
                               "tokenizer": {"path": str(trained["gpt2_style"])},
                               "output": {"dir": str(tmp_path / "out")}, "num_workers": 1})
    with pytest.raises(FastPathMismatch):
        tokenize(recipe, show_progress=False)


@pytest.mark.skipif(not fast_bpe.gigatoken_available(), reason="gigatoken not installed")
def test_gigatoken_cache_guard_rebuilds(trained, monkeypatch):
    monkeypatch.setattr(ptok, "GIGATOKEN_CACHE_BYTES", -1)  # any size: rebuild after every batch
    spec = load_tokenizer(TokenizerConfig(path=str(trained["gpt2_style"])))
    assert spec.backend == "gigatoken"
    enc = spec.build_encoder()
    first = enc.encode_batch(TRAIN_TEXT[:8])
    second = enc.encode_batch(TRAIN_TEXT[:8])
    assert enc.num_rebuilds >= 1
    np.testing.assert_array_equal(first[0], second[0])



@pytest.mark.skipif(not fast_bpe.gigatoken_available(), reason="gigatoken not installed")
def test_gigatoken_cache_guard_returns_the_old_engine_before_building(trained, monkeypatch):
    """The limit after a rebuild is taken from the RSS once the old engine's heap is back with the
    OS: taken over the freed-but-kept heap, each rebuild raised the bound by another
    GIGATOKEN_CACHE_BYTES (a worker on 230 MB of new text: 124 -> 136 -> 152 MiB)."""
    spec = load_tokenizer(TokenizerConfig(path=str(trained["gpt2_style"])))
    enc = spec.build_encoder()
    events = []
    real_build = ptok._build_fast_engines
    monkeypatch.setattr(ptok, "_release_memory", lambda: events.append(("trim", enc._encode_one)))
    monkeypatch.setattr(ptok, "_build_fast_engines", lambda s: events.append(("build", None)) or real_build(s))
    monkeypatch.setattr(ptok, "_rss_bytes", lambda: 100 << 20)
    enc._rebuild()
    assert events == [("trim", None), ("build", None)]  # the old engine unreferenced, trimmed, then built
    assert enc._rss_limit == (100 << 20) + ptok.GIGATOKEN_CACHE_BYTES
    np.testing.assert_array_equal(enc.encode_batch(TRAIN_TEXT[:4])[0], spec.build_encoder().encode_batch(TRAIN_TEXT[:4])[0])

# -- end to end -----------------------------------------------------------------------------------
def _corpus(path: Path, n: int = 300) -> None:
    rng = np.random.default_rng(0)
    extra = ["<|endoftext|>", "  \n\n", "日本語", "😀", "naïve", "e\u0301", "1234567", "\t", "<tool_call>x</tool_call>",
             "<start_of_turn>", "<|im_start|><think>"]
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            parts = [TRAIN_TEXT[int(rng.integers(4))][: int(rng.integers(0, 90))] for _ in range(3)]
            parts.insert(int(rng.integers(3)), extra[i % len(extra)])
            f.write(json.dumps({"text": "".join(parts) if i % 50 else ""}) + "\n")


@pytest.mark.parametrize("name", ["gpt2_style", "llama3_style", "llama2_style", "qwen25_style", "llama2_added", "gemma_style",
                                  "smollm_style", "deepseek_v3_style", "gpt2"])
def test_prep_tokenize_auto_and_hf_are_byte_identical(trained, tmp_path, name):
    from typer.testing import CliRunner

    from pipeline.cli import app
    if name == "gpt2" and not GPT2_JSON.is_file():
        pytest.skip("GPT-2 tokenizer.json asset absent")
    tok_path = GPT2_JSON if name == "gpt2" else trained[name]
    _corpus(tmp_path / "corpus.jsonl")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"name: t\nsource: {{path: {tmp_path / 'corpus.jsonl'}}}\ntokenizer: {{path: {tok_path}}}\n"
                      f"output: {{dir: {tmp_path / 'out'}, shard_tokens: 5000, val_fraction: 0.1}}\n"
                      "num_workers: 1\nunit_bytes: 65536\n")
    outs = {}
    for backend in ("auto", "hf"):
        out = tmp_path / f"out_{backend}"
        res = CliRunner().invoke(app, ["tokenize", "--recipe", str(recipe), "--output", str(out), "--no-progress",
                                       "--set", f"tokenizer.backend={backend}"])
        assert res.exit_code == 0, res.output
        outs[backend] = out
        manifest = json.loads((out / "manifest.json").read_text())
        assert (manifest["tokenizer"]["backend"] == "hf") == (backend == "hf")
    files = sorted(p.relative_to(outs["hf"]) for p in outs["hf"].rglob("*") if p.suffix in (".bin", ".idx"))
    assert len(files) >= 4
    for rel in files:
        assert (outs["auto"] / rel).read_bytes() == (outs["hf"] / rel).read_bytes(), rel
