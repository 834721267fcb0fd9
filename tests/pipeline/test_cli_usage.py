"""The command line's own surface: -h, --version, `-j auto`, usage errors in one line, and what
the summary prints of user paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.recipe import Recipe
from pipeline.workers_option import worker_overrides
from tests.conftest import DEMO_CORPUS, demo_texts, write_jsonl, write_recipe

runner = CliRunner()
COMMANDS = [[], ["tokenize"], ["verify"], ["inspect"], ["bench-loader"]]


@pytest.mark.parametrize("command", COMMANDS)
def test_dash_h_is_help_on_the_app_and_every_command(command):
    """`-h` was "No such option: -h" (exit 2) everywhere."""
    short = runner.invoke(app, [*command, "-h"], prog_name="prep")
    long = runner.invoke(app, [*command, "--help"], prog_name="prep")
    assert short.exit_code == 0, short.output
    assert short.output == long.output and short.output.startswith("Usage: prep")
    assert "-h, --help" in short.output


@pytest.mark.parametrize("command", ["verify", "inspect", "bench-loader"])
def test_help_names_the_dataset_argument_as_it_is_typed(command):
    """typer 0.29 wrote `{DIR}` in the usage line and `DIR <str>` in the argument list."""
    result = runner.invoke(app, [command, "-h"], prog_name="prep")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: prep {command} [OPTIONS] DIR\n")
    assert "{" not in result.output.splitlines()[0] and "<str>" not in result.output
    arguments = result.output.split("Arguments:\n", 1)[1].split("\n\n", 1)[0]
    assert arguments.split()[:2] == ["DIR", "Dataset"] and "[required]" not in arguments


def test_version_names_prep_and_its_tokenizer_engines():
    """There was no --version: "No such option: --version", exit 2."""
    result = runner.invoke(app, ["--version"], prog_name="prep")
    assert result.exit_code == 0, result.output
    first, second = result.output.splitlines()
    assert first.startswith(f"prep {metadata.version('prep')} (")
    for library in ("tokenizers", "tiktoken", "gigatoken"):
        assert f"{library} {metadata.version(library)}" in second


def test_version_before_a_command_is_still_the_version():
    result = runner.invoke(app, ["--version", "tokenize"], prog_name="prep")
    assert result.exit_code == 0 and result.output.startswith("prep ")


@pytest.mark.parametrize("args, names", [
    (["tokenize", "-r", "r.yaml", "-j", "0"], "--num-workers/-j: '0' is neither a whole number >= 1 nor auto"),
    (["tokenize", "-r", "r.yaml", "-j", "many"], "--num-workers/-j: 'many'"),
    (["tokenize"], "Missing option '--recipe'"),
    (["tokenize", "-r"], "Option '-r' requires an argument"),
    (["tokenize", "-r", "r.yaml", "--recpie", "x"], "No such option: --recpie"),
    (["tokenize", "-r", "r.yaml", "--overwrite=yes"], "Option '--overwrite' does not take a value"),
    (["tokenzie"], "No such command 'tokenzie'. Did you mean 'tokenize'?"),
    (["--bogus"], "No such option: --bogus"),
    (["inspect", "ds", "-n", "-1"], "--docs/-n: '-1' should be greater than or equal to 0"),
    (["inspect", "ds", "-n", "x"], "--docs/-n: 'x' should be a valid integer"),
    (["verify"], "Missing argument 'DIR'"),
    (["verify", "a", "b"], "unexpected extra argument"),
    (["bench-loader", "ds", "--batch-size", "0"], "--batch-size: '0' should be greater than or equal to 1"),
    (["bench-loader", "ds", "--seq-len", "0"], "--seq-len: '0' should be greater than or equal to 1"),
    (["bench-loader", "ds", "--mode", "bogus"], "--mode: 'bogus' is not a loader mode; give one of windows, packed"),
])
def test_a_usage_error_is_one_line_naming_the_option_and_exit_2(args, names):
    """typer printed a usage line, a "Try ... --help" line and a boxed panel (6 lines for `-j 0`);
    prep's other errors are one line."""
    result = runner.invoke(app, args, prog_name="prep")
    assert result.exit_code == 2, result.output
    assert len(result.output.splitlines()) == 1, result.output
    assert result.output.startswith("error: ") and names in result.output, result.output
    command = "prep" if args[0].startswith("-") or args[0] == "tokenzie" else f"prep {args[0]}"
    assert result.output.rstrip().endswith(f"(see `{command} -h`)"), result.output


def test_bench_loader_seq_len_zero_is_refused_before_the_loader_runs(tmp_path):
    """It reached the loader, which said "batch_size and seq_len must be >= 1" (exit 1): names the
    command does not have."""
    (tmp_path / "manifest.json").write_text("{}")
    result = runner.invoke(app, ["bench-loader", str(tmp_path), "--seq-len", "0"])
    assert result.exit_code == 2 and "seq_len" not in result.output and "--seq-len" in result.output


@pytest.mark.parametrize("recipe_workers", [1, 3])
def test_dash_j_auto_means_the_recipes_auto(tmp_path, recipe_workers):
    """`-j auto` was refused ("Input should be a valid integer"), though `num_workers: auto` is the
    recipe's default: it is that, winning over the recipe and over --set as `-j N` does."""
    recipe = write_recipe(tmp_path / "r.yaml", corpus=DEMO_CORPUS, tokenizer="t.json", out=tmp_path / "out",
                          num_workers=recipe_workers)
    count, sets = worker_overrides("auto", ["num_workers=2"])
    assert count is None and Recipe.from_yaml(recipe, sets, validate=False).num_workers == "auto"
    assert worker_overrides(3, ["a=b"]) == (3, ["a=b"])


def test_dash_j_auto_tokenizes(tmp_path, demo_tokenizer):
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(200))
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=tmp_path / "out")
    result = runner.invoke(app, ["tokenize", "-r", str(recipe), "-j", "auto", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "manifest.json").exists()


def test_paths_with_brackets_spaces_and_accents_print_as_given(tmp_path, demo_tokenizer):
    """rich read `[red]` in an output path as a style tag: the summary printed `run x/...` for
    `run [red]x/...`, a directory that does not exist."""
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(50))
    recipe = write_recipe(tmp_path / "r é.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=tmp_path / "x")
    out = tmp_path / "run [red]x" / "a b ü"
    for _ in range(2):  # the run, then the re-run's "already complete"
        result = runner.invoke(app, ["tokenize", "-r", str(recipe), "-o", str(out), "--no-progress"])
        assert result.exit_code == 0, result.output
        assert f"test -> {out}\n" in result.output
    assert result.output.startswith(f"{out}: already complete")


def _make_dataset(tmp_path, demo_tokenizer):
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(300))
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=tmp_path / "out")
    result = runner.invoke(app, ["tokenize", "-r", str(recipe), "--no-progress"])
    assert result.exit_code == 0, result.output
    return recipe, tmp_path / "out"


def _numbers(out) -> list[str]:
    """Every count the summary shows, as printed: each split's docs, tokens, shards and tokens/doc."""
    m = json.loads((out / "manifest.json").read_text())
    numbers = []
    for s in m["splits"].values():
        docs, tokens = s["num_docs"], s["num_tokens"]
        numbers += [f"{docs:,}", f"{tokens:,}", f"{len(s['shards']):,}", f"{tokens / max(docs, 1):,.1f}"]
    return numbers


@pytest.mark.parametrize("columns", [40, 80, 200])
def test_the_summary_and_inspect_never_cut_a_number(tmp_path, demo_tokenizer, columns):
    """On 40 columns rich cut the summary table's cells: "230,…" for 230,604 tokens."""
    recipe, out = _make_dataset(tmp_path, demo_tokenizer)
    for args in (["tokenize", "-r", str(recipe), "--no-progress"], ["inspect", str(out)]):
        run = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "COLUMNS": str(columns)})
        assert run.returncode == 0, run.stderr
        assert "…" not in run.stdout, run.stdout
        words = {word.strip("│┃,") for word in run.stdout.split()}
        for number in _numbers(out):
            assert number in words, (number, run.stdout)
        table = [line for line in run.stdout.splitlines() if "train" in line or "split" in line]
        assert all(len(line) <= columns for line in table), run.stdout
        if columns >= 80:  # room for the boxed table, as before
            assert any(line.startswith("┃ split ┃") for line in run.stdout.splitlines()), run.stdout
