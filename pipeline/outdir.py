"""What a run may write into and what `--overwrite` may replace, for a local output (pipeline.executor)
and a URL one (pipeline.remote), with the same rule and the same words: a run writes only into an
empty output or a prep one (a dataset, or an unfinished run); `--overwrite` replaces only a prep
dataset or run, never files another tool or a person put there, and never the run's own inputs or
tokenizer."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.dataset_path import shards_without_manifest
from pipeline.errors import PrepError
from pipeline.manifest import MANIFEST_NAME
from pipeline.source_formats import is_url

__all__ = ["foreign_output", "reads_deleted_input", "refuse_foreign", "refuse_deleting_what_the_run_reads"]


def foreign_output(out: str, holds: str, overwrite: bool, run_state: str = "run state") -> PrepError:
    """The refusal of an output that holds `holds` (a name, or a count and an example) and is no prep's."""
    if overwrite:  # it once deleted a directory of notes and the run's own corpus, then died reading it
        return PrepError(f"{out}: is not a prep output (it holds {holds} and no manifest.json or {run_state}); "
                         "--overwrite replaces only a prep dataset or run: choose another --output, or empty it "
                         "yourself")
    return PrepError(f"{out}: exists, is not empty and is not a prep output (it holds {holds}); choose "
                     "another --output")


def reads_deleted_input(out: str, path: str) -> PrepError:
    return PrepError(f"{out}: --overwrite would delete {path}, which this run reads; move it out of {out}, "
                     "or choose another --output")


def refuse_foreign(out: Path, state, overwrite: bool) -> None:
    """Never write into, nor with --overwrite empty, a non-empty directory that no prep run created
    (before the lock makes .prep): --overwrite replaces a dataset or a run, nothing else. A run is
    known by its manifest, plan or journal (`state`, a journal.RunState): a bare `.prep/` (another
    tool's, or a run killed before its plan) does not make the files beside it ours."""
    ours = (out / MANIFEST_NAME).exists() or state.plan_path.exists() or state.journal_path.exists()
    if ours or not out.is_dir():
        return
    shard = shards_without_manifest(out)
    if shard is not None:  # a finished dataset that lost its manifest: ours, but only --overwrite may rebuild it
        if overwrite:
            return
        raise PrepError(f"{out}: holds a finished prep dataset's shards ({shard.relative_to(out)}) but no "
                        f"{MANIFEST_NAME}: restore the manifest, or add --overwrite to rebuild the dataset, or "
                        "choose another --output")
    other = next((child for child in sorted(out.iterdir()) if child.name != state.dir.name), None)
    if other is not None:
        raise foreign_output(str(out), other.name, overwrite)


def refuse_deleting_what_the_run_reads(out: Path, paths: list[str]) -> None:
    """--overwrite empties `out`: refused when that would delete an input file or the tokenizer
    (files inside `out` are left out of the plan only when a source's directory or glob holds it)."""
    root = os.path.join(os.path.realpath(out), "")
    real_dirs: dict[str, str] = {}  # realpath per parent directory: 100,000 inputs sit in a few
    for path in paths:
        if is_url(path) or not os.path.exists(path):  # a hub id, tiktoken:<name>, a URL
            continue
        parent, name = os.path.split(os.path.abspath(path))
        if parent not in real_dirs:
            real_dirs[parent] = os.path.join(os.path.realpath(parent), "")
        if (real_dirs[parent] + name).startswith(root):
            raise reads_deleted_input(str(out), path)
