"""The console script's entry (pipeline/launch.py): the forkserver starts before the CLI's imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipeline import launch, pool
from tests.conftest import DEMO_CORPUS, write_recipe


@pytest.mark.parametrize("args,want", [
    (["--recipe", "r.yaml"], ("r.yaml", None, [])),
    (["-r", "r.yaml", "-j", "3"], ("r.yaml", 3, [])),
    (["--recipe=r.yaml", "--num-workers=2", "--no-progress"], ("r.yaml", 2, [])),
    (["--set", "num_workers=4", "--recipe", "r.yaml", "--set=output.dir=x"],
     ("r.yaml", None, ["num_workers=4", "output.dir=x"])),
    (["--overwrite", "--output", "o", "-r", "r.yaml"], ("r.yaml", None, [])),
    (["--no-progress"], None),                # no recipe named: the CLI reports it
    (["--recipe"], None),                     # a value missing
    (["-r", "r.yaml", "-j", "many"], None),   # not a number: the CLI reports it
    (["-rr.yaml"], None),                     # glued short options are the CLI's to read
    (["-r", "r.yaml", "-j4"], None),
])
def test_early_options(args, want):
    assert launch.early_options(args) == want


@pytest.fixture
def warmed(monkeypatch):
    calls = []
    monkeypatch.setattr(pool, "warm_forkserver", lambda *a, **k: calls.append(1))
    return calls


@pytest.mark.parametrize("recipe_workers,args,want", [
    (2, [], 1),
    (1, [], 0),
    (2, ["-j", "1"], 0),
    (1, ["--num-workers", "2"], 1),
    (1, ["--set", "num_workers=2"], 1),
])
def test_the_forkserver_starts_early_when_workers_are_coming(tmp_path, warmed, recipe_workers, args, want):
    recipe = write_recipe(tmp_path / "r.yaml", corpus=DEMO_CORPUS, tokenizer="t.json", out=tmp_path / "out",
                          num_workers=recipe_workers)
    launch._warm_for(["--recipe", str(recipe), *args])
    assert len(warmed) == want


def test_an_unreadable_recipe_is_left_to_the_cli(tmp_path, warmed):
    (tmp_path / "bad.yaml").write_text("num_workers: [")
    launch._warm_for(["--recipe", str(tmp_path / "bad.yaml")])
    launch._warm_for(["--recipe", str(tmp_path / "missing.yaml")])
    assert warmed == []


def test_help_does_not_start_anything(warmed, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["prep", "tokenize", "--help", "--recipe", "r.yaml"])
    with pytest.raises(SystemExit) as e:
        launch.main()
    assert e.value.code == 0
    assert "--recipe" in capsys.readouterr().out
    assert warmed == []


def test_the_entry_point_tokenizes_with_two_workers(tmp_path, demo_tokenizer):
    recipe = write_recipe(tmp_path / "r.yaml", corpus=DEMO_CORPUS, tokenizer=demo_tokenizer, out=tmp_path / "out",
                          num_workers=2)
    code = ("import sys; from pipeline.launch import main; "
            f"sys.argv = ['prep', 'tokenize', '--recipe', {str(recipe)!r}, '--no-progress']; main()")
    trace = tmp_path / "trace.jsonl"  # and PREP_TRACE: a timeline from the parent and each worker
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PREP_TRACE": str(trace)})
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out" / "manifest.json").exists()
    assert "units in" in run.stdout

    from pipeline.trace import summarize
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    parent = {e["pid"] for e in events if e["ev"] == "main"}
    by_ev = lambda name: [e for e in events if e["ev"] == name]  # noqa: E731
    (planned,) = by_ev("units_planned")
    units = planned["units"]
    assert units > 1 and f"{units}/{units} units" in run.stdout
    assert len(parent) == 1 and {e["pid"] for e in by_ev("unit_done")} == parent
    assert sorted(e["unit"] for e in by_ev("unit_done")) == list(range(units))
    assert sorted(e["unit"] for e in by_ev("unit_end")) == list(range(units))
    workers = {e["pid"] for e in by_ev("worker_ready")}
    assert 1 <= len(workers) <= 2 and not workers & parent
    assert {e["pid"] for e in by_ev("unit_start")} <= workers
    assert [e["ev"] for e in events if e["pid"] in parent][-1] == "manifest"
    text = "\n".join(summarize(trace.read_text().splitlines()))
    assert f"({units} units;" in text and "last shard placed" in text and "first worker ready" in text
