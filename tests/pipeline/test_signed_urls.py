"""Pre-signed URLs on a loopback server that checks their signature: the signature is a credential,
kept out of everything a run writes and says, and a URL re-signed before a resume is the same input."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from pipeline import signed_urls
from pipeline.errors import InputUnreachable
from pipeline.executor import tokenize
from pipeline.recipe import Recipe
from tests.conftest import DEMO_TOKENIZER, demo_texts
from tests.pipeline.test_http import _RangeHandler, http_servers


class _SigningServerHandler(_RangeHandler):
    """Ranges as S3 answers them, for a URL whose X-Amz-Signature is valid: each signature serves
    `uses[sig]` GETs, then expires (403, as S3 answers an expired URL)."""
    uses: dict[str, int] = {}
    lock = threading.Lock()

    def send_head(self):
        query = parse_qs(urlsplit(self.path).query)
        sig = (query.get("X-Amz-Signature") or [""])[0]
        with self.lock:
            left = self.uses.get(sig, 0)
            if self.command == "GET":
                self.uses[sig] = left - 1
        if left <= 0:
            self.send_error(403, "Request has expired")
            return None
        self.path = urlsplit(self.path).path  # the file, less the query
        return super().send_head()


def _signed(url: str, sig: str) -> str:
    return (f"{url}?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAEXAMPLE%2F20260101%2Fus-east-1%2Fs3"
            f"&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature={sig}")


def _recipe(path: str, out: Path) -> Recipe:
    return Recipe.from_dict({"name": "t", "source": {"path": path}, "unit_bytes": 65536,
                             "tokenizer": {"path": str(DEMO_TOKENIZER)}, "num_workers": 2,
                             "output": {"dir": str(out), "val_fraction": 0.1, "shard_tokens": 30_000, "seed": 3}})


def _written(out: Path) -> str:
    """Every text file the run wrote (manifest, plan, journal, rejects), as one string."""
    return "\n".join(p.read_text(errors="replace") for p in out.rglob("*")
                     if p.is_file() and p.suffix not in (".bin", ".idx"))


def test_a_signed_url_is_named_without_its_signature_and_a_re_signed_one_resumes_the_run(tmp_path):
    www = tmp_path / "www"
    www.mkdir()
    texts = [t for t in demo_texts(900) if t]
    (www / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    with http_servers(www) as start:
        url = f"{start(_SigningServerHandler).url}/d.jsonl"
        _SigningServerHandler.uses.update({"SECRETone": 14, "SECRETtwo": 10**6, "SECRETref": 10**6})
        ref = tokenize(_recipe(_signed(url, "SECRETref"), tmp_path / "ref"), show_progress=False)
        out = tmp_path / "out"
        with pytest.raises(InputUnreachable) as stop:  # the first signature expires mid-run
            tokenize(_recipe(_signed(url, "SECRETone"), out), show_progress=False)
        assert "403" in str(stop.value) and str(stop.value).startswith(f"{url}: ")
        assert "SECRET" not in str(stop.value) and "SECRET" not in _written(out)
        resumed = tokenize(_recipe(_signed(url, "SECRETtwo"), out), show_progress=False)
    assert 0 < resumed.units_run < resumed.units_total  # the units done under the first signature are kept
    assert resumed.manifest.splits == ref.manifest.splits
    assert all((out / p.relative_to(ref.out)).read_bytes() == p.read_bytes() for p in ref.out.rglob("*.bin"))
    written = _written(out)
    assert "SECRET" not in written and "X-Amz-" not in written and url in written


def test_a_signed_urls_name_keeps_its_other_query_and_redact_masks_secrets():
    signed = "https://h/d.jsonl?download=1&X-Amz-Credential=AK%2Fx&X-Amz-Signature=abc"
    assert signed_urls.name(signed) == "https://h/d.jsonl?download=1"
    assert signed_urls.name("https://h/d.jsonl?download=1") == "https://h/d.jsonl?download=1"
    assert signed_urls.name("s3://b/k?X-Amz-Signature=abc") == "s3://b/k?X-Amz-Signature=abc"  # a key's "?"
    sas = "https://a.blob.core.windows.net/c/d.jsonl?sv=2022-11-02&se=2026-01-01&sr=b&sp=r&sig=xyz%3D"
    assert signed_urls.name(sas) == "https://a.blob.core.windows.net/c/d.jsonl"
    assert signed_urls.redact(f"403, url='{signed}'") == \
        "403, url='https://h/d.jsonl?download=1&X-Amz-Credential=***&X-Amz-Signature=***'"


def test_an_expired_signed_url_at_an_open_is_named_by_its_403_not_as_gone():
    """fsspec's http info() makes a FileNotFoundError(<signed URL>) of a 403: a run whose signature expired
    as a unit opened the file said the URL was "gone since this run planned it", the signature in it."""
    import aiohttp

    from pipeline.readers import url_reads
    name = "http://h/d.jsonl"
    signed = signed_urls.remember(_signed(name, "SECRETx"))
    assert signed == name
    try:
        try:
            from yarl import URL
            info = aiohttp.RequestInfo(URL(_signed(name, "SECRETx")), "GET", {}, URL(_signed(name, "SECRETx")))
            raise aiohttp.ClientResponseError(info, (), status=403, message="Forbidden")
        except aiohttp.ClientResponseError as e:
            raise FileNotFoundError(_signed(name, "SECRETx")) from e
    except FileNotFoundError as e:
        error = url_reads.gone(name, e)
    assert isinstance(error, InputUnreachable) and not isinstance(error, url_reads.InputChanged)
    assert str(error).startswith(f"{name}: reading it failed (ClientResponseError: 403, message='Forbidden'") and "SECRET" not in str(error)
    missing = FileNotFoundError(_signed(name, "SECRETx"))
    assert isinstance(url_reads.gone(name, missing), url_reads.InputChanged)
    assert "SECRET" not in str(url_reads.gone(name, missing))
