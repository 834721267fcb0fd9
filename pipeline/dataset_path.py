"""What a path given where a dataset directory belongs turns out to be, when it is not one.

Users hand `prep verify` / `inspect` / `bench-loader` and `MemmapLoader` the manifest.json itself, a
split folder (DIR/train: Megatron-style prefixes point into one), a shard file, the output of a
`prep tokenize` run before its manifest is written (last), or a path that does not exist. The cases
are told apart once, here (and a URL: s3://bkt/ds, which Path made "s3:/bkt/ds, no such directory"); each caller words the fix in its own terms (the loader names `split=`, the
CLI names its command), since one sentence cannot fit both. A run not finished yet is the exception:
its sentence is built here (unfinished_message), and the caller supplies only its last step. No torch
here: `pipeline` stays torch-free.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.manifest import MANIFEST_NAME

__all__ = ["MANIFEST", "FILE", "FOLDER", "UNFINISHED", "LOST_MANIFEST", "MISSING", "URL", "NotADataset", "not_a_dataset",
           "unfinished_message", "lost_manifest_message", "url_message", "shards_without_manifest", "only_dataset_files"]

MANIFEST = "manifest"  # DIR/manifest.json itself
FILE = "file"  # any other file: a shard (DIR/train/x.bin), a file beside the manifest, or one elsewhere
FOLDER = "folder"  # a directory inside a dataset: a split folder (DIR/train), or DIR/.prep
UNFINISHED = "unfinished"  # no manifest yet, but a `prep tokenize` run's state (DIR/.prep/): writing, or stopped
LOST_MANIFEST = "lost_manifest"  # a finished run's files (its lock, split folders of shards) without manifest.json
MISSING = "missing"  # nothing at the path
URL = "url"  # an fsspec URL (an output.dir of `prep tokenize` that uploaded there): readers read local files

# what Path() leaves of a URL ("s3://bkt/ds" -> "s3:/bkt/ds"; "https://h/ds" -> "https:/h/ds")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/+(.*)$")  # 2+ letters: not a drive (C:/data)


@dataclass(frozen=True)
class NotADataset:
    kind: str  # one of the constants above
    path: Path
    dataset: Path | None = None  # the dataset directory to give instead, when the path is inside one
    split: str | None = None  # the split the path is (or is in), when the dataset's manifest lists it


def _listed_split(dataset: Path, name: str) -> str | None:
    """`name` if the manifest at `dataset` lists it as a split; a hint only, so a manifest that cannot be
    read gives None here (the caller's error is about the path, not the manifest)."""
    try:
        splits = json.loads((dataset / MANIFEST_NAME).read_bytes()).get("splits")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(splits, dict) and name in splits else None


def _is_dataset(path: Path) -> bool:
    return (path / MANIFEST_NAME).is_file()


def not_a_dataset(root: str | Path) -> NotADataset | None:
    """The case `root` is, or None for a directory holding manifest.json (read_manifest judges that one)
    and for a directory with no sign of a dataset or a run in or around it (the caller's own message)."""
    url = _URL.match(str(root))
    root = Path(root)
    if url and not root.exists():  # a local folder named "s3:" stays a path
        return NotADataset(URL, root)
    if root.is_file():
        if root.name == MANIFEST_NAME:
            return NotADataset(MANIFEST, root, root.parent)
        if _is_dataset(root.parent):  # DIR/README, DIR/stats.json
            return NotADataset(FILE, root, root.parent)
        if _is_dataset(root.parent.parent):  # DIR/<split>/part-0000.bin
            dataset = root.parent.parent
            return NotADataset(FILE, root, dataset, _listed_split(dataset, root.parent.name))
        return NotADataset(FILE, root)
    if not root.exists():
        return NotADataset(MISSING, root)
    if (root / MANIFEST_NAME).exists():
        return None
    if _is_dataset(root.parent):
        return NotADataset(FOLDER, root, root.parent, _listed_split(root.parent, root.name))
    if shards_without_manifest(root) is not None:
        return NotADataset(LOST_MANIFEST, root)
    if (root / ".prep").is_dir():  # prep tokenize's run state: the manifest is written last
        return NotADataset(UNFINISHED, root)
    return None


# the files a finished run leaves beside manifest.json, relative to the dataset (assemble's shard names)
_DATASET_FILE = re.compile(r"(?:train|val)/shard-\d{6}\.(?:bin|idx)|rejects\.jsonl")


def only_dataset_files(relative: list[str]) -> bool:
    """Whether files named relative to a dataset's directory ("train/shard-000000.bin") are all a dataset's
    own, a shard among them: what a finished run without its manifest leaves, locally or at a URL output
    (pipeline.remote). A lone rejects.jsonl may be anyone's; so may a folder of that name (review)."""
    return bool(relative) and all(_DATASET_FILE.fullmatch(rel) for rel in relative) \
        and any(rel.endswith((".bin", ".idx")) for rel in relative)


def shards_without_manifest(root: Path) -> Path | None:
    """A shard of a finished run whose manifest.json is gone (deleted, or left behind by a copy), else None.
    A finished run leaves DIR/.prep/lock alone: its plan and journal go with the run; a run still writing
    (or stopped) keeps them. So: the lock, no plan or journal, and beside .prep only a dataset's files
    (only_dataset_files). Told apart from an unfinished run because the fix differs: re-running the
    command refuses such a directory as foreign; --overwrite rebuilds it."""
    state = root / ".prep"
    if not (state / "lock").is_file() or (state / "plan.json").exists() or (state / "journal.jsonl").exists():
        return None
    relative, unreadable = [], []
    for folder, dirs, files in os.walk(root, onerror=unreadable.append):
        if folder == str(root) and ".prep" in dirs:
            dirs.remove(".prep")
        # a folder link is not walked: named, it is no dataset file, and keeps the directory foreign
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        inside = Path(folder).relative_to(root)
        relative += [(inside / name).as_posix() for name in links + files]
    if unreadable or not only_dataset_files(relative):
        return None
    return root / next(rel for rel in sorted(relative) if rel.endswith((".bin", ".idx")))


def lost_manifest_message(root: str | Path, then: str) -> str:
    """The LOST_MANIFEST case in one sentence, for the CLI and the loader: `then` as unfinished_message's."""
    root = Path(root)
    return (f"{root}: no {MANIFEST_NAME}, though a finished `prep tokenize` run wrote its shards here: the "
            f"manifest (which holds the shards' checksums and document counts) was deleted or not copied with them; "
            f"restore it, or rebuild the dataset with the same `prep tokenize` command and --overwrite, then {then}")


def unfinished_message(root: str | Path, then: str) -> str:
    """The UNFINISHED case in one sentence, shared by the CLI and the loader (each spelled it out, nearly
    the same); `then` is the caller's last step: "run `prep inspect` again", "build the loader again"."""
    root = Path(root)
    return (f"{root}: no {MANIFEST_NAME} yet: a `prep tokenize` run is writing this dataset or stopped before "
            f"finishing it ({root / '.prep'} holds its state); wait for it to end, or re-run the same "
            f"`prep tokenize` command to finish it, then {then}")


def url_message(case: NotADataset, reader: str) -> str:
    """The URL case in one sentence, shared by the loader and `verify_dataset` (the CLI refuses a URL
    argument before, in its own words); `reader` names what reads local files only."""
    url = _URL.sub(r"\1://\2", str(case.path))
    return (f"{url}: a URL; {reader} reads a local directory: give it the `prep tokenize` run's staging "
            "copy (output.local_dir, by default under ~/.cache/prep/staging/; the run names it in its last note), "
            "or a downloaded copy of the dataset (manifest.json and its split folders)")
