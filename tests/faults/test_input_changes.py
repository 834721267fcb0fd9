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

import pytest
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


@pytest.mark.parametrize("replacement", ["shorter", "plans-otherwise"])
def test_a_rewritten_file_with_units_done_is_refused_and_named(tmp_path, replacement):
    """a.jsonl, whose unit was done before a kill, rewritten: cut short (the same plan), or replaced by
    a file that plans into two units (its done unit no longer planned the same: refused as another
    recipe's run before, or with the unit kept it would mix old and new documents). Either way the file
    is named with what changed and the two ways on, nothing of the run is dropped, and putting the file
    back resumes to a fresh run's dataset."""
    d = _three_files(tmp_path)
    recipe = write_recipe(tmp_path, d / "*.jsonl")
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:1").returncode == -signal.SIGKILL
    assert [e["unit"] for e in journal_lines(out)] == [0]
    a = d / "a.jsonl"
    original, stat = a.read_bytes(), a.stat()
    if replacement == "shorter":  # its last documents gone (still not grouped with b)
        a.write_bytes(original[: original.rindex(b"\n", 0, len(original) - 4000) + 1])
    else:
        a.write_bytes(_lines(150, skip=300))

    r = run_prep(recipe, out)
    assert r.returncode == 1
    assert (f"{a}: changed since the unfinished run in {out} read it ({len(original):,} bytes then, "
            f"{a.stat().st_size:,} now); 1 of its 1 unit(s) are done from the old contents") in r.stderr
    assert "--overwrite" in r.stderr and "put the old file back" in r.stderr
    assert "different recipe" not in r.stderr
    assert [e["unit"] for e in journal_lines(out)] == [0]  # nothing of the unfinished run was dropped
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


def test_marking_a_stop_never_replaces_the_runs_own_error():
    """The file a run stops on is marked in plan.json while the run's error is raised: an OSError of
    that write (the disk full then) replaced that error, the damaged file's name and fix lost."""
    import errno
    from types import SimpleNamespace

    from pipeline import input_changes
    from pipeline.errors import PrepError
    from pipeline.readers import WorkUnit

    tried = []

    def full(**fields):
        tried.append(sorted(fields))
        raise OSError(errno.ENOSPC, "No space left on device")
    state = SimpleNamespace(plan={"fingerprint": "f"}, update_plan=full)
    unit = WorkUnit(0, 0, 0, "a.jsonl.gz", "jsonl", 0, -1, 10)
    input_changes.note_stop(state, unit, PrepError("a.jsonl.gz: truncated"))  # no OSError
    input_changes.note_failed(state, [{"unit": 0, "status": "failed", "path": "a.jsonl.gz", "error": "x"}])
    assert tried == [["stopped_on"], ["stopped_on"]]  # it did try to write them


def test_a_file_replaced_after_a_kill_that_plans_otherwise_resumes_when_none_of_it_was_done(tmp_path):
    """Killed (no recorded stop), then a file none of whose units was done replaced by one twice its
    size: two units where it was one, so the plan differs. It was refused as "an unfinished run of a
    different recipe or different input files" though the recipe is the same and no unit of the file
    was done; an unchanged plan takes such a file as it is now. Now the units planned the same are
    kept and the rest run, and the dataset is a fresh run's over the current files, for 1 or 2 workers."""
    d = _three_files(tmp_path)
    recipe = write_recipe(tmp_path, d / "*.jsonl")
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        for k, name in enumerate("abc"):
            (d / f"{name}.jsonl").write_bytes(_lines(LINES_PER_FILE, skip=k * LINES_PER_FILE))
        assert run_prep(recipe, out, workers=workers, fault="journal:1").returncode == -signal.SIGKILL
        done = [e["unit"] for e in journal_lines(out)]
        assert len(done) == 1
        # the last file not done (a file is a unit here): c, unless 2 workers finished its unit first
        name = next(name for k, name in reversed(list(enumerate("abc"))) if k not in done)
        (d / f"{name}.jsonl").write_bytes(_lines(150, skip=300))  # ~95 kB: two units of 64 KiB

        r = run_prep(recipe, out, workers=3 - workers)  # resumed with the other worker count
        assert r.returncode == 0, r.stderr
        assert_complete(out, _fresh(tmp_path, recipe, f"fresh{workers}"))


def test_after_a_kill_a_removed_file_with_units_done_is_refused_and_an_added_one_is_read(tmp_path):
    """Files added to or removed from a glob change the plan, which a resume takes by the per-file
    rules (input_changes.replanned). A removed file whose unit was done is refused, naming it (resuming
    would drop its documents); back, with a new file added too, the run resumes to a fresh run's dataset
    over the four files."""
    d = _three_files(tmp_path)
    recipe = write_recipe(tmp_path, d / "*.jsonl")
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:1").returncode == -signal.SIGKILL
    a = d / "a.jsonl"
    a.rename(tmp_path / "a.jsonl")
    r = run_prep(recipe, out)
    assert r.returncode == 1
    assert (f"{a}: gone since the unfinished run in {out} read it; 1 of its 1 unit(s) are done from it, and "
            "resuming would drop those documents: put the file back to resume, or re-run with --overwrite "
            "to start over without it") in r.stderr

    (tmp_path / "a.jsonl").rename(a)
    (d / "d.jsonl").write_bytes(_lines(LINES_PER_FILE, skip=400))
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert_complete(out, _fresh(tmp_path, recipe, "fresh"))


def test_a_path_read_by_two_sources_counts_only_its_own_units_when_it_changed(tmp_path):
    """Sources a, b, a: a.jsonl's units are 0 and 2. Its plan.json span was [0, 2], taking b's unit 1
    for one of a's: replaced after units 0 and 1 were done (planning otherwise), it was refused as
    "2 of its 3 unit(s) are done" (b's unit counted, 3 units where a has 2)."""
    d = _three_files(tmp_path)
    recipe = write_recipe(tmp_path, d / "a.jsonl")
    spec = json.loads(recipe.read_text())
    source = spec.pop("source")
    spec["sources"] = [source, dict(source, path=str(d / "b.jsonl")), source]
    recipe.write_text(json.dumps(spec))
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:2").returncode == -signal.SIGKILL
    assert [e["unit"] for e in journal_lines(out)] == [0, 1]
    a = d / "a.jsonl"
    original = a.read_bytes()
    a.write_bytes(_lines(150, skip=300))  # two units where it was one

    r = run_prep(recipe, out)
    assert r.returncode == 1
    assert (f"{a}: changed since the unfinished run in {out} read it ({len(original):,} bytes then, "
            f"{a.stat().st_size:,} now); 1 of its 2 unit(s) are done from the old contents") in r.stderr
