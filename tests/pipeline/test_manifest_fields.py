"""Manifest.from_dict: every field it reads is checked for its JSON type, so each reader (verify,
inspect, the loaders, tokenize's "already complete") gets one line naming the field and the fix for a
damaged manifest, never a traceback later or a silent coercion (str(5), tuple("abc"))."""

from __future__ import annotations

import copy
import json

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.errors import PrepError
from pipeline.manifest import Manifest

FIX = "the manifest is damaged: restore manifest.json from a copy, or rebuild with `prep tokenize --overwrite`"
SHA = "0" * 64
SOUND = {
    "format_version": 1, "dtype": "uint16", "vocab_size": 300, "created_by": "prep 0.1.0",
    "tokenizer": {"name": "tok.json", "sha256": SHA, "vocab_size": 300, "boundary": "eos", "eos_id": 0},
    "splits": {"train": {"num_docs": 2, "num_tokens": 7, "shards": [
        {"name": "shard-000000", "num_docs": 2, "num_tokens": 7, "sha256": SHA}]}},
    "skipped": {"empty": 1}, "recipe": {"name": "x"},
    "failed_units": [{"unit": "a.jsonl:0", "path": "a.jsonl", "error": "boom"}],
}


def damaged(edit) -> dict:
    d = copy.deepcopy(SOUND)
    edit(d)
    return d


def shard0(d) -> dict:
    return d["splits"]["train"]["shards"][0]


def test_a_sound_manifest_reads_back_as_written():
    m = Manifest.from_dict(copy.deepcopy(SOUND))
    assert m.to_dict() == SOUND


@pytest.mark.parametrize("edit, field, value", [
    (lambda d: d.update(format_version="1"), "format_version", "'1'"),
    (lambda d: d.update(format_version=1.0), "format_version", "1.0"),
    (lambda d: d.update(format_version=True), "format_version", "True"),
    (lambda d: d.update(dtype=16), "dtype", "16"),
    (lambda d: d.update(vocab_size="300"), "vocab_size", "'300'"),
    (lambda d: d.update(tokenizer=[["name", "x"]]), "tokenizer", "[['name', 'x']]"),
    (lambda d: d.update(splits=[]), "splits", "[]"),
    (lambda d: d["splits"].update(train=[1]), "splits.train", "[1]"),
    (lambda d: d["splits"]["train"].update(num_docs=2.0), "splits.train.num_docs", "2.0"),
    (lambda d: d["splits"]["train"].update(shards={}), "splits.train.shards", "{}"),
    (lambda d: d["splits"]["train"].update(shards=["shard-000000"]), "splits.train.shards[0]", "'shard-000000'"),
    (lambda d: shard0(d).update(name=5), "splits.train.shards[0].name", "5"),
    (lambda d: shard0(d).update(num_docs="2"), "splits.train.shards[0].num_docs", "'2'"),
    (lambda d: shard0(d).update(num_tokens=None), "splits.train.shards[0].num_tokens", "None"),
    (lambda d: shard0(d).update(sha256=None), "splits.train.shards[0].sha256", "None"),
    (lambda d: d.update(skipped={"empty": "1"}), "skipped.empty", "'1'"),
    (lambda d: d.update(skipped={"empty": 1.5}), "skipped.empty", "1.5"),
    (lambda d: d.update(skipped=[1]), "skipped", "[1]"),
    (lambda d: d.update(recipe="name: x"), "recipe", "'name: x'"),
    (lambda d: d.update(created_by=None), "created_by", "None"),
    (lambda d: d.update(failed_units="abc"), "failed_units", "'abc'"),
    (lambda d: d.update(failed_units=["a.jsonl"]), "failed_units[0]", "'a.jsonl'"),
])
def test_a_wrong_typed_field_is_named_as_damage_with_the_fix(edit, field, value):
    """format_version "1" was told to upgrade prep; a skipped count "1" crashed `prep inspect` with a
    ValueError; failed_units "abc" was 3 failed units and a shard name 5 the file "5.bin"."""
    with pytest.raises(PrepError) as e:
        Manifest.from_dict(damaged(edit), where="ds/manifest.json")
    assert str(e.value).startswith(f"ds/manifest.json: {field} is {value}, not "), str(e.value)
    assert str(e.value).endswith(FIX) and "\n" not in str(e.value) and "upgrade" not in str(e.value)


@pytest.mark.parametrize("field", ["format_version", "dtype", "vocab_size", "tokenizer", "splits"])
def test_a_missing_field_is_named_as_damage_with_the_fix(field):
    """A manifest without format_version was told to upgrade prep (format_version None)."""
    with pytest.raises(PrepError) as e:
        Manifest.from_dict(damaged(lambda d: d.pop(field)), where="ds/manifest.json")
    assert str(e.value) == f"ds/manifest.json: malformed manifest, no {field} field; {FIX}"


def test_a_missing_shard_field_is_named_by_its_path():
    with pytest.raises(PrepError) as e:
        Manifest.from_dict(damaged(lambda d: shard0(d).pop("sha256")), where="ds/manifest.json")
    assert str(e.value) == f"ds/manifest.json: malformed manifest, no splits.train.shards[0].sha256 field; {FIX}"


def test_only_a_later_format_version_says_to_upgrade():
    with pytest.raises(PrepError, match=r"format_version 2; this prep reads version 1 \(upgrade prep"):
        Manifest.from_dict(damaged(lambda d: d.update(format_version=2)))
    with pytest.raises(PrepError) as e:  # no prep wrote a version below 1: damage, not an old prep
        Manifest.from_dict(damaged(lambda d: d.update(format_version=0)), where="m.json")
    assert str(e.value) == f"m.json: format_version is 0, not a version prep writes (1); {FIX}"


def test_optional_fields_may_be_absent():
    d = damaged(lambda d: [d.pop(k) for k in ("skipped", "recipe", "created_by", "failed_units")])
    m = Manifest.from_dict(d)
    assert (m.skipped, m.recipe, m.created_by, m.failed_units) == ({}, {}, "", ())


def test_a_long_wrong_value_is_cut_in_the_message():
    with pytest.raises(PrepError) as e:
        Manifest.from_dict(damaged(lambda d: d.update(recipe=["x" * 500])), where="m.json")
    assert len(str(e.value)) < 300 and "..." in str(e.value)


def test_inspect_of_a_manifest_with_a_text_skipped_count_is_one_line(tmp_path):
    """It printed the summary's first lines, then died in `{v:,}` with a ValueError traceback."""
    (tmp_path / "manifest.json").write_text(json.dumps(damaged(lambda d: d.update(skipped={"x": "1"}))))
    result = runner.invoke(app, ["inspect", str(tmp_path)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.output == f"error: {tmp_path / 'manifest.json'}: skipped.x is '1', not a whole number; {FIX}\n"


runner = CliRunner()


@pytest.mark.parametrize("command", ["inspect", "bench-loader"])
@pytest.mark.parametrize("damage, what", [
    (lambda m: m.write_text('{"format_version": 1, "dty'), "not valid JSON"),
    (lambda m: m.write_bytes(b"\xff\xfe\x00{"), "not valid JSON"),
    (lambda m: m.write_text("[1, 2]"), "not a JSON object"),
    (lambda m: m.mkdir(), "cannot be read (Is a directory)"),
], ids=["cut", "binary", "list", "directory"])
def test_a_manifest_that_is_not_json_says_what_to_do(tmp_path, command, damage, what):
    """inspect and bench-loader print read_manifest's line alone: "manifest.json: not valid JSON
    (Expecting value: line 90 column 16 (char 1970))" named no fix (verify's summary line did)."""
    damage(tmp_path / "manifest.json")
    (tmp_path / "train").mkdir()
    result = CliRunner().invoke(app, [command, str(tmp_path)])
    assert result.exit_code == 1
    line = result.output.strip()
    assert line.startswith(f"error: {tmp_path / 'manifest.json'}: {what}") and line.endswith(FIX), line
    assert "Traceback" not in result.output and len(line.splitlines()) == 1
