"""plan.json of an unfinished run begun by prep up to commit a51c40d, so that its run resumes.

That prep kept {"fingerprint", "units", "inputs"}: a fingerprint over the whole recipe (name,
on_bad_record and max_bad_records included), the tokenizer's sha256 and each unit's plan_entry; after a
stop on a file (`stopped_on`) also its `recipe_key` (the whole recipe) and each unit's key (a hash of its
plan_entry alone). It kept no recipe, tokenizer or spans, so a change of recipe cannot be named and a
changed file's units in the old plan are not known: its rules apply, as it would have resumed. Once
taken, journal.start and input_changes.accept rewrite plan.json in the new form.
"""

from __future__ import annotations

import hashlib
import json

from pipeline.input_changes import _differs, plan_entry, recipe_key
from pipeline.readers import WorkUnit

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
    plan's by its rule; after a stop on a file replaced or removed since, with the same recipe and
    tokenizer, those planned the same up to the first that differs. Files changed otherwise are then
    checked by input_changes.accept against the units kept, which this plan plans the same."""
    if old.get("fingerprint") == fingerprint(content, tokenizer_sha, units):
        return len(units)
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
