"""`prep tokenize`'s progress line: whole on an 80-column terminal or log, units counted from a resume."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from pipeline.progress import RunProgress, _clock


def _last_line(width: int, seconds: float, nbytes: int, tokens: int, **kw) -> str:
    buf = io.StringIO()
    progress = RunProgress(10**12, 0, console=Console(file=buf, width=width, color_system=None), **kw)
    with progress:
        progress.t0 -= seconds  # as if the run had gone on that long
        progress.advance(nbytes, 1000, tokens)
        for _ in range(3):
            progress.unit_done()
    return buf.getvalue().strip().splitlines()[-1]


@pytest.mark.parametrize("mb_s, mtok_s, units_done, units_total", [
    (125.4, 50.5, 30, 77),  # 2 workers on this VM
    (2500, 900, 12000, 99999),  # 16 workers' rates, a plan of ~100 K units
])
def test_the_line_fits_80_columns_with_its_clocks(mb_s, mtok_s, units_done, units_total):
    line = _last_line(80, 1.0, int(mb_s * 1e6), int(mtok_s * 1e6), units_done=units_done, units_total=units_total)
    assert len(line) <= 80 and "…" not in line, line
    assert "MB/s" in line and "Mtok/s" in line and f"units {units_done + 3}/{units_total}" in line, line
    words = line.split()
    assert words[-2] == "ETA" and ":" in words[-3] and ":" in words[-1], line  # elapsed, then the ETA, both whole


def test_units_without_a_plan_size_are_a_count():
    assert "units 3 " in _last_line(100, 1.0, 10**6, 10**6)


def test_clocks():
    assert [_clock(s) for s in (None, 0, 59.9, 61, 3599, 3600, 36000 + 62)] == [
        "-:--", "0:00", "0:59", "1:01", "59:59", "1:00:00", "10:01:02"]
