"""Ctrl-C and SIGTERM: a command stops once, with one line and the conventional exit code.

SIGTERM (a Slurm time limit, `docker stop`, plain `kill`) stops a run as Ctrl-C does (workers killed,
finished units kept) and exits 143, as a process killed by it would (130 was Ctrl-C's code, and
before a run had taken its lock SIGTERM killed prep with no line at all). The first signal raises; the
ones after it are ignored, so the cleanup the first one unwinds (workers killed and joined, the shard
being built dropped, the lock released, the line printed) runs to its end: a second Ctrl-C used to cut
it short, one traceback per cut and the process killed by SIGINT.

Light (signal, threading): pipeline.launch uses it before the CLI's imports.
"""

from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["Terminated", "stop_on_signals", "sigterm_as_interrupt", "describe", "RESUME_HINT"]

RESUME_HINT = "finished units are kept; re-run the same command to resume"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt (so everything that stops on one stops on both)."""


_signalled = [False]  # whether _stop ran: the process is then on its way out, the signals stay ignored


def _stop(signum, frame):
    _signalled[0] = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _installed() -> bool:
    return signal.getsignal(signal.SIGINT) is _stop or signal.getsignal(signal.SIGTERM) is _stop


@contextlib.contextmanager
def stop_on_signals():
    """A CLI command: SIGINT raises KeyboardInterrupt, SIGTERM Terminated, once. After one of them
    both stay ignored (the process exits); otherwise the handlers are put back. A signal ignored where
    prep started (`nohup`, `cmd &` in a script ignores SIGINT) stays ignored. Re-entrant."""
    if threading.current_thread() is not threading.main_thread() or _installed():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    _signalled[0] = False
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, _stop)
    try:
        yield
    finally:
        if not _signalled[0]:
            for sig, handler in previous.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def sigterm_as_interrupt():
    """A run called as a library function (pipeline.executor.tokenize): SIGTERM raises Terminated,
    as Ctrl-C raises KeyboardInterrupt; the handlers are put back after. Nothing to do under the CLI's
    stop_on_signals."""
    if threading.current_thread() is not threading.main_thread() or _installed():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, _stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def describe(stop: KeyboardInterrupt) -> tuple[str, int]:
    """The line's opening word(s) and the exit code for a Ctrl-C (130) or a SIGTERM (143 = 128 + 15)."""
    return ("terminated (SIGTERM)", 143) if isinstance(stop, Terminated) else ("interrupted", 130)
