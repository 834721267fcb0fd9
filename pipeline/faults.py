"""Deterministic fault injection for tests/faults/: `PREP_FAULT="<point>:<n>[:<action>][,...]"`.

The n-th time (1-based) a process passes the named point, `action` happens to that process:
`kill` (SIGKILL, the default), `int` (SIGINT: a Ctrl-C) or `stop` (SIGSTOP). `enospc:<bytes>`
instead makes writes charged through `charge_write` fail with ENOSPC once the process has written
more than <bytes>. Unset (always, outside the tests) every hook costs one test of an empty dict,
and no hook sits in a per-document loop.

Points (where they are passed):
    start             executor: the plan and journal are on disk, no unit has run yet
    shard-tmp         ShardWriter: a shard's .bin.tmp/.idx.tmp are complete (fsynced, except a
                      worker's parts: crc32-checked on resume instead), not renamed
    shard-bin         ShardWriter: its .bin is renamed into place, its .idx not yet
    journal           RunState.record: after a unit's journal line is written and fsynced
    journal-torn      RunState.record: half of the line is written (the action then fires)
    finalize-shard    assemble: after each final shard is placed (a parent thread, while units run),
                      before it is journaled
    journal-placed    RunState.record_placed: after a placed shard's journal line is fsynced
    journal-placed-torn  the same, half of the line written
    parts-drop        assemble: a placed shard is journaled, its parts not yet deleted
    manifest-before   finalize: every shard placed, manifest not yet written
    rename-<name>     write_json_atomic: <name>'s temporary file is complete, not yet renamed
                      (rename-plan.json, rename-manifest.json)
    manifest-after    executor: manifest written, run state not yet cleaned up
In a pool, shard-* points are passed in the workers (each counts its own), the others in the parent.
"""

from __future__ import annotations

import errno
import os
import signal

__all__ = ["ENV", "configure", "point", "hit", "fire", "charge_write"]

ENV = "PREP_FAULT"
_ACTIONS = {"kill": signal.SIGKILL, "int": signal.SIGINT, "stop": signal.SIGSTOP}

_points: dict[str, tuple[int, str]] = {}  # point -> (n, action)
_hits: dict[str, int] = {}
_budget: list[int] = []  # [bytes left] when enospc is armed


def configure(spec: str | None) -> None:
    """Arm the faults in `spec` (the PREP_FAULT syntax); None or "" disarms everything."""
    _points.clear()
    _hits.clear()
    _budget.clear()
    for item in filter(None, (s.strip() for s in (spec or "").split(","))):
        name, _, rest = item.partition(":")
        count, _, action = rest.partition(":")
        if name == "enospc":
            _budget.append(int(count))
            continue
        action = action or "kill"
        if action not in _ACTIONS or not count.isdigit() or int(count) < 1:
            raise ValueError(f"{ENV}: bad item {item!r}; expected <point>:<n>[:kill|int|stop] or enospc:<bytes>")
        _points[name] = (int(count), action)


def hit(name: str) -> bool:
    """True on exactly the armed pass of `name` (the caller then does its part and calls `fire`)."""
    if not _points or name not in _points:
        return False
    _hits[name] = _hits.get(name, 0) + 1
    return _hits[name] == _points[name][0]


def fire(name: str) -> None:
    os.kill(os.getpid(), _ACTIONS[_points[name][1]])


def point(name: str) -> None:
    """A named fault point: does nothing unless PREP_FAULT armed it for this pass."""
    if _points and hit(name):
        fire(name)


def charge_write(nbytes: int, path) -> None:
    """Raise ENOSPC (as a full disk would) once this process has written more than the armed budget:
    with no file name, as write(2)'s error has none, so the callers' own naming of the file is tested
    (review: a spooled window's full disk named only the spool folder, unseen while this named `path`).
    `path`: the file being written, for the reader of a call site."""
    if not _budget:
        return
    _budget[0] -= nbytes
    if _budget[0] < 0:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


configure(os.environ.get(ENV))
