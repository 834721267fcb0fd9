"""An unfinished run begun by prep up to commit a51c40d resumes (pipeline/legacy_plans.py). Its
plan.json is built here in that prep's format, by its formulas (its executor._fingerprint and
input_changes.recipe_key over the whole recipe, its _unit_key over a unit's plan entry alone): that
prep cannot run in CI. The run's journal and parts are this prep's, which wrote the same."""

from __future__ import annotations

import hashlib
import json
import signal

from faultkit import assert_complete, journal_lines, run_prep, snapshot, write_recipe
from test_input_changes import _lines, _three_files

from pipeline.readers import plan_units
from pipeline.recipe import Recipe
from pipeline.tokenizers import load_tokenizer


def _old_plan(recipe_path, out, *, whole_files: bool = False, **stopped) -> dict:
    """plan.json as prep a51c40d wrote it for this recipe's plan now; with `stopped_on`, as after a stop.
    `whole_files`: a text source split on a self-overlapping separator ("\n\n"), which that prep planned
    as one unit (path, 0, -1) per file (its readers/text.py plan)."""
    recipe = Recipe.from_yaml(str(recipe_path), output_dir=str(out))
    inputs = {}
    units = plan_units(recipe, 1, inputs)
    content, sha = recipe.content_dict(), load_tokenizer(recipe.tokenizer).sha256
    entries = [(u.path, u.start, u.end, *u.paths, *[(m.path, m.start, m.end) for m in u.group]) for u in units]
    if whole_files:
        entries = [(path, 0, -1) for path in inputs]
    plan = {"fingerprint": hashlib.sha256(json.dumps([content, sha, entries], sort_keys=True).encode()).hexdigest(),
            "units": len(entries), "inputs": inputs}
    if stopped:
        plan.update(stopped, recipe_key=hashlib.sha256(json.dumps([content, sha], sort_keys=True).encode()).hexdigest(),
                    unit_keys=[hashlib.sha256(json.dumps(e).encode()).hexdigest()[:16] for e in entries])
    return plan


def _fresh(tmp_path, recipe) -> dict[str, str]:
    out = tmp_path / "fresh"
    assert run_prep(recipe, out).returncode == 0
    return snapshot(out)


def test_a_run_killed_under_prep_a51c40d_resumes_and_its_plan_is_rewritten(tmp_path, corpus, reference):
    """It was refused as "a different recipe or different input files": its fingerprint covers the
    whole recipe (name included), and it has no recipe, unit keys or spans."""
    recipe = write_recipe(tmp_path, corpus)
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:2").returncode == -signal.SIGKILL
    plan_json = out / ".prep" / "plan.json"
    plan_json.write_text(json.dumps(_old_plan(recipe, out)))

    killed = run_prep(recipe, out, fault="journal:1")  # resumed, then killed after one more unit
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert [e["unit"] for e in journal_lines(out)] == [0, 1, 2]  # units 0 and 1 kept
    plan = json.loads(plan_json.read_text())  # in this prep's form now
    assert plan["recipe"]["tokenizer"] and plan["spans"] == [[0, 6]] and len(plan["unit_keys"]) == 7

    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert_complete(out, reference)


def test_a_run_stopped_under_prep_a51c40d_resumes_once_its_file_is_replaced(tmp_path):
    """After a stop on c.jsonl (that prep kept its recipe key and unit keys then), c replaced by a
    file that plans into two units: the units planned the same are kept. Without the stop, the same
    change is refused, as that prep refused it."""
    d = _three_files(tmp_path)
    recipe = write_recipe(tmp_path, d / "*.jsonl")
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:1").returncode == -signal.SIGKILL
    plan_json = out / ".prep" / "plan.json"
    c = d / "c.jsonl"
    old_plan = _old_plan(recipe, out, stopped_on=[str(c)])
    c.write_bytes(_lines(150, skip=300))  # ~95 kB: two units where it was one

    plan_json.write_text(json.dumps({k: v for k, v in old_plan.items() if k != "stopped_on"}))
    r = run_prep(recipe, out)
    assert r.returncode == 1 and "different recipe or different input files" in r.stderr

    plan_json.write_text(json.dumps(old_plan))
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert "3/4 units" in r.stdout  # a's unit 0 kept (b's is planned the same too, but was not done)
    assert_complete(out, _fresh(tmp_path, recipe))


def _paragraph_files(tmp_path):
    """a.txt (~6 kB, one unit) and b.txt (~190 kB of paragraphs: cut into units of 64 KiB now)."""
    texts = [json.loads(line)["text"] for line in _lines(300).splitlines()]
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.txt").write_text("\n\n".join(texts[:10]))
    (d / "b.txt").write_text("\n\n\n".join(texts[10:]))  # runs of 3: a cut leaves one newline to the next
    return d


def test_a_run_killed_under_prep_a51c40d_on_paragraphs_read_whole_resumes(tmp_path):
    """That prep planned a file split on "\n\n" as one unit; this one cuts it, so the old fingerprint
    never matched this plan and the run was refused as "a different recipe or different input files".
    The old plan is recognised; its units planned the same (a.txt's) are kept and the rest redone on
    this plan: that prep's unit 1 was all of b.txt, this plan's is its first cut."""
    d = _paragraph_files(tmp_path)
    recipe = write_recipe(tmp_path, d / "*.txt",
                          source={"path": str(d / "*.txt"), "format": "text", "doc_separator": "\n\n"})
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:2").returncode == -signal.SIGKILL
    assert [e["unit"] for e in journal_lines(out)] == [0, 1]
    old_plan = _old_plan(recipe, out, whole_files=True)
    assert old_plan["units"] == 2 and len(plan_units(Recipe.from_yaml(str(recipe)), 1, {})) > 3
    plan_json = out / ".prep" / "plan.json"
    plan_json.write_text(json.dumps(old_plan))

    killed = run_prep(recipe, out, fault="journal:1")  # resumed, then killed after one more unit
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert [e["unit"] for e in journal_lines(out)] == [0, 1]  # a.txt's kept; unit 1 redone as b's first cut
    assert "unit_keys" in json.loads(plan_json.read_text())  # in this prep's form now

    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert_complete(out, _fresh(tmp_path, recipe))


def test_a_kill_between_taking_an_old_plan_and_recording_its_spans_then_a_changed_file_is_refused(tmp_path):
    """journal.start rewrites the old plan.json in this prep's form without `spans` (input_changes.accept
    adds them next). Killed in between, then c.jsonl replaced by a file planned into two units: the
    replan read old["spans"] and stopped with a KeyError traceback. Without spans the files' old units
    are unknown, so it is judged as that prep judged it (legacy_plans): refused in one line."""
    d = _three_files(tmp_path)
    recipe = write_recipe(tmp_path, d / "*.jsonl")
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:1").returncode == -signal.SIGKILL
    plan_json = out / ".prep" / "plan.json"
    plan_json.write_text(json.dumps(_old_plan(recipe, out)))
    # plan.json renamed once by journal.start (this prep's form), killed before accept's rename
    assert run_prep(recipe, out, fault="rename-plan.json:2").returncode == -signal.SIGKILL
    plan = json.loads(plan_json.read_text())
    assert "recipe" in plan and "spans" not in plan
    (d / "c.jsonl").write_bytes(_lines(150, skip=300))  # ~95 kB: two units where it was one

    r = run_prep(recipe, out)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "different recipe or different input files" in r.stderr
