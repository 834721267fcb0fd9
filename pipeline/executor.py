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
"""

from __future__ import annotations

import dataclasses
import errno
import os
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import faults, input_changes, trace
from pipeline.assemble import PartStream, usable_placed
from pipeline.crc import crc32
from pipeline.empty_run import allow_empty_default, refuse_empty_run
from pipeline.errors import RESUME_FIX, PrepError
from pipeline.finalize import finalize, skipped_by_reason
from pipeline.forkserver_exitcode import DYING_S, forkserver_exit, kill_orphans
from pipeline.interrupts import deferred, sigterm_as_interrupt
from pipeline.journal import RunState
from pipeline.manifest import MANIFEST_NAME, Manifest, dtype_for_vocab, read_manifest
from pipeline.outdir import refuse_deleting_what_the_run_reads, refuse_foreign
from pipeline.pool import pool_context, warm_forkserver
from pipeline.progress import RunProgress
from pipeline.readers import WorkUnit, plan_units
from pipeline.readers.text import whole_file_fix
from pipeline.recipe import Recipe
from pipeline.shards import named, part_intact
from pipeline.source_formats import is_url, local_path
from pipeline.tokenizers import load_tokenizer
from pipeline.worker import WorkerContext, rejects_name
from pipeline.worker_process import init_worker, run_unit, unit_or_failure

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


def _prepare_output(out: Path, state: RunState, content: dict, overwrite: bool, tokenizer_sha: str) -> Manifest | None:
    """Returns the existing manifest when the same dataset is already complete."""
    if (out / MANIFEST_NAME).exists():
        if overwrite:
            _wipe(out, state)
            return None
        existing = read_manifest(out)
        if existing.recipe != content:
            raise PrepError(f"{out}: already holds a dataset made from a different recipe; choose another "
                            "--output, or pass --overwrite to replace it")
        made_with = existing.tokenizer.get("sha256")
        if made_with and made_with != tokenizer_sha:  # the same path, another file: as an unfinished run is
            raise PrepError(f"{out}: already holds a dataset made with another tokenizer at "
                            f"{existing.tokenizer.get('name')} (sha256 {made_with[:12]}... then, {tokenizer_sha[:12]}... "
                            "now); pass --overwrite to rebuild it with this one, or choose another --output")
        state.cleanup()
        return existing
    if overwrite:
        _wipe(out, state)
    return None


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


def _wipe(out: Path, state: RunState) -> None:
    (out / MANIFEST_NAME).unlink(missing_ok=True)  # first: the dataset stops being "complete"
    state.discard([child for child in out.iterdir() if child.name != ".prep"])  # deleted while units run
    state.reset()


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


# the fix for a dataset left empty by one kind of skipped record, by the most common reason
_EMPTY_HINTS = {
    "invalid_utf8": "the input is not UTF-8: convert it (iconv -f CP1252 -t UTF-8 for a Windows export, "
                    "say) or set source.encoding_errors: replace",
    "record_too_large": "raise source.max_record_bytes",
    "too_short": "lower source.min_chars",
    "too_long": "raise source.max_chars",
    "malformed_json": "rejects.jsonl shows how each line begins; is the input JSON Lines?",
    "lone_surrogate": "the text holds lone UTF-16 surrogates (\\ud800-\\udfff escaped in JSON, strings cut inside "
                      "an emoji's pair?, or made by a text_template {n:c}), which no UTF-8 holds; set "
                      "source.encoding_errors: replace to read each as U+FFFD",
}


# peak memory of tokenizing one huge document, per MB of its text: measured on 20-300 MB of English-like
# lines with the gpt2 tokenizer (0.25 tokens a byte), peak RSS less a tiny run's: gigatoken and tiktoken
# ~3.3 (70 MB: 0.22 GB more; 300 MB: 1.0 GB), hf ~117 (its per-token Encoding; 70 MB: 8.2 GB more)
_WHOLE_DOC_MB_PER_MB = {"hf": 120}
_WHOLE_DOC_MB_PER_MB_FAST = 3.5


def _empty_hint(skipped: dict[str, int], recipe: Recipe, backend: str) -> str:
    """'; most were REASON: FIX' when over half of an empty dataset's skipped records were REASON, or ''.
    Too large records where a text source reads each file whole: most likely one big input.txt (as
    nanoGPT's data is) that was meant as many documents, so the fix names doc_separator first."""
    reason = max(skipped, key=skipped.get, default=None)
    if reason not in _EMPTY_HINTS or 2 * skipped[reason] <= sum(skipped.values()):
        return ""
    whole = [i for i, s in enumerate(recipe.sources) if s.resolved_format() == "text" and s.doc_separator is None]
    if reason != "record_too_large" or not whole:
        return f"; most were {reason}: {_EMPTY_HINTS[reason]}"
    where = "source" if len(recipe.sources) == 1 else f"sources[{whole[0]}]"
    per_mb = _WHOLE_DOC_MB_PER_MB.get(backend, _WHOLE_DOC_MB_PER_MB_FAST)
    return (f"; most were {reason}: {whole_file_fix(where)}, which takes about {per_mb} MB of memory per MB of "
            f"text to tokenize (tokenizer backend {backend})")


def _inputs_newer_than(manifest: Path, inputs: dict[str, list]) -> list[str]:
    """A note when local input files were modified after the dataset was finished: "already complete"
    then means "made from their older contents". Only a note: a corpus copied without its mtimes
    looks the same (the manifest keeps no stamps, so that copies of a dataset stay byte-identical)."""
    made = manifest.stat().st_mtime_ns
    newer = sorted(path for path, (_, stamp) in inputs.items() if isinstance(stamp, int) and stamp > made)
    if not newer:
        return []
    more = f" and {len(newer) - 1} more" if len(newer) > 1 else ""
    return [f"{newer[0]}{more} changed after this dataset was made ({manifest} is older): it holds their "
            "contents as they were; --overwrite rebuilds it from them as they are now"]


def failed_units_note(manifest: Manifest) -> list[str]:
    """For an "already complete" dataset with failed_units: a plain re-run redoes nothing (its run state
    was deleted when it was finished), so the line says what does."""
    n = len(manifest.failed_units)
    if not n:
        return []
    return [f"{n} unit(s) or file(s) failed and were left out (see failed_units in the manifest); "
            "after replacing their files, --overwrite redoes them"]


def _refuse_damaged(out: Path, manifest: Manifest) -> None:
    """A complete dataset is only "nothing to do" if its files still match the manifest (sizes and
    headers: a stat and a 34-byte read per file); `manifest` is the one _prepare_output read."""
    from pipeline.verify import check_dataset

    problems = check_dataset(out, quick=True, manifest=manifest)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PrepError(f"{out}: complete for this recipe, but damaged: {problems[0]}{more}; `prep verify {out}` "
                        "lists every problem, --overwrite rebuilds the dataset")


@contextmanager
def _disk_full_is_user_error(out: Path):
    """ENOSPC/EDQUOT anywhere in a run (a worker's part, finalize, the journal, the manifest), and a
    permission error under the output directory -> one line."""
    try:
        yield
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and e.filename and str(out) in str(e.filename):
            raise PrepError(f"{e.filename}: cannot write ({e.strerror}); fix the permissions there or choose "
                            "another --output, then re-run the same command to resume") from None
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        what = "no space left on device" if e.errno == errno.ENOSPC else "disk quota exceeded"
        raise PrepError(f"{e.filename or out}: {what}; finished units are kept and nothing partial was recorded: "
                        "free space there (or choose another --output) and re-run the same command to resume") from None


def _drop_lost_units(results: dict[int, dict], state: RunState, dtype, placed: dict[str, list[dict]]) -> None:
    """Forget journaled units whose part files or rejects file are missing, the wrong size or fail
    their crc32, so they are redone (files deleted by hand, a disk restored from an older backup, a
    power cut: neither is fsynced), unless the part is in one of the `placed` shards kept (its file
    was deleted once that shard was journaled). Reads only the parts not yet placed."""
    consumed = {split: {name for e in entries for name in e["parts"]} for split, entries in placed.items()}

    def intact(result: dict) -> bool:
        return rejects_intact(result) and all(
            part["name"] in consumed.get(split, ()) or part_intact(state.parts / split, part, dtype.itemsize)
            for split, parts in result["shards"].items() for part in parts)

    def rejects_intact(result: dict) -> bool:
        if not result.get("num_rejects"):
            return True
        try:
            data = (state.rejects / rejects_name(result["unit"])).read_bytes()
        except FileNotFoundError:
            return False
        return "rejects_crc32" not in result or crc32(data) == result["rejects_crc32"]

    for index in [i for i, r in results.items() if r.get("status") == "ok" and not intact(r)]:
        del results[index]


def _check_bad_budget(recipe: Recipe, results: dict[int, dict]) -> None:
    if recipe.max_bad_records is None:
        return
    n = sum(r.get("num_rejects", 0) for r in results.values())
    if n > recipe.max_bad_records:
        raise PrepError(f"max_bad_records: {n} records rejected so far, more than the limit "
                        f"{recipe.max_bad_records}; see DIR/.prep/rejects/, fix the input or raise the limit "
                        "(finished units are kept; re-run to resume)")


class _InOrder:
    """Hands finished units to the PartStream in dataset order: unit k goes once 0..k are all done."""

    def __init__(self, stream: PartStream | None, results: dict[int, dict]):
        self.stream, self.results, self.next = stream, results, 0

    def advance(self) -> None:
        if self.stream is None:
            return
        self.stream.check()  # a shard placement that failed (ENOSPC) stops the run now
        while (r := self.results.get(self.next)) is not None:
            if r["status"] == "ok":
                self.stream.feed(r)
            self.next += 1


def _accept(result: dict, state: RunState, results: dict, progress: RunProgress, recipe: Recipe,
            after=lambda index: None) -> None:
    state.record(result)
    trace.event("unit_done", unit=result["unit"])
    results[result["unit"]] = result
    progress.unit_done()
    _check_bad_budget(recipe, results)
    after(result["unit"])


def _run_inline(todo, ctx, state, results, progress, after=lambda index: None) -> None:
    for unit in todo:
        try:
            result = unit_or_failure(unit, ctx, progress.advance)
        except PrepError as e:
            input_changes.note_stop(state, unit, e)
            raise
        _accept(result, state, results, progress, ctx.recipe, after)


def _run_pool(todo, ctx, state: RunState, results, progress, workers: int, spec_path: Path, after
              ) -> Callable[[], None]:
    """Run `todo` on `workers` processes; returns the pool's join, for the caller to call once the
    last shard is placed: the workers exit (sentinels, process joins: 9-18 ms on 2 workers) while
    the parent places it, instead of before."""
    mp_ctx = pool_context()
    with deferred():  # a Ctrl-C here is raised once the pool and its queues exist, and the try below frees them
        queue, starts = mp_ctx.Queue(), mp_ctx.SimpleQueue()  # progress; unit starts (see init_worker)
        pool = ProcessPoolExecutor(workers, mp_context=mp_ctx, initializer=init_worker,
                                   initargs=(dataclasses.replace(ctx, spec=None), str(spec_path), queue, starts,
                                             os.getpid(), workers))
    pending: dict = {}
    running: dict[int, int] = {}  # worker pid -> index of the unit it last started
    queue_iter = iter(todo)

    def submit_next() -> None:
        unit = next(queue_iter, None)
        if unit is not None:
            try:  # the pool starts its workers here, each forked by the forkserver: never cut short
                with deferred():  # (interrupts.deferred)
                    pending[pool.submit(run_unit, unit)] = unit
            except (EOFError, ConnectionError):  # the forkserver is gone: multiprocessing says only "EOF"
                raise PrepError(_FORKSERVER_DIED) from None

    def drain() -> None:
        while not starts.empty():
            pid, index = starts.get()
            running[pid] = index
        while True:
            try:
                msg = queue.get_nowait()
            except Exception:  # queue.Empty
                return
            progress.advance(*msg)

    trace.event("pool_start", workers=workers)
    try:
        try:
            for _ in range(2 * workers):
                submit_next()
            while pending:
                done, _ = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                drain()
                for fut in done:
                    unit = pending.pop(fut)
                    try:
                        result = fut.result()
                    except BrokenProcessPool:
                        pending[fut] = unit  # in flight, for the message
                        raise
                    except PrepError as e:
                        input_changes.note_stop(state, unit, e)
                        raise
                    _accept(result, state, results, progress, ctx.recipe, after)
                    submit_next()
            drain()
        except BrokenProcessPool:
            # a worker died: seen through a unit's future, or through submit() on the broken pool when
            # a unit that finished just before the death comes out of the same wait()
            drain()
            raise PrepError(_worker_died(pool, running, {u.index: u for u in pending.values()})) from None
    except BaseException as error:
        # Ctrl-C, a dead worker, a full disk, a bad-record budget: stop everything now
        for fut in pending:
            fut.cancel()
        procs = list(getattr(pool, "_processes", {}).values())
        for proc in procs:
            proc.kill()  # don't wait for units in flight: they are redone on resume
        kill_orphans(procs)  # those Process.kill() skips when the forkserver is gone
        pool.shutdown(wait=True, cancel_futures=True)
        # freed now, not when the traceback goes: their semaphores are unlinked by finalizers that an
        # error exit (os._exit) would skip, and the resource tracker then warned of 5 leaked semaphores
        # (and the frames the error came through hold them too: a Ctrl-C raised inside queue.get_nowait() kept
        # that queue, whose 3 semaphores the resource tracker warned of)
        _clear_finished_frames(error)
        with deferred():  # a first Ctrl-C inside a finalizer was "ignored" there, with its traceback (see join)
            del pool, queue, starts, procs
        raise
    # shutdown(wait=False) drops the pool's reference to its manager thread (CPython 3.11 and 3.13), so a
    # later shutdown(wait=True) joins nothing: the thread that sends the workers their stop and joins
    # them is kept here, and joined by the caller. Before, a worker still starting (slow imports) could
    # outlive the run.
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False)

    def join() -> None:
        # the pool and its queues are kept until its workers are joined: a worker the pool started late
        # (units that fail in their first bytes can all be done first) may still be unpickling its
        # initargs, which rebuilds their semaphores by name, and freeing them here unlinks those names:
        # it died of FileNotFoundError, its traceback printed under prep's one-line error
        # (and all freed once joined: the manager thread holds the pool's call and result queues, and
        # kept by this closure it left their 5 semaphores to the exit, which os._exit makes in prep,
        # the resource tracker warning of them: so it is reached through `keep` only)
        # Deferred: a Ctrl-C that came while their finalizers ran (unlinking semaphores) was raised inside
        # one, printed as "Exception ignored in: <Finalize object>" with its traceback, left a semaphore
        # to the resource tracker's warning, and was otherwise lost (the run went on to exit 0)
        try:
            if keep[0] is not None:
                keep[0].join()
        finally:
            with deferred():
                del keep[:]
    keep = [manager, pool, queue, starts]
    return join


def _clear_finished_frames(error: BaseException) -> None:
    """Drop the locals of the frames that `error` and the errors it was raised while handling came through
    and that have finished (the one handling it goes on running: its frame is left as it is)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)  # skips frames still running (RuntimeError)
        error = error.__context__


_FORKSERVER_DIED = (
    "the worker processes could not be started: multiprocessing's forkserver, the process that imports "
    "numpy, orjson, tokenizers, gigatoken and prep once and forks every worker from itself, has exited "
    "(its own error, if it printed one, is above). Usually one of those imports fails there: a broken "
    "install, or a module of that name on PYTHONPATH. --num-workers 1 runs the units in this process "
    "instead, where such an import fails with its own message")


def _spooler(units, todo, state: RunState, recipe: Recipe, workers: int):
    """Windows for the ranges of split compressed files (pipeline.spool), or None when there are none."""
    if not any(u.is_spooled for u in todo):
        return None
    from pipeline.spool import Spooler
    return Spooler.for_recipe(recipe, units, {u.index for u in todo}, state.dir / "spool", workers)


def _spec_file(spec, state: RunState) -> Path:
    """The tokenizer for the workers, by file (3.4 MB pickled for GPT-2): what a forkserver child is
    sent must fit the pipe's 64 KiB, or each start blocks the parent until the child has read it
    (after importing the main module), and workers start one after another (~0.08 s each)."""
    path = state.dir / "tokenizer.pickle"
    try:
        with open(path, "wb") as f:
            pickle.dump(spec, f, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError as e:
        raise named(e, path) from None
    return path


def _worker_died(pool, running: dict[int, int], in_flight: dict[int, WorkUnit]) -> str:
    """Which worker died, how, and on which unit (when it said so before dying)."""
    try:
        procs = list((getattr(pool, "_processes", None) or {}).items())
    except RuntimeError:  # resized by the pool's manager thread
        procs = []
    dead = [(pid, p.exitcode) for pid, p in procs if p.exitcode is not None]
    # the pool SIGTERMs the survivors once it sees the death: prefer a death of another kind
    dead.sort(key=lambda d: d[1] == -signal.SIGTERM)
    resume = ("finished units are kept: re-run the same command to resume (if a worker runs out of memory "
              "again, use fewer --num-workers)")
    units = ", ".join(str(i) for i in sorted(in_flight))
    if not dead:
        return f"a worker process died (killed, or out of memory) with units {units} in flight; {resume}"
    pid, code = dead[0]
    if code == 255 and (server := forkserver_exit(wait=DYING_S)) is not None:  # then every worker reads as 255
        return (f"multiprocessing's forkserver, the process that starts prep's workers and reports how they "
                f"end, died ({_exit_how(server)}) with units {units} in flight; {resume}")
    how = _exit_how(code)
    unit = in_flight.get(running.get(pid, -1))
    where = (f" while tokenizing {unit.path} [bytes {unit.start}..{unit.end}] (unit {unit.index})"
             if unit is not None else "")
    return f"worker process {pid} died ({how}){where}; {resume}"


def _exit_how(code: int) -> str:
    """A process's exit code (-N: killed by signal N) in words."""
    if code == -signal.SIGKILL:
        return "killed by SIGKILL: out of memory, or killed by hand"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
