"""A pool context whose worker processes linger after their work loop ends, as a worker still
importing its modules (a cold forkserver) or flushing a large buffer does: a run that returns before
joining its workers leaves them alive. Imported by the workers too, so it lives in its own small
module."""

from __future__ import annotations

import time

from pipeline.forkserver_exitcode import ForkServerContext

LINGER_S = 1.0


class _LingeringProcess(ForkServerContext.Process):
    def run(self):
        super().run()
        time.sleep(LINGER_S)


class SlowExitContext(ForkServerContext):
    Process = _LingeringProcess
