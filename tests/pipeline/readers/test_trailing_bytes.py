"""Bytes after a compressed file's last member (`garbage!` appended to a .gz or .zst) are ignored with
a note, as `gzip -d` ignores "trailing garbage"; every document before them is read."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
from dataclasses import replace
from pathlib import Path

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import PrepError
from pipeline.readers import BadRecords
from pipeline.readers import csv as csv_reader
from pipeline.readers import jsonl as jsonl_reader
from pipeline.readers import text as text_reader
from pipeline.recipe import SourceConfig
from pipeline.spool import Spooler

TEXTS = [f"document {i} " + "words and more words " * (i % 7) for i in range(800)]
WHOLE, SPLIT = 1 << 30, 8192  # one unit read from the file; ranges read from the spooler's windows


def run(reader, source: SourceConfig, path: Path, unit_bytes: int, spool: Path) -> tuple[int, list, list, dict]:
    """(units, texts, rejects, notices by kind) of every unit, as a run reads them."""
    units = [replace(u, index=i) for i, u in enumerate(reader.plan(source, 0, [str(path)], unit_bytes))]
    dialects = {0: csv_reader.dialect_of(source)} if reader is csv_reader else None
    spooler = Spooler(units, {u.index for u in units}, spool, {0: None}, workers=1, ahead=2, csv_dialects=dialects)
    units = [replace(u, spool=spooler.window(u)) if u.is_spooled else u for u in units]
    texts, rejects, notices = [], [], {}
    try:
        for u in units:
            bad = BadRecords(u, "skip")
            for batch in reader.iter_batches(u, source, bad, 64):
                texts += batch.texts
            rejects += bad.rows
            for kind, message in bad.notices.items():
                notices.setdefault(kind, []).append(message)
            spooler.done(u.index)
    finally:
        spooler.close()
    return len(units), texts, rejects, notices


def compress(data: bytes, codec: str) -> bytes:
    if codec in ("bz2", "xz"):
        return (bz2 if codec == "bz2" else lzma).compress(data)
    return gzip.compress(data) if codec == "gzip" else zstandard.ZstdCompressor().compress(data)


SUFFIX = {"gzip": "gz", "zstd": "zst", "bz2": "bz2", "xz": "xz"}


FORMATS = {  # reader, the file's bytes, its suffix, its source's options
    "jsonl": (jsonl_reader, "".join(json.dumps({"text": t}) + "\n" for t in TEXTS).encode(), "jsonl", {}),
    "csv": (csv_reader, ("id,text\n" + "".join(f'{i},"{t}"\n' for i, t in enumerate(TEXTS))).encode(), "csv", {}),
    "text": (text_reader, "".join(t + "\n" for t in TEXTS).encode(), "txt", {"doc_separator": "\n"}),
}


@pytest.mark.parametrize("unit_bytes", [WHOLE, SPLIT])
@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("codec, last", [("gzip", "gzip member"), ("bz2", "bzip2 stream")])
def test_bytes_after_the_last_member_are_ignored_with_a_note(tmp_path, fmt, unit_bytes, codec, last):
    """gzip: the unit that met them failed (128 documents lost in a JSONL test), its error saying the whole
    text decoded; bz2: the standard library's BZ2File ended the file silently there. `gzip -d` and
    `bzip2 -d` decode such a file with a warning. Every document is read now, from two members or streams
    (pigz's, pbzip2's), and the unit that reads the file's end says what was ignored, once, read whole or
    from the spooler's windows. (A .zst or .xz is stricter, as `zstd -d` and `xz -d` are:
    test_bytes_after_a_zstd_frame_or_a_damaged_gzip_member_are_damage,
    test_bytes_after_an_xz_stream_or_a_damaged_bz2_stream_are_damage.)"""
    reader, data, suffix, options = FORMATS[fmt]
    path = tmp_path / f"a.{suffix}.{SUFFIX[codec]}"
    half = data.index(b"\n", len(data) // 2) + 1
    packed = compress(data[:half], codec) + compress(data[half:], codec)
    path.write_bytes(packed + b"garbage!")
    source = SourceConfig(path=str(path), format=fmt, text_field="text", **options)
    units, texts, rejects, notices = run(reader, source, path, unit_bytes, tmp_path / "spool")
    assert (units > 3) == (unit_bytes == SPLIT)
    assert texts == TEXTS and not rejects
    assert list(notices) == ["trailing_garbage"] and len(notices["trailing_garbage"]) == 1
    assert notices["trailing_garbage"][0].startswith(
        f"{path}: its last 8 bytes, from compressed byte {len(packed):,} (b'garbage!'), follow its last complete {last}")


@pytest.mark.parametrize("unit_bytes", [WHOLE, SPLIT])
@pytest.mark.parametrize("codec, tail", [
    ("gzip", "magic's first byte off"),   # b"\x1e\x8b\x08...": one bit flipped in a second member
    ("gzip", "magic's second byte off"),
    ("gzip", "cut inside the magic"),     # b"\x1f" then the end of the file
    ("zstd", "magic's first byte off"),
    ("zstd", "cut inside the magic"),
    ("zstd", "garbage!"),                 # `zstd -d` refuses it too ("unsupported format")
])
def test_bytes_after_a_zstd_frame_or_a_damaged_gzip_member_are_damage(tmp_path, codec, tail, unit_bytes):
    """A second member whose magic lost a bit was ignored as trailing bytes: its documents dropped with a
    note, exit 0 (a review found it). Such tails, and anything after a .zst's last frame, fail the unit
    with the damage's error, as they did before trailing bytes were ignored."""
    data = FORMATS["jsonl"][1]
    second = compress(b'{"text": "one more"}\n' * 200, codec)
    if tail == "magic's first byte off":
        second = bytes([second[0] ^ 1]) + second[1:]
    elif tail == "magic's second byte off":
        second = second[:1] + bytes([second[1] ^ 1]) + second[2:]
    elif tail == "cut inside the magic":
        second = second[:1]
    else:
        second = b"garbage!"
    path = tmp_path / ("a.jsonl.gz" if codec == "gzip" else "a.jsonl.zst")
    path.write_bytes(compress(data, codec) + second)
    source = SourceConfig(path=str(path), format="jsonl", text_field="text")
    with pytest.raises(PrepError, match=f"{path}: corrupt or truncated input"):
        run(jsonl_reader, source, path, unit_bytes, tmp_path / "spool")


@pytest.mark.parametrize("unit_bytes", [WHOLE, SPLIT])
def test_nul_padding_after_a_gzip_member_stays_silent_and_several_members_are_read(tmp_path, unit_bytes):
    """gzip's own reader skips NUL bytes after a member (tape padding) and reads members one after
    another (`cat a.gz b.gz`): both still so, with no note; a log line appended after them is noted."""
    data = FORMATS["jsonl"][1]
    half = data.index(b"\n", len(data) // 2) + 1
    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]) + b"\0" * 1000)
    source = SourceConfig(path=str(path), format="jsonl", text_field="text")
    _, texts, rejects, notices = run(jsonl_reader, source, path, unit_bytes, tmp_path / "spool")
    assert texts == TEXTS and not rejects and not notices
    path.write_bytes(path.read_bytes() + b"\n-- appended by a log --\n")
    _, texts, rejects, notices = run(jsonl_reader, source, path, unit_bytes, tmp_path / "spool2")
    assert texts == TEXTS and not rejects and list(notices) == ["trailing_garbage"]


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
@pytest.mark.parametrize("tail", ["a member cut short", "a damaged member"])
def test_what_begins_like_another_member_is_damage_as_before(tmp_path, codec, tail):
    """Bytes opening with the codec's magic are a member, cut short or damaged: the unit fails with the
    damage's error, as it did (they are not ignored as trailing bytes)."""
    second = compress(b'{"text": "one more"}\n' * 200, codec)
    second = second[:len(second) // 2] if tail == "a member cut short" else second[:6] + b"\xff" * 40 + second[46:]
    path = tmp_path / ("a.jsonl.gz" if codec == "gzip" else "a.jsonl.zst")
    path.write_bytes(compress(FORMATS["jsonl"][1], codec) + second)
    source = SourceConfig(path=str(path), format="jsonl", text_field="text")
    with pytest.raises(PrepError, match=f"{path}: corrupt or truncated input"):
        run(jsonl_reader, source, path, WHOLE, tmp_path / "spool")


@pytest.mark.parametrize("unit_bytes", [WHOLE, SPLIT])
@pytest.mark.parametrize("codec, tail", [
    ("bz2", "magic's first byte off"),   # a second stream (`cat a.bz2 b.bz2`) with one bit flipped: its
    ("bz2", "cut inside the magic"),     # documents were dropped silently, exit 0
    ("xz", "magic's first byte off"),
    ("xz", "cut inside the magic"),
    ("xz", "garbage!"),                  # `xz -d` refuses it ("Unexpected end of input")
])
def test_bytes_after_an_xz_stream_or_a_damaged_bz2_stream_are_damage(tmp_path, codec, tail, unit_bytes):
    """BZ2File and LZMAFile ended the file silently at any bytes after a stream that did not decode: a
    damaged second stream lost its documents with no word. They fail the unit now, as gzip's and zstd's."""
    second = compress(b'{"text": "one more"}\n' * 200, codec)
    second = bytes([second[0] ^ 1]) + second[1:] if tail == "magic's first byte off" else \
        second[:2] if tail == "cut inside the magic" else b"garbage!"
    path = tmp_path / f"a.jsonl.{SUFFIX[codec]}"
    path.write_bytes(compress(FORMATS["jsonl"][1], codec) + second)
    source = SourceConfig(path=str(path), format="jsonl", text_field="text")
    with pytest.raises(PrepError, match=f"{path}: corrupt or truncated input"):
        run(jsonl_reader, source, path, unit_bytes, tmp_path / "spool")


@pytest.mark.parametrize("unit_bytes", [WHOLE, SPLIT])
def test_xz_streams_with_nul_padding_are_read_whole_and_silently(tmp_path, unit_bytes):
    """`cat a.xz b.xz` and the NUL stream padding xz allows after a stream: every document, no note."""
    data = FORMATS["jsonl"][1]
    half = data.index(b"\n", len(data) // 2) + 1
    path = tmp_path / "a.jsonl.xz"
    path.write_bytes(compress(data[:half], "xz") + b"\0" * 8 + compress(data[half:], "xz") + b"\0" * 4)
    source = SourceConfig(path=str(path), format="jsonl", text_field="text")
    _, texts, rejects, notices = run(jsonl_reader, source, path, unit_bytes, tmp_path / "spool")
    assert texts == TEXTS and not rejects and not notices


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=4), st.sampled_from(["bz2", "xz"]),
       st.integers(1, 4096), st.integers(1, 50_000), st.integers(1, 1 << 16))
def test_bz2_and_xz_streams_decode_whole_at_any_feed_and_output_bound(parts, codec, feed, out_bytes, read_size):
    """Streams one after another (some empty), decoded with any compressed feed and any bound on one
    step's output (a bound the decoder stops at keeps its input: decoded on before more is read), read
    any number of bytes at a time: the bytes of every stream, in order, once."""
    from pipeline.readers.members import Bz2Members, XzMembers
    cls = Bz2Members if codec == "bz2" else XzMembers
    packed = b"".join(compress(p, codec) for p in parts)

    class Bounded(cls):
        FEED, OUT_BYTES = feed, out_bytes

    stream = Bounded(io.BytesIO(packed))
    got = bytearray()
    while block := stream.read(read_size):
        got += block
    assert bytes(got) == b"".join(parts) and stream.trailing is None
