"""An input file changed between an interrupted run and its resume (pipeline/input_changes.py): a
file with units done is refused, naming it; one with none is read as it is now; a damaged file
replaced is the documented fix, and its failed units are redone."""

from __future__ import annotations

import gzip
import json
import os
import shlex
import signal
import subprocess

from faultkit import DEMO, assert_complete, journal_lines, placed_lines, run_prep, snapshot, write_recipe

LINES_PER_FILE = 70  # ~44 kB of the demo corpus: one unit of 64 KiB per file, not grouped with the next


def _lines(n: int, skip: int = 0) -> bytes:
    with open(DEMO / "corpus.jsonl", "rb") as f:
        lines = [next(f) for _ in range(skip + n)]
    return b"".join(lines[skip:])


def _three_files(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    for k, name in enumerate("abc"):
        (d / f"{name}.jsonl").write_bytes(_lines(LINES_PER_FILE, skip=k * LINES_PER_FILE))
    return d


def _fresh(tmp_path, recipe, name: str) -> dict[str, str]:
    out = tmp_path / name
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    return snapshot(out)


def test_a_rewritten_file_with_units_done_is_refused_and_named(tmp_path):
    d = _three_files(tmp_path)
    recipe = write_recipe(tmp_path, d / "*.jsonl")
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:1").returncode == -signal.SIGKILL
    assert [e["unit"] for e in journal_lines(out)] == [0]
    a = d / "a.jsonl"
    original, stat = a.read_bytes(), a.stat()
    shorter = original[: original.rindex(b"\n", 0, len(original) - 4000) + 1]
    a.write_bytes(shorter)  # its last documents gone after its unit was done (still not grouped with b)

    r = run_prep(recipe, out)
    assert r.returncode == 1
    assert (f"{a}: changed since the unfinished run in {out} read it ({len(original):,} bytes then, "
            f"{len(shorter):,} now); 1 of its 1 unit(s) are done from the old contents") in r.stderr
    assert not (out / "manifest.json").exists()

    # put back, with its old time: the run resumes, and ends as one that was never interrupted
    a.write_bytes(original)
    os.utime(a, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    reference = _fresh(tmp_path, recipe, "fresh")
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert_complete(out, reference)


def test_a_same_size_edit_of_a_cut_file_is_refused_with_a_touch_that_resumes(tmp_path, corpus, reference):
    recipe = write_recipe(tmp_path, corpus)  # one file, 7 units of 64 KiB
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:2").returncode == -signal.SIGKILL
    original, stat = corpus.read_bytes(), corpus.stat()
    edited = original.replace(b" the ", b" THE ")
    assert edited != original and len(edited) == len(original)  # every unit's byte range is unchanged
    try:
        corpus.write_bytes(edited)
        r = run_prep(recipe, out)
        assert r.returncode == 1
        assert f"{corpus}: changed since the unfinished run in {out} read it (rewritten at the same size); " \
               "2 of its 7 unit(s) are done from the old contents" in r.stderr
        touch = r.stderr[r.stderr.index("touch -d"):].split(" and re-run")[0]

        # copied back (a new mtime): the refusal's own touch command lets it resume
        corpus.write_bytes(original)
        assert corpus.stat().st_mtime_ns != stat.st_mtime_ns
        subprocess.run(shlex.split(touch), check=True)
        assert corpus.stat().st_mtime_ns == stat.st_mtime_ns
        r = run_prep(recipe, out)
        assert r.returncode == 0, r.stderr
        assert_complete(out, reference)
    finally:  # the corpus is the session's: leave it as it was
        corpus.write_bytes(original)
        os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_changed_file_with_no_unit_done_is_read_as_it_is_now(tmp_path):
    d = _three_files(tmp_path)
    recipe = write_recipe(tmp_path, d / "*.jsonl")
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:1").returncode == -signal.SIGKILL
    (d / "c.jsonl").write_bytes(_lines(60, skip=500))  # not read yet, and still a unit of its own: the same plan

    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert snapshot(out) == _fresh(tmp_path, recipe, "fresh")
    assert json.loads((out / "manifest.json").read_text())["splits"]["train"]["num_docs"] > 0


def test_a_damaged_file_replaced_under_skip_has_its_failed_unit_redone(tmp_path):
    d = _three_files(tmp_path)
    good = gzip.compress((d / "b.jsonl").read_bytes())
    (d / "b.jsonl").unlink()
    (d / "b.jsonl.gz").write_bytes(good[:-200])  # truncated: its unit fails under skip
    for name, skip in (("a", 0), ("c", 300)):  # ~69 kB: 2 units each, so b.jsonl.gz is not grouped with them
        (d / f"{name}.jsonl").write_bytes(_lines(110, skip=skip))
    recipe = write_recipe(tmp_path, d / "*.jsonl*", on_bad_record="skip")
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal-placed:3").returncode == -signal.SIGKILL
    assert [(e["unit"], e["status"]) for e in journal_lines(out)] == [(0, "ok"), (1, "ok"), (2, "failed"), (3, "ok")]
    # shards were placed past b's unit, from c's first: they are rebuilt with b's documents before c's
    assert any(int(name[1:8]) == 3 for e in placed_lines(out) for name in e["parts"])

    (d / "b.jsonl.gz").write_bytes(good)  # the fix: replace it, re-run
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert not json.loads((out / "manifest.json").read_text())["failed_units"]
    assert snapshot(out) == _fresh(tmp_path, recipe, "fresh")


def test_a_replaced_file_killed_before_its_units_are_redone_still_redoes_them(tmp_path):
    """The re-run after the replacement records the new file (plan.json inputs) before it redoes the
    unit that failed on the old one: killed in between, the next resume must still redo it. It kept
    the journal's "failed" line and saw no change, so the dataset came out without the file's
    documents (listed in failed_units) where an uninterrupted re-run had them."""
    d = _three_files(tmp_path)
    good = gzip.compress((d / "b.jsonl").read_bytes())
    (d / "b.jsonl").unlink()
    (d / "b.jsonl.gz").write_bytes(good[:-200])
    for name, skip in (("a", 0), ("c", 300)):  # 2 units each, as above
        (d / f"{name}.jsonl").write_bytes(_lines(110, skip=skip))
    recipe = write_recipe(tmp_path, d / "*.jsonl*", on_bad_record="skip")
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal-placed:3").returncode == -signal.SIGKILL
    assert (2, "failed") in [(e["unit"], e["status"]) for e in journal_lines(out)]

    (d / "b.jsonl.gz").write_bytes(good)
    assert run_prep(recipe, out, fault="start:1").returncode == -signal.SIGKILL  # accepted, nothing redone yet
    assert (2, "failed") not in [(e["unit"], e["status"]) for e in journal_lines(out)]
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert not json.loads((out / "manifest.json").read_text())["failed_units"]
    assert snapshot(out) == _fresh(tmp_path, recipe, "fresh")


def test_a_group_member_left_out_then_replaced_has_its_group_redone(tmp_path):
    """A unit of small files keeps the good ones and lists the damaged one in failed_files: replaced,
    the whole group is redone (its shards are placed in unit order, so those after it are too)."""
    d = _three_files(tmp_path)
    good = gzip.compress((d / "b.jsonl").read_bytes())
    (d / "b.jsonl").unlink()
    (d / "b.jsonl.gz").write_bytes(good[:-200])
    (d / "a.jsonl").write_bytes(_lines(30))  # a and b (~18 + ~5 kB) share a unit of 64 KiB; c has its own
    recipe = write_recipe(tmp_path, d / "*.jsonl*", on_bad_record="skip")
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:2").returncode == -signal.SIGKILL
    entries = journal_lines(out)
    assert [(e["unit"], e["status"]) for e in entries] == [(0, "ok"), (1, "ok")]
    assert [f["path"] for f in entries[0]["failed_files"]] == [str(d / "b.jsonl.gz")]

    (d / "b.jsonl.gz").write_bytes(good)
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert not json.loads((out / "manifest.json").read_text())["failed_units"]
    assert snapshot(out) == _fresh(tmp_path, recipe, "fresh")


def test_remembering_the_plan_never_replaces_the_runs_own_error():
    """remember_plan runs while the run's error is raised: its OSError (the disk full then) replaced
    that error, the damaged file's name and fix lost."""
    import errno
    from types import SimpleNamespace

    from pipeline import input_changes

    tried = []

    def full(**fields):
        tried.append(sorted(fields))
        raise OSError(errno.ENOSPC, "No space left on device")
    state = SimpleNamespace(plan={"stopped_on": ["a.jsonl.gz"]}, update_plan=full)
    input_changes.remember_plan(state, [], "key")  # no OSError
    assert tried == [["recipe_key", "unit_keys"]]  # it did try to write them
