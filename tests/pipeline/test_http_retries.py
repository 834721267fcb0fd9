"""Transient http(s) failures (5xx, 429 Too Many Requests, a connection the server drops) are retried
a few times with backoff before the run stops naming the URL; other 4xx answers never are. A loopback server fails the
requests it is told to."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from pipeline.errors import InputUnreachable, PrepError
from pipeline.executor import tokenize
from pipeline.readers import url_reads
from pipeline.recipe import Recipe
from tests.conftest import DEMO_TOKENIZER, demo_texts, read_split
from tests.pipeline.test_http import _RangeHandler, http_servers


class _FailingHandler(_RangeHandler):
    """Ranges as S3 answers them, but the requests numbered in `fail` (1-based, HEAD and GET) get
    `status` (an int), or, for "reset", a connection closed with no answer."""
    fail: set[int] = set()
    status: int | str = 503
    count = 0
    lock = threading.Lock()

    def send_head(self):
        with self.lock:
            _FailingHandler.count += 1
            failing = _FailingHandler.count in self.fail
        if not failing:
            return super().send_head()
        if self.status == "reset":
            self.close_connection = True
            return None
        self.send_error(self.status)
        return None


@pytest.fixture
def failing(tmp_path, monkeypatch):
    """(url of d.jsonl on a _FailingHandler server, its texts); retries 10 ms apart."""
    monkeypatch.setattr(url_reads, "RETRY_DELAYS", (0.01, 0.01, 0.01, 0.01), raising=False)
    www = tmp_path / "www"
    www.mkdir()
    texts = [t for t in demo_texts(900) if t]
    (www / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    _FailingHandler.count, _FailingHandler.fail, _FailingHandler.status = 0, set(), 503
    with http_servers(www) as start:
        yield f"{start(_FailingHandler).url}/d.jsonl", texts


def _recipe(path: str, out) -> Recipe:  # one worker: the retry delays set here hold in the units
    return Recipe.from_dict({"name": "t", "source": {"path": path}, "unit_bytes": 65536,
                             "tokenizer": {"path": str(DEMO_TOKENIZER)}, "num_workers": 1,
                             "output": {"dir": str(out), "val_fraction": 0.1, "shard_tokens": 30_000, "seed": 3}})


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504, "reset"])
def test_transient_failures_are_retried_and_the_run_gives_the_whole_dataset(tmp_path, failing, status):
    url, texts = failing
    whole = tokenize(_recipe(url, tmp_path / "whole"), show_progress=False)
    # the plan's first look (a HEAD, then fsspec's GET), twice in a row, and two unit reads later on
    _FailingHandler.count, _FailingHandler.status = 0, status
    _FailingHandler.fail = {1, 2, 3, 4, _FailingHandler.count + 12, _FailingHandler.count + 15}
    got = tokenize(_recipe(url, tmp_path / "got"), show_progress=False)
    assert _FailingHandler.count > 15 and not got.manifest.failed_units
    for split in ("train", "val"):
        a, b = read_split(whole.out, split), read_split(got.out, split)
        assert len(a) == len(b) > 0 and all(np.array_equal(x, y) for x, y in zip(a, b))


def test_a_server_that_keeps_failing_stops_the_run_after_five_tries(tmp_path, failing):
    url, _ = failing
    tokenize(_recipe(url, tmp_path / "planned"), show_progress=False)  # how many requests a whole run makes
    _FailingHandler.fail = set(range(_FailingHandler.count + 8, 10**6))  # from a unit's read on: always 503
    with pytest.raises(InputUnreachable, match=rf"^{url}: reading it failed( at byte [\d,]+)? \(ClientResponseError: "
                                               r"503, .*, 5 tries over 0.04 s\); check the network"):
        tokenize(_recipe(url, tmp_path / "out"), show_progress=False)


@pytest.mark.parametrize("status, says", [(403, r"cannot read {url} \(its server answered 403 Forbidden\); check the URL "
                                                r"\(a pre-signed one may have expired\)"), (404, r"{url} does not exist")])
def test_a_4xx_answer_is_not_retried(tmp_path, failing, status, says):
    """Nor taken for another: a 403 said "does not exist" (fsspec's info() makes FileNotFoundError of any failure)."""
    url, _ = failing
    _FailingHandler.fail, _FailingHandler.status = set(range(1, 10**6)), status
    with pytest.raises(PrepError, match=says.format(url=url)):
        tokenize(_recipe(url, tmp_path / "out"), show_progress=False)
    assert _FailingHandler.count == 2  # fsspec's HEAD, then its GET: one try
