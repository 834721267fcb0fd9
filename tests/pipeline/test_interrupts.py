"""pipeline.interrupts: one signal stops a command once; a burst after it is ignored, a later one
exits at once; a library caller gets its handlers back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from pipeline import interrupts


def test_a_library_caller_gets_its_ctrl_c_back_after_one():
    """The handlers stayed SIG_IGN after one signal: a process calling exit_code in-process (a wrapper,
    a notebook) lost Ctrl-C for good."""
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with interrupts.stop_on_signals():
            os.kill(os.getpid(), signal.SIGINT)
            signal.sigtimedwait([], 0.5)  # let the handler run
    assert signal.getsignal(signal.SIGINT) is before
    assert signal.getsignal(signal.SIGTERM) is not interrupts._stop


def test_a_burst_is_ignored_and_a_later_signal_exits_at_once(tmp_path):
    """The cleanup that a first Ctrl-C starts is not cut short by the signals right after it (a burst),
    but one later than GRACE_S exits with a line and the exit code: a hung cleanup was left only to
    kill -9 (the signals stayed ignored until the exit)."""
    script = textwrap.dedent("""
        import os, signal, sys, time
        from pipeline import interrupts
        interrupts.GRACE_S = 0.3
        try:
            with interrupts.stop_on_signals(until_exit=True):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
        except KeyboardInterrupt:
            os.kill(os.getpid(), signal.SIGINT)  # in the grace: ignored, the cleanup goes on
            time.sleep(0.1)
            print("cleanup goes on", flush=True)
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGINT)  # past it: exits now
            time.sleep(5)
            print("not reached", flush=True)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 130, r.stderr
    assert "cleanup goes on" in r.stdout and "not reached" not in r.stdout
    assert r.stderr.strip() == "interrupted again: exiting now, before the cleanup ended"
