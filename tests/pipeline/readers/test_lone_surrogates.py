"""A lone UTF-16 surrogate escaped in JSON Lines (`{"text": "a\\ud800b"}`): U+FFFD under
encoding_errors: replace (as invalid UTF-8 bytes are), else a lone_surrogate reject that says what it is."""

from __future__ import annotations

import pytest

from pipeline.readers import jsonl as jsonl_reader
from pipeline.readers.surrogates import mend_escapes
from pipeline.recipe import SourceConfig
from tests.pipeline.readers import readerkit

LINES = [
    rb'{"text": "a\ud800b"}',                        # a high one alone
    rb'{"text": "ok \ud83d\ude00"}',                  # a pair: one character
    rb'{"text": "x\\ud800y"}',                        # an escaped backslash, then text
    rb'{"t": "\udc00\ud800\ud800", "text": "z"}',     # a low one alone, and two highs, in another field
    rb'{"text": "cut \ud83d", oops}',                 # and not JSON anyway
    b'{"text": "\xff only"}',                         # invalid UTF-8 (orjson: "...: surrogates not allowed")
    b'{"text": "\xff and \\uDBFF"}',                  # both
]


def read(tmp_path, errors: str):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"\n".join(LINES) + b"\n")
    source = SourceConfig(path=str(path), format="jsonl", text_field="text", encoding_errors=errors)
    _, texts, _, bad = readerkit.read_all(jsonl_reader, source, [str(path)])
    return texts, [(r["line"], r["reason"]) for r in bad], bad


def test_under_replace_a_lone_surrogate_is_the_replacement_character(tmp_path):
    """It was a malformed_json reject under replace too; the line's record is read, U+FFFD for each."""
    texts, rejects, _ = read(tmp_path, "replace")
    assert texts == ["a\ufffdb", "ok \U0001f600", "x\\ud800y", "z", "\ufffd only", "\ufffd and \ufffd"]
    assert rejects == [(5, "malformed_json")]


def test_under_skip_a_lone_surrogate_is_a_reject_that_says_so(tmp_path):
    """Its reason was malformed_json, which sent the user looking for broken JSON."""
    texts, rejects, bad = read(tmp_path, "skip")
    assert texts == ["ok \U0001f600", "x\\ud800y"]
    assert rejects == [(1, "lone_surrogate"), (4, "lone_surrogate"), (5, "malformed_json"), (6, "invalid_utf8"),
                       (7, "invalid_utf8")]
    assert bad[1]["detail"].startswith("3 lone UTF-16 surrogate escape(s)")
    assert "encoding_errors: replace" in bad[0]["detail"]


@pytest.mark.parametrize("text,want,found", [
    (rb'"\ud800"', rb'"\ufffd"', 1),
    (rb'"\uD83D\uDE00"', rb'"\uD83D\uDE00"', 0),
    (rb'"\\ud800 \\\ud800"', rb'"\\ud800 \\\ufffd"', 1),
    (rb'"\ude00\ud83d"', rb'"\ufffd\ufffd"', 2),
    (rb'"\ud83d\u0041"', rb'"\ufffd\u0041"', 1),
])
def test_only_lone_surrogate_escapes_are_mended(text, want, found):
    assert mend_escapes(text) == (want, found)
