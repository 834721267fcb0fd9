"""What a run finds in its output directory, and the errors it stops with that a re-run resumes from.

A complete dataset for the same recipe is "nothing to do" only while its files match its manifest;
journaled units whose files went missing are redone; a full disk or a permission error under the
output is one line that says how to resume (pipeline.executor.tokenize calls each of these).
"""

from __future__ import annotations

import errno
from contextlib import contextmanager
from pathlib import Path

from pipeline.crc import crc32
from pipeline.errors import PrepError
from pipeline.journal import RunState
from pipeline.manifest import MANIFEST_NAME, Manifest, read_manifest
from pipeline.shards import part_intact
from pipeline.worker import rejects_name


def _prepare_output(out: Path, state: RunState, content: dict, overwrite: bool, tokenizer_sha: str) -> Manifest | None:
    """Returns the existing manifest when the same dataset is already complete."""
    if (out / MANIFEST_NAME).exists():
        if overwrite:
            _wipe(out, state)
            return None
        existing = read_manifest(out)
        if existing.recipe != content:
            raise PrepError(f"{out}: already holds a dataset made from a different recipe; choose another "
                            "--output, or pass --overwrite to replace it")
        made_with = existing.tokenizer.get("sha256")
        if made_with and made_with != tokenizer_sha:  # the same path, another file: as an unfinished run is
            raise PrepError(f"{out}: already holds a dataset made with another tokenizer at "
                            f"{existing.tokenizer.get('name')} (sha256 {made_with[:12]}... then, {tokenizer_sha[:12]}... "
                            "now); pass --overwrite to rebuild it with this one, or choose another --output")
        state.cleanup()
        return existing
    if overwrite:
        _wipe(out, state)
    return None


def _wipe(out: Path, state: RunState) -> None:
    (out / MANIFEST_NAME).unlink(missing_ok=True)  # first: the dataset stops being "complete"
    state.discard([child for child in out.iterdir() if child.name != ".prep"])  # deleted while units run
    state.reset()


def _refuse_damaged(out: Path, manifest: Manifest) -> None:
    """A complete dataset is only "nothing to do" if its files still match the manifest (sizes and
    headers: a stat and a 34-byte read per file); `manifest` is the one _prepare_output read."""
    from pipeline.verify import check_dataset

    problems = check_dataset(out, quick=True, manifest=manifest)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PrepError(f"{out}: complete for this recipe, but damaged: {problems[0]}{more}; `prep verify {out}` "
                        "lists every problem, --overwrite rebuilds the dataset")


def _drop_lost_units(results: dict[int, dict], state: RunState, dtype, placed: dict[str, list[dict]]) -> None:
    """Forget journaled units whose part files or rejects file are missing, the wrong size or fail
    their crc32, so they are redone (files deleted by hand, a disk restored from an older backup, a
    power cut: neither is fsynced), unless the part is in one of the `placed` shards kept (its file
    was deleted once that shard was journaled). Reads only the parts not yet placed."""
    consumed = {split: {name for e in entries for name in e["parts"]} for split, entries in placed.items()}

    def intact(result: dict) -> bool:
        return rejects_intact(result) and all(
            part["name"] in consumed.get(split, ()) or part_intact(state.parts / split, part, dtype.itemsize)
            for split, parts in result["shards"].items() for part in parts)

    def rejects_intact(result: dict) -> bool:
        if not result.get("num_rejects"):
            return True
        try:
            data = (state.rejects / rejects_name(result["unit"])).read_bytes()
        except FileNotFoundError:
            return False
        return "rejects_crc32" not in result or crc32(data) == result["rejects_crc32"]

    for index in [i for i, r in results.items() if r.get("status") == "ok" and not intact(r)]:
        del results[index]


def _inputs_newer_than(manifest: Path, inputs: dict[str, list]) -> list[str]:
    """A note when local input files were modified after the dataset was finished: "already complete"
    then means "made from their older contents". Only a note: a corpus copied without its mtimes
    looks the same (the manifest keeps no stamps, so that copies of a dataset stay byte-identical)."""
    made = manifest.stat().st_mtime_ns
    newer = sorted(path for path, (_, stamp) in inputs.items() if isinstance(stamp, int) and stamp > made)
    if not newer:
        return []
    more = f" and {len(newer) - 1} more" if len(newer) > 1 else ""
    return [f"{newer[0]}{more} changed after this dataset was made ({manifest} is older): it holds their "
            "contents as they were; --overwrite rebuilds it from them as they are now"]


def failed_units_note(manifest: Manifest) -> list[str]:
    """For an "already complete" dataset with failed_units: a plain re-run redoes nothing (its run state
    was deleted when it was finished), so the line says what does."""
    n = len(manifest.failed_units)
    if not n:
        return []
    return [f"{n} unit(s) or file(s) failed and were left out (see failed_units in the manifest); "
            "after replacing their files, --overwrite redoes them"]


@contextmanager
def _disk_full_is_user_error(out: Path):
    """ENOSPC/EDQUOT anywhere in a run (a worker's part, finalize, the journal, the manifest), and a
    permission error under the output directory -> one line."""
    try:
        yield
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and e.filename and str(out) in str(e.filename):
            raise PrepError(f"{e.filename}: cannot write ({e.strerror}); fix the permissions there or choose "
                            "another --output, then re-run the same command to resume") from None
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        what = "no space left on device" if e.errno == errno.ENOSPC else "disk quota exceeded"
        raise PrepError(f"{e.filename or out}: {what}; finished units are kept and nothing partial was recorded: "
                        "free space there (or choose another --output) and re-run the same command to resume") from None
