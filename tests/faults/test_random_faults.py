"""Randomized: a run stopped at a random named fault point (pipeline/faults.py; kill -9, or a Ctrl-C where
the point is passed in the parent), once or twice, on 1-3 workers, then finished on 1-3 workers, gives
the clean run's files byte for byte (shards, indexes, manifest.json, rejects.jsonl), on plain JSON Lines
and on a .zst read through the spooler, each with rejected records. Every stopped run ends (a hang is a
failure: the run's timeout) with its exit code and no traceback, and leaves no process behind.

Slow (~1 minute): `pytest -m slow tests/faults/test_random_faults.py`; PREP_RANDOM_SEED and
PREP_RANDOM_ITERATIONS repeat or lengthen it. Found: a Ctrl-C while a shard's thread started hung the
interpreter at exit (tests/faults/test_interrupt_races.py)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import time

import pytest
import zstandard
from faultkit import CORPUS_LINES, DEMO, assert_no_survivors, run_prep, snapshot, write_recipe

# (point, how many passes it can take in a run of 7 units: the n-th is drawn from 1..this)
POINTS = [("rename-plan.json", 1), ("start", 1), ("shard-tmp", 8), ("shard-bin", 8), ("journal", 7),
          ("journal-torn", 7), ("finalize-shard", 8), ("journal-placed", 8), ("journal-placed-torn", 8),
          ("parts-drop", 8), ("manifest-before", 1), ("rename-manifest.json", 1), ("manifest-after", 1)]
IN_WORKERS = ("shard-tmp", "shard-bin")  # passed in the workers on a pool: they ignore SIGINT
SEED = int(os.environ.get("PREP_RANDOM_SEED", "20261125"))
ITERATIONS = int(os.environ.get("PREP_RANDOM_ITERATIONS", "8"))


def _corpus(directory, kind: str):
    with open(DEMO / "corpus.jsonl", "rb") as f:
        lines = [next(f) for _ in range(CORPUS_LINES)]
    for k in (200, 330, 460, 590):  # rejected (non_string_text) in 4 of the 7 units
        lines[k] = b'{"text": 5}\n'
    data = b"".join(lines)
    if kind == "zst":
        path = directory / "bad.jsonl.zst"
        path.write_bytes(zstandard.ZstdCompressor().compress(data))
    else:
        path = directory / "bad.jsonl"
        path.write_bytes(data)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["jsonl", "zst"])
def test_random_stops_then_resume_on_any_worker_count_is_identical(tmp_path, kind):
    recipe = write_recipe(tmp_path, _corpus(tmp_path, kind))
    clean = run_prep(recipe, tmp_path / "clean", workers=1)
    assert clean.returncode == 0, clean.stderr
    want = snapshot(tmp_path / "clean")
    assert "rejects.jsonl" in want  # guard: the rejects are compared too
    rng = random.Random(f"{SEED}-{kind}")
    for it in range(ITERATIONS):
        out = tmp_path / f"out{it}"
        history = []
        for _ in range(rng.randint(1, 2)):
            point, passes = rng.choice(POINTS)
            workers = rng.randint(1, 3)
            action = rng.choice(["kill", "kill", "int"])
            fault = f"{point}:{rng.randint(1, passes)}:{action}"
            tag = f"random-{kind}-{it}-{time.monotonic_ns()}"
            run = run_prep(recipe, out, workers=workers, fault=fault, tag=tag, timeout=120)
            history.append((fault, workers, run.returncode))
            assert_no_survivors(tag)
            # 0: the point came too late (or never), 1: a worker killed at a shard point, 130: a Ctrl-C
            assert run.returncode in (0, 1, 130, -signal.SIGKILL), (SEED, history, run.stderr)
            assert "Traceback" not in run.stderr, (SEED, history, run.stderr)
            if run.returncode == 1:
                assert point in IN_WORKERS and "worker process" in run.stderr, (SEED, history, run.stderr)
        workers = rng.randint(1, 3)
        final = run_prep(recipe, out, workers=workers, timeout=120)
        history.append(("finish", workers, final.returncode))
        assert final.returncode == 0, (SEED, history, final.stderr)
        got = snapshot(out)
        assert got == want, (SEED, history, sorted(k for k in got.keys() | want.keys() if got.get(k) != want.get(k)))
        shutil.rmtree(out)
