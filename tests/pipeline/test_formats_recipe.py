"""Recipe keys of the readers and filters: validated up front, credentials never reach the manifest."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import PrepError
from pipeline.filters import RecordError, TextExtractor
from pipeline.recipe import Recipe

BASE = {"name": "t", "source": {"path": "x.jsonl"}, "tokenizer": {"path": "t.json"}, "output": {"dir": "o"}}


def with_source(**keys) -> dict:
    return {**BASE, "source": {**BASE["source"], **keys}}


@pytest.mark.parametrize("patch,message", [
    (with_source(text_template="{title"), "source.text_template: '{title' is not a valid template"),
    (with_source(text_template="plain"), "source.text_template: 'plain' names no field"),
    (with_source(text_template="{0}"), "source.text_template: field {0} in '{0}': name a record field"),
    (with_source(text_template="{title!x}"),
     "source.text_template: {title!x} in '{title!x}': !x is not a conversion; use !r, !s or !a, or none"),
    (with_source(text_template="{a} {text:zz}"), "source.text_template: {text:zz} in '{a} {text:zz}': :zz formats "
                                                 "no value (Unknown format code 'z'"),
    (with_source(text_template="{text!r:d}"), "source.text_template: {text!r:d} in '{text!r:d}': :d formats no "
                                              "string (what !r makes of every value)"),
    (with_source(text_template="{text:>{w}}"), "{text:>{w}} in '{text:>{w}}': a format spec cannot hold a field"),
    (with_source(min_chars=-1), "source.min_chars: must be >= 0"),
    (with_source(min_chars=10, max_chars=5), "source.max_chars: must be >= min_chars (10)"),
    (with_source(max_record_bytes=0), "source.max_record_bytes: must be positive or null"),
    (with_source(encoding_errors="ignore"), "source.encoding_errors: 'ignore' is not one of skip, replace"),
    (with_source(doc_separator="\n"), "source.doc_separator: only for format text"),
    (with_source(streaming=True), "source.streaming: only for format hf (this source is jsonl)"),
    (with_source(split="test"), "source.split: only for format hf"),
    (with_source(storage_options="anon"), "source.storage_options: expected a mapping, got str 'anon'"),
    (with_source(text_feild="x"), 'source.text_feild: unknown key (did you mean "text_field"?)'),
    ({**BASE, "source": {"path": "a.txt", "text_template": "{x}"}}, "format text has no fields"),
    ({**BASE, "source": {"path": ["a", "b"], "format": "hf"}}, "source.path: format hf takes one dataset"),
    ({**BASE, "dedup": "fuzzy"}, "dedup: 'fuzzy' is not one of none, exact"),
    ({**BASE, "sources": [{"path": "a.csv"}, {"path": "b.txt", "doc_separator": ""}]},
     "sources[1].doc_separator: only for format text, and not empty"),
])
def test_reader_keys_are_checked(patch, message):
    data = dict(patch)
    if "sources" in data:
        data.pop("source")
    with pytest.raises(PrepError) as e:
        Recipe.from_dict(data)
    assert message in str(e.value)


def test_a_template_spec_that_fits_some_values_is_checked_per_record():
    """{n:05d} formats an integer: accepted here; a record whose n it does not fit is a bad record."""
    for template in ("{n:05d}", "{x:>10} {y:.2f}", "{x!r:>10}", "{n:,}"):
        assert Recipe.from_dict(with_source(text_template=template)).sources[0].text_template == template
    extract = TextExtractor("text", "{title} #{n:03d}")
    assert extract({"title": "a", "n": 7}) == "a #007"
    for n, shown in (("7", "str '7'"), (2.5, "float 2.5"), ("x" * 50, f"str '{'x' * 40}...'")):
        with pytest.raises(RecordError) as e:
            extract({"title": "a", "n": n})
        assert e.value.reason == "unformattable_field"
        assert e.value.detail.startswith(f"{{n:03d}} does not fit 'n', {shown} (Unknown format code 'd'"), e.value.detail
    assert extract.many([{"title": "a", "n": 1}, {"title": "b", "n": "2"}]) is None  # then one at a time
    with pytest.raises(RecordError, match="unformattable_field"):
        TextExtractor("text", "{n:c}")({"n": 1 << 40})  # OverflowError: past U+10FFFF


def test_a_template_width_or_number_precision_past_the_bound_is_refused_unmade(monkeypatch):
    """{text:>1000000000} made a 1 GB string at validation (a sample formatted with its spec) and would
    pad every record to it; {text:>9223372036854775807} was a MemoryError traceback. Refused, naming the
    field, before anything is formatted with it; a string's precision (a cut) may be any size."""
    from pipeline import filters
    formatted = []

    def recording_format(value, spec):  # a precision past 10,000 only on a string, which it cuts
        cuts = [int(n) for n in re.findall(r"\.(\d+)", spec)]
        widths = [int(n) for n in re.findall(r"\d+", re.sub(r"\.\d+", "", spec))]
        assert max(widths, default=0) <= 10_000 and (max(cuts, default=0) <= 10_000 or isinstance(value, str)), spec
        formatted.append(spec)
        return format(value, spec)
    monkeypatch.setattr(filters, "format", recording_format, raising=False)  # what _check_spec calls
    width = "give at most 10,000 (a width aligns short values, as {text:>20})"
    digits = "give at most 10,000 (only a string's precision, which cuts it, may be larger)"
    for spec, said in ((">1000000000", f"width 1,000,000,000 pads every value to that many characters; {width}"),
                       ("0>10001", f"width 10,001 pads every value to that many characters; {width}"),
                       ("=+09223372036854775807", "width 9,223,372,036,854,775,807 pads"),
                       ("!r:^99999999999", "width 99,999,999,999 pads"),
                       (".1000000000f", f"precision 1,000,000,000 writes every number with that many digits; {digits}"),
                       ("#.20000g", "precision 20,000 writes every number"),
                       (".99999999999999999999", "precision 99,999,999,999,999,999,999 writes")):
        template = "{text" + (spec if spec.startswith("!") else ":" + spec) + "}"
        with pytest.raises(PrepError) as e:
            Recipe.from_dict(with_source(text_template=template))
        assert str(e.value).startswith(f"source.text_template: {template} in {template!r}: {said}"), str(e.value)
    for ok in ("{text:>10000}", "{text:.1000000000}", "{text!s:.50000}", "{n:.10000f}", "{x:_>10000.2f}"):
        assert Recipe.from_dict(with_source(text_template=ok)).sources[0].text_template == ok
    assert "_>10000.2f" in formatted and ".1000000000" in formatted  # the recorder saw the checks
    assert TextExtractor("text", "{text:.3}")({"text": "abcdef"}) == "abc"


def test_a_template_error_shows_literal_braces_as_they_are_written():
    with pytest.raises(PrepError) as e:
        Recipe.from_dict(with_source(text_template="{a} }"))
    assert str(e.value).endswith("write fields as {name} and literal braces as {{ }}"), str(e.value)


def test_formats_are_inferred_from_suffixes():
    for path, fmt in [("a.csv.gz", "csv"), ("a.tsv", "tsv"), ("a.parquet", "parquet"), ("d/*.txt", "text"),
                      ("a.jsonl.zst", "jsonl"), ("s3://b/x/*.parquet", "parquet"), ("a.jsonl.bz2", "jsonl"),
                      ("a.CSV.XZ", "csv"), ("d/*.txt.bz2", "text")]:
        assert Recipe.from_dict({**BASE, "source": {"path": path}}).sources[0].resolved_format() == fmt


def test_storage_options_and_staging_stay_out_of_the_manifest_recipe():
    r = Recipe.from_dict({**BASE, "source": {"path": "s3://b/x.jsonl", "storage_options": {"key": "K", "secret": "SECRET-XYZ"}},
                          "output": {"dir": "s3://b/out", "storage_options": {"secret": "SECRET-XYZ"}, "local_dir": "/tmp/x"},
                          "dedup": "exact"})
    content = r.content_dict()
    assert "storage_options" not in content["sources"][0] and "storage_options" not in content["output"]
    assert "local_dir" not in content["output"] and content["dedup"] == "exact"
    assert "SECRET-XYZ" not in repr(content)
    assert r.sources[0].storage_options == {"key": "K", "secret": "SECRET-XYZ"}


def test_hf_recipe_keys():
    r = Recipe.from_dict({**BASE, "source": {"format": "hf", "path": "json", "data_files": ["a.jsonl", "b.jsonl"],
                                             "streaming": True, "split": "train", "text_template": "{a}\n{b.c}"}})
    s = r.sources[0]
    assert s.streaming and s.data_files == ["a.jsonl", "b.jsonl"] and s.split == "train"


def test_a_directory_is_its_files_of_one_format(tmp_path):
    """A local directory as source.path: its files (recursively, sorted), of the one format they have or
    the one source.format names; hidden files and README/LICENSE left out; a save_to_disk directory is hf."""
    d = tmp_path / "data"
    (d / "sub").mkdir(parents=True)
    (d / ".git").mkdir()
    for name in ("b.jsonl", "a.jsonl.zst", "sub/c.json", ".git/x.jsonl", ".hidden.jsonl", "README.md", "LICENSE"):
        (d / name).write_text("{}\n")
    src = Recipe.from_dict({**BASE, "source": {"path": str(d)}}).sources[0]
    assert src.resolved_format() == "jsonl"
    assert src.expand_files() == [str(d / "a.jsonl.zst"), str(d / "b.jsonl"), str(d / "sub" / "c.json")]
    (d / "notes.txt").write_text("x")
    with pytest.raises(PrepError, match=r"is a directory holding 3 jsonl, 1 text; set source.format to read one "
                                        r"kind, or give a glob such as '.*data/\*\.jsonl'"):
        Recipe.from_dict({**BASE, "source": {"path": str(d)}})
    text = Recipe.from_dict({**BASE, "source": {"path": str(d), "format": "text"}}).sources[0]
    assert text.expand_files() == [str(d / "notes.txt")]
    with pytest.raises(PrepError, match=r"the directory '.*data' holds no csv file \(suffixes \.csv, compressed"):
        Recipe.from_dict({**BASE, "source": {"path": str(d), "format": "csv"}}).sources[0].expand_files()
    # links: a linked file is read, a linked directory is not entered (as os.walk: no cycles), a
    # broken link is no file; the listing's mtime key changes with the directory's entries
    (d / "link.jsonl").symlink_to(d / "b.jsonl")
    (d / "loop").symlink_to(d)
    (d / "gone.jsonl").symlink_to(d / "nowhere.jsonl")
    jl = Recipe.from_dict({**BASE, "source": {"path": str(d), "format": "jsonl"}}).sources[0]
    assert jl.expand_files() == [str(d / n) for n in ("a.jsonl.zst", "b.jsonl", "link.jsonl", "sub/c.json")]
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "state.json").write_text("{}")
    assert Recipe.from_dict({**BASE, "source": {"path": str(saved)}}).sources[0].resolved_format() == "hf"



def test_a_hub_snapshot_directory_reads_its_data_not_its_dataset_infos(tmp_path):
    """A dataset repo downloaded from the hub (huggingface-cli download --repo-type dataset): data files,
    README.md, .gitattributes and a dataset_infos.json of metadata, which was read as a JSON Lines file
    and stopped the run for want of a text field."""
    d = tmp_path / "snapshot"
    (d / "data").mkdir(parents=True)
    for name in ("data/train-00000.jsonl.gz", "data/train-00001.jsonl.gz", "README.md", ".gitattributes",
                 "dataset_infos.json"):
        (d / name).write_text("{}\n")
    src = Recipe.from_dict({**BASE, "source": {"path": str(d)}}).sources[0]
    assert src.resolved_format() == "jsonl"
    assert src.expand_files() == [str(d / "data" / f"train-0000{i}.jsonl.gz") for i in (0, 1)]


def test_a_recursive_glob_reads_a_file_reached_through_linked_directories_once(tmp_path, caplog):
    """glob's `**` enters linked directories: with a link d/sub/up -> d, `d/**/*.jsonl` matched each file
    41 times (d/sub/up/sub/up/..., to the kernel's 40-link limit), its documents 41 times in the dataset.
    A linked directory of other files is read, and a linked file is its own name, as in a directory source."""
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    other = tmp_path / "elsewhere"
    other.mkdir()
    for f in (d / "a.jsonl", d / "sub" / "b.jsonl", other / "c.jsonl"):
        f.write_text("{}\n")
    (d / "sub" / "up").symlink_to(d)
    (d / "more").symlink_to(other)
    (d / "link.jsonl").symlink_to(d / "a.jsonl")
    src = Recipe.from_dict({**BASE, "source": {"path": str(d / "**" / "*.jsonl")}}).sources[0]
    with caplog.at_level("WARNING", logger="prep"):
        files = src.expand_files()
    assert files == [str(d / n) for n in ("a.jsonl", "link.jsonl", "more/c.jsonl", "sub/b.jsonl")]
    assert any(f"{d / 'sub/up/a.jsonl'} is {d / 'a.jsonl'} (through a linked directory)" in r.message
               for r in caplog.records)

def test_a_directory_named_with_glob_characters_is_that_directory(tmp_path):
    """As a file named data[1].jsonl is that file: `run[1]` as a glob matches `run1` (or nothing)."""
    d = tmp_path / "run[1]"
    d.mkdir()
    (d / "a.jsonl").write_text("{}\n")
    (tmp_path / "run1").mkdir()  # what the glob would match: a directory, no file
    (tmp_path / "run1" / "b.csv").write_text("text\nx\n")
    for fmt in (None, "jsonl"):
        src = Recipe.from_dict(with_source(path=str(d), format=fmt)).sources[0]
        assert src.resolved_format() == "jsonl" and src.expand_files() == [str(d / "a.jsonl")]
    glob_ = Recipe.from_dict(with_source(path=str(tmp_path / "run[0-9]"), format="csv")).sources[0]
    with pytest.raises(PrepError, match="no file matches"):  # a glob naming no directory stays a glob
        glob_.expand_files()


def test_a_directory_of_files_prep_does_not_read_says_what_to_do(tmp_path):
    arrows, zips, other = tmp_path / "arrows", tmp_path / "zips", tmp_path / "other"
    for d, names in ((arrows, ("x-train-00000-of-00002.arrow", "x-train-00001-of-00002.arrow")),
                     (zips, ("part1.zip",)), (other, ("notes.weird",))):
        d.mkdir()
        for name in names:
            (d / name).write_bytes(b"\x00")
    cases = [(arrows, f"holding no file of a known format; its files: an Arrow file (as Hugging Face datasets caches "
                      f"them) is read with source.format: hf, source.path: arrow and source.data_files: "
                      f"'{arrows}/*.arrow'"),
             (zips, "its files: a .zip archive is not read: extract it and point source.path at the files"),
             (other, "holding no file of a known format; it holds 1 .weird file; to read each as one document, "
                     f"set source.format: text and source.path: '{other}/**/*.weird'")]
    for d, message in cases:
        with pytest.raises(PrepError) as e:
            Recipe.from_dict({**BASE, "source": {"path": str(d)}})
        assert message in str(e.value)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PrepError, match="holding no file of a known format; set source.format to read one kind"):
        Recipe.from_dict({**BASE, "source": {"path": str(empty)}})


def test_a_code_tree_is_named_with_the_glob_that_reads_it(tmp_path):
    """A directory of source code (no suffix prep reads) names its commonest suffixes and the glob for
    them; that glob, as format text, reads every such file (hidden directories left out) as a document."""
    tree = tmp_path / "repo"
    for rel, text in (("a.py", "import os\n"), ("pkg/b.py", "x = 1\n"), ("pkg/c.c", "int x;\n"),
                      ("pkg/deep/d.py", "y = 2\n"), ("e.h", "#pragma once\n"), ("f.rs", "fn f() {}\n"),
                      (".git/hooks/g.py", "hidden\n")):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    glob_ = f"{tree}/**/*.py"
    for fmt, start in ((None, "holding no file of a known format; it holds 3 .py, 1 .c, 1 .h ... files; "
                              "to read each as one document, set source.format: text and "),
                       ("text", "holds no text file (suffixes .txt, .text, .md, compressed or not); it holds 3 .py, "
                                "1 .c, 1 .h ... files; to read each as one document, set ")):
        source = {"path": str(tree)} | ({"format": fmt} if fmt else {})
        with pytest.raises(PrepError) as e:
            Recipe.from_dict({**BASE, "source": source}).sources[0].expand_files()
        assert f"{start}source.path: {glob_!r}" in str(e.value)
    named = Recipe.from_dict({**BASE, "source": {"path": glob_, "format": "text"}}).sources[0]
    assert named.expand_files() == [str(tree / r) for r in ("a.py", "pkg/b.py", "pkg/deep/d.py")]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["", "d.v2/", "sub/", "a.jsonl/"]),
                          st.sampled_from(["x", "Y.Z", "part-0", "a.b"]),
                          st.sampled_from(["", ".jsonl", ".JSONL", ".json", ".csv", ".tsv", ".parquet", ".txt", ".py",
                                           ".gz", ".zst", ".bz2", ".xz"]),
                          st.sampled_from(["", ".gz", ".ZST", ".bz2", ".xz", ".lz4"])), max_size=30))
def test_formats_inferred_once_per_suffix_are_each_files_own(parts):
    """A directory's census infers a format once per suffix (source_formats._formats_by_name): the same as
    inferring each file's, whatever the compression suffix or a dot in a directory's name."""
    from pipeline.source_formats import _formats_by_name, infer_format
    files = [f"/data/{d}{stem}{ext}{comp}" for d, stem, ext, comp in parts]
    assert _formats_by_name(files) == {f: infer_format(f, look_inside=False) for f in files}


def test_a_first_look_at_a_recipe_leaves_its_directory_unlisted(tmp_path, monkeypatch):
    """The CLI reads the recipe once to start the forkserver early (launch._warm_for): unvalidated,
    so a directory source's census (seconds for 10^5-10^6 files) waits until after that start, and
    whether workers import `datasets` is told without inferring a format unless it can matter."""
    from pipeline import source_formats
    from pipeline.pool import _workers_import_datasets
    d = tmp_path / "code"
    d.mkdir()
    (d / "a.py").write_text("x = 1\n")
    (tmp_path / "r.yaml").write_text(f"name: t\nsource: {{path: {d}}}\ntokenizer: {{path: tok.json}}\n"
                                     "output: {dir: out}\n")
    source_formats._DIR_CENSUS.clear()
    look = Recipe.from_yaml(tmp_path / "r.yaml", validate=False)
    assert not source_formats._DIR_CENSUS
    assert not _workers_import_datasets(look.sources[0]) and not source_formats._DIR_CENSUS
    with pytest.raises(PrepError, match="holding no file of a known format; it holds 1 .py file"):
        Recipe.from_yaml(tmp_path / "r.yaml")
    assert source_formats._DIR_CENSUS  # validating lists it, here: the checks above look in the right place
    from pipeline import launch, pool
    warmed = []
    monkeypatch.setattr(pool, "warm_forkserver", lambda recipe: warmed.append(dict(source_formats._DIR_CENSUS)))
    source_formats._DIR_CENSUS.clear()
    launch._warm_for({"recipe": str(tmp_path / "r.yaml"), "sets": [], "output": None, "num_workers": 2})
    assert warmed == [{}]


def test_a_glob_without_a_suffix_takes_its_files_format_and_mixed_formats_are_named(tmp_path):
    """`data/*` or `shards/part-*`: the format of the files it matches, when they have one; files of
    several formats, in one glob or a list, stop with the counts and the fix (one source per format)."""
    d = tmp_path / "data"
    (d / "sub").mkdir(parents=True)
    for name in ("a.jsonl", "b.jsonl.gz", "sub/c.jsonl"):
        (d / name).write_bytes(b"")
    for pattern in (f"{d}/*", f"{d}/**/*", f"{d}/a*"):
        assert Recipe.from_dict({**BASE, "source": {"path": pattern}}).sources[0].resolved_format() == "jsonl"
    (d / "sub" / "e.parquet").write_bytes(b"")
    (d / "f.parquet").write_bytes(b"")
    with pytest.raises(PrepError, match=re.escape(f"source.path: '{d}/**/*' matches files of several formats (3 jsonl, "
                                                  "2 parquet); a source reads one: narrow the glob, or give one source "
                                                  "per format under sources:")):
        Recipe.from_dict({**BASE, "source": {"path": f"{d}/**/*"}})
    with pytest.raises(PrepError, match=re.escape(f"the paths are of several formats: {d}/a* (jsonl), {d}/f.parquet "
                                                  "(parquet); a source reads one: give each format its own entry under "
                                                  "sources:")):
        Recipe.from_dict({**BASE, "source": {"path": [f"{d}/a*", f"{d}/f.parquet"]}})
    (d / "part-00000").write_bytes(b"")
    with pytest.raises(PrepError, match="cannot infer the format of .* from its suffix; set source.format"):
        Recipe.from_dict({**BASE, "source": {"path": f"{d}/part-*"}})


def test_a_local_double_star_inside_a_name_says_to_make_it_a_component(tmp_path):
    """`d/**.jsonl` is glob's (and bash's) `d/*.jsonl`: d/deep/b.jsonl was silently left out of the
    dataset. As for a URL, the message names the glob that matches at any depth; a file really named
    so is still that file."""
    d = tmp_path / "d"
    (d / "deep").mkdir(parents=True)
    for f in (d / "a.jsonl", d / "deep" / "b.jsonl"):
        f.write_text("{}\n")
    src = Recipe.from_dict({**BASE, "source": {"path": f"{d}/**.jsonl"}}).sources[0]
    with pytest.raises(PrepError, match=re.escape(
            f"source.path: '{d}/**.jsonl': '**' matches directories only as a whole path component (`**.jsonl`); "
            f"for files at any depth write '{d}/**/*.jsonl'") + "$"):
        src.expand_files()
    fixed = Recipe.from_dict({**BASE, "source": {"path": f"{d}/**/*.jsonl"}}).sources[0]
    assert fixed.expand_files() == [str(d / "a.jsonl"), str(d / "deep" / "b.jsonl")]
    (d / "odd**.jsonl").write_text("{}\n")
    named = Recipe.from_dict({**BASE, "source": {"path": f"{d}/odd**.jsonl"}}).sources[0]
    assert named.expand_files() == [str(d / "odd**.jsonl")]


def test_a_lone_surrogate_char_is_replaced_where_it_is_written_not_in_the_field_value():
    """Under encoding_errors: replace, `{n} is {n:c}` of 0xD800 wrote '65533 is \ufffd': the field's value
    was replaced for both uses. Only the character is (a review found it); under skip it is a reject."""
    replace = TextExtractor("text", "{n} is {n:c} or {n:>3c}", "replace")
    assert replace({"n": 0xD800}) == "55296 is \ufffd or   \ufffd"
    assert replace({"n": 0x41}) == "65 is A or   A"
    with pytest.raises(RecordError) as e:
        TextExtractor("text", "{n} is {n:c}")({"n": 0xDFFF})
    assert e.value.reason == "lone_surrogate"
