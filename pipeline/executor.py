"""Work units -> process pool -> part shards -> journal -> final shards -> manifest last.

The parent plans units, keeps at most 2 x workers of them in flight, journals each finished unit,
and draws progress; it never touches tokens, except that a parent thread (assemble.PartStream)
copies finished parts into final shards as units complete in order. Output bytes depend only on
the recipe and the input: units are numbered in dataset order, parts are named after their unit,
and shards are placed in unit order, so 1 or 8 workers, or a run resumed after `kill -9`, give the
same files.

Faults: a worker that dies fails the run at once, naming the worker, how it died and its unit; the
others are killed. Workers ignore SIGINT (the parent stops them) and kill themselves when the parent
dies, so a `kill -9` leaves no orphan writing parts under the next run. SIGTERM acts like Ctrl-C
(pipeline.interrupts).
A full disk becomes a PrepError naming the file; no unit is journaled with a partial part.
Each final shard is journaled once placed and its parts are then deleted; a resumed run keeps the
journaled shards whose files are whole. Journaled units whose parts went missing (and are in no kept
shard) are redone; a complete dataset that no longer matches its
manifest is reported, not passed off as done. Tests: tests/faults/ (PREP_FAULT, pipeline/faults.py).

This module is the orchestration (tokenize); running the units, in-process or on the pool, is
pipeline.run_units; the checks of what an earlier run left in the output, pipeline.resume_checks;
an empty result's error and hints, pipeline.empty_run.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import faults, input_changes, trace
from pipeline.assemble import PartStream, usable_placed
from pipeline.empty_run import _empty_hint, allow_empty_default, refuse_empty_run
from pipeline.errors import RESUME_FIX, PrepError
from pipeline.finalize import finalize, skipped_by_reason
from pipeline.interrupts import sigterm_as_interrupt
from pipeline.journal import RunState
from pipeline.manifest import MANIFEST_NAME, Manifest, dtype_for_vocab
from pipeline.outdir import refuse_deleting_what_the_run_reads, refuse_foreign
from pipeline.pool import warm_forkserver
from pipeline.progress import RunProgress
from pipeline.readers import plan_units
from pipeline.recipe import Recipe
from pipeline.resume_checks import (
    _disk_full_is_user_error,
    _drop_lost_units,
    _inputs_newer_than,
    _prepare_output,
    _refuse_damaged,
    failed_units_note,
)
from pipeline.run_units import _InOrder, _run_inline, _run_pool, _spec_file, _spooler
from pipeline.source_formats import is_url, local_path
from pipeline.tokenizers import load_tokenizer
from pipeline.worker import WorkerContext, rejects_name

__all__ = ["tokenize", "TokenizeResult", "failed_units_note"]


@dataclass
class TokenizeResult:
    manifest: Manifest
    out: Path
    seconds: float = 0.0
    input_bytes: int = 0
    tokens_run: int = 0  # tokens the units run by this call made (a resumed run's share, not the dataset's)
    units_run: int = 0
    units_total: int = 0
    already_complete: bool = False
    notes: list[str] = field(default_factory=list)


@contextmanager
def _planning_status(show: bool, console) -> Iterator[None]:
    """A status line while the plan runs: its whole-file scans (a big CSV's quote parity, a JSON
    array's structure) take seconds per GB before any worker starts. Drawn on a terminal only."""
    if not show:
        yield
        return
    from rich.console import Console

    from pipeline.readers.base import scan_progress
    console = console or Console(stderr=True)
    with console.status("planning work units") as status:
        def scanned(path: str, done: int, size: int) -> None:
            unit, scale = ("GB", 1e9) if size >= 1e9 else ("MB", 1e6)
            status.update(f"planning work units: scanning {Path(path).name} for record boundaries, "
                          f"{done / scale:.1f} of {size / scale:.1f} {unit}")
        with scan_progress(scanned):
            yield


# -- parent side ----------------------------------------------------------------------------------
def tokenize(recipe: Recipe, output: str | None = None, num_workers: int | None = None, overwrite: bool = False,
             show_progress: bool = True, console=None,
             check_inputs: Callable[[list[str]], None] | None = None,
             publish: Callable[[Manifest], str] | None = None, allow_empty: bool | None = None) -> TokenizeResult:
    """`allow_empty`: False refuses a run that produced no document before its manifest is written
    (pipeline.empty_run; the CLI's default), True writes the empty dataset with a note; None: the
    caller's choice in empty_run.allow_empty_default (True unless the CLI set it).
    `check_inputs`, when given, is called with the files the run reads and its tokenizer once they are
    planned, before anything is written; `publish` with the complete dataset's manifest while the run
    still holds the output's lock, its line added to the notes (a URL output's checks and upload:
    pipeline.remote)."""
    t0 = time.perf_counter()
    trace.event("tokenize")
    target = str(output if output is not None else recipe.output.dir)
    if not target.strip():  # `-o "$OUT"` with OUT unset was Path("") == ".": --overwrite wiped the cwd
        raise PrepError("output.dir: empty; name the output directory (--output DIR or output.dir in the recipe)")
    if allow_empty is None:
        allow_empty = allow_empty_default.get()
    if is_url(target):  # stage locally, upload shards, manifest last
        from pipeline.remote import tokenize_to_url
        token = allow_empty_default.set(allow_empty)  # for its inner tokenize() of the staging dir
        try:
            return tokenize_to_url(recipe, target, num_workers=num_workers,
                                   overwrite=overwrite, show_progress=show_progress, console=console)
        finally:
            allow_empty_default.reset(token)
    # file:///x is /x (was a directory named "file:"); ~ is the home directory as in source.path (a
    # directory named "~" was made in the working directory)
    out = Path(local_path(target)).expanduser()
    if (num_workers or recipe.resolved_num_workers()) > 1:
        warm_forkserver(recipe)
    spec = load_tokenizer(recipe.tokenizer)
    trace.event("tokenizer_loaded", backend=spec.backend)
    with _planning_status(show_progress, console):
        units = plan_units(recipe, num_workers, inputs := {})
    trace.event("units_planned", units=len(units))
    if not units:
        raise PrepError("source.path: matched no input")
    content = recipe.content_dict()
    workers = max(1, min(num_workers or recipe.resolved_num_workers(), len(units)))
    if check_inputs is not None:
        check_inputs([*inputs, recipe.tokenizer.path])
    state = RunState(out)
    refuse_foreign(out, state, overwrite)
    if overwrite:
        refuse_deleting_what_the_run_reads(out, [*inputs, recipe.tokenizer.path])
    if out.exists() and not out.is_dir():
        raise PrepError(f"output.dir: {out} is a file, not a directory; choose another --output")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a read-only or missing parent, a file on the way, no permission
        if out.is_symlink():  # mkdir said only "File exists" of a link whose target is missing
            raise PrepError(f"output.dir: {out} is a symbolic link to {os.readlink(out)}, which does not exist; "
                            "create that directory, or choose another --output") from None
        raise PrepError(f"output.dir: cannot create {out} ({e.strerror}); choose another --output") from None
    with _disk_full_is_user_error(out), sigterm_as_interrupt(), state.lock():
        existing = _prepare_output(out, state, content, overwrite, spec.sha256)
        if existing is not None:
            _refuse_damaged(out, existing)
            published = [publish(existing)] if publish is not None else []
            return TokenizeResult(existing, out, units_total=len(units), already_complete=True,
                                  notes=_inputs_newer_than(out / MANIFEST_NAME, inputs) + failed_units_note(existing)
                                  + published)
        resumable = input_changes.resume_content(content)  # a run stopped may resume with these changed
        fingerprint, plan = input_changes.describe(units, inputs, resumable,
                                                   {"name": recipe.tokenizer.path, "sha256": spec.sha256})
        results = state.start(fingerprint, plan,
                              replan=lambda old, done: input_changes.replanned(old, plan, units, done, out, content))
        input_changes.accept(state, plan, units, results)
        if recipe.on_bad_record == "error":
            input_changes.redo_under_error(state, results)
        dtype = dtype_for_vocab(spec.vocab_size)
        splits = ("train", "val") if recipe.output.val_fraction > 0 else ("train",)
        streamed = recipe.dedup != "exact"  # exact dedup must see every unit before placing a shard
        placed = {s: usable_placed(out / s, state.placed.get(s, []), dtype) for s in splits} if streamed else {}
        _drop_lost_units(results, state, dtype, placed)
        spec_path = _spec_file(spec, state) if workers > 1 else None
        faults.point("start")
        todo = [u for u in units if u.index not in results]
        remote = {path: stamp for path, stamp in inputs.items() if is_url(path)}
        total_bytes = sum(u.size for u in units)
        done_bytes = sum(u.size for u in units if u.index in results)
        ctx = WorkerContext(recipe, spec, state.parts, state.rejects, remote_inputs=remote)
        spooler = stream = join_pool = None
        # from the spooler's start on, inside the try: a Ctrl-C (or an error making the PartStream)
        # between its start and the try left its threads waiting for a window slot forever, and the
        # interpreter waited for them at exit
        try:
            _expect_urls(remote)  # from here, each open of a URL checks it is the object planned
            spooler = _spooler(units, todo, state, recipe, workers)
            if spooler is not None:
                todo = [dataclasses.replace(u, spool=spooler.window(u)) if u.is_spooled else u for u in todo]
            # shards are placed while units run, in order, journaled, and their parts then deleted
            stream = PartStream(state.parts, out, splits, dtype, recipe.output.shard_tokens, placed=placed,
                                journal=state.record_placed) if streamed else None
            feed = _InOrder(stream, results)

            def after(index: int) -> None:
                if spooler is not None:
                    spooler.done(index)
                feed.advance()
            feed.advance()  # units journaled by an interrupted run
            with RunProgress(total_bytes, done_bytes, enabled=show_progress, console=console,
                             units_total=len(units), units_done=len(units) - len(todo)) as progress:
                if workers == 1:
                    _run_inline(todo, ctx, state, results, progress, after)
                else:
                    join_pool = _run_pool(todo, ctx, state, results, progress, workers, spec_path, after)
            trace.event("units_done")
            placed = stream.finish() if stream is not None else None
            trace.event("placed")
        except BaseException:
            if stream is not None:
                stream.abort()
            raise
        finally:
            if spooler is not None:
                spooler.close()
            _expect_urls({})
            if join_pool is not None:
                join_pool()
        failed = [r for r in results.values() if r["status"] != "ok"]
        if failed and len(failed) == len(units):
            # under skip each damaged file fails only its units; with no unit left there is no dataset,
            # and exit 0 with an empty one would hide it (nothing was placed, so --overwrite loses nothing)
            first = min(failed, key=lambda r: r["unit"])
            # the run state stays: like a stop, so that a replaced file's new plan is taken (its error
            # says "re-run to resume"; a damaged compressed array or single unit plans otherwise when whole)
            input_changes.note_failed(state, failed)
            error = first["error"]  # a damaged file's ends with its own fix ("replace the file and re-run ...")
            fix = "" if error.endswith(RESUME_FIX) else ". Fix the input, then re-run"
            raise PrepError(f"every unit failed ({len(failed)} unit{'s' * (len(failed) > 1)}), so there is nothing to write; the "
                            f"first: {error}{fix} (or re-run with --overwrite to start over)")
        if not allow_empty:
            try:
                skipped = skipped_by_reason(r for r in results.values() if r["status"] == "ok")
                refuse_empty_run(out, results, skipped, state.rejects, rejects_name,
                                 _empty_hint(skipped, recipe, spec.backend))
            except PrepError:
                if failed:
                    input_changes.note_failed(state, failed)  # as above: a replaced file's new plan is taken
                raise
        manifest = finalize(out, state, results, len(units), recipe_dict=content, tokenizer=spec.manifest_dict(),
                            dtype=dtype, vocab_size=spec.vocab_size, shard_tokens=recipe.output.shard_tokens,
                            splits=splits, placed=placed)
        faults.point("manifest-after")
        trace.event("manifest")
        state.cleanup()
        # a second run on this output (--overwrite) waits for the lock: it would replace the files sent
        published = [publish(manifest)] if publish is not None else []
    left_out = len(manifest.failed_units)
    notes = [f"{left_out} unit(s) or file(s) failed and were left out; see failed_units in the manifest"
             ] if left_out else []
    if not any(s.num_docs for s in manifest.splits.values()):
        notes.append("the dataset holds no documents: the input had none"
                     + (", or every one was skipped (see skipped)" if manifest.skipped else "")
                     + _empty_hint(manifest.skipped, recipe, spec.backend))
    notes += _input_notices(results)
    if spec.backend_reason:
        notes.append(spec.backend_reason)
    notes += published
    ran = {u.index for u in todo}
    tokens_run = sum(sum(r["num_tokens"].values()) for i, r in results.items() if i in ran and r["status"] == "ok")
    return TokenizeResult(manifest, out, time.perf_counter() - t0, total_bytes - done_bytes, tokens_run,
                          len(todo), len(units), notes=notes)


def _expect_urls(remote: dict) -> None:
    """url_reads.expecting(remote), importing url_reads only for a run that reads URLs (or after one):
    its import imports fsspec (url_reads sets its http(s) timeout), ~50 ms of CPU that a local run's
    start paid for nothing (`prep tokenize` of 10 documents: 0.51 s, not 0.46 s)."""
    if remote or "pipeline.readers.url_reads" in sys.modules:
        from pipeline.readers import url_reads
        url_reads.expecting(remote)


def _input_notices(results: dict) -> list[str]:
    """The units' notices about their input (readers.base.BadRecords.notice), one note per kind: the
    first unit's (plan order), with how many units more had one. Journaled with each unit's result,
    so a resumed run says the same."""
    by_kind: dict[str, list[str]] = {}
    for i in sorted(results):
        for kind, message in results[i].get("notices", {}).items():
            by_kind.setdefault(kind, []).append(message)
    return [messages[0] + (f" ({len(messages) - 1} more unit(s) had one)" if len(messages) > 1 else "")
            for messages in by_kind.values()]


