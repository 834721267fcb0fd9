"""A new user's recipe mistakes: each one error line naming the file, the line, the key and the fix."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.errors import PrepError
from pipeline.recipe import Recipe
from tests.conftest import DEMO_TOKENIZER, demo_texts, write_jsonl

runner = CliRunner()

GOOD = """name: t
source:
  path: c.jsonl
tokenizer:
  path: {tok}
output:
  dir: out
num_workers: 1
"""


def _error(tmp_path, text: str, sets=(), output=None) -> str:
    path = tmp_path / "r.yaml"
    path.write_text(text.replace("{tok}", str(DEMO_TOKENIZER)))
    with pytest.raises(PrepError) as e:
        Recipe.from_yaml(path, list(sets), output)
    return str(e.value).replace(str(path), "r.yaml")


@pytest.mark.parametrize("text, expected", [
    # a key error names its line ("unitbytes: unknown key" named no file and no line)
    (GOOD + "unitbytes: 100000\n", 'r.yaml:9: unitbytes: unknown key (did you mean "unit_bytes"?)'),
    (GOOD.replace("  dir: out", "  dir: out\n  shard_tokens: 1M"),
     "r.yaml:8: output.shard_tokens: expected an integer, got str '1M'"),
    # a missing key is reported at its section
    (GOOD.replace("  path: {tok}\n", "  boundary: eos\n"), "r.yaml:4: tokenizer.path: required key is missing"),
    # a value in another case found no close match
    (GOOD.replace("path: {tok}", "path: {tok}\n  boundary: EOS"),
     "r.yaml:6: tokenizer.boundary: 'EOS' is not one of eos, bos, both, none (did you mean \"eos\"? the choices "
     "are lower case)"),
    # a quoted number is a string: the fix says to drop the quotes
    (GOOD.replace("num_workers: 1", "num_workers: '4'"),
     "r.yaml:8: num_workers: '4' is not an integer or one of auto; a number in quotes is a string in YAML: write 4 "
     "without quotes"),
    # a section written twice: YAML kept the last one silently ("tokenizer.path: required key is missing")
    (GOOD + "tokenizer:\n  boundary: bos\n", "r.yaml:9: tokenizer: given twice (first at line 4); YAML keeps only the "
     "last, so merge the two into one"),
    # YAML syntax errors name the line and column ("not valid YAML: while parsing a block mapping")
    (GOOD.replace("tokenizer:", " tokenizer:"), "r.yaml:4:2: not valid YAML: expected <block end>, but found "
     "'<block mapping start>' (while parsing a block mapping at line 1); check this line's indentation"),
    (GOOD.replace("  dir: out", "\tdir: out"), "r.yaml:7:1: not valid YAML: found character '\\t' that cannot start "
     "any token; YAML indents with spaces, not tabs"),
    # an empty recipe, or one that is a list
    ("", "r.yaml: the recipe is empty; it needs name, source, tokenizer and output"),
    ("# a comment only\n", "r.yaml: the recipe is empty; it needs name, source, tokenizer and output"),
    ("- c.jsonl\n", "r.yaml:1: the recipe is a list, not a mapping of keys; it needs name, source, tokenizer and output"),
])
def test_a_recipe_mistake_names_the_file_line_key_and_fix(tmp_path, text, expected):
    assert _error(tmp_path, text).startswith(expected)


def test_a_mistake_given_by_set_names_the_set_not_a_line(tmp_path):
    assert _error(tmp_path, GOOD, ["output.shard_tokens=abc"]) == \
        "--set output.shard_tokens: expected an integer, got str 'abc'"
    assert _error(tmp_path, GOOD, ["source.format=jsnl"]).startswith(
        "--set source.format: 'jsnl' is not one of jsonl, csv, tsv, parquet, text, hf (did you mean \"jsonl\"?)")


def test_set_reaches_into_a_section_written_as_one_value(tmp_path):
    """`source: c.jsonl`, `tokenizer: gpt2` are their path alone (and now `output: out/x` its dir);
    `--set source.min_chars=10` on such a recipe was "source is not a section"."""
    (tmp_path / "c.jsonl").write_text('{"text": "a"}\n')
    path = tmp_path / "r.yaml"
    path.write_text(f"name: t\nsource: {tmp_path / 'c.jsonl'}\ntokenizer: {DEMO_TOKENIZER}\noutput: {tmp_path / 'o'}\n")
    r = Recipe.from_yaml(path, ["source.min_chars=10", "tokenizer.boundary=bos", "output.shard_tokens=5"])
    assert (r.sources[0].min_chars, r.tokenizer.boundary, r.output.shard_tokens) == (10, "bos", 5)
    assert r.sources[0].path == str(tmp_path / "c.jsonl") and r.output.dir == str(tmp_path / "o")
    path.write_text(f"name: t\nsources: [{tmp_path / 'c.jsonl'}]\ntokenizer: {DEMO_TOKENIZER}\noutput: o\n")
    assert Recipe.from_yaml(path, ["sources.0.min_chars=3"]).sources[0].min_chars == 3


def test_a_run_error_about_a_recipe_key_names_its_line(tmp_path, monkeypatch):
    """Errors found once the run starts (no input file matches, no such tokenizer) name the line too."""
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "c.jsonl", demo_texts(5))
    (tmp_path / "r.yaml").write_text(GOOD.replace("c.jsonl", "nosuch.jsonl").replace("{tok}", str(DEMO_TOKENIZER)))
    result = runner.invoke(app, ["tokenize", "-r", "r.yaml", "--no-progress"])
    assert result.exit_code == 1
    assert result.output.startswith("error: r.yaml:3: source.path: no file matches 'nosuch.jsonl'"), result.output
    (tmp_path / "r.yaml").write_text(GOOD.replace("{tok}", "nosuch.json"))
    result = runner.invoke(app, ["tokenize", "-r", "r.yaml", "--no-progress"])
    assert result.output.startswith("error: r.yaml:5: tokenizer.path: nosuch.json does not exist"), result.output
    result = runner.invoke(app, ["tokenize", "-r", "r.yaml", "--no-progress", "--set", "tokenizer.path=other.json"])
    assert result.output.startswith("error: --set tokenizer.path: other.json does not exist"), result.output


@pytest.mark.parametrize("item, expected", [
    ("filters.x=[a", "--set 'filters.x=[a': not valid YAML: expected ',' or ']', but got '<stream end>' at character 3 "
     "(while parsing a flow sequence); close the brackets, or quote the value in YAML to mean this text: "
     "--set 'filters.x=\"[a\"'"),
    ("source.min_chars={a: 1", "--set 'source.min_chars={a: 1': not valid YAML: expected ',' or '}'"),
    ('name="abc', "--set 'name=\"abc': not valid YAML: found unexpected end of stream at character 5 (while scanning "
     "a quoted scalar); close the quote"),
])
def test_a_set_value_that_is_cut_yaml_is_an_error_naming_the_set(tmp_path, item, expected):
    """A value whose bracket or quote is left open was taken as the plain string ("[a")."""
    assert _error(tmp_path, GOOD, [item]).startswith(expected)


@pytest.mark.parametrize("raw, value", [
    ("out/x", "out/x"), ("data/*.jsonl", "data/*.jsonl"), ("*.jsonl", "*.jsonl"),  # `*` starts a YAML alias
    ("{url}\\n\\n{text}", "{url}\\n\\n{text}"),  # the README's text_template example: a mapping, then more
    ("2020-13-45", "2020-13-45"),  # a timestamp to YAML, and no date: was a ValueError traceback
    ("[1, 2]", [1, 2]), ("null", None),
])
def test_a_set_value_yaml_cannot_read_otherwise_is_its_text(raw, value):
    from pipeline.recipe_values import apply_overrides
    assert apply_overrides({}, [f"source.path={raw}"]) == {"source": {"path": value}}


@pytest.mark.parametrize("line, expected", [
    ("name: 2020-13-45", "r.yaml:1:7: name: YAML cannot read '2020-13-45' (month must be in 1..12); quote it to mean "
     "the text: '2020-13-45'"),
    ("name: !!int abc", "r.yaml:1:7: name: YAML cannot read 'abc' (invalid literal for int() with base 10: 'abc'); "
     "remove the tag"),
    ("name: !custom t", "r.yaml:1:7: name: YAML cannot read 't' (could not determine a constructor for the tag "
     "'!custom'); remove the tag"),
])
def test_a_recipe_value_yaml_parses_but_cannot_construct_names_its_line(tmp_path, line, expected):
    """A ValueError traceback (an impossible date YAML takes for a timestamp) or a ConstructorError one."""
    assert _error(tmp_path, GOOD.replace("name: t", line)) == expected


def test_an_environment_variable_in_a_recipe_path_is_said_to_be_unexpanded(tmp_path, monkeypatch):
    """`path: $DATA/c.jsonl` looked for a directory literally named `$DATA` and said only "no file
    matches"; prep expands no variable in a recipe, the shell does in a --set."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATA", str(tmp_path))
    write_jsonl(tmp_path / "c.jsonl", demo_texts(5))
    (tmp_path / "r.yaml").write_text(GOOD.replace("c.jsonl", "$DATA/c.jsonl").replace("{tok}", str(DEMO_TOKENIZER)))
    result = runner.invoke(app, ["tokenize", "-r", "r.yaml", "--no-progress"])
    assert result.exit_code == 1
    message = " ".join(result.output.split())  # the console wraps at its width
    assert message.startswith("error: r.yaml:3: source.path: no file matches '$DATA/c.jsonl' ($DATA is not expanded: a "
                              "recipe's paths are taken as written; give the path where the shell expands it: "
                              '--set source.path="$DATA/c.jsonl")'), message


def test_a_section_the_file_gets_wrong_keeps_its_line_beside_a_set_below_it(tmp_path):
    """With --output (output.dir) given, `output: [out]` in the file was reported with no file or line, as if
    the command line had written it; a section only --set writes still names the --set."""
    assert _error(tmp_path, GOOD.replace("output:\n  dir: out", "output: [out]"), output="o") == \
        "r.yaml:6: output: expected a mapping of keys, got list ['out']"
    assert _error(tmp_path, GOOD, ["filters.x=1"]).startswith("--set filters: unknown key")


def test_an_environment_variable_in_one_entry_of_a_path_list_names_that_entrys_set(tmp_path, monkeypatch):
    """The hint said `--set source.path="$DATA/b.jsonl"` for one entry of a list: that --set replaced the
    whole list, and the run went on without the other inputs (review). It names the entry by its index."""
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "c.jsonl", demo_texts(5))
    text = GOOD.replace("  path: c.jsonl", "  path: [c.jsonl, $DATA/b.jsonl]").replace("{tok}", str(DEMO_TOKENIZER))
    (tmp_path / "r.yaml").write_text(text)
    result = runner.invoke(app, ["tokenize", "-r", "r.yaml", "--no-progress"])
    assert result.exit_code == 1
    message = " ".join(result.output.split())
    assert 'give the path where the shell expands it: --set source.path.1="$DATA/b.jsonl")' in message, message
