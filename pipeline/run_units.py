"""Running a plan's units: in this process (1 worker) or on a process pool, each finished unit
journaled and handed on in dataset order (pipeline.executor.tokenize plans and finishes the run).

The pool keeps at most 2 x workers units in flight. A worker that dies fails the run at once, naming
the worker, how it died and its unit; the others are killed (units in flight are redone on resume).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from pipeline import input_changes, trace
from pipeline.assemble import PartStream
from pipeline.errors import PrepError
from pipeline.forkserver_exitcode import DYING_S, forkserver_exit, kill_orphans
from pipeline.interrupts import deferred
from pipeline.journal import RunState
from pipeline.pool import pool_context
from pipeline.progress import RunProgress
from pipeline.readers import WorkUnit
from pipeline.recipe import Recipe
from pipeline.shards import named
from pipeline.worker_process import init_worker, run_unit, unit_or_failure


def _check_bad_budget(recipe: Recipe, results: dict[int, dict]) -> None:
    if recipe.max_bad_records is None:
        return
    n = sum(r.get("num_rejects", 0) for r in results.values())
    if n > recipe.max_bad_records:
        raise PrepError(f"max_bad_records: {n} records rejected so far, more than the limit "
                        f"{recipe.max_bad_records}; see DIR/.prep/rejects/, fix the input or raise the limit "
                        "(finished units are kept; re-run to resume)")


class _InOrder:
    """Hands finished units to the PartStream in dataset order: unit k goes once 0..k are all done."""

    def __init__(self, stream: PartStream | None, results: dict[int, dict]):
        self.stream, self.results, self.next = stream, results, 0

    def advance(self) -> None:
        if self.stream is None:
            return
        self.stream.check()  # a shard placement that failed (ENOSPC) stops the run now
        while (r := self.results.get(self.next)) is not None:
            if r["status"] == "ok":
                self.stream.feed(r)
            self.next += 1


def _accept(result: dict, state: RunState, results: dict, progress: RunProgress, recipe: Recipe,
            after=lambda index: None) -> None:
    state.record(result)
    trace.event("unit_done", unit=result["unit"])
    results[result["unit"]] = result
    progress.unit_done()
    _check_bad_budget(recipe, results)
    after(result["unit"])


def _run_inline(todo, ctx, state, results, progress, after=lambda index: None) -> None:
    for unit in todo:
        try:
            result = unit_or_failure(unit, ctx, progress.advance)
        except PrepError as e:
            input_changes.note_stop(state, unit, e)
            raise
        _accept(result, state, results, progress, ctx.recipe, after)


def _run_pool(todo, ctx, state: RunState, results, progress, workers: int, spec_path: Path, after
              ) -> Callable[[], None]:
    """Run `todo` on `workers` processes; returns the pool's join, for the caller to call once the
    last shard is placed: the workers exit (sentinels, process joins: 9-18 ms on 2 workers) while
    the parent places it, instead of before."""
    mp_ctx = pool_context()
    with deferred():  # a Ctrl-C here is raised once the pool and its queues exist, and the try below frees them
        queue, starts = mp_ctx.Queue(), mp_ctx.SimpleQueue()  # progress; unit starts (see init_worker)
        pool = ProcessPoolExecutor(workers, mp_context=mp_ctx, initializer=init_worker,
                                   initargs=(dataclasses.replace(ctx, spec=None), str(spec_path), queue, starts,
                                             os.getpid(), workers))
    pending: dict = {}
    running: dict[int, int] = {}  # worker pid -> index of the unit it last started
    queue_iter = iter(todo)

    def submit_next() -> None:
        unit = next(queue_iter, None)
        if unit is not None:
            try:  # the pool starts its workers here, each forked by the forkserver: never cut short
                with deferred():  # (interrupts.deferred)
                    pending[pool.submit(run_unit, unit)] = unit
            except (EOFError, ConnectionError):  # the forkserver is gone: multiprocessing says only "EOF"
                raise PrepError(_FORKSERVER_DIED) from None

    def drain() -> None:
        while not starts.empty():
            pid, index = starts.get()
            running[pid] = index
        while True:
            try:
                msg = queue.get_nowait()
            except Exception:  # queue.Empty
                return
            progress.advance(*msg)

    trace.event("pool_start", workers=workers)
    try:
        try:
            for _ in range(2 * workers):
                submit_next()
            while pending:
                done, _ = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                drain()
                for fut in done:
                    unit = pending.pop(fut)
                    try:
                        result = fut.result()
                    except BrokenProcessPool:
                        pending[fut] = unit  # in flight, for the message
                        raise
                    except PrepError as e:
                        input_changes.note_stop(state, unit, e)
                        raise
                    _accept(result, state, results, progress, ctx.recipe, after)
                    submit_next()
            drain()
        except BrokenProcessPool:
            # a worker died: seen through a unit's future, or through submit() on the broken pool when
            # a unit that finished just before the death comes out of the same wait()
            drain()
            raise PrepError(_worker_died(pool, running, {u.index: u for u in pending.values()})) from None
    except BaseException as error:
        # Ctrl-C, a dead worker, a full disk, a bad-record budget: stop everything now
        for fut in pending:
            fut.cancel()
        procs = list(getattr(pool, "_processes", {}).values())
        for proc in procs:
            proc.kill()  # don't wait for units in flight: they are redone on resume
        kill_orphans(procs)  # those Process.kill() skips when the forkserver is gone
        pool.shutdown(wait=True, cancel_futures=True)
        # freed now, not when the traceback goes: their semaphores are unlinked by finalizers that an
        # error exit (os._exit) would skip, and the resource tracker then warned of 5 leaked semaphores
        # (and the frames the error came through hold them too: a Ctrl-C raised inside queue.get_nowait() kept
        # that queue, whose 3 semaphores the resource tracker warned of)
        _clear_finished_frames(error)
        with deferred():  # a first Ctrl-C inside a finalizer was "ignored" there, with its traceback (see join)
            del pool, queue, starts, procs
        raise
    # shutdown(wait=False) drops the pool's reference to its manager thread (CPython 3.11 and 3.13), so a
    # later shutdown(wait=True) joins nothing: the thread that sends the workers their stop and joins
    # them is kept here, and joined by the caller. Before, a worker still starting (slow imports) could
    # outlive the run.
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False)

    def join() -> None:
        # the pool and its queues are kept until its workers are joined: a worker the pool started late
        # (units that fail in their first bytes can all be done first) may still be unpickling its
        # initargs, which rebuilds their semaphores by name, and freeing them here unlinks those names:
        # it died of FileNotFoundError, its traceback printed under prep's one-line error
        # (and all freed once joined: the manager thread holds the pool's call and result queues, and
        # kept by this closure it left their 5 semaphores to the exit, which os._exit makes in prep,
        # the resource tracker warning of them: so it is reached through `keep` only)
        # Deferred: a Ctrl-C that came while their finalizers ran (unlinking semaphores) was raised inside
        # one, printed as "Exception ignored in: <Finalize object>" with its traceback, left a semaphore
        # to the resource tracker's warning, and was otherwise lost (the run went on to exit 0)
        try:
            if keep[0] is not None:
                keep[0].join()
        finally:
            with deferred():
                del keep[:]
    keep = [manager, pool, queue, starts]
    return join


def _clear_finished_frames(error: BaseException) -> None:
    """Drop the locals of the frames that `error` and the errors it was raised while handling came through
    and that have finished (the one handling it goes on running: its frame is left as it is)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)  # skips frames still running (RuntimeError)
        error = error.__context__


_FORKSERVER_DIED = (
    "the worker processes could not be started: multiprocessing's forkserver, the process that imports "
    "numpy, orjson, tokenizers, gigatoken and prep once and forks every worker from itself, has exited "
    "(its own error, if it printed one, is above). Usually one of those imports fails there: a broken "
    "install, or a module of that name on PYTHONPATH. --num-workers 1 runs the units in this process "
    "instead, where such an import fails with its own message")


def _spooler(units, todo, state: RunState, recipe: Recipe, workers: int):
    """Windows for the ranges of split compressed files (pipeline.spool), or None when there are none."""
    if not any(u.is_spooled for u in todo):
        return None
    from pipeline.spool import Spooler
    return Spooler.for_recipe(recipe, units, {u.index for u in todo}, state.dir / "spool", workers)


def _spec_file(spec, state: RunState) -> Path:
    """The tokenizer for the workers, by file (3.4 MB pickled for GPT-2): what a forkserver child is
    sent must fit the pipe's 64 KiB, or each start blocks the parent until the child has read it
    (after importing the main module), and workers start one after another (~0.08 s each)."""
    path = state.dir / "tokenizer.pickle"
    try:
        with open(path, "wb") as f:
            pickle.dump(spec, f, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError as e:
        raise named(e, path) from None
    return path


def _worker_died(pool, running: dict[int, int], in_flight: dict[int, WorkUnit]) -> str:
    """Which worker died, how, and on which unit (when it said so before dying)."""
    try:
        procs = list((getattr(pool, "_processes", None) or {}).items())
    except RuntimeError:  # resized by the pool's manager thread
        procs = []
    dead = [(pid, p.exitcode) for pid, p in procs if p.exitcode is not None]
    # the pool SIGTERMs the survivors once it sees the death: prefer a death of another kind
    dead.sort(key=lambda d: d[1] == -signal.SIGTERM)
    resume = ("finished units are kept: re-run the same command to resume (if a worker runs out of memory "
              "again, use fewer --num-workers)")
    units = ", ".join(str(i) for i in sorted(in_flight))
    if not dead:
        return f"a worker process died (killed, or out of memory) with units {units} in flight; {resume}"
    pid, code = dead[0]
    if code == 255 and (server := forkserver_exit(wait=DYING_S)) is not None:  # then every worker reads as 255
        return (f"multiprocessing's forkserver, the process that starts prep's workers and reports how they "
                f"end, died ({_exit_how(server)}) with units {units} in flight; {resume}")
    how = _exit_how(code)
    unit = in_flight.get(running.get(pid, -1))
    where = (f" while tokenizing {unit.path} [bytes {unit.start}..{unit.end}] (unit {unit.index})"
             if unit is not None else "")
    return f"worker process {pid} died ({how}){where}; {resume}"


def _exit_how(code: int) -> str:
    """A process's exit code (-N: killed by signal N) in words."""
    if code == -signal.SIGKILL:
        return "killed by SIGKILL: out of memory, or killed by hand"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
