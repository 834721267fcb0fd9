"""A Ctrl-C (or SIGTERM) raised in the parent's main thread at the moments where it starts a thread:
every thread the run started ends with it. A thread left idle is not a daemon (ThreadPoolExecutor's
are not), so the interpreter waited for it at exit: `python -m pipeline.cli`, and any program calling
pipeline.executor.tokenize, hung after printing "interrupted" (the `prep` script ends with os._exit)."""

from __future__ import annotations

import threading

import numpy as np

from pipeline.assemble import ShardAssembler
from tests.pipeline.test_assemble import _write_parts


def _alive(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def _release(threads: list[threading.Thread]) -> None:
    """Wake threads the code under test lost (so a failing test does not hang pytest at exit): each is a
    ThreadPoolExecutor worker, args (executor weakref, work queue, ...)."""
    for t in threads:
        executor = t._args[0]()
        if executor is not None:
            executor.shutdown(wait=False)
        t._args[1].put(None)


def test_ctrl_c_while_a_shard_build_starts_its_thread_leaves_no_thread(tmp_path, monkeypatch):
    """The shard's close() submits its last step, which starts the build's thread; Thread.start waits for
    the thread to run, and a signal handled there raised KeyboardInterrupt out of close() (seen in 1 of
    ~10 runs with PREP_FAULT=journal-placed:6:int on 3 workers). The build was then in no list, so
    discard() never shut its pool down."""
    parts, _ = _write_parts(tmp_path / "parts", [[40], [40]])
    (tmp_path / "out").mkdir()
    asm = ShardAssembler(tmp_path / "parts" / "train", tmp_path / "out", np.uint16, 50)
    real_start = threading.Thread.start
    interrupted = []

    def start(self):  # the signal arrives while the shard's thread starts: after it runs, as Thread.start waits
        real_start(self)
        if self.name.startswith("prep-place-shard") and not interrupted:
            interrupted.append(self)
            raise KeyboardInterrupt
    monkeypatch.setattr(threading.Thread, "start", start)
    asm.add(parts[0])
    try:
        asm.add(parts[1])  # shard 0 (one part) is closed: its thread starts, and the Ctrl-C comes
    except KeyboardInterrupt:
        pass
    monkeypatch.undo()
    assert interrupted  # guard: the interrupt really came from inside the thread's start
    asm.discard()
    left = _alive("prep-place")
    _release(left)
    assert left == []

