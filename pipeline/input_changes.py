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

A replaced, added or removed file may also change the plan, which the fingerprint then refuses as
another run: a damaged .gz/.bz2/.xz is planned from the bytes before its damage (readers.base._plan_size),
a damaged compressed JSON array from its records there (readers.json_cuts.CutShort), a compressed file's
ranges from its size, any file cut into ranges from its length. So plan.json also keeps the recipe key,
each unit's key and each file's first and last unit (`describe`), and a re-run of the same recipe and
tokenizer whose inputs changed takes the new plan (`replanned`), by the rules above: a changed or
removed file with units done from its old contents is refused, naming it (unless the run stopped or
failed on it), whether or not its units are planned the same; otherwise the journaled units planned the
same up to the first that differs are kept, the rest redone. That holds after a kill as after a
recorded stop: the resumed dataset is a fresh run's over the inputs as they are now.
"""

from __future__ import annotations

import hashlib
import json
import shlex

import orjson

from pipeline.errors import STOPS_THE_RUN, PrepError
from pipeline.journal import RunState
from pipeline.readers import WorkUnit

__all__ = ["RUN_ONLY_FIELDS", "accept", "changed_files", "check_changed", "describe", "note_failed", "note_stop",
           "plan_entry", "recipe_key", "redo_under_error", "replanned", "resume_content"]


def plan_entry(u: WorkUnit) -> tuple:
    """What the plan's fingerprint holds of a unit: its file(s) and range(s)."""
    return (u.path, u.start, u.end, *u.paths, *[(m.path, m.start, m.end) for m in u.group])


# Recipe fields that decide no unit's output, only the manifest's record of the recipe (written from
# the resuming run's recipe) or when the run stops: changed between a stop and its resume, the run goes
# on. The max_bad_records error itself says "raise the limit ... re-run to resume", which was refused as
# another recipe's run. on_bad_record: a unit journaled under `error` rejected nothing, as under `skip`;
# the other way, units that rejected records under `skip` are redone under `error` (`redo_under_error`).
RUN_ONLY_FIELDS = ("name", "on_bad_record", "max_bad_records")


def resume_content(recipe_dict: dict) -> dict:
    """The recipe fields an unfinished run must share to be resumed (its fingerprint's)."""
    return {k: v for k, v in recipe_dict.items() if k not in RUN_ONLY_FIELDS}


def recipe_key(recipe_dict: dict, tokenizer_sha: str) -> str:
    return hashlib.sha256(json.dumps([recipe_dict, tokenizer_sha], sort_keys=True).encode()).hexdigest()


def redo_under_error(state: RunState, results: dict[int, dict]) -> None:
    """Under `on_bad_record: error`, the journaled units that rejected records or failed (the run was
    begun under `skip`) are redone, so the run stops at the first bad record as a fresh one does."""
    state.forget_units(results, {i for i, r in results.items()
                                 if r.get("num_rejects") or r["status"] != "ok" or r.get("failed_files")})


def _unit_ident(u: WorkUnit) -> bytes:
    """A unit's identity across plans, serialized once: its range(s), and the source and file numbers
    the train/val split hashes (worker.val_mask), which a file added or removed before it shifts."""
    return orjson.dumps([u.source, u.file_index, plan_entry(u), [m.file_index for m in u.group]])


def describe(units: list[WorkUnit], inputs: dict[str, list], recipe_dict: dict, tokenizer: dict) -> tuple[str, dict]:
    """This plan's fingerprint and plan.json's fields beside it: the input files' identities (`accept`),
    and for `replanned` the recipe (resume_content) and tokenizer (name, sha256) to name what changed,
    each unit's key and the units of each input file (`spans`).

    Each unit's identity is serialized once and both its key and the fingerprint are hashed from that:
    100,000 one-file units took 0.63-0.67 s to describe plus 0.19-0.20 s to fingerprint (serialized
    twice), now 0.32-0.52 s in all on 2 busy cores; in 20 units, 0.22 s then, 0.20 s now (`_spans`)."""
    key = recipe_key(recipe_dict, tokenizer["sha256"])
    idents = [_unit_ident(u) for u in units]
    fingerprint = hashlib.sha256(b"\n".join([key.encode(), *idents])).hexdigest()
    return fingerprint, {"units": len(units), "inputs": inputs, "spans": _spans(units, inputs),
                         "recipe": recipe_dict, "tokenizer": tokenizer, "recipe_key": key,
                         "unit_keys": [hashlib.sha256(ident).hexdigest()[:16] for ident in idents]}


def _spans(units: list[WorkUnit], inputs: dict[str, list]) -> list[list[int]]:
    """For each file of `inputs`, in its order, the units that read it as runs [first, last, ...]:
    one run, unless several sources read the same path (then one run each). Paths are not repeated:
    keyed by path, plan.json of 100,000 files in 20 units was 9.6 MB, now 6.4 (4.8 of them `inputs`)."""
    runs_of: dict[str, list[int]] = {}
    for u in units:
        i = u.index
        for path in u.files():
            runs = runs_of.get(path)
            if runs is None:
                runs_of[path] = [i, i]
            elif runs[-1] >= i - 1:
                runs[-1] = i
            else:  # read again by a later source
                runs += [i, i]
    return [runs_of.get(path, []) for path in inputs]


def _units_of(runs) -> list[int]:
    """The unit indexes of a file's runs (`_spans`)."""
    return [i for first, last in zip(runs[::2], runs[1::2]) for i in range(first, last + 1)]


def replanned(old: dict, now: dict, units: list[WorkUnit], done: dict[int, dict], out, content: dict) -> int | None:
    """For an unfinished run in `out` of another plan (plan.json `old`, its finished units `done`;
    `now`: this run's `describe`): how many leading units of it this plan keeps, or None to refuse it
    as another run. A change of recipe or tokenizer raises PrepError naming it. Taken when the recipe
    and tokenizer are the same and an input file was changed, added or removed since; a changed or
    removed file with units done from its old contents raises PrepError naming it, as `accept` does,
    unless the run stopped or failed on it (a damaged file replaced: its units before the damage read
    bytes the replacement shares). `content`: this run's whole recipe, for a plan.json written by an
    older prep (pipeline.legacy_plans)."""
    # begun by prep up to a51c40d, which kept no recipe, spans or (mostly) keys; or such a plan taken by
    # journal.start (rewritten in this form but for `spans`) and killed before `accept` recorded them:
    # the files' old units are unknown, so that prep's rules judge it (an empty default would take
    # every changed file as having no unit done)
    if "recipe" not in old or "spans" not in old:
        from pipeline import legacy_plans
        return legacy_plans.kept(old, content, now["tokenizer"]["sha256"], units, now["inputs"])
    keys, was, inputs = old.get("unit_keys"), old.get("inputs") or {}, now["inputs"]
    if old.get("recipe_key") != now["recipe_key"]:
        raise PrepError(_recipe_changed(out, old, now))
    changed = changed_files(was, inputs)
    if not changed and inputs.keys() <= was.keys():
        return None  # the same files as they were: the plan differs for another reason (a hub dataset)
    runs = dict(zip(was, old["spans"]))
    check_changed(out, {path: _units_of(runs.get(path, ())) for path in changed}, was, inputs, done,
                  old.get("stopped_on", ()))
    keep = 0
    for key, new, u in zip(keys, now["unit_keys"], units):
        if key != new or not u.files():  # a hub dataset's rows: nothing proves them unchanged
            break
        keep += 1
    return keep


def changed_files(was: dict[str, list], now: dict[str, list]) -> list[str]:
    """The files of `was` (the run's {path: [size, stamp]}) changed or gone in `now`."""
    return [path for path, stamp in was.items() if path not in now or _differs(stamp, now[path])]


def check_changed(out, units_of: dict[str, list[int]], was: dict[str, list], now: dict[str, list],
                  done: dict[int, dict], stopped_on) -> dict[str, set[int]]:
    """For each changed or removed file (`units_of`: the units that read it in the run's plan): raises
    PrepError naming it when units are done from its old contents, unless the run stopped or failed on
    it; returns the units that failed on each such file (to redo). A group's unit that finished
    without the file (left out, failed) is not done from it."""
    damaged = set(stopped_on).union(*map(_failed_files, done.values()))
    redo: dict[str, set[int]] = {}
    for path, mine in units_of.items():
        finished = [i for i in mine if i in done]
        failed = {i for i in finished if path in _failed_files(done[i])}
        ok = [i for i in finished if i not in failed and done[i]["status"] == "ok"]
        if ok and path not in damaged:
            raise PrepError(_refusal(out, path, was[path], now.get(path), len(ok), len(mine)))
        if failed:
            redo[path] = failed
    return redo


def accept(state: RunState, plan: dict, units: list[WorkUnit], results: dict[int, dict]) -> None:
    """Check this plan's input files (`plan`: its `describe`) against those of the run that began the
    output; raises PrepError for a changed file with units done (`check_changed`). Forgets the units
    that failed on a changed file accepted, so they are redone, and records the new stamps (and spans,
    which belong to the same files' order)."""
    old, inputs = state.plan.get("inputs"), plan["inputs"]
    if old is None:  # a new run (plan.json was just written with `inputs`), or one begun by an older prep
        return
    changed = [path for path in changed_files(old, inputs) if path in inputs]  # gone: the plan differs
    if changed:
        wanted = set(changed)
        units_of: dict[str, list[int]] = {path: [] for path in changed}
        for u in units:
            for path in u.files():
                if path in wanted:
                    units_of[path].append(u.index)
        redo = check_changed(state.out, units_of, old, inputs, results, state.plan.get("stopped_on", ()))
        if redo:
            # on disk in this order, so a kill between two steps resumes right: the files first count as
            # stopped on (their failed lines may be gone when this runs again), then their units leave the
            # journal (and the shards placed from the first of them), then the new stamps are recorded
            state.update_plan(stopped_on=sorted({*state.plan.get("stopped_on", ()), *redo}))
            state.forget_units(results, set().union(*redo.values()))
    if old != inputs or state.plan.get("spans") != plan["spans"]:
        state.update_plan(inputs=inputs, spans=plan["spans"])


def _failed_files(result: dict) -> set[str]:
    """The files a journaled unit failed on: a failed unit's, or the members a group's unit left out."""
    failed = result.get("failed_files") or ([result] if result["status"] == "failed" else [])
    return {f["path"] for f in failed}


def note_stop(state: RunState, unit: WorkUnit, error: BaseException) -> None:
    """The run stops on `unit`'s error (`on_bad_record: error`): its files may then be replaced and the
    run resumed (see `accept`). Not for the recipe's mistakes (SchemaError), whose fix is the recipe, nor
    for a URL that could not be fetched (InputUnreachable), which is not damaged."""
    if isinstance(error, PrepError) and not isinstance(error, STOPS_THE_RUN):
        _mark_stopped_on(state, set(unit.files()))


def note_failed(state: RunState, failed: list[dict]) -> None:
    """Every unit failed (under `on_bad_record: skip`), so the run ends without a dataset and keeps its
    state, as a stop does: their files count as stopped on (see `note_stop`)."""
    _mark_stopped_on(state, set().union(*map(_failed_files, failed)))


def _mark_stopped_on(state: RunState, files: set[str]) -> None:
    """Called while the run's own error is raised: a failure to write (the disk full then) must not
    replace that error. Unmarked, a replaced file is refused as changed with units done, which
    --overwrite rebuilds."""
    if files and state.plan:
        try:
            state.update_plan(stopped_on=sorted({*state.plan.get("stopped_on", ()), *files}))
        except OSError:
            pass


def _recipe_changed(out, old: dict, now: dict) -> str:
    """The refusal of an unfinished run of another recipe or tokenizer, naming the first change and
    how to resume (the old value back) or start over."""
    start_over = "or pass --overwrite to discard it and start over with this recipe"
    was, tok = old["tokenizer"], now["tokenizer"]
    changes = _changes(old["recipe"], now["recipe"])
    if not changes:  # the same recipe: the tokenizer file at its path changed
        return (f"{out}: holds an unfinished run made with another tokenizer at {tok['name']} (sha256 "
                f"{was['sha256'][:12]}... then, {tok['sha256'][:12]}... now); put that file back to resume it, "
                f"{start_over}")
    key, then, value = changes[0]
    more = f" (and {len(changes) - 1} more field(s))" if len(changes) > 1 else ""
    if then is not _MISSING:
        back = f"set it back (--set {shlex.quote(f'{key}={_as_yaml(then)}')})"
    else:  # given now, or a field this prep has and the one that began the run had not (cross-version)
        back = ("remove it from the recipe (or its --set) if you gave it; if not, the run was begun by a prep "
                "without that field: resume it with that prep")
    return (f"{out}: holds an unfinished run of another recipe: {key} was {_shown(then)}, now {_shown(value)}{more}; "
            f"{back} and re-run to resume it, {start_over}")


_MISSING = object()  # a key the recipe then did not have: given now, or one added to prep since


def _changes(old, new, key: str = "") -> list[tuple[str, object, object]]:
    """(dotted key, old value, new value) of each field that differs, in the recipe's order; a recipe's
    one source is `source.` as --set names it, several `sources.<i>.`."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for k in [*old, *(k for k in new if k not in old)]:
            found += _changes(old.get(k, _MISSING), new.get(k, _MISSING), f"{key}{k}.")
        return found
    if key == "sources." and isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        found = []
        for i, (a, b) in enumerate(zip(old, new)):
            found += _changes(a, b, "source." if len(old) == 1 else f"sources.{i}.")
        return found
    return [] if old == new else [(key[:-1], old, new)]


def _shown(value) -> str:
    return "not set" if value is _MISSING else json.dumps(value)


def _as_yaml(value) -> str:
    """`value` as --set reads it back (YAML: JSON's scalars and lists are YAML too)."""
    import yaml
    if isinstance(value, str) and yaml.safe_load(value) == value:
        return value
    return json.dumps(value)


def _differs(was: list, now: list) -> bool:
    """Sizes differ, or both stamps are known and differ (a remote store may not give one)."""
    return was[0] != now[0] or (was[1] is not None and now[1] is not None and was[1] != now[1])


def _refusal(out, path: str, was: list, now: list | None, done: int, total: int) -> str:
    if now is None:
        return (f"{path}: gone since the unfinished run in {out} read it; {done} of its {total} unit(s) are "
                "done from it, and resuming would drop those documents: put the file back to resume, or "
                "re-run with --overwrite to start over without it")
    fix = "put the old file back to resume, or re-run with --overwrite to start over"
    if was[0] != now[0]:
        what = f"{was[0]:,} bytes then, {now[0]:,} now"
    else:
        what = "rewritten at the same size"
        if isinstance(was[1], int):  # a local mtime: copied again or touched, maybe unchanged
            fix += (f"; if its contents are the same (copied again, touched), set its old time back with "
                    f"touch -d @{was[1] // 10**9}.{was[1] % 10**9:09d} '{path}' and re-run")
    return (f"{path}: changed since the unfinished run in {out} read it ({what}); {done} of its "
            f"{total} unit(s) are done from the old contents, and resuming would mix old and new documents: "
            f"{fix}")
