"""Fixtures for the fault suite: a small corpus (7 work units of 64 KiB) and the reference run that
every faulted run must reproduce byte for byte."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from faultkit import CORPUS_LINES, DEMO, run_prep, snapshot, write_recipe  # noqa: E402


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "small.jsonl"
    with open(DEMO / "corpus.jsonl", "rb") as src:
        lines = [next(src) for _ in range(CORPUS_LINES)]
    path.write_bytes(b"".join(lines))
    return path


@pytest.fixture(scope="session")
def recipe(tmp_path_factory, corpus) -> Path:
    return write_recipe(tmp_path_factory.mktemp("recipe"), corpus)


@pytest.fixture(scope="session")
def reference_out(tmp_path_factory, recipe) -> Path:
    """The uninterrupted run every faulted run must reproduce byte for byte."""
    out = tmp_path_factory.mktemp("reference") / "out"
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="session")
def reference(reference_out) -> dict[str, str]:
    """{path: sha256} of the reference dataset."""
    snap = snapshot(reference_out)
    assert "manifest.json" in snap and any(k.startswith("train/") for k in snap) and any(
        k.startswith("val/") for k in snap)
    return snap
