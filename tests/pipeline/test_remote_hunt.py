"""Remote inputs end to end on loopback servers: what a run fetches, and what it makes of objects
that change, misbehaving servers and odd names (an http server here; S3 through moto below)."""

from __future__ import annotations

import csv
import io
import json
import re
import threading
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest

from pipeline.executor import tokenize
from pipeline.readers import plan_units
from pipeline.recipe import Recipe
from tests.conftest import DEMO_TOKENIZER, demo_texts, read_split
from tests.pipeline.test_http import _RangeHandler, http_servers


class _CountingRangeHandler(_RangeHandler):
    """Python's file server plus `Range: bytes=a-b` (206), as S3 or nginx answer; each GET's body
    bytes are added to `served` (per path) on the server."""

    def copyfile(self, source, outputfile):
        data = source.read()
        if self.command == "GET":
            with self.server.lock:
                self.server.served[self.path] = self.server.served.get(self.path, 0) + len(data)
        outputfile.write(data)


@pytest.fixture
def serve(tmp_path):
    """serve(handler) -> the server of tmp_path/www on loopback (stopped after the test)."""
    www = tmp_path / "www"
    www.mkdir()
    with http_servers(www) as start:
        yield www, start


def _recipe(tmp_path, path: str, name: str, workers: int = 2, unit_bytes: int = 65536, **source) -> Recipe:
    return Recipe.from_dict({"name": "t", "source": {"path": path, **source}, "unit_bytes": unit_bytes,
                             "tokenizer": {"path": str(DEMO_TOKENIZER)}, "num_workers": workers,
                             "output": {"dir": str(tmp_path / "out" / name), "val_fraction": 0.1,
                                        "shard_tokens": 30_000, "seed": 3}})


def _tree(out: Path) -> dict[str, bytes]:
    """A dataset's files (its run state and manifest left out: the manifest names the input path)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and ".prep" not in p.parts and p.name != "manifest.json"}


def _csv_corpus(path: Path) -> list[str]:
    texts = [t for t in demo_texts() if t]  # ~1.2 MB of text, with commas, quotes and newlines in fields
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["id", "text"], *[[i, t] for i, t in enumerate(texts)]])
    return texts


@pytest.mark.parametrize("workers", [1, 2])
def test_a_csv_url_is_fetched_once_and_gives_the_local_files_dataset(tmp_path, serve, workers):
    """A plain CSV URL was fetched twice: the plan scanned the whole object for its record cuts (quote
    parity), then the workers fetched each range again (2.0x the object's bytes in all). Now the
    parent's spooler fetches it once, cutting windows with the same scan (as for a compressed file),
    and the dataset is the local file's, byte for byte."""
    www, start = serve
    texts = _csv_corpus(www / "d.csv")
    size = (www / "d.csv").stat().st_size
    server = start(_CountingRangeHandler)
    local = tokenize(_recipe(tmp_path, str(www / "d.csv"), "local", workers, 1 << 18), show_progress=False)
    recipe = _recipe(tmp_path, f"{server.url}/d.csv", "remote", workers, 1 << 18)
    units = len(plan_units(recipe))
    server.served.clear()
    remote = tokenize(recipe, show_progress=False)
    assert sum(s.num_docs for s in remote.manifest.splits.values()) == len(texts) and units >= 4
    assert _tree(remote.out) == _tree(local.out) and remote.manifest.splits == local.manifest.splits
    # the object once, plus every later unit's look at the header row (csv.HEADER_BLOCK, 64 KiB: small
    # beside a real run's units of 2-16 MiB) and each worker's 1-byte range probe; before: 2.0x the object
    header_looks = (units - 1) * (64 << 10)
    assert size <= server.served["/d.csv"] - header_looks <= size + 16, (server.served, size, units)


def test_a_url_with_credentials_is_refused_with_them_masked(tmp_path, serve):
    """`http://user:password@host/d.jsonl` was read, and the password written into manifest.json (the
    recipe's path) and every message naming the file. Now it is refused before anything is read or
    written, the credentials masked in the message, which names where they go instead."""
    from pipeline.errors import PrepError
    www, start = serve
    (www / "d.jsonl").write_text(json.dumps({"text": "a document"}) + "\n")
    server = start(_CountingRangeHandler)
    port = server.url.rsplit(":", 1)[1]
    with pytest.raises(PrepError) as e:
        tokenize(_recipe(tmp_path, f"http://alice:S3CRET@127.0.0.1:{port}/d.jsonl", "cred"), show_progress=False)
    assert str(e.value).startswith(f"source.path: http://***@127.0.0.1:{port}/d.jsonl holds credentials")
    assert "S3CRET" not in str(e.value) and "alice" not in str(e.value) and "source.storage_options" in str(e.value)
    assert not server.served and not (tmp_path / "out" / "cred" / "manifest.json").exists()
    out = Recipe.from_dict({"name": "t", "source": {"path": str(www / "d.jsonl")},
                            "tokenizer": {"path": str(DEMO_TOKENIZER)},
                            "output": {"dir": "memory://k:S3CRET@bucket/ds", "local_dir": str(tmp_path / "stage")}})
    from pipeline.remote import tokenize_to_url
    with pytest.raises(PrepError, match=r"^output\.dir: memory://\*\*\*@bucket/ds holds credentials") as e:
        tokenize_to_url(out, out.output.dir, show_progress=False)
    assert "S3CRET" not in str(e.value)


class _UnsizedHandler(SimpleHTTPRequestHandler):
    """A server that declares no size: its GET body is chunked (Transfer-Encoding), or with `encoded`
    gzip-encoded (Content-Encoding: gzip, as for an object stored with that header: its Content-Length
    is the encoded body's, which fsspec does not take for the size). No ranges."""
    protocol_version = "HTTP/1.1"
    encoded = False

    def send_head(self):
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            return super().send_head()
        data = path.read_bytes()
        self.send_response(200)
        if self.encoded:
            import gzip
            data = gzip.compress(data)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(data)))
        else:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        return io.BytesIO(data)

    def copyfile(self, source, outputfile):
        data = source.read()
        if self.encoded:
            outputfile.write(data)
            return
        for i in range(0, len(data), 7_000):
            outputfile.write(b"%x\r\n%s\r\n" % (len(data[i:i + 7_000]), data[i:i + 7_000]))
        outputfile.write(b"0\r\n\r\n")

    def log_message(self, *args):
        pass


class _GzipEncodedHandler(_UnsizedHandler):
    encoded = True


@pytest.mark.parametrize("handler", [_UnsizedHandler, _GzipEncodedHandler], ids=["chunked", "gzip-encoded"])
@pytest.mark.parametrize("name", ["d.jsonl", "d.jsonl.gz", "d.csv"])
def test_a_server_that_declares_no_size_gives_the_local_files_dataset(tmp_path, serve, handler, name):
    """A body of no declared size (chunked, or gzip Content-Encoding) stopped the plan with "cannot read
    URL (TypeError: int() argument ... 'NoneType')". Now its size is counted from one read, it is read as
    one stream, and a gzip-encoded body is decoded once (a .gz under it: once by the server's encoding,
    once as the file's own): its documents are the local file's (one unit, not the local file's ranges)."""
    import gzip
    www, start = serve
    if name == "d.csv":
        _csv_corpus(www / name)
    else:
        body = "".join(json.dumps({"text": t}) + "\n" for t in demo_texts(300) if t).encode()
        (www / name).write_bytes(gzip.compress(body) if name.endswith(".gz") else body)
    server = start(handler)
    local = tokenize(_recipe(tmp_path, str(www / name), "local"), show_progress=False)
    remote = tokenize(_recipe(tmp_path, f"{server.url}/{name}", "remote"), show_progress=False)
    for split in ("train", "val"):
        want, got = read_split(local.out, split), read_split(remote.out, split)
        assert len(got) == len(want) > 0 and all(np.array_equal(a, b) for a, b in zip(got, want)), split


@pytest.mark.parametrize("handler", [_UnsizedHandler, _GzipEncodedHandler])
def test_parquet_on_a_server_that_declares_no_size_says_so(tmp_path, serve, handler):
    """Such a server answers no range request, and the refusal said it "answers range requests with the
    whole file", which it was never asked: now it says the server declared no size."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.errors import PrepError
    www, start = serve
    pq.write_table(pa.table({"text": [f"document {i}" for i in range(300)]}), www / "d.parquet")
    with pytest.raises(PrepError, match=r"d\.parquet: its server declares no size \(no Content-Length: .*\), so no "
                                        r"range of it can be asked, and Parquet is read from its end .*; download the "
                                        r"file and give its local path, or serve it with its size and range requests\."):
        tokenize(_recipe(tmp_path, f"{start(handler).url}/d.parquet", "pq"), show_progress=False)


class _StallingHandler(_CountingRangeHandler):
    """Ranges, but a GET body of more than 16 bytes stops at its half and sends nothing more until the
    server's `release` is set (the 1-byte range probe is answered)."""

    def copyfile(self, source, outputfile):
        data = source.read()
        if self.command == "GET" and len(data) > 16:
            outputfile.write(data[: len(data) // 2])
            outputfile.flush()
            self.server.release.wait(60)
            return
        outputfile.write(data)


class _TricklingHandler(_UnsizedHandler):
    """No ranges; the body in 8 pieces, 0.4 s apart (3.2 s in all), with its Content-Length."""
    protocol_version = "HTTP/1.0"

    def send_head(self):
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            return SimpleHTTPRequestHandler.send_head(self)
        data = path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        return io.BytesIO(data)

    def copyfile(self, source, outputfile):
        import time
        data = source.read()
        step = -(-len(data) // 8)
        for i in range(0, len(data), step):
            if self.command == "GET" and len(data) > 16:
                time.sleep(0.4)
            outputfile.write(data[i:i + step])
            outputfile.flush()


@pytest.fixture
def short_http_limits(monkeypatch):
    """aiohttp's default limit on a whole request (300 s, body included) made 2 s, and prep's stall
    limit 1 s: the same race at a test's scale. Fresh http filesystems (fsspec caches them, and each
    keeps its session)."""
    import aiohttp
    import fsspec.implementations.http as fsspec_http

    from pipeline.readers import url_reads
    monkeypatch.setattr(aiohttp.client, "DEFAULT_TIMEOUT", aiohttp.ClientTimeout(total=2, sock_connect=30))
    monkeypatch.setattr(url_reads, "STALL_SECONDS", 1, raising=False)
    fsspec_http.HTTPFileSystem.clear_instance_cache()
    yield
    fsspec_http.HTTPFileSystem.clear_instance_cache()


def test_a_stalled_server_stops_the_run_naming_the_url_and_the_stall(tmp_path, serve, short_http_limits):
    """A server that stops sending mid-body held the plan for aiohttp's 300 s (its look at the file's
    start then taken for "not a JSON array"), then the unit 300 s more, which failed with
    "(FSTimeoutError: )". Now a read that gets no byte for url_reads.STALL_SECONDS stops the run in one
    line naming the URL and the stall."""
    from pipeline.errors import InputUnreachable
    www, start = serve
    (www / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in demo_texts(300) if t))
    server = start(_StallingHandler)
    server.release = threading.Event()
    try:
        with pytest.raises(InputUnreachable) as e:
            tokenize(_recipe(tmp_path, f"{server.url}/d.jsonl", "stall", workers=1), show_progress=False)
    finally:
        server.release.set()
    assert str(e.value).startswith(f"{server.url}/d.jsonl: reading it failed"), str(e.value)
    assert "(no data for 1 s, or the timeout storage_options' client_kwargs set: the server stalled); check the network" in str(e.value) and "\n" not in str(e.value)


class _CountedStallHandler(_StallingHandler):
    """_StallingHandler that counts the GETs it stalls (`stalls` on the server)."""

    def copyfile(self, source, outputfile):
        data = source.read()
        if self.command == "GET" and len(data) > 16:  # the bodies _StallingHandler stalls
            with self.server.lock:
                self.server.stalls += 1
        super().copyfile(io.BytesIO(data), outputfile)


def test_a_stall_at_the_plans_first_look_costs_one_timeout(tmp_path, serve, short_http_limits):
    """The plan's look at a JSONL URL's first bytes (is it one JSON array?) took a stall for "no" and
    planned on: the unit then stalled a second time (60 s more) before the run said why. The look's
    network error stops the run now: one stalled request."""
    from pipeline.errors import InputUnreachable
    www, start = serve
    (www / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in demo_texts(900) if t))
    server = start(_CountedStallHandler)
    server.release, server.stalls = threading.Event(), 0
    try:
        with pytest.raises(InputUnreachable, match=r"d\.jsonl: reading it failed \(no data for 1 s"):
            tokenize(_recipe(tmp_path, f"{server.url}/d.jsonl", "stall-once", workers=1), show_progress=False)
    finally:
        server.release.set()
    assert server.stalls == 1


def test_a_stream_longer_than_aiohttps_request_limit_is_read_whole(tmp_path, serve, short_http_limits):
    """A file of a server without ranges is read as one stream: one request for all of it, which failed
    (FSTimeoutError) once it took longer than aiohttp's 300 s, however fast its bytes came. Only a
    stall (no byte for STALL_SECONDS) fails a read now."""
    www, start = serve
    texts = [t for t in demo_texts(300) if t]
    (www / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    server = start(_TricklingHandler)
    result = tokenize(_recipe(tmp_path, f"{server.url}/d.jsonl", "trickle", workers=1), show_progress=False)
    assert sum(s.num_docs for s in result.manifest.splits.values()) == len(texts)


@pytest.mark.parametrize("ranges", [True, False])
def test_a_file_rewritten_at_its_size_on_a_server_without_etags_stops_the_run(tmp_path, serve, monkeypatch, ranges):
    """Python's http.server (and many static servers) send Last-Modified but no ETag: a file rewritten at
    the same size after the plan was read at the old plan's offsets, the dataset mixing old and new
    documents without a word. Last-Modified is its version now: the run stops naming the file."""
    import os

    from pipeline import input_changes
    from pipeline.errors import InputUnreachable
    www, start = serve
    texts = [t for t in demo_texts(600) if t]
    old = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
    new = "".join(json.dumps({"text": t.swapcase()}) + "\n" for t in texts).encode()
    assert len(old) == len(new) > 4 * 65536 and old != new
    (www / "d.jsonl").write_bytes(old)
    server = start(_CountingRangeHandler if ranges else SimpleHTTPRequestHandler)
    url = f"{server.url}/d.jsonl"
    real = input_changes.describe

    def rewritten_after_the_plan(*a, **k):
        monkeypatch.setattr(input_changes, "describe", real)
        mtime = (www / "d.jsonl").stat().st_mtime
        (www / "d.jsonl").write_bytes(new)
        os.utime(www / "d.jsonl", (mtime + 10, mtime + 10))  # Last-Modified is to the second
        return real(*a, **k)
    monkeypatch.setattr(input_changes, "describe", rewritten_after_the_plan)
    with pytest.raises(InputUnreachable, match=rf"^{re.escape(url)}: changed since this run planned it \(version "
                                               r".* GMT then, .* GMT now\)"):
        tokenize(_recipe(tmp_path, url, "rewritten"), show_progress=False)
