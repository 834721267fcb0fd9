"""benchmarks/bench_formats.py rewrote its committed report (benchmarks/results/formats_cpu<N>_<yyyymm>.md)
on every run, as a side effect of a quick look; now it prints the report and writes one only to --report."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_formats", REPO / "benchmarks" / "bench_formats.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "ROOT", tmp_path)  # where the old code wrote: tmp_path/benchmarks/results
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    return module


def _write(bench, report: str):
    args = argparse.Namespace(docs=2, workers=1, repeat=1, tokenizer="t.json", report=report)
    rows = [("jsonl", 1_000_000, 1, 5000.0, 20.0, 1000.0, 0.5)]
    bench.write_report(rows, args, ["a text", "another"])


def test_a_run_without_report_writes_nothing(bench, tmp_path, capsys):
    _write(bench, "")
    assert list(tmp_path.rglob("*.md")) == []
    assert "| jsonl | 1.0 MB | 1 | 5,000 | 20.0 | 1,000 | 0.50 |" in capsys.readouterr().out


def test_report_writes_where_it_says(bench, tmp_path):
    _write(bench, str(tmp_path / "mine.md"))
    assert [p.name for p in tmp_path.rglob("*.md")] == ["mine.md"]
    assert "| jsonl | 1.0 MB |" in (tmp_path / "mine.md").read_text()
