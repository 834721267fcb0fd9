"""Input files that changed between an interrupted run and its resume.

The journal's fingerprint is the recipe, the tokenizer and the plan: each unit's file and range. A
unit of a whole file reads "to the end", so a file rewritten between a crash and the re-run kept the
plan, and the resumed dataset held the finished units' old documents beside the rest's new ones: 4
files of JSON Lines, the first cut to half its lines after its unit was journaled, resumed to 799
documents where a fresh run gives 700, and `prep verify` passed it. A file edited in place at the same
size (a word replaced by another as long) kept even a cut file's plan.

So plan.json keeps each input file's size and stamp (readers.base.file_identity: its mtime in ns; a
remote object's ETag or modification time) from the run that began the output, and a resumed run
compares them. A changed file is
- accepted when no unit of it is journaled done: the plan was made from the file as it is now, and its
  units read it so (units that failed on it under `on_bad_record: skip` are redone);
- accepted when a unit stopped the run on it or failed on it (`stopped_on`; a failed journal entry):
  the documented fix for a damaged file is to replace it and re-run, which keeps its units before the
  damage (read from bytes the replacement shares) and redoes the rest;
- refused otherwise, naming the file and what changed.

A replaced file may also change the plan, which the fingerprint then refuses as another run: a
damaged .gz/.bz2/.xz is planned from the bytes before its damage (readers.base._plan_size), a damaged
compressed JSON array from its records there (readers.json_cuts.CutShort), a compressed file's ranges
from its size. So a run that stops on a file keeps each unit's key in
plan.json (`remember_plan`), and once that file is replaced (or gone) the re-run of the same recipe
and tokenizer takes the new plan, keeping the journaled units it plans the same up to the first that
differs (`replanned`); the rest are redone.
"""

from __future__ import annotations

import hashlib
import json

from pipeline.errors import PrepError, SchemaError
from pipeline.journal import RunState
from pipeline.readers import WorkUnit

__all__ = ["accept", "note_failed", "note_stop", "plan_entry", "recipe_key", "remember_plan", "replanned"]


def plan_entry(u: WorkUnit) -> tuple:
    """What the plan's fingerprint holds of a unit: its file(s) and range(s)."""
    return (u.path, u.start, u.end, *u.paths, *[(m.path, m.start, m.end) for m in u.group])


def recipe_key(recipe_dict: dict, tokenizer_sha: str) -> str:
    return hashlib.sha256(json.dumps([recipe_dict, tokenizer_sha], sort_keys=True).encode()).hexdigest()


def _unit_key(u: WorkUnit) -> str:
    return hashlib.sha256(json.dumps(plan_entry(u)).encode()).hexdigest()[:16]


def remember_plan(state: RunState, units: list[WorkUnit], recipe: str) -> None:
    """After a run stopped on a file (note_stop): its recipe key and each unit's key in plan.json, for
    `replanned` (written only then: 17 bytes a unit). Called while the run's own error is raised: a
    failure to write (the disk full then) must not replace that error; without the keys a replaced file
    that plans otherwise is refused as another run, which --overwrite rebuilds."""
    if state.plan.get("stopped_on"):
        try:
            state.update_plan(recipe_key=recipe, unit_keys=[_unit_key(u) for u in units])
        except OSError:
            pass


def replanned(old: dict, recipe: str, units: list[WorkUnit], inputs: dict[str, list]) -> int | None:
    """For an unfinished run of another plan (plan.json `old`): how many leading units of it this plan
    keeps, or None to refuse it. Taken when that run stopped on a file that has been replaced or
    removed since, with the same recipe and tokenizer: its journaled units up to the first this plan
    plans otherwise are kept (a replaced file's units before its damage read bytes the replacement
    shares, see `accept`)."""
    keys, was = old.get("unit_keys"), old.get("inputs") or {}
    if keys is None or old.get("recipe_key") != recipe:
        return None
    if not any(path not in inputs or _differs(was[path], inputs[path])
               for path in old.get("stopped_on", ()) if path in was):
        return None
    keep = 0
    for key, u in zip(keys, units):
        if key != _unit_key(u):
            break
        keep += 1
    return keep


def accept(state: RunState, inputs: dict[str, list], units: list[WorkUnit], results: dict[int, dict]) -> None:
    """Check `inputs` (this plan's {path: [size, stamp]}) against those of the run that began the
    output; raises PrepError for a changed file with units done. Forgets the units that failed on
    a changed file accepted, so they are redone, and records the new stamps."""
    old = state.plan.get("inputs")
    if old is None:  # a new run (plan.json was just written with `inputs`), or one begun by an older prep
        return
    changed = {path: was for path, was in old.items() if path in inputs and _differs(was, inputs[path])}
    if not changed:
        return
    damaged = set(state.plan.get("stopped_on", ())).union(*(_failed_files(r) for r in results.values()))
    by_file: dict[str, list[int]] = {}
    for u in units:
        for path in u.files():
            if path in changed:
                by_file.setdefault(path, []).append(u.index)
    redo: set[int] = set()
    redone: set[str] = set()  # the files whose failed units are redone
    for path, was in changed.items():
        mine = [i for i in by_file.get(path, ()) if i in results]
        failed = {i for i in mine if path in _failed_files(results[i])}  # a group's unit may be ok without it
        done = [i for i in mine if i not in failed and results[i]["status"] == "ok"]
        if done and path not in damaged:
            raise PrepError(_refusal(state, path, was, inputs[path], len(done), len(by_file[path])))
        redo |= failed
        if failed:
            redone.add(path)
    if redo:
        # on disk in this order, so a kill between two steps resumes right: the files first count as
        # stopped on (their failed lines may be gone when this runs again), then their units leave the
        # journal (and the shards placed from the first of them), then the new stamps are recorded
        state.update_plan(stopped_on=sorted({*state.plan.get("stopped_on", ()), *redone}))
        state.forget_units(results, redo)
    state.update_plan(inputs={**old, **{path: inputs[path] for path in changed}})


def _failed_files(result: dict) -> set[str]:
    """The files a journaled unit failed on: a failed unit's, or the members a group's unit left out."""
    failed = result.get("failed_files") or ([result] if result["status"] == "failed" else [])
    return {f["path"] for f in failed}


def note_stop(state: RunState, unit: WorkUnit, error: BaseException) -> None:
    """The run stops on `unit`'s error (`on_bad_record: error`): its files may then be replaced and the
    run resumed (see `accept`). Not for the recipe's mistakes (SchemaError), whose fix is the recipe."""
    if isinstance(error, PrepError) and not isinstance(error, SchemaError) and state.plan:
        state.update_plan(stopped_on=sorted({*state.plan.get("stopped_on", ()), *unit.files()}))


def note_failed(state: RunState, failed: list[dict]) -> None:
    """Every unit failed (under `on_bad_record: skip`), so the run ends without a dataset and keeps its
    state, as a stop does: their files count as stopped on (see `note_stop`)."""
    files = set().union(*map(_failed_files, failed))
    if files and state.plan:
        state.update_plan(stopped_on=sorted({*state.plan.get("stopped_on", ()), *files}))


def _differs(was: list, now: list) -> bool:
    """Sizes differ, or both stamps are known and differ (a remote store may not give one)."""
    return was[0] != now[0] or (was[1] is not None and now[1] is not None and was[1] != now[1])


def _refusal(state: RunState, path: str, was: list, now: list, done: int, total: int) -> str:
    fix = "put the old file back to resume, or re-run with --overwrite to start over"
    if was[0] != now[0]:
        what = f"{was[0]:,} bytes then, {now[0]:,} now"
    else:
        what = "rewritten at the same size"
        if isinstance(was[1], int):  # a local mtime: copied again or touched, maybe unchanged
            fix += (f"; if its contents are the same (copied again, touched), set its old time back with "
                    f"touch -d @{was[1] // 10**9}.{was[1] % 10**9:09d} '{path}' and re-run")
    return (f"{path}: changed since the unfinished run in {state.out} read it ({what}); {done} of its "
            f"{total} unit(s) are done from the old contents, and resuming would mix old and new documents: "
            f"{fix}")
