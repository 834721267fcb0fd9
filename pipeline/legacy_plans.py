"""plan.json of an unfinished run begun by prep up to commit a51c40d, so that its run resumes.

That prep kept {"fingerprint", "units", "inputs"}: a fingerprint over the whole recipe (name,
on_bad_record and max_bad_records included), the tokenizer's sha256 and each unit's plan_entry; after a
stop on a file (`stopped_on`) also its `recipe_key` (the whole recipe) and each unit's key (a hash of its
plan_entry alone). It kept no recipe, tokenizer or spans, so a change of recipe cannot be named and a
changed file's units in the old plan are not known: its rules apply, as it would have resumed. Once
taken, journal.start and input_changes.accept rewrite plan.json in the new form.

That prep planned a text file split on a self-overlapping separator ("\n\n") as one unit (path, 0, -1);
this one cuts a plain local one at runs of the byte (readers.text_cuts), so its fingerprint is also
checked against the plan with those files whole. A match keeps the units both plans share, up to the
first such file cut now; the rest are redone on this plan (the old unit numbers past it name other
byte ranges, so their journal lines cannot stand).
"""

from __future__ import annotations

import hashlib
import json

from pipeline.input_changes import _differs, plan_entry, recipe_key
from pipeline.readers import WorkUnit
from pipeline.readers.text import self_overlapping

__all__ = ["fingerprint", "kept"]


def fingerprint(content: dict, tokenizer_sha: str, units: list[WorkUnit]) -> str:
    """That prep's plan fingerprint (executor._fingerprint then): `content` is the whole recipe."""
    blob = json.dumps([content, tokenizer_sha, [plan_entry(u) for u in units]], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def _unit_key(u: WorkUnit) -> str:
    return hashlib.sha256(json.dumps(plan_entry(u)).encode()).hexdigest()[:16]


def kept(old: dict, content: dict, tokenizer_sha: str, units: list[WorkUnit], inputs: dict[str, list]) -> int | None:
    """How many leading units of the run of plan.json `old` this plan keeps, or None to refuse it (as
    that prep did: "a different recipe or different input files"). All, when its fingerprint is this
    plan's by its rule; those before the first file it read whole and this plan cuts, when it is this
    plan's with such files whole (`_files_whole`); after a stop on a file replaced or removed since,
    with the same recipe and tokenizer, those planned the same up to the first that differs. Files
    changed otherwise are then checked by input_changes.accept against the units kept, which this plan
    plans the same."""
    if old.get("fingerprint") == fingerprint(content, tokenizer_sha, units):
        return len(units)
    whole = _files_whole(content, units)
    if whole is not None and old.get("fingerprint") == fingerprint(content, tokenizer_sha, whole):
        return next(i for i, (u, w) in enumerate(zip(units, whole)) if plan_entry(u) != plan_entry(w))
    keys, was = old.get("unit_keys"), old.get("inputs") or {}
    if keys is None or old.get("recipe_key") != recipe_key(content, tokenizer_sha):
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


def _files_whole(content: dict, units: list[WorkUnit]) -> list[WorkUnit] | None:
    """`units` as that prep planned them: each file of a text source split on a self-overlapping
    separator one unit (path, 0, -1), as its readers.text.plan gave; None when no such file is cut."""
    sources = content["sources"]
    whole: list[WorkUnit] = []
    for u in units:
        src = sources[u.source]
        sep = src.get("doc_separator")
        cut = (src.get("format") == "text" and sep is not None and self_overlapping(sep.encode("utf-8"))
               and (u.start, u.end) != (0, -1))  # whole (or a group of small whole files): as then
        if not cut:
            whole.append(u)
        elif u.start == 0:  # a cut file's first unit stands for the file; its others go
            whole.append(WorkUnit(0, u.source, u.file_index, u.path, "text", 0, -1, u.size))
    return whole if len(whole) < len(units) else None
