"""`prep`: the command line. Thin commands: parse, call one library function, print a summary.

Known user errors (`PrepError`) print one line and exit 1, with no traceback.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.errors import PrepError

__all__ = ["app"]

app = typer.Typer(
    help="prep: corpora -> tokenized, memory-mapped, Megatron-compatible shards; loaders that feed them to PyTorch.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
err = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=True)


@app.callback()
def _root() -> None:
    """prep: corpora -> tokenized, memory-mapped, Megatron-compatible shards; loaders that feed them to PyTorch."""


def user_errors(fn):
    """Turn a PrepError into one line on stderr and exit code 1."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PrepError as e:
            err.print(f"[bold red]error:[/] {escape(str(e))}", markup=True, highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err.print("[yellow]interrupted:[/] finished units are kept; re-run the same command to resume",
                      markup=True)
            raise typer.Exit(130) from None
    return wrapper


@app.command()
@user_errors
def tokenize(
    recipe: Path = typer.Option(..., "--recipe", "-r", help="Recipe YAML (see recipes/ and the README's recipe reference)."),
    output: str | None = typer.Option(None, "--output", "-o", help="Output directory; overrides output.dir."),
    num_workers: int | None = typer.Option(None, "--num-workers", "-j", min=1,
                                              help="Worker processes (default: the recipe's num_workers, auto = one per core). Output bytes do not depend on it."),
    set_: list[str] = typer.Option([], "--set", help="Override a recipe key: --set output.shard_tokens=50000000 (repeatable; value parsed as YAML)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a complete dataset, or discard an unfinished run of another recipe."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show the live progress bar."),
) -> None:
    """Tokenize a corpus into DIR/<split>/*.bin + *.idx shards and DIR/manifest.json.

    Resumable: re-running the same command after a crash or kill -9 skips finished work units and
    yields byte-identical output. A second concurrent run on the same output is refused.
    """
    from pipeline.executor import tokenize as run
    from pipeline.recipe import Recipe

    r = Recipe.from_yaml(recipe, set_)
    result = run(r, output=output, num_workers=num_workers, overwrite=overwrite, show_progress=progress,
                 console=err)
    m = result.manifest
    if result.already_complete:
        out.print(f"{result.out}: already complete for this recipe; nothing to do (--overwrite to rebuild)")
    table = Table(title=f"{r.name} -> {result.out}", title_justify="left")
    for col in ("split", "docs", "tokens", "shards", "tokens/doc"):
        table.add_column(col, justify="right" if col != "split" else "left")
    for name, s in m.splits.items():
        table.add_row(name, f"{s.num_docs:,}", f"{s.num_tokens:,}", str(len(s.shards)),
                      f"{s.num_tokens / max(s.num_docs, 1):,.1f}")
    out.print(table)
    if not result.already_complete:
        toks = sum(s.num_tokens for s in m.splits.values())
        secs = max(result.seconds, 1e-9)
        out.print(f"{result.units_run}/{result.units_total} units in {result.seconds:.1f} s: "
                  f"{result.input_bytes / secs / 1e6:.1f} MB/s input, {toks / secs / 1e6:.2f} Mtok/s; "
                  f"dtype {m.dtype}, tokenizer backend {m.tokenizer['backend']}")
    if m.skipped:
        out.print("skipped: " + ", ".join(f"{k} {v:,}" for k, v in m.skipped.items())
                  + (f" (listed in {result.out / 'rejects.jsonl'})" if (result.out / "rejects.jsonl").exists() else ""))
    for note in result.notes:
        out.print(f"note: {note}")


@app.command()
@user_errors
def verify(
    directory: Path = typer.Argument(..., help="Dataset directory (the one holding manifest.json)."),
    quick: bool = typer.Option(False, "--quick", help="Sizes and index structure only: skip reading the .bin files (no sha256, no token-id check)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show the progress bar."),
) -> None:
    """Check a dataset against its manifest: schema and version, every shard's sha256, .idx headers,
    offsets and lengths against the .bin sizes, token ids below the vocabulary size, per-split totals.

    Exit 0 when everything holds; otherwise exit 1 with one line per problem, naming the file.
    """
    from pipeline.verify import verify_dataset

    report = verify_dataset(directory, level="index" if quick else "full", progress=progress, console=err)
    for line in report.problems + [f"note: {n}" for n in report.notes]:
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    (out if report.ok else err).print(report.summary(), markup=False, highlight=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)


def main() -> None:  # python -m pipeline.cli
    app()


if __name__ == "__main__":
    sys.exit(main())
