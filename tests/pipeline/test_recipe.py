"""Recipes are validated up front; user mistakes are one line and exit code 1."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.errors import PrepError
from pipeline.recipe import Recipe
from pipeline.recipe_values import apply_overrides
from pipeline.source_files import elsewhere_hint

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.mark.parametrize("recipe", sorted((REPO / "recipes").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_recipe_validates(recipe, monkeypatch):
    monkeypatch.chdir(REPO)
    raw = yaml.safe_load(recipe.read_text())
    if raw.get("source", {}).get("format") == "hf":
        r = Recipe.from_dict(raw)  # the hub dataset is not reachable here; the structure must be valid
    else:
        r = Recipe.from_yaml(recipe)
        assert r.sources[0].expand_files()
    assert r.name and r.output.dir


def test_openwebtext_recipe_matches_nanogpt():
    r = Recipe.from_yaml(REPO / "recipes" / "openwebtext.yaml")
    assert r.output.val_fraction == 0.0005 and r.output.seed == 2357
    assert r.sources[0].path == "Skylion007/openwebtext" and r.tokenizer.path == "gpt2"
    assert r.tokenizer.boundary == "eos"


BASE = {"name": "t", "source": {"path": "x.jsonl"}, "tokenizer": {"path": "t.json"}, "output": {"dir": "o"}}


@pytest.mark.parametrize("patch,message", [
    ({"outptu": {}}, 'outptu: unknown key (did you mean "output"?)'),
    ({"output": {"dir": "o", "shard_token": 5}}, 'output.shard_token: unknown key (did you mean "shard_tokens"?)'),
    ({"output": {"dir": "o", "shard_tokens": "many"}}, "output.shard_tokens: expected an integer, got str 'many'"),
    ({"output": {"dir": "o", "val_fraction": 2}}, "output.val_fraction: must be in [0, 1), got 2.0"),
    ({"tokenizer": {"path": "t", "boundary": "eso"}}, "tokenizer.boundary: 'eso' is not one of eos, bos, both, none"),
    ({"num_workers": 0}, "num_workers: must be >= 1"),
    ({"on_bad_record": "ignore"}, "on_bad_record: 'ignore' is not one of skip, error"),
    ({"source": {"path": "x.weird"}}, "source.format: cannot infer the format"),
    ({"source": {"path": "x.weird"}}, "; set source.format to one of jsonl, csv"),
    ({"source": {"path": "data/docs.tar.gz"}}, "; a .tar archive is not read: extract it and point source.path"),
    ({"source": {"path": "data/*.ZIP"}}, "; a .zip archive is not read: extract it"),
    ({"source": {"path": "x.jsonl.lz4"}}, "; .lz4 compression is not read (.gz, .zst, .bz2 and .xz are): decompress"),
    ({"source": {"path": "cache/data-00000-of-00001.arrow"}},
     "is read with source.format: hf, source.path: arrow and source.data_files: 'cache/data-00000-of-00001.arrow'"),
    ({"output": None}, "output: expected a mapping"),
])
def test_recipe_errors_name_the_key(patch, message):
    with pytest.raises(PrepError) as e:
        Recipe.from_dict({**BASE, **patch})
    assert message in str(e.value)


def test_a_list_of_text_fields_names_text_template_with_the_template_for_them():
    """`text_field: [title, text]` (Megatron's --json-keys habit) said only "expected a string, got
    list"; it now names text_template, with the template joining those fields, which reads as YAML to
    that template and builds the recipe."""
    for recipe, where in (({**BASE, "source": {"path": "x.jsonl", "text_field": ["title", "text"]}}, "source"),
                          (apply_overrides(BASE, ["source.text_field=[title, text]"]), "source"),
                          ({**BASE, "source": None, "sources": [{"path": "a.jsonl"},
                                                                {"path": "x.jsonl", "text_field": ["title", "text"]}]},
                           "sources[1]")):
        with pytest.raises(PrepError) as e:
            Recipe.from_dict({k: v for k, v in recipe.items() if v is not None})
        message = str(e.value)
        assert message.startswith(f"{where}.text_field: one field, got a list ['title', 'text']; to join fields into "
                                  f"one document use {where}.text_template instead, e.g. text_template: ")
        example = re.search(r'e\.g\. (text_template: ".*?")', message).group(1)
        assert yaml.safe_load(example) == {"text_template": "{title}\n\n{text}"}
        fixed = {**BASE, "source": {"path": "x.jsonl", **yaml.safe_load(example)}}
        assert Recipe.from_dict(fixed).sources[0].text_template == "{title}\n\n{text}"
    with pytest.raises(PrepError, match=r"^source\.text_field: expected a string, got int 5$"):
        Recipe.from_dict({**BASE, "source": {"path": "x.jsonl", "text_field": 5}})


def test_numbers_in_exponent_form_are_numbers():
    """YAML 1.1 reads 1e8 (no dot, no exponent sign) as a string; a whole one is an integer field's value."""
    text = "name: t\nsource: x.jsonl\ntokenizer: t.json\noutput: {dir: o, shard_tokens: SHARD, val_fraction: 2e-3}\n"
    for shard, want in (("1e8", 100_000_000), ("1.5e9", 1_500_000_000), ("1E+6", 1_000_000), ("1.0e+8", 100_000_000),
                        ("100_000_000", 100_000_000)):
        r = Recipe.from_dict(yaml.safe_load(text.replace("SHARD", shard)), validate=False)
        assert r.output.shard_tokens == want and type(r.output.shard_tokens) is int, shard
        assert r.output.val_fraction == 0.002
    assert Recipe.from_dict(apply_overrides(BASE, ["unit_bytes=1e6"])).unit_bytes == 1_000_000
    assert Recipe.from_dict({**BASE, "source": {"path": "x.jsonl", "text_field": "1e8"}}).sources[0].text_field == "1e8"
    with pytest.raises(PrepError, match=r"^output\.shard_tokens: expected an integer, got float 0\.25$"):
        Recipe.from_dict(yaml.safe_load(text.replace("SHARD", "2.5e-1")))


def test_sources_that_are_not_a_list_say_so():
    """`--set sources=null` beside `source:` was told to give either source or sources, not both."""
    multi = {**{k: v for k, v in BASE.items() if k != "source"}, "sources": [{"path": "a.jsonl"}, {"path": "b.jsonl"}]}
    fix = "recipe: `sources:` must be a list of sources, such as [{path: a.jsonl}, {path: b.csv}], got "
    for data, got in [(apply_overrides(BASE, ["sources=null"]), "null; or leave it out to read `source:`"),
                      (apply_overrides(multi, ["sources=null"]), "null"),
                      ({**BASE, "sources": {"path": "a.jsonl"}}, "dict {'path': 'a.jsonl'}; or leave it out to read "
                                                                 "`source:`"),
                      (apply_overrides(multi, ["sources=a.jsonl"]), "str 'a.jsonl'")]:
        with pytest.raises(PrepError) as e:
            Recipe.from_dict(data)
        assert str(e.value) == fix + got


def test_an_empty_sources_list_says_it_is_empty(tmp_path):
    """`sources: []` was told "missing `source:`": the key was there, its list empty."""
    no_source = {k: v for k, v in BASE.items() if k != "source"}
    fix = "`sources:` is an empty list; give at least one source, such as sources: [{path: a.jsonl}]"
    for data, beside in [({**no_source, "sources": []}, ""),
                         (apply_overrides(BASE, ["sources=[]"]), "; or leave it out to read `source:`")]:
        with pytest.raises(PrepError) as e:
            Recipe.from_dict(data)
        assert str(e.value) == f"recipe: {fix}{beside}"
    (tmp_path / "r.yaml").write_text("name: t\nsources: []\ntokenizer: {path: t.json}\noutput: {dir: o}\n")
    with pytest.raises(PrepError) as e:
        Recipe.from_yaml(tmp_path / "r.yaml")
    assert str(e.value) == f"{tmp_path / 'r.yaml'}: {fix}"
    with pytest.raises(PrepError, match="missing `source:`"):  # no key at all: still told it is missing
        Recipe.from_dict(no_source)


def test_missing_section():
    with pytest.raises(PrepError, match="missing `tokenizer:`"):
        Recipe.from_dict({k: v for k, v in BASE.items() if k != "tokenizer"})


def test_overrides_apply_dotted_keys():
    data = apply_overrides(BASE, ["output.shard_tokens=5000", "num_workers=3", "source.text_field=body"])
    r = Recipe.from_dict(data)
    assert r.output.shard_tokens == 5000 and r.num_workers == 3 and r.sources[0].text_field == "body"
    assert BASE["output"] == {"dir": "o"}  # the original is untouched


def test_overrides_name_the_indices_a_list_has():
    three = {**{k: v for k, v in BASE.items() if k != "source"}, "sources": [{"path": f"{i}.jsonl"} for i in range(3)]}
    assert apply_overrides(three, ["sources.2.path=x.csv"])["sources"][2] == {"path": "x.csv"}
    for key, part in [("sources.5.path", "5"), ("sources.3.path", "3"), ("sources.-9.path", "-9"),
                      ("sources.-1.path", "-1"), ("sources.a.path", "a"), ("sources.\u00b2.path", "\u00b2"),
                      ("sources.7", "7")]:
        with pytest.raises(PrepError) as e:
            apply_overrides(three, [f"{key}=x"])
        assert str(e.value) == f"--set {key}: {part!r} is not an index of sources, which holds 3 items: give an " \
                               "index from 0 to 2"
    with pytest.raises(PrepError, match=r"^--set source\.path\.1: '1' is not an index of source\.path, which holds "
                                        r"1 item: give an index from 0 to 0$"):
        apply_overrides({**BASE, "source": {"path": ["a.jsonl"]}}, ["source.path.1=b.jsonl"])



def test_overrides_take_sources_0_for_a_recipe_with_one_source():
    """Errors call a lone `source:` sources[0]; `--set sources.0.path=x` set it (was a mapping {"0": ...}
    beside it, refused as "`sources:` must be a list")."""
    r = Recipe.from_dict(apply_overrides(BASE, ["sources.0.text_field=body", "sources.0.min_chars=3"]))
    assert len(r.sources) == 1 and r.sources[0].text_field == "body" and r.sources[0].min_chars == 3
    with pytest.raises(PrepError, match=r"^--set sources\.1\.path: '1' is not an index of sources, which holds 1 item"):
        apply_overrides(BASE, ["sources.1.path=x"])


@pytest.mark.parametrize("item,says", [("=x", "no key before the ="), (" =x", "no key before the ="),
                                       ("output..dir=x", "'output..dir' has an empty part"),
                                       ("output.=x", "'output.' has an empty part")])
def test_an_override_with_an_empty_key_says_so(item, says):
    with pytest.raises(PrepError) as e:
        apply_overrides(BASE, [item])
    assert str(e.value) == f"--set {item!r}: {says}; for example --set output.dir=out/x"

@pytest.mark.parametrize("item", ["output.dir=", "output.dir=  ", "max_bad_records="])
def test_an_override_with_an_empty_value_says_so(item):
    """YAML reads "" as null: `--set output.dir=` (`--set output.dir=$OUT`, OUT unset) said
    "output.dir: expected a string, got NoneType None"."""
    key = item.split("=")[0]
    with pytest.raises(PrepError) as e:
        apply_overrides(BASE, [item])
    assert str(e.value) == (f"--set {item!r}: the value after = is empty (an unset shell variable?); give "
                            f"{key}'s value (null for none, where the key allows it), or leave this --set out")
    assert apply_overrides(BASE, ["max_bad_records=null"])["max_bad_records"] is None  # null said so is null


def test_content_dict_excludes_run_only_settings():
    a = Recipe.from_dict({**BASE, "num_workers": 1})
    b = Recipe.from_dict({**BASE, "num_workers": 8, "output": {"dir": "elsewhere"}, "batch_docs": 7,
                          "tokenizer": {"path": "t.json", "backend": "hf"}})
    assert a.content_dict() == b.content_dict()


def test_records_field_is_for_jsonl_and_absent_from_older_recipes_content():
    """A key added after datasets were made drops out of content_dict at its default: those datasets
    still match their recipe (re-running on a finished dataset, resuming an unfinished run)."""
    assert "records_field" not in Recipe.from_dict(BASE).content_dict()["sources"][0]
    with_field = Recipe.from_dict({**BASE, "source": {"path": "a.json", "records_field": "data"}})
    assert with_field.content_dict()["sources"][0]["records_field"] == "data"
    with pytest.raises(PrepError, match=r"source\.records_field: only for format jsonl.* for format csv"):
        Recipe.from_dict({**BASE, "source": {"path": "a.csv", "records_field": "data"}})


def test_delimiter_is_one_character_for_csv_and_absent_from_older_recipes_content():
    assert "delimiter" not in Recipe.from_dict({**BASE, "source": {"path": "a.csv"}}).content_dict()["sources"][0]
    semi = Recipe.from_dict({**BASE, "source": {"path": "a.csv", "delimiter": ";"}})
    assert semi.content_dict()["sources"][0]["delimiter"] == ";"
    for path, delimiter in [("a.jsonl", ";"), ("a.csv", ";;"), ("a.csv", '"'), ("a.csv", "\n"), ("a.csv", "")]:
        with pytest.raises(PrepError, match=r"source\.delimiter: only for format csv or tsv, one character"):
            Recipe.from_dict({**BASE, "source": {"path": path, "delimiter": delimiter}})
    for wide in ("\u00a7", "\u00fe", "\u2502", "\U0001f600"):  # 2, 2, 3 and 4 bytes in UTF-8: read (test_reader_csv)
        assert Recipe.from_dict({**BASE, "source": {"path": "a.csv", "delimiter": wide}}).sources[0].delimiter == wide
    with pytest.raises(PrepError, match=r"source\.delimiter: '\\udca7' is a lone surrogate, not a character of UTF-8"):
        Recipe.from_dict({**BASE, "source": {"path": "a.csv", "delimiter": "\udca7"}})  # --set with a Latin-1 byte


def test_columns_name_a_headerless_csvs_columns_and_are_absent_from_older_recipes_content():
    assert "columns" not in Recipe.from_dict({**BASE, "source": {"path": "a.tsv"}}).content_dict()["sources"][0]
    named = Recipe.from_dict({**BASE, "source": {"path": "a.tsv", "columns": ["id", "text"]}})
    assert named.content_dict()["sources"][0]["columns"] == ["id", "text"]
    for path, columns in [("a.jsonl", ["text"]), ("a.csv", []), ("a.csv", ["a", "a"]), ("a.csv", ["a", ""])]:
        with pytest.raises(PrepError, match=r"source\.columns: only for format csv or tsv without a header row"):
            Recipe.from_dict({**BASE, "source": {"path": path, "columns": columns}})


def test_quoting_is_for_csv_and_absent_from_older_recipes_content():
    assert "quoting" not in Recipe.from_dict({**BASE, "source": {"path": "a.tsv"}}).content_dict()["sources"][0]
    none = Recipe.from_dict({**BASE, "source": {"path": "a.tsv", "quoting": "none"}})
    assert none.content_dict()["sources"][0]["quoting"] == "none"
    with pytest.raises(PrepError, match=r"source\.quoting: only for format csv or tsv \(this source is jsonl\)"):
        Recipe.from_dict({**BASE, "source": {"path": "a.jsonl", "quoting": "none"}})
    with pytest.raises(PrepError, match=r"source\.quoting"):
        Recipe.from_dict({**BASE, "source": {"path": "a.csv", "quoting": "never"}})


@pytest.mark.parametrize("recipe_text,message", [
    ("name: t\nsource: {path: nowhere/*.jsonl}\ntokenizer: {path: TOK}\noutput: {dir: OUT}\n", "no file matches"),
    ("name: t\nsource: {path: CORPUS}\ntokenizer: {path: nowhere.json}\noutput: {dir: OUT}\n", "does not exist"),
    ("name: t\nsource: {path: CORPUS}\ntokenizer: {path: TOK}\noutput: {dir: OUT, seeed: 1}\n",
     'did you mean "seed"'),
    ("name: t\nsource: {path: CORPUS}\ntokenizer: {path: TOK}\noutput: {dir: OUT}\nnum_workers: [1\n", "not valid YAML"),
    ("name: t\nsource: {path: CORPUS}\ntokenizer: {path: TOK, boundary: bos, bos_token: '<nope>'}\noutput: {dir: OUT}\n",
     "is not a token of"),
    ("source: {path: CORPUS}\ntokenizer: {path: TOK}\noutput: {dir: OUT}\n",
     "name: required key is missing (the dataset's name, recorded in its manifest: add `name: my-corpus`"),
    ("name: t\nsources: [{path: CORPUS}, {format: jsonl}]\ntokenizer: {path: TOK}\noutput: {dir: OUT}\n",
     "sources[1].path: required key is missing (the input: a file, glob"),
    ("name: t\nsource: {path: CORPUS}\ntokenizer: {path: TOK}\noutput: {seed: 1}\n",
     "output.dir: required key is missing (the directory the dataset is written to; --output DIR sets it too)"),
])
def test_cli_recipe_errors_are_one_line_exit_1(tmp_path, demo_tokenizer, recipe_text, message):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "hi"}\n')
    text = (recipe_text.replace("CORPUS", str(corpus)).replace("TOK", str(demo_tokenizer))
            .replace("OUT", str(tmp_path / "out")))
    (tmp_path / "r.yaml").write_text(text)
    result = runner.invoke(app, ["tokenize", "--recipe", str(tmp_path / "r.yaml"), "--no-progress"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("output_section", ["", "output:\n", "output: {seed: 3}\n", "output: {dir: elsewhere}\n"])
def test_cli_output_option_stands_for_output_dir(tmp_path, demo_tokenizer, output_section):
    """--output DIR is output.dir: a recipe may leave the key, or the whole section, out."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "hello world"}\n' * 3)
    (tmp_path / "r.yaml").write_text(f"name: t\nsource: {{path: {corpus}}}\ntokenizer: {{path: {demo_tokenizer}}}\n"
                                     + output_section)
    result = runner.invoke(app, ["tokenize", "-r", str(tmp_path / "r.yaml"), "-o", str(tmp_path / "b"),
                                 "--no-progress"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "b" / "manifest.json").exists() and not (tmp_path / "elsewhere").exists()


def test_cli_missing_recipe_file(tmp_path):
    result = runner.invoke(app, ["tokenize", "--recipe", str(tmp_path / "none.yaml")])
    assert result.exit_code == 1 and "does not exist" in result.output


def test_a_recipe_not_in_utf8_or_a_directory_is_named_with_the_fix(tmp_path):
    text = "name: t\nsource: {path: x.jsonl}\ntokenizer: {path: t.json}\noutput: {dir: o}\n"
    latin1 = tmp_path / "r.yaml"
    latin1.write_bytes(text.encode() + "# caf\u00e9 corpus\n".encode("latin-1"))
    with pytest.raises(PrepError, match=rf"^{re.escape(str(latin1))}: byte 0xe9 at offset {len(text) + 5} \(line 5\) is not UTF-8; "
                                        r"save the recipe as UTF-8 \(from Latin-1: iconv -f latin1 -t utf-8 "):
        Recipe.from_yaml(latin1, validate=False)
    latin1.write_text("# caf\u00e9 corpus\n" + text, encoding="utf-8")  # the fix
    assert Recipe.from_yaml(latin1, validate=False).name == "t"
    with pytest.raises(PrepError, match=rf"^--recipe: {re.escape(str(tmp_path))} is a directory; give the recipe "
                                        r"file in it \(r\.yaml\)$"):
        Recipe.from_yaml(tmp_path, validate=False)
    with pytest.raises(PrepError, match=r"is a directory; give the recipe file \(a \.yaml file\)$"):
        Recipe.from_yaml((tmp_path / "empty").mkdir() or tmp_path / "empty", validate=False)


@pytest.mark.parametrize("fmt", [None, "jsonl"])
def test_a_file_path_ending_in_a_slash_says_to_remove_it(tmp_path, monkeypatch, fmt):
    """Not "run prep from" the directory it runs from: Path(base) / "c.jsonl/" drops the slash, so
    elsewhere_hint found the file beside the recipe, where os.path.exists("c.jsonl/") had not."""
    (tmp_path / "c.jsonl").write_text('{"text": "hi"}\n')
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({**BASE, "source": {"path": "c.jsonl/", "format": fmt}}))
    monkeypatch.chdir(tmp_path)
    assert elsewhere_hint("c.jsonl/", str(recipe)) == ""
    with pytest.raises(PrepError) as e:
        Recipe.from_yaml(recipe).sources[0].expand_files()
    # from the recipe's checks (format inferred), at its line in the recipe; or from expand_files itself
    assert re.fullmatch(rf"({re.escape(str(recipe))}:\d+: )?source\.path: 'c\.jsonl/' names a file but ends in "
                        r"'/'; remove the '/' \('c\.jsonl'\)", str(e.value)), str(e.value)
    assert Recipe.from_yaml(recipe, overrides=["source.path=c.jsonl"]).sources[0].expand_files() == ["c.jsonl"]


def test_cli_set_override(tmp_path, demo_tokenizer):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "hello world"}\n' * 3)
    (tmp_path / "r.yaml").write_text(f"name: t\nsource: {{path: {corpus}}}\ntokenizer: {{path: {demo_tokenizer}}}\n"
                                     f"output: {{dir: {tmp_path / 'a'}}}\n")
    result = runner.invoke(app, ["tokenize", "-r", str(tmp_path / "r.yaml"), "--set", "output.val_fraction=0",
                                 "--set", f"output.dir={tmp_path / 'b'}", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "b" / "manifest.json").exists() and not (tmp_path / "a").exists()


@pytest.mark.parametrize("source", ["{path: data/c.jsonl}", "{path: 'data/*.jsonl', format: jsonl}",
                                    "{path: data, format: jsonl}", "{path: [data/c.jsonl]}",
                                    "{path: data}", "{path: 'data/*'}"])  # the last two fail the recipe's checks
def test_cli_relative_paths_found_from_the_recipe_name_where_to_run(tmp_path, demo_tokenizer, monkeypatch, source):
    """Relative paths resolve against the working directory; a recipe run from elsewhere whose paths
    exist beside it (or beside its parent, as the demo's do) gets the directory to run from."""
    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    (proj / "data" / "c.jsonl").write_text('{"text": "hello world"}\n' * 3)
    (proj / "tok").mkdir()
    (proj / "tok" / "tokenizer.json").write_bytes(Path(demo_tokenizer).read_bytes())
    (proj / "recipes").mkdir()
    recipe = proj / "recipes" / "r.yaml"
    recipe.write_text(f"name: t\nsource: {source}\ntokenizer: {{path: tok/tokenizer.json}}\n"
                      "output: {dir: out}\n")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")

    def error(*sets):
        result = runner.invoke(app, ["tokenize", "-r", str(recipe), "--no-progress", *sum((["--set", s] for s in sets), [])])
        assert result.exit_code == 1, result.output
        return result.output

    told = f"relative paths resolve against the current directory {tmp_path / 'elsewhere'}, not the recipe's; " \
           f"run prep from {proj}, or give that path"
    message = error()  # the recipe's checks (sources) come before the tokenizer's load
    assert told in message
    if "format" in source:
        assert message.startswith(f"error: {recipe}:3: tokenizer.path: tok/tokenizer.json does not exist")
        assert f"({proj / 'tok' / 'tokenizer.json'} exists: " in message
    message = error(f"tokenizer.path={proj / 'tok' / 'tokenizer.json'}")
    assert message.startswith((f"error: {recipe}:2: source.path:", f"error: {recipe}:2: source.format: cannot infer"))
    assert told in message
    assert message.count("current directory") == 1 and "fix the path or glob" not in message
    # a missing path that is nowhere near the recipe keeps the plain error
    message = error(f"tokenizer.path={proj / 'tok' / 'tokenizer.json'}", "source.path=nowhere/c.jsonl")
    assert "no file matches 'nowhere/c.jsonl'" in message and "run prep from" not in message
    monkeypatch.chdir(proj)  # the fix
    result = runner.invoke(app, ["tokenize", "-r", str(recipe), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert (proj / "out" / "manifest.json").exists()
