"""Shared fixtures: small corpora and tokenizers the tests make themselves (no network)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DEMO_TOKENIZER = REPO / "recipes" / "demo" / "tokenizer.json"
DEMO_CORPUS = REPO / "recipes" / "demo" / "corpus.jsonl"
GPT2_DIR = REPO.parent / "shared" / "assets" / "gpt2"

# A script that starts the suite in the background without job control (`bash .ci/run &`, nohup) hands
# it SIGINT ignored, and every `prep` a test starts inherits that: the Ctrl-C tests in tests/faults then
# saw runs finish (exit 0) or hang through their interrupt. A handler, unlike SIG_IGN, is reset to the
# default in a child, so this puts the children back to what a terminal gives them.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _session_env(name: str, value: str):
    """Set an environment variable (inherited by the `prep` subprocesses) for the whole session."""
    old = os.environ.get(name)
    os.environ[name] = value
    yield
    if old is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = old


@pytest.fixture(scope="session", autouse=True)
def _private_tokenizer_cache(tmp_path_factory):
    """Proven tokenizers are cached across runs (pipeline/tokenizer_cache.py): keep the suite's in a
    directory of its own, not in ~/.cache."""
    yield from _session_env("PREP_CACHE_DIR", str(tmp_path_factory.mktemp("prep-cache")))


@pytest.fixture(scope="session", autouse=True)
def _private_tmpdir(tmp_path_factory):
    """The fault tests SIGKILL `prep` runs, which leaves their multiprocessing scratch directory
    (pymp-*, the forkserver's socket) behind, as it would any killed Python program: keep those in
    pytest's own temporary tree (it keeps the last three sessions'), not in /tmp (a dozen per run of the suite)."""
    yield from _session_env("TMPDIR", str(tmp_path_factory.mktemp("tmpdir")))


@pytest.fixture
def demo_tokenizer() -> Path:
    return DEMO_TOKENIZER


@pytest.fixture
def gpt2_tokenizer() -> Path:
    path = GPT2_DIR / "tokenizer.json"
    if not path.exists():
        pytest.skip("GPT-2 tokenizer files not present (../shared/assets/gpt2)")
    return path


def write_jsonl(path: Path, texts, field: str = "text") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({field: t}, ensure_ascii=False) + "\n")
    return path


def demo_texts(n: int | None = None) -> list[str]:
    with open(DEMO_CORPUS, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    return texts[:n] if n else texts


def write_recipe(path: Path, *, corpus, tokenizer, out, **overrides) -> Path:
    recipe = {
        "name": "test",
        "source": {"path": str(corpus), "format": "jsonl", "text_field": "text"},
        "tokenizer": {"path": str(tokenizer), "boundary": "eos"},
        "output": {"dir": str(out), "shard_tokens": 50_000, "val_fraction": 0.05, "seed": 7},
        "num_workers": 1,
        "unit_bytes": 65536,
    }
    for key, value in overrides.items():
        node = recipe
        *parents, last = key.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    path.write_text(yaml.safe_dump(recipe))
    return path


def read_split(out: Path, split: str) -> list[np.ndarray]:
    """Every document of a split, in dataset order, as arrays of ids (via the manifest)."""
    from pipeline.manifest import read_idx, read_manifest
    m = read_manifest(out)
    docs = []
    for shard in m.splits[split].shards:
        _, lengths, pointers = read_idx(out / split / f"{shard.name}.idx")
        data = np.fromfile(out / split / f"{shard.name}.bin", dtype=m.np_dtype)
        for n, p in zip(lengths, pointers):
            start = int(p) // m.np_dtype.itemsize
            docs.append(data[start:start + int(n)])
    return docs


def reads_as_text(data: bytes) -> bool:
    """Whether no start of `data` that a reader may peek at (a spooled window holds only its unit's
    bytes) looks like a compressed file, an archive or UTF-16/32 to pipeline/readers/sniff.py, which
    stops the run there: property tests of arbitrary bytes assume it (hypothesis finds the signatures
    in the code under test)."""
    from pipeline.readers.sniff import HEAD_BYTES, mislabeled
    return all(mislabeled("f", data[:n], None) is None for n in range(1, min(len(data), HEAD_BYTES) + 1))


def tree_bytes(out: Path) -> dict[str, bytes]:
    """Relative path -> bytes for every file of a finished dataset (what must be identical)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and ".prep" not in p.parts}


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    yield


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def read_spooled(reader, source, units, spool_dir, batch_docs: int = 5, policy: str = "skip", rows: bool = False,
                 **spooler_options):
    """Every unit through `reader` (a readers module) as a run reads it: the ranges of a compressed
    file from the windows a Spooler writes (one thread, two windows ahead). Per unit: (its window's
    stream offset, or None when not spooled; texts; positions; rejects as (reason, position, line),
    or with `rows` as BadRecords' rows)."""
    from dataclasses import replace

    from pipeline.readers import BadRecords
    from pipeline.spool import Spooler, open_window
    units = [replace(u, index=i) for i, u in enumerate(units)]
    spooler_options.setdefault("parquet_sources", {0: source})
    spooler = Spooler(units, {u.index for u in units}, spool_dir, {0: None}, workers=1, ahead=2, **spooler_options)
    units = [replace(u, spool=spooler.window(u)) if u.is_spooled else u for u in units]
    per_unit = []
    try:
        for u in units:
            base = None
            if u.is_spooled:
                with open_window(u) as w:
                    base = w.base
            bad = BadRecords(u, policy)
            texts, positions = [], []
            for batch in reader.iter_batches(u, source, bad, batch_docs):
                texts += batch.texts
                positions += batch.positions.tolist()
            per_unit.append((base, texts, positions,
                             bad.rows if rows else [(r["reason"], r["position"], r.get("line")) for r in bad.rows]))
            spooler.done(u.index)
    finally:
        spooler.close()
    return units, per_unit
