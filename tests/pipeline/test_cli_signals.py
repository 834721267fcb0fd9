"""Ctrl-C and SIGTERM in the CLI's own stretches, outside a command's handling (exit_code): the imports
of `python -m pipeline.cli`, and click's parsing of the command line. Each is one line and its code
(130 Ctrl-C, 143 SIGTERM), as everywhere else."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SIGNALS = [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated (SIGTERM)")]


@pytest.mark.parametrize("sig,code,says", SIGNALS)
def test_a_signal_while_python_m_pipeline_cli_imports_typer_is_one_line(tmp_path, sig, code, says):
    """`python -m pipeline.cli` imported typer and rich (0.1-0.2 s) before any handler: a SIGTERM then
    killed it without a line (-15), a Ctrl-C was a KeyboardInterrupt traceback. A stand-in `typer`
    first on the path sends the signal at the moment of that import."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "typer.py").write_text(f"import os, signal, time\nos.kill(os.getpid(), signal.{sig})\n"
                                     "time.sleep(30)\nraise AssertionError('no signal')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow), str(REPO)])}
    run = subprocess.run([sys.executable, "-m", "pipeline.cli", "verify", str(tmp_path / "nowhere")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert (run.returncode, run.stderr) == (code, f"{says}\n")


@pytest.mark.parametrize("command,hint", [(["verify", "nowhere"], ""),
                                          (["tokenize", "-r", "r.yaml", "-j", "0"],
                                           ": finished units are kept; re-run the same command to resume")])
@pytest.mark.parametrize("sig,code,says", SIGNALS)
def test_a_signal_while_click_reads_the_command_line_is_one_line(tmp_path, command, hint, sig, code, says):
    """typer turned a KeyboardInterrupt raised while click parsed the options or resolved the command
    into a silent exit 130, a SIGTERM's too. The signal comes once click has found the subcommand, before
    it parses the subcommand's options (`-j 0` leaves the command line to typer: pipeline.launch)."""
    program = ("import os, signal, sys\nfrom pipeline import cli_usage\n"
               "resolve = cli_usage.PrepGroup.resolve_command\n"
               "def arrive(self, ctx, args):\n"
               "    resolved = resolve(self, ctx, args)\n"
               f"    os.kill(os.getpid(), signal.{sig})\n"
               "    return resolved\n"
               "cli_usage.PrepGroup.resolve_command = arrive\n"
               f"sys.argv = ['prep', *{command!r}]\n"
               "from pipeline.launch import main\nmain()\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=60)
    assert (run.returncode, run.stderr) == (code, f"{says}{hint}\n")
