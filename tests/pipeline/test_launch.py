"""The console script's entry (pipeline/launch.py): the forkserver starts before the CLI's imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipeline import launch, pool
from tests.conftest import DEMO_CORPUS, write_recipe


def _opts(recipe="r.yaml", **kw):
    return {"recipe": recipe, "output": None, "num_workers": None, "sets": [], "overwrite": False, "progress": True,
            "allow_empty": False, **kw}


@pytest.mark.parametrize("args,want", [
    (["--recipe", "r.yaml"], _opts()),
    (["-r", "./r.yaml", "-j", "3"], _opts(num_workers=3)),
    (["-r", "r.yaml", "-j", "auto"], _opts(num_workers="auto")),  # was left to the CLI, which refused it
    (["--recipe=r.yaml", "--num-workers=2", "--no-progress"], _opts(num_workers=2, progress=False)),
    (["--set", "num_workers=4", "--recipe", "r.yaml", "--set=output.dir=x"], _opts(sets=["num_workers=4", "output.dir=x"])),
    (["--overwrite", "--output", "o", "-r", "r.yaml", "--progress"], _opts(output="o", overwrite=True)),
    (["-r", "r.yaml", "--allow-empty"], _opts(allow_empty=True)),
    (["-o", "a", "--output=b", "-r", "x.yaml", "-r", "r.yaml"], _opts(output="b")),  # the last one wins
    (["--no-progress"], None),                # no recipe named: the CLI reports it
    (["--recipe"], None),                     # a value missing
    (["-r", "--overwrite"], None),
    (["-r", "r.yaml", "-j", "many"], None),   # not a number: the CLI reports it
    (["-r", "r.yaml", "-j", "0"], None),      # below the CLI's minimum
    (["-r", "r.yaml", "-j", "³"], None),      # a digit to str.isdigit(), not to int(): was a ValueError
    (["-r", "r.yaml", "--num-workers=٣"], None),  # int() reads 3; the CLI refuses it
    (["-rr.yaml"], None),                     # glued short options are the CLI's to read
    (["-r", "r.yaml", "-j4"], None),
    (["-r=r.yaml"], None),                    # click reads this as the path "=r.yaml"
    (["-r", "r.yaml", "--overwrite=yes"], None),
    (["-r", "r.yaml", "--help"], None),
    (["-r", "r.yaml", "extra"], None),
])
def test_tokenize_args_reads_the_whole_command_line_or_nothing(args, want):
    assert launch.tokenize_args(args) == want



def _typer_reads(args: list[str]) -> dict | None:
    """What the typer command's own parser makes of `tokenize ARGS`, or None where it refuses them."""
    import typer

    from pipeline.cli import app
    command = typer.main.get_command(app).commands["tokenize"]
    try:
        p = command.make_context("tokenize", list(args)).params
    except Exception:  # click's usage errors (typer vendors click: no public type to name)
        return None
    return {"recipe": str(p["recipe"]), "output": p["output"], "num_workers": p["num_workers"],
            "sets": list(p["set_"]), "overwrite": p["overwrite"], "progress": p["progress"],
            "allow_empty": p["allow_empty"]}


@pytest.mark.parametrize("args", [
    ["--recipe=r.yaml"], ["-r", "r.yaml", "--num-workers", "2"], ["-r", "r.yaml", "--set", "a=b", "--set", "c=d"],
    ["-r", "r.yaml", "--set=a=b=c"], ["-r", "r.yaml", "--set", "a=-1"], ["--recipe="], ["-r", "r.yaml", "--output="],
    ["-r", "r.yaml", "--no-progress", "--progress"], ["-r", "r.yaml", "--overwrite", "--overwrite"],
    ["-r", "r.yaml", "--allow-empty"], ["-r", "r.yaml", "--allow-empty=yes"], ["-r", "r.yaml", "-o", "a", "-o", "b"], ["-r", "r.yaml", "-j", "99999999999999999999999"],
    ["-r", "r.yaml", "-j", "³"], ["-r", "r.yaml", "-j", "٣"], ["-r", "r.yaml", "-j", "-1"], ["-r", "r.yaml", "--"],
    ["-r", "r.yaml", "--", "x"], ["--", "-r", "r.yaml"], ["-r", "r.yaml", "-h"], ["-r", "r.yaml", "--over"],
    ["-r", "r.yaml", "--help=x"], ["-r", "r.yaml", "-"], ["-r", "r.yaml", "-j", "auto"], ["-r", "r.yaml", "-j", "Auto"],
])
def test_the_fast_path_never_reads_a_command_line_otherwise_than_typer(args):
    """The console script's own reading is a shortcut: where it reads a command line at all, typer's
    parser (the definition of the options) must read the same values from it."""
    fast = launch.tokenize_args(args)
    assert fast is None or fast == _typer_reads(args)

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
    (1, ["-j", "auto"], 1),  # one per core: this machine's 2 or more
    (2, ["--set", "num_workers=auto", "-j", "1"], 0),
])
def test_the_forkserver_starts_early_when_workers_are_coming(tmp_path, warmed, recipe_workers, args, want):
    recipe = write_recipe(tmp_path / "r.yaml", corpus=DEMO_CORPUS, tokenizer="t.json", out=tmp_path / "out",
                          num_workers=recipe_workers)
    launch._warm_for(launch.tokenize_args(["--recipe", str(recipe), *args]))
    assert len(warmed) == want


def test_an_unreadable_recipe_is_left_to_the_cli(tmp_path, warmed):
    (tmp_path / "bad.yaml").write_text("num_workers: [")
    launch._warm_for(launch.tokenize_args(["--recipe", str(tmp_path / "bad.yaml")]))
    launch._warm_for(launch.tokenize_args(["--recipe", str(tmp_path / "missing.yaml")]))
    assert warmed == []


def test_help_does_not_start_anything(warmed, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["prep", "tokenize", "--help", "--recipe", "r.yaml"])
    with pytest.raises(SystemExit) as e:
        launch.main()
    assert e.value.code == 0
    assert "--recipe" in capsys.readouterr().out
    assert warmed == []



@pytest.mark.parametrize("where", ["pipeline.launch._warm_for", "pipeline.executor.load_tokenizer"])
@pytest.mark.parametrize("sig,code,says", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated (SIGTERM)")])
def test_a_signal_before_the_units_is_one_line_and_its_exit_code(tmp_path, demo_tokenizer, where, sig, code, says):
    """Ctrl-C while the console script read the recipe and started the forkserver (before the command's
    own handling) was a KeyboardInterrupt traceback; SIGTERM before the run took its lock killed prep
    without a line, and after it exited 130 as a Ctrl-C. Each is one line and its code (143 = 128 + 15)."""
    recipe = write_recipe(tmp_path / "r.yaml", corpus=DEMO_CORPUS, tokenizer=demo_tokenizer, out=tmp_path / "out",
                          num_workers=2)
    module, name = where.rsplit(".", 1)
    code_ = (f"import os, signal, sys, importlib\nm = importlib.import_module({module!r})\n"
             f"def arrive(*a, **k):\n    os.kill(os.getpid(), signal.{sig})\n    raise AssertionError('no signal')\n"
             f"m.{name} = arrive\nfrom pipeline.launch import main\n"
             f"sys.argv = ['prep', 'tokenize', '--recipe', {str(recipe)!r}, '--no-progress']\nmain()\n")
    run = subprocess.run([sys.executable, "-c", code_], capture_output=True, text=True, timeout=120)
    assert (run.returncode, run.stderr) == (code, f"{says}: finished units are kept; re-run the same command to "
                                                  "resume\n")

def test_the_entry_point_tokenizes_with_two_workers(tmp_path, demo_tokenizer):
    recipe = write_recipe(tmp_path / "r.yaml", corpus=DEMO_CORPUS, tokenizer=demo_tokenizer, out=tmp_path / "out",
                          num_workers=2)
    code = ("import sys; from pipeline.launch import console; "  # the console script's entry: os._exit at the end
            f"sys.argv = ['prep', 'tokenize', '--recipe', {str(recipe)!r}, '--no-progress']; console()")
    trace = tmp_path / "trace.jsonl"  # and PREP_TRACE: a timeline from the parent and each worker
    scratch = tmp_path / "tmp"  # where multiprocessing makes its directory (the forkserver's socket)
    scratch.mkdir()
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PREP_TRACE": str(trace), "TMPDIR": str(scratch)})
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
    # the piped stdout was flushed before os._exit (the summary table and the timing line above), and
    # no worker or forkserver outlives the run (the forkserver traced its imports)
    forkserver = {e["pid"] for e in by_ev("imported")} - parent
    assert forkserver and "train" in run.stdout
    assert _all_gone(workers | forkserver)
    # os._exit skips multiprocessing's exit handlers: its pymp-* directory must not be left behind
    assert list(scratch.iterdir()) == []


def _all_gone(pids: set[int], wait_s: float = 30.0) -> bool:
    import time
    deadline = time.monotonic() + wait_s  # a liveness bound, not a speed check: they go within ms
    while time.monotonic() < deadline:
        alive = set()
        for pid in pids:
            try:
                os.kill(pid, 0)
                with open(f"/proc/{pid}/stat") as f:  # a zombie (not yet reaped by init) has ended
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                        alive.add(pid)
            except (ProcessLookupError, FileNotFoundError):
                pass
        if not alive:
            return True
        time.sleep(0.05)
    return False


def _prep(args: list[str], typer_path: bool) -> tuple[int, str, str, bool]:
    """`prep tokenize ...` through the console script's entry (direct) or `python -m pipeline.cli`
    (typer): exit code, stdout without the timing line, stderr, and whether typer was imported."""
    entry = "from pipeline.cli import main" if typer_path else "from pipeline.launch import main"
    code = (f"import sys; {entry}; sys.argv = ['prep', 'tokenize', *{args!r}]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    c = e.code or 0\nelse:\n    c = 0\n"
            "print('typer' in sys.modules, file=sys.stderr); sys.exit(c)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    *err, typer_loaded = run.stderr.splitlines()
    lines = [x for x in run.stdout.splitlines() if " units in " not in x]
    return run.returncode, "\n".join(lines), "\n".join(err), typer_loaded == "True"


def test_the_direct_path_and_the_typer_command_answer_alike(tmp_path, demo_tokenizer):
    """Same exit codes and lines for a run, a re-run (already complete) and a user error; only the
    console script's direct path goes without typer."""
    recipe = write_recipe(tmp_path / "r.yaml", corpus=DEMO_CORPUS, tokenizer=demo_tokenizer, out=tmp_path / "out")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsource: {path: nowhere/*.jsonl}\ntokenizer: {path: t.json}\noutput: {dir: o}\n")
    answers = {}
    for typer_path in (False, True):
        out = tmp_path / ("via_typer" if typer_path else "direct")
        run = ["-r", str(recipe), "--no-progress", "-o", str(out)]
        got = [_prep(run, typer_path), _prep(run, typer_path), _prep(["--recipe", str(bad), "--no-progress"], typer_path)]
        assert all(g[3] is typer_path for g in got)  # typer imported only on the typer path
        answers[typer_path] = [(code, stdout.replace(str(out), "OUT"), stderr) for code, stdout, stderr, _ in got]
    assert answers[False] == answers[True]
    (run, rerun, error) = answers[False]
    assert run[0] == 0 and "train" in run[1]
    assert rerun[0] == 0 and "OUT: already complete" in rerun[1]
    assert error[0] == 1 and error[2].startswith(f"error: {bad}:3: tokenizer.path: t.json does not exist")


def test_a_wrong_text_field_stops_two_workers_with_one_line(tmp_path, demo_tokenizer):
    """Under on_bad_record: skip (the default), a recipe naming a field the records lack is an error, not
    an empty dataset and exit 0; the console script's error exit (os._exit) leaks no semaphore of the
    pool's queues (the resource tracker used to warn of 5)."""
    recipe = write_recipe(tmp_path / "r.yaml", corpus=DEMO_CORPUS, tokenizer=demo_tokenizer, out=tmp_path / "out",
                          num_workers=2, source__text_field="content")
    code = ("import sys; from pipeline.launch import console; "
            f"sys.argv = ['prep', 'tokenize', '--recipe', {str(recipe)!r}, '--no-progress']; console()")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    assert run.stderr.startswith(f"error: {DEMO_CORPUS}: text_field names a field that none of the "), run.stderr
    assert "line 1: no 'content'; the record has 'id', 'text'" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr  # nothing else: no warning, no traceback
    assert not (tmp_path / "out" / "manifest.json").exists()
