"""The `prep` console script's entry point: start the worker pool's forkserver before the CLI's imports.

`prep tokenize` spends ~0.3 s in its own imports before it reads the recipe (typer alone imports
pydantic to parse the options: 0.12 s), and the forkserver needs ~0.25 s to import numpy,
tokenizers, gigatoken and the pipeline for its workers. Started here, from the recipe as the
command line names it, the two overlap on separate cores instead of running one after the other.
Best effort: anything this cannot read (an unusual option spelling, a bad recipe) is left to the
CLI, which starts the forkserver itself when it gets there (idempotent) or reports the error.
"""

from __future__ import annotations

import sys

__all__ = ["main", "early_options"]


def early_options(args: list[str]) -> tuple[str, int | None, list[str]] | None:
    """(recipe path, --num-workers or None, --set values) from `tokenize`'s arguments, or None when
    they cannot be read without the CLI parser."""
    recipe, workers, sets = None, None, []
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if name in ("--recipe", "-r", "--num-workers", "-j", "--set"):
            if not eq:
                if i + 1 >= len(args):
                    return None
                value = args[i + 1]
                i += 1
            if name in ("--recipe", "-r"):
                recipe = value
            elif name == "--set":
                sets.append(value)
            else:
                if not value.isdigit():
                    return None
                workers = int(value)
        elif arg.startswith(("-r", "-j")) and len(arg) > 2 and not arg.startswith("--"):
            return None  # -r<path> / -j<n> glued: leave it to the CLI
        i += 1
    return (recipe, workers, sets) if recipe is not None else None


def _warm_for(args: list[str]) -> None:
    options = early_options(args)
    if options is None:
        return
    recipe_path, workers, sets = options
    try:
        from pipeline.pool import warm_forkserver
        from pipeline.recipe import Recipe
        if (workers or Recipe.from_yaml(recipe_path, sets).resolved_num_workers()) > 1:
            warm_forkserver()  # the same test as the CLI's
    except Exception:  # the CLI reads the recipe again and reports what is wrong with it
        return


def main() -> None:
    args = sys.argv[1:]
    from pipeline import trace
    trace.event("main")
    if args[:1] == ["tokenize"] and not {"--help", "-h"} & set(args):
        _warm_for(args[1:])
    from pipeline.cli import app
    app()
