"""The per-split counts table of `prep tokenize`'s summary and of `prep inspect`, at any width.

rich fits a table to the terminal by cutting cells: on 40 columns the summary read "230,…" for
230,604 tokens and "116…" for 116.9 tokens/doc. A count is what the user reads the table for, so
no number is ever cut here: the widest layout that fits whole is chosen, and past the narrowest
table the counts are written as words, which wrap between numbers, never inside one.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

__all__ = ["Column", "count_table"]


@dataclass(frozen=True)
class Column:
    label: str  # the header, and the unit after a number when written as words ("230,604 tokens")
    short: str = ""  # a narrower header for the compact table ("tok/doc"); the label when empty


def count_table(columns: list[Column], rows: list[list[str]], width: int) -> RenderableType:
    """`rows` of cells (the first a split's name, then its numbers, formatted) as the widest of: the
    boxed table, a compact one (no box, short headers), or a line of words per row."""
    boxed = _widths([c.label for c in columns], rows)
    # boxed: 1 cell of padding each side, and a border line before each column and after the last
    if sum(boxed) + 3 * len(boxed) + 1 <= width:
        return _table(columns, rows, boxed, compact=False)
    compact = _widths([c.short or c.label for c in columns], rows)
    if sum(compact) + 2 * (len(compact) - 1) <= width:  # two spaces between columns, none at the edges
        return _table(columns, rows, compact, compact=True)
    return Group(*(_as_words(columns, row, width) for row in rows))


def _widths(headers: list[str], rows: list[list[str]]) -> list[int]:
    return [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(headers)]


def _table(columns: list[Column], rows: list[list[str]], widths: list[int], compact: bool) -> Table:
    table = Table(box=None if compact else box.HEAVY_HEAD, pad_edge=not compact, show_edge=not compact,
                  collapse_padding=False)
    for i, (column, w) in enumerate(zip(columns, widths)):
        # min_width: the measured widths fit the console, so rich has no reason to shrink a column;
        # no_wrap: should it still, a cell is never broken across lines
        table.add_column(column.short or column.label if compact else column.label, min_width=w, no_wrap=True,
                         justify="left" if i == 0 else "right", header_style="bold")
    for row in rows:
        table.add_row(*row)
    return table


def _as_words(columns: list[Column], row: list[str], width: int) -> Text:
    """`train: 1,973 docs, 230,604 tokens, 3 shards, 116.9 tokens/doc`, wrapped between one count
    and the next (each with its unit), the lines after the first indented by 2."""
    parts = [f"{row[0]}:"] + [f"{cell} {column.label}," for column, cell in zip(columns[1:], row[1:])]
    parts[-1] = parts[-1].rstrip(",")
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += " " + part
        else:
            lines.append("  " + part)
    return Text("\n".join(lines), overflow="fold")
