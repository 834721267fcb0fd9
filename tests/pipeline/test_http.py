"""http(s) URLs as sources, served on loopback: a server that answers range requests gets byte-range
units; one that answers with the whole file (Python's http.server) gets one unit read as a stream
(that stopped the run with fsspec's "doesn't appear to support range requests" traceback)."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from pipeline.errors import PrepError
from pipeline.executor import tokenize
from pipeline.readers import base, plan_units
from pipeline.recipe import Recipe
from tests.conftest import DEMO_TOKENIZER, demo_texts, read_split


class _RangeHandler(SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler plus `Range: bytes=a-b` (206 Partial Content), as S3, nginx or a CDN."""

    def send_head(self):
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        path = Path(self.translate_path(self.path))
        if m is None or not path.is_file():
            return super().send_head()
        data = path.read_bytes()
        a = int(m.group(1))
        b = min(int(m.group(2)) if m.group(2) else len(data) - 1, len(data) - 1)
        if a >= len(data):
            self.send_error(416)
            return None
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {a}-{b}/{len(data)}")
        self.send_header("Content-Length", str(b - a + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        import io
        return io.BytesIO(data[a:b + 1])

    def log_message(self, *args):  # quiet
        pass


class _PlainHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class _SortLinksHandler(_PlainHandler):
    """Directory pages with an Apache listing's column-sort links (`?C=N;O=D`) above the files'."""

    def list_directory(self, path):
        import io
        import os
        names = sorted(n + "/" * os.path.isdir(os.path.join(path, n)) for n in os.listdir(path))
        body = "".join(f'<a href="{h}">{h}</a>\n' for h in ["?C=N;O=D", "?C=M;O=A", "/", *names]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)


class _DroppingHandler(_PlainHandler):
    """No ranges, and while `cut`, a file's body cut at its half: the connection closes short of its
    Content-Length."""
    cut = True

    def copyfile(self, source, outputfile):
        if not _DroppingHandler.cut:
            return super().copyfile(source, outputfile)
        data = source.read()
        outputfile.write(data[: len(data) // 2])
        outputfile.flush()
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.served: dict[str, int] = {}  # body bytes per path, for handlers that count them (test_remote_hunt)
        self.lock = threading.Lock()

    def handle_error(self, request, client_address):  # the range probe hangs up mid-body: not an error
        pass


@contextlib.contextmanager
def http_servers(www: Path):
    """start(handler) -> a started _Server of `www` on loopback (its base URL in .url); all stopped at the end."""
    servers = []

    def start(handler) -> _Server:
        server = _Server(("127.0.0.1", 0), functools.partial(handler, directory=str(www)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        server.url = f"http://127.0.0.1:{server.server_address[1]}"
        return server
    try:
        yield start
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
        base._RANGES.clear()


@pytest.fixture
def serve(tmp_path):
    """serve(handler) -> base URL of tmp_path/www on loopback; servers stopped after the test."""
    www = tmp_path / "www"
    www.mkdir()
    with http_servers(www) as start:
        yield www, lambda handler: start(handler).url


def _recipe(tmp_path, url: str, name: str, **source) -> Recipe:
    return Recipe.from_dict({"name": "t", "source": {"path": url, **source}, "unit_bytes": 65536,
                             "tokenizer": {"path": str(DEMO_TOKENIZER)}, "num_workers": 2,
                             "output": {"dir": str(tmp_path / "out" / name), "val_fraction": 0.1, "shard_tokens": 10**8}})


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_server_without_ranges_gives_one_streamed_unit_and_the_same_documents(tmp_path, serve, fmt):
    www, start = serve
    texts = [t for t in demo_texts(600) if t]
    if fmt == "jsonl":
        (www / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    else:
        import csv
        with open(www / "d.csv", "w", newline="") as f:
            csv.writer(f).writerows([("text",), *((t,) for t in texts)])
    assert (www / f"d.{fmt}").stat().st_size > 4 * 65536
    local = tokenize(_recipe(tmp_path, str(www / f"d.{fmt}"), "local"), show_progress=False)
    want = {s: read_split(local.out, s) for s in ("train", "val")}
    for handler, ranged in ((_RangeHandler, True), (_PlainHandler, False)):
        url = f"{start(handler)}/d.{fmt}"
        base._RANGES.clear()
        recipe = _recipe(tmp_path, url, handler.__name__)
        units = plan_units(recipe)
        assert (len(units) > 1) == ranged and base.serves_ranges(url) == ranged
        result = tokenize(recipe, show_progress=False)
        for split, docs in want.items():
            got = read_split(result.out, split)
            assert len(got) == len(docs) > 0 and all(np.array_equal(a, b) for a, b in zip(got, docs))


def test_parquet_on_a_server_without_ranges_says_so(tmp_path, serve):
    """Parquet is read from its end by ranges: on such a server a run gets a message that says why,
    not "not a readable Parquet file ... replace the file"."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    www, start = serve
    pq.write_table(pa.table({"text": [f"document {i}" for i in range(300)]}), www / "d.parquet")
    ranged = _recipe(tmp_path, f"{start(_RangeHandler)}/d.parquet", "pq-ranged")
    assert tokenize(ranged, show_progress=False).manifest.splits["train"].num_docs > 250
    plain = _recipe(tmp_path, f"{start(_PlainHandler)}/d.parquet", "pq-plain")
    with pytest.raises(PrepError, match=r"d\.parquet: its server answers range requests with the whole file, and "
                                        r"Parquet is read from its end"):
        tokenize(plain, show_progress=False)


def test_a_glob_on_a_live_http_server_lists_the_files_its_directory_page_links(tmp_path, serve):
    """http.server answers a directory with an HTML page of links, which fsspec lists: a glob matches
    exactly the files a local glob of the same tree does. `data/*` took the page of the subdirectory
    `data/sub/` for a file (every URL is one over http), and read that HTML as input; on an Apache-like
    listing it took the column-sort links (`data/?C=N;O=D`, the page again) too."""
    from urllib.parse import unquote

    from pipeline.source_files import expand_files
    www, start = serve
    (www / "data" / "sub").mkdir(parents=True)
    for name in ("data/a.jsonl", "data/b c.jsonl", "data/sub/d.jsonl", "other/e.jsonl"):
        (www / name).parent.mkdir(exist_ok=True)
        (www / name).write_text(json.dumps({"text": f"document {name}"}) + "\n")
    url = start(_PlainHandler)
    sorting = start(_SortLinksHandler)

    def listed(pattern: str, url: str = url) -> list[str]:
        recipe = _recipe(tmp_path, f"{url}/{pattern}", "x", format="jsonl")
        return [unquote(f[len(url) + 1:]) for f in expand_files(recipe.sources[0])]

    def local(pattern: str) -> list[str]:
        recipe = _recipe(tmp_path, str(www / pattern), "x", format="jsonl")
        return [f[len(str(www)) + 1:] for f in expand_files(recipe.sources[0])]
    for pattern in ("data/*.jsonl", "data/*", "data/**/*.jsonl", "data/sub/*", "*/*.jsonl"):
        assert listed(pattern) == listed(pattern, sorting) == local(pattern), pattern
    assert listed("data/*") == ["data/a.jsonl", "data/b c.jsonl"]
    result = tokenize(_recipe(tmp_path, f"{url}/data/*", "glob", format="jsonl"), show_progress=False)
    assert sum(s.num_docs for s in result.manifest.splits.values()) == 2 and not result.manifest.skipped


def test_a_body_cut_short_on_a_server_without_ranges_stops_the_run_in_one_line(tmp_path, serve):
    """A streamed URL (no range support) whose connection closed mid-body raised aiohttp's
    ClientPayloadError out of the run, a traceback. Now it is InputUnreachable naming the URL (and the
    byte, when some were read), which stops the run under on_bad_record: skip (the default) too, and the re-run once the
    server is whole again finishes with every document."""
    from pipeline.errors import InputUnreachable
    www, start = serve
    texts = [t for t in demo_texts(600) if t]
    (www / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    _DroppingHandler.cut = True
    recipe = _recipe(tmp_path, f"{start(_DroppingHandler)}/d.jsonl", "cut")
    with pytest.raises(InputUnreachable, match=r"/d\.jsonl: reading it failed( at byte [\d,]+)? \(ClientPayloadError: .*\); "
                                               r"check the network"):
        tokenize(recipe, show_progress=False)
    assert not (tmp_path / "out" / "cut" / "manifest.json").exists()
    _DroppingHandler.cut = False
    result = tokenize(recipe, show_progress=False)
    assert sum(s.num_docs for s in result.manifest.splits.values()) == len(texts) and not result.manifest.failed_units


def test_a_pre_signed_url_is_named_by_its_path_not_its_query(tmp_path, serve):
    """`https://host/d.jsonl.gz?X-Amz-Signature=...` was named by its query's end: no format could be
    inferred, and the gzip body was refused with "rename it to d.jsonl.gz?X-Amz-Signature=abc.gz". The
    query is no part of the name now: the same documents as the local file."""
    import gzip
    www, start = serve
    texts = [t for t in demo_texts(300) if t]
    (www / "d.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in texts).encode()))
    local = tokenize(_recipe(tmp_path, str(www / "d.jsonl.gz"), "local"), show_progress=False)
    for handler in (_RangeHandler, _PlainHandler):
        base._RANGES.clear()
        url = f"{start(handler)}/d.jsonl.gz?X-Amz-Expires=3600&X-Amz-Signature=abc"
        result = tokenize(_recipe(tmp_path, url, handler.__name__), show_progress=False)
        for split in ("train", "val"):
            want, got = read_split(local.out, split), read_split(result.out, split)
            assert len(got) == len(want) > 0 and all(np.array_equal(a, b) for a, b in zip(got, want))
