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


def _old_plan(recipe_path, out, **stopped) -> dict:
    """plan.json as prep a51c40d wrote it for this recipe's plan now; with `stopped_on`, as after a stop."""
    recipe = Recipe.from_yaml(str(recipe_path), output_dir=str(out))
    inputs = {}
    units = plan_units(recipe, 1, inputs)
    content, sha = recipe.content_dict(), load_tokenizer(recipe.tokenizer).sha256
    entries = [(u.path, u.start, u.end, *u.paths, *[(m.path, m.start, m.end) for m in u.group]) for u in units]
    plan = {"fingerprint": hashlib.sha256(json.dumps([content, sha, entries], sort_keys=True).encode()).hexdigest(),
            "units": len(units), "inputs": inputs}
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
