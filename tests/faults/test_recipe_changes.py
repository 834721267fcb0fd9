"""A recipe changed between an unfinished run and its re-run (pipeline/input_changes.py): a field
that decides the output is refused, naming it and the --set that resumes; the fields that decide no
unit's output (name, on_bad_record, max_bad_records) resume, to the dataset a fresh run with them
makes."""

from __future__ import annotations

import json
import shlex
import signal

import pytest
from faultkit import CORPUS_LINES, DEMO, assert_complete, journal_lines, run_prep, snapshot, write_recipe

BAD_LINES = (200, 330, 460, 590)  # non-string text in 4 of the 7 units (64 KiB each), none in the first


@pytest.fixture(scope="module")
def bad_corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("bad") / "bad.jsonl"
    with open(DEMO / "corpus.jsonl", "rb") as f:
        lines = [next(f) for _ in range(CORPUS_LINES)]
    for k in BAD_LINES:
        lines[k] = b'{"text": 5}\n'
    path.write_bytes(b"".join(lines))
    return path


def _recipe(tmp_path, corpus, folder: str, **extra):
    d = tmp_path / folder
    d.mkdir()
    return write_recipe(d, corpus, **extra)


def _fresh(tmp_path, recipe, name: str) -> dict[str, str]:
    out = tmp_path / name
    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    return snapshot(out)


@pytest.mark.parametrize("field, then, now", [
    ("output.shard_tokens", 15000, 20000),
    ("tokenizer.boundary", "eos", "bos"),
    ("source.min_chars", 0, 10),  # its default then
])
def test_a_changed_field_is_refused_naming_it_and_its_old_value_resumes(tmp_path, corpus, recipe, reference,
                                                                         field, then, now):
    """It said "a different recipe or different input files; re-run with the original recipe",
    naming neither the field nor its value."""
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:2").returncode == -signal.SIGKILL
    section, key = field.split(".")
    data = json.loads(recipe.read_text())
    data[section][key] = now
    changed = tmp_path / "changed.yaml"
    changed.write_text(json.dumps(data))

    r = run_prep(changed, out)
    assert r.returncode == 1
    assert r.stderr.strip() == (f"error: {out}: holds an unfinished run of another recipe: {field} was "
                                f"{json.dumps(then)}, now {json.dumps(now)}; set it back (--set "
                                f"{shlex.quote(f'{field}={then}')}) and re-run to resume it, or pass --overwrite "
                                "to discard it and start over with this recipe")
    assert len(journal_lines(out)) == 2

    r = run_prep(recipe, out)
    assert r.returncode == 0, r.stderr
    assert_complete(out, reference)


def test_a_tokenizer_file_changed_at_its_path_is_refused_saying_so(tmp_path, corpus):
    tok = tmp_path / "tokenizer.json"
    original = (DEMO / "tokenizer.json").read_bytes()
    tok.write_bytes(original)
    recipe = _recipe(tmp_path, corpus, "r", tokenizer={"path": str(tok), "boundary": "eos"})
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="journal:2").returncode == -signal.SIGKILL
    data = json.loads(original)
    data["normalizer"] = {"type": "Lowercase"}
    tok.write_text(json.dumps(data))
    r = run_prep(recipe, out)
    assert r.returncode == 1
    assert f"error: {out}: holds an unfinished run made with another tokenizer at {tok} (sha256 " in r.stderr
    assert "put that file back to resume it, or pass --overwrite" in r.stderr


def test_raising_max_bad_records_after_it_stopped_the_run_resumes(tmp_path, bad_corpus):
    """The budget's own error says "raise the limit (finished units are kept; re-run to resume)", and
    the re-run with the limit raised was refused as another recipe's run."""
    out = tmp_path / "out"
    r = run_prep(_recipe(tmp_path, bad_corpus, "low", max_bad_records=2), out)
    assert r.returncode == 1
    assert "max_bad_records: 3 records rejected so far, more than the limit 2" in r.stderr
    done = len(journal_lines(out))
    assert 0 < done < 7

    raised = _recipe(tmp_path, bad_corpus, "raised", max_bad_records=10, name="renamed")  # and renamed
    r = run_prep(raised, out)
    assert r.returncode == 0, r.stderr
    assert_complete(out, _fresh(tmp_path, raised, "fresh"))
    assert json.loads((out / "manifest.json").read_text())["recipe"]["max_bad_records"] == 10


def test_on_bad_record_error_to_skip_resumes_and_skip_to_error_stops_as_a_fresh_run(tmp_path, bad_corpus):
    out = tmp_path / "out"
    strict = _recipe(tmp_path, bad_corpus, "strict", on_bad_record="error")
    first = run_prep(strict, out)
    assert first.returncode == 1, first.stderr
    stopped_after = [e["unit"] for e in journal_lines(out)]
    assert stopped_after and len(stopped_after) < 6

    skip = _recipe(tmp_path, bad_corpus, "skip", on_bad_record="skip")
    r = run_prep(skip, out)  # the bad records are now skipped, as the user chose
    assert r.returncode == 0, r.stderr
    assert_complete(out, _fresh(tmp_path, skip, "fresh"))

    # the other way: units journaled under skip rejected records; under error they are redone, and
    # the run stops where a fresh run under error stops
    out2 = tmp_path / "out2"
    assert run_prep(skip, out2, fault="journal:4").returncode == -signal.SIGKILL
    assert any(e["num_rejects"] for e in journal_lines(out2))
    r = run_prep(strict, out2)
    assert r.returncode == 1
    assert r.stderr == first.stderr.replace(str(out), str(out2))
    kept = journal_lines(out2)  # the units that rejected nothing stay done
    assert not any(e["num_rejects"] for e in kept) and set(stopped_after) <= {e["unit"] for e in kept}


def test_a_field_the_old_recipe_lacks_is_not_only_advised_removed():
    """A key missing from the unfinished run's recipe was advised "remove it from the recipe", though
    it may be a field this prep has and the prep that began the run had not, which the user never gave."""
    from pipeline import input_changes

    tok = {"name": "t.json", "sha256": "0" * 64}
    old = {"recipe": {"dedup": "none"}, "tokenizer": tok}
    now = {"recipe": {"dedup": "none", "new_field": 3}, "tokenizer": tok}
    message = input_changes._recipe_changed("out", old, now)
    assert "new_field was not set, now 3" in message
    assert "the run was begun by a prep without that field: resume it with that prep" in message
    assert "remove it from the recipe (or its --set) if you gave it" in message
