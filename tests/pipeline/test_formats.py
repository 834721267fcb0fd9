"""Every input format gives the same shards; fields, filters, dedup; bad input is never lost silently.

The train/val hash uses (seed, source, file, position) and positions are per-format record identities
(a byte offset for JSONL/CSV/text lines, a row number for Parquet/HF, a file number for one-document-
per-file text), so the cross-format comparisons run at val_fraction 0: every document goes to train
in dataset order, and the shards must then be byte-identical.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from pipeline.errors import PrepError, SchemaError
from pipeline.executor import tokenize
from pipeline.manifest import read_manifest
from pipeline.readers import plan_units
from pipeline.recipe import Recipe
from tests.conftest import DEMO_TOKENIZER, demo_texts, read_split

SPECIAL = ['He said "hi", then left.', '"quoted start', "tab\there\r\nand crlf", "  spaces  ", "a\rb",
           'ümlaut "x""y"', "comma, separated, words"]


def corpus_texts(n: int = 500) -> list[str]:
    return [t for t in demo_texts(n) if t] + SPECIAL


def run(tmp: Path, sources, name: str, workers: int = 1, **top) -> Path:
    out = tmp / "out" / name
    output = {"dir": str(out), "shard_tokens": 40_000, "val_fraction": 0.0, "seed": 5, **top.pop("output", {})}
    recipe = Recipe.from_dict({"name": "t", "sources": sources if isinstance(sources, list) else [sources],
                               "tokenizer": {"path": str(DEMO_TOKENIZER)}, "output": output,
                               "num_workers": workers, "unit_bytes": 65536, **top})
    tokenize(recipe, show_progress=False)
    return out


def shard_bytes(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.bin")) + sorted(out.rglob("*.idx"))
            if ".prep" not in p.parts}


def write_all_formats(d: Path, texts: list[str]) -> dict[str, dict]:
    d.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(texts))
    (d / "c.jsonl").write_text(lines, encoding="utf-8")
    (d / "c.jsonl.gz").write_bytes(gzip.compress(lines.encode()))
    (d / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines.encode()))
    for name, delim in (("c.csv", ","), ("c.tsv", "\t")):
        with open(d / name, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, delimiter=delim)
            w.writerow(["id", "text"])
            w.writerows(enumerate(texts))
    (d / "c.csv.zst").write_bytes(zstandard.ZstdCompressor().compress((d / "c.csv").read_bytes()))
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), d / "c.parquet", row_group_size=40)
    (d / "txt").mkdir()
    for i, t in enumerate(texts):
        (d / "txt" / f"doc{i:05d}.txt").write_bytes(t.encode())
    import datasets
    datasets.Dataset.from_dict({"id": list(range(len(texts))), "text": texts}).save_to_disk(str(d / "saved"),
                                                                                             num_shards=3)
    return {
        "jsonl": {"path": str(d / "c.jsonl")},
        "jsonl.gz": {"path": str(d / "c.jsonl.gz")},
        "jsonl.zst": {"path": str(d / "c.jsonl.zst")},
        "csv": {"path": str(d / "c.csv")},
        "csv.zst": {"path": str(d / "c.csv.zst")},
        "tsv": {"path": str(d / "c.tsv")},
        "parquet": {"path": str(d / "c.parquet")},
        "text": {"path": str(d / "txt" / "*.txt"), "format": "text"},
        "hf saved": {"path": str(d / "saved"), "format": "hf"},
        "hf json streaming": {"path": "json", "format": "hf", "data_files": str(d / "c.jsonl"), "streaming": True},
    }


def test_same_documents_in_every_format_give_identical_shards(tmp_path):
    # one shard per split: shard cuts follow work units, and units differ by format (a .gz is one unit)
    texts = corpus_texts()
    formats = write_all_formats(tmp_path / "data", texts)
    outs = {name: run(tmp_path, src, name.replace(" ", "_"), output={"shard_tokens": 10**9})
            for name, src in formats.items()}
    ref = shard_bytes(outs["jsonl"])
    assert len(ref["train/shard-000000.bin"]) > 100_000
    for name in ("jsonl", "csv", "tsv", "parquet", "text", "hf saved"):  # guard: these were cut into units
        r = Recipe.from_dict({"name": "t", "source": formats[name], "tokenizer": {"path": "t"},
                              "output": {"dir": "o"}, "unit_bytes": 65536})
        assert len(plan_units(r)) > 1, name
    for name, out in outs.items():
        m = read_manifest(out)
        assert m.splits["train"].num_docs == len(texts) and not m.skipped and not m.failed_units, name
        assert shard_bytes(out) == ref, f"{name} differs from jsonl"


def test_sources_list_mixes_formats_and_keeps_order(tmp_path):
    texts = corpus_texts(300)
    d = tmp_path / "d"
    d.mkdir()
    a, b, c = texts[:100], texts[100:200], texts[200:]
    (d / "a.jsonl").write_text("".join(json.dumps({"meta": {"body": t}}) + "\n" for t in a))
    pq.write_table(pa.table({"body": b}), d / "b.parquet")
    with open(d / "c.csv", "w", newline="") as f:
        csv.writer(f).writerows([["body"], *[[t] for t in c]])
    mixed = run(tmp_path, [{"path": str(d / "a.jsonl"), "text_field": "meta.body"},
                           {"path": str(d / "b.parquet"), "text_field": "body"},
                           {"path": f"file://{d / 'c.csv'}", "text_field": "body"}], "mixed")
    (d / "all.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    assert shard_bytes(mixed) == shard_bytes(run(tmp_path, {"path": str(d / "all.jsonl")}, "single"))


def test_template_and_length_filters_are_counted_not_listed(tmp_path):
    rows = [{"title": f"T{i}", "text": "x" * i} for i in range(30)]
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = run(tmp_path, {"path": str(p), "text_template": "{title}\n\n{text}", "min_chars": 10, "max_chars": 25},
              "filtered")
    m = read_manifest(out)
    kept = [r for r in rows if 10 <= len(f"{r['title']}\n\n{r['text']}") <= 25]
    assert m.splits["train"].num_docs == len(kept)
    lengths = [len(f"{r['title']}\n\n{r['text']}") for r in rows]
    assert m.skipped == {"too_short": sum(n < 10 for n in lengths), "too_long": sum(n > 25 for n in lengths)}
    assert m.skipped == {"too_short": 6, "too_long": 9}
    assert not (out / "rejects.jsonl").exists()
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(DEMO_TOKENIZER))
    assert tok.decode(read_split(out, "train")[0][:-1].tolist()) == "T6\n\nxxxxxx"


def test_exact_dedup_keeps_first_copy_for_any_worker_count(tmp_path):
    base = corpus_texts(400)
    rng = np.random.default_rng(0)
    dup_src = rng.integers(0, len(base), 150)
    texts = list(base)
    for j in dup_src:  # copies spread over later units, some of them copies of copies
        texts.insert(int(rng.integers(j + 1, len(texts) + 1)), base[j])
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    outs = [run(tmp_path, {"path": str(p)}, f"dedup{w}", workers=w, dedup="exact",
                output={"val_fraction": 0.2}) for w in (1, 2)]
    assert shard_bytes(outs[0]) == shard_bytes(outs[1])
    m = read_manifest(outs[0])
    first = list(dict.fromkeys(texts))
    assert m.skipped == {"duplicate": len(texts) - len(first)}
    assert m.splits["train"].num_docs + m.splits["val"].num_docs == len(first)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(DEMO_TOKENIZER))
    tok.encode_special_tokens = True
    got = sorted(tok.decode(d[:-1].tolist()) for s in ("train", "val") for d in read_split(outs[0], s))
    assert got == sorted(first)
    # without dedup the copies are all there (guard: the corpus really has duplicates across units)
    plain = read_manifest(run(tmp_path, {"path": str(p)}, "nodedup", output={"val_fraction": 0.2}))
    assert plain.splits["train"].num_docs + plain.splits["val"].num_docs == len(texts)


def test_every_bad_record_reason_is_counted_and_listed(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    long_text = "L" * 3000
    (d / "a.jsonl").write_bytes(b'{"text": "good"}\n{"text": \n{"body": "x"}\n{"text": null}\n{"text": 5}\n'
                                b'{"text": "bad \xff"}\n' + json.dumps({"text": long_text}).encode() + b"\n")
    (d / "b.csv").write_bytes(b"id,text\n1,fine\n2,too,many\n3,\"" + long_text.encode() + b'"\n')
    out = run(tmp_path, [{"path": str(d / "a.jsonl"), "max_record_bytes": 2000},
                         {"path": str(d / "b.csv"), "max_record_bytes": 2000}], "bad")
    m = read_manifest(out)
    assert m.splits["train"].num_docs == 2
    assert m.skipped == {"invalid_utf8": 1, "malformed_json": 1, "missing_field": 1, "non_string_text": 1,
                         "null_text": 1, "record_too_large": 2, "wrong_column_count": 1}
    rows = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(Path(r["source"]).name, r.get("line", r.get("row")), r["reason"]) for r in rows] == [
        ("a.jsonl", 2, "malformed_json"), ("a.jsonl", 3, "missing_field"), ("a.jsonl", 4, "null_text"),
        ("a.jsonl", 5, "non_string_text"), ("a.jsonl", 6, "invalid_utf8"), ("a.jsonl", 7, "record_too_large"),
        ("b.csv", 1, "wrong_column_count"), ("b.csv", 2, "record_too_large")]
    assert all(len(r["text"]) <= 200 for r in rows) and rows[5]["text"] == ('{"text": "' + long_text)[:200]
    assert rows[1]["detail"] == "no 'text'; the record has 'body'"  # what the record holds instead
    replaced = run(tmp_path, {"path": str(d / "a.jsonl"), "encoding_errors": "replace", "max_record_bytes": None},
                   "replaced")
    assert read_manifest(replaced).splits["train"].num_docs == 3
    with pytest.raises(PrepError, match=r"a\.jsonl at line 2: malformed_json"):
        run(tmp_path, {"path": str(d / "a.jsonl")}, "strict", on_bad_record="error")


@pytest.mark.parametrize("orient, indent", [(None, 0), (None, 2), ("index", 0), ("index", 2), ("split", 0), ("split", 2)])
def test_a_pandas_table_layout_stops_the_run_with_the_way_to_json_lines(tmp_path, orient, indent):
    """DataFrame.to_json's default layout (orient='columns') is one record whose text field holds
    {row label: text}: it was one non_string_text reject and an empty dataset, exit 0. It, and the
    'index' and 'split' layouts, now stop the run with the pandas call that writes JSON Lines."""
    pd = pytest.importorskip("pandas")
    path = tmp_path / "df.json"
    frame = pd.DataFrame({"id": range(4), "text": [f"row {i}" for i in range(4)]})
    frame.to_json(path, **({"orient": orient} if orient else {}), indent=indent)
    layout = {None: "orient='columns', its default", "index": "orient='index'", "split": "orient='split'"}[orient]
    # one line: its one record is rejected; pretty-printed: the file read whole is one object
    with pytest.raises(SchemaError, match=r"df\.json: (its one record|the file is one JSON object), a table in pandas' "
                                          + re.escape(f"DataFrame.to_json layout ({layout})") + ".*orient='records', lines=True"):
        run(tmp_path, {"path": str(path)}, f"pandas_{orient}_{indent}")
    frame.to_json(path, orient="records", lines=True)  # the fix it names reads
    assert read_manifest(run(tmp_path, {"path": str(path)}, "fixed")).splits["train"].num_docs == 4


def test_a_template_spec_a_value_does_not_fit_rejects_that_record_and_one_that_fits_none_stops(tmp_path):
    """str.format's ValueError ({n:d} over a string) was a traceback mid-run; it is that record's reject.
    A spec that fits no record of a file's first unit is the recipe's mistake: the run stops, as for a
    field no record has."""
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in [{"text": "a", "n": 1}, {"text": "b", "n": "two"},
                                                         {"text": "c", "n": 3}]))
    out = run(tmp_path, {"path": str(p), "text_template": "{text} #{n:02d}"}, "some")
    assert read_manifest(out).skipped == {"unformattable_field": 1}
    tok = Tokenizer.from_file(str(DEMO_TOKENIZER))
    assert [tok.decode(ids[:-1].tolist()) for ids in read_split(out, "train")] == ["a #01", "c #03"]
    (reject,) = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert reject["line"] == 2 and reject["detail"].startswith("{n:02d} does not fit 'n', str 'two' (Unknown format code")
    with pytest.raises(SchemaError, match=r"c\.jsonl: text_template's format spec fits the value in none of the 3 records "
                                          r"of this file's first unit \(line 1: \{text:d\} does not fit 'text', str 'a' "
                                          r".*\); fix the spec after the colon in source\.text_template, or remove it$"):
        run(tmp_path, {"path": str(p), "text_template": "{text:d}"}, "none")


def test_a_dataset_left_empty_by_lone_surrogates_says_to_replace_them(tmp_path):
    """Every record a lone_surrogate reject: the empty dataset's note named no fix for that reason (the
    others', invalid_utf8 say, name theirs); it names encoding_errors: replace now, which reads them."""
    p = tmp_path / "s.jsonl"
    p.write_text("".join(json.dumps({"text": f"doc {i} \ud83d"}) + "\n" for i in range(5)))  # an emoji's first half
    recipe = Recipe.from_dict({"name": "t", "source": {"path": str(p)}, "tokenizer": {"path": str(DEMO_TOKENIZER)},
                               "output": {"dir": str(tmp_path / "out" / "s")}})
    notes = tokenize(recipe, show_progress=False).notes
    assert any("most were lone_surrogate: the text holds lone UTF-16 surrogates" in n
               and n.endswith("set source.encoding_errors: replace to read each as U+FFFD") for n in notes), notes
    m = read_manifest(run(tmp_path, {"path": str(p), "encoding_errors": "replace"}, "replaced"))
    assert m.splits["train"].num_docs == 5 and not m.skipped


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_template_char_that_is_a_lone_surrogate_is_a_reject_or_ufffd_under_replace(tmp_path, fmt):
    """{n:c} of 0xD800-0xDFFF made a lone surrogate, which Python formats but no UTF-8 text holds: the
    tokenizer refused it in a worker (TypeError: TextInputSequence must be str). It is a lone_surrogate
    reject now, or U+FFFD under encoding_errors: replace, as an escaped one in JSON is."""
    rows = [{"text": "a", "n": 0x41}, {"text": "b", "n": 0xD800}, {"text": "c", "n": 0xDFFF}, {"text": "d", "n": 0x42}]
    p = tmp_path / f"c.{fmt}"
    if fmt == "jsonl":
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), p)
    source = {"path": str(p), "text_template": "{text}{n:>2c}"}
    tok = Tokenizer.from_file(str(DEMO_TOKENIZER))
    out = run(tmp_path, source, "skip")
    assert read_manifest(out).skipped == {"lone_surrogate": 2}
    assert [tok.decode(ids[:-1].tolist()) for ids in read_split(out, "train")] == ["a A", "d B"]
    reject = json.loads((out / "rejects.jsonl").read_text().splitlines()[0])
    assert reject["reason"] == "lone_surrogate" and "{n:c} makes U+D800 of 'n' 55296" in reject["detail"]
    out = run(tmp_path, {**source, "encoding_errors": "replace"}, "replace")
    assert not read_manifest(out).skipped
    assert [tok.decode(ids[:-1].tolist()) for ids in read_split(out, "train")] == ["a A", "b \ufffd", "c \ufffd", "d B"]


def test_a_text_field_the_input_lacks_stops_the_run_under_skip(tmp_path):
    """The recipe's mistake, not bad records: without this a wrong text_field rejected every record (or
    failed every unit) and the run ended with an empty dataset, exit 0."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.jsonl").write_text("".join(json.dumps({"content": t, "id": i}) + "\n" for i, t in enumerate(["x", "y"] * 50)))
    with pytest.raises(SchemaError, match=r"a\.jsonl: text_field names a field that none of the 100 records of this "
                                          r"file's first unit has \(line 1: no 'text'; the record has 'content', 'id'\)"):
        run(tmp_path, {"path": str(d / "a.jsonl")}, "jsonl")
    (d / "n.jsonl").write_text(json.dumps({"meta": {"body": "x"}}) + "\n")
    with pytest.raises(SchemaError, match=r"text_template names a field .* \(line 1: no 'meta.title'; 'meta' has 'body'\)"):
        run(tmp_path, {"path": str(d / "n.jsonl"), "text_template": "{meta.title}"}, "nested")
    # a records_field list cut between its records: its first range starts at the list's `[`, not at 0
    (d / "o.json").write_text(json.dumps({"version": 1, "data": [{"content": "x" * 100, "id": i} for i in range(3000)]}))
    with pytest.raises(SchemaError, match=r"o\.json: text_field names a field that none of the [\d,]+ records of this "
                                          r"file's first unit has \(row 0: no 'text'; the record has 'content', 'id'\)"):
        run(tmp_path, {"path": str(d / "o.json"), "records_field": "data"}, "records_field", workers=2)
    pq.write_table(pa.table({"body": ["x"] * 10}), d / "b.parquet")
    recipe = Recipe.from_dict({"name": "t", "source": {"path": str(d / "b.parquet")}, "tokenizer": {"path": "t.json"},
                               "output": {"dir": str(tmp_path / "never")}})
    with pytest.raises(SchemaError, match=r"b\.parquet: text_field 'text' is not a column; the file has 'body'"):
        plan_units(recipe)  # in the parent, from the footer, before any worker starts
    (d / "c.csv").write_text("id,body\n1,x\n2,y\n")
    with pytest.raises(SchemaError, match=r"c\.csv: text_field 'text' is not a column; the header has 'id', 'body'"):
        run(tmp_path, {"path": str(d / "c.csv")}, "csv", workers=2)
    assert not any((tmp_path / "out").rglob("manifest.json"))
    # a file's first unit that gave no text, but mostly for other reasons: bad records, listed as such
    (d / "m.jsonl").write_text('{"body": 1}\n{"text": \n{"text": 5}\n{"text": null}\n')
    m = read_manifest(run(tmp_path, {"path": str(d / "m.jsonl")}, "mixed"))
    assert m.skipped == {"missing_field": 1, "malformed_json": 1, "non_string_text": 1, "null_text": 1}
    recipe = Recipe.from_dict({"name": "t", "source": {"path": str(d / "m.jsonl")}, "tokenizer": {"path": str(DEMO_TOKENIZER)},
                               "output": {"dir": str(tmp_path / "out" / "mixed2")}})
    assert "the dataset holds no documents: the input had none, or every one was skipped (see skipped)" in \
        tokenize(recipe, show_progress=False).notes
    # a field that holds no string in any record (ids, paragraphs as a list) stops it too
    (d / "paragraphs.jsonl").write_text("".join(json.dumps({"id": i, "text": [f"p{i}", "q"]}) + "\n" for i in range(50)))
    with pytest.raises(SchemaError, match=r"paragraphs\.jsonl: text_field names a field that holds no string in any "
                                          r"of the 50 records of this file's first unit \(line 1: 'text' is a list of 2 "
                                          r"strings, not one\); set source\.text_field to the field holding the text; "
                                          r"a list of strings must be joined into one first$"):
        run(tmp_path, {"path": str(d / "paragraphs.jsonl")}, "paragraphs")
    with pytest.raises(SchemaError, match=r"line 1: 'id' is int\); set source\.text_field to the field holding the "
                                          r"text$"):
        run(tmp_path, {"path": str(d / "paragraphs.jsonl"), "text_field": "id"}, "ids")
    # records that each hold a list (chat turns) are not one object holding its records: no records_field hint
    (d / "chat.jsonl").write_text("".join(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n"
                                          for _ in range(20)))
    with pytest.raises(SchemaError, match=r"\['messages': a list of 1 object\]\); set source\.text_field to the field "
                                          r"holding the text$"):
        run(tmp_path, {"path": str(d / "chat.jsonl")}, "chat")
    # lines that are JSON strings or arrays have no field to name: the fix gives them one
    (d / "strings.jsonl").write_text("".join(json.dumps(f"document {i}") + "\n" for i in range(20)))
    with pytest.raises(SchemaError, match=r"\(line 1: no 'text'; the record is str, not an object\); the records are "
                                          r"JSON strings, not objects: give each a text field first, e.g. jq -c "
                                          r"'\{text: \.\}' strings\.jsonl > objects-strings\.jsonl$"):
        run(tmp_path, {"path": str(d / "strings.jsonl")}, "strings")
    (d / "objects-strings.jsonl").write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(20)))
    assert read_manifest(run(tmp_path, {"path": str(d / "objects-strings.jsonl")}, "objects")).splits["train"].num_docs == 20
    # a dataset left empty by text in another encoding: the note says how to read it, and that reads it
    (d / "latin1.txt").write_bytes("Café crème, übermäßig.\n".encode("latin-1") * 3)
    recipe = Recipe.from_dict({"name": "t", "source": {"path": str(d / "latin1.txt")},
                               "tokenizer": {"path": str(DEMO_TOKENIZER)}, "output": {"dir": str(tmp_path / "out" / "l1")}})
    assert ("the dataset holds no documents: the input had none, or every one was skipped (see skipped); most were "
            "invalid_utf8: the input is not UTF-8: convert it (iconv -f CP1252 -t UTF-8 for a Windows export, say) "
            "or set source.encoding_errors: replace") in tokenize(recipe, show_progress=False).notes
    m = read_manifest(run(tmp_path, {"path": str(d / "latin1.txt"), "encoding_errors": "replace"}, "l1-replaced"))
    assert m.splits["train"].num_docs == 1 and not m.skipped
    # and records lacking the field next to records that have it are bad records too
    (d / "p.jsonl").write_text('{"body": 1}\n{"text": "fine"}\n')
    m = read_manifest(run(tmp_path, {"path": str(d / "p.jsonl")}, "partial"))
    assert m.skipped == {"missing_field": 1} and m.splits["train"].num_docs == 1


@pytest.mark.parametrize("compressed", [False, True])
def test_one_big_text_file_over_max_record_bytes_says_to_set_doc_separator(tmp_path, compressed):
    """nanoGPT's habit: one big input.txt. Read whole (doc_separator: null) it is one document; over
    max_record_bytes (64 MiB by default; 2000 bytes here) it was rejected and the run ended with an
    empty dataset and only "raise source.max_record_bytes". The note and the reject's detail now say
    that the file was one document and how to make documents of it (doc_separator), or keep it one
    (and at what memory); the fixes they name read it."""
    lines = [t.replace("\n", " ")[:150].strip() for t in corpus_texts(300)[:30]]
    paragraphs = ["\n".join(lines[i:i + 3]) for i in range(0, 30, 3)]  # each well under 2000 bytes
    data = ("\n\n".join(paragraphs) + "\n").encode()
    assert len(data) > 2000
    path = tmp_path / ("input.txt.gz" if compressed else "input.txt")
    path.write_bytes(gzip.compress(data) if compressed else data)
    recipe = Recipe.from_dict({"name": "t", "source": {"path": str(path), "max_record_bytes": 2000},
                               "tokenizer": {"path": str(DEMO_TOKENIZER)}, "output": {"dir": str(tmp_path / "out" / "one")}})
    fix = ('a text file read whole (source.doc_separator: null) is one document: set source.doc_separator: "\\n\\n" '
           '(paragraphs) or "\\n" (lines) to make documents of it, or raise source.max_record_bytes (null: no limit) '
           "to keep it one document")
    notes = tokenize(recipe, show_progress=False).notes
    assert any(note.startswith("the dataset holds no documents") and f"most were record_too_large: {fix}, which takes "
               "about 3.5 MB of memory per MB of text to tokenize (tokenizer backend " in note for note in notes), notes
    (reject,) = [json.loads(r) for r in (tmp_path / "out" / "one" / "rejects.jsonl").read_text().splitlines()]
    assert reject["reason"] == "record_too_large" and reject["detail"].endswith(f"; {fix}")
    counts = {"\n\n": len(paragraphs), "\n": data.count(b"\n") - len(paragraphs) + 1, None: 1}
    for sep, n in counts.items():
        settings = {"doc_separator": sep} if sep else {"max_record_bytes": None}
        m = read_manifest(run(tmp_path, {"path": str(path), "max_record_bytes": 2000, **settings}, f"fixed-{n}"))
        assert m.splits["train"].num_docs == n and not m.skipped


@pytest.mark.parametrize("delimiter", [";", "|"])
def test_a_csv_with_another_delimiter_reads_with_source_delimiter(tmp_path, delimiter):
    """Excel writes `;`-separated CSV where the decimal mark is a comma. Read with ",", its header was
    one column and the error's hint wrong; the error now names the delimiter, and with
    source.delimiter the file (plain, or .gz cut into spooled ranges on 2 workers) gives the shards
    of the same rows written with commas."""
    texts = corpus_texts(400)
    d = tmp_path / "d"
    d.mkdir()
    for name, sep in (("comma.csv", ","), ("other.csv", delimiter)):
        with open(d / name, "w", newline="", encoding="utf-8") as f:
            csv.writer(f, delimiter=sep).writerows([("id", "text"), *((i, f"{t} {delimiter} x") for i, t in enumerate(texts))])
    (d / "other.csv.gz").write_bytes(gzip.compress((d / "other.csv").read_bytes()))
    with pytest.raises(SchemaError, match=re.escape(f"other.csv: 'text' is not a column; the header is one column, "
                                                    f"'id{delimiter}text', which looks {delimiter!r}-separated; set "
                                                    f"source.delimiter: {delimiter!r}")):
        run(tmp_path, {"path": str(d / "other.csv")}, "no-delimiter")
    want = shard_bytes(run(tmp_path, {"path": str(d / "comma.csv")}, "comma", workers=2))
    assert want
    for name in ("other.csv", "other.csv.gz"):
        got = shard_bytes(run(tmp_path, {"path": str(d / name), "delimiter": delimiter}, name, workers=2))
        assert got == want


def test_a_csv_with_a_wide_delimiter_or_a_bom_is_read_in_units_with_no_note(tmp_path):
    """source.delimiter `│` (3 bytes in UTF-8) failed the plan with an IndexError, and `§` (2) the first
    unit in pyarrow ("Expecting an ASCII character"); with `þ` (2), or a UTF-8 byte order mark before a
    quoted header (Excel's "CSV UTF-8"), well-formed closing quotes were taken for stray ones, and the
    run's note said to set source.quoting: none. Each, every field quoted, plain or .gz: the documents
    of the comma file, several units on 2 workers, no note."""
    texts = corpus_texts(400)
    d = tmp_path / "d"
    d.mkdir()

    def write(name: str, sep: str, bom: bool = False) -> Path:
        f = io.StringIO(newline="")
        csv.writer(f, delimiter=sep, quoting=csv.QUOTE_ALL).writerows([("id", "text"), *enumerate(texts)])
        (d / name).write_bytes((b"\xef\xbb\xbf" if bom else b"") + f.getvalue().encode())
        return d / name

    want = [doc.tolist() for doc in read_split(run(tmp_path, {"path": str(write("comma.csv", ","))}, "comma"), "train")]
    assert len(want) == len(texts)
    (d / "box.csv.gz").write_bytes(gzip.compress(write("box.csv", "\u2502").read_bytes()))
    for name, sep in (("box.csv", "\u2502"), ("box.csv.gz", "\u2502"), ("section.csv", "\u00a7"),
                      ("thorn.csv", "\u00fe"), ("bom.csv", ",")):
        if not (d / name).exists():
            write(name, sep, bom=name == "bom.csv")
        recipe = Recipe.from_dict({"name": "t", "source": {"path": str(d / name), "delimiter": sep},
                                   "tokenizer": {"path": str(DEMO_TOKENIZER)},
                                   "output": {"dir": str(tmp_path / "out" / name), "val_fraction": 0.0},
                                   "num_workers": 2, "unit_bytes": 65536})
        result = tokenize(recipe, show_progress=False)
        assert [doc.tolist() for doc in read_split(result.out, "train")] == want
        assert result.units_total > 2 and not result.notes


def test_one_big_parquet_row_group_in_parts_gives_the_shards_of_many_row_groups(tmp_path):
    """pandas' and pyarrow's default: up to 1 Mi rows in one row group. Split by rows into units, on 2
    workers, with a val split: the documents of the same rows written as many small row groups, in
    order, in the same splits (shard boundaries follow the units' parts, so with several shards their
    bytes may differ; with one, they are the same)."""
    texts = corpus_texts(1200)
    d = tmp_path / "d"
    d.mkdir()
    pq.write_table(pa.table({"text": texts}), d / "one.parquet")
    pq.write_table(pa.table({"text": texts}), d / "many.parquet", row_group_size=100)
    outs = {}
    for name in ("one", "many"):
        outs[name] = run(tmp_path, {"path": str(d / f"{name}.parquet")}, name, workers=2,
                         output={"val_fraction": 0.1}, unit_bytes=65536)
    recipe = Recipe.from_dict({"name": "t", "source": {"path": str(d / "one.parquet")}, "unit_bytes": 65536,
                               "tokenizer": {"path": str(DEMO_TOKENIZER)}, "output": {"dir": str(tmp_path / "x")}})
    assert len(plan_units(recipe)) > 1  # the one row group, in parts
    for split in ("train", "val"):
        one, many = read_split(outs["one"], split), read_split(outs["many"], split)
        assert len(one) == len(many) > 0 and all(np.array_equal(a, b) for a, b in zip(one, many))
    for name in ("one", "many"):  # one shard each: the same bytes
        outs[name] = run(tmp_path, {"path": str(d / f"{name}.parquet")}, f"{name}-1", workers=2,
                         output={"val_fraction": 0.1, "shard_tokens": 10**8}, unit_bytes=65536)
    assert shard_bytes(outs["one"]) == shard_bytes(outs["many"])



def test_a_parquet_file_of_no_row_group_is_an_empty_input_not_no_input(tmp_path):
    """`source.path: matched no input` was the error for a path that matched a Parquet file of no row
    groups (a ParquetWriter closed before any write): it is an input of no documents, as an empty JSONL is."""
    path = tmp_path / "data" / "a.parquet"
    path.parent.mkdir()
    pq.ParquetWriter(path, pa.schema([("text", pa.string())])).close()
    out = run(tmp_path, {"path": str(path)}, "empty")
    assert read_manifest(out).splits["train"].num_docs == 0

def test_records_field_reads_files_that_are_one_json_object(tmp_path):
    """`source.records_field`: files like `{"version": 1, "data": [...]}`, small ones grouped in units,
    give the dataset of the same records as JSON Lines; a damaged one is a failed unit under skip."""
    texts = corpus_texts(300)
    d, lines = tmp_path / "obj", tmp_path / "lines"
    d.mkdir(), lines.mkdir()
    for i in range(0, len(texts), 40):
        chunk = [{"text": t, "id": i + k} for k, t in enumerate(texts[i:i + 40])]
        (d / f"part{i:04d}.json").write_text(json.dumps({"version": 2, "data": chunk}, indent=1))
        (lines / f"part{i:04d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chunk))
    obj = run(tmp_path, {"path": str(d), "records_field": "data"}, "obj", workers=2)
    ref = run(tmp_path, {"path": str(lines)}, "lines")
    assert shard_bytes(obj) == shard_bytes(ref) and read_manifest(obj).splits["train"].num_docs == len(texts)
    (d / "part0000.json").write_text('{"version": 2, "data": [{"text": "cut off')
    m = read_manifest(run(tmp_path, {"path": str(d), "records_field": "data"}, "damaged"))
    assert [(Path(f["path"]).name, "not one JSON object" in f["error"]) for f in m.failed_units] == [
        ("part0000.json", True)]
    assert m.splits["train"].num_docs == len(texts) - 40
    # the same object on one line, without records_field: one record lacking the field, and the hint
    (tmp_path / "one.json").write_text(json.dumps({"version": 2, "data": [{"text": "x"}] * 3}) + "\n")
    with pytest.raises(SchemaError, match=r"the record has 'version', 'data' \['data': a list of 3 objects\]\); "
                                          r"set source\.text_field .* set source\.records_field to its key"):
        run(tmp_path, {"path": str(tmp_path / "one.json")}, "one")


def test_files_of_one_pretty_printed_record_give_the_dataset_of_json_lines(tmp_path):
    """A directory of `json.dump(record, f, indent=2)` files (small files, grouped in units): each file
    one record, the shards of the same records as JSON Lines. Before, each file was a SchemaError
    advising records_field, which cannot apply. A file whose one record lacks the text field stops the
    run with the text_field fix, as the same record on one line does."""
    texts = corpus_texts(60)
    d, lines = tmp_path / "pretty", tmp_path / "lines.jsonl"
    d.mkdir()
    for i, t in enumerate(texts):
        (d / f"doc{i:03d}.json").write_text(json.dumps({"id": i, "text": t, "meta": {"tags": ["x"]}}, indent=2))
    lines.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    pretty = run(tmp_path, {"path": str(d)}, "pretty", workers=2)
    assert shard_bytes(pretty) == shard_bytes(run(tmp_path, {"path": str(lines)}, "lines"))
    assert read_manifest(pretty).splits["train"].num_docs == len(texts)
    (tmp_path / "body.json").write_text(json.dumps({"id": 1, "body": "x"}, indent=2))
    with pytest.raises(SchemaError, match=r"body\.json: text_field names a field that none of the 1 records of this "
                                          r"file's first unit has \(row 0: no 'text'; the record has 'id', 'body'\); "
                                          r"set source\.text_field to the field holding the text$"):
        run(tmp_path, {"path": str(tmp_path / "body.json")}, "body")


def test_a_big_json_array_cut_between_its_records_gives_the_dataset_read_whole(tmp_path):
    """A JSON array, jq's objects one after another, or a records_field list, over unit_bytes is cut
    between its records (json_cuts.py; a compressed one's ranges are spooled windows): the dataset of
    the same records as JSON Lines, the val split of the array read whole (positions are the records'
    indexes either way), and the same shards for any worker count."""
    texts = corpus_texts(1500)
    records = [{"id": i, "text": t} for i, t in enumerate(texts)]
    d = tmp_path / "data"
    d.mkdir()
    (d / "a.json").write_text(json.dumps(records, indent=2))
    (d / "a.json.gz").write_bytes(gzip.compress((d / "a.json").read_bytes(), 1))
    (d / "jq.json").write_text("".join(json.dumps(r, indent=2) + "\n" for r in records))
    (d / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (d / "jq.json.zst").write_bytes(zstandard.ZstdCompressor().compress((d / "jq.json").read_bytes()))
    obj = json.dumps({"version": 2, "data": records, "splits": ["train"]}, indent=1).encode()
    (d / "obj.json").write_bytes(obj)  # records under records_field: its list is cut
    (d / "obj.json.gz").write_bytes(gzip.compress(obj, 1))
    sources = {name: {"path": str(d / name), **({"records_field": "data"} if name.startswith("obj") else {})}
               for name in ("a.json", "jq.json", "a.json.gz", "jq.json.zst", "obj.json", "obj.json.gz")}
    for name, source in sources.items():
        r = Recipe.from_dict({"name": "t", "source": source, "tokenizer": {"path": "t"},
                              "output": {"dir": "o"}, "unit_bytes": 65536})
        assert len(plan_units(r)) > 3, name
    one = {"shard_tokens": 10**9}
    ref = shard_bytes(run(tmp_path, {"path": str(d / "c.jsonl")}, "lines", output=one))
    for name, source in sources.items():
        assert shard_bytes(run(tmp_path, source, name, workers=2, output=one)) == ref, name
    split = {"shard_tokens": 10**9, "val_fraction": 0.2}
    cut = run(tmp_path, {"path": str(d / "a.json")}, "cut", workers=2, output=split)
    spooled = run(tmp_path, {"path": str(d / "a.json.gz")}, "spooled", workers=2, output=split)
    whole = run(tmp_path, {"path": str(d / "a.json")}, "whole", output=split, unit_bytes=1 << 30)
    field = run(tmp_path, sources["obj.json"], "field", workers=2, output=split)
    assert shard_bytes(cut) == shard_bytes(spooled) == shard_bytes(whole) == shard_bytes(field)
    assert read_manifest(cut).splits["val"].num_docs > 100
    j1 = run(tmp_path, {"path": str(d / "a.json")}, "j1", output={"val_fraction": 0.2})
    j2 = run(tmp_path, {"path": str(d / "a.json")}, "j2", workers=2, output={"val_fraction": 0.2})
    assert shard_bytes(j1) == shard_bytes(j2) and len(shard_bytes(j1)) > 6  # several shards


def test_small_files_grouped_in_units_give_the_dataset_of_one_unit_each(tmp_path, monkeypatch):
    """readers.group_small_files: the same shards (val split included) as one unit per file; a damaged
    file is left out whole and listed, its neighbours kept; rejects keep each file's line numbers."""
    import pipeline.readers as readers
    texts = corpus_texts(300)
    d = tmp_path / "d"
    d.mkdir()
    for i in range(0, len(texts), 7):
        chunk = "".join(json.dumps({"text": t}) + "\n" for t in texts[i:i + 7])
        if i % 3 == 0:
            (d / f"f{i:04d}.jsonl.gz").write_bytes(gzip.compress(chunk.encode()))
        else:
            (d / f"f{i:04d}.jsonl").write_text(chunk)
    (d / "f0100.jsonl").write_text('{"text": "kept"}\n{"body": 1}\n')  # line 2: missing_field
    cut = gzip.compress(b"".join(json.dumps({"text": f"t{i}"}).encode() + b"\n" for i in range(3000)))
    (d / "f0101.jsonl.gz").write_bytes(cut[:-100])  # damaged: its unit would fail
    src = {"path": str(d / "*"), "format": "jsonl"}
    recipe = Recipe.from_dict({"name": "t", "source": src, "tokenizer": {"path": str(DEMO_TOKENIZER)},
                               "output": {"dir": "o"}, "unit_bytes": 65536})
    units = plan_units(recipe)
    assert len(units) < 5 and all(u.group for u in units)  # ~45 files, a few units
    grouped = run(tmp_path, src, "grouped", workers=2, output={"val_fraction": 0.3})
    monkeypatch.setattr(readers, "group_small_files", lambda got, unit_bytes: got)
    assert len(plan_units(recipe)) == len(list(d.iterdir()))
    single = run(tmp_path, src, "single", workers=2, output={"val_fraction": 0.3})
    assert shard_bytes(grouped) == shard_bytes(single)
    g, s = read_manifest(grouped), read_manifest(single)
    assert g.splits == s.splits and g.splits["val"].num_docs > 0 and g.skipped == s.skipped == {"missing_field": 1}
    assert [(Path(f["path"]).name, "corrupt or truncated" in f["error"]) for f in g.failed_units] == [
        ("f0101.jsonl.gz", True)] == [(Path(f["path"]).name, "corrupt or truncated" in f["error"]) for f in s.failed_units]
    rows = [json.loads(line) for line in (grouped / "rejects.jsonl").read_text().splitlines()]
    assert [(Path(r["source"]).name, r["line"], r["reason"]) for r in rows] == [("f0100.jsonl", 2, "missing_field")]
    assert (grouped / "rejects.jsonl").read_bytes() == (single / "rejects.jsonl").read_bytes()
    monkeypatch.undo()
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("a.jsonl.gz", "b.jsonl.gz"):
        (bad / name).write_bytes(cut[:-100])
    with pytest.raises(PrepError, match=r"every unit failed \(1 unit\), .* the first: .*a\.jsonl\.gz: corrupt"):
        run(tmp_path, {"path": str(bad / "*"), "format": "jsonl"}, "allbad")


def test_grouped_small_files_keep_min_and_max_chars(tmp_path, monkeypatch):
    """Plain small files read together (jsonl.whole_small_files) drop and count documents outside
    [min_chars, max_chars] as their own units would."""
    import pipeline.readers as readers
    d = tmp_path / "d"
    d.mkdir()
    texts = corpus_texts(200)
    for i in range(0, len(texts), 5):
        (d / f"f{i:04d}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[i:i + 5]))
    src = {"path": str(d / "*"), "format": "jsonl", "min_chars": 40, "max_chars": 400}
    grouped = read_manifest(run(tmp_path, src, "grouped"))
    monkeypatch.setattr(readers, "group_small_files", lambda got, unit_bytes: got)
    single = read_manifest(run(tmp_path, src, "single"))
    assert grouped.splits == single.splits and grouped.skipped == single.skipped
    assert grouped.skipped["too_short"] > 0 and grouped.skipped["too_long"] > 0
    assert grouped.splits["train"].num_docs == sum(40 <= len(t) <= 400 for t in texts)


_small_record = st.one_of(
    st.text(min_size=1, max_size=40).map(lambda t: json.dumps({"text": t}).encode()),
    st.sampled_from([b'{"text": null}', b'{"body": 1}', b'{"text": ', b"", b'{"text": "bad \xff"}', b'{"text": 5}']),
)
_small_file = st.tuples(st.lists(_small_record, max_size=12), st.sampled_from(["jsonl", "jsonl.gz", "json"]),
                        st.booleans(), st.booleans())  # records, suffix, a BOM, damaged (gz: cut short)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(_small_file, min_size=1, max_size=12), batch_docs=st.integers(1, 9),
       val_fraction=st.sampled_from([0.0, 0.4]), lengths=st.sampled_from([(0, None), (6, None), (0, 20), (3, 30)]))
def test_grouped_small_files_are_the_dataset_of_one_unit_each(tmp_path_factory, monkeypatch, files, batch_docs,
                                                              val_fraction, lengths):
    """Any mix of small files, bad records, BOMs, JSON arrays and damaged files: grouping them into
    units (whose plain good files jsonl.whole_small_files reads together) changes nothing in the
    output (shards, val split, skipped counts with min_chars/max_chars, rejects, failed files)."""
    import pipeline.readers as readers
    d = tmp_path_factory.mktemp("small")
    for i, (records, suffix, bom, damaged) in enumerate(files):
        data = (b"\xef\xbb\xbf" if bom else b"") + b"\n".join(records) + b"\n"
        if suffix == "json":  # a JSON array of the good records
            data = (b"\xef\xbb\xbf" if bom else b"") + b"[" + b",".join(r for r in records if r.startswith(b'{"text": "')
                                                                   and b"\xff" not in r) + b"]"
        if suffix == "jsonl.gz":
            data = gzip.compress(data)
            data = data[:len(data) // 2] if damaged else data
        (d / f"f{i:03d}.{suffix}").write_bytes(data)
    src = {"path": str(d / "*"), "format": "jsonl", "min_chars": lengths[0], "max_chars": lengths[1]}
    outs = {}
    for grouped in (True, False):
        if not grouped:
            monkeypatch.setattr(readers, "group_small_files", lambda got, unit_bytes: got)
        name = f"{d.name}-{grouped}"
        try:
            out = run(d, src, name, batch_docs=batch_docs, output={"val_fraction": val_fraction})
        except PrepError as e:  # every file damaged, or a wrong field: the same error either way
            outs[grouped] = str(e).split(" the first: ")[-1]
            continue
        m = read_manifest(out)
        rejects = (out / "rejects.jsonl").read_bytes() if (out / "rejects.jsonl").exists() else b""
        outs[grouped] = (shard_bytes(out), m.splits, m.skipped, rejects,
                         [(Path(f["path"]).name, f["error"]) for f in m.failed_units])
    monkeypatch.undo()
    assert outs[True] == outs[False]


def test_a_utf8_bom_at_a_files_start_is_not_text(tmp_path):
    """Windows tools write one; orjson refuses it (the first record was rejected as invalid_utf8) and a
    text file's first document began with U+FEFF."""
    bom = b"\xef\xbb\xbf"
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.jsonl").write_bytes(bom + b'{"text": "first"}\r\n{"text": "second"}\n')
    (d / "b.jsonl.gz").write_bytes(gzip.compress(bom + b'{"text": "third"}\n'))
    (d / "c.csv").write_bytes(bom + b"text,id\r\nfourth,1\r\n")
    (d / "e.txt").write_bytes(bom + b"fifth\r\nsixth\n")
    (d / "f.txt").write_bytes(bom + b"seventh")
    (d / "g.jsonl").write_bytes(bom + b'\n{"text": "eighth"}\n')  # the BOM alone on its line: a blank line
    sources = [{"path": str(d / "a.jsonl")}, {"path": str(d / "b.jsonl.gz")}, {"path": str(d / "c.csv")},
               {"path": str(d / "e.txt"), "doc_separator": "\n"}, {"path": str(d / "f.txt")},
               {"path": str(d / "g.jsonl")}]
    out = run(tmp_path, sources, "bom")
    tok = Tokenizer.from_file(str(DEMO_TOKENIZER))
    docs = [tok.decode(ids.tolist()[:-1]) for ids in read_split(out, "train")]  # without the EOS
    assert docs == ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"]
    assert not read_manifest(out).skipped


def test_truncated_zst_names_file_and_offset_and_resumes_after_replacement(tmp_path):
    texts = corpus_texts()
    data = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.jsonl").write_bytes(data)
    good = zstandard.ZstdCompressor().compress(data)
    (d / "b.jsonl.zst").write_bytes(good[: len(good) * 2 // 3])
    src = {"path": str(d / "*.jsonl*"), "format": "jsonl"}
    with pytest.raises(PrepError) as e:
        run(tmp_path, src, "resumed", on_bad_record="error")
    found = re.search(re.escape(f"{d / 'b.jsonl.zst'}: corrupt or truncated input: it decodes to byte ") + r"([\d,]+) ",
                      str(e.value))
    assert found and len(data) // 3 < int(found.group(1).replace(",", "")) < len(data), str(e.value)
    out = tmp_path / "out" / "resumed"
    assert not (out / "manifest.json").exists()
    journal = [line for line in (out / ".prep" / "journal.jsonl").read_text().splitlines()
               if '"placed"' not in line]  # unit lines, not placed-shard lines
    plain_units = -(-len(data) // 65536)
    done = sorted(json.loads(line)["unit"] for line in journal)
    # the plain file's units are kept, and the .zst's ranges before the damage (it is cut into ranges
    # of its decompressed bytes, pipeline/spool.py), not the ones from the damage on
    assert plain_units > 1 and done[:plain_units] == list(range(plain_units))
    assert plain_units < len(done) < 2 * plain_units
    (d / "b.jsonl.zst").write_bytes(good)
    run(tmp_path, src, "resumed", on_bad_record="error")
    clean = run(tmp_path, src, "clean", on_bad_record="error")
    assert shard_bytes(out) == shard_bytes(clean)
    assert read_manifest(out).splits == read_manifest(clean).splits



@pytest.mark.parametrize("name", ["b.jsonl", "b.csv", "b.txt", "b.parquet", "b.jsonl.gz"])
def test_a_file_deleted_after_planning_fails_its_unit_with_one_line(tmp_path, name):
    """A worker's open is the first since planning listed the file: one deleted or moved during the run
    was a FileNotFoundError traceback, under skip too (a text file read whole said it in one line)."""
    d = tmp_path / "d"
    d.mkdir()
    rows = [f"doc {i}" for i in range(50)]
    lines = "".join(json.dumps({"text": t}) + "\n" for t in rows).encode()
    data = {".jsonl": lines, ".csv": ("text\n" + "\n".join(rows) + "\n").encode(), ".txt": "\n".join(rows).encode(),
            ".gz": gzip.compress(lines)}
    for stem in ("a", "b"):
        path = d / name.replace("b", stem, 1)
        if name.endswith(".parquet"):
            pq.write_table(pa.table({"text": rows}), path)
        else:
            path.write_bytes(data[path.suffix])
    fmt = {"b.txt": "text", "b.csv": "csv", "b.parquet": "parquet"}.get(name, "jsonl")
    gone = d / name

    def delete(files):
        gone.rename(tmp_path / name)

    for policy in ("skip", "error"):
        recipe = Recipe.from_dict({"name": "t", "source": {"path": str(d / "*"), "format": fmt, "doc_separator": "\n"}
                                   if fmt == "text" else {"path": str(d / "*"), "format": fmt},
                                   "tokenizer": {"path": str(DEMO_TOKENIZER)}, "on_bad_record": policy,
                                   "output": {"dir": str(tmp_path / policy), "val_fraction": 0.0}, "num_workers": 1})
        expected = rf"{re.escape(str(gone))}: file disappeared during the run; put it back and re-run"
        if policy == "skip":
            tokenize(recipe, show_progress=False, check_inputs=delete)
            m = read_manifest(tmp_path / policy)
            assert m.splits["train"].num_docs == len(rows)
            assert m.failed_units and all(re.match(expected, f["error"]) for f in m.failed_units)
        else:
            with pytest.raises(PrepError, match=expected):
                tokenize(recipe, show_progress=False, check_inputs=delete)
        (tmp_path / name).rename(gone)

def test_under_skip_a_damaged_file_fails_only_its_unit(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.jsonl").write_text(json.dumps({"text": "kept"}) + "\n")
    # 36 KB decompressed, under unit_bytes: one unit (a file of several keeps the units before its damage,
    # tests/faults/test_split_compressed.py)
    gz = gzip.compress(b"".join(json.dumps({"text": f"t{i}"}).encode() + b"\n" for i in range(2000)))
    (d / "b.jsonl.gz").write_bytes(gz[:-100])
    out = run(tmp_path, {"path": str(d / "*"), "format": "jsonl"}, "skipfail")
    m = read_manifest(out)
    assert m.splits["train"].num_docs == 1
    assert len(m.failed_units) == 1 and "b.jsonl.gz: corrupt or truncated input" in m.failed_units[0]["error"]
    # with no other unit there is no dataset: an error, not an empty dataset and exit 0
    with pytest.raises(PrepError, match=r"every unit failed \(1 unit\), so there is nothing to write; the first: "
                                        r".*b\.jsonl\.gz: corrupt or truncated input.* re-run with --overwrite"):
        run(tmp_path, {"path": str(d / "b.jsonl.gz"), "format": "jsonl"}, "allfail")
    assert not (tmp_path / "out" / "allfail" / "manifest.json").exists()


def test_jsonl_with_lone_cr_line_ends_names_them_in_its_reject(tmp_path):
    """Records ended by a lone CR are one JSON Lines line: the whole file was one malformed_json
    reject, "unexpected content after document", with nothing saying why."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.jsonl").write_bytes(b'{"text": "kept"}\n' + b'{"text":"one"}\r{"text":"two"}\r\n' + b'{"text": "x"}\r\n')
    out = run(tmp_path, {"path": str(d / "a.jsonl"), "format": "jsonl"}, "cr")
    rows = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["reason"]) for r in rows] == [(2, "malformed_json")]  # CRLF lines stay records
    assert "lone carriage return" in rows[0]["detail"] and "tr '\\r' '\\n'" in rows[0]["detail"]
    assert read_manifest(out).splits["train"].num_docs == 2


def test_a_null_record_is_named_null_in_its_reject(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.jsonl").write_bytes(b'{"text": "kept"}\nnull\n')
    out = run(tmp_path, {"path": str(d / "a.jsonl"), "format": "jsonl"}, "null")
    rows = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["reason"]) for r in rows] == [(2, "missing_field")]
    assert "the record is null, not an object" in rows[0]["detail"]  # was "is NoneType"


def test_a_damaged_gz_names_where_its_text_stops_and_one_fix(tmp_path):
    """The codec reads ahead, so the compressed offset reached was the file's end (117,038 of a file
    damaged from its byte 200): the error now names the bytes of text read before the damage. And
    the every-unit-failed line gave two fixes ("replace the file and re-run to resume. Fix the input,
    then re-run ..."): it keeps the damaged file's one."""
    text = b"".join(json.dumps({"text": f"record {i}"}).encode() + b"\n" for i in range(1500))  # 35 KB: one unit
    gz = bytearray(gzip.compress(text))
    for i in range(len(gz) // 2, len(gz) - 20, 50):  # damaged from its middle on
        gz[i] ^= 0xFF
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.jsonl.gz").write_bytes(gz)
    with pytest.raises(PrepError) as e:
        run(tmp_path, {"path": str(d / "a.jsonl.gz"), "format": "jsonl"}, "damaged")
    found = re.search(r"a\.jsonl\.gz: corrupt or truncated input: it decodes to byte ([\d,]+) of its "
                      r"decompressed text, then fails", str(e.value))
    assert found, str(e.value)
    decoder, decodes = zlib.decompressobj(31), 0  # the bytes of text before the damage, fed one at a time
    try:
        for i in range(len(gz)):
            decodes += len(decoder.decompress(bytes(gz[i:i + 1])))
    except zlib.error:
        pass
    assert len(text) // 4 < decodes < len(text)
    assert int(found.group(1).replace(",", "")) == decodes
    assert str(e.value).endswith("replace the file and re-run to resume (or re-run with --overwrite to start over)")
    assert "Fix the input" not in str(e.value)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_compressed_file_under_a_plain_name_stops_the_run_under_skip(tmp_path, workers):
    """Among small files grouped in one unit, a .jsonl that is gzip gave one reject per line and left
    its documents out, exit 0; it now stops the run naming the rename that reads it (sniff.py)."""
    d = tmp_path / "d"
    d.mkdir()
    for i in range(6):
        (d / f"f{i}.jsonl").write_text("".join(json.dumps({"text": f"file {i} doc {k}"}) + "\n" for k in range(3)))
    bad = d / "f3.jsonl"
    bad.write_bytes(gzip.compress(bad.read_bytes()))
    with pytest.raises(SchemaError, match=re.escape(f"{bad}: its bytes are gzip-compressed (they begin 1f 8b 08")
                       + r".* rename it to f3\.jsonl\.gz or decompress it"):
        run(tmp_path, {"path": str(d)}, f"disguised{workers}", workers=workers)
    bad.rename(d / "f3.jsonl.gz")
    out = run(tmp_path, {"path": str(d)}, f"renamed{workers}", workers=workers)
    m = read_manifest(out)
    assert m.splits["train"].num_docs == 18 and not m.skipped and not m.failed_units


# -- property: random corruption never crashes a `skip` run and never loses an intact document -----

CORRUPTIONS = ["truncate", "garbage", "bad_utf8", "rename_key", "null", "number", "oversize"]
EXPECTED_REASON = {"truncate": "malformed_json", "garbage": "malformed_json", "bad_utf8": "invalid_utf8",
                   "rename_key": "missing_field", "null": "null_text", "number": "non_string_text",
                   "oversize": "record_too_large"}


def expected_reason(kind: str, line: bytes) -> str:
    if kind == "truncate":  # a cut inside a multi-byte character is (first) invalid UTF-8
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            return "invalid_utf8"
    return EXPECTED_REASON[kind]


def corrupt(line: bytes, kind: str, cut: int, limit: int) -> bytes:
    if kind == "truncate":
        return line[: 1 + cut % (len(line) - 2)]
    if kind == "garbage":
        return b"\x00garbage" + line
    if kind == "bad_utf8":
        head = len(b'{"text": "')
        return line[:head] + b"\xff\xfe" + line[head:]
    if kind == "rename_key":
        return line.replace(b'"text"', b'"txet"', 1)
    if kind == "null":
        return b'{"text": null}'
    if kind == "number":
        return b'{"text": %d}' % cut
    return b'{"text": "' + b"p" * limit + b'"}'


@pytest.fixture(scope="module")
def clean_lines() -> list[bytes]:
    return [json.dumps({"text": t}, ensure_ascii=False).encode() for t in corpus_texts(150)]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_corruption_never_crashes_and_never_loses_intact_documents(tmp_path_factory, clean_lines, data):
    n = len(clean_lines)
    bad = data.draw(st.dictionaries(st.integers(0, n - 1), st.tuples(st.sampled_from(CORRUPTIONS),
                                                                     st.integers(0, 10**6)), max_size=n // 3))
    limit = max(map(len, clean_lines)) + 16  # room for the bytes `garbage` and `bad_utf8` add
    tmp = tmp_path_factory.mktemp("corrupt")
    lines = [corrupt(line, *bad[i], limit) if i in bad else line for i, line in enumerate(clean_lines)]
    (tmp / "c.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    (tmp / "intact.jsonl").write_bytes(b"".join(line + b"\n" for i, line in enumerate(clean_lines) if i not in bad))
    out = run(tmp, {"path": str(tmp / "c.jsonl"), "max_record_bytes": limit}, "corrupt")
    ref = run(tmp, {"path": str(tmp / "intact.jsonl")}, "intact")
    m = read_manifest(out)
    assert shard_bytes(out) == shard_bytes(ref)  # every intact document exactly once, in order
    assert m.splits["train"].num_docs == n - len(bad)
    assert sum(m.skipped.values()) == len(bad) and not m.failed_units
    rows = [json.loads(r) for r in (out / "rejects.jsonl").read_text().splitlines()] if bad else []
    offsets = np.cumsum([0] + [len(x) + 1 for x in lines])
    assert [(r["position"], r["reason"]) for r in rows] == [(int(offsets[i]), expected_reason(bad[i][0], lines[i]))
                                                             for i in sorted(bad)]


def test_a_tsv_of_sentences_reads_with_quoting_none_and_says_so_without(tmp_path):
    """Tatoeba's sentences file, psql's and cut's TSV: tab-separated, never quoted, quotes as text. Read
    with CSV quoting (pandas' default too) a sentence that starts with a quote loses it; the run ends
    with a note naming source.quoting: none, under which the documents are the lines' sentences
    (the documents of the same sentences as JSON Lines), .gz cut into spooled ranges on 2 workers too."""
    texts = corpus_texts(600)
    sentences = [t.replace("\t", " ").replace("\n", " ").replace("\r", " ") for t in texts]
    for i in range(0, len(sentences), 7):
        sentences[i] = f'"{sentences[i][:20]}," she said. {sentences[i][20:]}'
    d = tmp_path / "d"
    d.mkdir()
    data = "".join(f"{i}\teng\t{s}\n" for i, s in enumerate(sentences)).encode()
    (d / "sentences.tsv").write_bytes(b"id\tlang\ttext\n" + data)
    (d / "sentences.tsv.gz").write_bytes(gzip.compress(b"id\tlang\ttext\n" + data))
    (d / "sentences.jsonl").write_text("".join(json.dumps({"text": s}) + "\n" for s in sentences))
    want = [doc.tolist() for doc in read_split(run(tmp_path, {"path": str(d / "sentences.jsonl")}, "jsonl"), "train")]
    assert len(want) == len(sentences)
    for name in ("sentences.tsv", "sentences.tsv.gz"):  # other units, so other shard boundaries: compare documents
        out = run(tmp_path, {"path": str(d / name), "quoting": "none"}, f"none-{name}", workers=2)
        assert [doc.tolist() for doc in read_split(out, "train")] == want
    recipe = Recipe.from_dict({"name": "t", "source": {"path": str(d / "sentences.tsv")},
                               "tokenizer": {"path": str(DEMO_TOKENIZER)},
                               "output": {"dir": str(tmp_path / "out" / "quoted"), "val_fraction": 0.0},
                               "num_workers": 2, "unit_bytes": 65536})
    result = tokenize(recipe, show_progress=False)
    quoted = [n for n in result.notes if "set source.quoting: none" in n]
    at = len(b"id\tlang\ttext\n") + data.index(b'," she') + 1  # the closing quote followed by a space
    assert len(quoted) == 1 and quoted[0].startswith(f"{d / 'sentences.tsv'}: the quote at byte {at:,} is inside a field")
    # read as the csv module (and pandas) read it: a sentence that starts with a quote and has no
    # closing quote before a tab or line end runs on over the next lines, joining 3 rows into one
    as_csv = list(csv.reader(io.StringIO("id\tlang\ttext\n" + data.decode()), delimiter="\t"))[1:]
    assert result.manifest.splits["train"].num_docs == len(as_csv) == len(sentences) - 2


def test_a_small_files_notice_reaches_the_runs_notes(tmp_path):
    """Small files share a unit (each read as alone); a member's notice is the unit's, so the run's note
    names the file with the stray quote."""
    d = tmp_path / "d"
    d.mkdir()
    for i in range(3):
        quote = '"Hi," she said.' if i == 1 else "no quote here"
        (d / f"s{i}.tsv").write_text(f"id\ttext\n1\tfirst line\n2\t{quote}\n")
    recipe = Recipe.from_dict({"name": "t", "source": {"path": str(d)}, "tokenizer": {"path": str(DEMO_TOKENIZER)},
                               "output": {"dir": str(tmp_path / "out"), "val_fraction": 0.0}, "num_workers": 1})
    assert len(plan_units(recipe)) == 1
    result = tokenize(recipe, show_progress=False)
    at = (d / "s1.tsv").read_bytes().index(b'," she') + 1  # the closing quote, followed by a space
    assert [n.split(" (line")[0] for n in result.notes if "source.quoting: none" in n] == [
        f"{d / 's1.tsv'}: the quote at byte {at} is inside a field, not at its start or end"]


def test_a_text_file_whose_lines_end_in_a_lone_cr_gets_a_note(tmp_path):
    """Per-line text whose lines end in "\\r" alone (classic Mac, some exports) was one document per file,
    with no word (3,000 lines: 1 document); a note now names the lone carriage returns and the fix. A
    CRLF file, whose lines end in "\\r\\n", gets none."""
    lines = [f"line number {i} of the file" for i in range(300)]
    for name, ending, notes_it in (("mac.txt", "\r", True), ("dos.txt", "\r\n", False)):
        p = tmp_path / name
        p.write_bytes(ending.join(lines).encode() + ending.encode())
        recipe = Recipe.from_dict({"name": "t", "source": {"path": str(p), "format": "text", "doc_separator": "\n"},
                                   "tokenizer": {"path": str(DEMO_TOKENIZER)},
                                   "output": {"dir": str(tmp_path / "out" / name), "val_fraction": 0.0}})
        result = tokenize(recipe, show_progress=False)
        noted = [n for n in result.notes if "carriage returns (\\r) not followed by a newline" in n]
        assert bool(noted) == notes_it, result.notes
        docs = read_manifest(tmp_path / "out" / name).splits["train"].num_docs
        assert docs == (1 if notes_it else 300)
        if notes_it:
            assert noted[0].startswith(f"{p}: a line holds 299 carriage returns") and "tr '\\r' '\\n'" in noted[0]
