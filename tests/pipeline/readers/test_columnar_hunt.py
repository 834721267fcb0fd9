"""Columnar inputs (Parquet, Hugging Face Arrow files) whose text column is not a plain valid string
column: every document is read, or rejected with a reason, as the same values are in the other layouts."""

from __future__ import annotations

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import PrepError, SchemaError
from pipeline.readers import csv as csv_reader
from pipeline.readers import hf as hf_reader
from pipeline.readers import parquet as pq_reader
from pipeline.recipe import SourceConfig
from tests.pipeline.readers import readerkit


@pytest.fixture(autouse=True)
def _fresh_hf_cache():
    hf_reader._CACHE.clear()
    datasets.disable_progress_bars()
    yield
    hf_reader._CACHE.clear()


def _saved_with_values(path, values: list[bytes | None]) -> None:
    """A save_to_disk directory whose `text` column holds these bytes as strings, unchecked (as an Arrow
    file written by pyarrow, which does not validate UTF-8, is)."""
    datasets.Dataset.from_dict({"text": ["x"] * len(values)}).save_to_disk(str(path))
    (arrow,) = path.glob("*.arrow")
    with pa.memory_map(str(arrow)) as mm:
        schema = pa.ipc.open_stream(mm).schema  # keeps datasets' features metadata
    column = pa.array(values, pa.binary()).view(pa.string())
    table = pa.table({"text": column}, schema=schema)
    with pa.ipc.new_stream(str(arrow), schema) as w:
        w.write_table(table)


def test_hf_arrow_value_that_is_not_utf8_rejects_its_row_not_the_unit(tmp_path):
    """One value of a saved dataset's Arrow file that is not UTF-8 raised UnicodeDecodeError out of
    to_pydict: the unit (up to unit_bytes of documents) failed as "reading the dataset failed" and
    every good row in it was lost. Now that row is an invalid_utf8 reject (U+FFFD under replace)."""
    _saved_with_values(tmp_path / "saved", [b"ok", b"bad \xff", None, b"fine"])
    source = SourceConfig(path=str(tmp_path / "saved"), format="hf")
    _, got, positions, bad = readerkit.read_all(hf_reader, source, [source.path])
    assert got == ["ok", "fine"] and positions == [0, 3]
    assert [(r["reason"], r["row"]) for r in bad] == [("invalid_utf8", 1), ("null_text", 2)]
    assert bad[0]["text"] == "bad \ufffd"  # the preview, decoded for the reader of rejects.jsonl
    hf_reader._CACHE.clear()
    source = SourceConfig(path=str(tmp_path / "saved"), format="hf", encoding_errors="replace")
    assert readerkit.read_all(hf_reader, source, [source.path])[1] == ["ok", "bad \ufffd", "fine"]
    hf_reader._CACHE.clear()
    source = SourceConfig(path=str(tmp_path / "saved"), format="hf", text_template="[{text}]")
    _, got, _, bad = readerkit.read_all(hf_reader, source, [source.path])
    assert got == ["[ok]", "[fine]"] and [r["reason"] for r in bad] == ["invalid_utf8", "null_text"]


def test_hf_binary_column_is_decoded_as_parquet_decodes_it(tmp_path):
    """A Value("binary") text column was non_string_text on every row (the run stopped: "holds no
    string"), where the same column in Parquet is decoded as UTF-8; now it is decoded the same way,
    from a saved dataset's Arrow files and through datasets (a builder's split slice) alike."""
    values = [b"caf\xc3\xa9", b"bad \xff", b"z"]
    datasets.Dataset.from_dict({"text": values}, features=datasets.Features({"text": datasets.Value("binary")})
                               ).save_to_disk(str(tmp_path / "saved"))
    with pa.ipc.new_stream(str(tmp_path / "data.arrow"), pa.schema([("text", pa.binary())])) as w:
        w.write_table(pa.table({"text": pa.array(values, pa.binary())}))
    for source in (SourceConfig(path=str(tmp_path / "saved"), format="hf"),
                   SourceConfig(path="arrow", format="hf", data_files=[str(tmp_path / "data.arrow")], split="train[:3]"),
                   # streamed: bytes values out of `datasets`, which were non_string_text on every row
                   SourceConfig(path="arrow", format="hf", data_files=[str(tmp_path / "data.arrow")], streaming=True)):
        hf_reader._CACHE.clear()
        _, got, positions, bad = readerkit.read_all(hf_reader, source, [source.path])
        assert got == ["café", "z"] and positions == [0, 2]
        assert [(r["reason"], r["row"]) for r in bad] == [("invalid_utf8", 1)]


def test_a_streamed_binary_column_is_decoded_under_encoding_errors_and_in_a_template(tmp_path):
    """A streamed dataset's binary values: U+FFFD under encoding_errors: replace, and decoded as a
    template's field, as a saved dataset's are."""
    with pa.ipc.new_stream(str(tmp_path / "data.arrow"), pa.schema([("t", pa.string()), ("b", pa.binary())])) as w:
        w.write_table(pa.table({"t": ["A", "B"], "b": pa.array([b"caf\xc3\xa9", b"bad \xff"], pa.binary())}))
    files = [str(tmp_path / "data.arrow")]
    source = SourceConfig(path="arrow", format="hf", data_files=files, streaming=True, text_field="b",
                          encoding_errors="replace")
    assert readerkit.read_all(hf_reader, source, [source.path])[1] == ["café", "bad \ufffd"]
    hf_reader._CACHE.clear()
    source = SourceConfig(path="arrow", format="hf", data_files=files, streaming=True, text_template="{t}:{b}")
    _, got, _, bad = readerkit.read_all(hf_reader, source, [source.path])
    assert got == ["A:café"] and [(r["reason"], r["row"]) for r in bad] == [("invalid_utf8", 1)]


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary()])
def test_parquet_template_decodes_binary_and_replaces_bad_utf8_as_text_field_does(tmp_path, kind):
    """Under text_template a binary column's values were bytes, every row non_string_text, and a
    string column with a value that is not UTF-8 rejected its row under encoding_errors: replace too;
    text_field decoded both. Now a template reads them as text_field does."""
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"title": pa.array([b"A", b"B", b"C"], pa.binary()).view(pa.string()),
                             "text": pa.array([b"x", b"y \xff", b"z"], kind)}), path)
    source = SourceConfig(path=str(path), text_template="{title}: {text}")
    _, got, _, bad = readerkit.read_all(pq_reader, source, [str(path)])
    assert got == ["A: x", "C: z"] and [(r["reason"], r["row"]) for r in bad] == [("invalid_utf8", 1)]
    source = SourceConfig(path=str(path), text_template="{title}: {text}", encoding_errors="replace")
    assert readerkit.read_all(pq_reader, source, [str(path)])[1] == ["A: x", "B: y \ufffd", "C: z"]

    pq.write_table(pa.table({"title": pa.array([b"A", b"B \xff"], pa.binary()).view(pa.string()),
                             "text": ["x", "y"]}), path)
    source = SourceConfig(path=str(path), text_template="{title}: {text}", encoding_errors="replace")
    assert readerkit.read_all(pq_reader, source, [str(path)])[1] == ["A: x", "B \ufffd: y"]


def test_a_slice_of_a_saved_dataset_dicts_split_is_read(tmp_path):
    """`split: train[:10%]` of a save_to_disk DatasetDict was refused as "'train[:10%]' is not a split of
    ... (it has train, test)", naming a split it has; it reads the slice as load_dataset reads one (each
    worker loads the view again), and a slice of a split it lacks is refused as before."""
    texts = [f"row {i}" for i in range(50)]
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": texts}),
                          "test": datasets.Dataset.from_dict({"text": ["t0", "t1"]})}
                         ).save_to_disk(str(tmp_path / "saved"), num_shards={"train": 2, "test": 1})
    # a union of whole splits (train+test) was refused as "not a split" too
    for split, want in (("train[:10%]", texts[:5]), ("train[-3:]+test", texts[-3:] + ["t0", "t1"]),
                        ("train+test", texts + ["t0", "t1"])):
        hf_reader._CACHE.clear()
        source = SourceConfig(path=str(tmp_path / "saved"), format="hf", split=split)
        units, got, positions, bad = readerkit.read_all(hf_reader, source, [source.path])
        assert got == want and positions == list(range(len(want))) and not bad
    hf_reader._CACHE.clear()
    with pytest.raises(PrepError, match=r"^source\.split: 'valid\[:10%\]' is not a split of .*saved \(it has train, test\)$"):
        readerkit.read_all(hf_reader, SourceConfig(path=str(tmp_path / "saved"), format="hf", split="valid[:10%]"),
                           [str(tmp_path / "saved")])


def test_a_utf16_csv_is_named_by_the_plan_without_a_stray_quote_warning(tmp_path, caplog):
    """A big UTF-16 CSV (Excel's "Unicode Text") was scanned for cuts as UTF-8: every quote sat beside
    a NUL byte, so the plan warned "the file is not quoted as CSV ... set source.quoting: none" (the
    wrong fix) before a worker's error said the file is UTF-16. The plan now says that first, alone."""
    rows = "".join(f'{i},"text ""{i}"", with a comma"\r\n' for i in range(20_000))
    path = tmp_path / "a.csv"
    path.write_bytes(("id,text\r\n" + rows).encode("utf-16"))
    source = SourceConfig(path=str(path), format="csv")
    with pytest.raises(SchemaError, match=r"a\.csv: its text is UTF-16LE, and prep reads UTF-8; convert it"):
        csv_reader.plan(source, 0, [str(path)], 1 << 16)
    assert not [r for r in caplog.records if "quote" in r.getMessage()]
