"""A compressed file larger than a unit is cut into ranges of its decompressed bytes (pipeline.spool):
the same shards as the plain file for any -j, after a kill and resume too; a damaged stream fails
only the units from the damage on."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import signal
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest
import zstandard
from faultkit import REPO, assert_no_survivors, journal_lines, run_prep, snapshot, write_recipe

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


@pytest.mark.parametrize("kind,workers", [("zst", 1), ("zst", 2), ("gz", 2), ("bz2", 2), ("xz", 2)])
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


def _decodable(kind: str, blob: bytes) -> bytes:
    """Every byte the codec's incremental decoder gives for `blob` before it stops, fed one byte at a
    time (so nothing is lost with a call that raises): the bytes a damaged file holds for its units."""
    new = {"gz": lambda: zlib.decompressobj(31), "zst": lambda: zstandard.ZstdDecompressor().decompressobj(),
           "bz2": bz2.BZ2Decompressor, "xz": lzma.LZMADecompressor}[kind]
    d, out = new(), []
    for i in range(len(blob)):
        try:
            out.append(d.decompress(blob[i:i + 1]))
        except Exception:
            break
    return b"".join(out)


@pytest.mark.parametrize("kind,damage", [("gz", "cut"), ("gz", "flip"), ("zst", "flip"), ("xz", "cut"),
                                         ("bz2", "cut")])
def test_every_unit_before_the_damage_keeps_its_documents(tmp_path, corpus, kind, damage):
    """Each unit whose window the decodable bytes complete keeps its documents; the rest fail. isal's
    igzip (what the product reads .gz with, a declared dependency) raised from read1 without the bytes it
    had decoded: a .gz cut at 3/5 failed every unit. A .zst flipped in its first 128 KiB feed lost
    that feed's output the same way in base._ZstdReader."""
    from pipeline.readers.base import _gzip
    assert _gzip().__name__ == "isal.igzip"  # the fast path this guards (pyproject declares isal)
    blob = bytearray(_compressed(tmp_path, corpus, kind).read_bytes())
    if damage == "cut":
        blob = blob[: len(blob) * 3 // 5]
    else:  # 32 bytes garbled at 3/5 (within zstd's first 128 KiB feed)
        at = len(blob) * 3 // 5
        blob[at:at + 32] = bytes(b ^ 0x5A for b in blob[at:at + 32])
    path = tmp_path / f"small.jsonl.{kind}"
    path.write_bytes(bytes(blob))
    good = _decodable(kind, bytes(blob))
    unit = 65536
    assert len(good) > 2 * unit and good.count(b"\n") > 100  # a vacuous pass guarded: units before the damage
    recipe = write_recipe(tmp_path, path, output={"dir": str(tmp_path / "unused"), "shard_tokens": 15000,
                                                  "val_fraction": 0.0, "seed": 7})
    out = tmp_path / "out"
    run = run_prep(recipe, out, workers=2)
    assert run.returncode == 0, run.stderr
    m = json.loads((out / "manifest.json").read_text())
    units = int(run.stdout.split(" units in ")[0].split()[-1].split("/")[1])  # "7/7 units in ..."
    if kind != "zst":  # no declared size: the plan decodes the small file whole, to its last good byte
        assert units == -(-len(good) // unit)
    # unit k's window ends just past the first newline at or after (k + 1) x unit - 1 (spool.py)
    first_failed = next(k for k in range(units) if k == units - 1 or good.find(b"\n", (k + 1) * unit - 1) < 0)
    assert first_failed >= 2  # not vacuous: whole units lie before the damage
    assert sorted(f["unit"] for f in m["failed_units"]) == list(range(first_failed, units))
    assert all(f"{path.name}: corrupt or truncated input" in f["error"] for f in m["failed_units"])
    lines = good[:good.find(b"\n", first_failed * unit - 1) + 1].splitlines()  # those starting before it
    docs = read_split(out, "train")
    if damage == "cut":  # the bytes before a cut are the file's own: the documents too, as of those lines
        plain = tmp_path / "plain"
        plain.mkdir()
        (plain / "kept.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
        spec = json.loads(recipe.read_text())
        spec["source"]["path"] = str(plain / "kept.jsonl")
        (plain / "recipe.yaml").write_text(json.dumps(spec))
        assert run_prep(plain / "recipe.yaml", plain / "out").returncode == 0
        kept = read_split(plain / "out", "train")
        assert len(docs) == len(kept) > 100 and all(np.array_equal(a, b) for a, b in zip(docs, kept))
    else:  # bytes between the damage and where the decoder noticed it may be garbled: counted only
        assert 100 < len(docs) <= len(lines)
    assert m["splits"]["train"]["num_docs"] == len(docs)


@pytest.mark.parametrize("kind,damage", [("gz", "cut"), ("gz", "flip"), ("zst", "flip"), ("xz", "flip"),
                                         ("bz2", "cut")])
def test_the_spools_reader_gives_every_decodable_byte_then_the_error(tmp_path, corpus, kind, damage):
    """readers.salvage behind the product's own decompressing stream (isal's igzip for .gz): the bytes,
    and the reader's error after them, as the spool reads them (read1 of SPOOL_BLOCK)."""
    from pipeline.readers.base import decode_failures, open_input
    from pipeline.readers.salvage import salvaging_reader
    from pipeline.spool import SPOOL_BLOCK
    blob = bytearray(_compressed(tmp_path, corpus, kind).read_bytes())
    at = len(blob) * 3 // 5
    if damage == "cut":
        del blob[at:]
    else:
        blob[at:at + 32] = bytes(b ^ 0x5A for b in blob[at:at + 32])
    path = tmp_path / f"damaged.jsonl.{kind}"
    path.write_bytes(bytes(blob))
    good = _decodable(kind, bytes(blob))
    assert len(good) > SPOOL_BLOCK // 8
    stream, raw = open_input(str(path))
    got = []
    with raw, stream, pytest.raises(decode_failures()):
        read = salvaging_reader(stream.read1, str(path), None)
        while block := read(SPOOL_BLOCK):
            got.append(block)
    assert b"".join(got) == good
    if damage == "cut":
        assert corpus.read_bytes().startswith(good)


def test_failed_units_of_a_finished_run_say_overwrite_and_a_stopped_run_resumes(tmp_path, corpus):
    """Under on_bad_record: skip the run finishes and deletes its state: a re-run only says "already
    complete", so failed_units tell to re-run with --overwrite, and that re-run says so too. A run
    that stops on the damage (on_bad_record: error) keeps its state: replaced, the file resumes."""
    whole = _compressed(tmp_path, corpus, "gz").read_bytes()
    path = tmp_path / "small.jsonl.gz"
    path.write_bytes(whole[: len(whole) * 3 // 5])
    recipe = write_recipe(tmp_path, path)
    out = tmp_path / "out"
    run = run_prep(recipe, out, workers=2)
    assert run.returncode == 0, run.stderr
    failed = json.loads((out / "manifest.json").read_text())["failed_units"]
    assert failed and all(f["error"].endswith("replace the file and re-run with --overwrite") for f in failed)
    path.write_bytes(whole)  # the fix the error names
    again = run_prep(recipe, out, workers=2)
    assert again.returncode == 0 and "already complete" in again.stdout
    assert (f"note: {len(failed)} unit(s) or file(s) failed and were left out (see failed_units in the manifest); "
            "after replacing their files, --overwrite redoes them") in " ".join(again.stdout.split())
    redo = subprocess.run([sys.executable, "-m", "pipeline.cli", "tokenize", "--recipe", str(recipe), "--output",
                           str(out), "--num-workers", "2", "--no-progress", "--overwrite"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert redo.returncode == 0, redo.stderr
    redone = json.loads((out / "manifest.json").read_text())
    assert redone["failed_units"] == [] and "already complete" not in redo.stdout

    # a .zst header declares the whole size: the replaced file gets the same plan, so the run that stopped on
    # it resumes (a damaged .gz/.bz2/.xz the plan decodes whole stops the plan, test_under_error_damage_...)
    (tmp_path / "strict").mkdir()
    whole = _compressed(tmp_path / "strict", corpus, "zst").read_bytes()
    path = tmp_path / "strict" / "small.jsonl.zst"
    path.write_bytes(whole[: len(whole) * 3 // 5])
    strict = write_recipe(tmp_path / "strict", path, on_bad_record="error")
    stopped = run_prep(strict, tmp_path / "out2", workers=2)
    assert stopped.returncode == 1 and stopped.stderr.rstrip().endswith("replace the file and re-run to resume")
    path.write_bytes(whole)
    resumed = run_prep(strict, tmp_path / "out2", workers=2)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((tmp_path / "out2" / "manifest.json").read_text())["failed_units"] == []
    fresh = run_prep(strict, tmp_path / "out3", workers=2)
    assert fresh.returncode == 0 and snapshot(tmp_path / "out2") == snapshot(tmp_path / "out3")


def _units_run(run) -> tuple[int, int]:
    """(units run, units planned) from the summary line "3/7 units in ...\""""
    ran, total = run.stdout.split(" units in ")[0].split()[-1].split("/")
    return int(ran), int(total)


@pytest.mark.parametrize("kind", ["gz", "bz2", "xz", "zst-unsized"])
def test_under_error_damage_the_plan_meets_stops_before_any_unit_and_the_replaced_file_runs(tmp_path, corpus, kind):
    """A compressed file small enough for the plan to decode whole (no declared size to go by) is planned
    from the bytes before its damage, and its replacement gets another plan: a run that stopped on it
    after running units said "replace the file and re-run to resume", and the re-run was refused as
    another recipe. Under on_bad_record: error the plan now stops on it, naming it; replaced, the file
    runs to the dataset of a clean run."""
    whole = _compressed(tmp_path, corpus, kind).read_bytes()
    path = tmp_path / f"small.jsonl.{kind.split('-')[0]}"
    path.write_bytes(whole[: len(whole) * 3 // 5])
    (tmp_path / "plain").mkdir()
    head = corpus.read_bytes()[:100_000]
    (tmp_path / "plain" / "a.jsonl").write_bytes(head[:head.rfind(b"\n") + 1])  # a good file before it
    recipe = write_recipe(tmp_path, tmp_path / "plain", on_bad_record="error")
    spec = json.loads(recipe.read_text())
    spec["source"]["path"] = [str(tmp_path / "plain" / "a.jsonl"), str(path)]
    recipe.write_text(json.dumps(spec))
    out = tmp_path / "out"
    stopped = run_prep(recipe, out, workers=2)
    assert stopped.returncode == 1
    message = stopped.stderr.strip().splitlines()[-1]
    assert message.startswith(f"error: {path}: corrupt or truncated input: it decodes to byte ")
    assert message.endswith("found while planning, before any unit ran (on_bad_record: error): replace the file "
                            "and re-run")
    assert not (out / ".prep" / "journal.jsonl").exists()
    path.write_bytes(whole)  # the fix it names
    again = run_prep(recipe, out, workers=2)
    assert again.returncode == 0, again.stderr
    assert _units_run(again)[1] >= 8  # not vacuous: the replaced file is several units
    fresh = run_prep(recipe, tmp_path / "fresh", workers=2)
    assert fresh.returncode == 0 and snapshot(out) == snapshot(tmp_path / "fresh")


@pytest.mark.parametrize("kind", ["gz", "xz"])
def test_a_run_stopped_on_damage_found_while_spooling_resumes_once_the_file_is_replaced(tmp_path, kind):
    """A compressed file over SAMPLE_BYTES is planned from a sample and its size, so damage past the sample
    is met while spooling, after units ran; the replaced file's size gives another plan, which the re-run
    refused as another recipe although the error said "replace the file and re-run to resume". Now the
    re-run takes the new plan and keeps the journaled units planned the same (the good file before it, the
    damaged file's units before the damage); killed and resumed once more, it still gives a clean run's
    dataset byte for byte."""
    from pipeline.readers.base import SAMPLE_BYTES
    rnd = np.random.default_rng(3)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)
    lines = [json.dumps({"text": rnd.choice(letters, size=int(n)).tobytes().decode()}).encode() + b"\n"
             for n in rnd.integers(200, 2000, size=2600)]
    data = b"".join(lines)
    whole = gzip.compress(data) if kind == "gz" else lzma.compress(data, preset=0)
    assert len(whole) * 3 // 5 > SAMPLE_BYTES  # the plan samples the damaged file: it meets no damage
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(b"".join(lines[:500]))  # a good file before the damaged one
    path = tmp_path / "in" / f"b.jsonl.{kind}"
    path.write_bytes(whole[: len(whole) * 3 // 5])
    recipe = write_recipe(tmp_path, tmp_path / "in", on_bad_record="error", unit_bytes=1 << 18,
                          output={"dir": str(tmp_path / "unused"), "shard_tokens": 200_000, "val_fraction": 0.05,
                                  "seed": 7})
    out = tmp_path / "out"
    stopped = run_prep(recipe, out, workers=2)
    assert stopped.returncode == 1
    assert stopped.stderr.rstrip().endswith("replace the file and re-run to resume"), stopped.stderr
    kept = len(journal_lines(out))
    assert kept >= 3  # not vacuous: a.jsonl's 2 units and the damaged file's first ones are done
    path.write_bytes(whole)  # the fix it names
    killed = run_prep(recipe, out, workers=1, fault="journal:2")  # the replanned run, killed once
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    again = run_prep(recipe, out, workers=2)
    assert again.returncode == 0, again.stderr
    ran, total = _units_run(again)
    assert ran <= total - kept - 2  # the units done before the stop and before the kill were kept
    fresh = run_prep(recipe, tmp_path / "fresh", workers=2)
    assert fresh.returncode == 0 and snapshot(out) == snapshot(tmp_path / "fresh")


def test_a_damaged_compressed_array_whose_every_unit_failed_runs_once_replaced(tmp_path, corpus):
    """A gzipped JSON array cut short before a unit's worth of its records is one unit; under skip it
    fails, and with no unit left the run ends keeping its state, its error saying "replace the file and
    re-run to resume". The replaced file is planned as several ranges: that re-run was refused as another
    recipe. Now it runs, to a clean run's dataset."""
    records = [json.loads(line) for line in corpus.read_text().splitlines()]
    whole = gzip.compress(json.dumps(records, indent=1).encode())
    path = tmp_path / "array.json.gz"
    path.write_bytes(whole[: len(whole) // 10])  # less than a unit (64 KiB) of records before the cut
    assert len(_decodable("gz", path.read_bytes())) < 65536
    recipe = write_recipe(tmp_path, path)
    out = tmp_path / "out"
    failed = run_prep(recipe, out, workers=2)
    assert failed.returncode == 1 and "every unit failed (1 unit)" in failed.stderr
    assert "replace the file and re-run to resume" in failed.stderr
    path.write_bytes(whole)
    again = run_prep(recipe, out, workers=2)
    assert again.returncode == 0, again.stderr
    assert _units_run(again)[1] >= 7  # not vacuous: the whole array is planned as ranges
    fresh = run_prep(recipe, tmp_path / "fresh", workers=2)
    assert fresh.returncode == 0 and snapshot(out) == snapshot(tmp_path / "fresh")


def _random_text_records(n: int, seed: int) -> list[dict]:
    """Records of random letters: their .gz is about as big as their text (a few MB: over SAMPLE_BYTES,
    so the plan samples the file's start and meets the damage only in its scan of the array)."""
    rnd = np.random.default_rng(seed)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)
    return [{"id": i, "text": rnd.choice(letters, size=int(k)).tobytes().decode()}
            for i, k in enumerate(rnd.integers(200, 2000, size=n))]


@pytest.mark.parametrize("shape,damage", [("array", "cut"), ("records_field", "cut"), ("array", "flip")])
def test_a_damaged_compressed_array_keeps_every_unit_before_the_damage(tmp_path, shape, damage):
    """A gzipped JSON array (or {"data": [...]} under records_field) of a few MB, damaged: under skip its
    units before the damage keep their records, and the unit holding it (with the cut-off rest) is the
    one failed unit, naming the file and the damage; JSON Lines did so, but the array was one unit that
    failed whole. Under error the plan stops with one line naming the fix, and the replaced file runs to
    the dataset of a clean run."""
    from pipeline.readers.base import SAMPLE_BYTES
    records = _random_text_records(3000, 5)
    field = "data" if shape == "records_field" else None
    data = json.dumps({"version": 1, "data": records} if field else records, indent=1).encode()
    whole = bytearray(gzip.compress(data))
    at = len(whole) * 3 // 5
    assert at > SAMPLE_BYTES  # the plan's sample is sound: the scan meets the damage
    damaged = whole[:at] if damage == "cut" else whole[:at] + bytes(b ^ 0x5A for b in whole[at:at + 32]) + \
        whole[at + 32:]
    unit = 1 << 18
    dirs = {name: tmp_path / name for name in ("skip", "strict", "clean")}
    recipes = {}
    for name, d in dirs.items():
        d.mkdir()
        (d / "a.json.gz").write_bytes(bytes(whole if name == "clean" else damaged))
        recipes[name] = write_recipe(d, d / "a.json.gz", unit_bytes=unit, on_bad_record="error" if name == "strict"
                                     else "skip", output={"dir": str(d / "unused"), "shard_tokens": 200_000,
                                                          "val_fraction": 0.0, "seed": 7})
        if field:
            spec = json.loads(recipes[name].read_text())
            spec["source"]["records_field"] = field
            recipes[name].write_text(json.dumps(spec))
    clean = run_prep(recipes["clean"], dirs["clean"] / "out", workers=2)
    assert clean.returncode == 0, clean.stderr

    path, out = dirs["skip"] / "a.json.gz", dirs["skip"] / "out"
    run = run_prep(recipes["skip"], out, workers=2)
    assert run.returncode == 0, run.stderr
    failed = json.loads((out / "manifest.json").read_text())["failed_units"]
    ran, total = _units_run(run)
    assert total >= 5  # not one unit: the records before the damage were planned as units
    good = _decodable("gz", bytes(damaged))
    docs, everything = read_split(out, "train"), read_split(dirs["clean"] / "out", "train")
    assert all(f"{path}: corrupt or truncated input: it decodes to byte " in f["error"] for f in failed)
    if damage == "cut":  # the bytes before a cut are the file's own: its first records, exactly
        assert [f["unit"] for f in failed] == [total - 1]  # the one holding the damage, and the rest
        assert len(docs) > 0 and all(np.array_equal(a, b) for a, b in zip(docs, everything))
        # every record ending a unit and a record before the damage is kept (the last unit starts at a cut
        # past the last multiple of unit_bytes)
        assert good[:len(good) - unit - 4000].count(b'"text"') - 1 <= len(docs) < good.count(b'"text"')
    else:  # bytes between the damage and where the decoder noticed it may be garbled: counted only
        units = sorted(f["unit"] for f in failed)
        assert units[-1] == total - 1 and units == list(range(units[0], total)) and units[0] >= 2
        assert 0 < len(docs) < len(everything)

    path, out = dirs["strict"] / "a.json.gz", dirs["strict"] / "out"
    stopped = run_prep(recipes["strict"], out, workers=2)
    assert stopped.returncode == 1
    lines = stopped.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: corrupt or truncated input: it decodes to byte ")
    assert lines[0].endswith("found while planning, before any unit ran (on_bad_record: error): replace the file "
                             "and re-run")
    path.write_bytes(bytes(whole))  # the fix it names
    again = run_prep(recipes["strict"], out, workers=2)
    assert again.returncode == 0, again.stderr
    fresh = run_prep(recipes["strict"], dirs["strict"] / "fresh", workers=2)
    assert fresh.returncode == 0 and snapshot(out) == snapshot(dirs["strict"] / "fresh")
