"""`prep tokenize -j N|auto`, read alike by the typer command (pipeline.cli) and by the console
script's direct path (pipeline.launch). A module of its own, importing nothing: the direct path reads
-j before it starts the forkserver, and rich (which tokenize_command imports) would delay that start.
"""

from __future__ import annotations

__all__ = ["parse_workers", "worker_overrides"]


def parse_workers(value: str) -> int | str | None:
    """-j's text as a worker count: a whole number >= 1 or "auto"; None when it is neither. ASCII
    digits only: str.isdigit() holds for '³' (int() raises) and '٣' (int() reads 3)."""
    if value == "auto":
        return value
    if value.isascii() and value.isdigit() and int(value) >= 1:
        return int(value)
    return None


def worker_overrides(num_workers: int | str | None, sets) -> tuple[int | None, list[str]]:
    """(-j as a count, the --set list): `-j auto` means the recipe's `num_workers: auto` (one per core),
    so it goes in as the last --set, winning over the recipe and over --set as `-j N` does."""
    if num_workers == "auto":
        return None, [*sets, "num_workers=auto"]
    return num_workers, list(sets)

