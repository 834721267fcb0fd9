"""A Ctrl-C (or SIGTERM) raised in the parent's main thread at the moments where it starts a thread:
every thread the run started ends with it. A thread left idle is not a daemon (ThreadPoolExecutor's
are not), so the interpreter waited for it at exit: `python -m pipeline.cli`, and any program calling
pipeline.executor.tokenize, hung after printing "interrupted" (the `prep` script ends with os._exit)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import zstandard
from faultkit import write_recipe

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


def _spoolers_released() -> None:
    """Stop the spoolers a failing run lost (their threads wait for a window slot until stopped)."""
    import gc

    from pipeline.spool import Spooler
    for obj in gc.get_objects():
        if isinstance(obj, Spooler):
            obj.close()


@pytest.mark.parametrize("where", ["spooler-start", "part-stream"])
def test_ctrl_c_as_the_spooler_starts_leaves_no_thread(tmp_path, corpus, monkeypatch, where):
    """A compressed file's windows are written by the spooler's threads, each waiting for a free slot
    (workers + 2 windows ahead of the units). A Ctrl-C as the spooler started its thread, or between
    its start and the run's try (while the PartStream cleared the split directories), left no one to stop
    them: 7 units, 3 slots, a thread waiting forever."""
    import pipeline.executor as executor
    from pipeline.recipe import Recipe

    packed = tmp_path / "small.jsonl.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(corpus.read_bytes()))
    recipe = Recipe.from_yaml(write_recipe(tmp_path, packed))
    if where == "part-stream":
        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt
        monkeypatch.setattr(executor, "PartStream", interrupted)
    else:
        real_start = threading.Thread.start

        def start(self):  # Thread.start waits for the thread to run: the signal is handled as it returns
            real_start(self)
            if self.name.startswith("prep-spool"):
                raise KeyboardInterrupt
        monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(KeyboardInterrupt):
        executor.tokenize(recipe, str(tmp_path / "out"), num_workers=1, show_progress=False)
    monkeypatch.undo()
    left = _alive("prep-spool")
    _spoolers_released()
    assert left == []
    assert not (tmp_path / "out" / ".prep" / "spool").exists()  # its windows deleted, as after any stop
