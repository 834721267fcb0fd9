"""Two runs on one output directory: the second is refused with a message naming the holder's pid;
the holder is unharmed; a holder killed with -9 leaves no lock behind."""

from __future__ import annotations

import errno
import os
import signal
import time

import psutil
import pytest
from faultkit import assert_complete, journal_lines, run_prep

from pipeline.errors import PrepError
from pipeline.journal import RunState


def test_second_run_refused_while_this_process_holds_the_lock(tmp_path, recipe, reference):
    out = tmp_path / "out"
    with RunState(out).lock():
        r = run_prep(recipe, out, workers=2)
        assert r.returncode == 1
        err = r.stderr.replace("\n", "")
        assert f"another prep run (pid {os.getpid()} on " in err, err
        assert "Traceback" not in err
    assert not journal_lines(out)  # the refused run touched nothing
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert_complete(out, reference)


def test_two_real_runs_second_refused_first_unharmed(tmp_path, recipe, reference):
    out = tmp_path / "out"
    first = run_prep(recipe, out, fault="start:1:stop", wait=False)  # parks itself holding the lock
    deadline = time.monotonic() + 30
    while psutil.Process(first.pid).status() != psutil.STATUS_STOPPED:
        assert first.poll() is None and time.monotonic() < deadline, "the first run never reached its stop point"
        time.sleep(0.01)
    second = run_prep(recipe, out, workers=2)
    assert second.returncode == 1
    assert f"another prep run (pid {first.pid} on " in second.stderr.replace("\n", ""), second.stderr
    first.send_signal(signal.SIGCONT)
    stdout, stderr = first.communicate(timeout=60)
    assert first.returncode == 0, stderr
    assert_complete(out, reference)


def test_lock_dies_with_its_holder(tmp_path, recipe, reference):
    """flock is released by the kernel on kill -9: nothing stale, nothing to delete by hand."""
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:2").returncode == -signal.SIGKILL
    assert (out / ".prep" / "lock").read_text().strip()  # it died holding it, its pid still written
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert_complete(out, reference)


def test_pid_file_fallback_without_flock(tmp_path, monkeypatch):
    """Filesystems without flock: an O_EXCL pid file; live holders refuse, dead ones are taken over."""
    import pipeline.journal as journal

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "no locks available")

    monkeypatch.setattr(journal.fcntl, "flock", no_flock)
    state = RunState(tmp_path / "out")
    with state.lock():
        assert (state.dir / "lock.pid").read_text().startswith(f"{os.getpid()} ")
        with pytest.raises(PrepError, match=f"pid {os.getpid()} on "):
            with RunState(tmp_path / "out").lock():
                pass
    assert not (state.dir / "lock.pid").exists()
    dead = psutil.Popen(["true"])
    dead.wait()
    (state.dir / "lock.pid").write_text(f"{dead.pid} {os.uname().nodename}")  # a holder that is gone
    with state.lock():
        assert (state.dir / "lock.pid").read_text().startswith(f"{os.getpid()} ")
