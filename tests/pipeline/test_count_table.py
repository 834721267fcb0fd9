"""The per-split counts table (pipeline/count_table.py): no number cut, at any terminal width."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from pipeline.count_table import Column, count_table

COLUMNS = [Column("split"), Column("docs"), Column("tokens"), Column("shards"), Column("tokens/doc", "tok/doc")]
SMALL = [["train", "1,973", "230,604", "3", "116.9"], ["val", "26", "3,128", "1", "120.3"]]
# a 100 B-token corpus: the widest counts a run prints
BIG = [["train", "98,765,432", "98,765,432,109", "9,877", "1,000.0"], ["val", "987,654", "987,654,321", "99", "1,000.0"]]


def _render(rows, width: int) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None)
    console.print(count_table(COLUMNS, rows, width))
    return buf.getvalue()


@pytest.mark.parametrize("rows", [SMALL, BIG])
@pytest.mark.parametrize("width", [30, 40, 45, 50, 60, 80, 120, 200])
def test_every_number_is_printed_whole_within_the_width(rows, width):
    text = _render(rows, width)
    assert "…" not in text, text
    assert all(len(line) <= width for line in text.splitlines()), text
    words = {word.strip("│┃,:") for word in text.split()}
    for row in rows:
        assert set(row) <= words, (row, text)


def test_the_widest_layout_that_fits_is_chosen():
    assert _render(SMALL, 80).splitlines()[1] == "┃ split ┃  docs ┃  tokens ┃ shards ┃ tokens/doc ┃"
    assert _render(SMALL, 40).splitlines()[:2] == ["split   docs   tokens  shards  tok/doc",
                                                    "train  1,973  230,604       3    116.9"]
    assert _render(BIG, 40).splitlines()[:3] == ["train: 98,765,432 docs,", "  98,765,432,109 tokens, 9,877 shards,",
                                                 "  1,000.0 tokens/doc"]
