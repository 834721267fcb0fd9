"""Work units -> process pool -> part shards -> journal -> finalize (manifest last).

The parent plans units, keeps at most 2 x workers of them in flight, journals each finished unit,
and draws progress; it never touches tokens. Output bytes depend only on the recipe and the input:
units are numbered in dataset order, parts are named after their unit, and finalize walks units in
order, so 1 or 8 workers, or a run resumed after `kill -9`, give the same files.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import shutil
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.errors import PrepError
from pipeline.finalize import finalize
from pipeline.journal import RunState
from pipeline.manifest import MANIFEST_NAME, Manifest, dtype_for_vocab, read_manifest
from pipeline.progress import RunProgress
from pipeline.readers import WorkUnit, plan_units
from pipeline.recipe import Recipe
from pipeline.tokenizers import load_tokenizer
from pipeline.worker import WorkerContext, process_unit

__all__ = ["tokenize", "TokenizeResult"]


@dataclass
class TokenizeResult:
    manifest: Manifest
    out: Path
    seconds: float = 0.0
    input_bytes: int = 0
    units_run: int = 0
    units_total: int = 0
    already_complete: bool = False
    notes: list[str] = field(default_factory=list)


def _fingerprint(recipe_dict: dict, tokenizer_sha: str, units: list[WorkUnit]) -> str:
    plan = [(u.path, u.start, u.end) for u in units]  # not sizes: a replaced damaged file may resume
    blob = json.dumps([recipe_dict, tokenizer_sha, plan], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def _prepare_output(out: Path, state: RunState, content: dict, overwrite: bool) -> Manifest | None:
    """Returns the existing manifest when the same dataset is already complete."""
    if (out / MANIFEST_NAME).exists():
        if overwrite:
            _wipe(out)
            return None
        existing = read_manifest(out)
        if existing.recipe != content:
            raise PrepError(f"{out}: already holds a dataset made from a different recipe; choose another "
                            "--output, or pass --overwrite to replace it")
        state.cleanup()
        return existing
    if overwrite:
        _wipe(out)
    return None


def _refuse_foreign(out: Path, state: RunState, overwrite: bool) -> None:
    """Never write into a non-empty directory that no prep run created (before the lock makes .prep)."""
    if (not overwrite and out.is_dir() and not state.dir.exists() and not (out / MANIFEST_NAME).exists()
            and any(out.iterdir())):
        raise PrepError(f"{out}: exists, is not empty and is not a prep output; choose another --output, "
                        "or pass --overwrite to replace its contents")


def _wipe(out: Path) -> None:
    (out / MANIFEST_NAME).unlink(missing_ok=True)  # first: the dataset stops being "complete"
    for child in out.iterdir():
        if child.name == ".prep":
            continue
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    RunState(out).reset()


# -- worker side ----------------------------------------------------------------------------------
_CTX: WorkerContext | None = None
_QUEUE = None


def _init_worker(ctx: WorkerContext, queue) -> None:
    global _CTX, _QUEUE
    _CTX, _QUEUE = ctx, queue
    ctx.get_encoder()  # load the tokenizer once per worker, before the first unit


def _run_unit(unit: WorkUnit) -> dict:
    def report(nbytes: int, docs: int, tokens: int) -> None:
        _QUEUE.put((nbytes, docs, tokens))
    return _unit_or_failure(unit, _CTX, report)


def _unit_or_failure(unit: WorkUnit, ctx: WorkerContext, report) -> dict:
    try:
        return process_unit(unit, ctx, report)
    except PrepError as e:
        if ctx.recipe.on_bad_record == "error":
            raise
        # under `skip`, a damaged file fails its unit only; the manifest lists it
        return {"unit": unit.index, "status": "failed", "path": unit.path, "error": str(e)}


# -- parent side ----------------------------------------------------------------------------------
def tokenize(recipe: Recipe, output: str | None = None, num_workers: int | None = None, overwrite: bool = False,
             show_progress: bool = True, console=None) -> TokenizeResult:
    t0 = time.perf_counter()
    out = Path(output or recipe.output.dir)
    spec = load_tokenizer(recipe.tokenizer)
    units = plan_units(recipe)
    if not units:
        raise PrepError("source.path: matched no input")
    content = recipe.content_dict()
    workers = max(1, min(num_workers or recipe.resolved_num_workers(), len(units)))
    state = RunState(out)
    _refuse_foreign(out, state, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    with state.lock():
        existing = _prepare_output(out, state, content, overwrite)
        if existing is not None:
            return TokenizeResult(existing, out, units_total=len(units), already_complete=True)
        plan_info = {"units": len(units), "files": sorted({u.path for u in units})}
        results = state.start(_fingerprint(content, spec.sha256, units), plan_info)
        todo = [u for u in units if u.index not in results]
        total_bytes = sum(u.size for u in units)
        done_bytes = sum(u.size for u in units if u.index in results)
        ctx = WorkerContext(recipe, spec, state.parts, state.rejects)
        with RunProgress(total_bytes, done_bytes, enabled=show_progress, console=console) as progress:
            if workers == 1:
                _run_inline(todo, ctx, state, results, progress)
            else:
                _run_pool(todo, ctx, state, results, progress, workers)
        failed = [r for r in results.values() if r["status"] != "ok"]
        manifest = finalize(out, state, results, len(units), recipe_dict=content, tokenizer=spec.manifest_dict(),
                            dtype=dtype_for_vocab(spec.vocab_size), vocab_size=spec.vocab_size,
                            shard_tokens=recipe.output.shard_tokens,
                            splits=("train", "val") if recipe.output.val_fraction > 0 else ("train",))
        state.cleanup()
    notes = [f"{len(failed)} unit(s) failed and were left out; see failed_units in the manifest"] if failed else []
    if spec.backend_reason:
        notes.append(spec.backend_reason)
    return TokenizeResult(manifest, out, time.perf_counter() - t0, total_bytes - done_bytes, len(todo),
                          len(units), notes=notes)


def _check_bad_budget(recipe: Recipe, results: dict[int, dict]) -> None:
    if recipe.max_bad_records is None:
        return
    n = sum(r.get("num_rejects", 0) for r in results.values())
    if n > recipe.max_bad_records:
        raise PrepError(f"max_bad_records: {n} records rejected so far, more than the limit "
                        f"{recipe.max_bad_records}; see DIR/.prep/rejects/, fix the input or raise the limit "
                        "(finished units are kept; re-run to resume)")


def _accept(result: dict, state: RunState, results: dict, progress: RunProgress, recipe: Recipe) -> None:
    state.record(result)
    results[result["unit"]] = result
    progress.unit_done()
    _check_bad_budget(recipe, results)


def _run_inline(todo, ctx, state, results, progress) -> None:
    for unit in todo:
        _accept(_unit_or_failure(unit, ctx, progress.advance), state, results, progress, ctx.recipe)


def _run_pool(todo, ctx, state, results, progress, workers: int) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one process per core; no rayon threads
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    mp_ctx = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
    queue = mp_ctx.Queue()
    pool = ProcessPoolExecutor(workers, mp_context=mp_ctx, initializer=_init_worker, initargs=(ctx, queue))
    pending: dict = {}
    queue_iter = iter(todo)

    def submit_next() -> None:
        unit = next(queue_iter, None)
        if unit is not None:
            pending[pool.submit(_run_unit, unit)] = unit

    def drain() -> None:
        while True:
            try:
                progress.advance(*queue.get_nowait())
            except Exception:  # queue.Empty
                return

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
                    raise PrepError(f"a worker process died (killed, or out of memory) while tokenizing {unit.path} "
                                    f"[bytes {unit.start}..{unit.end}]; finished units are kept: re-run the same "
                                    "command to resume") from None
                _accept(result, state, results, progress, ctx.recipe)
                submit_next()
        drain()
    except BaseException:
        for fut in pending:
            fut.cancel()
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.kill()  # don't wait for units in flight: they are redone on resume
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
