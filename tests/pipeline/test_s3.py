"""fsspec URLs end to end against a real S3-protocol server (moto, on loopback): input and output."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import unittest.mock as mock
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.executor import tokenize
from pipeline.manifest import read_manifest
from pipeline.recipe import Recipe
from tests.conftest import DEMO_TOKENIZER, demo_texts

s3fs = pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")


@pytest.fixture(scope="module")
def s3():
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    options = {"key": "testing", "secret": "testing", "endpoint_url": f"http://{host}:{port}",
               "client_kwargs": {"region_name": "us-east-1"}}
    import boto3
    boto3.client("s3", endpoint_url=options["endpoint_url"], aws_access_key_id="testing",
                 aws_secret_access_key="testing", region_name="us-east-1").create_bucket(Bucket="prep-test")
    fs = s3fs.S3FileSystem(**options)
    yield fs, options
    server.stop()


def recipe(sources, out: str, options: dict | None = None, workers: int = 1, **output_keys) -> Recipe:
    output = {"dir": out, "shard_tokens": 30_000, "val_fraction": 0.1, "seed": 3, **output_keys}
    if options is not None:
        output["storage_options"] = options
    return Recipe.from_dict({"name": "s3", "sources": sources, "tokenizer": {"path": str(DEMO_TOKENIZER)},
                             "output": output, "num_workers": workers, "unit_bytes": 65536})


@contextlib.contextmanager
def ranges_read(fs):
    """The (start, end) of each cat_file request made within (the plan's range reads); the plan gets
    this filesystem instance again (fsspec caches filesystems by their options)."""
    reads, real = [], fs.cat_file

    def counting(path, start=None, end=None, **kw):
        reads.append((start, end))
        return real(path, start=start, end=end, **kw)
    with mock.patch.object(fs, "cat_file", counting):
        yield reads


def local_tree(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and ".prep" not in p.parts and p.name != "manifest.json"}


def test_s3_input_and_output_equal_a_local_run(tmp_path, s3):
    fs, options = s3
    texts = [t for t in demo_texts(900) if t]
    parts = [texts[:300], texts[300:600], texts[600:]]
    local = tmp_path / "in"
    local.mkdir()
    for i in range(2):
        (local / f"p{i}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in parts[0][i::2]))
    pq.write_table(pa.table({"text": parts[1]}), local / "b.parquet", row_group_size=50)
    buf = io.StringIO(newline="")
    csv.writer(buf).writerows([["text"], *[[t] for t in parts[2]]])
    (local / "c.csv").write_text(buf.getvalue())
    for p in local.iterdir():
        fs.put_file(str(p), f"prep-test/in/{p.name}")
    remote_sources = [{"path": "s3://prep-test/in/p*.jsonl", "storage_options": options},
                      {"path": "s3://prep-test/in/b.parquet", "storage_options": options},
                      {"path": "s3://prep-test/in/c.csv", "storage_options": options}]
    local_sources = [{"path": str(local / "p*.jsonl")}, {"path": str(local / "b.parquet")},
                     {"path": str(local / "c.csv")}]

    staging = tmp_path / "staging"
    r = recipe(remote_sources, "s3://prep-test/out/ds", options, workers=2, local_dir=str(staging))
    result = tokenize(r, show_progress=False)
    assert any("uploaded" in n for n in result.notes)
    ref = tmp_path / "ref"
    tokenize(recipe(local_sources, str(ref)), show_progress=False)

    got = {}
    for path in fs.find("prep-test/out/ds"):
        rel = path[len("prep-test/out/ds/"):]
        got[rel] = fs.cat_file(path)
    manifest = json.loads(got.pop("manifest.json"))
    assert got == local_tree(ref) and len(got) >= 4
    ref_manifest = json.loads((ref / "manifest.json").read_text())
    assert manifest["splits"] == ref_manifest["splits"] and manifest["splits"]["val"]["num_docs"] > 0
    assert "storage_options" not in json.dumps(manifest) and "testing" not in json.dumps(manifest)
    assert read_manifest(staging).splits == read_manifest(ref).splits

    again = tokenize(r, show_progress=False)  # the remote manifest says complete: nothing is redone
    assert again.already_complete


def _fail_put(monkeypatch, fs, at: int, sent: list | None = None) -> None:
    """fs's put_file fails with a ConnectionError on its `at`-th call (1-based); `sent` collects the
    (dir, name) of each file put."""
    real_put = type(fs).put_file
    calls = {"n": 0}

    def flaky_put(self, lpath, rpath, *a, **k):
        calls["n"] += 1
        if calls["n"] == at:
            raise ConnectionError("network went away")
        if sent is not None:
            sent.append(rpath.rsplit("/", 2)[-2:])
        return real_put(self, lpath, rpath, *a, **k)
    monkeypatch.setattr(type(fs), "put_file", flaky_put)


def test_upload_sends_manifest_last_and_resumes(tmp_path, demo_tokenizer, monkeypatch):
    import fsspec

    texts = [t for t in demo_texts(400) if t]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    r = Recipe.from_dict({"name": "m", "source": {"path": str(corpus)}, "tokenizer": {"path": str(demo_tokenizer)},
                          "output": {"dir": "memory://prep-upload/ds", "shard_tokens": 10_000,
                                     "local_dir": str(tmp_path / "stage")}, "num_workers": 1,
                          "unit_bytes": 65536})
    fs = fsspec.filesystem("memory")
    sent = []
    _fail_put(monkeypatch, fs, at=3, sent=sent)
    from pipeline.errors import PrepError
    with pytest.raises(PrepError, match="upload to memory://prep-upload/ds failed .* re-run the same command"):
        tokenize(r, show_progress=False)
    assert not fs.exists("/prep-upload/ds/manifest.json")
    first = len(sent)
    resumed = tokenize(r, show_progress=False)  # the local dataset is complete; only the missing files are sent
    assert sent[-1][-1] == "manifest.json"
    from rich.console import Console

    from pipeline import tokenize_command
    printed = io.StringIO()
    monkeypatch.setattr(tokenize_command, "out", Console(file=printed, width=400))
    tokenize_command._print_summary("m", resumed)  # it said "nothing to do", then "uploaded 5 file(s)"
    assert "nothing to tokenize" in printed.getvalue() and "nothing to do" not in printed.getvalue()
    assert "note: uploaded " in printed.getvalue()
    names = ["/".join(x) for x in sent]
    assert len(names) == len(set(names))  # nothing uploaded twice
    m = read_manifest(tmp_path / "stage")
    n_files = 2 * sum(len(s.shards) for s in m.splits.values()) + 1
    assert len(sent) == n_files and first == 2


def test_an_upload_stopped_under_one_spelling_resumes_under_the_other(tmp_path, demo_tokenizer, monkeypatch):
    """memory://b/ds/ and memory://b/ds are one output and one staging folder, but the upload log was
    compared as spelled: the files the first run sent were taken for foreign ones and the resume refused
    (review)."""
    import fsspec

    from pipeline.errors import PrepError
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the default staging folder, per URL
    fs = fsspec.filesystem("memory")
    sent = []
    _fail_put(monkeypatch, fs, at=3, sent=sent)
    recipe = {"name": "s", "source": {"path": str(tmp_path / "c.jsonl")}, "tokenizer": {"path": str(demo_tokenizer)},
              "num_workers": 1}
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in demo_texts(300) if t))
    with pytest.raises(PrepError, match="upload to memory://prep-slash/ds/ failed"):
        tokenize(Recipe.from_dict({**recipe, "output": {"dir": "memory://prep-slash/ds/", "shard_tokens": 5_000}}),
                 show_progress=False)
    first = len(sent)
    tokenize(Recipe.from_dict({**recipe, "output": {"dir": "memory://prep-slash/ds", "shard_tokens": 5_000}}),
             show_progress=False)
    names = ["/".join(x) for x in sent]
    assert first == 2 and names[-1].endswith("manifest.json") and len(names) == len(set(names))  # none sent twice
    assert fs.exists("/prep-slash/ds/manifest.json")


def _memory_recipe(tmp_path, demo_tokenizer, url: str, stage: str = "stage", top: dict | None = None,
                   **source) -> Recipe:
    corpus = tmp_path / "c.jsonl"
    if not corpus.exists():
        corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in demo_texts(100) if t))
    return Recipe.from_dict({"name": "f", "source": {"path": str(corpus), **source},
                             "tokenizer": {"path": str(demo_tokenizer)},
                             "output": {"dir": url, "local_dir": str(tmp_path / stage), "shard_tokens": 2_000},
                             "num_workers": 1, **(top or {})})


def test_a_url_holding_other_files_is_refused_as_a_local_directory_is(tmp_path, demo_tokenizer):
    """Before, the dataset was uploaded among them and the sweep of stale shards deleted every file
    under train/ and val/ that prep had not written (found by a bug hunt with local:// as the bucket);
    with --overwrite it still did: now refused as a local directory is, in the same words."""
    import fsspec

    from pipeline.errors import PrepError
    url = "memory://prep-foreign/ds"
    r = _memory_recipe(tmp_path, demo_tokenizer, url)
    fs = fsspec.filesystem("memory")
    for rel in ("train/important.txt", "notes.txt"):
        fs.pipe_file(f"/prep-foreign/ds/{rel}", b"someone's data")
    with pytest.raises(PrepError, match=r"memory://prep-foreign/ds: exists, is not empty and is not a prep output "
                                        r"\(it holds 2 file\(s\) that prep did not upload from .*stage, such as "
                                        r"'notes.txt'\); choose another --output$"):
        tokenize(r, show_progress=False)
    with pytest.raises(PrepError, match=r"memory://prep-foreign/ds: is not a prep output \(it holds 2 file\(s\) .* "
                                        r"--overwrite replaces only a prep dataset or run: choose another --output, "
                                        r"or empty it yourself"):
        tokenize(r, show_progress=False, overwrite=True)
    assert fs.cat_file("/prep-foreign/ds/train/important.txt") == b"someone's data"
    assert sorted(fs.find("/prep-foreign/ds")) == ["/prep-foreign/ds/notes.txt", "/prep-foreign/ds/train/important.txt"]
    assert not (tmp_path / "stage").exists()  # refused before any work


def test_a_url_output_names_a_bucket_or_directory(tmp_path, demo_tokenizer):
    """`memory://`, `local:///`, `s3://`: the root of a whole filesystem, where the sweep of stale
    shards would list and clean train/ and val/ at the top of it."""
    from pipeline.errors import PrepError
    for url in ("memory://", "local:///", "s3://"):
        r = _memory_recipe(tmp_path, demo_tokenizer, url)
        with pytest.raises(PrepError, match=f"output.dir: '{url}' names no bucket or directory"):
            tokenize(r, show_progress=False, overwrite=True)


def test_an_http_output_is_refused_before_the_run(tmp_path, demo_tokenizer):
    """fsspec's http filesystem cannot write a dataset: the whole run was made, then its upload failed
    ("Cannot connect to host", or a POST a server answered) with "re-run the same command to finish the
    upload", which could never finish it."""
    from pipeline.errors import PrepError
    for url in ("https://example.invalid/ds", "http://127.0.0.1:9/ds"):
        r = _memory_recipe(tmp_path, demo_tokenizer, url)
        with pytest.raises(PrepError, match=rf"^output\.dir: {re.escape(url)} is an http\(s\) URL, which prep can read "
                                            r"from but not write a dataset to; give a local directory or an object"):
            tokenize(r, show_progress=False)
        assert not (tmp_path / "stage").exists()


def test_overwrite_of_a_url_refuses_to_replace_what_the_run_reads(tmp_path, demo_tokenizer):
    """A source under the dataset's train/ (or its rejects.jsonl) would be replaced or swept by the
    upload; one elsewhere under the prefix is untouched, and allowed."""
    import fsspec

    from pipeline.errors import PrepError
    url = "memory://prep-reads/ds"
    fs = fsspec.filesystem("memory")
    tokenize(_memory_recipe(tmp_path, demo_tokenizer, url), show_progress=False)
    body = (tmp_path / "c.jsonl").read_bytes()
    for rel in ("train/more.jsonl", "raw/more.jsonl"):
        fs.pipe_file(f"/prep-reads/ds/{rel}", body)
    inside = _memory_recipe(tmp_path, demo_tokenizer, url, path=f"{url}/train/more.jsonl")
    with pytest.raises(PrepError, match=f"{url}: --overwrite would delete {url}/train/more.jsonl, which this run "
                                        f"reads; move it out of {url}, or choose another --output"):
        tokenize(inside, show_progress=False, overwrite=True)
    assert fs.cat_file("/prep-reads/ds/train/more.jsonl") == body and fs.exists("/prep-reads/ds/manifest.json")
    beside = _memory_recipe(tmp_path, demo_tokenizer, url, path=f"{url}/raw/more.jsonl")
    tokenize(beside, show_progress=False, overwrite=True)
    assert fs.cat_file("/prep-reads/ds/raw/more.jsonl") == body and fs.exists("/prep-reads/ds/manifest.json")
    assert not fs.exists("/prep-reads/ds/train/more.jsonl")  # a prep dataset's train/ is prep's


def test_an_interrupted_overwrite_of_a_url_resumes_and_keeps_the_old_dataset_until_the_upload(
        tmp_path, demo_tokenizer, monkeypatch):
    """The remote dataset stays complete while the local run goes (a failed run leaves it as it was);
    once its upload starts, the old files count as this upload's: a re-run after an interrupted upload,
    with or without --overwrite, is not refused as a prefix of foreign files, and sweeps the stale."""
    import fsspec

    from pipeline.errors import PrepError
    url = "memory://prep-replace/ds"
    fs = fsspec.filesystem("memory")
    tokenize(_memory_recipe(tmp_path, demo_tokenizer, url, stage="elsewhere"), show_progress=False)  # another machine
    old = sorted(fs.find("/prep-replace/ds"))
    new = _memory_recipe(tmp_path, demo_tokenizer, url, top={"on_bad_record": "error"}, text_field="missing")
    with pytest.raises(PrepError, match="missing"):
        tokenize(new, show_progress=False, overwrite=True)
    assert sorted(fs.find("/prep-replace/ds")) == old  # still complete

    other = _memory_recipe(tmp_path, demo_tokenizer, url, text_template="again: {text}")
    _fail_put(monkeypatch, fs, at=2)
    with pytest.raises(PrepError, match="upload to memory://prep-replace/ds failed"):
        tokenize(other, show_progress=False, overwrite=True)
    assert not fs.exists("/prep-replace/ds/manifest.json")
    result = tokenize(other, show_progress=False)  # resumes the upload: the old files are known
    assert fs.exists("/prep-replace/ds/manifest.json")
    listed = {f"{split}/{s.name}.{ext}" for split, info in result.manifest.splits.items() for s in info.shards
              for ext in ("bin", "idx")}
    assert {p[len("/prep-replace/ds/"):] for p in fs.find("/prep-replace/ds")} == listed | {"manifest.json"}
    assert fs.cat_file("/prep-replace/ds/manifest.json") == (tmp_path / "stage" / "manifest.json").read_bytes()


def test_an_upload_holds_the_staging_lock(tmp_path, demo_tokenizer, monkeypatch):
    """The upload ran after the run let go of its staging directory's lock: an --overwrite run of another
    recipe there could replace the shards being sent, and the remote manifest then listed files it had
    not made. A run that starts meanwhile is refused as for a local output in use."""
    import fsspec

    from pipeline.errors import PrepError
    url = "memory://prep-locked/ds"
    fs = fsspec.filesystem("memory")
    first = _memory_recipe(tmp_path, demo_tokenizer, url)
    other = _memory_recipe(tmp_path, demo_tokenizer, url, text_template="again: {text}")
    during, real_put = [], type(fs).put_file

    def put(self, lpath, rpath, *a, **k):
        if not during:
            during.append("started")
            try:
                tokenize(other, show_progress=False, overwrite=True)
                during[0] = "ran"
            except PrepError as e:
                during[0] = str(e)
        return real_put(self, lpath, rpath, *a, **k)
    monkeypatch.setattr(type(fs), "put_file", put)
    result = tokenize(first, show_progress=False)
    assert re.search(r"stage: another prep run \(pid \d+ on .*\) is writing here", during[0]), during
    assert fs.cat_file("/prep-locked/ds/manifest.json") == (tmp_path / "stage" / "manifest.json").read_bytes()
    for split, info in result.manifest.splits.items():
        for shard in info.shards:
            assert fs.cat_file(f"/prep-locked/ds/{split}/{shard.name}.bin") == \
                (tmp_path / "stage" / split / f"{shard.name}.bin").read_bytes()


def test_a_local_url_output_creates_its_directories(tmp_path, demo_tokenizer):
    """local:// (fsspec's local filesystem): put_file creates no directory, and the first upload to a
    new prefix failed on train/shard-000000.bin."""
    url = f"local://{tmp_path}/remote/ds"
    result = tokenize(_memory_recipe(tmp_path, demo_tokenizer, url), show_progress=False)
    assert local_tree(tmp_path / "remote" / "ds") == local_tree(tmp_path / "stage") and result.manifest.splits
    assert (tmp_path / "remote" / "ds" / "manifest.json").read_bytes() == (tmp_path / "stage" / "manifest.json").read_bytes()


def test_a_bucket_root_is_an_output(tmp_path, s3):
    """`s3://bucket`: the whole bucket is the dataset; another file there is refused, with --overwrite too."""
    import boto3

    from pipeline.errors import PrepError
    fs, options = s3
    boto3.client("s3", endpoint_url=options["endpoint_url"], aws_access_key_id="testing",
                 aws_secret_access_key="testing", region_name="us-east-1").create_bucket(Bucket="prep-root")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in demo_texts(100) if t))
    r = recipe([{"path": str(corpus)}], "s3://prep-root", options, local_dir=str(tmp_path / "stage"))
    tokenize(r, show_progress=False)
    assert fs.exists("prep-root/manifest.json") and fs.find("prep-root/train")
    assert tokenize(r, show_progress=False).already_complete
    tokenize(r, show_progress=False, overwrite=True)
    assert fs.exists("prep-root/manifest.json")
    fs.rm_file("prep-root/manifest.json")
    fs.pipe_file("prep-root/theirs.txt", b"x")
    r2 = recipe([{"path": str(corpus)}], "s3://prep-root", options, local_dir=str(tmp_path / "stage2"))
    with pytest.raises(PrepError, match="s3://prep-root: is not a prep output"):
        tokenize(r2, show_progress=False, overwrite=True)
    assert fs.cat_file("prep-root/theirs.txt") == b"x"


def test_a_prefix_holding_only_folder_markers_is_an_empty_output(tmp_path, s3):
    """The S3 console's "Create folder" makes a 0-byte key `ds/` (s3fs lists it as `bkt/ds/`): the prefix
    was refused as "not a prep output (it holds 1 file(s) that prep did not upload ..., such as '')".
    A folder marker is no file: the dataset is uploaded there; another file beside it is still refused."""
    from pipeline.errors import PrepError
    fs, options = s3
    for key in ("marked/", "marked/ds/", "marked/ds/train/"):
        fs.pipe_file(f"prep-test/{key}", b"")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in demo_texts(100) if t))
    r = recipe([{"path": str(corpus)}], "s3://prep-test/marked/ds", options, local_dir=str(tmp_path / "stage"))
    result = tokenize(r, show_progress=False)
    assert fs.cat_file("prep-test/marked/ds/manifest.json") == (tmp_path / "stage" / "manifest.json").read_bytes()
    assert local_tree(tmp_path / "stage").keys() <= {p[len("prep-test/marked/ds/"):] for p in fs.find("prep-test/marked/ds")}
    assert result.manifest.splits["train"].shards
    fs.pipe_file("prep-test/marked/other/", b"")
    fs.pipe_file("prep-test/marked/other/theirs.txt", b"x")
    r2 = recipe([{"path": str(corpus)}], "s3://prep-test/marked/other", options, local_dir=str(tmp_path / "stage2"))
    with pytest.raises(PrepError, match=r"s3://prep-test/marked/other: exists, is not empty .* such as 'theirs.txt'\)"):
        tokenize(r2, show_progress=False)
    file = recipe([{"path": str(corpus)}], "s3://prep-test/marked/other/theirs.txt", options,
                  local_dir=str(tmp_path / "stage3"))  # a file, not a folder marker: refused, --overwrite too
    for overwrite in (False, True):
        with pytest.raises(PrepError, match=r"^output\.dir: s3://prep-test/marked/other/theirs\.txt is a file"):
            tokenize(file, show_progress=False, overwrite=overwrite)
    assert fs.find("prep-test/marked/other") == ["prep-test/marked/other/", "prep-test/marked/other/theirs.txt"]


def test_saved_hf_dataset_on_s3(tmp_path, s3):
    import datasets

    from pipeline.readers import BadRecords
    from pipeline.readers import hf as hf_reader
    from pipeline.recipe import SourceConfig
    fs, options = s3
    datasets.disable_progress_bars()
    texts = [f"saved doc {i}" for i in range(120)]
    datasets.Dataset.from_dict({"text": texts}).save_to_disk("s3://prep-test/saved", storage_options=options,
                                                            num_shards=2)
    source = SourceConfig(path="s3://prep-test/saved", format="hf", storage_options=options)
    hf_reader._CACHE.clear()
    got = []
    for unit in hf_reader.plan(source, 0, [], 1 << 10):
        for batch in hf_reader.iter_batches(unit, source, BadRecords(unit, "error"), 16):
            got += batch.texts
    assert got == texts


def test_a_directory_url_is_its_files_of_the_sources_format(tmp_path, s3):
    """`s3://bucket/prefix/` (ending in "/"): the files under it of source.format, recursively, as a
    local directory; README/LICENSE and hidden names skipped; a clear error without a format."""
    fs, options = s3
    texts = [t for t in demo_texts(200) if t]
    for name, part in (("b.jsonl", texts[:100]), ("sub/a.jsonl", texts[100:])):
        with fs.open(f"prep-test/dir/{name}", "w") as f:
            f.write("".join(json.dumps({"text": t}) + "\n" for t in part))
    for name in ("README.md", ".hidden/x.jsonl", "notes.csv"):
        with fs.open(f"prep-test/dir/{name}", "w") as f:
            f.write("{}\n")
    src = {"path": "s3://prep-test/dir/", "format": "jsonl", "storage_options": options}
    files = Recipe.from_dict({"name": "t", "source": src, "tokenizer": {"path": "t"}, "output": {"dir": "o"}}
                             ).sources[0].expand_files()
    assert files == ["s3://prep-test/dir/b.jsonl", "s3://prep-test/dir/sub/a.jsonl"]
    out = tmp_path / "out"
    tokenize(recipe([src], str(out)), show_progress=False)
    m = read_manifest(out)
    assert sum(s.num_docs for s in m.splits.values()) == len(texts)
    from pipeline.errors import PrepError
    with pytest.raises(PrepError, match=r"'s3://prep-test/dir/' is a directory URL; set source.format"):
        Recipe.from_dict({"name": "t", "source": {"path": "s3://prep-test/dir/"}, "tokenizer": {"path": "t"},
                          "output": {"dir": "o"}})
    with pytest.raises(PrepError, match=r"'s3://prep-test/dir/' holds no parquet file"):
        Recipe.from_dict({"name": "t", "source": {**src, "format": "parquet"}, "tokenizer": {"path": "t"},
                          "output": {"dir": "o"}}).sources[0].expand_files()


def test_a_json_array_on_s3_is_told_from_its_first_bytes_and_cut_between_its_records(tmp_path, s3, monkeypatch):
    """Plan-time: one 256-byte range request tells a JSON array from JSON Lines (not a 5 MB block);
    the array is then scanned and cut between its records (json_cuts.py), like a local copy: in
    segments of 16 KiB here, so that threads each open the URL."""
    from pipeline.readers import json_cuts, jsonl, plan_units
    monkeypatch.setattr(json_cuts, "SEGMENT_BYTES", 16 << 10)
    monkeypatch.setattr(json_cuts, "NEWLINE_SEARCH", 4 << 10)
    fs, options = s3
    records = [{"text": f"record {i} " + "x" * 80} for i in range(2000)]  # ~190 KB, over unit_bytes
    text = json.dumps(records, indent=1)
    with fs.open("prep-test/arr/a.json", "w") as f:
        f.write(text)
    with fs.open("prep-test/arr/b.jsonl", "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))
    with ranges_read(fs) as reads:
        r = recipe([{"path": "s3://prep-test/arr/*", "format": "jsonl", "storage_options": options}], str(tmp_path / "o"))
        units = plan_units(r)
    by_file = {}
    for u in units:
        by_file.setdefault(u.path.rsplit("/", 1)[1], []).append((u.start, u.end))
    assert len(by_file["a.json"]) > 1 and len(by_file["b.jsonl"]) > 1
    assert reads and all(end is not None and end - (start or 0) <= 256 for start, end in reads)
    out, here = tmp_path / "out", tmp_path / "here"
    (tmp_path / "a.json").write_bytes(fs.cat_file("prep-test/arr/a.json"))
    tokenize(recipe([{"path": "s3://prep-test/arr/a.json", "storage_options": options}], str(out)), show_progress=False)
    tokenize(recipe([{"path": str(tmp_path / "a.json")}], str(here)), show_progress=False)
    assert sum(s.num_docs for s in read_manifest(out).splits.values()) == len(records)
    assert local_tree(out) == local_tree(here)
    opener = lambda: fs.open("prep-test/arr/a.json", "rb")  # noqa: E731
    assert json_cuts.scan_cuts(opener, len(text), 4096, threads=4) == json_cuts.scan_cuts(opener, len(text), 4096, threads=1)
    assert jsonl._holds_a_document("s3://prep-test/arr/b.jsonl", options) is False


def test_a_compressed_json_array_on_s3_is_cut_like_a_local_copy(tmp_path, s3):
    """A .json.gz is told from JSON Lines by its decompressed start: the one its planned size's sample
    read, so no request of its own (else its first 64 KiB in one range request). Before, a compressed
    URL was taken for JSON Lines: one reject per line of the array, and no documents. The array is
    then scanned and cut as a local copy is."""
    import gzip

    from pipeline.readers import jsonl, plan_units
    fs, options = s3
    records = [{"text": f"record {i} " + "x" * 80} for i in range(6000)]  # ~570 KB, 64 KiB units
    packed = gzip.compress(json.dumps(records, indent=1).encode())
    fs.pipe("prep-test/gz/a.json.gz", packed)
    fs.pipe("prep-test/gz/b.jsonl.gz", gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    (tmp_path / "a.json.gz").write_bytes(packed)
    url = recipe([{"path": "s3://prep-test/gz/a.json.gz", "storage_options": options}], str(tmp_path / "out"))
    local = recipe([{"path": str(tmp_path / "a.json.gz")}], str(tmp_path / "here"))
    with ranges_read(fs) as heads:
        units = plan_units(url)
    assert heads == []  # the sample's start told it
    assert len(units) > 5 and all(u.payload for u in units)
    assert [(u.start, u.end, u.payload) for u in units] == [(u.start, u.end, u.payload) for u in plan_units(local)]
    tokenize(url, show_progress=False)
    tokenize(local, show_progress=False)
    m = read_manifest(tmp_path / "out")
    assert sum(s.num_docs for s in m.splits.values()) == len(records) and not m.skipped
    assert local_tree(tmp_path / "out") == local_tree(tmp_path / "here")
    assert jsonl._holds_a_document("s3://prep-test/gz/a.json.gz", options) is True
    assert jsonl._holds_a_document("s3://prep-test/gz/b.jsonl.gz", options) is False


def test_small_json_files_and_a_records_field_object_on_s3(tmp_path, s3):
    """URLs through the group reader (jsonl.whole_small_files opens each member with fsspec) and
    through records_field: the same documents as the local copies."""
    fs, options = s3
    texts = [f"document {i} " + "y" * (i % 13) for i in range(60)]
    local = tmp_path / "local"
    local.mkdir()
    for i in range(0, 60, 6):
        body = "".join(json.dumps({"text": t}) + "\n" for t in texts[i:i + 6])
        with fs.open(f"prep-test/small/f{i:03d}.jsonl", "w") as f:
            f.write(body)
        (local / f"f{i:03d}.jsonl").write_text(body)
    with fs.open("prep-test/obj/o.json", "w") as f:
        f.write(json.dumps({"version": 1, "data": [{"text": t} for t in texts]}, indent=2))
    remote = tokenize(recipe([{"path": "s3://prep-test/small/*", "format": "jsonl", "storage_options": options}],
                             str(tmp_path / "remote"), val_fraction=0.0), show_progress=False)
    here = tokenize(recipe([{"path": str(local / "*.jsonl")}], str(tmp_path / "here"), val_fraction=0.0),
                    show_progress=False)
    assert remote.manifest.splits["train"].num_docs == here.manifest.splits["train"].num_docs == 60
    assert [s.sha256 for s in remote.manifest.splits["train"].shards] == \
        [s.sha256 for s in here.manifest.splits["train"].shards]
    obj = tokenize(recipe([{"path": "s3://prep-test/obj/o.json", "records_field": "data", "storage_options": options}],
                          str(tmp_path / "obj"), val_fraction=0.0), show_progress=False)
    assert [s.sha256 for s in obj.manifest.splits["train"].shards] == \
        [s.sha256 for s in here.manifest.splits["train"].shards]


@contextlib.contextmanager
def bytes_fetched(sizes: list):
    """The size of each body the S3 files' reads get within (a request's real bytes, not its range)."""
    real = s3fs.core.S3File._fetch_range

    def counting(self, start, end):
        data = real(self, start, end)
        sizes.append(len(data))
        return data
    with mock.patch.object(s3fs.core.S3File, "_fetch_range", counting):
        yield


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_unit_of_an_s3_object_fetches_its_range_not_the_rest_of_the_object(tmp_path, s3, fmt):
    """fsspec's files read ahead a block past each read (50 MiB on s3fs): every unit of a big object
    fetched the object from its range to the end (JSONL 7.6x the object in all, CSV 21x: its header
    look fetched it again; Parquet 7x). Now a unit fetches its range and the rest of its last record.
    (A CSV object's units read windows the parent fetches once: test_a_csv_object_is_fetched_once.)"""
    from pipeline.readers import BadRecords, get_reader, plan_units
    fs, options = s3
    texts = [t for t in demo_texts() if t]  # ~1.2 MB of text
    here = tmp_path / f"d.{fmt}"
    if fmt == "jsonl":
        here.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    else:  # a second column, never read
        pq.write_table(pa.table({"text": texts, "other": [t[::-1] for t in texts]}), here, row_group_size=200)
    fs.put_file(str(here), f"prep-test/ranges/d.{fmt}")
    r = recipe([{"path": f"s3://prep-test/ranges/d.{fmt}", "storage_options": options}], str(tmp_path / "o"))
    units = plan_units(r)
    assert len(units) >= 8
    reader, docs, per_unit = get_reader(fmt), [], []
    for u in units:
        sizes = []
        with bytes_fetched(sizes):
            docs += [t for b in reader.iter_batches(u, r.sources[0], BadRecords(u, "error"), 256) for t in b.texts]
        per_unit.append(sum(sizes))
    assert docs == texts
    # its range and the rest of its last record, read 64 KiB at a time past the end (small next to the
    # units of a real run, 2-16 MiB); Parquet: its row group's text column, read in 64 KiB pieces, and the
    # footer (pyarrow reads the last 64 KiB)
    extra = (192 if fmt == "parquet" else 128) << 10
    assert all(n <= u.size + extra for n, u in zip(per_unit, units)), (per_unit, [u.size for u in units])


def test_a_csv_object_is_fetched_once(tmp_path, s3):
    """A CSV object's plan scanned it whole for its record cuts, then each unit fetched its range again:
    2.0x the object, plus 64 KiB past each unit's end. Now the parent's spooler fetches it once and cuts
    the units' windows with the same scan; the dataset is a local copy's, byte for byte."""
    from pipeline.readers import plan_units
    fs, options = s3
    texts = [t for t in demo_texts() if t]  # ~1.2 MB
    here = tmp_path / "d.csv"
    with open(here, "w", newline="") as f:
        csv.writer(f).writerows([["text"], *[[t] for t in texts]])
    fs.put_file(str(here), "prep-test/once/d.csv")
    r = recipe([{"path": "s3://prep-test/once/d.csv", "storage_options": options}], str(tmp_path / "o"))
    units = len(plan_units(r))
    sizes: list[int] = []
    with bytes_fetched(sizes):  # one worker: the units run in this process
        result = tokenize(r, show_progress=False)
    local = tokenize(recipe([{"path": str(here)}], str(tmp_path / "here")), show_progress=False)
    assert local_tree(result.out) == local_tree(local.out) and result.manifest.splits == local.manifest.splits
    assert sum(s.num_docs for s in result.manifest.splits.values()) == len(texts) and units >= 8
    # the object once, and each later unit's look at the header row (csv.HEADER_BLOCK: 64 KiB)
    assert sum(sizes) - (units - 1) * (64 << 10) == here.stat().st_size, (sizes, units)


class _CuttableLink:
    """A TCP relay on loopback to (host, port) that hangs up every connection, and refuses new ones,
    once `cut_after` bytes have come down it (a network drop mid-read); `heal()` lets them through again."""

    def __init__(self, host: str, port: int, cut_after: int):
        import socket
        import threading
        self.target, self.cut_after, self.down, self.broken = (host, port), cut_after, 0, False
        self.conns: list = []
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:  # closed
                return
            if self.broken:
                client.close()
                continue
            server = socket.create_connection(self.target)
            self.conns += [client, server]
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, a, b, down: bool) -> None:
        import socket
        try:
            while data := a.recv(65536):
                if down:
                    with self.lock:
                        self.down += len(data)
                        if not self.broken and self.down > self.cut_after:
                            self.broken = True
                            for c in self.conns:
                                with contextlib.suppress(OSError):
                                    c.shutdown(socket.SHUT_RDWR)
                            return
                b.sendall(data)
        except OSError:
            pass
        finally:
            for c in (a, b):
                with contextlib.suppress(OSError):
                    c.close()

    def heal(self) -> None:
        self.broken, self.cut_after = False, float("inf")


def _through_a_cuttable_link(options: dict, cut_after: int) -> tuple[_CuttableLink, dict]:
    """(a link to the moto server that drops the connection after `cut_after` bytes, storage options
    through it with one try and 1 s timeouts: botocore's retries would otherwise take seconds)."""
    host, port = options["endpoint_url"].rsplit("/", 1)[1].split(":")
    link = _CuttableLink(host, int(port), cut_after=cut_after)
    return link, {**options, "endpoint_url": f"http://127.0.0.1:{link.port}",
                  "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1, "read_timeout": 1}}


def _unreachable_line(url: str) -> str:
    """InputUnreachable's one line for `url`, as a regex."""
    return (rf"^{re.escape(url)}: reading it failed( at byte [\d,]+)? \(\w+: .*\); check the network, the "
            r"endpoint and source.storage_options, then re-run to resume \(finished units are kept\)$")


def test_a_network_drop_mid_read_stops_the_run_in_one_line_and_a_re_run_resumes(tmp_path, s3, monkeypatch):
    """A connection lost while a unit reads an object raised botocore's exception out of the run (a
    traceback, from the worker), and under `on_bad_record: skip` a failure there would drop the unit's
    documents from a dataset the re-run called complete. Now: one line naming the URL and the fix, the
    run stopped (skip is the default here) with its finished units kept, and a re-run resumes."""
    from pipeline.errors import InputUnreachable
    fs, options = s3
    texts = [t for t in demo_texts() if t]
    body = "".join(json.dumps({"text": t}) + "\n" for t in texts)
    fs.pipe("prep-test/drop/d.jsonl", body.encode())
    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)  # s3fs's own, with their back-off: seconds (one worker: in-process)
    link, through = _through_a_cuttable_link(options, cut_after=len(body) // 2)
    r = recipe([{"path": "s3://prep-test/drop/d.jsonl", "storage_options": through}], str(tmp_path / "out"))
    with pytest.raises(InputUnreachable, match=_unreachable_line("s3://prep-test/drop/d.jsonl")):
        tokenize(r, show_progress=False)
    assert not (tmp_path / "out" / "manifest.json").exists()
    link.heal()
    resumed = tokenize(r, show_progress=False)
    assert sum(s.num_docs for s in resumed.manifest.splits.values()) == len(texts) and not resumed.manifest.failed_units
    link.sock.close()


@pytest.mark.parametrize("suffix", ["gz", "zst"])
def test_a_network_drop_while_the_parent_spools_a_compressed_url_stops_the_run(tmp_path, s3, monkeypatch, suffix):
    """A split .gz/.zst URL is decompressed by the parent into windows (pipeline.spool); a drop there
    reached the workers as a plain error message, so under `on_bad_record: skip` (the default here) its
    units failed and the run finished without their documents. Now the run stops with the URL and the
    fix in one line, and a re-run resumes to the dataset a local copy gives, byte for byte."""
    import gzip
    import random

    import zstandard

    from pipeline.errors import InputUnreachable
    from pipeline.readers import base, url_reads
    fs, options = s3
    rng = random.Random(5)  # hex words: ~2x compression, so the plan's sample is a small part of the file
    texts = [" ".join(f"{rng.getrandbits(32):08x}" for _ in range(rng.randint(5, 60))) for _ in range(12000)]
    body = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
    packed = gzip.compress(body) if suffix == "gz" else zstandard.ZstdCompressor().compress(body)
    fs.pipe(f"prep-test/drop/d.jsonl.{suffix}", packed)
    (tmp_path / f"d.jsonl.{suffix}").write_bytes(packed)
    monkeypatch.setattr(base, "SAMPLE_BYTES", 1 << 16)  # the plan fetches 64 KiB of the 2 MB file
    monkeypatch.setattr(url_reads, "REQUEST_BYTES", 1 << 16)  # the decompressors ask for 512 KiB (gzip) a read
    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)
    link, through = _through_a_cuttable_link(options, cut_after=len(packed) * 3 // 4)  # past the first windows
    url = f"s3://prep-test/drop/d.jsonl.{suffix}"
    r = recipe([{"path": url, "storage_options": through}], str(tmp_path / "out"), workers=2)
    with pytest.raises(InputUnreachable, match=_unreachable_line(url)):
        tokenize(r, show_progress=False)
    assert not (tmp_path / "out" / "manifest.json").exists()
    link.heal()
    resumed = tokenize(r, show_progress=False)
    local = tokenize(recipe([{"path": str(tmp_path / f"d.jsonl.{suffix}")}], str(tmp_path / "here")), show_progress=False)
    assert sum(s.num_docs for s in resumed.manifest.splits.values()) == len(texts) and not resumed.manifest.failed_units
    assert local_tree(tmp_path / "out") == local_tree(tmp_path / "here") and local.manifest.splits == resumed.manifest.splits
    link.sock.close()


def test_a_double_star_inside_a_name_says_to_make_it_a_component(tmp_path, s3):
    """`s3://bkt/in/**.jsonl.zst`: fsspec takes `**` only as a whole path component, and prep's message
    was "cannot list ... check the URL and source.storage_options". Now it names the fix, which matches
    the files at any depth."""
    import zstandard

    from pipeline.errors import PrepError
    from pipeline.source_files import expand_files
    fs, options = s3
    for name in ("a.jsonl.zst", "deep/b.jsonl.zst"):
        fs.pipe(f"prep-test/stars/{name}", zstandard.ZstdCompressor().compress(b'{"text": "x"}\n'))
    r = recipe([{"path": "s3://prep-test/stars/**.jsonl.zst", "storage_options": options}], str(tmp_path / "o"))
    with pytest.raises(PrepError, match=re.escape(
            "source.path: 's3://prep-test/stars/**.jsonl.zst': '**' matches directories only as a whole path "
            "component (`**.jsonl.zst`); for files at any depth write 's3://prep-test/stars/**/*.jsonl.zst'") + "$"):
        expand_files(r.sources[0])
    fixed = recipe([{"path": "s3://prep-test/stars/**/*.jsonl.zst", "storage_options": options}], str(tmp_path / "o"))
    assert expand_files(fixed.sources[0]) == ["s3://prep-test/stars/a.jsonl.zst", "s3://prep-test/stars/deep/b.jsonl.zst"]


@pytest.mark.parametrize("path", ["in/a.jsonl", "in/*.jsonl", "in/"])
def test_a_missing_bucket_is_named(tmp_path, s3, path):
    """A file in a bucket that does not exist said "does not exist", a glob "no file matches", a prefix
    "cannot list": none said the bucket was the cause. Now each names the bucket (one request more, on
    the error path only); a missing file in a bucket that exists says what it did."""
    from pipeline.errors import PrepError
    fs, options = s3
    r = recipe([{"path": f"s3://prep-nobucket/{path}", "format": "jsonl", "storage_options": options}], str(tmp_path / "o"))
    with pytest.raises(PrepError, match=r"^source\.path: s3://prep-nobucket/\S*: the bucket 'prep-nobucket' does "
                                        r"not exist \(or these credentials cannot see it\); fix the URL or "
                                        r"source\.storage_options$"):
        tokenize(r, show_progress=False)
    there = recipe([{"path": f"s3://prep-test/nothing/{path}", "format": "jsonl", "storage_options": options}],
                   str(tmp_path / "o"))
    with pytest.raises(PrepError) as e:
        tokenize(there, show_progress=False)
    assert "bucket" not in str(e.value)


@pytest.mark.parametrize("fmt,workers", [("jsonl", 1), ("jsonl", 2), ("csv", 2)])
def test_an_object_replaced_after_the_plan_stops_the_run_naming_it(tmp_path, s3, monkeypatch, fmt, workers):
    """An object replaced between the plan and its units' reads (same size, another ETag) was read at
    the old plan's offsets, and the run finished with the new object's bytes without a word. Now each
    open compares the object with the plan's record of it, in the parent (inline units; a CSV's spooler)
    and in the workers: the run stops naming the URL, and a re-run plans the new object."""
    from pipeline import input_changes
    from pipeline.errors import InputUnreachable  # url_reads.InputChanged's kind: it stops the run under skip
    fs, options = s3
    texts = [t for t in demo_texts(2000) if t]
    key = f"prep-test/changes/{fmt}-{workers}.{fmt}"

    def body(docs: list[str]) -> bytes:
        if fmt == "jsonl":
            return "".join(json.dumps({"text": t}) + "\n" for t in docs).encode()
        buf = io.StringIO(newline="")
        csv.writer(buf).writerows([["text"], *[[t] for t in docs]])
        return buf.getvalue().encode()
    old, new = body(texts), body([t.swapcase() for t in texts])
    assert len(old) == len(new) > 4 * 65536 and old != new
    fs.pipe(key, old)
    real = input_changes.describe

    def replaced_after_the_plan(*a, **k):
        monkeypatch.setattr(input_changes, "describe", real)
        fs.pipe(key, new)
        return real(*a, **k)
    monkeypatch.setattr(input_changes, "describe", replaced_after_the_plan)
    r = recipe([{"path": f"s3://{key}", "storage_options": options}], str(tmp_path / "out"), workers=workers)
    with pytest.raises(InputUnreachable, match=rf"^s3://{re.escape(key)}: changed since this run planned it \(version "
                                           r"\S+ then, \S+ now\); .* re-run to plan it again"):
        tokenize(r, show_progress=False)
    assert not (tmp_path / "out" / "manifest.json").exists()
    again = tokenize(r, show_progress=False)  # no unit was done from the old object: the new one is planned
    (tmp_path / f"new.{fmt}").write_bytes(new)
    local = tokenize(recipe([{"path": str(tmp_path / f"new.{fmt}")}], str(tmp_path / "here")), show_progress=False)
    assert local_tree(again.out) == local_tree(local.out) and again.manifest.splits == local.manifest.splits


@pytest.mark.parametrize("workers", [1, 2])
def test_an_object_deleted_after_the_plan_stops_the_run_and_a_re_run_resumes(tmp_path, s3, monkeypatch, workers):
    """One object of a glob deleted (404) after the plan listed it failed its units under the default
    `on_bad_record: skip` ("cannot open it (FileNotFoundError ...)"), and the run finished without its
    documents: a re-run called it complete. Now the run stops naming the object, its finished units
    kept; once the object is back, a re-run resumes to the dataset of a run that was never stopped."""
    from pipeline import input_changes
    from pipeline.errors import InputUnreachable  # url_reads.InputChanged's kind: it stops the run under skip
    fs, options = s3
    texts = [t for t in demo_texts(900) if t]
    bodies = {f"prep-test/gone-{workers}/p{i}.jsonl": "".join(json.dumps({"text": t}) + "\n" for t in texts[i::3]).encode()
              for i in range(3)}
    for key, body in bodies.items():
        fs.pipe(key, body)
    deleted = f"prep-test/gone-{workers}/p1.jsonl"
    real = input_changes.describe

    def deleted_after_the_plan(*a, **k):
        monkeypatch.setattr(input_changes, "describe", real)
        fs.rm_file(deleted)
        return real(*a, **k)
    monkeypatch.setattr(input_changes, "describe", deleted_after_the_plan)
    r = recipe([{"path": f"s3://prep-test/gone-{workers}/p*.jsonl", "storage_options": options}], str(tmp_path / "out"),
               workers=workers)
    with pytest.raises(InputUnreachable, match=rf"^s3://{deleted}: gone since this run planned it \(FileNotFoundError: "
                                               r".*\); put it back and re-run to resume \(finished units are kept\)$"):
        tokenize(r, show_progress=False)
    assert not (tmp_path / "out" / "manifest.json").exists()
    fs.pipe(deleted, bodies[deleted])
    resumed = tokenize(r, show_progress=False)
    assert not resumed.manifest.failed_units and not resumed.already_complete
    whole = tokenize(recipe([{"path": f"s3://prep-test/gone-{workers}/p*.jsonl", "storage_options": options}],
                            str(tmp_path / "whole"), workers=workers), show_progress=False)
    assert local_tree(resumed.out) == local_tree(whole.out) and resumed.manifest.splits == whole.manifest.splits


class _StallingProxy:
    """A TCP proxy on loopback in front of the S3 server: once `stall` is set, each answer stops after
    its first 2,000 bytes and sends nothing more (until `release`)."""

    def __init__(self, target: tuple[str, int]):
        import socket
        import threading
        self.stall, self.release = threading.Event(), threading.Event()
        self._target, self._listener = target, socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        import threading
        while not self.release.is_set():
            try:
                client = self._listener.accept()[0]
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, src, dst, answers: bool):
        sent = 0
        try:
            while data := src.recv(65536):
                if answers and self.stall.is_set() and sent > 2000:
                    self.release.wait(60)
                    break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            src.close()
            dst.close()

    def close(self):
        self.release.set()
        self._listener.close()


def test_a_stalled_s3_read_stops_the_run_saying_it_timed_out(tmp_path, s3, monkeypatch):
    """An S3 server that stops sending mid-body: after botocore's read timeout, s3fs's retries, then its
    own IndexError ("tuple index out of range": it reads args[0] of fsspec's empty FSTimeoutError), the
    run stopped with "(IndexError: tuple index out of range)". Now it says the read timed out."""
    from pipeline import input_changes
    from pipeline.errors import InputUnreachable
    fs, options = s3
    fs.pipe("prep-test/stall/d.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in demo_texts(600) if t).encode())
    host, port = options["endpoint_url"].rsplit("/", 1)[1].split(":")
    proxy = _StallingProxy((host, int(port)))
    slow = {**options, "endpoint_url": f"http://127.0.0.1:{proxy.port}",
            "config_kwargs": {"read_timeout": 1, "retries": {"max_attempts": 1}}}  # 60 s by default
    real = input_changes.describe

    def stall_after_the_plan(*a, **k):
        proxy.stall.set()
        return real(*a, **k)
    monkeypatch.setattr(input_changes, "describe", stall_after_the_plan)
    try:
        with pytest.raises(InputUnreachable) as e:
            tokenize(recipe([{"path": "s3://prep-test/stall/d.jsonl", "storage_options": slow}], str(tmp_path / "out")),
                     show_progress=False)
    finally:
        proxy.close()
    assert str(e.value).startswith("s3://prep-test/stall/d.jsonl: reading it failed at byte "), str(e.value)
    assert "(timed out waiting for data, retries included: the server stalled or the network dropped); check the " \
           "network" in str(e.value)


@pytest.mark.parametrize("body,message", [(b'{"splits": {', r"not valid JSON \(Expecting property name"),
                                          (b"[1, 2]", r"not a JSON object \(a manifest is one\)")])
def test_a_damaged_remote_manifest_is_named_by_its_url_and_overwrite_replaces_it(tmp_path, demo_tokenizer, body,
                                                                                 message):
    """A remote manifest.json cut short (an interrupted copy) stopped the run with json's JSONDecodeError
    traceback; other damage was named by fsspec's path (/bkt/ds/manifest.json), not the URL."""
    import fsspec

    from pipeline.errors import PrepError
    url = "memory://prep-damaged/ds"
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/prep-damaged/ds/manifest.json", body)
    r = _memory_recipe(tmp_path, demo_tokenizer, url)
    with pytest.raises(PrepError, match=rf"^{url}/manifest\.json: {message}.*pass --overwrite to replace"):
        tokenize(r, show_progress=False)
    tokenize(r, show_progress=False, overwrite=True)
    assert fs.cat_file("/prep-damaged/ds/manifest.json") == (tmp_path / "stage" / "manifest.json").read_bytes()


def test_an_unfinished_upload_whose_staging_directory_is_gone_is_replaced_with_overwrite(
        tmp_path, demo_tokenizer, monkeypatch):
    """An upload interrupted, then its staging directory deleted: the prefix held only the dataset's
    shards (no manifest), which no record said were prep's, and was refused as foreign files even with
    --overwrite. Without --overwrite it is still refused, as unfinished and saying how to replace it;
    --overwrite replaces it. A prefix with any other file stays refused either way."""
    import shutil

    import fsspec

    from pipeline.errors import PrepError
    url = "memory://prep-lost-stage/ds"
    fs = fsspec.filesystem("memory")
    r = _memory_recipe(tmp_path, demo_tokenizer, url)
    _fail_put(monkeypatch, fs, at=3)
    with pytest.raises(PrepError, match=f"upload to {url} failed"):
        tokenize(r, show_progress=False)
    monkeypatch.undo()
    partial = sorted(fs.find("/prep-lost-stage/ds"))
    assert partial and not fs.exists("/prep-lost-stage/ds/manifest.json")
    shutil.rmtree(tmp_path / "stage")
    with pytest.raises(PrepError, match=rf"^{url}: holds 2 file\(s\) that prep did not upload from .*stage, such as "
                                        r"'train/shard-000000.bin', and no manifest.json: an unfinished upload, .*; "
                                        r"pass --overwrite to replace it, or choose another output.dir$"):
        tokenize(r, show_progress=False)
    assert sorted(fs.find("/prep-lost-stage/ds")) == partial
    fs.pipe_file("/prep-lost-stage/ds/notes.txt", b"someone's")
    with pytest.raises(PrepError, match="--overwrite replaces only a prep dataset or run"):
        tokenize(r, show_progress=False, overwrite=True)
    fs.rm_file("/prep-lost-stage/ds/notes.txt")
    result = tokenize(r, show_progress=False, overwrite=True)
    listed = {f"{split}/{s.name}.{ext}" for split, info in result.manifest.splits.items() for s in info.shards
              for ext in ("bin", "idx")}
    assert {p[len("/prep-lost-stage/ds/"):] for p in fs.find("/prep-lost-stage/ds")} == listed | {"manifest.json"}


def test_an_object_stored_with_content_encoding_gzip_under_a_plain_name_says_so(tmp_path, s3):
    """`aws s3 cp d.jsonl.gz s3://.../d.jsonl --content-encoding gzip` stores gzip bytes that S3 sends as
    they are: refused with "rename it to d.jsonl.gz" alone, which said nothing of the Content-Encoding
    that made them so. Now the message says what S3 said and the fixes; the same bytes under a .gz name
    are read."""
    import gzip

    from pipeline.errors import PrepError
    fs, options = s3
    texts = [t for t in demo_texts(200) if t]
    body = gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in texts).encode())
    fs.pipe("prep-test/encoded/d.jsonl", body, ContentEncoding="gzip")
    r = recipe([{"path": "s3://prep-test/encoded/d.jsonl", "storage_options": options}], str(tmp_path / "out"))
    with pytest.raises(PrepError, match=r"s3://prep-test/encoded/d\.jsonl: stored with Content-Encoding: gzip, and S3 "
                                        r"sends its bytes as stored: compressed \(\.gz\), .*; rename the object to "
                                        r"d\.jsonl\.gz, or upload it uncompressed without --content-encoding, then re-run"):
        tokenize(r, show_progress=False)
    fs.pipe("prep-test/encoded/e.jsonl.gz", body, ContentEncoding="gzip")
    named = recipe([{"path": "s3://prep-test/encoded/e.jsonl.gz", "storage_options": options}], str(tmp_path / "gz"))
    assert sum(s.num_docs for s in tokenize(named, show_progress=False).manifest.splits.values()) == len(texts)


def test_an_object_version_of_a_versioned_bucket_is_read_and_its_format_inferred(tmp_path, s3):
    """`s3://bkt/d.jsonl?versionId=<id>` (s3fs's spelling of an object's version) was refused as having
    no suffix to infer a format from ("d.jsonl?versionId=..."): now that version is read, not the latest."""
    import boto3
    fs, options = s3
    client = boto3.client("s3", endpoint_url=options["endpoint_url"], aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    client.create_bucket(Bucket="prep-versions")
    client.put_bucket_versioning(Bucket="prep-versions", VersioningConfiguration={"Status": "Enabled"})
    texts = [t for t in demo_texts(300) if t]
    old = client.put_object(Bucket="prep-versions", Key="d.jsonl",
                            Body="".join(json.dumps({"text": t}) + "\n" for t in texts[:100]).encode())["VersionId"]
    client.put_object(Bucket="prep-versions", Key="d.jsonl", Body="".join(json.dumps({"text": t}) + "\n" for t in texts).encode())
    for i, so in enumerate([options, {**options, "version_aware": True}]):
        r = recipe([{"path": f"s3://prep-versions/d.jsonl?versionId={old}", "storage_options": so}], str(tmp_path / f"o{i}"))
        assert sum(s.num_docs for s in tokenize(r, show_progress=False).manifest.splits.values()) == 100


def test_a_prefix_holding_a_lone_rejects_jsonl_is_not_taken_for_an_unfinished_upload(tmp_path, demo_tokenizer):
    """Any prefix holding only dataset file names was taken for an unfinished upload: a user's own lone
    rejects.jsonl was then replaced (or deleted as stale) by --overwrite. A shard must be among them (review)."""
    import fsspec

    from pipeline.errors import PrepError
    url = "memory://prep-lone-rejects/ds"
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/prep-lone-rejects/ds/rejects.jsonl", b'{"mine": "not prep"}\n')
    r = _memory_recipe(tmp_path, demo_tokenizer, url)
    with pytest.raises(PrepError, match="--overwrite replaces only a prep dataset or run"):
        tokenize(r, show_progress=False, overwrite=True)
    assert fs.cat_file("/prep-lone-rejects/ds/rejects.jsonl") == b'{"mine": "not prep"}\n'
