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


def test_other_query_parameters_are_kept_as_written_so_two_objects_keep_two_names():
    """name() decoded and re-encoded the kept query: `f=a%20b` and `f=a+b` (two objects on servers that
    read + literally) became one name, and one was read twice; `?download` gained an "=" (review)."""
    space, plus = "https://h/get?f=a%20b&X-Amz-Signature=1", "https://h/get?f=a+b&X-Amz-Signature=2"
    assert signed_urls.name(space) == "https://h/get?f=a%20b"
    assert signed_urls.name(plus) == "https://h/get?f=a+b"
    assert signed_urls.name("https://h/d?download&X-Amz-Credential=a%2Fb&sig=x") == "https://h/d?download"


def test_an_hf_sources_signed_data_files_stay_out_of_what_is_written():
    """content_dict named `source.path` without its signature but kept `data_files` as written: a signed
    URL there went into manifest.json and plan.json, and a re-signed one was another recipe (review)."""
    signed = _signed("https://h/d.jsonl", "SECRETd")
    for data_files in (signed, [signed]):
        r = Recipe.from_dict({"name": "t", "source": {"path": "json", "format": "hf", "data_files": data_files},
                              "tokenizer": {"path": str(DEMO_TOKENIZER)}, "output": {"dir": "o"}})
        written = json.dumps(r.content_dict())
        assert "SECRETd" not in written and "AKIAEXAMPLE" not in written and "https://h/d.jsonl" in written
        assert r.sources[0].data_files == data_files  # what datasets is given to fetch: signed


def test_an_error_quoting_a_signed_url_is_printed_with_its_secrets_masked(tmp_path):
    """A recipe error quoting source.path (`cannot infer the format of 'https://h/download?id=5&...'`: a
    pre-signed download link without a suffix) printed the signature; so did an open's fsspec error."""
    from typer.testing import CliRunner

    from pipeline.cli import app
    recipe = tmp_path / "r.yaml"
    recipe.write_text(json.dumps({"name": "t", "source": {"path": _signed("https://h.example/download", "SECRETe")},
                                  "tokenizer": {"path": str(DEMO_TOKENIZER)}, "output": {"dir": str(tmp_path / "o")}}))
    result = CliRunner().invoke(app, ["tokenize", "-r", str(recipe), "--no-progress"])
    assert result.exit_code == 1 and "cannot infer the format" in result.output, result.output
    assert "SECRETe" not in result.output and "AKIAEXAMPLE" not in result.output
    from pipeline.readers.base import unreadable
    error = unreadable("https://h/d.jsonl", FileNotFoundError(_signed("https://h/d.jsonl", "SECRETo")))
    assert "SECRETo" not in str(error) and "AKIAEXAMPLE" not in str(error)
