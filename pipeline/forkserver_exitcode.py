"""A forkserver context whose workers' exit codes survive being read from two threads at once.

CPython's forkserver `Popen.poll` (the same in 3.11.7 and 3.13.0) reads a dead child's status, 8 bytes the forkserver
writes on the child's sentinel pipe, with no lock. When two threads poll one dead worker together,
both see the pipe readable; the first reads the status (-9 for SIGKILL), the second reads EOF and
overwrites it with 255 ("perhaps the forkserver process itself got killed"). ProcessPoolExecutor's
manager thread polls every worker once one dies, exactly when the parent asks which one died and
how. A worker killed by the OOM killer was reported as "exit code 255" (it failed two fault tests on
the CI machine): in 6 of 100 pools of two workers where one SIGKILLs itself, here, on 3.11 and on
3.13 alike; in 0 of 300 (3.11) and 0 of 100 (3.13) with this context. A lock per process makes the read happen once (tests/pipeline/test_pool.py meets the
race with 8 threads reading at once).
"""

from __future__ import annotations

import os
import threading
from multiprocessing import context, popen_forkserver
from multiprocessing.connection import wait

__all__ = ["ForkServerContext"]


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
