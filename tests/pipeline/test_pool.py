"""Worker thread settings (pipeline/pool.py)."""

from __future__ import annotations

import pytest

from pipeline import pool


@pytest.mark.parametrize("cores,workers,threads", [(2, 2, 2), (16, 16, 2), (16, 4, 8), (2, 8, 1), (1, 1, 2)])
def test_hf_threads_oversubscribe_twice(monkeypatch, cores, workers, threads):
    monkeypatch.setattr(pool.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert pool.hf_threads(workers) == threads


@pytest.mark.parametrize("threads,parallel", [(1, "false"), (4, "true")])
def test_worker_environment_sets_rayon(monkeypatch, threads, parallel):
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    pool.worker_environment(threads)
    assert pool.os.environ["TOKENIZERS_PARALLELISM"] == parallel
    assert pool.os.environ["RAYON_NUM_THREADS"] == str(threads)


def test_worker_environment_keeps_what_the_user_set(monkeypatch):
    monkeypatch.setenv("RAYON_NUM_THREADS", "3")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    pool.worker_environment(1)
    assert (pool.os.environ["RAYON_NUM_THREADS"], pool.os.environ["TOKENIZERS_PARALLELISM"]) == ("3", "true")
