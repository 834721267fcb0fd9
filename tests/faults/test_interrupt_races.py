"""A Ctrl-C (or SIGTERM) raised in the parent's main thread at the moments where it starts a thread:
every thread the run started ends with it. A thread left idle is not a daemon (ThreadPoolExecutor's
are not), so the interpreter waited for it at exit: `python -m pipeline.cli`, and any program calling
pipeline.executor.tokenize, hung after printing "interrupted" (the `prep` script ends with os._exit)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import zstandard
from faultkit import REPO, TAG, assert_complete, assert_no_survivors, run_prep, write_recipe

from pipeline.assemble import ShardAssembler
from pipeline.interrupts import Terminated, describe
from tests.pipeline.test_assemble import _write_parts


def _alive(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


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
        if type(obj) is Spooler:  # isinstance() read torch.distributed.reduce_op's __class__: a FutureWarning
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


# prep's console script, with a Ctrl-C (or SIGTERM) sent to itself as the first pool worker is started:
# after the forkserver has forked the child, before the child is sent what it runs
_SIGNAL_AS_A_WORKER_STARTS = """
import os, signal, sys
from multiprocessing import forkserver
real, sent, signum = forkserver.connect_to_new_process, [], getattr(signal, sys.argv[1])
def connect(fds):
    got = real(fds)
    if not sent:
        sent.append(1)
        os.kill(os.getpid(), signum)
    return got
forkserver.connect_to_new_process = connect
from pipeline.launch import console
sys.argv = ["prep", "tokenize", *sys.argv[2:]]
console()
"""


@pytest.mark.parametrize("sig,code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_while_a_worker_starts_says_one_line_and_resumes(tmp_path, recipe, reference, sig, code):
    """It printed the child's `EOFError: Ran out of input` traceback (the forkserver's child read no
    data) and the resource tracker's "10 leaked semaphore objects" warning around prep's line."""
    out = tmp_path / "out"
    tag = f"worker-start-{sig}-{time.monotonic_ns()}"
    env = {**{k: v for k, v in os.environ.items() if k != "PREP_FAULT"}, TAG: tag}
    run = subprocess.run([sys.executable, "-c", _SIGNAL_AS_A_WORKER_STARTS, sig, "--recipe", str(recipe),
                          "--output", str(out), "--num-workers", "2", "--no-progress"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == code, run.stderr
    assert_no_survivors(tag)
    # read to its end: the resource tracker (a process of the run, sharing the pipe) wrote its warning there
    assert run.stderr.splitlines() == [f"{describe(Terminated() if sig == 'SIGTERM' else KeyboardInterrupt())[0]}: "
                                       "finished units are kept; re-run the same command to resume"]
    rerun = run_prep(recipe, out, workers=2)
    assert rerun.returncode == 0, rerun.stderr
    assert_complete(out, reference)


# prep's console script, with a Ctrl-C sent to itself from inside the first multiprocessing finalizer that
# unlinks a semaphore in the parent: the pool's queues freed once its workers are joined, after the units
_SIGNAL_IN_A_SEMAPHORE_FINALIZER = """
import os, signal, sys
from multiprocessing import synchronize
real, sent = synchronize.SemLock._cleanup, []
def cleanup(name):
    if not sent:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGINT)
    real(name)
synchronize.SemLock._cleanup = staticmethod(cleanup)
from pipeline.launch import console
sys.argv = ["prep", "tokenize", *sys.argv[1:]]
console()
"""


def test_a_ctrl_c_while_the_pool_is_freed_stops_the_run_with_one_line(tmp_path, recipe, reference):
    """It was raised inside the finalizer: "Exception ignored in: <Finalize object, dead>" and its traceback,
    a semaphore left to the resource tracker's warning, and the Ctrl-C itself lost (the run exited 0)."""
    _interrupted_then_resumed(tmp_path, recipe, reference, _SIGNAL_IN_A_SEMAPHORE_FINALIZER, "finalizer", 1)


def _interrupted_then_resumed(tmp_path, recipe, reference, script: str, tag: str, rerun_workers: int) -> None:
    """Run `script` (a prep command whose Ctrl-C it places) on 2 workers: exit 130 with the one line, no
    process left; then a re-run on `rerun_workers` finishes the dataset as a clean run makes it."""
    out = tmp_path / "out"
    tag = f"{tag}-{time.monotonic_ns()}"
    env = {**{k: v for k, v in os.environ.items() if k != "PREP_FAULT"}, TAG: tag}
    run = subprocess.run([sys.executable, "-c", script, "--recipe", str(recipe),
                          "--output", str(out), "--num-workers", "2", "--no-progress"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 130, run.stderr
    assert run.stderr.splitlines() == ["interrupted: finished units are kept; re-run the same command to resume"]
    assert_no_survivors(tag)
    rerun = run_prep(recipe, out, workers=rerun_workers)
    assert rerun.returncode == 0, rerun.stderr
    assert_complete(out, reference)


def test_a_signal_in_a_deferred_section_is_raised_at_its_end_and_a_later_one_still_exits(monkeypatch):
    """interrupts.deferred: the first signal waits for the section's end; more within GRACE_S are ignored,
    and one after it still ends the process at once (a cleanup that hangs is not made unstoppable)."""
    from pipeline import interrupts

    exits = []
    monkeypatch.setattr(interrupts.os, "_exit", exits.append)
    with interrupts.stop_on_signals():
        with pytest.raises(KeyboardInterrupt):
            with interrupts.deferred():
                with interrupts.deferred():  # nested: raised at the outer one's end
                    os.kill(os.getpid(), signal.SIGINT)
                    os.kill(os.getpid(), signal.SIGINT)  # within the grace: ignored
                reached_end = True
        assert reached_end and exits == []
        monkeypatch.setattr(interrupts, "_first", [time.monotonic() - 2 * interrupts.GRACE_S])
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
        assert exits == [143]


# prep's console script, with a Ctrl-C sent to itself from inside the first non-blocking get of the progress
# queue (run_units._run_pool's drain, between units)
_SIGNAL_IN_A_QUEUE_GET = """
import os, signal, sys
from multiprocessing import queues
real, sent = queues.Queue.get, []
def get(self, block=True, timeout=None):
    if not sent and not block:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGINT)
    return real(self, block, timeout)
queues.Queue.get = get
from pipeline.launch import console
sys.argv = ["prep", "tokenize", *sys.argv[1:]]
console()
"""


def test_a_ctrl_c_inside_a_queue_method_frees_that_queue(tmp_path, recipe, reference):
    """The KeyboardInterrupt's traceback held the frame of Queue.get, so the queue outlived the pool's
    cleanup, and the exit (os._exit) left its 3 semaphores to the resource tracker's warning."""
    _interrupted_then_resumed(tmp_path, recipe, reference, _SIGNAL_IN_A_QUEUE_GET, "queue-get", 2)


# a Ctrl-C that arrives while orjson is being imported, inside a command (stop_on_signals): the finder
# sends it as the import starts, so it is raised in the import unless the import holds it
_SIGNAL_AS_ORJSON_IS_IMPORTED = """
import os, signal, sys
from pipeline.interrupts import stop_on_signals
class SignalOnImport:
    def find_spec(self, name, path=None, target=None):
        if name == "orjson":
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, SignalOnImport())
try:
    with stop_on_signals():
        import orjson  # where a run imports it first: pipeline.executor's modules
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted; orjson imported:", hasattr(sys.modules.get("orjson"), "dumps"))
"""


def test_a_ctrl_c_never_lands_inside_orjsons_import():
    """orjson's module initialisation segfaulted when a KeyboardInterrupt was raised inside it (the run,
    Ctrl-C'd ~0.3 s after its start: exit -11, no line; orjson alone: 17 of 30 imports interrupted in
    their first 20 ms). A command imports it first thing, holding a signal until it is imported."""
    run = subprocess.run([sys.executable, "-c", _SIGNAL_AS_ORJSON_IS_IMPORTED], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["interrupted; orjson imported: True"]
