"""The worker pool: thread settings, the forkserver and its exit codes (pipeline/pool.py, pipeline/forkserver_exitcode.py)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
import types
from multiprocessing.connection import wait

import pytest

from pipeline import pool
from tests.conftest import DEMO_CORPUS, REPO, write_recipe


@pytest.mark.parametrize("cores,workers,threads", [(2, 2, 2), (16, 16, 2), (16, 4, 8), (2, 8, 1), (1, 1, 2)])
def test_hf_threads_oversubscribe_twice(monkeypatch, cores, workers, threads):
    monkeypatch.setattr(pool.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert pool.hf_threads(workers) == threads


@pytest.mark.parametrize("threads,parallel", [(1, "false"), (4, "true")])
def test_worker_environment_sets_rayon(monkeypatch, threads, parallel):
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    pool.worker_environment(threads)
    assert pool.os.environ["TOKENIZERS_PARALLELISM"] == parallel
    assert pool.os.environ["RAYON_NUM_THREADS"] == str(threads)


def test_worker_environment_keeps_what_the_user_set(monkeypatch):
    monkeypatch.setenv("RAYON_NUM_THREADS", "3")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    pool.worker_environment(1)
    assert (pool.os.environ["RAYON_NUM_THREADS"], pool.os.environ["TOKENIZERS_PARALLELISM"]) == ("3", "true")


def test_forkserver_preload_is_what_a_worker_runs_and_no_more():
    """The pool's initializer and unit runner live in a preloaded module, and preloading does not pull
    in the parent's side (executor, run_units, rich) or tiktoken: every module the forkserver imports delays the
    first worker on a 2-core machine, and every one left out is imported again in each worker."""
    import subprocess
    import sys

    from pipeline.run_units import init_worker, run_unit
    assert init_worker.__module__ in pool.PRELOAD and run_unit.__module__ in pool.PRELOAD
    code = ("import sys; [__import__(m) for m in sys.argv[1:]]; "
            "print(sorted(m for m in ('pipeline.executor', 'pipeline.run_units', 'rich', 'tiktoken', 'typer') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, *[m for m in pool.PRELOAD if m != "__main__"]],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_pipeline_package_in_the_working_directory_does_not_replace_prep(tmp_path, demo_tokenizer):
    """CPython before 3.12.8 starts the forkserver as `python -c` with the working directory first on
    its path and without the parent's (gh-117378): run from a project holding its own `pipeline/`,
    the forkserver imported that package and died, and the run failed with EOFError."""
    project = tmp_path / "project"
    (project / "pipeline").mkdir(parents=True)
    (project / "pipeline" / "__init__.py").write_text("raise RuntimeError('the project pipeline package')\n")
    recipe = write_recipe(tmp_path / "r.yaml", corpus=DEMO_CORPUS, tokenizer=demo_tokenizer, out=tmp_path / "out",
                          num_workers=2)
    launcher = tmp_path / "bin" / "prep_entry.py"  # like the console script: its own directory first on sys.path
    launcher.parent.mkdir()
    launcher.write_text("import sys\nfrom pipeline.launch import main\nif __name__ == '__main__':\n"
                        f"    sys.argv = ['prep', 'tokenize', '--recipe', {str(recipe)!r}, '--no-progress']\n"
                        "    main()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    env["PYTHONPATH"] = str(REPO)  # prep from this checkout, as the test run imports it; never the project's
    run = subprocess.run([sys.executable, str(launcher)], cwd=project, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "out" / "manifest.json").exists()
    assert "project pipeline package" not in run.stderr


def test_python_310_preloads_the_path_fix_first(monkeypatch, tmp_path):
    """3.10 has no PYTHONSAFEPATH: prep_safepath, preloaded before prep's own modules, takes the
    working directory ('' from `python -c`) off the forkserver's path."""
    monkeypatch.setattr(pool, "sys", types.SimpleNamespace(version_info=(3, 10, 13)))
    assert pool._path_fix() == ["prep_safepath"]
    monkeypatch.setattr(pool, "sys", types.SimpleNamespace(version_info=(3, 11, 7)))
    assert pool._path_fix() == []
    code = "import sys; before = '' in sys.path; import prep_safepath; print(before, '' in sys.path)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True,
                         env={**env, "PYTHONPATH": str(REPO)}).stdout
    assert out.split() == ["True", "False"]


def test_the_spawn_environment_is_put_back(monkeypatch):
    monkeypatch.setattr(pool, "_forkserver_gets_parent_path", lambda: False)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    monkeypatch.setattr(pool.sys, "path", ["", "/a", "/b"])
    with pool._parent_path_for_children():
        assert os.environ["PYTHONPATH"].split(os.pathsep) == [os.path.abspath(os.getcwd()), "/a", "/b"]
        assert os.environ["PYTHONSAFEPATH"] == "1"
    assert os.environ["PYTHONPATH"] == "/elsewhere" and "PYTHONSAFEPATH" not in os.environ


def test_a_forkserver_that_dies_on_an_import_is_reported_by_name(tmp_path, demo_tokenizer):
    """multiprocessing reports a forkserver that died while importing its preload list as a bare
    `EOFError: unexpected EOF` from deep inside ProcessPoolExecutor.submit."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "gigatoken.py").write_text("raise RuntimeError('a broken gigatoken install')\n")
    recipe = write_recipe(tmp_path / "r.yaml", corpus=DEMO_CORPUS, tokenizer=demo_tokenizer, out=tmp_path / "out",
                          num_workers=2, tokenizer__backend="hf")  # hf: the parent never imports gigatoken
    code = ("import sys\nfrom pipeline.launch import main\n"
            f"sys.argv = ['prep', 'tokenize', '--recipe', {str(recipe)!r}, '--no-progress']\nmain()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow), str(REPO)]), "PREP_CACHE_DIR": "off"}
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 1
    assert "a broken gigatoken install" in run.stderr  # the forkserver's own traceback
    assert "error: the worker processes could not be started: multiprocessing's forkserver" in run.stderr
    assert "EOFError" not in run.stderr


@pytest.mark.skipif("forkserver" not in mp.get_all_start_methods(), reason="no forkserver on this platform")
def test_a_killed_workers_exit_code_reads_the_same_from_many_threads():
    """The pool's manager thread and the parent's error message read a dead worker's exit code at once.
    CPython's own forkserver Popen lets the second reader overwrite -9 (SIGKILL, the OOM killer) with
    255; the CI machine reported an OOM-killed worker as "exit code 255" that way."""
    ctx = pool.pool_context()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads meet inside poll: CPython's own Popen failed 5 runs of 5 so
    try:                         # (at the default 5 ms, rarely)
        _read_exit_codes_from_threads(ctx, rounds=20, readers=8)
    finally:
        sys.setswitchinterval(switch)


def _read_exit_codes_from_threads(ctx, rounds: int, readers: int) -> None:
    def read(proc, barrier, codes):
        barrier.wait()
        codes.append(proc.exitcode)

    for _ in range(rounds):
        proc = ctx.Process(target=signal.raise_signal, args=(signal.SIGKILL,))
        proc.start()
        wait([proc.sentinel])  # dead, its status not read yet
        barrier, codes = threading.Barrier(readers), []
        threads = [threading.Thread(target=read, args=(proc, barrier, codes)) for _ in range(readers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert codes == [-signal.SIGKILL] * readers
        assert proc.exitcode == -signal.SIGKILL


@pytest.mark.skipif("forkserver" not in mp.get_all_start_methods(), reason="no forkserver on this platform")
def test_a_join_blocked_on_a_stopped_worker_does_not_block_reading_its_exit_code():
    """Process.join() blocks outside the per-process lock: the manager thread joining a worker that is
    stopped (SIGSTOP) must not keep the parent from reading that worker's state."""
    ctx = pool.pool_context()
    proc = ctx.Process(target=signal.raise_signal, args=(signal.SIGSTOP,))
    proc.start()
    try:
        joiner = threading.Thread(target=proc.join, daemon=True)
        joiner.start()
        joiner.join(0.2)
        assert joiner.is_alive()  # blocked in join: the worker is stopped
        done = threading.Event()
        threading.Thread(target=lambda: (proc.exitcode, done.set()), daemon=True).start()
        assert done.wait(10)  # not blocked behind the joiner
        assert proc.exitcode is None
    finally:
        proc.kill()
        proc.join(10)
    assert proc.exitcode == -signal.SIGKILL


@pytest.mark.skipif(not hasattr(os, "waitid") or "forkserver" not in mp.get_all_start_methods(),
                    reason="needs os.waitid and a forkserver")
def test_forkserver_exit_tells_a_dead_forkserver_and_leaves_it_to_multiprocessing():
    """The status is looked at, not reaped: multiprocessing's ensure_running reaps the dead forkserver
    itself (a ChildProcessError there if prep had) and starts a new one."""
    from multiprocessing import forkserver

    from pipeline.forkserver_exitcode import forkserver_exit

    pool.warm_forkserver()
    pid = forkserver._forkserver._forkserver_pid
    assert forkserver_exit() is None  # running
    os.kill(pid, signal.SIGKILL)
    for _ in range(500):
        if forkserver_exit() is not None:
            break
        time.sleep(0.01)
    assert forkserver_exit() == -signal.SIGKILL
    assert forkserver_exit() == -signal.SIGKILL  # still there to be reaped
    pool.warm_forkserver()
    assert forkserver._forkserver._forkserver_pid != pid and forkserver_exit() is None
    proc = pool.pool_context().Process(target=signal.raise_signal, args=(signal.SIGKILL,))
    proc.start()
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL  # the new forkserver starts processes and reports their ends


@pytest.mark.skipif("forkserver" not in mp.get_all_start_methods(), reason="no forkserver on this platform")
def test_the_pools_queues_outlive_a_worker_still_starting(tmp_path, monkeypatch, demo_tokenizer):
    """Units that all fail in their first bytes (damaged .gz files under skip) can be done before the
    pool's second worker has read its initargs; freeing the pool's queues then unlinked their named
    semaphores, and that worker died rebuilding them: a forkserver `FileNotFoundError` traceback
    under prep's one-line error (1 run in 6 here). The queues now live until the workers are joined."""
    import gc
    import gzip
    from multiprocessing import synchronize

    import pipeline.executor as executor
    from pipeline.errors import PrepError
    from pipeline.recipe import Recipe
    damaged = bytearray(gzip.compress(DEMO_CORPUS.read_bytes()))
    for i in range(200, len(damaged) - 20, 50):
        damaged[i] ^= 0xFF
    d = tmp_path / "d"
    d.mkdir()
    for name in "abcd":
        (d / f"{name}.jsonl.gz").write_bytes(damaged)
    events = []
    real_cleanup, real_run_pool = synchronize.SemLock._cleanup, executor._run_pool

    def cleanup(name):  # a semaphore's name unlinked, with the pool's workers still running then
        events.append(("unlinked", len(mp.active_children())))
        real_cleanup(name)

    def run_pool(*args, **kwargs):
        events.append(("pool",))
        join = real_run_pool(*args, **kwargs)
        gc.collect()

        def joined():
            join()
            events.append(("joined",))
        return joined
    monkeypatch.setattr(synchronize.SemLock, "_cleanup", staticmethod(cleanup))
    monkeypatch.setattr(executor, "_run_pool", run_pool)
    recipe = Recipe.from_yaml(str(write_recipe(tmp_path / "r.yaml", corpus=d, tokenizer=demo_tokenizer,
                                               out=tmp_path / "out", num_workers=2, on_bad_record="skip")))
    with pytest.raises(PrepError, match=r"every unit failed \(4 units\)"):
        executor.tokenize(recipe, show_progress=False)
    unlinked = [alive for event, *alive in events[events.index(("pool",)):] if event == "unlinked"]
    assert ("joined",) in events and unlinked and not any(n for n, in unlinked), events
    # and all of them by the time the join returns: the pool's manager thread, kept for the join, held
    # the call and result queues, whose 5 semaphores were then left to the exit, which prep makes
    # with os._exit: "resource_tracker: There appear to be 5 leaked semaphore objects"
    assert ("unlinked", 0) not in events[events.index(("joined",)):], events


def test_a_ctrl_c_while_the_forkserver_imports_does_not_reach_it(tmp_path):
    """A terminal's Ctrl-C reaches the whole process group, the forkserver too, which ignores SIGINT
    only once its preload is imported: in a run's first second it printed a KeyboardInterrupt
    traceback (and died). Started with SIGINT blocked, it lives on and forks workers."""
    code = ("import os, signal\nfrom multiprocessing import forkserver\nfrom pipeline import pool\n"
            "pool.warm_forkserver()\npid = forkserver._forkserver._forkserver_pid\n"
            "os.kill(pid, signal.SIGINT)  # it is importing numpy, ... now\n"
            "p = pool.pool_context().Process(target=os.getpid)\np.start()\np.join()\n"
            # the same forkserver: multiprocessing starts another in place of a dead one
            "print('worker', p.exitcode, forkserver._forkserver._forkserver_pid == pid)\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0 and run.stdout == "worker 0 True\n", run.stderr
    assert "Traceback" not in run.stderr and "KeyboardInterrupt" not in run.stderr, run.stderr
