"""Plain text: per file (grouped into units), per line, per separator (byte ranges when safe)."""

from __future__ import annotations

import io

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from pipeline.errors import PrepError
from pipeline.readers import text as text_reader
from pipeline.recipe import SourceConfig
from tests.conftest import read_spooled, reads_as_text
from tests.pipeline.readers import readerkit


def read_all(source: SourceConfig, files: list[str], unit_bytes: int = 1 << 16):
    return readerkit.read_all(text_reader, source, files, unit_bytes, batch_docs=5)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=12), max_size=20), st.sampled_from([b"\x1e", b"<|eot|>", b"ab"]),
       st.integers(1, 40), st.integers(1, 9))
def test_pieces_of_any_cut_give_each_piece_to_exactly_one_unit(parts, sep, cut, block):
    data = sep.join(parts)
    old = text_reader.READ_BLOCK
    text_reader.READ_BLOCK = block
    try:
        got = []
        for start in range(0, max(len(data), 1), cut):
            f = io.BytesIO(data)
            pos = text_reader.seek_piece_start(f, start, sep)
            end = min(start + cut, len(data))
            if pos is not None and (pos < end or not data):
                got += list(text_reader.iter_pieces(f, pos, end if end < len(data) else -1, sep))
    finally:
        text_reader.READ_BLOCK = old
    expect, offset = [], 0
    for p in data.split(sep) if data else []:
        expect.append((offset, p))
        offset += len(p) + len(sep)
    assert [(o, p) for o, p in got if p] == [(o, p) for o, p in expect if p]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=40), max_size=12), st.integers(1, 25))
def test_long_pieces_are_cut_short_but_positions_stay_exact(parts, max_bytes):
    sep = b"\x1e"
    data = sep.join(p.replace(sep, b"") for p in parts)
    old = text_reader.READ_BLOCK
    text_reader.READ_BLOCK = 7
    try:
        got = list(text_reader.iter_pieces(io.BytesIO(data), 0, -1, sep, max_bytes))
    finally:
        text_reader.READ_BLOCK = old
    offset = 0
    for (o, piece), want in zip(got, data.split(sep)):
        assert o == offset
        if len(want) > max_bytes:
            assert len(piece) > max_bytes and want.startswith(piece)
        else:
            assert piece == want
        offset += len(want) + 1


def test_a_paragraph_separator_cuts_a_file_at_the_end_of_a_run_of_newlines(tmp_path):
    """"\n\n" overlaps itself: a file split on it was one unit, one worker's. It is cut where a run of
    newlines ends, less the newline that begins the next piece: what str.split gives, in two units."""
    path = tmp_path / "a.txt"
    path.write_bytes(b"x" * 200_000 + b"\n\n\n" + b"y" * 200_000)
    assert text_reader.self_overlapping(b"\n\n") and not text_reader.self_overlapping(b"<|endoftext|>")
    units, texts, positions, _ = read_all(SourceConfig(path=str(path), doc_separator="\n\n"), [str(path)])
    assert [(u.start, u.end) for u in units] == [(0, 200_002), (200_002, 400_003)]
    assert texts == ["x" * 200_000, "\n" + "y" * 200_000] and positions == [0, 200_002]  # what str.split gives
    units = text_reader.plan(SourceConfig(path=str(path), doc_separator="\n"), 0, [str(path)], 1 << 16)
    assert len(units) > 1


def test_other_self_overlapping_separators_and_compressed_files_stay_whole(tmp_path):
    import gzip
    data = b"ab".join([b"x" * 100_000] * 4)
    (tmp_path / "a.txt").write_bytes(data)
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(b"\n\n".join([b"y" * 100_000] * 4)))
    for name, sep in (("a.txt", "abab"), ("b.txt.gz", "\n\n")):
        units = text_reader.plan(SourceConfig(path=str(tmp_path / name), doc_separator=sep), 0,
                                 [str(tmp_path / name)], 1 << 16)
        assert [(u.start, u.end) for u in units] == [(0, -1)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\n\n", b"\n\n\n", b"-", b"---", b"\r\n", b"\xff"]),
                max_size=60),
       st.sampled_from(["\n\n", "\n\n\n", "--"]), st.integers(1, 30), st.integers(1, 9))
def test_runs_of_a_repeated_separator_cut_where_one_read_starts_a_piece(tmp_path_factory, parts, sep, unit_bytes,
                                                                         block):
    """Any bytes, any cut size and read block: the units of a file split on one byte repeated give the
    pieces, positions and rejects of one unit reading the whole file (which is what str.split gives)."""
    from pipeline.readers import text_cuts
    data = b"".join(parts)
    assume(reads_as_text(data))
    cuts = text_cuts.piece_cuts(data, unit_bytes, sep.encode())
    starts, at = set(), 0
    for piece in data.split(sep.encode()):
        starts.add(at)
        at += len(piece) + len(sep)
    assert set(cuts) <= starts and cuts == sorted(set(cuts)) and all(0 < c < len(data) for c in cuts)
    path = tmp_path_factory.mktemp("t") / "a.txt"
    path.write_bytes(data)
    source = SourceConfig(path=str(path), doc_separator=sep)
    old = text_reader.READ_BLOCK
    text_reader.READ_BLOCK = block
    try:
        whole = readerkit.read_all(text_reader, source, [str(path)], 1 << 30, batch_docs=5)
        cut = readerkit.read_all(text_reader, source, [str(path)], unit_bytes, batch_docs=5)
    finally:
        text_reader.READ_BLOCK = old
    assert len(whole[0]) == 1 and len(cut[0]) == len(cuts) + 1
    assert cut[1:3] == whole[1:3]
    assert [(r["reason"], r["position"]) for r in cut[3]] == [(r["reason"], r["position"]) for r in whole[3]]
    assert [(p, t) for p, t in zip(whole[2], whole[1])] == [
        (o, piece.decode()) for o, piece in _split_with_offsets(data, sep.encode()) if piece and _utf8(piece)]


def _regex_cuts(data: bytes, unit_bytes: int, sep: bytes) -> list[int]:
    """piece_cuts by its rule as a regex (its first form, ~140 MB/s): after each target, the first run
    of >= len(sep) of the byte that follows another byte, cut at its end less its length % len(sep)."""
    import re
    n, one = len(sep), re.escape(sep[:1])
    run = re.compile(b"[^" + one + b"]" + one + b"{%d,}" % n)
    cuts, target = [], unit_bytes
    while target < len(data) and (m := run.search(data, target - 1)) is not None:
        cut = m.end() - (m.end() - m.start() - 1) % n
        if cut >= len(data):
            break
        cuts.append(cut)
        target = cut + unit_bytes
    return cuts


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"\n", b"\n" * 2, b"\n" * 3, b"\n" * 70, b"\n" * 300, b"-", b"--"]),
                max_size=80),
       st.sampled_from([b"\n\n", b"\n\n\n", b"--"]), st.integers(1, 400))
@example([b"\n" * 300, b"a", b"\n" * 300, b"a"], b"\n\n", 150)  # targets inside long runs
def test_piece_cuts_by_find_match_the_regex_rule(parts, sep, unit_bytes):
    """The runs are found with find() and measured by slices: the same cuts as the regex rule, on
    runs longer than the 64-byte first slice, runs reaching the end or begun before a target."""
    from pipeline.readers import text_cuts
    data = b"".join(parts)
    assert text_cuts.piece_cuts(data, unit_bytes, sep) == _regex_cuts(data, unit_bytes, sep)


def test_a_file_that_cannot_be_mapped_or_opened_is_planned_whole(tmp_path, monkeypatch):
    """open()/mmap failing in the parent (the file removed since it was listed; a FIFO; no address
    space) raised a traceback out of planning: the file is one unit, whose reader names the problem."""
    from pipeline.readers import text_cuts
    path = tmp_path / "a.txt"
    path.write_bytes(b"x" * 100_000 + b"\n\n" + b"y" * 100_000)
    plan = lambda p: text_cuts.plan_file(0, 0, str(p), 200_002, 1 << 16, b"\n\n")  # noqa: E731
    assert len(plan(path)) == 2

    def no_map(*args, **kwargs):
        raise ValueError("mmap length is greater than file size")
    monkeypatch.setattr(text_cuts.mmap, "mmap", no_map)
    assert [(u.start, u.end, u.size) for u in plan(path)] == [(0, -1, 200_002)]
    monkeypatch.undo()
    assert [(u.start, u.end) for u in plan(tmp_path / "gone.txt")] == [(0, -1)]


def _split_with_offsets(data: bytes, sep: bytes):
    at = 0
    for piece in data.split(sep):
        yield at, piece
        at += len(piece) + len(sep)


def _utf8(piece: bytes) -> bool:
    try:
        piece.decode()
        return True
    except UnicodeDecodeError:
        return False


def test_per_line_drops_blank_lines_and_crlf(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"one\r\n\r\ntwo \n\nthree\xff\nfour")
    source = SourceConfig(path=str(path), doc_separator="\n")
    _, texts, positions, bad = read_all(source, [str(path)])
    assert texts == ["one", "two ", "four"] and positions == [0, 7, 20]
    assert [(r["reason"], r["line"]) for r in bad] == [("invalid_utf8", 5)]


def test_one_document_per_file_groups_files_and_numbers_them(tmp_path):
    files = []
    for i in range(40):
        p = tmp_path / f"d{i:02d}.txt"
        p.write_bytes(f"doc {i}\n".encode() * (500 * (i % 3 + 1)))
        files.append(str(p))
    (tmp_path / "d07.txt").write_bytes(b"bad \xfe")
    source = SourceConfig(path=str(tmp_path / "*.txt"), format="text")
    units, texts, positions, bad = read_all(source, files)
    assert 1 < len(units) < 40 and all(u.file_index == 0 for u in units)
    assert sum(len(u.paths) for u in units) == 40
    assert positions == [i for i in range(40) if i != 7]
    assert texts[0] == "doc 0\n" * 500
    assert [(r["reason"], r["source"], r["position"]) for r in bad] == [("invalid_utf8", files[7], 7)]
    assert read_all(SourceConfig(path="x", format="text", max_record_bytes=5000), files)[3][0]["reason"] \
        == "record_too_large"


line_piece = st.one_of(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")),
                       st.sampled_from([b"", b"\r", b"ok\r", b"caf\xc3\xa9", b"\xff", b"x" * 30]))


@settings(max_examples=200, deadline=None)
@given(st.lists(line_piece, max_size=25), st.booleans(), st.integers(1, 64), st.integers(1, 120),
       st.one_of(st.none(), st.integers(1, 20)), st.sampled_from(["skip", "replace"]))
@example([b"\xef\xbb\xbfok\r", b"x"], True, 4, 100, None, "skip")  # a BOM: cut
@example([b"\xef\xbb\xbfabcdef", b"x"], True, 4, 100, 5, "skip")  # too long with it: kept, rejected
@example([b"\xef\xbb\xbf", b"x"], False, 2, 3, None, "skip")  # alone on its line: a blank line
@example([b"aaaaaa\rb"], False, 1, 1, 6, "skip")  # cut short just after a CR: still too long, not "aaaaaa"
def test_per_line_matches_a_line_by_line_reference(tmp_path_factory, lines, final_newline, block, unit_bytes,
                                                   max_bytes, errors):
    """Per-line documents (a block's lines decoded at once when all are plain, one by one when not)
    == splitting the file in memory: CR stripped, blank lines dropped, long or non-UTF-8 lines
    rejected with their line numbers, for any block size and unit cut."""
    import pipeline.readers.jsonl as jsonl
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    assume(reads_as_text(data))
    path = tmp_path_factory.mktemp("t") / "a.txt"
    path.write_bytes(data)
    source = SourceConfig(path=str(path), doc_separator="\n", max_record_bytes=max_bytes, encoding_errors=errors)
    old = jsonl.READ_BLOCK
    jsonl.READ_BLOCK = block
    try:
        units, texts, positions, bad = read_all(source, [str(path)], unit_bytes)
    finally:
        jsonl.READ_BLOCK = old
    want_texts, want_positions, want_bad, offset = [], [], [], 0
    pieces = data.split(b"\n")
    if pieces and pieces[-1] == b"":
        pieces.pop()
    first_unit_end = units[0].end if units[0].end >= 0 else len(data) + 1
    for number, whole in enumerate(pieces, 1):
        piece = whole
        if number == 1 and piece.startswith(b"\xef\xbb\xbf") and (max_bytes is None or len(piece) <= max_bytes):
            piece = piece[3:]  # a UTF-8 BOM is cut (readers.base.without_bom); the line keeps its offset
        line = piece[:-1] if piece.endswith(b"\r") else piece
        if line and max_bytes is not None and len(line) > max_bytes:
            want_bad.append(("record_too_large", offset, number if offset < first_unit_end else None))
        elif line:
            try:
                text = line.decode("utf-8") if errors == "skip" else line.decode("utf-8", "replace")
            except UnicodeDecodeError:
                want_bad.append(("invalid_utf8", offset, number if offset < first_unit_end else None))
            else:
                want_texts.append(text)
                want_positions.append(offset)
        offset += len(whole) + 1
    assert (texts, positions) == (want_texts, want_positions)
    assert [(r["reason"], r["position"], r.get("line")) for r in bad] == want_bad


@settings(max_examples=150, deadline=None)
@given(st.lists(line_piece, max_size=30), st.sampled_from([b"\n", b"\x1e", b"<|eot|>", b"\r\n"]),
       st.integers(1, 80), st.integers(1, 9), st.booleans())
def test_ranges_of_a_compressed_file_read_as_the_plain_files_ranges(tmp_path_factory, parts, sep, unit_bytes,
                                                                    block, gz):
    """A .gz/.zst per-line or separator file is cut into ranges of its decompressed bytes, read from
    the spooler's windows: unit by unit, the same documents, positions and rejects as the plain file
    cut at the same offsets (so the same output for any -j)."""
    import gzip

    import zstandard

    import pipeline.readers.jsonl as jsonl
    data = sep.join(parts)
    assume(reads_as_text(data))
    d = tmp_path_factory.mktemp("t")
    plain = d / "a.txt"
    plain.write_bytes(data)
    packed = d / ("a.txt.gz" if gz else "a.txt.zst")
    packed.write_bytes(gzip.compress(data) if gz else zstandard.ZstdCompressor().compress(data))
    source = SourceConfig(path=str(plain), doc_separator=sep.decode(), max_record_bytes=25)
    old = jsonl.READ_BLOCK, text_reader.READ_BLOCK
    jsonl.READ_BLOCK = text_reader.READ_BLOCK = block
    try:
        want_units, want = read_spooled(text_reader, source, text_reader.plan(source, 0, [str(plain)], unit_bytes),
                                        d / "s1", separators={0: sep})
        got_units, got = read_spooled(text_reader, source, text_reader.plan(source, 0, [str(packed)], unit_bytes),
                                      d / "s2", separators={0: sep})
    finally:
        jsonl.READ_BLOCK, text_reader.READ_BLOCK = old
    def flat(per_unit):
        return ([t for _, texts, _, _ in per_unit for t in texts], [p for _, _, ps, _ in per_unit for p in ps],
                [r[:2] for *_, rows in per_unit for r in rows])

    assert flat(got) == flat(want)  # the same documents and rejects, however the ranges fell
    assert all(u.is_spooled for u in got_units) or len(got_units) == 1
    ranges = [(u.start, u.end if u.end < len(data) else -1) for u in want_units]
    if [(u.start, u.end) for u in got_units] == ranges:  # the size was declared: the plain file's cuts,
        for (_, *unit), (_, *wunit) in zip(got, want):  # unit by unit: texts, positions, rejects with line numbers
            assert unit == wunit
    else:  # zstd's 0 / a size below the compressed one is not believed: planned from 4x the compressed size
        assert not data or len(data) < packed.stat().st_size


def test_a_separator_split_reject_names_its_piece_and_keeps_the_line_key(tmp_path):
    """A "\\n\\n" or "<|endoftext|>" file's bad 5th piece was "at line 5" (it is on line 9): the message says
    "piece 5"; rejects.jsonl keeps its `line` key (users' scripts read it) and adds `piece`. Lines stay lines."""
    for sep in ("\n\n", "<|endoftext|>"):
        path = tmp_path / "p.txt"
        path.write_bytes(sep.join(["a\nb", "c\nd", "e", "f", "bad \xff", "g"]).encode("latin-1"))
        source = SourceConfig(path=str(path), doc_separator=sep)
        _, texts, _, bad = read_all(source, [str(path)])
        assert texts == ["a\nb", "c\nd", "e", "f", "g"]
        assert [(r["reason"], r["line"], r["piece"]) for r in bad] == [("invalid_utf8", 5, 5)]
        with pytest.raises(PrepError, match=r"p\.txt at piece 5: invalid_utf8"):
            readerkit.read_all(text_reader, source, [str(path)], policy="error")
    path = tmp_path / "l.txt"
    path.write_bytes(b"a\nb\n\xff\n")
    source = SourceConfig(path=str(path), doc_separator="\n")
    bad = read_all(source, [str(path)])[3]
    assert [(r["line"], "piece" in r) for r in bad] == [(3, False)]
    with pytest.raises(PrepError, match=r"l\.txt at line 3: invalid_utf8"):
        readerkit.read_all(text_reader, source, [str(path)], policy="error")


def test_a_local_file_over_max_record_bytes_is_rejected_by_its_size_unread(tmp_path, monkeypatch):
    """A plain local file read whole and over max_record_bytes was read up to max_record_bytes + 1 bytes
    before its reject (64 MiB: a 70 MB file peaked at 221 MB RSS); its size says so without reading past
    its first 64 KiB, which gives the reject's preview. A file under the limit is still read whole."""
    import os
    import types
    limit = 1 << 20
    big, small = tmp_path / "big.txt", tmp_path / "small.txt"
    big.write_bytes(b"The start. " + b"x" * (2 * limit))
    small.write_bytes(b"y" * (limit - 5))
    read = []
    fake_os = types.SimpleNamespace(**{k: getattr(os, k) for k in dir(os) if not k.startswith("__")})
    fake_os.read = lambda fd, n: read.append(len(data := os.read(fd, n))) or data
    monkeypatch.setattr(text_reader, "os", fake_os)
    source = SourceConfig(path=str(tmp_path / "*.txt"), format="text", max_record_bytes=limit)
    _, texts, positions, bad = read_all(source, [str(big)])
    assert texts == [] and sum(read) <= 1 << 16
    assert [(r["reason"], r["position"], r["text"][:10]) for r in bad] == [("record_too_large", 0, "The start.")]
    assert bad[0]["detail"].startswith(f"{2 * limit + 11} bytes > max_record_bytes {limit}; ")
    read.clear()
    _, texts, positions, bad = read_all(source, [str(small)])
    assert texts == ["y" * (limit - 5)] and bad == [] and sum(read) == limit - 5
