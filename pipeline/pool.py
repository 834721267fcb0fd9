"""The worker pool's start method, and starting its forkserver early.

Kept free of heavy imports so the CLI can start the forkserver (which imports numpy, tokenizers,
gigatoken, ... once, for every worker to fork from) before the parent imports the pipeline and
loads the tokenizer: the two then overlap on separate cores.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys

__all__ = ["pool_context", "warm_forkserver", "worker_environment", "hf_threads", "PRELOAD"]

# Imported once in the forkserver, so each worker forks with them loaded (~0.3 s of imports each).
# pipeline.blas_threads first: it must run before numpy loads OpenBLAS.
# "__main__": the parent's main script (the `prep` console script, which imports only pipeline.launch;
# `python -m pipeline.cli`: typer and rich), which every child would otherwise import again before it
# starts (multiprocessing.spawn.prepare). pipeline.worker_process holds the workers' initializer (0.075 s
# of imports in each worker when it was left out); tiktoken is imported by a worker only for its
# backend, and pipeline.executor (the parent's side) not at all.
PRELOAD = ["pipeline.blas_threads", "__main__", "numpy", "orjson", "tokenizers", "gigatoken", "pipeline.worker_process", "pipeline.fast_bpe"]


def pool_context():
    """forkserver where the platform has it (its exit codes made thread-safe: see
    pipeline.forkserver_exitcode), else spawn."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    from pipeline.forkserver_exitcode import ForkServerContext
    return ForkServerContext()


def worker_environment(threads: int = 1) -> None:
    """Thread pools inside a worker: `threads` for tokenizers' rayon (1: none). Called in each worker
    before its first encode (rayon reads these when its pool starts); not in the parent, whose proof
    and Unicode probe run tokenizers on every core before any worker exists. Variables the user set
    win."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true" if threads > 1 else "false")
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))


def hf_threads(workers: int) -> int:
    """rayon threads per worker for the hf backend: 2x oversubscribed, so one worker's encode fills
    the core another leaves idle while it parses or writes (57.6 MB, 2 workers on 2 cores: 14.8 s
    with 1 thread each, 13.1 s with 2)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, 2 * cores // max(1, workers))


def _workers_import_datasets(source) -> bool:
    """Whether workers read `source` through `datasets`: streamed shards, a split slice (a view), a
    remote saved directory. Workers memory-map the Arrow files of a local saved directory or of a
    prepared hub/builder dataset with pyarrow (pipeline.readers.hf)."""
    from pipeline.source_formats import is_url
    through_datasets = bool(source.streaming) or "[" in (source.split or "") or is_url(source.path)
    # the format last: inferring a directory's takes its census
    return through_datasets and source.resolved_format() == "hf"


def warm_forkserver(recipe=None) -> None:
    """Start the forkserver (and its imports) in the background. Idempotent. With a `recipe` whose
    workers read a Hugging Face dataset through `datasets` (`_workers_import_datasets`), the
    forkserver imports `datasets` too (0.74 s per process here), once, instead of each worker after
    its fork.

    Started while the parent loads and proves the tokenizer: on 55 MB with 2 workers, 5 interleaved
    runs each, 1.87 s -> 1.68 s end to end; started at CLI entry instead of after the parent's own
    imports, see run_units._spec_file for the other half of worker start-up."""
    ctx = pool_context()
    if ctx.get_start_method() != "forkserver":
        return
    hf = recipe is not None and any(_workers_import_datasets(src) for src in recipe.sources)
    # modules that fail to import are skipped by the forkserver
    ctx.set_forkserver_preload(_path_fix() + PRELOAD + (["datasets"] if hf else []))
    from multiprocessing import forkserver, resource_tracker
    with _parent_path_for_children():  # spawning it (and the resource tracker) takes ~8 ms
        # the tracker first: its spawn unblocks SIGINT, which the forkserver's must find blocked
        resource_tracker.ensure_running()
        with _ctrl_c_blocked():
            forkserver.ensure_running()


@contextlib.contextmanager
def _ctrl_c_blocked():
    """SIGINT blocked in this thread, so that a process spawned inside starts with it blocked (a mask
    survives fork and exec), as multiprocessing's resource tracker is started. A terminal's Ctrl-C
    reaches the whole process group: the forkserver ignores SIGINT only once its preload is imported
    (~0.25 s), so a Ctrl-C in the first second of a run printed its KeyboardInterrupt traceback (or
    "Fatal Python error: init_import_site") above prep's one line. The workers it forks inherit the
    mask; they ignore SIGINT anyway (the parent stops them). A SIGINT meanwhile waits for the parent."""
    import signal
    if not hasattr(signal, "pthread_sigmask"):  # not POSIX: no forkserver either
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _path_fix() -> list[str]:
    """On 3.10 (no PYTHONSAFEPATH), the module that takes the working directory off the forkserver's
    path, preloaded before all others (see prep_safepath.py)."""
    return ["prep_safepath"] if sys.version_info < (3, 11) else []


def _forkserver_gets_parent_path() -> bool:
    """CPython hands the forkserver the parent's sys.path since 3.12.8 and 3.13.1 (gh-117378)."""
    v = sys.version_info
    return v >= (3, 13, 1) or (3, 12, 8) <= v < (3, 13)


@contextlib.contextmanager
def _parent_path_for_children():
    """Before that fix the forkserver, started as `python -c`, searched the working directory first
    and never the parent's path: from a project with a `pipeline/` (or `numpy.py`, ...) of its own,
    prep's workers imported the user's module in place of prep's and died. Here the children spawned
    inside get the parent's sys.path ('' as the absolute working directory, as spawn does) through
    PYTHONPATH, and PYTHONSAFEPATH keeps `-c` from putting the working directory ahead of it (3.11+;
    on 3.10 the preloaded prep_safepath module takes it off). Set only while spawning, in this thread: the
    variables are put back before anything else runs here."""
    if _forkserver_gets_parent_path():
        yield
        return
    cwd = os.path.abspath(os.getcwd())
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "PYTHONSAFEPATH")}
    os.environ["PYTHONPATH"] = os.pathsep.join(cwd if p == "" else os.fsdecode(p) for p in sys.path
                                               if isinstance(p, (str, bytes, os.PathLike)))
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
