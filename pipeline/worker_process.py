"""The pool-process side of a run: the initializer, the unit runner, and the watch that ends a
worker with its parent.

Kept apart from pipeline.executor (the parent's side: progress bars, shard placement, finalize,
rich) so the forkserver preloads only what a worker runs: numpy, orjson, tokenizers, gigatoken and
this module's imports take ~0.14 s, against ~0.19 s with the executor and tiktoken (best of 5,
one process); on 2 cores the forkserver's imports overlap the CLI's, and its readiness is what the
first worker waits for.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import select
import signal
import threading
import time

from pipeline import signed_urls, trace
from pipeline.errors import STOPS_THE_RUN, PrepError
from pipeline.pool import hf_threads, worker_environment
from pipeline.readers import WorkUnit
from pipeline.worker import WorkerContext, process_unit

__all__ = ["init_worker", "run_unit", "unit_or_failure"]

_CTX: WorkerContext | None = None
_QUEUE = None
_STARTS = None


def init_worker(ctx: WorkerContext, spec_path: str, queue, starts, parent_pid: int, workers: int) -> None:
    """`queue`: progress, put through a feeder thread (never blocks the unit); `starts`: (pid, unit
    index) per unit, put synchronously, so that a worker killed right after starting a unit is still
    named with it (a message left in a feeder thread's buffer dies with the process)."""
    global _CTX, _QUEUE, _STARTS
    trace.event("worker_init")
    with open(spec_path, "rb") as f:
        ctx = dataclasses.replace(ctx, spec=pickle.load(f))
    worker_environment(hf_threads(workers) if ctx.spec.backend == "hf" else 1)
    _CTX, _QUEUE, _STARTS = ctx, queue, starts
    signed_urls.remember_sources(ctx.recipe.sources)  # the signed URLs its reads fetch (listed in the parent)
    if ctx.remote_inputs:  # only then: importing url_reads imports fsspec (~50 ms per worker)
        from pipeline.readers.url_reads import expecting
        expecting(ctx.remote_inputs)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent stops the pool, no tracebacks here
    threading.Thread(target=_die_with, args=(parent_pid,), name="prep-parent-watch", daemon=True).start()
    ctx.get_encoder()  # load the tokenizer once per worker, before the first unit
    trace.event("worker_ready")


def _die_with(pid: int) -> None:
    """SIGKILL this worker when process `pid` ends. Without it a worker whose parent was kill -9'd
    lives on forever (blocked on the pool's queue, keeping the forkserver alive too), after first
    finishing its unit's parts under whatever run comes next."""
    try:
        fd = os.pidfd_open(pid)  # Linux >= 5.3: readable once `pid` has exited
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        select.select([fd], [], [])
    else:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                pass
            time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)


def run_unit(unit: WorkUnit) -> dict:
    def report(nbytes: int, docs: int, tokens: int) -> None:
        _QUEUE.put((nbytes, docs, tokens))
    _STARTS.put((os.getpid(), unit.index))  # lets the parent name the unit if this worker dies
    trace.event("unit_start", unit=unit.index)
    result = unit_or_failure(unit, _CTX, report)
    if trace.enabled():
        trace.event("unit_end", unit=unit.index, rss_mib=trace.rss_mib())
    return result


def unit_or_failure(unit: WorkUnit, ctx: WorkerContext, report) -> dict:
    try:
        return process_unit(unit, ctx, report)
    except PrepError as e:
        if ctx.recipe.on_bad_record == "error" or isinstance(e, STOPS_THE_RUN):
            raise
        # under `skip`, a damaged file fails its unit only; the manifest lists it
        return {"unit": unit.index, "status": "failed", "path": unit.path, "error": str(e)}


trace.event("imported", module=__name__)  # in the forkserver (its preload), and in the parent
