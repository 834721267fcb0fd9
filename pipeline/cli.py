"""`prep`: the command line. Thin commands: parse, call one library function, print a summary.

Known user errors (`PrepError`) print one line and exit 1, with no traceback.
"""

from __future__ import annotations

if __name__ == "__main__":
    # `python -m pipeline.cli`: the console script's entry, which installs the Ctrl-C / SIGTERM handlers
    # before the imports below (typer, rich: 0.1-0.2 s on 2 busy cores, in which a SIGTERM killed the
    # process without a line and a Ctrl-C was a traceback). It imports this file again as pipeline.cli.
    from pipeline.launch import main as _launch_main
    raise SystemExit(_launch_main())

import functools
from pathlib import Path

import typer

from pipeline.cli_usage import HELP_OPTIONS, PrepCommand, PrepGroup, print_version
from pipeline.count_table import Column, count_table
from pipeline.doc_display import DEFAULT_MAX_CHARS
from pipeline.errors import PrepError, closest
from pipeline.interrupts import RESUME_HINT
from pipeline.tokenize_command import err, exit_code, out, tokenize_command
from pipeline.workers_option import parse_workers

__all__ = ["app"]

# rich_markup_mode=None: click's plain help, rewrapped to the terminal (or 80 columns in a log). typer's
# rich help kept the docstrings' line breaks mid-sentence and, at 80 columns, left each option's help
# a 19-column strip beside its metavar; its usage errors were boxed panels (now one line: cli_usage).
app = typer.Typer(  # its help is _root's docstring
    cls=PrepGroup, context_settings=HELP_OPTIONS, rich_markup_mode=None,
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=print_version, is_eager=True,
                                 help="Print prep's version and its tokenizer engines' versions, then exit."),
) -> None:
    """prep: corpora -> tokenized, memory-mapped, Megatron-compatible shards; loaders that feed them to PyTorch.

    \b
    Try it, from the repository (the offline demo recipe):
      prep tokenize --recipe recipes/demo.yaml
      prep inspect out/demo -n 2
      prep verify out/demo
      prep bench-loader out/demo --seq-len 256

    `prep COMMAND -h` explains each command's options.
    """


def user_errors(fn, hint: str = ""):
    """Turn a PrepError into one line on stderr and exit code 1 (Ctrl-C: "interrupted" and 130, SIGTERM
    143; `hint` follows, for tokenize the resume hint: verify and inspect have nothing to resume)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        code = exit_code(fn, *args, hint=hint, **kwargs)
        if code:
            raise typer.Exit(code)
    return wrapper


def _workers(value: str | None) -> int | str | None:
    """-j's value: a whole number >= 1, or `auto` (the recipe's `num_workers: auto`: one per core)."""
    if value is None:
        return None
    workers = parse_workers(value)
    if workers is None:
        raise typer.BadParameter(f"{value!r} is neither a whole number >= 1 nor auto")
    return workers


@app.command(cls=PrepCommand, short_help="Tokenize a corpus into memory-mapped shards and a manifest.")
@functools.partial(user_errors, hint=RESUME_HINT)
def tokenize(
    recipe: Path = typer.Option(..., "--recipe", "-r", metavar="R.yaml",
                                help="Recipe YAML (see recipes/ and the README's recipe reference)."),
    output: str | None = typer.Option(None, "--output", "-o", metavar="DIR",
                                      help="Output directory or URL; overrides output.dir."),
    num_workers: str | None = typer.Option(
        None, "--num-workers", "-j", metavar="N|auto", callback=_workers,
        help="Worker processes: a number, or auto for one per core (default: the recipe's num_workers). "
             "Output bytes do not depend on it."),
    set_: list[str] = typer.Option([], "--set", metavar="KEY=VALUE",
                                   help="Override a recipe key (repeatable; the value is read as YAML): "
                                        "--set output.dir=out/x, --set num_workers=4."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a complete dataset, or discard an unfinished run of another recipe."),
    progress: bool = typer.Option(True, "--progress/--no-progress",
                                  help="Show the live progress bar on a terminal (in a pipe or log: its last state, one line)."),
    allow_empty: bool = typer.Option(
        False, "--allow-empty", help="Write the dataset even when it holds no document (every record skipped, or "
        "none in the input); without it such a run exits 1, naming why records were skipped, and writes no manifest."),
) -> None:
    """Tokenize a corpus into DIR/<split>/*.bin + *.idx shards and DIR/manifest.json.

    Resumable: re-running the same command after a crash or kill -9 skips finished work units and
    yields byte-identical output. A second concurrent run on the same output is refused.

    Exit codes: 0 done, 1 an error (one line; also a run that produced no document, unless
    --allow-empty), 2 a usage error, 130 Ctrl-C, 143 SIGTERM.

    \b
    Examples:
      prep tokenize -r recipes/demo.yaml
      prep tokenize -r recipes/demo.yaml -o out/bos --set tokenizer.boundary=bos
      prep tokenize -r recipes/demo.yaml -j 2 --set output.val_fraction=0.1 \\
        --overwrite
    """
    tokenize_command(str(recipe), output=output, num_workers=num_workers, sets=set_, overwrite=overwrite,
                     progress=progress, allow_empty=allow_empty)


@app.command(cls=PrepCommand, short_help="Check a dataset's shards against its manifest.")
@user_errors
def verify(
    directory: str = typer.Argument(..., metavar="DIR", help="Dataset directory (the one holding manifest.json)."),
    quick: bool = typer.Option(False, "--quick", help="Sizes and index structure only: skip reading the .bin files (no sha256, "
                               "no token-id check, no boundary check)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show the progress bar (on a terminal only)."),
) -> None:
    """Check a dataset against its manifest: schema and version, every shard's sha256, .idx headers,
    offsets and lengths against the .bin sizes, token ids below the vocabulary size, per-split totals,
    and every document starting / ending with the boundary id the manifest records (tokenizer.boundary:
    eos, bos or both), which finds an index edited to merge or split documents.

    Exit 0 when everything holds; otherwise exit 1 with one line per problem, naming the file.
    """
    from pipeline.verify import verify_dataset

    directory = _local_dataset(directory, "verify")
    _refuse_unfinished(directory, "verify")  # one line, as inspect and bench-loader say it
    report = verify_dataset(directory, level="index" if quick else "full", progress=progress, console=err)
    for line in report.problems + [f"note: {n}" for n in report.notes]:
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    (out if report.ok else err).print(report.summary(), markup=False, highlight=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)


_LOADER_MODES = ("windows", "packed", "grouped")  # loaders.plan.MODES (importing it imports torch)


def _modes(values: list[str]) -> list[str]:
    for mode in values:
        if mode not in _LOADER_MODES:
            raise typer.BadParameter(f"{mode!r} is not a loader mode; give one of {', '.join(_LOADER_MODES)}")
    return values


@app.command("bench-loader", cls=PrepCommand, short_help="Measure the loaders' throughput on a dataset.")
@user_errors
def bench_loader(
    directory: str = typer.Argument(..., metavar="DIR", help="Dataset directory written by `prep tokenize`."),
    modes: list[str] = typer.Option(list(_LOADER_MODES), "--mode", metavar="MODE", callback=_modes,
                                    help="Loader mode to measure: windows, packed or grouped (repeatable)."),
    workers: list[int] = typer.Option([0, 2], "--workers", min=0, metavar="N",
                                      help="DataLoader worker count to measure (repeatable)."),
    split: str = typer.Option("train", metavar="NAME", help="Split to read."),
    batch_size: int = typer.Option(8, min=1, metavar="N", help="Rows per batch."),
    seq_len: int = typer.Option(1024, min=1, metavar="N", help="Tokens per row."),
    num_batches: int = typer.Option(200, min=1, metavar="N", help="Batches timed per row."),
    step_ms: float = typer.Option(0.0, min=0.0, metavar="MS", help="Simulated training step (ms) to measure the data-wait share; 0 = none."),
    device: str = typer.Option("cpu", metavar="DEVICE", help="cpu, cuda or cuda:N."),
) -> None:
    """Measure loader overhead: batches/s, tokens/s, time to first batch, packed fill, grouped padding,
    and (with --step-ms) the share of a training step spent waiting for data."""
    from pipeline.manifest import read_manifest
    from pipeline.verify import refuse_non_dataset

    directory = _local_dataset(directory, "bench-loader")
    refuse_non_dataset(directory, "bench-loader")  # manifest.json or a split directory given: name the dataset's
    _refuse_unfinished(directory, "bench-loader")
    if not (directory / "manifest.json").exists():
        raise PrepError(f"{directory}: no manifest.json; point bench-loader at a `prep tokenize` output")
    m = read_manifest(directory)
    _known_split(directory, m, split)
    if m.splits[split].num_docs == 0:  # the loader's "split 'train' has no documents" named nothing to do
        others = [name for name, s in m.splits.items() if s.num_docs]
        raise PrepError(f"--split {split}: {directory} holds no documents in {split} (an empty run, written with "
                        "--allow-empty), so there is nothing to measure; "
                        + (f"bench a split that has some: --split {others[0]}" if others else
                           "bench a dataset that holds documents"))
    import importlib.util
    if importlib.util.find_spec("torch") is None:  # an optional dependency: `prep tokenize` needs none
        raise PrepError("bench-loader feeds the shards to PyTorch, which is not installed here: "
                        "pip install 'torch>=2.4' (or this package with its [torch] extra)")
    from loaders.bench import format_table, run_loader_bench  # imports torch: only for this command

    rows = run_loader_bench(str(directory), modes=tuple(modes), num_workers=tuple(workers), split=split,
                            batch_size=batch_size, seq_len=seq_len, num_batches=num_batches, step_ms=step_ms,
                            device=device)
    out.print(format_table(rows), markup=False, highlight=False)


@app.command(cls=PrepCommand, short_help="Summarize a dataset; decode its first documents.")
@user_errors
def inspect(
    directory: str = typer.Argument(..., metavar="DIR", help="Dataset directory (the one holding manifest.json)."),
    docs: int = typer.Option(0, "--docs", "-n", min=0, metavar="N", help="Also decode and print the first N documents of --split."),
    split: str | None = typer.Option(None, metavar="NAME", help="Split whose documents --docs prints (default: train)."),
    tokenizer: str | None = typer.Option(
        None, "--tokenizer", metavar="PATH", help="tokenizer.json to decode --docs with, when the path the manifest names (as "
        "given to `prep tokenize`) does not resolve from here; its sha256 must match the manifest's."),
    max_chars: int = typer.Option(DEFAULT_MAX_CHARS, "--max-chars", min=0, metavar="N",
                                  help="Print at most N characters of each --docs document (0: all of it)."),
) -> None:
    """Summarize a dataset from its manifest (splits, shards, tokens, tokenizer, skipped records);
    optionally decode the first documents with the tokenizer the recipe names. Control characters in
    a document (escape sequences, carriage returns, NULs) print as visible escapes (\\x1b, \\r).

    Files the manifest lists are checked for presence and size (a stat each), split directories for
    files it does not list, and the shards --docs decodes as `prep verify` checks them (index,
    sha256, token ids, document boundaries): a damaged dataset exits 1 after its summary, naming the
    damage, and --docs prints nothing."""
    from pipeline.manifest import read_manifest
    from pipeline.verify import check_for_reading, refuse_non_dataset

    directory = _local_dataset(directory, "inspect")
    refuse_non_dataset(directory, "inspect")  # manifest.json or a split directory given: name the dataset's
    _refuse_unfinished(directory, "inspect")
    if tokenizer is not None and not tokenizer.strip():  # `or` took the manifest's path for it, silently
        raise PrepError("--tokenizer is empty (an unset shell variable?); give the tokenizer.json to decode with, "
                        "or leave --tokenizer out to use the one the manifest names")
    m = read_manifest(directory)
    if split is not None or docs:  # before the summary; --split alone was ignored. No -n: no split needed
        split = split or "train"
        _known_split(directory, m, split)
    t = m.tokenizer
    out.print(f"{directory}: {m.created_by}, format {m.format_version}, dtype {m.dtype}, vocab {m.vocab_size:,}; "
              f"tokenizer {t.get('name')} ({t.get('backend')}, boundary {t.get('boundary')}, "
              f"bos {t.get('bos_id')}, eos {t.get('eos_id')}, sha256 {str(t.get('sha256'))[:12]})",
              markup=False, highlight=False)
    columns = [Column("split"), Column("docs"), Column("tokens"), Column("shards"), Column("tokens/doc", "tok/doc"),
               Column("GB")]
    rows = [[name, f"{s.num_docs:,}", f"{s.num_tokens:,}", f"{len(s.shards):,}",
             f"{s.num_tokens / max(s.num_docs, 1):,.1f}", f"{s.num_tokens * m.np_dtype.itemsize / 1e9:,.3f}"]
            for name, s in m.splits.items()]
    out.print(count_table(columns, rows, out.width), soft_wrap=False)
    if m.skipped:
        out.print("skipped: " + ", ".join(f"{k} {v:,}" for k, v in m.skipped.items()), markup=False)
    if m.failed_units:
        out.print(f"failed units: {len(m.failed_units)} (see manifest.json failed_units)", markup=False)
    # not read again; the shards --docs decodes are checked in full: decoding a cut .bin, or one
    # whose index or bytes changed, printed other documents' tokens as if they were these
    problems = check_for_reading(directory, m, split or "train", docs)
    if problems:
        shown = "\n  ".join(problems[:5]) + (f"\n  ... and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise PrepError(f"{directory} is damaged:\n  {shown}\n`prep verify {directory}` checks it in full; "
                        "restore the files, or rebuild it with `prep tokenize --overwrite`")
    if docs > 0:
        _print_docs(directory, m, split, docs, tokenizer, max_chars)


def _local_dataset(directory: str, command: str) -> Path:
    """The dataset directory argument; a URL (an output.dir of `prep tokenize` that uploaded there) is
    refused in one line: typer's Path made `s3://b/ds` into `s3:/b/ds`, "no such directory"."""
    from pipeline.source_formats import is_url, local_path

    if not directory.strip():  # Path("") is ".": `prep verify "$OUT"`, OUT unset, checked the current directory
        raise PrepError(f"`prep {command}` was given an empty DIR (an unset shell variable?); give the dataset's "
                        "directory, the one holding manifest.json (`.` for the current one)")
    if is_url(directory):
        raise PrepError(f"{directory}: a URL; `prep {command}` reads a local directory: give it the run's staging "
                        "copy (output.local_dir, by default under ~/.cache/prep/staging/; `prep tokenize` names it "
                        "in its last note), or a downloaded copy of the dataset")
    return Path(local_path(directory))


def _refuse_unfinished(directory: Path, command: str) -> None:
    """A `prep tokenize` output without its manifest yet (written last) but with the run's state: say
    that a run is writing it or stopped, and how to finish it. inspect said "the dataset is missing or
    incomplete (finish it with `prep tokenize`)", bench-loader "point bench-loader at a `prep tokenize`
    output", though it is one (the sentence is pipeline.dataset_path's, shared with the loader)."""
    from pipeline.dataset_path import (
        LOST_MANIFEST,
        UNFINISHED,
        lost_manifest_message,
        not_a_dataset,
        unfinished_message,
    )

    case = not_a_dataset(directory)
    if case is not None and case.kind == UNFINISHED:
        raise PrepError(unfinished_message(directory, f"run `prep {command}` again"))
    if case is not None and case.kind == LOST_MANIFEST:
        raise PrepError(lost_manifest_message(directory, f"run `prep {command}` again"))


def _known_split(directory: Path, m, split: str) -> None:
    """A --split the dataset does not have: one line naming the splits it has, before any output."""
    if split not in m.splits:
        has = f"it has {', '.join(m.splits)}{closest(split, m.splits)}" if m.splits else "it has no splits"
        raise PrepError(f"--split {split}: {directory} has no split of that name; {has}")


_BOUNDARIES = ("eos", "bos", "both", "none")  # recipe tokenizer.boundary values (pipeline.recipe)


def _print_docs(directory: Path, m, split: str, docs: int, tokenizer: str | None, max_chars: int) -> None:
    import numpy as np

    from pipeline.doc_display import shown_text
    from pipeline.manifest import read_idx
    from pipeline.recipe import TokenizerConfig
    from pipeline.tokenizers import load_tokenizer

    t = m.tokenizer
    path = t["name"] if tokenizer is None else tokenizer
    tiktoken_name = path.startswith("tiktoken:")  # no tokenizer.json: backend hf refused it, so no such dataset decoded
    # decoding needs no boundary ids: the recorded boundary only keeps the tokenizer cache's key (a proven
    # spec loads in ~0.05 s, not ~0.3 s). A null one was a KeyError traceback from load_tokenizer; an
    # absent one was taken for eos, which a tokenizer without an EOS token refused
    boundary = t.get("boundary") if t.get("boundary") in _BOUNDARIES else "none"
    try:
        spec = load_tokenizer(TokenizerConfig(path=path, boundary=boundary,
                                              backend="tiktoken" if tiktoken_name else "hf"))
    except PrepError as e:
        if tokenizer is not None:  # its errors name the recipe key tokenizer.path: this path came from --tokenizer
            raise PrepError("--tokenizer " + str(e).removeprefix("tokenizer.path: ")) from None
        if tiktoken_name:
            raise
        raise PrepError(f"{e}\nThe dataset names its tokenizer as it was given to `prep tokenize`; from here, "
                        "pass its tokenizer.json with --tokenizer PATH") from None
    if spec.sha256 != t.get("sha256"):
        raise PrepError(f"{path}: this tokenizer's sha256 {spec.sha256[:12]} differs from the "
                        f"{str(t.get('sha256'))[:12]} that made the dataset")
    if tiktoken_name:
        from pipeline.tokenizers import _tiktoken_encoding

        enc = _tiktoken_encoding(spec.definition)
        decode = enc.decode
    else:
        from tokenizers import Tokenizer

        decode = functools.partial(Tokenizer.from_str(spec.definition).decode, skip_special_tokens=False)
    shown = 0
    for shard in m.splits[split].shards:
        if shard.num_tokens == 0:  # numpy cannot map an empty file
            continue
        _, lengths, pointers = read_idx(directory / split / f"{shard.name}.idx")
        data = np.memmap(directory / split / f"{shard.name}.bin", dtype=m.np_dtype, mode="r")
        for n, p in zip(lengths[: docs - shown], pointers[: docs - shown]):
            ids = data[int(p) // m.np_dtype.itemsize:][: int(n)].tolist()
            out.print(f"--- {split}/{shard.name} doc {shown}: {len(ids)} tokens", markup=False)
            out.print(shown_text(decode(ids), max_chars), markup=False, highlight=False)
            shown += 1
        if shown >= docs:
            break
    if shown < docs:  # an -n past the split's end printed what there was and nothing else (an empty split: nothing)
        out.print(f"--- {split} holds {shown:,} document(s): all of them are above" if shown else
                  f"--- {split} holds no documents", markup=False)


def main() -> None:
    """The typer CLI alone, for a caller in Python (`python -m pipeline.cli` runs pipeline.launch.main)."""
    app()
