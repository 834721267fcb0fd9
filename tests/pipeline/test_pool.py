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


def test_forkserver_preload_is_what_a_worker_runs_and_no_more():
    """The pool's initializer and unit runner live in a preloaded module, and preloading does not pull
    in the parent's side (executor, rich) or tiktoken: every module the forkserver imports delays the
    first worker on a 2-core machine, and every one left out is imported again in each worker."""
    import subprocess
    import sys

    from pipeline.executor import init_worker, run_unit
    assert init_worker.__module__ in pool.PRELOAD and run_unit.__module__ in pool.PRELOAD
    code = ("import sys; [__import__(m) for m in sys.argv[1:]]; "
            "print(sorted(m for m in ('pipeline.executor', 'rich', 'tiktoken', 'typer') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, *[m for m in pool.PRELOAD if m != "__main__"]],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
