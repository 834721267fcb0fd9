"""What a source path is and what format it names: URL or local path, a local directory (its files'
census, kept per process), a glob's matches, a `save_to_disk` dataset directory, and the suffix tables.

Inferring a format reads names only (no file is opened); the errors say what the files are and how to
read them (a code tree as text, an archive to extract, an Arrow file as hf). Which files a source then
reads is pipeline.source_files.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

from pipeline.errors import PrepError

__all__ = ["FORMATS", "COMPRESSIONS", "COMPRESSION_SUFFIXES", "HF_SAVED_MARKERS", "is_url", "url_name", "local_path", "local_dir",
           "is_local_saved_dataset", "is_data_name", "format_suffixes", "dir_census", "dir_formats", "infer_format",
           "infer_source_format", "other_files_hint", "refuse_slash_after_file"]

FORMATS = ("jsonl", "csv", "tsv", "parquet", "text", "hf")
_SUFFIX_FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv",
                   ".parquet": "parquet", ".txt": "text", ".text": "text", ".md": "text"}
# compression suffix -> codec (readers.base.decompressor); bz2 and xz from the standard library, at
# their speed: on one core, 57.5 MB of JSONL decompresses in 0.07 s from .gz (ISA-L), 0.08 s from .zst,
# 0.62 s from .xz (92 MB/s) and 1.88 s from .bz2 (31 MB/s): a big .bz2 is read at ~31 MB/s whatever
# the workers, as one thread decompresses it (pipeline.spool)
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}
COMPRESSION_SUFFIXES = tuple(COMPRESSIONS)


def is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def local_path(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


HF_SAVED_MARKERS = ("state.json", "dataset_dict.json", "dataset_info.json")  # what save_to_disk writes


def is_local_saved_dataset(path: str) -> bool:
    """A local directory written by `datasets`' save_to_disk (its Arrow files are read with pyarrow
    alone: no `import datasets` in the parent or the workers)."""
    if is_url(path):
        return False
    p = Path(local_path(path)).expanduser()
    return p.is_dir() and any((p / f).exists() for f in HF_SAVED_MARKERS)


def local_dir(path: str) -> str | None:
    """`path` as a local directory (not a URL), or None. A directory named with glob characters
    (`runs/run[1]`) is that directory, as expand_files takes such a file: as a glob it matched no file
    ("cannot infer the format", "no file matches"). A glob names no existing directory: it stays a glob."""
    if is_url(path):
        return None
    d = os.path.expanduser(local_path(path))
    return d if os.path.isdir(d) else None


# a dataset directory's documentation, not its data (a hub repo's README.md, LICENSE), and the metadata
# a Hugging Face hub dataset repo keeps beside its .jsonl.gz files (dataset_infos.json): read as JSON Lines,
# it stopped a run on a snapshot directory ("the record has 'default'", no text field)
_NOT_DATA = ("readme", "license", "licence", "changelog", "citation", "dataset_infos", "dataset_info")


def _walk_files(directory: str) -> list[str]:
    # scandir's entries know their type from the directory listing (d_type): no stat per file, as
    # os.walk + os.path.isfile took (only a symbolic link is followed, by a stat)
    found, todo = [], [directory]
    while todo:
        try:
            with os.scandir(todo.pop()) as entries:
                for e in entries:
                    if e.name.startswith("."):
                        continue
                    if e.is_dir(follow_symlinks=False):  # as os.walk: no linked directories (cycles)
                        todo.append(e.path)
                    elif e.is_file() and is_data_name(e.name):
                        found.append(e.path)
        except OSError:  # unreadable or vanished, as os.walk skips it
            continue
    return sorted(found)


def is_data_name(name: str) -> bool:
    """Whether a file name in a source directory can be data: not hidden, not README/LICENSE-like."""
    return not name.startswith(".") and name.lower().split(".")[0] not in _NOT_DATA


def format_suffixes(fmt: str) -> str:
    """The suffixes of a format, for messages: ".jsonl, .json, .ndjson"."""
    return ", ".join(k for k, v in _SUFFIX_FORMATS.items() if v == fmt)


_DIR_CENSUS: dict[tuple[str, int], tuple[dict[str, str | None], dict[str, int]]] = {}


def dir_census(directory: str) -> dict[str, str | None]:
    """{file: the format its suffix names, or None} for the regular files under `directory`,
    recursively, sorted; hidden ones (a name starting with ".", or under such a directory: .git,
    .cache) and README/LICENSE-like files left out. Listed once per process while the directory's
    mtime holds: a run asks for a directory source's format ~7 times (validating, planning, the
    manifest's recipe), and 100,000 files took 0.56 s each time before this was kept."""
    return _census(directory)[0]


def dir_formats(directory: str) -> dict[str, int]:
    """Files per inferred format under a directory (files of no known format not counted); counted
    with the census (a run asks ~8 times; 0.04 s each for 100,000 files when counted every time)."""
    return dict(_census(directory)[1])


def _census(directory: str) -> tuple[dict[str, str | None], dict[str, int]]:
    key = (directory, os.stat(directory).st_mtime_ns)
    if key not in _DIR_CENSUS:
        census = _formats_by_name(_walk_files(directory))
        counts: dict[str, int] = {}
        for fmt in census.values():
            if fmt is not None:
                counts[fmt] = counts.get(fmt, 0) + 1
        _DIR_CENSUS[key] = (census, counts)
    return _DIR_CENSUS[key]


def _glob_formats(pattern: str) -> dict[str, int]:
    """Files per format (by suffix) among a local glob's matches ({} for a URL or a plain path): for a
    glob whose own suffix names none (`data/*`, `shards/part-*`). Kept per pattern and the mtime of its
    fixed directory, as a directory's census is."""
    if is_url(pattern) or not glob.has_magic(pattern):
        return {}
    local = os.path.expanduser(pattern[len("file://"):] if pattern.startswith("file://") else pattern)
    root = local
    while glob.has_magic(root):
        root = os.path.dirname(root)
    try:
        key = (local, os.stat(root or ".").st_mtime_ns)
    except OSError:
        return {}
    if key not in _GLOB_FORMATS:
        counts: dict[str, int] = {}
        for m in glob.iglob(local, recursive=True):
            if (fmt := infer_format(m, look_inside=False)) is not None:  # names only: no stat per match
                counts[fmt] = counts.get(fmt, 0) + 1
        _GLOB_FORMATS[key] = counts
    return _GLOB_FORMATS[key]


def _glob_format(pattern: str) -> str | None:
    """The one format of a local glob's matches, or None (none or several)."""
    kinds = _glob_formats(pattern)
    return next(iter(kinds)) if len(kinds) == 1 else None


_GLOB_FORMATS: dict[tuple[str, int], dict[str, int]] = {}


def _formats_by_name(files: list[str]) -> dict[str, str | None]:
    """{file: the format its suffix names}, inferred once per suffix: 100,000 files' formats took
    0.13 s one by one (lower, a compression check, splitext each). A suffix under which the format
    can differ is inferred per file: a compression suffix (x.csv.gz, y.jsonl.gz), or a dot in a
    directory's name (d.v2/file)."""
    memo: dict[str, str | None] = {}
    census: dict[str, str | None] = {}
    for f in files:
        ext = f[f.rfind("."):]
        if ext in memo:
            census[f] = memo[ext]
            continue
        census[f] = fmt = infer_format(f, look_inside=False)
        if "/" not in ext and os.sep not in ext and not ext.lower().endswith(COMPRESSION_SUFFIXES):
            memo[ext] = fmt
    return census


def infer_format(path: str, look_inside: bool = True) -> str | None:
    """The format a path's suffix names; for a local directory, the one format of the files in it
    (a save_to_disk directory: hf), None when they have several or none."""
    if look_inside and (d := local_dir(path)) is not None:
        if is_local_saved_dataset(d):
            return "hf"
        formats = dir_formats(d)
        return next(iter(formats)) if len(formats) == 1 else None
    return _SUFFIX_FORMATS.get(_data_suffix(path))


def url_name(path: str) -> str:
    """`path` less an http(s) URL's query string: a pre-signed URL (d.jsonl.gz?X-Amz-Signature=...) was
    named by its query's end, so neither its format nor its compression was known. An s3:// key may hold
    "?" itself: kept, but for s3fs's `?versionId=<id>` (an object's version in a versioned bucket), which
    left no format to infer from `d.jsonl?versionId=...`."""
    if path.startswith(("http://", "https://")):
        return path.split("?", 1)[0]
    if path.startswith(("s3://", "s3a://")) and "?versionId=" in path:
        return path[:path.rindex("?versionId=")]
    return path


def _data_suffix(path: str) -> str:
    """The lower-case suffix under a compression suffix: ".jsonl" for "x.JSONL.gz"."""
    p = (url_name(path) if "?" in path else path).lower()
    if p.endswith(COMPRESSION_SUFFIXES):  # one C call: this runs once per file of a directory
        p = p[:p.rfind(".")]
    return os.path.splitext(p)[1]


# suffixes of files prep does not read, with what to do instead (infer_source_format's error)
_ARCHIVES = (".zip", ".tar", ".tgz", ".7z", ".rar")
_OTHER_COMPRESSIONS = (".lz4", ".br", ".lzma", ".z", ".lzo", ".sz")


def _suffix_globs(directory: str) -> list[str]:
    """A glob per suffix of the files under a directory (their folder/*.suffix), in listing order."""
    globs: dict[str, None] = {}
    for f in dir_census(directory):
        globs.setdefault(os.path.join(os.path.dirname(f), "*" + os.path.splitext(f)[1]), None)
    return list(globs)


def other_files_hint(directory: str, format_set: bool = False) -> str:
    """For a directory whose files prep cannot name a format for (a code tree: .py, .c): their most
    common suffixes, and the glob that reads one suffix as text, a document per file; "" for none."""
    counts: dict[str, int] = {}
    for f, kind in dir_census(directory).items():
        if kind is None and (ext := _data_suffix(f)):
            counts[ext] = counts.get(ext, 0) + 1
    if not counts:
        return ""
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    listed = ", ".join(f"{n:,} {ext}" for ext, n in top[:3]) + (" ..." if len(top) > 3 else "")
    glob_ = os.path.join(directory, "**", "*" + top[0][0])
    plural = "s" if sum(counts.values()) > 1 else ""
    return (f"it holds {listed} file{plural}; to read each as one document, set "
            + ("" if format_set else "source.format: text and ") + f"source.path: {glob_!r}")


def _unread_suffix_hint(path: str) -> str:
    """What to do with a path whose suffix names an archive, a compression prep does not read, or a
    Hugging Face datasets Arrow file; "" for any other."""
    ext = _data_suffix(path)
    if ext in _ARCHIVES:
        return f"a {ext} archive is not read: extract it and point source.path at the files"
    if ext in _OTHER_COMPRESSIONS:
        return (f"{ext} compression is not read (.gz, .zst, .bz2 and .xz are): decompress it, or recompress "
                "it as .zst, and point source.path at that")
    if ext == ".arrow":
        return ("an Arrow file (as Hugging Face datasets caches them) is read with source.format: hf, "
                f"source.path: arrow and source.data_files: {path!r}")
    return ""


def refuse_slash_after_file(path: str) -> None:
    """PrepError for a local path that names a file with a "/" after it (`corpus.jsonl/`, a shell's
    completion of a directory habit): no file matches it and its suffix names no format, and the
    errors said so with a hint to run prep from the directory it was run from (elsewhere_hint)."""
    if is_url(path) or not path.endswith(("/", os.sep)):
        return
    file = os.path.expanduser(local_path(path)).rstrip("/" + os.sep)
    if file and os.path.isfile(file):
        raise PrepError(f"source.path: {path!r} names a file but ends in '/'; remove the '/' ({path.rstrip('/' + os.sep)!r})")


def infer_source_format(path: str | list[str]) -> str:
    """The one format a source's path (or list of paths) names, or a PrepError saying why there is
    none: a directory or glob of several formats or of none prep reads, paths of several formats, a
    suffix that names none (SourceConfig.resolved_format, when source.format is not set)."""
    paths = [path] if isinstance(path, str) else list(path)
    fmts = {infer_format(p) or _glob_format(p) for p in paths}
    if len(fmts) != 1 or None in fmts:
        for p in paths:
            refuse_slash_after_file(p)
            if is_url(p) and p.endswith("/"):
                raise PrepError(f"source.path: {p!r} is a directory URL; set source.format to the format of "
                                f"the files to read under it ({', '.join(FORMATS[:-1])})")
            if (d := local_dir(p)) is not None and len(found := dir_formats(d)) != 1:
                kinds = ", ".join(f"{n} {fmt}" for fmt, n in sorted(found.items())) or "no file of a known format"
                # files of a suffix prep does not read (a datasets cache's .arrow, archives): what to do
                unread = "" if found else next((h for h in map(_unread_suffix_hint, _suffix_globs(d)) if h), "")
                other = "" if found or unread else other_files_hint(d)
                raise PrepError(f"source.path: {p!r} is a directory holding {kinds}; "
                                + (f"its files: {unread}" if unread else other or
                                   f"set source.format to read one kind, or give a glob such as "
                                   f"{os.path.join(p, '*.jsonl')!r}"))
            if (kinds := _glob_formats(p)) and len(kinds) > 1:
                listed = ", ".join(f"{n} {fmt}" for fmt, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
                raise PrepError(f"source.path: {p!r} matches files of several formats ({listed}); a source reads "
                                "one: narrow the glob, or give one source per format under sources:")
        if len(fmts - {None}) > 1:
            named = ", ".join(f"{p} ({infer_format(p) or _glob_format(p) or 'unknown'})" for p in paths)
            raise PrepError(f"source.path: the paths are of several formats: {named}; a source reads one: "
                            "give each format its own entry under sources:")
        hint = next((h for h in map(_unread_suffix_hint, paths) if h), "")
        raise PrepError(f"source.format: cannot infer the format of {path!r} from its suffix; "
                        + (hint or f"set source.format to one of {', '.join(FORMATS)}"))
    return fmts.pop()
