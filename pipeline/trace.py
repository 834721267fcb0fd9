"""A run's timeline, for finding where the time goes: `PREP_TRACE=FILE prep tokenize ...` makes the
parent and every worker append one JSON line per event to FILE ({"t": unix seconds, "cpu": the
process's CPU seconds so far, "pid", "ev", ...}); `python -m pipeline.trace FILE` prints it as phases
(start-up, first unit, the units, placement), then the CPU each process had used by its last event.
The CPU line tells whether a run is bound by its cores: on 2 cores, 324 K paragraphs took 1.10 s of
wall and ~2.0 s of CPU across the parent, the forkserver and 2 workers.

Off unless PREP_TRACE is set: then `event` is one dictionary lookup. Each line is one O_APPEND
write(2) of < 200 bytes, so lines from concurrent processes do not interleave; an event costs
~10 us (open, write, close), against units of ~0.1 s.
"""

from __future__ import annotations

import json
import os
import sys
import time

__all__ = ["event", "enabled", "rss_mib", "summarize"]

_PATH = os.environ.get("PREP_TRACE") or None


def enabled() -> bool:
    return _PATH is not None


def event(name: str, **fields) -> None:
    if _PATH is None:
        return
    line = json.dumps({"t": time.time(), "cpu": round(time.process_time(), 4), "pid": os.getpid(), "ev": name,
                       **fields}) + "\n"
    fd = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def rss_mib() -> float:
    """This process's resident set now, MiB (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except (OSError, ValueError):
        return 0.0


def summarize(lines: list[str]) -> list[str]:
    """The timeline as readable lines, in time order: seconds since the first event (the CLI's start)."""
    events = [json.loads(x) for x in lines if x.strip()]
    if not events:
        return ["no events"]
    t0 = min(e["t"] for e in events)

    def at(name: str, pick=min) -> float | None:
        ts = [e["t"] - t0 for e in events if e["ev"] == name]
        return pick(ts) if ts else None

    out = []
    parent = {e["pid"] for e in events if e["ev"] == "main"}
    for name in ("main", "tokenize", "tokenizer_loaded", "units_planned", "pool_start"):
        if (t := at(name)) is not None:
            out.append(f"{t:7.3f} s  {name}")
    preloads = [e["t"] - t0 for e in events if e["ev"] == "imported" and e["pid"] not in parent]
    if preloads:  # the forkserver's preload imports pipeline.worker_process last but one
        out.append(f"{min(preloads):7.3f} s  forkserver: worker modules imported")
    inits = [e["t"] - t0 for e in events if e["ev"] == "worker_init"]
    readies = [e["t"] - t0 for e in events if e["ev"] == "worker_ready"]
    if inits:
        out.append(f"{min(inits):7.3f} s  first worker init ({len(inits)} workers; last init at {max(inits):.3f} s)")
    if readies:  # none in a trace cut short while the workers built their engines
        out.append(f"{min(readies):7.3f} s  first worker ready (last at {max(readies):.3f} s; "
                   f"init->ready {min(r - i for r, i in zip(sorted(readies), sorted(inits))):.3f}-"
                   f"{max(r - i for r, i in zip(sorted(readies), sorted(inits))):.3f} s)")
    starts = [e["t"] - t0 for e in events if e["ev"] == "unit_start"]
    ends = [e["t"] - t0 for e in events if e["ev"] == "unit_end"]
    spans = sorted(e - s for s, e in zip(
        [x["t"] for x in sorted((e for e in events if e["ev"] == "unit_start"), key=lambda e: e["unit"])],
        [x["t"] for x in sorted((e for e in events if e["ev"] == "unit_end"), key=lambda e: e["unit"])]))
    if starts and ends:
        out.append(f"{min(starts):7.3f} s  first unit started")
        out.append(f"{min(ends):7.3f} s  first unit finished ({len(ends)} units; each "
                   f"{spans[0]:.3f}/{spans[len(spans) // 2]:.3f}/{spans[-1]:.3f} s min/median/max)")
        out.append(f"{max(ends):7.3f} s  last unit finished")
    placed = [e["t"] - t0 for e in events if e["ev"] == "shard_placed"]
    if placed:
        out.append(f"{max(placed):7.3f} s  last shard placed ({len(placed)} shards)")
    for name in ("units_done", "placed", "manifest"):
        if (t := at(name, max)) is not None:
            out.append(f"{t:7.3f} s  {name}")
    out.sort(key=lambda line: float(line.split()[0]))  # in time order (lines start "  0.123 s")
    return out + _cpu_line(events, parent)


def _cpu_line(events: list[dict], parent: set) -> list[str]:
    """CPU seconds of each process at its last event: the parent's at the manifest, a worker's at its
    last unit's end (its exit is not traced), the forkserver's once its imports are done (it only forks
    after that)."""
    last: dict[int, float] = {}
    for e in sorted(events, key=lambda e: e["t"]):
        if "cpu" in e:
            last[e["pid"]] = e["cpu"]
    if not last:
        return []
    workers = {e["pid"] for e in events if e["ev"] == "worker_init"}
    forkservers = {e["pid"] for e in events if e["ev"] == "imported"} - parent - workers
    parts = [f"{name} {' + '.join(f'{last[p]:.3f}' for p in sorted(group) if p in last)} s"
             for name, group in (("parent", parent), ("forkserver", forkservers), ("workers", workers))
             if group & last.keys()]
    wall = max(e["t"] for e in events) - min(e["t"] for e in events)
    return [f"CPU by each process's last event: {', '.join(parts)}; {sum(last.values()):.3f} s in all, "
            f"over {wall:.3f} s of wall"]


if __name__ == "__main__":
    usage = "usage: python -m pipeline.trace FILE  (written by PREP_TRACE=FILE prep tokenize ...)"
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(usage)
        sys.exit(0)
    if len(sys.argv) != 2:
        raise SystemExit(usage)
    with open(sys.argv[1]) as f:
        print("\n".join(summarize(f.readlines())))
