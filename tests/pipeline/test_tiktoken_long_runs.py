"""Whitespace runs past tiktoken's regex stack: the same ids as `tokenizers`, and the run goes on.

tiktoken's fancy-regex refuses a run of 999,999 or more whitespace characters (ValueError "Regex error
while tokenizing"); such a document used to end the whole run with a traceback on the tiktoken
backend. pipeline/tiktoken_encode.py splits that text with `regex` instead.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from pipeline import fast_bpe, joined
from pipeline import tokenizers as ptok
from pipeline.recipe import TokenizerConfig
from pipeline.tiktoken_encode import encode_split_in_python, tiktoken_array_encoder
from tests.conftest import DEMO_TOKENIZER, read_split, write_jsonl, write_recipe
from tests.pipeline.test_tokenize import run_cli

RUN = 1_000_000  # whitespace characters: tiktoken 0.14 refuses 999,999 and more
LONG_TEXTS = [" " * RUN + "b", "a" + "\n \t" * (RUN // 3 + 1) + "Hello  world", "\t" * RUN]


def _encoding(path: Path = DEMO_TOKENIZER, special: dict[str, int] | None = None) -> tiktoken.Encoding:
    bpe, why = fast_bpe.analyze(path.read_text())
    assert bpe is not None, why
    return tiktoken.Encoding("t", pat_str=bpe.pat_str, mergeable_ranks=bpe.mergeable_ranks,
                             special_tokens={**bpe.special_tokens, **(special or {})})


def _hf_ids(path: Path, texts: list[str]) -> list[list[int]]:
    tok = Tokenizer.from_file(str(path))
    ptok._make_plain(tok)
    return [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]


def test_tiktoken_itself_refuses_these_texts():
    """The premise: without the way around, each of them fails (if a tiktoken stops refusing them,
    the ids test below still holds)."""
    enc = _encoding()
    for text in LONG_TEXTS:
        with pytest.raises(ValueError, match="^Regex error"):
            enc.encode_to_numpy(text, disallowed_special=())


def test_long_whitespace_runs_get_tokenizers_ids():
    encode = tiktoken_array_encoder(_encoding())
    want = _hf_ids(DEMO_TOKENIZER, LONG_TEXTS)
    assert [encode(t).tolist() for t in LONG_TEXTS] == want
    assert all(len(w) > 1 for w in want)


_pieces = st.sampled_from([" ", "  ", "\n", "\t", "\r\n", "\u3000", "a", "Ab", "café", "12345", "'s", "'LL", "!?",
                           "日本", "😀", joined.SEPARATOR, "<|endoftext|>"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_pieces, max_size=40).map("".join))
def test_the_python_split_gives_tiktokens_own_ids(text):
    """Wherever tiktoken can encode a text, the way around gives the same ids, with the separator
    (the one special token the joined path allows) cut out as tiktoken cuts it."""
    enc = _encoding(special={joined.SEPARATOR: 999})
    allowed = frozenset({joined.SEPARATOR})
    want = enc.encode_to_numpy(text, allowed_special=allowed, disallowed_special=()).tolist()
    assert encode_split_in_python(enc, text, allowed).tolist() == want
    assert want.count(999) == text.count(joined.SEPARATOR)


def test_a_run_on_the_tiktoken_backend_keeps_such_a_document(tmp_path):
    texts = ["first document", "a" + " " * RUN + "b", "last one"]
    corpus = write_jsonl(tmp_path / "c.jsonl", texts)
    docs = {}
    for backend in ("tiktoken", "hf"):
        out = tmp_path / backend
        recipe = write_recipe(tmp_path / f"{backend}.yaml", corpus=corpus, tokenizer=DEMO_TOKENIZER, out=out,
                              tokenizer__backend=backend, output__val_fraction=0.0)
        code, output = run_cli("--recipe", recipe)
        assert code == 0, output
        docs[backend] = read_split(out, "train")
    assert len(docs["tiktoken"]) == 3
    assert all(np.array_equal(a, b) for a, b in zip(docs["tiktoken"], docs["hf"], strict=True))
    eos = ptok.load_tokenizer(TokenizerConfig(path=str(DEMO_TOKENIZER))).eos_id
    assert docs["tiktoken"][1][-1] == eos and len(docs["tiktoken"][1]) > 2
