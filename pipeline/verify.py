"""`prep verify`: is a dataset directory exactly what its manifest says?

Three levels, each including the ones before:
    sizes   manifest schema and version, dtype vs vocabulary, per-split totals = sum of shards,
            shard names; per shard: both files present, the 34-byte `.idx` header (magic, version,
            dtype code, S, D = S + 1), S = the manifest's num_docs, `.idx` size = what the header
            implies, `.bin` size = num_tokens x itemsize. O(#shards) stats and 34-byte reads:
            cheap enough for a loader to run on every open (`check_dataset(root, quick=True)`).
    index   every `.idx` array: lengths >= 0 (> 0 in a dataset that records its boundary: prep writes
            no empty document) summing to num_tokens, byte offsets exactly the running
            sum of lengths (so monotone, starting at 0, tiling the `.bin`), document indices 0..S;
            no stray files in split directories (harmless to a loader, which goes by the manifest,
            but `cat train/*.bin` would read them). Reads ~20 bytes per document. (`verify --quick`.)
    full    every `.bin` read once: sha256 against the manifest, every token id < vocab_size, and every
            document starting / ending with the boundary id the manifest records (`verify_boundaries`:
            the one check that sees an index edited to stay self-consistent, whose documents merged or split).

Memory stays bounded on any dataset size: `.bin` files are read into one 16 MiB buffer per thread,
index arrays are memory-mapped and checked 4 Mi entries at a time, all vectorized numpy. Shards are
checked on a few threads (hashlib and numpy release the GIL). Problems come one line each, naming
the file and what is wrong: manifest and size problems first, then index, checksum and token-id
problems, each group in manifest order.
"""

from __future__ import annotations

import os
import re
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.dataset_path import (
    FILE,
    LOST_MANIFEST,
    MANIFEST,
    MISSING,
    UNFINISHED,
    URL,
    lost_manifest_message,
    not_a_dataset,
    shards_without_manifest,
    url_message,
)
from pipeline.errors import PrepError
from pipeline.manifest import (
    IDX_HEADER_BYTES,
    MANIFEST_NAME,
    Manifest,
    ShardInfo,
    idx_bytes,
    is_plain_name,
    read_idx_header,
    read_manifest,
    shard_paths,
)
from pipeline.verify_boundaries import BoundaryPolicy, BoundaryWalk, boundary_policy

__all__ = ["LEVELS", "VerifyReport", "verify_dataset", "check_dataset", "check_for_reading", "refuse_non_dataset"]

LEVELS = ("sizes", "index", "full")
READ_BLOCK = 16 << 20   # bytes of .bin per read: one buffer per thread
INDEX_CHUNK = 1 << 22   # index entries per vectorized step (~100 MiB of int64 temporaries at most)
_SHA256 = re.compile(r"[0-9a-f]{64}")


# manifest.Manifest's words for a format_version above the one this prep reads
_NEWER_FORMAT = "; this prep reads version"


@dataclass
class VerifyReport:
    root: Path
    level: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    manifest_read: bool = False
    num_shards: int = 0
    num_docs: int = 0
    num_tokens: int = 0
    bytes_read: int = 0
    unlisted: int = 0  # problems that are files the manifest does not list: deleted, not restored
    boundaries_checked: bool = True  # False: the manifest records no boundary (the summary said it checked them)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        checked = {"sizes": "sizes and headers", "index": "sizes and indexes",
                   "full": "sizes, indexes, sha256, token ids and document boundaries" if self.boundaries_checked
                   else "sizes, indexes, sha256 and token ids"}[self.level]
        if self.ok:
            return (f"ok: {self.root}: {self.num_shards} shards, {self.num_docs:,} documents, "
                    f"{self.num_tokens:,} tokens; {checked} all match the manifest")
        if not self.manifest_read:  # the problem line says what is wrong; this line, what to do
            if not (self.root / MANIFEST_NAME).exists() and _unfinished_run(self.root):
                # "point `prep verify` at the directory holding its manifest.json, or make the dataset"
                # followed the problem line's "re-run the same command to finish it"
                return (f"{self.root}: a `prep tokenize` run that has not finished (no manifest.json yet), so nothing "
                        "was checked; finish it as said above, then run `prep verify` again")
            if not (self.root / MANIFEST_NAME).exists():
                return (f"{self.root}: not a complete prep dataset: point `prep verify` at the directory holding "
                        "its manifest.json, or make the dataset with `prep tokenize`")
            if any(_NEWER_FORMAT in p for p in self.problems):  # not damage: "restore it from a copy" was wrong
                return (f"{self.root}: written by a newer prep (see its format_version above), so nothing else was "
                        "checked; verify it with that prep, or rebuild it with this one (`prep tokenize --overwrite`)")
            return (f"{self.root}: not a complete prep dataset: its manifest.json cannot be used, so nothing else "
                    "was checked; restore manifest.json from a copy, or rebuild with `prep tokenize --overwrite`")
        if self.unlisted == len(self.problems):  # "restore the files named above" said to restore the strays
            return (f"{self.root}: {len(self.problems)} problem(s) ({checked} checked): file(s) the manifest does not "
                    "list, which `cat <split>/*.bin` would read; delete them, or move them out of the dataset")
        return (f"{self.root}: {len(self.problems)} problem(s) ({checked} checked); the dataset is damaged: "
                "restore the files named above" + (" and delete the ones the manifest does not list" if self.unlisted
                                                   else "") + ", or rebuild it with `prep tokenize --overwrite`")


def check_dataset(root: str | os.PathLike, quick: bool = True, *, manifest: Manifest | None = None) -> list[str]:
    """Problems found in the dataset at `root`, one line each; [] when it is sound.

    quick=True is the `sizes` level (manifest, headers and file sizes; a stat and a 34-byte read per
    file), meant for loaders to call on open. quick=False is everything `prep verify` checks.
    `manifest`: the one the caller read from `root` already (read_manifest), checked instead of reading it again.
    """
    return verify_dataset(root, level="sizes" if quick else "full", manifest=manifest).problems


def check_for_reading(root: str | os.PathLike, manifest: Manifest, split: str, num_docs: int) -> list[str]:
    """What `prep inspect` checks before it decodes the first `num_docs` documents of `split`: the
    `sizes` level and stray files for the whole dataset, then every check of `prep verify` (index,
    sha256, token ids) on the shards those documents are in. Sizes alone let a shard whose offsets
    were shuffled, or whose bytes changed, print other text (ids past the vocabulary decode to
    nothing) as if it were the dataset's, exit 0. One shard is read (100 M tokens: ~0.2-0.5 s)."""
    root = Path(root)
    report = verify_dataset(root, level="sizes", manifest=manifest)
    _check_strays(root, manifest, report)
    if report.problems or num_docs <= 0 or split not in manifest.splits:
        return report.problems
    wanted, docs = [], 0
    for info in manifest.splits[split].shards:
        if docs >= num_docs:
            break
        wanted.append(_Shard(split, info, *shard_paths(root, split, info.name)))
        docs += info.num_docs
    policy, _ = boundary_policy(manifest.tokenizer, manifest.vocab_size, "")  # its problems: in the report already
    for s in wanted:
        report.problems += _check_shard(s, manifest, "full", lambda nbytes: None, policy)[0]
    return report.problems


def verify_dataset(root: str | os.PathLike, level: str = "full", *, progress: bool = False, console=None,
                   threads: int | None = None, manifest: Manifest | None = None) -> VerifyReport:
    """Check `root` at `level` (see the module docstring); never raises for a damaged dataset. With
    `manifest` (the caller's read_manifest(root)), manifest.json is not read again."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    root = Path(root)
    refuse_non_dataset(root, "verify")
    report = VerifyReport(root, level)
    if manifest is None:
        manifest = _load_manifest(root, report)
    if manifest is None:
        return report
    report.manifest_read = True
    shards = _check_manifest(root, manifest, report)
    policy, found = boundary_policy(manifest.tokenizer, manifest.vocab_size, str(root / MANIFEST_NAME))
    report.problems += found
    sound = [s for s in shards if _check_sizes(s, manifest, report)]
    if level != "sizes":
        _check_strays(root, manifest, report)
        if sound:
            _deep_checks(sound, manifest, level, report, progress, console, threads, policy)
        if policy is None and not found:
            report.boundaries_checked = False
            report.notes.append("the manifest records no tokenizer.boundary: document boundaries were not checked")
    report.num_shards = len(shards)
    report.num_docs = sum(s.info.num_docs for s in shards)
    report.num_tokens = sum(s.info.num_tokens for s in shards)
    links = [p for s in shards for p in (s.bin_path, s.idx_path) if p.is_symlink() and p.is_file()]
    if links:  # checked through the link like any file; but the bytes live outside the directory
        report.notes.append(f"{len(links)} shard file(s) are symbolic links (first: {links[0]} -> "
                            f"{os.readlink(links[0])}), checked through them; a copy of this directory must "
                            "follow links (cp -rL, rsync -L) to hold the data")
    if manifest.failed_units:
        report.notes.append(f"{len(manifest.failed_units)} input unit(s) failed during `prep tokenize` and are "
                            "not in the dataset (listed under failed_units in the manifest)")
    return report


def refuse_non_dataset(root: Path, command: str) -> None:
    """PrepError naming the directory to give `prep <command>` instead, for the paths users give by
    mistake: the manifest.json itself ("no such directory"), a shard file, or a split directory (inspect
    said the dataset was "missing or incomplete (finish it with `prep tokenize`)"). The cases come from
    dataset_path, shared with the loader; a run without its manifest yet is left to the caller (verify
    reports it as a problem)."""
    case = not_a_dataset(root)
    if case is None or case.kind in (UNFINISHED, LOST_MANIFEST):
        return
    if case.kind == URL:  # the CLI refuses a URL before, in its words: here from Python (verify_dataset)
        raise PrepError(url_message(case, "verify_dataset" if command == "verify" else f"`prep {command}`"))
    instead = f": prep {command} {case.dataset}" if case.dataset is not None else ""
    if case.kind == MANIFEST:
        raise PrepError(f"{root}: the dataset's manifest; give `prep {command}` the directory that holds "
                        f"manifest.json{instead}")
    if case.kind == FILE:
        inside = f" (inside the dataset at {case.dataset})" if case.dataset not in (None, root.parent) else ""
        raise PrepError(f"{root}: a file, not a dataset directory{inside}; give `prep {command}` the directory "
                        f"that holds manifest.json{instead}")
    if case.kind == MISSING:
        raise PrepError(f"{root}: no such directory")
    raise PrepError(f"{root}: a directory inside the dataset at {case.dataset} (no manifest.json here); "
                    f"give `prep {command}` the dataset's directory{instead}")


# -- manifest -------------------------------------------------------------------------------------
@dataclass
class _Shard:
    split: str
    info: ShardInfo
    bin_path: Path
    idx_path: Path


def _load_manifest(root: Path, report: VerifyReport) -> Manifest | None:
    path = root / MANIFEST_NAME
    if not path.exists():
        if shards_without_manifest(root) is not None:
            report.problems.append(f"{path}: missing; " + lost_manifest_message(root, "verify again").split(": ", 1)[1])
        else:
            report.problems.append(f"{path}: missing; " + (
                "an unfinished `prep tokenize` run is here: wait for it to end, or re-run the same command to finish it"
                if _unfinished_run(root) else "this is not a complete prep dataset"))
        return None
    try:
        return read_manifest(root)
    except PrepError as e:
        report.problems.append(str(e))
    return None


def _unfinished_run(root: Path) -> bool:
    """A `prep tokenize` run's plan or journal is here (pipeline.outdir's test of a run)."""
    return (root / ".prep" / "journal.jsonl").exists() or (root / ".prep" / "plan.json").exists()


def _check_manifest(root: Path, m: Manifest, report: VerifyReport) -> list[_Shard]:
    where = root / MANIFEST_NAME
    dtype = m.np_dtype
    if m.vocab_size <= 0:
        report.problems.append(f"{where}: vocab_size {m.vocab_size} is not positive")
    elif m.vocab_size - 1 > np.iinfo(dtype).max:
        report.problems.append(f"{where}: dtype {m.dtype} cannot hold ids of a {m.vocab_size}-token vocabulary")
    _check_tokenizer_fields(m.tokenizer, m.vocab_size, where, report)
    shards: list[_Shard] = []
    for split, info in m.splits.items():
        if not is_plain_name(split):
            report.problems.append(f"{where}: split name {split!r} is not a plain directory name")
            continue
        docs = sum(s.num_docs for s in info.shards)
        toks = sum(s.num_tokens for s in info.shards)
        if (docs, toks) != (info.num_docs, info.num_tokens):
            report.problems.append(f"{where}: split {split!r} says {info.num_docs} docs / {info.num_tokens} tokens, "
                                   f"its shards add up to {docs} / {toks}")
        names = [s.name for s in info.shards]
        if names != sorted(set(names)):
            report.problems.append(f"{where}: split {split!r} lists its shards out of name order or twice "
                                   "(name order is the dataset order)")
        for s in info.shards:
            if not is_plain_name(s.name):
                report.problems.append(f"{where}: shard name {s.name!r} in split {split!r} is not a plain file name")
                continue
            if s.num_docs < 0 or s.num_tokens < 0:
                report.problems.append(f"{where}: shard {split}/{s.name} has negative counts")
                continue
            if s.num_docs == 0 and s.num_tokens > 0:  # an index of no documents passed, its .bin's tokens in none
                report.problems.append(f"{where}: shard {split}/{s.name} lists 0 documents but {s.num_tokens} "
                                       "tokens, which no document holds")
            if not _SHA256.fullmatch(s.sha256):
                report.problems.append(f"{where}: shard {split}/{s.name} has no valid sha256 ({s.sha256[:70]!r})")
            shards.append(_Shard(split, s, *shard_paths(root, split, s.name)))
    return shards


def _check_tokenizer_fields(t: dict, vocab_size: int, where: Path, report: VerifyReport) -> None:
    """The fields readers go by: `prep inspect --docs` loads the tokenizer by name and refuses one of
    another sha256 (a missing name was a KeyError traceback, a missing sha256 "differs from the None
    that made the dataset"); loaders refuse to mix datasets of different sha256s (two without one
    compared equal)."""
    fix = "restore manifest.json from a copy, or rebuild with `prep tokenize --overwrite`"
    name, sha = t.get("name"), t.get("sha256")
    if not isinstance(name, str) or not name:
        report.problems.append(f"{where}: tokenizer.name is {name!r}, not the tokenizer's path or name; {fix}")
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        report.problems.append(f"{where}: tokenizer.sha256 is {str(sha)[:70]!r}, not the 64 hex digits that identify "
                               f"the tokenizer (inspect and the loaders compare them); {fix}")
    # prep writes the tokenizer's vocab_size twice; the id check goes by the top-level one, so raising
    # it alone let ids past the tokenizer's vocabulary pass
    if vocab_size > 0 and "vocab_size" in t and t["vocab_size"] != vocab_size:  # <= 0: reported already
        report.problems.append(f"{where}: vocab_size {vocab_size} differs from tokenizer.vocab_size "
                               f"{t['vocab_size']!r} (prep writes the same number to both); {fix}")


# -- sizes ----------------------------------------------------------------------------------------
def _check_sizes(s: _Shard, m: Manifest, report: VerifyReport) -> bool:
    """Files, header, sizes; True when the shard is sound enough for the deeper checks."""
    n = len(report.problems)
    missing = [p for p in (s.bin_path, s.idx_path) if not p.is_file()]
    for p in missing:
        listed = f"the manifest lists shard {s.split}/{s.info.name}"
        if p.is_symlink():  # "missing" sent users looking for a file that `ls` shows
            report.problems.append(f"{p}: a symbolic link to {os.readlink(p)}, which is missing or not a file "
                                   f"({listed}); restore its target, or put the file itself here")
        elif p.exists():
            report.problems.append(f"{p}: not a regular file ({listed})")
        else:
            report.problems.append(f"{p}: missing ({listed})")
    if s.idx_path not in missing:
        try:
            header = read_idx_header(s.idx_path)
        except PrepError as e:
            report.problems.append(str(e))
        except OSError as e:  # no permission, EIO from a failing disk: a problem line, not a traceback
            report.problems.append(_unreadable(s.idx_path, e))
        else:
            if header.dtype != m.np_dtype:
                report.problems.append(f"{s.idx_path}: index dtype is {header.dtype.name}, the manifest says {m.dtype}")
            if header.num_seqs != s.info.num_docs:
                report.problems.append(f"{s.idx_path}: index holds {header.num_seqs} documents, the manifest says "
                                       f"{s.info.num_docs}")
            size, want = s.idx_path.stat().st_size, idx_bytes(header.num_seqs)
            if size != want:
                report.problems.append(f"{s.idx_path}: {size} bytes, its header ({header.num_seqs} documents) "
                                       f"implies {want}: {'truncated' if size < want else 'trailing bytes'}")
    if s.bin_path not in missing:
        size, want = s.bin_path.stat().st_size, s.info.num_tokens * m.np_dtype.itemsize
        if size != want:
            report.problems.append(f"{s.bin_path}: {size} bytes, the manifest's {s.info.num_tokens} {m.dtype} tokens "
                                   f"make {want}: {'truncated' if size < want else 'trailing bytes'}")
    return len(report.problems) == n


def _check_strays(root: Path, m: Manifest, report: VerifyReport) -> None:
    """Files in split directories that the manifest does not list (`cat train/*.bin` would read them)."""
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        info = m.splits.get(d.name)
        expected = {f"{s.name}.{ext}" for s in info.shards for ext in ("bin", "idx")} if info else set()
        try:
            listing = sorted(d.iterdir())
        except OSError as e:
            report.problems.append(_unreadable(d, e))
            continue
        for f in listing:
            if f.name in expected:
                continue
            if info is not None:
                report.problems.append(f"{f}: in split directory {d.name}/ but not listed in the manifest "
                                       "(left over from another run?); delete it, or move it out of the dataset")
            elif f.suffix in (".bin", ".idx"):
                report.problems.append(f"{f}: shard file in {d.name}/, a split the manifest does not have; delete "
                                       "it, or move it out of the dataset")
            else:
                continue
            report.unlisted += 1


# -- index + full ---------------------------------------------------------------------------------
def _deep_checks(shards: list[_Shard], m: Manifest, level: str, report: VerifyReport, progress: bool, console,
                 threads: int | None, policy: BoundaryPolicy | None) -> None:
    total = sum(s.idx_path.stat().st_size + (s.bin_path.stat().st_size if level == "full" else 0) for s in shards)
    bar = _Bar(total, "verify" if level == "full" else "verify --quick", progress, console)
    workers = max(1, min(threads or min(4, os.cpu_count() or 1), len(shards)))
    with bar, ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda s: _check_shard(s, m, level, bar.advance, policy), shards))
    for problems, nbytes in results:
        report.problems.extend(problems)
        report.bytes_read += nbytes


def _check_shard(s: _Shard, m: Manifest, level: str, advance,
                 policy: BoundaryPolicy | None) -> tuple[list[str], int]:
    try:
        problems = _check_index(s, m.np_dtype, advance, no_empty=policy is not None)
    except OSError as e:
        problems = [_unreadable(s.idx_path, e)]
    nbytes = s.idx_path.stat().st_size
    if level == "full":
        try:  # boundaries only along an index found sound: a broken one's lengths cut nothing meaningful
            problems += _check_bin(s, m, advance, None if problems else policy)
        except OSError as e:  # a read error part way through a .bin (EIO) is the damage verify is for
            problems.append(_unreadable(s.bin_path, e))
        nbytes += s.bin_path.stat().st_size
    return problems, nbytes


def _unreadable(path: Path, e: OSError) -> str:
    return (f"{path}: cannot be read ({e.strerror or e}); give this user read access to it, or restore it "
            "from a sound copy")


def _check_index(s: _Shard, dtype: np.dtype, advance, no_empty: bool) -> list[str]:
    """Lengths, offsets and document indices of one `.idx` whose header and size are already checked.
    `no_empty`: a document of 0 tokens is a problem (a dataset prep wrote, which records its boundary:
    prep never writes an empty text; such an entry is what merging two documents and splitting a third,
    the count kept, leaves where `boundary: none` gives no token to check)."""
    n = s.info.num_docs
    itemsize = dtype.itemsize
    p = s.idx_path
    if n == 0:
        with open(p, "rb") as f:
            f.seek(IDX_HEADER_BYTES)
            (last,) = struct.unpack("<q", f.read(8))
        advance(idx_bytes(0))
        return [] if last == 0 else [f"{p}: document_indices is [{last}], expected [0]"]
    raw = np.memmap(p, dtype=np.uint8, mode="r")
    lengths = raw[IDX_HEADER_BYTES:IDX_HEADER_BYTES + 4 * n].view("<i4")
    pointers = raw[IDX_HEADER_BYTES + 4 * n:IDX_HEADER_BYTES + 12 * n].view("<i8")
    doc_idx = raw[IDX_HEADER_BYTES + 12 * n:IDX_HEADER_BYTES + 12 * n + 8 * (n + 1)].view("<i8")
    offset = 0  # running byte offset (int64 from the start: Megatron-LM#1672 overflowed an int32 here)
    tokens = 0
    for start in range(0, n, INDEX_CHUNK):
        stop = min(n, start + INDEX_CHUNK)
        lens = lengths[start:stop].astype(np.int64)
        if (bad := np.flatnonzero(lens < 0)).size:
            i = start + int(bad[0])
            return [f"{p}: document {i} has negative length {int(lens[bad[0]])}"]
        if no_empty and (bad := np.flatnonzero(lens == 0)).size:
            return [f"{p}: document {start + int(bad[0])} has length 0; prep writes no empty documents (an empty "
                    "text is counted in skipped.empty), so the index was changed (documents merged or split)"]
        want = np.empty(stop - start, dtype=np.int64)
        want[0] = offset
        np.cumsum(lens[:-1] * itemsize, out=want[1:])
        want[1:] += offset
        got = np.asarray(pointers[start:stop])
        if (bad := np.flatnonzero(got != want)).size:
            i = start + int(bad[0])
            return [f"{p}: byte offset of document {i} is {int(got[bad[0]])}, its preceding lengths put it at "
                    f"{int(want[bad[0]])} (offsets must start at 0, increase and tile the .bin)"]
        idx = np.asarray(doc_idx[start:stop])
        if (bad := np.flatnonzero(idx != np.arange(start, stop, dtype=np.int64))).size:
            i = start + int(bad[0])
            return [f"{p}: document_indices[{i}] is {int(idx[bad[0]])}, expected {i} (one sequence per document)"]
        chunk_tokens = int(lens.sum())
        offset += chunk_tokens * itemsize
        tokens += chunk_tokens
        advance(20 * (stop - start))
    if int(doc_idx[n]) != n:
        return [f"{p}: document_indices[{n}] is {int(doc_idx[n])}, expected {n}"]
    advance(IDX_HEADER_BYTES + 8)
    if tokens != s.info.num_tokens:
        return [f"{p}: document lengths add up to {tokens} tokens, the manifest and the .bin size say "
                f"{s.info.num_tokens}"]
    return []


def _check_bin(s: _Shard, m: Manifest, advance, policy: BoundaryPolicy | None) -> list[str]:
    """One sequential pass: sha256, every id below vocab_size (when the dtype could hold more), and,
    with `policy`, each document's boundary ids."""
    import hashlib

    from pipeline.manifest import read_idx

    dtype = np.dtype(m.np_dtype).newbyteorder("<")
    # a vocab_size <= 0 is the manifest's one problem, already reported: not one more line per shard
    check_ids = m.vocab_size > 0 and (m.vocab_size - 1 < np.iinfo(dtype).max or np.iinfo(dtype).min < 0)
    sha = hashlib.sha256()
    buf = bytearray(READ_BLOCK)  # a multiple of every itemsize
    view = memoryview(buf)
    first_bad: tuple[int, int] | None = None  # (token position, id)
    problems: list[str] = []
    walk = None
    if policy and s.info.num_docs:
        try:  # the .idx, not the .bin, is what could not be read (the caller blames an OSError on the .bin)
            walk = BoundaryWalk(policy, read_idx(s.idx_path)[1], INDEX_CHUNK)
        except OSError as e:
            problems.append(_unreadable(s.idx_path, e))
    pos = 0
    with open(s.bin_path, "rb", buffering=0) as f:
        while True:
            n = 0
            while n < READ_BLOCK and (k := f.readinto(view[n:])):
                n += k
            if n == 0:
                break
            sha.update(view[:n])
            ids = np.frombuffer(buf, dtype=dtype, count=n // dtype.itemsize)
            if check_ids and first_bad is None:
                if int(ids.max()) >= m.vocab_size or int(ids.min()) < 0:
                    i = int(np.flatnonzero((ids >= m.vocab_size) | (ids < 0))[0])
                    first_bad = (pos + i, int(ids[i]))
            if walk is not None:
                walk.feed(ids, pos)
            pos += ids.size
            advance(n)
            if n < READ_BLOCK:
                break
    sha_ok = sha.hexdigest() == s.info.sha256
    if not sha_ok:
        problems.append(f"{s.bin_path}: sha256 {sha.hexdigest()[:16]}... does not match the manifest's "
                        f"{s.info.sha256[:16]}...: the contents changed after it was written")
    if first_bad is not None:
        token, value = first_bad
        try:
            doc = f"document {_doc_of(s.idx_path, s.info.num_docs, token)}"
        except OSError as e:
            doc = "document unknown: the .idx cannot be read"
            if (line := _unreadable(s.idx_path, e)) not in problems:  # the boundary walk's open may have failed too
                problems.append(line)
        problems.append(f"{s.bin_path}: token id {value} at token {token} ({doc}) is not "
                        f"below the vocabulary size {m.vocab_size}")
    # the .bin's bytes are the ones written (sha256): a wrong edge is then the index's doing
    if walk is not None and (line := walk.problem(s.idx_path if sha_ok else s.bin_path)):
        problems.append(line)
    return problems


def _doc_of(idx_path: Path, num_docs: int, token: int) -> int:
    """The document of the `.idx` at `idx_path` that holds token position `token` (num_docs when it is
    past them all), its lengths read INDEX_CHUNK at a time: 16 MiB read and 32 MiB of running sums at
    most, where a cumsum of them all took 8 bytes per document (800 MB for 100 M documents)."""
    tokens_before = 0
    with open(idx_path, "rb") as f:  # plain reads: an I/O error is an OSError naming this file
        f.seek(IDX_HEADER_BYTES)
        for first in range(0, num_docs, INDEX_CHUNK):
            want = min(INDEX_CHUNK, num_docs - first)
            lengths = np.frombuffer(f.read(4 * want), dtype="<i4")
            if lengths.size < want:  # cut short since its size was checked: no document holds it here
                break
            ends = np.cumsum(lengths, dtype=np.int64) + tokens_before
            if ends[-1] > token:
                return first + int(np.searchsorted(ends, token, side="right"))
            tokens_before = int(ends[-1])
    return num_docs


class _Bar:
    """A rich progress bar over bytes read (or nothing when disabled); `advance` is thread-safe."""

    def __init__(self, total: int, label: str, enabled: bool, console):
        self._progress = None
        if enabled and total:
            from rich.console import Console

            console = console or Console(stderr=True)
            if not console.is_terminal:  # a pipe or a log file: no bar, not even its final newline
                return
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )
            self._progress = Progress(TextColumn(f"[bold]{label}"), BarColumn(), DownloadColumn(),
                                      TransferSpeedColumn(), TimeRemainingColumn(),
                                      console=console, transient=True)
            self._task = self._progress.add_task(label, total=total)

    def __enter__(self) -> _Bar:
        if self._progress:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress:
            self._progress.stop()

    def advance(self, nbytes: int) -> None:
        if self._progress:
            self._progress.update(self._task, advance=nbytes)
