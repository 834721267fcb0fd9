"""Live progress for `prep tokenize`: input MB/s, docs/s, tokens/s and an ETA from input bytes."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["RunProgress"]


class RunProgress:
    """Counts bytes/docs/tokens; draws a rich bar when enabled (and only every ~0.1 s)."""

    def __init__(self, total_bytes: int, done_bytes: int = 0, enabled: bool = True, console: Console | None = None):
        self.total_bytes = total_bytes
        self.start_bytes = done_bytes
        self.bytes = done_bytes
        self.docs = 0
        self.tokens = 0
        self.units = 0
        self.t0 = time.perf_counter()
        self._last_draw = 0.0
        self._progress = None
        if enabled:
            self._progress = Progress(
                TextColumn("[bold]tokenize"), BarColumn(), TaskProgressColumn(),
                TextColumn("{task.fields[rates]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
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
        text = (f"{r['mb_per_s']:.1f} MB/s  {r['docs_per_s']:,.0f} docs/s  "
                f"{r['tokens_per_s'] / 1e6:.2f} Mtok/s  units {self.units}")
        self._progress.update(self._task, completed=self.bytes, rates=text)
