"""A pool worker dying mid-unit, and Ctrl-C: the run stops promptly with a clear one-line message
(never a hang, never a traceback), keeps its finished units, and the re-run completes identically."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from faultkit import (
    assert_complete,
    assert_no_survivors,
    journal_lines,
    processes_tagged,
    resume,
    run_prep,
    stopped,
)

NUM_UNITS = 7


def _wait_stopped(tag: str, n: int, proc, timeout: float = 30) -> list:
    """The n pool workers of run `tag`, once all of them have SIGSTOPped themselves."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        parked = stopped(processes_tagged(tag))
        if len(parked) == n:
            return parked
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    proc.kill()
    pytest.fail(f"the workers never stopped at the injected point (rc {proc.poll()})")


def test_worker_killing_itself_mid_unit_fails_fast_naming_it(tmp_path, recipe, reference):
    """Each worker SIGKILLs itself at its third part shard (inside its second unit)."""
    out = tmp_path / "out"
    tag = f"worker-hook-{time.monotonic_ns()}"
    t0 = time.monotonic()
    r = run_prep(recipe, out, workers=2, fault="shard-tmp:3", tag=tag, timeout=30)
    elapsed = time.monotonic() - t0
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    m = re.search(r"worker process (\d+) died \(killed by SIGKILL: out of memory, or killed by hand\) "
                  r"while tokenizing \S+ \[bytes \d+\.\.\d+\] \(unit (\d+)\); finished units are kept: "
                  r"re-run the same command to resume", r.stderr.replace("\n", ""))
    assert m, r.stderr
    assert elapsed < 15
    assert_no_survivors(tag)
    finished = journal_lines(out)
    assert 1 <= len(finished) < NUM_UNITS  # guard: died mid-run, after finishing some units
    assert int(m.group(2)) not in {e["unit"] for e in finished}  # the named unit is one not finished
    rerun = run_prep(recipe, out, workers=2)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{NUM_UNITS - len(finished)}/{NUM_UNITS} units" in rerun.stdout  # finished units were kept
    assert_complete(out, reference)


def test_worker_killed_from_outside_mid_unit(tmp_path, recipe, reference):
    """Both workers park themselves (SIGSTOP) mid-unit; the test SIGKILLs one, as the OOM killer
    would. The other is stopped, so only the parent's own kill can end it: the run must not hang."""
    out = tmp_path / "out"
    tag = f"worker-ext-{time.monotonic_ns()}"
    proc = run_prep(recipe, out, workers=2, fault="shard-tmp:3:stop", tag=tag, wait=False)
    parked = _wait_stopped(tag, 2, proc)
    victim = parked[0].pid
    t0 = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    elapsed = time.monotonic() - t0
    err = err.decode().replace("\n", "")
    assert proc.returncode == 1, err
    assert f"worker process {victim} died (killed by SIGKILL" in err and "(unit " in err, err
    assert "re-run the same command to resume" in err and "Traceback" not in err
    assert elapsed < 5, elapsed
    assert_no_survivors(tag)
    rerun = run_prep(recipe, out, workers=2)
    assert rerun.returncode == 0, rerun.stderr
    assert_complete(out, reference)


def test_forkserver_killed_mid_run_is_named_not_a_worker(tmp_path, recipe, reference):
    """The forkserver (which starts the workers and reports their exits) SIGKILLed while units run, as
    the OOM killer might: every worker then reads as "exit code 255", so the message must name the
    forkserver and how it ended rather than blame a worker."""
    out = tmp_path / "out"
    tag = f"forkserver-kill-{time.monotonic_ns()}"
    proc = run_prep(recipe, out, workers=2, fault="shard-tmp:3:stop", tag=tag, wait=False)
    parked = _wait_stopped(tag, 2, proc)
    server = {p.ppid() for p in parked}  # the workers' parent: the forkserver forks every one of them
    assert len(server) == 1 and proc.pid not in server
    t0 = time.monotonic()
    os.kill(server.pop(), signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    elapsed = time.monotonic() - t0
    err = err.decode().replace("\n", "")
    assert proc.returncode == 1, err
    assert ("multiprocessing's forkserver, the process that starts prep's workers and reports how they end, "
            "died (killed by SIGKILL: out of memory, or killed by hand) with units ") in err, err
    assert "re-run the same command to resume" in err and "Traceback" not in err and "exit code 255" not in err
    assert elapsed < 5, elapsed
    assert_no_survivors(tag)
    rerun = run_prep(recipe, out, workers=2)
    assert rerun.returncode == 0, rerun.stderr
    assert_complete(out, reference)


@pytest.mark.parametrize("target", ["group", "parent", "sigterm"])
def test_ctrl_c_stops_workers_keeps_finished_units(tmp_path, recipe, reference, target):
    """Ctrl-C in a terminal signals the whole process group ("group"); `kill -INT` only the parent;
    SIGTERM (Slurm's time limit, `kill`) is handled the same way, with its own line and exit code 143.
    The workers are parked mid-unit (SIGSTOP) so the interrupt surely lands mid-run."""
    out = tmp_path / "out"
    tag = f"sigint-{target}-{time.monotonic_ns()}"
    proc = run_prep(recipe, out, workers=2, fault="shard-tmp:3:stop", tag=tag, wait=False, start_new_session=True)
    parked = _wait_stopped(tag, 2, proc)
    finished = len(journal_lines(out))
    assert finished >= 1  # guard: interrupted after some units were done
    t0 = time.monotonic()
    if target == "group":
        os.killpg(proc.pid, signal.SIGINT)
        resume(parked)  # as a terminal's Ctrl-C reaches running workers: they must ignore it
    else:
        os.kill(proc.pid, signal.SIGINT if target == "parent" else signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    elapsed = time.monotonic() - t0
    err = err.decode()
    said, code = ("terminated (SIGTERM)", 143) if target == "sigterm" else ("interrupted", 130)
    assert proc.returncode == code, err
    assert f"{said}: finished units are kept; re-run the same command to resume" in err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert elapsed < 5, elapsed
    assert_no_survivors(tag, within=3.0)
    assert len(journal_lines(out)) == finished  # kept, and nothing half-done was recorded
    assert not (out / "manifest.json").exists()
    rerun = run_prep(recipe, out, workers=2)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{NUM_UNITS - finished}/{NUM_UNITS} units" in rerun.stdout
    assert_complete(out, reference)


def test_ctrl_c_during_finalize_then_rerun_is_identical(tmp_path, recipe, reference):
    """SIGINT (a Ctrl-C) arriving while shards are placed (a parent thread, while units still run):
    a clean exit 130, then a clean finish."""
    out = tmp_path / "out"
    r = run_prep(recipe, out, workers=1, fault="finalize-shard:3:int")
    assert r.returncode == 130, r.stderr
    assert "re-run the same command to resume" in r.stderr and "Traceback" not in r.stderr
    assert 1 <= len(journal_lines(out)) <= NUM_UNITS and not (out / "manifest.json").exists()
    assert not list(out.rglob("shard-*.tmp")), list(out.rglob("*.tmp"))  # the shard being built was dropped
    rerun = run_prep(recipe, out, workers=1)
    assert rerun.returncode == 0, rerun.stderr
    assert_complete(out, reference)
