"""Damage after the fact: a flipped byte in a `.bin`, a truncated `.idx` or `.bin` are caught by
`prep verify` (and the cheap ones by `check_dataset(quick=True)`, what loaders call on open); damaged
run state (lost parts, a garbled journal, a garbled plan) is repaired by the re-run, identically."""

from __future__ import annotations

import random
import re
import shutil
import signal
import subprocess
import sys

import pytest
from faultkit import REPO, assert_complete, journal_lines, run_prep, snapshot, write_recipe

from pipeline.verify import check_dataset

NUM_UNITS = 7


@pytest.fixture
def dataset(tmp_path, reference_out):
    out = tmp_path / "ds"
    shutil.copytree(reference_out, out)
    return out


def prep_verify(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", "verify", "--no-progress", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)


def test_verify_passes_on_an_intact_dataset(dataset):
    for args in ((dataset,), ("--quick", dataset)):
        r = prep_verify(*args)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.startswith("ok: ")
    assert check_dataset(dataset) == [] and check_dataset(dataset, quick=False) == []


@pytest.mark.parametrize("shard", ["train/shard-000000.bin", "train/shard-000004.bin", "val/shard-000000.bin"])
def test_flipped_byte_in_a_bin_is_caught_by_verify(dataset, shard):
    path = dataset / shard
    data = bytearray(path.read_bytes())
    pos = random.Random(shard).randrange(len(data))
    data[pos] ^= 0x10
    path.write_bytes(bytes(data))
    r = prep_verify(dataset)
    assert r.returncode == 1
    lines = r.stdout.strip().splitlines()
    assert lines and all(line.startswith(f"{path}: ") for line in lines), r.stdout  # only that shard
    assert lines[0].startswith(f"{path}: sha256 ") and "does not match the manifest" in lines[0]
    assert all("is not below the vocabulary size" in line for line in lines[1:])  # the flip may add this
    # same size: the cheap checks (verify --quick, loaders on open) cannot see it, by design
    assert prep_verify("--quick", dataset).returncode == 0
    assert check_dataset(dataset, quick=True) == []


@pytest.mark.parametrize("cut", [1, 8, 20])
def test_truncated_idx_is_caught_by_verify_and_on_open(dataset, cut):
    path = dataset / "train" / "shard-000002.idx"
    path.write_bytes(path.read_bytes()[:-cut])
    for args in ((dataset,), ("--quick", dataset)):
        r = prep_verify(*args)
        assert r.returncode == 1
        lines = r.stdout.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"{path}: ") and "truncated" in lines[0], r.stdout
    problems = check_dataset(dataset, quick=True)
    assert len(problems) == 1 and problems[0].startswith(f"{path}: ")


def test_truncated_bin_is_caught_on_open(dataset):
    path = dataset / "val" / "shard-000000.bin"
    path.write_bytes(path.read_bytes()[:-2])
    problems = check_dataset(dataset, quick=True)
    assert len(problems) == 1 and problems[0].startswith(f"{path}: ") and "truncated" in problems[0]


def test_journaled_unit_whose_parts_vanished_is_redone(tmp_path, recipe, reference):
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:4").returncode == -signal.SIGKILL
    # unit 3 was journaled, then the run died before its parts reached the shard-placing thread
    gone = list((out / ".prep" / "parts" / "train").glob("u0000003-*.bin"))
    assert gone  # guard
    for p in gone:
        p.unlink()  # a user "cleaning up", a restored backup...
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert f"4/{NUM_UNITS} units" in r.stdout  # unit 3 and the three never done
    assert_complete(out, reference)


@pytest.mark.parametrize("ext", ["bin", "idx"])
def test_journaled_unit_whose_part_changed_is_redone(tmp_path, recipe, reference, ext):
    """Parts are not fsynced (a power cut can leave them short or garbled); each unit's journal entry
    holds their crc32s, and a resumed run redoes a unit whose unplaced parts no longer match."""
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:4").returncode == -signal.SIGKILL
    part = out / ".prep" / "parts" / "train" / f"u0000003-0000.{ext}"
    data = bytearray(part.read_bytes())
    data[-3] ^= 0x01  # same size: only the crc32 can tell
    part.write_bytes(bytes(data))
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert f"4/{NUM_UNITS} units" in r.stdout  # unit 3 and the three never done
    assert_complete(out, reference)


def test_garbled_journal_line_cuts_the_journal_there(tmp_path, recipe, reference):
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:4").returncode == -signal.SIGKILL
    path = out / ".prep" / "journal.jsonl"
    lines = path.read_bytes().split(b"\n")
    third = [i for i, line in enumerate(lines) if line.startswith(b'{"num_docs"')][2]  # unit 2's line
    lines[third] = b"\x00\xff garbage from a power cut" + lines[third][30:]
    path.write_bytes(b"\n".join(lines))
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    # units 0-1 are kept unless a shard that consumed their parts was journaled after the cut
    redone = int(re.search(rf"(\d+)/{NUM_UNITS} units", r.stdout).group(1))
    assert 5 <= redone <= NUM_UNITS, r.stdout
    assert_complete(out, reference)


def test_garbled_plan_restarts_the_run(tmp_path, recipe, reference):
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:3").returncode == -signal.SIGKILL
    (out / ".prep" / "plan.json").write_bytes(b'{"fingerprint": "ab')
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert f"{NUM_UNITS}/{NUM_UNITS} units" in r.stdout
    assert_complete(out, reference)
    assert not journal_lines(out)


def test_rerun_on_a_damaged_complete_dataset_says_what_is_wrong(tmp_path, recipe, reference):
    """Not "already complete, nothing to do": the cheap checks run, the damage is named, and
    --overwrite rebuilds the same bytes."""
    out = tmp_path / "out"
    assert run_prep(recipe, out).returncode == 0
    idx = out / "train" / "shard-000003.idx"
    idx.write_bytes(idx.read_bytes()[:-4])
    r = run_prep(recipe, out)
    assert r.returncode == 1
    err = r.stderr.replace("\n", "")
    assert "complete for this recipe, but damaged: " in err and f"{idx}: " in err and "truncated" in err, err
    assert "--overwrite rebuilds" in err
    r = subprocess.run([sys.executable, "-m", "pipeline.cli", "tokenize", "--recipe", str(recipe), "--output",
                        str(out), "--overwrite", "--no-progress"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert_complete(out, reference)


@pytest.mark.parametrize("damage", ["delete", "flip"])
def test_journaled_unit_whose_rejects_file_changed_is_redone(tmp_path, corpus, damage):
    """A unit's rejects file is not fsynced either: its journal entry holds the file's crc32, and a
    resumed run redoes a unit whose rejects file is gone or differs, so rejects.jsonl stays complete."""
    lines = corpus.read_bytes().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"  # a malformed line every 60 lines: every 64 KiB unit has some
    bad.write_bytes(b"".join(b'{"text": broken\n' + line if i % 60 == 30 else line for i, line in enumerate(lines)))
    recipe = write_recipe(tmp_path, bad)
    reference_run = tmp_path / "reference"
    assert run_prep(recipe, reference_run).returncode == 0
    expect = snapshot(reference_run)
    assert "rejects.jsonl" in expect

    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:4").returncode == -signal.SIGKILL
    entry = next(e for e in journal_lines(out) if e["unit"] == 2)
    assert entry["num_rejects"] > 0 and "rejects_crc32" in entry  # guard
    path = out / ".prep" / "rejects" / "u0000002.jsonl"
    if damage == "delete":
        path.unlink()
    else:
        data = bytearray(path.read_bytes())
        data[5] ^= 0x01  # same size
        path.write_bytes(bytes(data))
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert f"4/{NUM_UNITS} units" in r.stdout  # unit 2 and the three never done
    assert_complete(out, expect)
