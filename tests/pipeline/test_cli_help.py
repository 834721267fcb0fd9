"""The help a new user reads first: a bare `prep`, and the examples `prep -h` and `prep tokenize -h` give,
which are run here as written (from a copy of the repository's recipes/)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from pipeline.cli import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def test_bare_prep_prints_its_help_on_stdout_and_exits_0():
    """It printed the help to stderr with exit 2, click's code for a usage error: `prep | less` showed
    nothing, and a script could not tell it from a mistyped option. Now as pip, cargo and docker do."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", "from pipeline.launch import main; main()"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.startswith("Usage: ") and "Commands:" in done.stdout and "tokenize" in done.stdout
    helped = subprocess.run([sys.executable, "-c", "from pipeline.launch import main; main()", "--help"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout == helped.stdout  # the same text as `prep --help`


def _examples(help_text: str) -> list[list[str]]:
    """The `prep ...` lines of a help text (a trailing backslash continues a line), as argv lists."""
    joined = re.sub(r"\\\n\s*", " ", help_text)
    return [shlex.split(line.strip())[1:] for line in joined.splitlines() if line.strip().startswith("prep ")]


def test_the_help_examples_run_as_written(tmp_path, monkeypatch):
    shutil.copytree(REPO / "recipes", tmp_path / "recipes", ignore=shutil.ignore_patterns("*.py"))
    monkeypatch.chdir(tmp_path)
    root = runner.invoke(app, ["--help"], prog_name="prep", env={"COLUMNS": "100"})
    tokenize = runner.invoke(app, ["tokenize", "--help"], prog_name="prep", env={"COLUMNS": "100"})
    examples = _examples(root.output) + _examples(tokenize.output)
    assert len(examples) >= 6 and {e[0] for e in examples} == {"tokenize", "inspect", "verify", "bench-loader"}
    for argv in examples:
        if argv[0] == "bench-loader":  # as written, plus a short measurement: the example's options are checked
            argv = [*argv, "--workers", "0", "--num-batches", "3"]
        if argv[0] == "tokenize":
            argv = [*argv, "--no-progress"]
        result = runner.invoke(app, argv)
        assert result.exit_code == 0, (argv, result.output)
    assert (tmp_path / "out" / "bos" / "manifest.json").exists()
