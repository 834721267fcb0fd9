"""Live progress for `prep tokenize`: input MB/s, tokens/s, units done and an ETA from input bytes.

One line that fits 80 columns, even at 16 workers' rates and thousands of units. With docs/s in it
and rich's h:mm:ss clocks, rich squeezed the bar to one cell and cut the elapsed time and the ETA to
"0:…" on an 80-column terminal (or a log, which rich renders 80 wide). Documents are counted in the
summary table the run ends with.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, TaskProgressColumn, TextColumn
from rich.table import Column
from rich.text import Text

__all__ = ["RunProgress"]


class RunProgress:
    """Counts bytes/docs/tokens; draws a rich bar when enabled (and only every ~0.1 s)."""

    def __init__(self, total_bytes: int, done_bytes: int = 0, enabled: bool = True, console: Console | None = None,
                 units_total: int = 0, units_done: int = 0):
        """`units_total`, `units_done`: the plan's units, and those an earlier run finished (a resume)."""
        self.total_bytes = total_bytes
        self.start_bytes = done_bytes
        self.bytes = done_bytes
        self.docs = 0
        self.tokens = 0
        self.units = units_done
        self.units_total = units_total
        self.t0 = time.perf_counter()
        self._last_draw = 0.0
        self._progress = None
        if enabled:
            self._progress = Progress(
                TextColumn("[bold]tokenize"), BarColumn(bar_width=None), TaskProgressColumn(),
                # no_wrap: when the line is too long rich then narrows the bar, not these
                TextColumn("{task.fields[rates]}", table_column=Column(no_wrap=True)),
                _Clocks(table_column=Column(no_wrap=True)),
                console=console or Console(stderr=True), transient=False, refresh_per_second=5)
            self._task = self._progress.add_task("tokenize", total=max(total_bytes, 1), completed=done_bytes,
                                                 rates="")

    def __enter__(self) -> RunProgress:
        if self._progress:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress:
            self._draw(force=True)
            self._progress.stop()

    def advance(self, nbytes: int, docs: int, tokens: int) -> None:
        self.bytes += nbytes
        self.docs += docs
        self.tokens += tokens
        self._draw()

    def unit_done(self) -> None:
        self.units += 1
        self._draw()

    def rates(self) -> dict:
        dt = max(time.perf_counter() - self.t0, 1e-9)
        return {"mb_per_s": (self.bytes - self.start_bytes) / dt / 1e6, "docs_per_s": self.docs / dt,
                "tokens_per_s": self.tokens / dt}

    def _draw(self, force: bool = False) -> None:
        now = time.perf_counter()
        if self._progress is None or (not force and now - self._last_draw < 0.1):
            return
        self._last_draw = now
        r = self.rates()
        units = f"{self.units}/{self.units_total}" if self.units_total else str(self.units)
        mb = r["mb_per_s"]
        text = f"{mb:.0f} MB/s" if mb >= 100 else f"{mb:.1f} MB/s"
        text += f"  {r['tokens_per_s'] / 1e6:.1f} Mtok/s  units {units}"
        self._progress.update(self._task, completed=self.bytes, rates=text)


class _Clocks(ProgressColumn):
    """"elapsed ETA remaining" as m:ss (h:mm:ss from an hour on): "0:42 ETA 3:05"; the remaining time is
    rich's estimate from the recent rate, "-:--" until it has one."""

    def render(self, task) -> Text:
        return Text(f"{_clock(task.elapsed)} ETA {_clock(task.time_remaining)}", style="progress.remaining")


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-:--"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
