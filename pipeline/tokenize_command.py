"""`prep tokenize`'s body and its user-error reporting, without typer: the console script runs it
directly when it can read the whole command line itself (pipeline.launch.tokenize_args), and the
typer command (pipeline.cli) calls the same function for everything else.

Why: typer 0.29 imports pydantic to coerce any option value (typer._adapters: ~0.08 s, plus ~0.015 s
of pydantic's plugin scan), and typer itself takes ~0.02 s, all on the parent's path before the
first unit starts; a 55 MB run takes ~1 s end to end on 2 cores.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from pipeline.errors import PrepError
from pipeline.interrupts import describe, stop_on_signals
from pipeline.workers_option import worker_overrides

__all__ = ["tokenize_command", "exit_code", "err", "out"]

# emoji off: rich turned `:smile:` in a path or a document shown by inspect into 😄 (the text shown was
# not the text stored)
err = Console(stderr=True, soft_wrap=True, emoji=False)
# markup off: what it prints holds user paths and names, and rich read `out/[v2]` as a style tag and
# printed `out/` (the summary, the notes); prints that want markup ask for it
out = Console(soft_wrap=True, markup=False, emoji=False)


def exit_code(fn, *args, hint: str = "", **kwargs) -> int:
    """Run `fn`; a PrepError becomes one line on stderr and 1, Ctrl-C one line (with `hint`: what a
    re-run does) and 130, SIGTERM the same and 143 (pipeline.interrupts)."""
    try:
        with stop_on_signals():
            fn(*args, **kwargs)
    except PrepError as e:
        # a pre-signed URL quoted by any message: its signature masked
        from pipeline.signed_urls import redact
        err.print(f"[bold red]error:[/] {escape(redact(str(e)))}", markup=True, highlight=False, soft_wrap=True)
        return 1
    except KeyboardInterrupt as e:
        what, code = describe(e)
        err.print(f"[yellow]{what}[/]" + (f"[yellow]:[/] {escape(hint)}" if hint else ""), markup=True,
                  highlight=False, soft_wrap=True)
        return code
    return 0


def tokenize_command(recipe: str, output: str | None = None, num_workers: int | str | None = None,
                     sets: list[str] = (), overwrite: bool = False, progress: bool = True,
                     allow_empty: bool = False) -> None:
    from pipeline.recipe import Recipe

    num_workers, sets = worker_overrides(num_workers, sets)
    r = Recipe.from_yaml(recipe, sets, output)
    if (num_workers or r.resolved_num_workers()) > 1:
        from pipeline.pool import warm_forkserver
        warm_forkserver(r)  # its imports overlap the parent's own and the tokenizer load
    from pipeline.executor import tokenize as run

    try:
        result = run(r, output=output, num_workers=num_workers, overwrite=overwrite, show_progress=progress,
                     console=err, allow_empty=allow_empty)
    except PrepError as e:
        raise _at_its_line(r.with_path_hint(e), recipe, sets, output) from None
    _print_summary(r.name, result)


def _at_its_line(error: PrepError, recipe: str, sets: list[str], output: str | None) -> PrepError:
    """A run's error about a recipe key (`source.path: no file matches ...`) with the key's line in the
    recipe file, as the recipe's own checks give it (pipeline.recipe_yaml)."""
    from pipeline.recipe_yaml import load_recipe_yaml, located, overridden_keys
    try:
        with open(recipe, encoding="utf-8") as f:
            _, lines = load_recipe_yaml(f.read(), recipe)
    except (OSError, ValueError, PrepError):  # changed or removed since it was read: the error as it is
        return error
    return PrepError(located(str(error), recipe, lines, overridden_keys(sets, output)))


def _print_summary(name: str, result) -> None:
    from pipeline.count_table import Column, count_table

    m = result.manifest
    if result.already_complete:
        # "nothing to tokenize", not "to do": a URL output's re-run may still finish its upload (a note below)
        out.print(f"{result.out}: already complete for this recipe; nothing to tokenize (--overwrite to rebuild)")
    out.print(f"{name} -> {result.out}", style="italic")  # whole: a path is never wrapped or cut
    columns = [Column("split"), Column("docs"), Column("tokens"), Column("shards"), Column("tokens/doc", "tok/doc")]
    rows = [[split, f"{s.num_docs:,}", f"{s.num_tokens:,}", f"{len(s.shards):,}", f"{s.num_tokens / max(s.num_docs, 1):,.1f}"]
            for split, s in m.splits.items()]
    out.print(count_table(columns, rows, out.width), soft_wrap=False)
    if not result.already_complete:
        toks = result.tokens_run  # a resumed run: its own units' tokens, as input_bytes counts its own bytes
        secs = max(result.seconds, 1e-9)
        out.print(f"{result.units_run}/{result.units_total} units in {result.seconds:.1f} s: "
                  f"{result.input_bytes / secs / 1e6:.1f} MB/s input, {toks / secs / 1e6:.2f} Mtok/s; "
                  f"dtype {m.dtype}, tokenizer backend {m.tokenizer['backend']}")
    if m.skipped:
        out.print("skipped: " + ", ".join(f"{k} {v:,}" for k, v in m.skipped.items())
                  + (f" (listed in {result.out / 'rejects.jsonl'})" if (result.out / "rejects.jsonl").exists() else ""))
    for note in result.notes:
        out.print(f"note: {note}")
