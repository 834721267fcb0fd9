"""JSON values one after another in one file (arrays joined with `cat`, a record appended to an array,
an array on one line then JSON Lines), where the rejects of a record nested too deep point in the
file, and a records_field file with a deep member beside its list: every record is read."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.readers import jsonl as jsonl_reader
from pipeline.recipe import SourceConfig
from tests.pipeline.readers import readerkit

RECORDS = [{"text": f"document {i} " + "word " * (i % 7), "id": i} for i in range(600)]
DEEP = "[" * 2000 + "]" * 2000  # past the 1,024 levels orjson reads


def read_all(source: SourceConfig, unit_bytes: int = 1 << 20):
    return readerkit.read_all(jsonl_reader, source, [source.path], unit_bytes)


def _layouts(a: list, b: list) -> dict[str, bytes]:
    lines = "".join(json.dumps(r) + "\n" for r in b)
    return {
        "two arrays joined (cat a.json b.json)": json.dumps(a, indent=2) + "\n" + json.dumps(b, indent=2) + "\n",
        "two arrays on one line each": json.dumps(a) + "\n" + json.dumps(b) + "\n",
        "an array, then objects appended": json.dumps(a, indent=2) + "\n" + "\n".join(json.dumps(r, indent=2) for r in b),
        "an array on one line, then JSON Lines": json.dumps(a) + "\n" + lines,
        # an array on one line (json.dump's default) then a pretty-printed value: split into lines, each was
        # a reject (review)
        "an array on one line, then an indented array": json.dumps(a) + "\n" + json.dumps(b, indent=2) + "\n",
        "an array on one line, then indented objects": json.dumps(a) + "\n" + "\n".join(json.dumps(r, indent=2)
                                                                                       for r in b),
        "an array, then objects, all on one line": json.dumps(a) + "".join(json.dumps(r) for r in b),
        # objects one after another (jq's layout), then an array: read as JSON Lines, every line a reject
        "objects, then an array": "\n".join(json.dumps(r, indent=2) for r in a) + "\n" + json.dumps(b, indent=2),
        "one object, then an array": "".join(json.dumps(r, indent=2) for r in a[:1]) + "\n" + json.dumps(a[1:] + b, indent=2),
        "objects, an array, then objects": "\n".join(json.dumps(r, indent=2) for r in a) + "\n"
                                           + json.dumps(b[:100]) + "\n" + "\n".join(json.dumps(r, indent=2) for r in b[100:]),
    }


@pytest.mark.parametrize("layout", list(_layouts([], [])))
@pytest.mark.parametrize("unit_bytes", [4096, 1 << 20])
def test_json_values_one_after_another_keep_every_record(tmp_path, layout, unit_bytes):
    """Two array exports joined kept the first's records only (the second was one malformed_json reject),
    a record appended to an array was that reject, and an array on one line then lines was JSON Lines:
    the array's records one missing_field reject. Now each array gives its records and each object is
    one, in file order, as objects one after another always were read (jq's layout)."""
    path = tmp_path / "a.json"
    path.write_text(_layouts(RECORDS[:300], RECORDS[300:])[layout], encoding="utf-8")
    _, texts, positions, bad = read_all(SourceConfig(path=str(path)), unit_bytes)
    assert texts == [r["text"] for r in RECORDS] and positions == list(range(600)) and bad == []


def test_a_bad_line_after_an_array_on_one_line_is_its_own_reject(tmp_path):
    """After an array on one line the rest is JSON Lines: a bad line is one reject, the lines after it are
    read (not one reject for the whole rest)."""
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps(RECORDS[:3]) + '\n{"text": "four"}\n{"text": broken\n{"text": "six"}\n[1, 2]\n')
    _, texts, positions, bad = read_all(SourceConfig(path=str(path)))
    assert texts == [r["text"] for r in RECORDS[:3]] + ["four", "six"] and positions == [0, 1, 2, 3, 5]
    assert [(r["row"], r["reason"]) for r in bad] == [(4, "malformed_json"), (6, "missing_field")]


def test_every_line_that_is_an_array_of_records_after_one_gives_its_records(tmp_path):
    """A line `[{...}, {...}]` after an array on one line gave its records before the first bad line and
    was one missing_field reject after it (review): its documents lost by where the bad line was."""
    path = tmp_path / "a.jsonl"
    path.write_text('[{"text": "a"}, {"text": "b"}]\n[{"text": "c"}]\nnot json\n[{"text": "e"}, {"text": "f"}]\n'
                    '{"text": "g"}\n')
    _, texts, positions, bad = read_all(SourceConfig(path=str(path)))
    assert texts == ["a", "b", "c", "e", "f", "g"] and positions == [0, 1, 2, 4, 5, 6]
    assert [(r["row"], r["reason"]) for r in bad] == [(3, "malformed_json")]


def test_a_bad_line_after_a_one_line_array_moves_no_other_records_position(tmp_path):
    """After a one-line array, a line `[1, 2]` was one record while every line was JSON, but two (and `[]`
    none) once a bad line sent the rest through the value walk: the positions after it, which the
    train/val split hashes, moved with a bad line elsewhere in the file (review)."""
    path = tmp_path / "a.jsonl"
    for extra in ("[1, 2]", "[]"):
        good = f'[{{"text": "a"}}]\n{extra}\n{{"text": "b"}}\n'
        for body, bad_rows in ((good, []), (good + '{"text": broken\n', [(3, "malformed_json")])):
            path.write_text(body)
            _, texts, positions, bad = read_all(SourceConfig(path=str(path)))
            assert texts == ["a", "b"] and positions == [0, 2], (extra, body)
            assert [(r["row"], r["reason"]) for r in bad] == [(1, "missing_field"), *bad_rows]


@pytest.mark.parametrize("layout", ["array", "jq objects", "records_field"])
def test_a_nesting_reject_names_the_line_of_the_file(tmp_path, layout):
    """orjson's "line 1 column 1,045" counted inside the deep record, whichever line of the file it was
    on; the reject names the file's line and column now."""
    records = [dict(r) for r in RECORDS[:40]]
    records[30]["tree"] = "DEEP"
    if layout == "jq objects":
        body = "\n".join(json.dumps(r, indent=2) for r in records) + "\n"
    else:
        body = json.dumps({"data": records} if layout == "records_field" else records, indent=2)
    body = body.replace('"DEEP"', DEEP)
    line = body[:body.index("[[[")].count("\n") + 1
    column = body.index("[[[") - body.rfind("\n", 0, body.index("[[[")) + 1024  # its 1,025th bracket
    path = tmp_path / "a.json"
    path.write_text(body)
    _, texts, _, bad = read_all(SourceConfig(path=str(path), records_field="data" if layout == "records_field" else None))
    assert len(texts) == 39 and [(r["row"], r["reason"]) for r in bad] == [(30, "malformed_json")]
    assert line > 100 and f"at line {line:,} column {column:,} of the file" in bad[0]["detail"]


def test_a_nesting_reject_in_a_cut_range_names_the_byte_of_the_file(tmp_path):
    """A unit that is a range of a cut array does not know its lines: the reject names the file's byte."""
    records = [dict(r) for r in RECORDS]
    records[500]["tree"] = "DEEP"
    body = json.dumps(records, indent=2).replace('"DEEP"', DEEP)
    path = tmp_path / "a.json"
    path.write_text(body)
    units, texts, _, bad = read_all(SourceConfig(path=str(path)), unit_bytes=4096)
    assert len(units) > 1 and len(texts) == 599 and [(r["row"], r["reason"]) for r in bad] == [(500, "malformed_json")]
    assert f"at byte {body.index('[[[') + 1024:,} of the file" in bad[0]["detail"]


def test_a_records_field_file_with_a_deep_member_beside_its_list_is_cut(tmp_path):
    """The bytes around a records_field list are parsed to check that they hold it; a member beside it
    nested past 1,024 levels made that parse fail, and a big file was read whole (one worker, ~5x its
    size in memory). It is read member by member now, and the file is cut between its records."""
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"meta": "DEEP", "data": RECORDS, "after": "DEEP"}, indent=2).replace('"DEEP"', DEEP))
    units, texts, positions, bad = read_all(SourceConfig(path=str(path), records_field="data"), unit_bytes=4096)
    assert len(units) > 1
    assert texts == [r["text"] for r in RECORDS] and positions == list(range(600)) and bad == []


@pytest.mark.parametrize("codec", ["", ".zst"])
def test_objects_then_an_array_is_read_whole_not_cut_between_objects(tmp_path, codec):
    """The scan cut objects one after another after each object back at the top level, an array's `]` too:
    the unit holding the array failed ("not JSON objects one after another"), and the cuts' record counts
    took the array as one record. A top-level array among the objects now leaves the file whole."""
    body = "\n".join(json.dumps(r, indent=2) for r in RECORDS[:300]) + "\n" + json.dumps(RECORDS[300:], indent=2)
    path = tmp_path / f"a.json{codec}"
    if codec:
        import zstandard
        path.write_bytes(zstandard.ZstdCompressor().compress(body.encode()))
    else:
        path.write_text(body)
    units, texts, positions, bad = read_all(SourceConfig(path=str(path)), unit_bytes=4096)
    assert len(units) == 1
    assert texts == [r["text"] for r in RECORDS] and positions == list(range(600)) and bad == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(0, 40), min_size=1, max_size=8), st.integers(0, 2), st.sampled_from([512, 4096, 1 << 20]))
def test_objects_and_arrays_in_any_order_give_every_record_once_in_file_order(tmp_path, values, indent, unit_bytes):
    """Values one after another, each an object (0) or an array of that many records, pretty-printed or
    not (indent 0: compact arrays, objects pretty-printed so the file opens like a document): whatever
    the file opens with and however it is cut, every record once, in file order, at its index."""
    records, parts = iter(RECORDS), []
    want = []
    for n in values:
        chunk = [next(records) for _ in range(max(n, 1))]
        want += chunk
        if n == 0:
            parts.append(json.dumps(chunk[0], indent=indent or 2))
        else:
            parts.append(json.dumps(chunk, indent=indent or None))
    path = tmp_path / "a.json"
    path.write_text("\n".join(parts) + "\n")
    _, texts, positions, bad = read_all(SourceConfig(path=str(path)), unit_bytes)
    assert texts == [r["text"] for r in want] and positions == list(range(len(want))) and bad == []
