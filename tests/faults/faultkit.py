"""Helpers for the fault suite: run `prep tokenize` in a subprocess with faults injected (PREP_FAULT,
see pipeline/faults.py), compare output trees byte for byte, prove no process of a run outlives it.
(Named faultkit, not helpers: tests/loaders has a helpers module on the same sys.path.)"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "recipes" / "demo"
CORPUS_LINES = 720        # ~450 kB of the demo corpus: 7 units of 64 KiB
TAG = "PREP_FAULT_TEST_TAG"  # env marker that lets a test find every process of one run


def write_recipe(directory: Path, corpus: Path, **extra) -> Path:
    """Recipe: 7 units of 64 KiB; train shards of single parts (hard-linked), val coalesced (copied)."""
    recipe = {
        "name": "faults",
        "source": {"path": str(corpus), "format": "jsonl", "text_field": "text"},
        "tokenizer": {"path": str(DEMO / "tokenizer.json"), "boundary": "eos"},
        "output": {"dir": str(directory / "unused"), "shard_tokens": 15000, "val_fraction": 0.05, "seed": 7},
        "num_workers": 1,
        "unit_bytes": 65536,
        "batch_docs": 16,
        **extra,
    }
    path = directory / "recipe.yaml"
    path.write_text(json.dumps(recipe))  # JSON is YAML
    return path


def snapshot(out: Path) -> dict[str, str]:
    """{relative path: sha256} of every file of a dataset (run state under .prep/ excluded)."""
    files = {}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out)
        if p.is_file() and rel.parts[0] != ".prep":
            files[str(rel)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return files


def run_prep(recipe: Path, out: Path, *, workers: int = 1, fault: str | None = None, timeout: float = 60,
             tag: str | None = None, wait: bool = True, **popen):
    """`prep tokenize` in a subprocess; returns CompletedProcess (wait=True) or the Popen."""
    env = {k: v for k, v in os.environ.items() if k != "PREP_FAULT"}
    if fault:
        env["PREP_FAULT"] = fault
    env[TAG] = tag or uuid.uuid4().hex
    cmd = [sys.executable, "-m", "pipeline.cli", "tokenize", "--recipe", str(recipe), "--output", str(out),
           "--num-workers", str(workers), "--no-progress"]
    if not wait:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def processes_tagged(tag: str) -> list[psutil.Process]:
    """Live processes started by the run carrying `tag` (parent, forkserver, workers, resource tracker)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(TAG) == tag and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def assert_no_survivors(tag: str, within: float = 5.0) -> float:
    """Every process of the run is gone within `within` seconds (else kill them and fail); returns the wait."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        left = processes_tagged(tag)
        if not left:
            return time.monotonic() - t0
        time.sleep(0.05)
    for p in left:  # ours (they carry this test's tag): don't leak them into the next test
        p.kill()
    raise AssertionError(f"processes outlived their run by {within} s: "
                         f"{[(p.pid, ' '.join(p.cmdline())[:80]) for p in left]}")


def assert_complete(out: Path, reference: dict[str, str]) -> None:
    """`out` holds exactly the reference dataset, and the run state is cleaned up."""
    assert snapshot(out) == reference
    assert sorted(p.name for p in (out / ".prep").iterdir()) == ["lock"]


def _journal(out: Path) -> list[dict]:
    try:  # (a run that just finished deletes it: no exists() check, it would race)
        text = (out / ".prep" / "journal.jsonl").read_text()
    except FileNotFoundError:
        return []
    whole = text.split("\n")[:-1]  # a torn last line (no newline yet) is not an entry
    return [json.loads(line) for line in whole]


def journal_lines(out: Path) -> list[dict]:
    """The journal's finished-unit entries (not its placed-shard lines)."""
    return [e for e in _journal(out) if "placed" not in e]


def placed_lines(out: Path) -> list[dict]:
    """The journal's placed-shard entries ({"placed": split, "shard": k, ..., "parts": [...]})."""
    return [e for e in _journal(out) if "placed" in e]


def assert_journal_parts_whole(out: Path) -> int:
    """Every unit the journal calls finished has whole part files (sizes, index header, and sha256
    where recorded), except parts of shards journaled as placed (deleted then); every placed
    shard's .bin is whole. Returns the number of journaled units."""
    from pipeline.manifest import idx_bytes, read_idx_header

    consumed = set()
    for e in placed_lines(out):
        assert (out / e["placed"] / f"{e['name']}.bin").stat().st_size == 2 * e["num_tokens"], e
        consumed |= {(e["placed"], name) for name in e["parts"]}
    entries = journal_lines(out)
    for e in entries:
        for split, parts in e["shards"].items():
            for part in parts:
                if (split, part["name"]) in consumed:  # deleted after its shard was journaled (or about to be)
                    continue
                base = out / ".prep" / "parts" / split / part["name"]
                data = base.with_name(part["name"] + ".bin").read_bytes()
                assert len(data) == 2 * part["num_tokens"], part
                # workers do not hash parts (the final shards are hashed once, when placed); a
                # recorded digest must still match
                assert part["sha256"] in ("", hashlib.sha256(data).hexdigest()), part
                idx = base.with_name(part["name"] + ".idx")
                assert read_idx_header(idx).num_seqs == part["num_docs"]
                assert idx.stat().st_size == idx_bytes(part["num_docs"])
    return len(entries)


def stopped(procs) -> list[psutil.Process]:
    """Those of `procs` that are SIGSTOPped now (vanished ones are skipped)."""
    out = []
    for p in procs:
        try:
            if p.status() == psutil.STATUS_STOPPED:
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def resume(procs) -> None:
    """SIGCONT each of `procs` that still exists."""
    for p in procs:
        try:
            p.resume()
        except psutil.NoSuchProcess:
            continue
