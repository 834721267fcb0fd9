"""A file whose first bytes contradict its name (compressed, an archive, UTF-16/32) is named with the
fix, and no text or JSON Lines is mistaken for one (pipeline/readers/sniff.py)."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import tarfile
import zipfile
import zlib

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import SchemaError
from pipeline.readers import csv as csv_reader
from pipeline.readers import jsonl, text
from pipeline.readers.base import BadRecords
from pipeline.readers.sniff import HEAD_BYTES, mislabeled, peek_head
from pipeline.recipe import SourceConfig

LINES = b"".join(json.dumps({"text": f"document {i} " * 30}).encode() + b"\n" for i in range(40))


def _tar(data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("docs/a.jsonl")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _zip(data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("a.jsonl", data)
    return buf.getvalue()


def _parquet() -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq
    buf = io.BytesIO()
    pq.write_table(pa.table({"text": [json.loads(line)["text"] for line in LINES.splitlines()]}), buf)
    return buf.getvalue()


SEVEN_Z_REST = (100).to_bytes(8, "little") + (20).to_bytes(8, "little") + (12345).to_bytes(4, "little")
# what a file holds -> (its bytes, words the reason must hold, the fix's words)
DISGUISES = {
    "gzip": (gzip.compress(LINES), "gzip-compressed", "rename it to a.jsonl.gz"),
    "zstd": (zstandard.ZstdCompressor().compress(LINES), "zstd-compressed", "rename it to a.jsonl.zst"),
    "bzip2": (bz2.compress(LINES), "bzip2-compressed", "rename it to a.jsonl.bz2"),
    "xz": (lzma.compress(LINES), "xz-compressed", "rename it to a.jsonl.xz"),
    "zip": (_zip(LINES), "a zip archive", "extract it"),
    "tar": (_tar(LINES), "a tar archive", "tar -xf a.jsonl"),
    "7z": (b"7z\xbc\xaf\x27\x1c\x00\x04" + zlib.crc32(SEVEN_Z_REST).to_bytes(4, "little") + SEVEN_Z_REST + b"\x00" * 40,
           "a 7z archive", "extract it"),
    "lz4": (b"\x04\x22\x4d\x18\x64\x40\xa7" + b"\x00" * 40, "lz4-compressed", "decompress it (or recompress it as .zst)"),
    "parquet": (_parquet(), "a Parquet file (they begin 50 41 52 31: 'PAR1')", "read it with source.format: parquet"),
    "utf-16 bom": (LINES.decode().encode("utf-16"), "UTF-16LE", "iconv -f UTF-16LE -t UTF-8"),
    "utf-16be": (LINES.decode().encode("utf-16-be"), "UTF-16BE", "iconv -f UTF-16BE -t UTF-8"),
    "utf-32": (LINES.decode().encode("utf-32"), "UTF-32LE", "iconv -f UTF-32LE -t UTF-8"),
}


@pytest.mark.parametrize("kind", sorted(DISGUISES))
def test_each_disguise_is_named_with_its_fix(kind):
    data, what, fix = DISGUISES[kind]
    why = mislabeled("/d/a.jsonl", data[:HEAD_BYTES], None)
    assert why is not None and what in why and fix in why


def test_inside_a_named_compression_the_reason_says_after_it():
    why = mislabeled("/d/a.jsonl.gz", gzip.compress(LINES)[:HEAD_BYTES], "gzip")
    assert why.startswith("after its gzip decompression, its bytes are gzip-compressed again")
    why = mislabeled("/d/docs.tar.gz", _tar(LINES)[:HEAD_BYTES], "gzip")
    assert why.startswith("after its gzip decompression, its bytes are a tar archive") and "tar -xf docs.tar.gz" in why
    why = mislabeled("/d/a.txt.zst", "text".encode("utf-16"), "zstd")
    assert "decompress it, then iconv -f UTF-16LE" in why


@pytest.mark.parametrize("head", [
    b"", b"\n", b'{"text": "a"}\n', b"[\n  {", b"\xef\xbb\xbf{\"text\": 1}", b"id,text\n1,hello\n",
    "Überschrift\n".encode(), b"BZh is not bzip2 without its block magic",
    b"x" * 257 + b"ustar" + b" " * 100,  # the tar magic's place, but no NUL in a header before it
    b"a\x00b\x00c",  # under 8 bytes: too little to call UTF-16
    b"\x00\x00\x00\x00\x00\x00\x00\x00",  # all NUL: neither byte order's ASCII
    b"\x1f\x8b\x08",  # gzip's signature, but a whole file of 3 bytes is none
    b"\x1f\x8b\x08" + b"\x00" * 40,  # gzip's signature, then what no gzip header is (bad flags... or data)
    b"\xfd7zXZ\x00" + b"\x00" * 30,  # xz's signature, a header whose CRC does not match
    b"\xff\xfe\n{\"text\": \"after a stray BOM\"}\n",  # UTF-8 after it: no ASCII character as UTF-16
    b"\x00" * 257 + b"ustar\x0000" + b"\x00" * 248,  # a tar magic, but the header's checksum is wrong
    b'\x04"M\x18<|eot|><|eot|>' + b"\x00" * 12,  # lz4's magic, then no frame descriptor (hypothesis found it)
    b"PK\x03\x04" + b"\xff" * 40,  # zip's magic, then no local file header
    b"7z\xbc\xaf\x27\x1c" + b"\x00" * 40,  # 7z's magic, its header's CRC-32 wrong
])
def test_text_and_json_are_not_mistaken(head):
    assert mislabeled("/d/a.jsonl", head, None) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=8), st.one_of(st.text(), st.integers(), st.none()), max_size=4),
                min_size=1, max_size=5),
       st.sampled_from(["", "\ufeff", " ", "\n"]))
def test_no_json_lines_or_array_is_mistaken(records, lead):
    """Any JSON Lines file or JSON array (ASCII-escaped or not, after a BOM or whitespace) reads as text."""
    for ascii_only in (True, False):
        lines = "".join(json.dumps(r, ensure_ascii=ascii_only) + "\n" for r in records)
        array = json.dumps(records, ensure_ascii=ascii_only, indent=1)
        for doc in (lines, array):
            assert mislabeled("/d/a.json", (lead + doc).encode()[:HEAD_BYTES], None) is None


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(min_codepoint=1, max_codepoint=0x7F), min_size=4, max_size=300),
       st.sampled_from(["utf-16-le", "utf-16-be", "utf-16"]))
def test_ascii_text_in_utf16_is_named_with_or_without_a_bom(doc, codec):
    why = mislabeled("/d/a.txt", doc.encode(codec)[:HEAD_BYTES], None)
    assert why is not None and ("UTF-16BE" if codec == "utf-16-be" else "UTF-16LE") in why


def test_peek_head_leaves_the_stream_where_it_was():
    class Seekable:  # no peek: read and seek back
        def __init__(self, data):
            self.f = io.BytesIO(data)

        def tell(self):
            return self.f.tell()

        def read(self, n=-1):
            return self.f.read(n)

        def seek(self, pos):
            return self.f.seek(pos)
    for stream in (io.BufferedReader(io.BytesIO(LINES)), Seekable(LINES)):
        assert peek_head(stream, 10) == LINES[:10]
        assert stream.read() == LINES
    assert peek_head(object()) == b""


def _read(reader, path, fmt, **source):
    src = SourceConfig(path=str(path), format=fmt, **source)
    out = []
    for unit in reader.plan(src, 0, [str(path)], 1 << 20):
        for batch in reader.iter_batches(unit, src, BadRecords(unit, "skip"), 16):
            out += batch.texts
    return out


READERS = {  # format -> (reader, source options, a good file's bytes)
    "jsonl": (jsonl, {}, LINES),
    "csv": (csv_reader, {}, b"id,text\n" + b"".join(b"%d,row %d\n" % (i, i) for i in range(40))),
    "text per file": (text, {}, b"one document\nof two lines\n"),
    "text per line": (text, {"doc_separator": "\n"}, b"first\nsecond\n"),
}


@pytest.mark.parametrize("fmt", sorted(READERS))
@pytest.mark.parametrize("kind", ["gzip", "bzip2", "utf-16"])
def test_each_reader_stops_at_a_disguised_file_and_the_fix_reads_it(tmp_path, fmt, kind):
    reader, options, data = READERS[fmt]
    name = "a." + ("txt" if fmt.startswith("text") else fmt)
    path = tmp_path / name
    path.write_bytes({"gzip": gzip.compress, "bzip2": bz2.compress,
                      "utf-16": lambda b: b.decode().encode("utf-16")}[kind](data))
    want = _read(reader, _plain(tmp_path, data, name), fmt.split()[0], **options)
    assert want
    with pytest.raises(SchemaError) as e:
        _read(reader, path, fmt.split()[0], **options)
    assert str(e.value).startswith(f"{path}: ")
    if kind == "utf-16":
        assert "iconv -f UTF-16LE -t UTF-8" in str(e.value)
        return
    suffix = {"gzip": ".gz", "bzip2": ".bz2"}[kind]
    assert f"rename it to {name}{suffix}" in str(e.value)
    renamed = path.rename(tmp_path / (name + suffix))
    assert _read(reader, renamed, fmt.split()[0], **options) == want


def _plain(tmp_path, data: bytes, name: str):
    d = tmp_path / "plain"
    d.mkdir(exist_ok=True)
    (d / name).write_bytes(data)
    return d / name


@pytest.mark.parametrize("name,content,message", [
    ("a.jsonl.gz", LINES, "its name ends in .gz, but its bytes are not gzip-compressed (they begin 7b 22 74 65: "
                          "'{\"text\":'); if it is plain text, rename it to a.jsonl and re-run"),
    ("a.jsonl.zst", LINES, "its name ends in .zst, but its bytes are not zstd-compressed"),
    ("a.jsonl.gz", lzma.compress(LINES), "its name ends in .gz, but its bytes are xz-compressed (they begin fd 37 7a "
                                         "58); rename it to a.jsonl.xz and re-run"),
    ("a.csv.bz2", gzip.compress(b"text\nx\n"), "its bytes are gzip-compressed (they begin 1f 8b 08 00); rename it to "
                                               "a.csv.gz"),
])
def test_a_compressed_suffix_on_other_bytes_names_the_rename(tmp_path, name, content, message):
    """Plain JSON Lines named .gz failed as "corrupt or truncated input ... replace the file"."""
    path = tmp_path / name
    path.write_bytes(content)
    fmt = "csv" if ".csv" in name else "jsonl"
    with pytest.raises(SchemaError) as e:
        _read(csv_reader if fmt == "csv" else jsonl, path, fmt)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)


@pytest.mark.parametrize("damage", ["truncated", "header zeroed"])
def test_a_damaged_file_of_its_suffixs_compression_is_still_damage(tmp_path, damage):
    """Damage fails the file's unit (under skip the run goes on); only text or another codec's bytes
    are taken for a wrong name."""
    from pipeline.errors import PrepError
    path = tmp_path / "a.jsonl.gz"
    blob = gzip.compress(LINES)
    path.write_bytes(blob[:-30] if damage == "truncated" else b"\x00" * 10 + blob[10:])
    with pytest.raises(PrepError) as e:
        _read(jsonl, path, "jsonl")
    assert not isinstance(e.value, SchemaError) and "corrupt or truncated input" in str(e.value)
