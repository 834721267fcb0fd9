"""Ctrl-C and SIGTERM: a command stops once, with one line and the conventional exit code.

SIGTERM (a Slurm time limit, `docker stop`, plain `kill`) stops a run as Ctrl-C does (workers killed,
finished units kept) and exits 143, as a process killed by it would (130 was Ctrl-C's code, and
before a run had taken its lock SIGTERM killed prep with no line at all). The first signal raises; the
ones in the GRACE_S after it are ignored, so the cleanup the first one unwinds (workers killed and
joined, the shard being built dropped, the lock released, the line printed) runs to its end: a second
Ctrl-C used to cut it short, one traceback per cut and the process killed by SIGINT (8 signals 1-5 ms
apart). One later than that exits at once with a line (os._exit): a cleanup that hangs (a worker in
uninterruptible disk I/O) can still be left without kill -9.

Light (signal, threading): pipeline.launch uses it before the CLI's imports.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

__all__ = ["Terminated", "stop_on_signals", "sigterm_as_interrupt", "deferred", "join_threads_named", "describe", "RESUME_HINT"]

RESUME_HINT = "finished units are kept; re-run the same command to resume"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt (so everything that stops on one stops on both)."""


GRACE_S = 2.0  # seconds after a first signal in which more are ignored: a burst, not a request
_first: list[float | None] = [None]  # time.monotonic() of the first signal since _stop was installed


_deferring: list = [0, None]  # [depth of `deferred` sections in the main thread, the stop they held]


def _stop(signum, frame):
    stop = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
    if _first[0] is None and _deferring[0]:  # the first, inside a `deferred` section: raised as it ends
        _first[0], _deferring[1] = time.monotonic(), stop  # (later ones: as below, so a hang still exits)
        return
    if _first[0] is None:
        _first[0] = time.monotonic()
        raise stop
    if time.monotonic() - _first[0] < GRACE_S:
        return  # the cleanup the first one started goes on
    what, code = describe(stop)
    os.write(2, f"{what} again: exiting now, before the cleanup ended\n".encode())
    os._exit(code)


def _installed() -> bool:
    return signal.getsignal(signal.SIGINT) is _stop or signal.getsignal(signal.SIGTERM) is _stop


@contextlib.contextmanager
def stop_on_signals(until_exit: bool = False):
    """A command: SIGINT raises KeyboardInterrupt, SIGTERM Terminated, once (see the module doc).
    The handlers are put back after, unless `until_exit` (the console script, pipeline.launch, which
    exits once the line is printed) and a signal came: a library caller (exit_code) keeps its Ctrl-C.
    A signal ignored where prep started (`nohup`, `cmd &` in a script ignores SIGINT) stays ignored.
    Re-entrant: inside another, it does nothing."""
    if threading.current_thread() is not threading.main_thread() or _installed():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    _first[0] = None
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, _stop)
    try:
        with deferred():
            _import_uninterruptible()
        yield
    finally:
        if not (until_exit and _first[0] is not None):
            for sig, handler in previous.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


# Extension modules whose initialisation crashes the process when a Ctrl-C is raised inside it: orjson
# (3.x) segfaulted in 17 of 30 imports interrupted in their first 20 ms (numpy, tokenizers, gigatoken,
# zstandard, yaml and isal: 0 of 30 each). A run's first import of it (pipeline.executor's modules, ~2 ms)
# sits in the ~0.3 s between a command's start and its first unit, where a Ctrl-C is likely.
_UNINTERRUPTIBLE_IMPORTS = ("orjson",)


def _import_uninterruptible() -> None:
    """Import those modules now, inside a `deferred` section (a signal meanwhile is raised after)."""
    import importlib
    for name in _UNINTERRUPTIBLE_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:  # the command that needs it says so
            pass


@contextlib.contextmanager
def sigterm_as_interrupt():
    """A run called as a library function (pipeline.executor.tokenize): SIGTERM raises Terminated,
    as Ctrl-C raises KeyboardInterrupt; the handlers are put back after. Nothing to do under the CLI's
    stop_on_signals."""
    if threading.current_thread() is not threading.main_thread() or _installed():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    _first[0] = None
    signal.signal(signal.SIGTERM, _stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def deferred():
    """A section a Ctrl-C or SIGTERM must not cut in two: one that comes inside is raised as it ends
    (where this module's handler is installed; elsewhere nothing changes). Around starting a pool
    worker: raised between the forkserver's connection and the worker's data, the forked child died
    reading nothing (an EOFError traceback above prep's one line), and the pool's half-started objects
    kept by the traceback's frames left 10 semaphores to the resource tracker's warning."""
    if threading.current_thread() is not threading.main_thread() or not _installed():
        yield
        return
    _deferring[0] += 1
    try:
        yield
    finally:
        _deferring[0] -= 1
        if not _deferring[0] and (stop := _deferring[1]) is not None:
            _deferring[1] = None
            raise stop


def join_threads_named(prefix: str) -> None:
    """Join every other thread whose name starts with `prefix` (a ThreadPoolExecutor's thread_name_prefix
    and "_"). A Ctrl-C raised while the pool's submit() started a thread (Thread.start waits for it to
    run) leaves the thread out of the pool's own list: its shutdown() wakes the thread but does not join
    it. One whose start was cut short before it ran cannot be joined: it ends on its own, woken too."""
    for t in threading.enumerate():
        if t.name.startswith(prefix) and t is not threading.current_thread():
            try:
                t.join()
            except RuntimeError:  # not started yet
                pass


def describe(stop: KeyboardInterrupt) -> tuple[str, int]:
    """The line's opening word(s) and the exit code for a Ctrl-C (130) or a SIGTERM (143 = 128 + 15)."""
    return ("terminated (SIGTERM)", 143) if isinstance(stop, Terminated) else ("interrupted", 130)
