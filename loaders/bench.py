"""The measurements behind `prep bench-loader`: one row per (mode, num_workers).

    rows = run_loader_bench("out/owt", modes=("windows", "packed"), num_workers=(0, 2))
    print(format_table(rows))

Each row: mode, workers, batches_per_s, tokens_per_s (input positions, padding included),
first_batch_s (construct + first batch, derived arrays already cached), cold_first_batch_s (the
same with an empty cache: includes building the document index / pack plan / epoch order; measured
for each row, with its own worker count), fill (packed) or padding_fraction (grouped), and data_wait_share:
the share of wall time spent waiting for the next batch while a device step of `step_ms` is
simulated (None when step_ms is 0). On CUDA the step is a spin kernel followed by a synchronize
(the usual per-step `loss.item()`); on CPU it is a sleep, during which workers keep producing.
The arrays derived for the bench go to a fresh temporary directory per row (under cache_dir when
given), so it neither depends on nor pollutes DIR/.cache, and every row's cold start is cold.
Loader options meant for some modes only (pad_multiple, packing, ...) go to the modes they act in.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence

import torch

from pipeline.errors import PrepError

from .cache import check_cache_dir
from .loader import MemmapLoader, TooSmallForABatch
from .options import applies, options_for_mode

__all__ = ["run_loader_bench", "format_table", "private_memory_bytes", "memory_breakdown"]


def memory_breakdown() -> dict[str, int]:
    """This process's memory from /proc/self/smaps_rollup, bytes: uss (Private_Clean +
    Private_Dirty), anon (anonymous pages: heap, numpy arrays) and file_private (Private_Clean: file
    pages mapped by this process alone, e.g. a memory-mapped cache just read; reclaimable)."""
    fields = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return {"uss": fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0),
            "anon": fields.get("Anonymous", 0), "file_private": fields.get("Private_Clean", 0)}


def private_memory_bytes() -> int:
    """This process's private memory (USS): Private_Clean + Private_Dirty."""
    try:
        return memory_breakdown()["uss"]
    except OSError:
        import psutil
        return int(psutil.Process().memory_full_info().uss)


def _simulate_step(step_ms: float, device: torch.device) -> None:
    if device.type == "cuda":
        # ~1.5e6 cycles per ms at the H100's ~1.5-2 GHz; only the order of magnitude matters here
        torch.cuda._sleep(int(step_ms * 1.5e6))
        torch.cuda.synchronize(device)
    else:
        time.sleep(step_ms / 1000)


# loader arguments -> the `prep bench-loader` options they come from: the loader's errors named
# device='gpu' and "lower seq_len" where the user had typed --device and --seq-len
_OPTION_OF = {"device": "--device", "seq_len": "--seq-len", "batch_size": "--batch-size"}
# `device=` (a bare "device" is the English word: "not a torch device"), `seq_len=` or a bare `seq_len`;
# not inside a path or another name (/data/seq_len/, max_seq_len)
_ARGUMENT = re.compile(r"(?<![\w/.-])(?:(device)(=)|(seq_len|batch_size)(=|\b))")


def _in_option_terms(message: str) -> str:
    """The loader's one-line error with its argument names as bench-loader's options."""
    def option(m: re.Match) -> str:
        name, equals = (m[1], m[2]) if m[1] else (m[3], m[4])
        return _OPTION_OF[name] + (" " if equals else "")
    return _ARGUMENT.sub(option, message)


def _first_batch(path, mode: str, workers: int, cache_dir, **kw) -> tuple[MemmapLoader, object, float]:
    t0 = time.perf_counter()
    try:
        loader = MemmapLoader(path, mode=mode, num_workers=workers, cache_dir=cache_dir, **kw)
    except PrepError as e:
        raise PrepError(_in_option_terms(str(e))) from None
    it = iter(loader)
    try:
        next(it)
    except TooSmallForABatch as e:  # the loader's advice names drop_last, which this command has not
        loader.close()
        raise PrepError(f"--mode {mode}: the split has {e.units} {e.unit}, fewer than one batch of {e.step}; "
                        "lower --batch-size or --seq-len, or bench a larger dataset") from None
    if loader.device.type == "cuda":
        torch.cuda.synchronize(loader.device)
    return loader, it, time.perf_counter() - t0


def run_loader_bench(path: str | os.PathLike, *, modes: Sequence[str] = ("windows", "packed", "grouped"),
                     num_workers: Sequence[int] = (0, 2), split: str = "train", batch_size: int = 8,
                     seq_len: int = 1024, num_batches: int = 200, step_ms: float = 0.0, device: str = "cpu",
                     seed: int = 0, cache_dir: str | os.PathLike | None = None, **loader_kwargs) -> list[dict]:
    """Time each mode with each worker count on the dataset at `path`; returns one dict per row."""
    # --step-ms inf passed the CLI's min=0 and failed as an OverflowError traceback from time.sleep
    if not math.isfinite(step_ms) or step_ms < 0:
        raise PrepError(f"step_ms must be a finite number of milliseconds >= 0 (0: no simulated step), got {step_ms!r}")
    kw = dict(split=split, batch_size=batch_size, seq_len=seq_len, seed=seed, device=device)
    packing = loader_kwargs.get("packing", "bfd")
    # an option that acts in none of the benched modes goes to every one, so the loader refuses it by name
    acts_nowhere = {k: v for k, v in loader_kwargs.items() if not any(applies(k, m, packing) for m in modes)}
    if cache_dir is not None:
        check_cache_dir(cache_dir)  # "" was a FileNotFoundError traceback from makedirs
        os.makedirs(cache_dir, exist_ok=True)
    rows = []
    for mode in modes:
        mode_kw = {**kw, **options_for_mode(loader_kwargs, mode), **acts_nowhere}
        for workers in num_workers:
            # each row's own empty cache: the cold start was measured on a mode's first row only and
            # printed on every row of the mode, as if measured there (with its worker count)
            row_cache = tempfile.mkdtemp(prefix="prep-bench-", dir=cache_dir)
            try:
                rows.append(_bench_row(path, mode, workers, row_cache, mode_kw, num_batches, step_ms))
            finally:
                shutil.rmtree(row_cache, ignore_errors=True)
    return rows


def _bench_row(path, mode: str, workers: int, cache_dir: str, kw: dict, num_batches: int, step_ms: float) -> dict:
    """One row: a cold first batch (empty `cache_dir`), then a warm one and `num_batches` timed batches."""
    loader, it, cold = _first_batch(path, mode, workers, cache_dir, **kw)
    loader.close()
    loader, it, first_s = _first_batch(path, mode, workers, cache_dir, **kw)
    try:
        stats = loader.stats()
        done, positions, waited = 0, 0, 0.0
        t0 = time.perf_counter()
        while done < num_batches:
            t = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:  # epoch end: carry on with the next epoch
                it = iter(loader)
                continue
            waited += time.perf_counter() - t
            positions += batch["input_ids"].numel()
            done += 1
            if step_ms:
                _simulate_step(step_ms, loader.device)
        if loader.device.type == "cuda":
            torch.cuda.synchronize(loader.device)
        elapsed = time.perf_counter() - t0
    finally:
        loader.close()
    return {"mode": mode, "workers": workers, "batches_per_s": done / elapsed,
            "tokens_per_s": positions / elapsed, "first_batch_s": first_s, "cold_first_batch_s": cold,
            "fill": stats.get("fill"), "padding_fraction": stats.get("padding_fraction"),
            "data_wait_share": waited / elapsed if step_ms else None,
            "batch_size": kw["batch_size"], "seq_len": kw["seq_len"], "device": str(loader.device)}


def format_table(rows: list[dict]) -> str:
    """Markdown table of `run_loader_bench` rows."""
    cols = [("mode", "mode", "{}"), ("workers", "workers", "{}"), ("batches_per_s", "batches/s", "{:,.0f}"),
            ("tokens_per_s", "tokens/s", "{:,.0f}"), ("first_batch_s", "first batch (s)", "{:.3f}"),
            ("cold_first_batch_s", "cold first batch (s)", "{:.3f}"), ("fill", "packed fill", "{:.5f}"),
            ("padding_fraction", "grouped padding", "{:.4f}"), ("data_wait_share", "data wait share", "{:.3f}")]
    lines = ["| " + " | ".join(c[1] for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join("-" if r.get(k) is None else fmt.format(r[k]) for k, _, fmt in cols) + " |")
    return "\n".join(lines)
