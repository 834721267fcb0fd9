"""A compressed file larger than a unit is cut into ranges of its decompressed bytes (pipeline.spool):
the same shards as the plain file for any -j, after a kill and resume too; a damaged stream fails
only the units from the damage on."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import signal
import time

import numpy as np
import pytest
import zstandard
from faultkit import assert_no_survivors, journal_lines, run_prep, snapshot, write_recipe

from tests.conftest import read_split


def _shards(snap: dict[str, str]) -> dict[str, str]:
    """The dataset's shard files (the manifest names the input path, which differs here)."""
    return {k: v for k, v in snap.items() if k != "manifest.json"}


def _compressed(directory, corpus, kind: str):
    data = corpus.read_bytes()
    if kind == "zst":  # one-shot compress() writes the content size into the frame header
        blob, name = zstandard.ZstdCompressor().compress(data), "small.jsonl.zst"
    elif kind == "zst-unsized":  # streamed: no declared size; this small, it is measured whole at plan time
        c = zstandard.ZstdCompressor().compressobj()
        blob, name = c.compress(data) + c.flush(), "small.jsonl.zst"
    elif kind in ("bz2", "xz"):  # no declared size: measured at plan time. bz2 decodes whole blocks of
        # 100 kB x level: level 1, so that a truncated copy still decodes the blocks before the damage
        blob, name = (bz2.compress(data, 1) if kind == "bz2" else lzma.compress(data)), f"small.jsonl.{kind}"
    else:
        blob, name = gzip.compress(data), "small.jsonl.gz"
    path = directory / name
    path.write_bytes(blob)
    return path


@pytest.mark.parametrize("kind,workers", [("zst", 1), ("zst", 2), ("gz", 2), ("zst-unsized", 2), ("bz2", 2),
                                          ("xz", 2)])
def test_ranges_of_a_compressed_file_give_the_plain_files_shards(tmp_path, corpus, reference, reference_out, kind,
                                                                 workers):
    recipe = write_recipe(tmp_path, _compressed(tmp_path, corpus, kind))
    out = tmp_path / "out"
    run = run_prep(recipe, out, workers=workers)
    assert run.returncode == 0, run.stderr
    # the declared or measured size gives the plain file's ranges: the same units, so the same shards
    assert _shards(snapshot(out)) == _shards(reference)
    units = run.stdout.split(" units in ")[0].split()[-1]  # "7/7 units in ..."
    assert int(units.split("/")[1]) >= 7  # ~450 kB in 64 KiB ranges, not one unit
    assert sorted(p.name for p in (out / ".prep").iterdir()) == ["lock"]  # windows deleted


@pytest.mark.parametrize("fault,workers", [("journal:2", 1), ("journal:4", 2), ("start:1", 2)])
def test_kill_then_resume_gives_the_same_shards(tmp_path, corpus, reference, fault, workers):
    recipe = write_recipe(tmp_path, _compressed(tmp_path, corpus, "zst"))
    out = tmp_path / "out"
    tag = f"split-{fault}-{time.monotonic_ns()}"
    killed = run_prep(recipe, out, workers=workers, fault=fault, tag=tag)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert_no_survivors(tag)
    done = len(journal_lines(out))  # the resumed run skips these units but reads the stream past them
    assert done == (int(fault.split(":")[1]) if fault.startswith("journal") else 0)
    rerun = run_prep(recipe, out, workers=workers)
    assert rerun.returncode == 0, rerun.stderr
    assert _shards(snapshot(out)) == _shards(reference)


@pytest.mark.parametrize("kind,workers", [("zst", 1), ("zst", 2), ("bz2", 2), ("xz", 2)])
def test_a_truncated_stream_fails_the_units_from_the_damage_on(tmp_path, corpus, kind, workers):
    blob = _compressed(tmp_path, corpus, kind).read_bytes()
    path = tmp_path / f"small.jsonl.{kind}"
    path.write_bytes(blob[: len(blob) * 3 // 5])  # a zst header still declares the whole size
    recipe = write_recipe(tmp_path, path)
    out = tmp_path / "out"
    run = run_prep(recipe, out, workers=workers)
    assert run.returncode == 0, run.stderr  # on_bad_record: skip
    m = json.loads((out / "manifest.json").read_text())
    failed = m["failed_units"]
    assert failed and all(f"{path.name}: corrupt or truncated input" in f["error"] for f in failed)
    units = sorted(f["unit"] for f in failed)
    assert units == list(range(units[0], units[0] + len(units)))  # the tail of the file, in one run
    assert 0 < units[0]  # the ranges before the damage kept their documents
    assert m["splits"]["train"]["num_docs"] > 0

    (tmp_path / "strict").mkdir()
    strict = write_recipe(tmp_path / "strict", path, on_bad_record="error")
    run = run_prep(strict, tmp_path / "out2", workers=workers)
    assert run.returncode == 1 and f"{path.name}: corrupt or truncated input" in run.stderr


@pytest.mark.parametrize("sep", ["\n", "<|endoftext|>"])
def test_a_compressed_text_file_is_split_too(tmp_path, corpus, sep):
    """Plain text, one document per line or per separator: the .zst's ranges give the plain file's
    shards on 2 workers (the spooler cuts its windows after `sep`, not after a newline)."""
    texts = [json.loads(line)["text"].replace("\n", " ") for line in corpus.read_text().splitlines()]
    data = sep.join(texts).encode()
    plain, packed = tmp_path / "t.txt", tmp_path / "t.txt.zst"
    plain.write_bytes(data)
    packed.write_bytes(zstandard.ZstdCompressor().compress(data))
    snaps = {}
    for path in (plain, packed):
        d = tmp_path / path.name.replace(".", "_")
        d.mkdir()
        recipe = write_recipe(d, path)
        spec = json.loads(recipe.read_text())
        spec["source"] = {"path": str(path), "format": "text", "doc_separator": sep}
        recipe.write_text(json.dumps(spec))
        run = run_prep(recipe, d / "out", workers=2)
        assert run.returncode == 0, run.stderr
        units = int(run.stdout.split(" units in ")[0].split()[-1].split("/")[1])
        assert units >= 6  # ~400 kB in 64 KiB ranges, the compressed file too
        snaps[path] = _shards(snapshot(d / "out"))
    assert snaps[plain] == snaps[packed] and any(k.startswith("train/") for k in snaps[plain])


def test_a_compressed_csv_is_split_at_proven_record_starts(tmp_path, corpus):
    """CSV with quoted multi-line texts as .zst: cut into ranges (the spooler moves each to a proven
    record start), the same shards on 1 and 2 workers and the same documents as the plain file."""
    import csv
    import io

    buf = io.StringIO(newline="")
    writer = csv.writer(buf)
    writer.writerow(["id", "text"])
    writer.writerows((i, json.loads(line)["text"]) for i, line in enumerate(corpus.read_text().splitlines()))
    data = buf.getvalue().encode()
    plain, packed = tmp_path / "t.csv", tmp_path / "t.csv.zst"
    plain.write_bytes(data)
    packed.write_bytes(zstandard.ZstdCompressor().compress(data))
    outs = {}
    for path, workers in ((plain, 2), (packed, 1), (packed, 2)):
        d = tmp_path / f"{path.name}_{workers}"
        d.mkdir()
        recipe = write_recipe(d, path)
        spec = json.loads(recipe.read_text())
        spec["source"] = {"path": str(path), "format": "csv"}
        recipe.write_text(json.dumps(spec))
        run = run_prep(recipe, d / "out", workers=workers)
        assert run.returncode == 0, run.stderr
        assert int(run.stdout.split(" units in ")[0].split()[-1].split("/")[1]) >= 6, run.stdout
        outs[path, workers] = d / "out"
    assert _shards(snapshot(outs[packed, 1])) == _shards(snapshot(outs[packed, 2]))
    for split in ("train", "val"):
        want, got = read_split(outs[plain, 2], split), read_split(outs[packed, 2], split)
        assert len(got) == len(want) > 0 and all(np.array_equal(a, b) for a, b in zip(got, want))
