"""A forkserver context whose workers' exit codes survive being read from two threads at once.

CPython's forkserver `Popen.poll` (the same in 3.11.7 and 3.13.0) reads a dead child's status, 8
bytes the forkserver writes on the child's sentinel pipe, with no lock. When two threads poll one
dead worker together, both see the pipe readable; the first reads the status (-9 for SIGKILL), the
second reads EOF and overwrites it with 255 ("perhaps the forkserver process itself got killed").
ProcessPoolExecutor's manager thread polls every worker once one dies, exactly when the parent asks
which one died and how. So a worker killed by the OOM killer was reported as "exit code 255" (two
fault tests failed that way on the CI machine): in 6 of 100 pools of two workers where one SIGKILLs
itself, here, on 3.11 and 3.13 alike; in 0 of 300 (3.11) and 0 of 100 (3.13) with this context. A
lock per process makes the read happen once (tests/pipeline/test_pool.py meets the race with 8
threads reading at once).

When the forkserver itself dies, every worker reads as 255 (their status pipes close with it):
`forkserver_exit` tells that case apart, so the error names the forkserver, and `kill_orphans` stops
its workers, which Process.kill() then skips.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from multiprocessing import context, popen_forkserver
from multiprocessing.connection import wait

__all__ = ["ForkServerContext", "forkserver_exit", "kill_orphans", "DYING_S"]

# How long a forkserver whose workers all read as 255 is given to become waitable. Killed here with a
# worker running: not yet waitable when the worker's pipe read EOF in 14 of 50 tries, waitable after
# one 5 ms sleep in all of them. A forkserver that still runs costs this once, on the way to an error.
DYING_S = 1.0


class _Popen(popen_forkserver.Popen):
    def __init__(self, process_obj):
        self._poll_lock = threading.Lock()
        super().__init__(process_obj)

    def poll(self, flag=os.WNOHANG):
        if flag != os.WNOHANG and self.returncode is None:
            # a blocking poll (Process.join) waits outside the lock: a worker that is stopped
            # (SIGSTOP) may never exit, and while the manager thread joins it the parent must still
            # read its exit code (None) to name the worker that did die
            wait([self.sentinel])
        with self._poll_lock:
            return super().poll(os.WNOHANG)


class _Process(context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj):
        return _Popen(process_obj)


class ForkServerContext(context.ForkServerContext):
    Process = _Process


def forkserver_exit(wait: float = 0.0) -> int | None:
    """How multiprocessing's forkserver ended, as an exit code (-N: killed by signal N), or None
    while it runs (or never ran, or this platform cannot tell). Once it is gone, every worker it
    started reads as exit code 255 whether it died or not. A dying process closes its files before it
    becomes waitable, so a pool can see the workers' pipes close first: `wait` seconds are given for
    that (None after them means it runs). Looked at with WNOWAIT: its status stays for
    multiprocessing's own ensure_running, which reaps it before it starts a new forkserver."""
    from multiprocessing import forkserver
    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if pid is None or not hasattr(os, "waitid"):
        return None
    deadline = time.monotonic() + wait
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped already: not ours to tell
            return None
        if info is not None and info.si_pid != 0:
            return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)


def kill_orphans(processes) -> None:
    """SIGKILL the workers of a forkserver that has died. Each reads as exit code 255 (its status pipe
    closed with the forkserver), and Process.kill() skips a process whose code is known: they ran
    on, a unit's parts still being written into the run's directory after the run had failed, and a
    stopped one (SIGSTOP) forever. Only a pid that still runs a forkserver child's command line is
    signalled (one reused since is not ours); Linux only (/proc)."""
    suspects = [proc for proc in processes if proc.exitcode == 255]
    if not suspects or forkserver_exit(wait=DYING_S) is None:
        return
    for proc in suspects:
        try:
            with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
                if b"multiprocessing.forkserver" in f.read():
                    os.kill(proc.pid, signal.SIGKILL)
        except OSError:  # gone already, or no /proc here
            pass
