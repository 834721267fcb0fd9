"""A .json file holding one JSON array of records, or one object holding them in a list under
`source.records_field`, is read like the same records as JSON Lines."""

from __future__ import annotations

import gzip
import json

import pytest

from pipeline.errors import PrepError, SchemaError
from pipeline.readers import json_cuts, plan_units
from pipeline.readers import jsonl as jsonl_reader
from pipeline.recipe import Recipe, SourceConfig
from tests.pipeline.readers import readerkit


def read_all(source: SourceConfig, files: list[str], unit_bytes: int = 1 << 16):
    return readerkit.read_all(jsonl_reader, source, files, unit_bytes)


RECORDS = [{"text": f"document {i} " + "word " * (i % 7), "id": i} for i in range(1500)]


@pytest.mark.parametrize("layout", ["pretty", "one line", "gzip", "bom", "leading blank lines"])
def test_an_array_gives_its_records_in_order(tmp_path, layout):
    body = json.dumps(RECORDS, indent=2 if layout == "pretty" else None).encode()
    path = tmp_path / ("a.json.gz" if layout == "gzip" else "a.json")
    data = {"bom": b"\xef\xbb\xbf" + body, "leading blank lines": b"\n \n\t" + body}.get(layout, body)
    path.write_bytes(gzip.compress(data) if layout == "gzip" else data)
    units, texts, positions, bad = read_all(SourceConfig(path=str(path)), [str(path)], unit_bytes=4096)
    # cut between its records (test_json_cuts.py); a compressed file's ranges are spooled windows
    assert len(units) > 1 and all(u.is_spooled == (layout == "gzip") for u in units)
    assert texts == [r["text"] for r in RECORDS] and positions == list(range(len(RECORDS))) and not bad


def test_bad_records_in_an_array_are_listed_by_row(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps([{"text": "ok"}, {"text": None}, {"body": "x"}, [1, 2], {"text": 5}, {"text": "y" * 50},
                                {"text": "fine"}]))
    source = SourceConfig(path=str(path), max_record_bytes=40)
    _, texts, positions, bad = read_all(source, [str(path)])
    assert texts == ["ok", "fine"] and positions == [0, 6]
    assert [(r["row"], r["reason"]) for r in bad] == [(1, "null_text"), (2, "missing_field"), (3, "missing_field"),
                                                      (4, "non_string_text"), (5, "record_too_large")]
    assert bad[1]["detail"] == "no 'text'; the record has 'body'"


def test_a_damaged_array_and_json_lines_starting_with_an_array_are_read_as_lines(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps(RECORDS[:5], indent=1)[:-10])  # damaged: read as lines, each one rejected
    _, texts, _, bad = read_all(SourceConfig(path=str(path)), [str(path)])
    assert texts == [] and {r["reason"] for r in bad} == {"malformed_json"} and bad[0]["line"] == 1
    lines = tmp_path / "b.jsonl"  # JSON Lines whose first line is an array: a bad record, the rest read
    lines.write_text('[1, 2]\n{"text": "kept"}\n')
    _, texts, _, bad = read_all(SourceConfig(path=str(lines)), [str(lines)])
    assert texts == ["kept"] and [r["reason"] for r in bad] == ["missing_field"]


def test_a_big_array_is_cut_between_its_records_in_the_plan(tmp_path):
    path = tmp_path / "big.json"
    data = json.dumps(RECORDS * 20).encode()  # ~1.4 MB, over unit_bytes
    path.write_bytes(data)
    recipe = Recipe.from_dict({"name": "t", "source": {"path": str(path)}, "tokenizer": {"path": "t"},
                               "output": {"dir": "o"}, "unit_bytes": 65536})
    units = plan_units(recipe)
    assert len(units) > 15 and sum(u.size for u in units) == len(data)
    assert all(data[u.start:u.start + 3] == b', {' for u in units[1:])  # at a comma between two records


@pytest.mark.parametrize("layout", ["pretty", "one line", "gzip", "bom", "nested"])
def test_an_object_gives_the_records_under_records_field(tmp_path, layout):
    records = {"result": {"items": RECORDS}} if layout == "nested" else {"version": "1.1", "data": RECORDS}
    body = json.dumps(records, indent=2 if layout in ("pretty", "nested") else None).encode()
    path = tmp_path / ("a.json.gz" if layout == "gzip" else "a.json")
    data = b"\xef\xbb\xbf" + body if layout == "bom" else body
    path.write_bytes(gzip.compress(data) if layout == "gzip" else data)
    source = SourceConfig(path=str(path), records_field="result.items" if layout == "nested" else "data")
    units, texts, positions, bad = read_all(source, [str(path)], unit_bytes=4096)
    # cut between the list's records (test_json_cuts.py): from its `[` to its `]`
    assert len(units) > 5 and data[units[0].start:units[0].start + 1] == b"["
    assert data.rstrip()[units[-1].end - 1:units[-1].end] == b"]" if layout != "gzip" else units[-1].end > 0
    assert texts == [r["text"] for r in RECORDS] and positions == list(range(len(RECORDS))) and not bad


def test_bad_records_under_records_field_are_listed_by_row(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"data": [{"text": "ok"}, {"body": "x"}, {"text": None}, {"text": "fine"}]}))
    _, texts, positions, bad = read_all(SourceConfig(path=str(path), records_field="data"), [str(path)])
    assert texts == ["ok", "fine"] and positions == [0, 3]
    assert [(r["row"], r["reason"]) for r in bad] == [(1, "missing_field"), (2, "null_text")]


def test_a_pretty_printed_object_without_records_field_is_an_error_naming_its_lists(tmp_path):
    """Before, each of its lines was a malformed_json reject, and the dataset empty (exit 0)."""
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"version": "1.1", "data": RECORDS * 3, "tags": ["a"]}, indent=2))  # over unit_bytes
    recipe = Recipe.from_dict({"name": "t", "source": {"path": str(path)}, "tokenizer": {"path": "t"},
                               "output": {"dir": "o"}, "unit_bytes": 65536})
    units = plan_units(recipe)
    assert len(units) == 1 and (units[0].start, units[0].end) == (0, -1)  # not cut into lines
    with pytest.raises(SchemaError, match=r"squad\.json: the file is one JSON object \(keys 'version', 'data', 'tags' "
                                          r"\['data': a list of 4,500 objects\]\), not JSON Lines .* set "
                                          r"source\.records_field"):
        read_all(SourceConfig(path=str(path)), [str(path)])


@pytest.mark.parametrize("layout", ["indent 2", "nested values", "bom", "gzip", "big", "nan elsewhere",
                                    "key on the brace line"])
def test_one_pretty_printed_object_is_one_record(tmp_path, layout):
    """`json.dump(record, f, indent=2)`: one record, as the same object on one line is in JSON Lines.
    Before, a SchemaError advised setting records_field, though the file holds no list to read."""
    record = {"text": "hello", "id": 1}
    if layout == "nested values":  # lists and objects inside the record, but no list of objects
        record["meta"] = {"tags": ["a", "b"], "source": {"url": "u"}}
    if layout == "big":  # over unit_bytes: scanned for cuts, none found, read whole
        record["text"] = "word " * 2000
    body = json.dumps(record, indent=2).encode() + b"\n"
    if layout == "key on the brace line":  # `{"text": "hello",` (once read as lines: 3 rejects, no document)
        body = body.replace(b"{\n  ", b"{", 1)
    if layout == "nan elsewhere":  # what json.dump writes for a float NaN: parsed by Python's json
        body = body.replace(b'"id": 1', b'"id": NaN')
    path = tmp_path / ("a.json.gz" if layout == "gzip" else "a.json")
    data = b"\xef\xbb\xbf" + body if layout == "bom" else body
    path.write_bytes(gzip.compress(data) if layout == "gzip" else data)
    assert body.startswith(b'{"text"' if layout == "key on the brace line" else b"{\n")
    units, texts, positions, bad = read_all(SourceConfig(path=str(path)), [str(path)], unit_bytes=4096)
    assert len(units) == 1
    if layout == "nan elsewhere":  # one reject, as its line would be in JSON Lines
        assert texts == [] and [(r["row"], r["reason"]) for r in bad] == [(0, "malformed_json")]
        return
    assert texts == [record["text"]] and positions == [0] and not bad
    template = SourceConfig(path=str(path), text_template="{id}: {text}")
    assert read_all(template, [str(path)])[1] == [f"1: {record['text']}"]


def test_one_object_holding_a_list_is_a_record_only_when_it_holds_the_text(tmp_path):
    """An object holding a list of objects is a holder of records (set records_field) unless it holds
    the text itself: a record with, say, its comments. A list deeper down is named in the error."""
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"text": "post", "comments": [{"user": "a"}, {"user": "b"}]}, indent=2))
    _, texts, positions, bad = read_all(SourceConfig(path=str(path)), [str(path)])
    assert texts == ["post"] and positions == [0] and not bad
    _, texts, _, _ = read_all(SourceConfig(path=str(path), text_template="{text} ({comments})"), [str(path)])
    assert texts == []  # a list is no template value: a non_string_text reject, not the holder's error
    with pytest.raises(SchemaError, match=r"a\.json: the file is one JSON object \(keys 'text', 'comments' \['comments': "
                                          r"a list of 2 objects\]\), not JSON Lines .* set source\.records_field"):
        read_all(SourceConfig(path=str(path), text_field="body"), [str(path)])
    nested = tmp_path / "b.json"
    nested.write_text(json.dumps({"result": {"count": 2, "items": RECORDS[:2]}}, indent=2))
    with pytest.raises(SchemaError, match=r"b\.json: the file is one JSON object \(keys 'result'\), not JSON Lines .* "
                                          r"set source\.records_field to the key of its list of records \(there is one "
                                          r"under 'result\.items'\)"):
        read_all(SourceConfig(path=str(nested)), [str(nested)])
    assert read_all(SourceConfig(path=str(nested), records_field="result.items"), [str(nested)])[1] == [
        r["text"] for r in RECORDS[:2]]


@pytest.mark.parametrize("body, records_field, error, message", [
    ({"data": RECORDS[:3]}, "rows", SchemaError, r"records_field 'rows': the file's object has no 'rows'; it has 'data' "
                                                 r"\['data': a list of 3 objects\]"),
    ({"data": {"rows": 1}}, "data.rows.x", SchemaError, r"records_field 'data\.rows\.x': 'data\.rows' has no 'x'; "
                                                        r"it is int, not an object"),
    ({"data": "text"}, "data", SchemaError, r"records_field 'data' is str, not a list of records"),
    (RECORDS[:3], "data", SchemaError, r"the file is one JSON array, not an object with records under 'data'; "
                                       r"remove source\.records_field"),
    (None, "data", PrepError, r"not one JSON object \(unexpected content after document"),
])
def test_a_file_not_of_the_records_field_shape_names_what_it_holds(tmp_path, body, records_field, error, message):
    path = tmp_path / "a.json"
    path.write_text(json.dumps(body) if body is not None else '{"text": "a"}\n{"text": "b"}\n')  # None: JSON Lines
    with pytest.raises(error, match=message) as got:
        read_all(SourceConfig(path=str(path), records_field=records_field), [str(path)])
    # a file that is not JSON at all is damaged (a failed unit under skip), not the recipe's mistake
    assert isinstance(got.value, SchemaError) == (error is SchemaError)


def test_json_lines_starting_with_a_brace_line_are_still_lines(tmp_path):
    """Only a lone `{` on the first line marks a pretty-printed object; a JSON Lines record holds a key
    on its line, and a damaged object is read as lines, whose rejects say what is wrong."""
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "one"}\n{"text": "two"}\n')
    assert read_all(SourceConfig(path=str(path)), [str(path)])[1] == ["one", "two"]
    damaged = tmp_path / "b.json"
    damaged.write_text(json.dumps({"data": RECORDS[:3]}, indent=1)[:-5])
    _, texts, _, bad = read_all(SourceConfig(path=str(damaged)), [str(damaged)])
    assert texts == [] and {r["reason"] for r in bad} == {"malformed_json"} and bad[0]["line"] == 1


@pytest.mark.parametrize("layout", ["jq", "jq gzip", "bom", "compact objects on lines of their own"])
def test_objects_one_after_another_are_records(tmp_path, layout):
    """`jq . data.jsonl > data.json` writes each record pretty-printed, one after another: before,
    each of its lines was a malformed_json reject and the dataset empty."""
    indent = None if layout.startswith("compact") else 2
    body = "\n".join(json.dumps(r, indent=indent) for r in RECORDS).encode() + b"\n"
    if layout.startswith("compact"):  # a lone "{" first line marks the file; the rest on one line each
        body = b"{\n" + body[1:]
    path = tmp_path / ("a.json.gz" if "gzip" in layout else "a.json")
    data = b"\xef\xbb\xbf" + body if layout == "bom" else body
    path.write_bytes(gzip.compress(data) if "gzip" in layout else data)
    units, texts, positions, bad = read_all(SourceConfig(path=str(path)), [str(path)], unit_bytes=4096)
    assert len(units) > 1 and all(u.is_spooled == ("gzip" in layout) for u in units)  # cut between its objects
    assert texts == [r["text"] for r in RECORDS] and positions == list(range(len(RECORDS))) and not bad


@pytest.mark.parametrize("tail", ['{"text": "cut', '"a string"'])
def test_objects_one_after_another_with_a_bad_one_are_read_as_lines(tmp_path, tail):
    """All or nothing, as for an array: a value that does not parse at all, or one that is neither an
    object nor an array, leaves the file to the line reader, whose rejects name each bad line (NaN
    parses: one reject, test_a_record_that_is_not_json_is_one_reject_not_the_whole_file)."""
    path = tmp_path / "a.json"
    path.write_text("\n".join(json.dumps(r, indent=2) for r in RECORDS[:3]) + "\n" + tail + "\n")
    _, texts, _, bad = read_all(SourceConfig(path=str(path)), [str(path)])
    assert texts == [] and bad and bad[0]["line"] == 1 and bad[0]["reason"] == "malformed_json"


def test_objects_then_an_array_that_holds_no_records_is_one_reject(tmp_path):
    """An array after objects one after another is read as after an array (test_json_values): `[1, 2]`
    holds no objects, so it is one record, a missing_field reject, and the objects before it are read
    (before, the whole file went to the line reader: no document)."""
    path = tmp_path / "a.json"
    path.write_text("\n".join(json.dumps(r, indent=2) for r in RECORDS[:3]) + "\n[1, 2]\n")
    _, texts, positions, bad = read_all(SourceConfig(path=str(path)), [str(path)])
    assert texts == [r["text"] for r in RECORDS[:3]] and positions == [0, 1, 2]
    assert [(r["row"], r["reason"]) for r in bad] == [(3, "missing_field")]


def test_a_big_json_value_gets_a_warning_with_the_way_to_json_lines(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(jsonl_reader, "BIG_DOCUMENT_BYTES", 50_000)
    big, small, lines = tmp_path / "big.json.gz", tmp_path / "small.json", tmp_path / "lines.jsonl"
    # one record, so one unit: over the (patched) bound decompressed, though not compressed
    big.write_bytes(gzip.compress(json.dumps([{"text": " ".join(map(str, range(20_000)))}]).encode(), 9))
    assert big.stat().st_size < 50_000
    small.write_text(json.dumps(RECORDS[:10], indent=1))
    lines.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))  # cut into ranges: no warning
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(RECORDS, indent=1))  # cut between its records: no warning
    files = [str(big), str(small), str(lines), str(cut)]
    with caplog.at_level("WARNING", logger="prep"):
        jsonl_reader.plan(SourceConfig(path=str(tmp_path)), 0, files, 4096)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [str(big)]
    assert "read whole by one worker" in caplog.text and "jq -c '.[]'" in caplog.text
    caplog.clear()
    obj = tmp_path / "obj.json"  # its list starts past the bytes searched for it: read whole (test_json_cuts.py)
    obj.write_text(json.dumps({"about": "x" * 5000, "data": RECORDS}))
    monkeypatch.setattr(json_cuts, "HEAD_BYTES", 4096)
    with caplog.at_level("WARNING", logger="prep"):
        jsonl_reader.plan(SourceConfig(path=str(obj), records_field="data"), 0, [str(obj)], 4096)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [str(obj)]
    assert "'data' does not begin in the file's first 4096 bytes" in caplog.text


@pytest.mark.parametrize("indent", [0, 2, 4])
def test_objects_one_after_another_with_nested_objects_split_where_they_end(indent):
    """concatenated_objects splits jq's layout at its top-level `}` / `{` line pair; with indent 0
    nested objects close at the start of a line too, and must stay whole."""
    from pipeline.readers.json_array import concatenated_objects
    records = [{"text": f"t{i} }}\n{{ braces in a string", "meta": {"a": [1, {"b": {"c": i}}], "d": {}}}
               for i in range(50)]
    data = "".join(json.dumps(r, indent=indent) + "\n" for r in records).encode()
    assert concatenated_objects(data) == records
    assert concatenated_objects(data.replace(b"\n", b"\r\n")) == records  # the stdlib scan's way


@pytest.mark.parametrize("layout", ["pretty", "one line", "cut", "jq", "records_field"])
def test_a_record_that_is_not_json_is_one_reject_not_the_whole_file(tmp_path, layout):
    """What Python's json.dump writes and orjson (as JSON Lines reads a line) refuses: NaN from a float,
    a lone surrogate from a string cut inside a pair. Each such record is one reject (malformed_json,
    lone_surrogate), as its line would be in JSON Lines; before, the file was read as lines (every
    record rejected, exit 0) or a cut array's unit failed whole."""
    records = [dict(r) for r in RECORDS[:300]]
    records[3]["score"] = float("nan")
    records[250]["text"] = "cut \ud83d"
    if layout == "jq":
        body = "".join(json.dumps(r, indent=2) + "\n" for r in records)
    elif layout == "records_field":
        body = json.dumps({"version": 1, "data": records}, indent=2)
    else:
        body = json.dumps(records, indent=None if layout == "one line" else 2)
    path = tmp_path / "a.json"
    path.write_text(body, encoding="utf-8", errors="surrogatepass")
    source = SourceConfig(path=str(path), records_field="data" if layout == "records_field" else None)
    units, texts, positions, bad = read_all(source, [str(path)], unit_bytes=4096 if layout == "cut" else 1 << 20)
    assert (len(units) > 1) == (layout == "cut")
    kept = [i for i in range(300) if i not in (3, 250)]
    assert texts == [records[i]["text"] for i in kept] and positions == kept
    assert [(r["row"], r["reason"]) for r in bad] == [(3, "malformed_json"), (250, "lone_surrogate")]
    assert "NaN or Infinity" in bad[0]["detail"] and "lone UTF-16 surrogate" in bad[1]["detail"]
    # with encoding_errors: replace the lone surrogate is U+FFFD, as invalid UTF-8 is (test_lone_surrogates.py)
    source = SourceConfig(path=str(path), records_field=source.records_field, encoding_errors="replace")
    _, texts, positions, bad = read_all(source, [str(path)], unit_bytes=4096 if layout == "cut" else 1 << 20)
    kept = [i for i in range(300) if i != 3]
    assert texts == [records[i]["text"] if i != 250 else "cut \ufffd" for i in kept] and positions == kept
    assert [(r["row"], r["reason"]) for r in bad] == [(3, "malformed_json")]


@pytest.mark.parametrize("after", ['{"text": "one more"', "garbage"])
@pytest.mark.parametrize("indent", [0, 1])
def test_an_array_followed_by_more_keeps_its_records_and_rejects_the_rest(tmp_path, after, indent):
    """`[...]` then bytes that are not JSON: the whole file was read as JSON Lines, a reject per line
    (60,002 for 20,000 pretty-printed records), every record lost. Its records are read now (a file
    planned for cutting too: the scan cannot follow it, so it is one unit), and what follows is one
    malformed_json reject at the next row, naming the byte where the array closed. Values that follow
    are records (test_json_values.py). An array of non-objects on one line is JSON Lines' first record
    still (test_a_damaged_array_and_json_lines_...)."""
    records = RECORDS[:1500]
    array = json.dumps(records, indent=indent)
    path = tmp_path / "a.json"
    path.write_bytes(b"\xef\xbb\xbf" + array.encode() + b"\n" + after.encode() + b"\n")
    for unit_bytes in (4096, 1 << 20):
        units, texts, positions, bad = read_all(SourceConfig(path=str(path)), [str(path)], unit_bytes=unit_bytes)
        assert texts == [r["text"] for r in records] and positions == list(range(1500))
        assert [(r["row"], r["reason"], r["text"]) for r in bad] == [(1500, "malformed_json", after)]
        assert f"closes at byte {3 + len(array) - 1:,}" in bad[0]["detail"]


@pytest.mark.parametrize("layout", ["pretty", "one line", "cut"])
def test_a_record_nested_too_deep_is_one_reject_not_the_whole_file(tmp_path, layout):
    """A record holding 10,000 nested lists in a field that is not the text is beyond what orjson (1,024
    levels) or Python's json (~1,000) parses, so the whole array did not parse: a small file was read as
    JSON Lines, one malformed_json reject of its first line and every record lost (exit 0), and a cut
    file's unit failed whole. Now that record is one malformed_json reject naming the depth; a NaN
    next to it is still its own reject."""
    records = [dict(r) for r in RECORDS[:300]]
    records[3]["score"] = float("nan")
    records[7]["tree"] = "DEEP"  # json.dumps cannot write a value that deep: put in after
    body = json.dumps(records, indent=None if layout == "one line" else 2)
    body = body.replace('"DEEP"', "[" * 10_000 + "]" * 10_000, 1)
    path = tmp_path / "a.json"
    path.write_text(body, encoding="utf-8")
    units, texts, positions, bad = read_all(SourceConfig(path=str(path)), [str(path)],
                                            unit_bytes=4096 if layout == "cut" else 1 << 20)
    assert (len(units) > 1) == (layout == "cut")
    kept = [i for i in range(300) if i not in (3, 7)]
    assert texts == [records[i]["text"] for i in kept] and positions == kept
    assert [(r["row"], r["reason"]) for r in bad] == [(3, "malformed_json"), (7, "malformed_json")]
    assert "nested deeper than" in bad[1]["detail"] and bad[1]["text"].startswith("{")


@pytest.mark.parametrize("layout", ["records_field", "records_field cut", "records_field dotted", "jq", "jq cut"])
def test_a_record_nested_too_deep_is_one_reject_in_a_holder_or_jq_objects(tmp_path, layout):
    """As test_a_record_nested_too_deep_is_one_reject_not_the_whole_file, for the other layouts. Before:
    a records_field object smaller than a unit failed (exit 1, "not one JSON object (depth limit
    exceeded)"), every record lost; objects one after another (jq) were read as JSON Lines, a reject per
    line and 0 documents. Now the deep record is one malformed_json reject at its row, a NaN next to it
    its own, and a deep member beside the list (not a record) is passed over."""
    records = [dict(r) for r in RECORDS[:300]]
    records[3]["score"] = float("nan")
    records[7]["tree"] = "DEEP"
    deep = "[" * 10_000 + "]" * 10_000
    if layout.startswith("jq"):
        body = "\n".join(json.dumps(r, indent=2) for r in records) + "\n"
        source = SourceConfig(path=str(tmp_path / "a.json"))
    else:
        # a deep member beside the list keeps the scan from cutting the file (it parses the bytes around
        # the list): read whole
        holder = {"meta": 1 if layout.endswith("cut") else "DEEP", "data": records}
        if layout.endswith("dotted"):
            holder = {"version": 1, "inner": holder}
        body = json.dumps(holder, indent=2).replace('"DEEP"', deep, 1)  # the meta: not a record
        source = SourceConfig(path=str(tmp_path / "a.json"),
                              records_field="inner.data" if layout.endswith("dotted") else "data")
    body = body.replace('"DEEP"', deep, 1)
    path = tmp_path / "a.json"
    path.write_text(body, encoding="utf-8")
    units, texts, positions, bad = read_all(source, [str(path)], unit_bytes=4096 if layout.endswith("cut") else 1 << 20)
    assert (len(units) > 1) == layout.endswith("cut")
    kept = [i for i in range(300) if i not in (3, 7)]
    assert texts == [records[i]["text"] for i in kept] and positions == kept
    assert [(r["row"], r["reason"]) for r in bad] == [(3, "malformed_json"), (7, "malformed_json")]
    assert "nested deeper than" in bad[1]["detail"] and bad[1]["text"].startswith("{")


@pytest.mark.parametrize("key", [b'"caf\xe9"', b'"a\tb"'])
def test_a_records_field_file_with_a_bad_key_is_its_error_not_a_traceback(tmp_path, key):
    """A records_field file that does not parse is read again member by member (for a record nested too
    deep); a key that is not valid JSON text (latin-1 bytes, a raw tab) raised orjson's JSONDecodeError
    out of that, a traceback that ended the run. It is the file's one-line error again (a review found it)."""
    path = tmp_path / "a.json"
    path.write_bytes(b"{" + key + b': 1, "data": [{"text": "hello world"}, {"text": "bye"}]}')
    source = SourceConfig(path=str(path), records_field="data")
    with pytest.raises(PrepError, match=f"{path}: not one JSON object"):
        read_all(source, [str(path)], unit_bytes=1 << 20)
