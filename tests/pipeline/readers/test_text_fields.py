"""Where a record's text comes from: a dotted text_field through a list (`messages.0.content`), and a
text_template field that is null, in each reader that takes records with nested values."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.readers import jsonl as jsonl_reader
from pipeline.readers import parquet as pq_reader
from pipeline.recipe import SourceConfig
from tests.pipeline.readers import readerkit

CHATS = [{"id": i, "messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
         for i in range(3)]


def _read(tmp_path, fmt: str, records: list[dict], **options):
    if fmt == "jsonl":
        path = tmp_path / "a.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        reader = jsonl_reader
    else:
        path = tmp_path / "a.parquet"
        pq.write_table(pa.Table.from_pylist(records), path)
        reader = pq_reader
    source = SourceConfig(path=str(path), format=fmt, **options)
    _, texts, _, bad = readerkit.read_all(reader, source, [str(path)])
    return texts, bad


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_dotted_text_field_indexes_a_list_with_a_number(tmp_path, fmt):
    """`messages.0.content` was refused: "'messages' is list, not an object" (every record, then the run).
    A part that is a number indexes a list, from the end when negative, as jq's .messages[0].content."""
    assert _read(tmp_path, fmt, CHATS, text_field="messages.0.content") == (["q0", "q1", "q2"], [])
    assert _read(tmp_path, fmt, CHATS, text_field="messages.-1.content")[0] == ["a0", "a1", "a2"]
    texts, bad = _read(tmp_path, fmt, CHATS, text_template="{messages.0.content}\n{messages.1.content}")
    assert texts == ["q0\na0", "q1\na1", "q2\na2"] and not bad


def test_a_list_on_a_dotted_path_names_how_to_index_it(tmp_path):
    """An index past the list's end, or a name where the path meets a list: the reject says which."""
    chats = CHATS[:1] + [{"id": 9, "messages": [{"role": "user", "content": "only"}]}]
    texts, bad = _read(tmp_path, "jsonl", chats, text_field="messages.1.content")
    assert texts == ["a0"]
    assert [(r["reason"], r["detail"]) for r in bad] == [
        ("missing_field", "no 'messages.1.content'; 'messages' is a list of 1 item, with no index 1")]
    texts, bad = _read(tmp_path, "jsonl", CHATS[:1] + [{"messages": "x", "text": "t"}], text_field="messages.content")
    assert texts == [] and bad[0]["detail"] == ("no 'messages.content'; 'messages' is a list, not an object; index it "
                                                "with a number (messages.0.content)")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_null_template_field_rejects_its_record_naming_the_field_and_the_fix(tmp_path, fmt):
    """A null field of a text_template is the record's null_text reject, as a null text_field is (written
    empty, `{title}\\n\\n{text}` with a null text would be a document of its title alone); its detail said
    only "'title' is null": it names the template field and the fix now."""
    records = [{"title": "A", "text": "x"}, {"title": None, "text": "y"}]
    texts, bad = _read(tmp_path, fmt, records, text_template="{title}\n\n{text}")
    assert texts == ["A\n\nx"]
    assert [(r["reason"], r["detail"]) for r in bad] == [
        ("null_text", "text_template field 'title' is null; fill it in the data (jq '.title //= \"\"', pandas "
                      "fillna('')) or leave {title} out of source.text_template")]


def test_a_text_field_holding_one_string_in_a_list_says_string_once():
    """"'text' is a list of 1 strings, not one": the count and the noun now agree."""
    from pipeline.filters import RecordError, TextExtractor
    for value, said in ((["p"], "a list of 1 string, not one"), (["p", "q"], "a list of 2 strings, not one")):
        with pytest.raises(RecordError) as e:
            TextExtractor("text")({"text": value})
        assert e.value.detail == f"'text' is {said}"


def test_a_path_part_of_other_digits_is_a_missing_field_not_a_traceback(tmp_path):
    """`messages.²`: str.isdigit() took "²" for an index, and int("²") raised a ValueError (review)."""
    texts, bad = _read(tmp_path, "jsonl", CHATS[:1], text_field="messages.²")
    assert texts == [] and [r["reason"] for r in bad] == ["missing_field"]


def test_a_dotted_path_through_objects_checks_each_part_once(monkeypatch):
    """The common dotted path (meta.text, objects all the way) is one type check per part: with the list
    case checked first it was two, 160,000 more isinstance calls over 80,000 Parquet rows (+3-4% CPU of
    reading them, benchmarks/results/regression_check_cpu2_202611.md). Lists still index."""
    from pipeline import filters
    checks = []

    def counted(value, kind):
        checks.append(kind)
        return isinstance(value, kind)

    monkeypatch.setattr(filters, "isinstance", counted, raising=False)
    assert filters.get_value({"id": 1, "meta": {"lang": "en", "text": "t"}}, "meta.text") == "t"
    assert checks == [dict, dict, dict]  # the record (is "meta.text" a key?), then meta, then text
    assert filters.get_value({"messages": [{"content": "q"}, {"content": "a"}]}, "messages.-1.content") == "a"
