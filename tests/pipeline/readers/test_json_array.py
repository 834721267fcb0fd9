"""A .json file holding one JSON array of records is read like the same records as JSON Lines."""

from __future__ import annotations

import gzip
import json

import pytest

from pipeline.readers import jsonl as jsonl_reader
from pipeline.readers import plan_units
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
    assert len(units) == 1 and (units[0].start, units[0].end) == (0, -1)  # not cut into byte ranges
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


def test_a_big_array_is_one_unit_in_the_plan(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(RECORDS * 20))  # ~1.4 MB, over unit_bytes
    recipe = Recipe.from_dict({"name": "t", "source": {"path": str(path)}, "tokenizer": {"path": "t"},
                               "output": {"dir": "o"}, "unit_bytes": 65536})
    units = plan_units(recipe)
    assert len(units) == 1 and (units[0].start, units[0].end) == (0, -1) and units[0].size == path.stat().st_size
