"""The `prep` console script's entry point. For `prep tokenize` it reads the command line itself:

1. It starts the worker pool's forkserver at once, from the recipe the command line names. The CLI's
   own imports take ~0.3 s before it reads the recipe, and the forkserver needs ~0.25 s to import
   numpy, tokenizers, gigatoken and the pipeline for its workers; started here, the two overlap on
   separate cores instead of running one after the other.
2. It runs the command without typer (pipeline.tokenize_command), which spares typer and the
   pydantic that typer 0.29 imports to coerce option values: ~0.1 s on the path to the first unit
   (55 MB on 2 cores: the whole run is ~1 s).

Only a command line this module reads completely is run directly: every option `prep tokenize`
has, in its long, `--long=value` or separated short form. Anything else (`--help`, glued short
options, a missing or odd value, an unknown option) goes to the typer CLI, which reports it; the
typer command calls the same function, so both paths do the same work and print the same lines.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.workers_option import parse_workers, worker_overrides

__all__ = ["main", "console", "tokenize_args"]

_VALUED = {"--recipe": "recipe", "-r": "recipe", "--output": "output", "-o": "output",
           "--num-workers": "num_workers", "-j": "num_workers", "--set": "sets"}
_FLAGS = {"--overwrite": ("overwrite", True), "--allow-empty": ("allow_empty", True),
          "--progress": ("progress", True), "--no-progress": ("progress", False)}


def tokenize_args(args: list[str]) -> dict | None:
    """`tokenize`'s arguments as tokenize_command's keywords, or None when this cannot read all of
    them the way the CLI would (the CLI then parses them, and reports what is wrong)."""
    opts = {"recipe": None, "output": None, "num_workers": None, "sets": [], "overwrite": False, "progress": True,
            "allow_empty": False}
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in _VALUED:
            if not eq:
                if i + 1 >= len(args) or args[i + 1].startswith("-"):
                    return None
                i += 1
                value = args[i]
            key = _VALUED[name]
            if key == "sets":
                opts["sets"].append(value)
            elif key == "num_workers":
                if (workers := parse_workers(value)) is None:  # the CLI's own reading of -j
                    return None  # the CLI reports it
                opts[key] = workers
            else:
                opts[key] = value  # the last one wins, as in the CLI
        elif not eq and name in _FLAGS:
            key, flag = _FLAGS[name]
            opts[key] = flag
        else:
            return None
        i += 1
    if opts["recipe"] is None:
        return None
    opts["recipe"] = str(Path(opts["recipe"]))  # what the CLI's Path option makes of it
    return opts


def _warm_for(options: dict) -> None:
    try:
        from pipeline.pool import warm_forkserver
        from pipeline.recipe import Recipe
        # not validated: a directory source's census would come before the forkserver's start (100,000
        # files: ~0.3 s of the parent's, while the forkserver's imports could run on the other core)
        num_workers, sets = worker_overrides(options["num_workers"], options["sets"])
        recipe = Recipe.from_yaml(options["recipe"], sets, options["output"], validate=False)
        if (num_workers or recipe.resolved_num_workers()) > 1:
            warm_forkserver(recipe)  # the same test as tokenize_command's
    except Exception:  # tokenize_command reads the recipe again and reports what is wrong with it
        return


def main(fast_exit: bool = False) -> None:
    """`prep ...`. `fast_exit` (the console script): a `prep tokenize` run read directly ends with
    os._exit once its output is durable and its lines are flushed, skipping the interpreter's teardown
    (freeing numpy, rich, the tokenizer spec, module by module, and multiprocessing's exit handlers
    for a pool already shut down): 0.06-0.07 s of a ~1 s run on 55 MB with 2 workers."""
    args = sys.argv[1:]
    from pipeline.interrupts import RESUME_HINT, describe, stop_on_signals
    try:
        with stop_on_signals(until_exit=True):
            from pipeline import trace
            trace.event("main")
            if args[:1] == ["tokenize"] and (options := tokenize_args(args[1:])) is not None:
                import pipeline.blas_threads  # noqa: F401  (before anything loads numpy)
                _warm_for(options)
                from pipeline.tokenize_command import exit_code, tokenize_command
                code = exit_code(tokenize_command, hint=RESUME_HINT, **options)
            else:
                from pipeline.cli import app
                app()
                return
    except KeyboardInterrupt as e:
        # Ctrl-C or SIGTERM before a command's own handling (exit_code): while the CLI imports (~0.3 s),
        # reads the recipe or starts the forkserver. It was a KeyboardInterrupt traceback.
        what, code = describe(e)
        sys.stderr.write(f"{what}: {RESUME_HINT}\n" if args[:1] == ["tokenize"] else f"{what}\n")
    if fast_exit:
        _exit_now(code)
    sys.exit(code)


def console() -> None:
    """The `prep` console script's entry point."""
    main(fast_exit=True)


def _exit_now(code: int) -> None:
    """End the process at once. Everything a run writes is closed, synced and renamed before
    tokenize returns (shards, indexes, journal, manifest; the pool is shut down and the deleting
    thread joined), so only the standard streams need flushing. The forkserver ends when this
    process's end closes its pipe, as on any exit. multiprocessing's exit handler would have removed
    its scratch directory (`$TMPDIR/pymp-*`, holding the forkserver's socket): done here, or every
    run leaves one behind."""
    import os
    _remove_mp_scratch()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more can be said there
            pass
    os._exit(code)


def _remove_mp_scratch() -> None:
    """The directory multiprocessing.util.get_temp_dir made in this process, if it made one (kept in
    the process's private `_config`, where get_temp_dir looks for it: asking get_temp_dir would make one)."""
    import shutil
    from multiprocessing import process
    scratch = getattr(process.current_process(), "_config", {}).get("tempdir")
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)
