"""Recipes: YAML -> frozen, validated dataclasses.

Everything a run needs is checked here, before any work starts: unknown keys (with the closest valid
name), wrong types, bad choices, missing input files. `Recipe.content_dict()` is the part of the
recipe that determines the output bytes; it is stored in the manifest and compared on resume.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import re
import stat
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Union

from pipeline.errors import PrepError, closest

__all__ = ["SourceConfig", "TokenizerConfig", "OutputConfig", "Recipe", "apply_overrides", "FORMATS",
           "infer_format", "is_url", "elsewhere_hint"]

FORMATS = ("jsonl", "csv", "tsv", "parquet", "text", "hf")
_SUFFIX_FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv",
                   ".parquet": "parquet", ".txt": "text", ".text": "text", ".md": "text"}
# compression suffix -> codec (readers.base.decompressor); bz2 and xz from the standard library, at
# their speed: on one core, 57.5 MB of JSONL decompresses in 0.07 s from .gz (ISA-L), 0.08 s from .zst,
# 0.62 s from .xz (92 MB/s) and 1.88 s from .bz2 (31 MB/s): a big .bz2 is read at ~31 MB/s whatever
# the workers, as one thread decompresses it (pipeline.spool)
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}
COMPRESSION_SUFFIXES = tuple(COMPRESSIONS)
log = logging.getLogger("prep")


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


# a dataset directory's documentation, not its data (a hub repo's README.md, LICENSE)
_NOT_DATA = ("readme", "license", "licence", "changelog", "citation")


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
                    elif e.is_file() and _data_name(e.name):
                        found.append(e.path)
        except OSError:  # unreadable or vanished, as os.walk skips it
            continue
    return sorted(found)


def _data_name(name: str) -> bool:
    """Whether a file name in a source directory can be data: not hidden, not README/LICENSE-like."""
    return not name.startswith(".") and name.lower().split(".")[0] not in _NOT_DATA


def _suffixes(fmt: str) -> str:
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


def _data_suffix(path: str) -> str:
    """The lower-case suffix under a compression suffix: ".jsonl" for "x.JSONL.gz"."""
    p = path.lower()
    if p.endswith(COMPRESSION_SUFFIXES):  # one C call: this runs once per file of a directory
        p = p[:p.rfind(".")]
    return os.path.splitext(p)[1]


# suffixes of files prep does not read, with what to do instead (resolved_format's error)
_ARCHIVES = (".zip", ".tar", ".tgz", ".7z", ".rar")
_OTHER_COMPRESSIONS = (".lz4", ".br", ".lzma", ".z", ".lzo", ".sz")


def _suffix_globs(directory: str) -> list[str]:
    """A glob per suffix of the files under a directory (their folder/*.suffix), in listing order."""
    globs: dict[str, None] = {}
    for f in dir_census(directory):
        globs.setdefault(os.path.join(os.path.dirname(f), "*" + os.path.splitext(f)[1]), None)
    return list(globs)


def _other_files_hint(directory: str, format_set: bool = False) -> str:
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


@dataclass(frozen=True, kw_only=True)
class SourceConfig:
    """One input: files (or a Hugging Face dataset) and how to get each document's text."""

    path: str | list[str]
    """A path, glob, fsspec URL (globs allowed where the filesystem lists), or a list of these;
    for `hf`: a hub id, a `save_to_disk` directory, or a `datasets` builder name (json, parquet, csv)."""
    format: str | None = None
    """jsonl | csv | tsv | parquet | text | hf; inferred from the file suffix when omitted."""
    text_field: str = "text"
    """Dotted key (`meta.body`) for JSONL/HF, column name for CSV/TSV/Parquet (dotted into a struct)."""
    text_template: str | None = None
    """Instead of text_field: a Python format string over fields, e.g. "{title}\\n\\n{text}"."""
    records_field: str | None = None
    """jsonl only: every file is one JSON object whose records are the list under this dotted key
    (`{"version": 1, "data": [{"text": ...}, ...]}`: `data`), as `datasets.load_dataset("json",
    field=...)`. Each file is then read whole, as one unit."""
    delimiter: str | None = None
    """csv or tsv: the field delimiter, one character (`;` for the CSV that Excel writes where the decimal
    mark is a comma, `|`, or any other: `§`, `│`); None: `,` for csv, a tab for tsv."""
    columns: list[str] | None = None
    """csv or tsv without a header row (Tatoeba's sentences file, a `psql` export): the names of its
    columns, in order; the first row is then data. None: the first row is the header."""
    quoting: Literal["csv", "none"] = "csv"
    """csv or tsv: `csv` reads `"`-quoted fields (which may hold delimiters and newlines, `""` a quote), as
    pandas and pyarrow do; `none` takes every `"` as text and every line as a row, as a TSV from `cut`,
    `psql` or a sentence corpus (Tatoeba) is written: CSV quoting would drop the quotes of a field that
    starts with one (`"Hi," she said.`) and join the lines up to the next quote."""
    min_chars: int = 0
    """Drop documents with fewer characters (after the template); counted as `too_short`."""
    max_chars: int | None = None
    """Drop documents with more characters; counted as `too_long`. None: no limit."""
    encoding_errors: Literal["skip", "replace"] = "skip"
    """Invalid UTF-8 in a record: skip it as a bad record (`invalid_utf8`), or replace the bad bytes with U+FFFD."""
    max_record_bytes: int | None = 64 << 20
    """A record (line, CSV row, text document, Parquet/HF text) larger than this is a bad record
    (`record_too_large`); it is never held whole in memory by the line readers. None: no limit."""
    doc_separator: str | None = None
    """text only: None = one document per file; otherwise split files on this string ("\\n" = per line)."""
    name: str | None = None
    """hf only: the dataset configuration name (`load_dataset(path, name)`)."""
    split: str | None = None
    """hf only: the split to read (default `train`). A directory of one saved Dataset (not a
    DatasetDict) has no splits: only the one it records being saved from (`train` if none) is accepted."""
    streaming: bool = False
    """hf only: stream the dataset (never downloaded whole); work is sharded by the dataset's own shards."""
    data_files: str | list[str] | None = None
    """hf only: data files for a builder (`path: json` with `data_files: data/*.jsonl`)."""
    storage_options: dict = field(default_factory=dict)
    """fsspec options for URLs (e.g. `endpoint_url`, `key`, `secret`, `anon`); never stored in the manifest."""

    def paths(self) -> list[str]:
        return [self.path] if isinstance(self.path, str) else list(self.path)

    def resolved_format(self) -> str:
        if self.format:
            return self.format
        fmts = {infer_format(p) or _glob_format(p) for p in self.paths()}
        if len(fmts) != 1 or None in fmts:
            for p in self.paths():
                _refuse_slash_after_file(p)
                if is_url(p) and p.endswith("/"):
                    raise PrepError(f"source.path: {p!r} is a directory URL; set source.format to the format of "
                                    f"the files to read under it ({', '.join(FORMATS[:-1])})")
                if (d := local_dir(p)) is not None and len(found := dir_formats(d)) != 1:
                    kinds = ", ".join(f"{n} {fmt}" for fmt, n in sorted(found.items())) or "no file of a known format"
                    # files of a suffix prep does not read (a datasets cache's .arrow, archives): what to do
                    unread = "" if found else next((h for h in map(_unread_suffix_hint, _suffix_globs(d)) if h), "")
                    other = "" if found or unread else _other_files_hint(d)
                    raise PrepError(f"source.path: {p!r} is a directory holding {kinds}; "
                                    + (f"its files: {unread}" if unread else other or
                                       f"set source.format to read one kind, or give a glob such as "
                                       f"{os.path.join(p, '*.jsonl')!r}"))
                if (kinds := _glob_formats(p)) and len(kinds) > 1:
                    listed = ", ".join(f"{n} {fmt}" for fmt, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
                    raise PrepError(f"source.path: {p!r} matches files of several formats ({listed}); a source reads "
                                    "one: narrow the glob, or give one source per format under sources:")
            if len(fmts - {None}) > 1:
                named = ", ".join(f"{p} ({infer_format(p) or _glob_format(p) or 'unknown'})" for p in self.paths())
                raise PrepError(f"source.path: the paths are of several formats: {named}; a source reads one: "
                                "give each format its own entry under sources:")
            hint = next((h for h in map(_unread_suffix_hint, self.paths()) if h), "")
            raise PrepError(f"source.format: cannot infer the format of {self.path!r} from its suffix; "
                            + (hint or f"set source.format to one of {', '.join(FORMATS)}"))
        return fmts.pop()

    def validate(self, where: str = "source") -> None:
        fmt = self.resolved_format()
        if fmt not in FORMATS:
            raise PrepError(f"{where}.format: {fmt!r} is not one of {', '.join(FORMATS)}{closest(fmt, FORMATS)}")
        if self.min_chars < 0:
            raise PrepError(f"{where}.min_chars: must be >= 0, got {self.min_chars}")
        if self.max_chars is not None and self.max_chars < max(self.min_chars, 1):
            raise PrepError(f"{where}.max_chars: must be >= min_chars ({self.min_chars}) and >= 1, "
                            f"got {self.max_chars}")
        if self.max_record_bytes is not None and self.max_record_bytes < 1:
            raise PrepError(f"{where}.max_record_bytes: must be positive or null, got {self.max_record_bytes}")
        if self.doc_separator is not None and (fmt != "text" or self.doc_separator == ""):
            raise PrepError(f"{where}.doc_separator: only for format text, and not empty (got {self.doc_separator!r} "
                            f"for format {fmt})")
        if self.delimiter is not None and (fmt not in ("csv", "tsv") or len(self.delimiter) != 1
                                           or self.delimiter in '"\r\n'):
            raise PrepError(f"{where}.delimiter: only for format csv or tsv, one character other than a quote or a "
                            f"line end, such as ';' or '|' (got {self.delimiter!r} for format {fmt})")
        if self.delimiter is not None and "\ud800" <= self.delimiter <= "\udfff":
            # a byte that was not UTF-8 in --set (Python keeps it as a lone surrogate), e.g. `§` typed in Latin-1:
            # no UTF-8 text holds one, and the reader could not look for it
            raise PrepError(f"{where}.delimiter: {self.delimiter!r} is a lone surrogate, not a character of UTF-8 "
                            "text (a byte that was not UTF-8 on the command line?); give the character itself in "
                            "UTF-8, such as '§' or '│'")
        if self.columns is not None and (fmt not in ("csv", "tsv") or not self.columns
                                         or not all(isinstance(c, str) and c for c in self.columns)
                                         or len(set(self.columns)) != len(self.columns)):
            raise PrepError(f"{where}.columns: only for format csv or tsv without a header row, a list of distinct "
                            f"column names such as [id, lang, text] (got {self.columns!r} for format {fmt})")
        if self.quoting != "csv" and fmt not in ("csv", "tsv"):
            raise PrepError(f"{where}.quoting: only for format csv or tsv (this source is {fmt}); remove it")
        if self.records_field is not None and (fmt != "jsonl" or not self.records_field.strip(".")):
            raise PrepError(f"{where}.records_field: only for format jsonl, a dotted key such as `data` (got "
                            f"{self.records_field!r} for format {fmt})")
        if self.text_template is not None:
            if fmt == "text":
                raise PrepError(f"{where}.text_template: format text has no fields; remove text_template")
            from pipeline.filters import parse_template
            parse_template(self.text_template, f"{where}.text_template")
        hf_only = {"name": self.name, "split": self.split, "data_files": self.data_files,
                   "streaming": self.streaming or None}
        for key, value in hf_only.items():
            if value is not None and fmt != "hf":
                raise PrepError(f"{where}.{key}: only for format hf (this source is {fmt}); remove it")
        if fmt == "hf" and not isinstance(self.path, str):
            raise PrepError(f"{where}.path: format hf takes one dataset (a hub id, a saved directory or a builder "
                            "name); put files in data_files, or give several sources")

    def expand_files(self, seen: tuple[dict[str, int], dict] | None = None) -> list[str]:
        """Sorted files matched by each path/glob, in the order the paths are listed, each once (where
        its first path puts it); with `seen` (readers.base.planning_sizes: sizes, stamps), each local
        match's size and mtime are recorded there (one stat() per file tells all three)."""
        sizes, stamps = seen if seen is not None else (None, None)
        files: list[str] = []
        for p in self.paths():
            if is_url(p):
                files.extend(_expand_url(p, self.storage_options, self))
                continue
            local = p[len("file://"):] if p.startswith("file://") else p
            if (d := local_dir(p)) is not None:  # a directory: its files of this source's format
                fmt = self.resolved_format()
                matches = [f for f, kind in dir_census(d).items() if kind == fmt]
                if not matches:
                    other = _other_files_hint(d, format_set=True) if fmt == "text" else ""
                    raise PrepError(f"source.path: the directory {p!r} holds no {fmt} file (suffixes "
                                    f"{_suffixes(fmt)}, compressed "
                                    "or not); " + (other or "fix the path or source.format"))
                if sizes is not None:
                    for f in matches:
                        st = os.stat(f)
                        sizes[f], stamps[f] = st.st_size, st.st_mtime_ns
                files.extend(matches)
                continue
            matches = []
            literal = os.path.expanduser(local)
            # a file named with glob characters ("data[1].jsonl") is that file: as a pattern it matched
            # nothing, or another file ("data1.jsonl"), read silently in its place
            exact = any(c in literal for c in "*?[") and os.path.isfile(literal)
            for m in [literal] if exact else sorted(glob.glob(literal, recursive=True)):
                try:
                    st = os.stat(m)
                except OSError:  # vanished since the listing, or a broken link: not a file
                    continue
                if stat.S_ISREG(st.st_mode):
                    matches.append(m)
                    if sizes is not None:
                        sizes[m], stamps[m] = st.st_size, st.st_mtime_ns
            if not matches:
                _refuse_slash_after_file(p)
                raise PrepError(f"source.path: no file matches {p!r} (relative paths resolve against "
                                f"the current directory {os.getcwd()}); fix the path or glob")
            files.extend(matches)
        return _each_once(files, self.path) if len(self.paths()) > 1 else files  # one path lists a file once


# the repeats already warned of in this process: a run lists its sources' files more than once
_REPEATS_WARNED: set[tuple[str, ...]] = set()


def _each_once(files: list[str], path) -> list[str]:
    """`files` with every file after its first place left out (a file and a glob matching it, or two
    overlapping globs: [part0.jsonl, part*.jsonl] read part0 twice, its documents twice in the dataset),
    and a warning naming them. A file under two sources is read by each: an upsampling, say."""
    seen: set[str] = set()
    kept: list[str] = []
    repeats: dict[str, None] = {}
    cwd = os.getcwd()  # once: abspath asks for it per file
    for f in files:  # `d/./a.jsonl` and `d/a.jsonl` are one file; links and hard links are left as given
        key = f if is_url(f) else os.path.normpath(os.path.join(cwd, os.path.expanduser(local_path(f))))
        if key in seen:
            repeats[f] = None
        else:
            seen.add(key)
            kept.append(f)
    if repeats and tuple(repeats) not in _REPEATS_WARNED:
        _REPEATS_WARNED.add(tuple(repeats))
        names = list(repeats)
        listed = ", ".join(names[:5]) + (f" and {len(names) - 5:,} more" if len(names) > 5 else "")
        log.warning("source.path %s: %s %s matched by more than one of its paths; read once, where first listed",
                    path, listed, "is" if len(names) == 1 else "are")
    return kept


def _refuse_slash_after_file(path: str) -> None:
    """PrepError for a local path that names a file with a "/" after it (`corpus.jsonl/`, a shell's
    completion of a directory habit): no file matches it and its suffix names no format, and the
    errors said so with a hint to run prep from the directory it was run from (elsewhere_hint)."""
    if is_url(path) or not path.endswith(("/", os.sep)):
        return
    file = os.path.expanduser(local_path(path)).rstrip("/" + os.sep)
    if file and os.path.isfile(file):
        raise PrepError(f"source.path: {path!r} names a file but ends in '/'; remove the '/' ({path.rstrip('/' + os.sep)!r})")


def _url_dir_files(url: str, storage_options: dict, fmt: str) -> list[str]:
    """The files under a directory URL (`s3://bucket/prefix/`), recursively, of format `fmt`; hidden and
    README/LICENSE-like names left out, as in a local directory."""
    import fsspec
    try:
        fs, root = fsspec.core.url_to_fs(url, **storage_options)
        found = sorted(fs.find(root))
    except Exception as e:  # network, credentials, a filesystem that cannot list (https)
        raise PrepError(f"source.path: cannot list {url!r} ({type(e).__name__}: {e}); check the URL and "
                        "source.storage_options, or list the files explicitly") from None

    def data(path: str) -> bool:
        rel = path[len(root.rstrip("/")) + 1:] if path.startswith(root.rstrip("/")) else path
        names = rel.split("/")
        return (not any(n.startswith(".") for n in names[:-1]) and _data_name(names[-1])
                and infer_format(names[-1], look_inside=False) == fmt)
    matches = [fs.unstrip_protocol(f) for f in found if data(f)]
    if not matches:
        raise PrepError(f"source.path: {url!r} holds no {fmt} file (suffixes "
                        f"{_suffixes(fmt)}, compressed or not); "
                        "fix the URL or source.format")
    return matches


def _expand_url(url: str, storage_options: dict, source: SourceConfig) -> list[str]:
    """A URL without glob characters as is (checked when opened), or, one ending in "/", the files
    under that prefix of the source's format (as for a local directory); a glob listed through fsspec."""
    if url.endswith("/") and not any(c in url.split("://", 1)[1] for c in "*?["):
        return _url_dir_files(url, storage_options, source.resolved_format())
    if not any(c in url.split("://", 1)[1] for c in "*?["):
        return [url]
    import fsspec
    try:
        fs, pattern = fsspec.core.url_to_fs(url, **storage_options)
        if fs.isfile(pattern):  # an object named with glob characters is that object (see expand_files)
            return [url]
        matches = sorted(m for m in fs.glob(pattern) if fs.isfile(m))
    except Exception as e:  # network, credentials, unsupported listing (https)
        raise PrepError(f"source.path: cannot list {url!r} ({type(e).__name__}: {e}); check the URL and "
                        "source.storage_options, or list the files explicitly") from None
    if not matches:
        raise PrepError(f"source.path: no file matches {url!r}; fix the URL or glob")
    return [fs.unstrip_protocol(m) for m in matches]


@dataclass(frozen=True, kw_only=True)
class TokenizerConfig:
    """Which tokenizer encodes the documents and which boundary tokens separate them."""

    path: str
    """A tokenizer.json path (or a directory holding one), a Hugging Face hub id, or `tiktoken:<encoding>`."""
    boundary: Literal["eos", "bos", "both", "none"] = "eos"
    """Which of the tokenizer's own ids mark document boundaries: eos appended, bos prepended, both, none."""
    backend: Literal["auto", "hf", "tiktoken"] = "auto"
    """Encoding engine; `auto` picks the fastest one proven to give identical ids."""
    eos_token: str | None = None
    """EOS token string, when it cannot be found in the tokenizer's own config."""
    bos_token: str | None = None
    """BOS token string, when it cannot be found in the tokenizer's own config."""


@dataclass(frozen=True, kw_only=True)
class OutputConfig:
    """Where shards go and how they are cut and split."""

    dir: str
    """Output directory, or an fsspec URL (`s3://bucket/prefix`): then the run writes to `local_dir`
    and uploads each finished shard, `rejects.jsonl`, and `manifest.json` last."""
    shard_tokens: int = 100_000_000
    """Most tokens per shard (documents are never split; a longer document gets a shard of its own)."""
    val_fraction: float = 0.0005
    """Fraction of documents routed to the `val` split by a stable hash of (seed, source, position)."""
    seed: int = 2357
    """Seed of the train/val hash: any integer (taken modulo 2^64)."""
    storage_options: dict = field(default_factory=dict)
    """fsspec options for a URL `dir` (e.g. `endpoint_url`, `key`, `secret`); never stored in the manifest."""
    local_dir: str | None = None
    """Local staging directory for a URL `dir` (default: ~/.cache/prep/staging/<name>-<hash of the URL>)."""


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """A whole tokenization job."""

    name: str
    """Dataset name, recorded in the manifest."""
    sources: tuple[SourceConfig, ...]
    """Inputs, in dataset order (YAML: `source:` for one, or `sources:` for a list)."""
    tokenizer: TokenizerConfig
    output: OutputConfig
    num_workers: int | Literal["auto"] = "auto"
    """Worker processes; `auto` = one per CPU core. Output bytes do not depend on it."""
    on_bad_record: Literal["skip", "error"] = "skip"
    """skip: count it in the manifest and list it in DIR/rejects.jsonl; error: stop the run."""
    max_bad_records: int | None = None
    """With `skip`, stop the run once more records than this were rejected (None: no limit)."""
    dedup: Literal["none", "exact"] = "none"
    """exact: drop every document whose text equals an earlier one (dataset order, across sources and
    splits); counted as `duplicate`. Costs ~42 bytes of parent memory per document at finalize."""
    unit_bytes: int | Literal["auto"] = "auto"
    """Input bytes per work unit (big files are cut at line boundaries): resume and balance granularity.
    auto: 16 MiB, smaller for inputs under 512 MiB (at least 2 MiB; see readers.auto_unit_bytes)."""
    batch_docs: int = 512
    """Documents encoded per tokenizer call inside a worker (8x where gigatoken or tiktoken joins short documents
    into one call: pipeline/joined.py)."""
    source_file: str | None = field(default=None, compare=False)
    """Where the recipe was read from (not a YAML key)."""

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def from_yaml(cls, path: str | os.PathLike, overrides: list[str] = (), output_dir: str | None = None,
                  validate: bool = True) -> Recipe:
        """The recipe in a YAML file, with `--set` overrides; `output_dir` (--output) stands for
        output.dir, so a recipe may leave it out. `validate=False` skips the checks that look at the
        input (a directory's census: ~0.3 s for 100,000 files), for a first look at the recipe."""
        import yaml  # here, not at module level: workers (and the forkserver) never read YAML (17 ms)
        path = Path(path)
        if path.is_dir():
            inside = sorted(p.name for p in path.glob("*.y*ml"))[:3]
            raise PrepError(f"--recipe: {path} is a directory; give the recipe file"
                            + (f" in it ({', '.join(inside)})" if inside else " (a .yaml file)"))
        if not path.is_file():
            raise PrepError(f"--recipe: {path} does not exist")
        try:
            # UTF-8 whatever the locale (YAML's own encoding); a Latin-1 comment was a UnicodeDecodeError traceback
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            line = e.object.count(b"\n", 0, e.start) + 1
            raise PrepError(f"{path}: byte {e.object[e.start]:#04x} at offset {e.start} (line {line}) is not UTF-8; "
                            f"save the recipe as UTF-8 (from Latin-1: iconv -f latin1 -t utf-8 {path} > utf8.yaml)") from None
        except OSError as e:  # unreadable (permissions)
            raise PrepError(f"--recipe: cannot read {path} ({e.strerror or e})") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise PrepError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise PrepError(f"{path}: a recipe is a mapping of keys (name, source, tokenizer, output)")
        data = apply_overrides(data, overrides)
        if output_dir is not None and isinstance(data.get("output") or {}, dict):
            data["output"] = {**(data.get("output") or {}), "dir": output_dir}
        return cls.from_dict(data, where=str(path), source_file=str(path), validate=validate)

    @classmethod
    def from_dict(cls, data: dict, where: str = "recipe", source_file: str | None = None,
                  validate: bool = True) -> Recipe:
        data = dict(data)
        if "sources" in data and not isinstance(data["sources"], list):
            # before "not both": `--set sources=null` beside `source:` was told to give only one of them
            got = "null" if data["sources"] is None else f"{type(data['sources']).__name__} {data['sources']!r}"
            raise PrepError(f"{where}: `sources:` must be a list of sources, such as [{{path: a.jsonl}}, {{path: "
                            f"b.csv}}], got {got}" + ("; or leave it out to read `source:`" if "source" in data else ""))
        if "source" in data and "sources" in data:
            raise PrepError(f"{where}: give either `source:` or `sources:`, not both")
        if "source" in data:
            data["sources"] = [data.pop("source")]
        if not data.get("sources"):
            raise PrepError(f"{where}: missing `source:` (the input files)")
        raw_sources = data.pop("sources")
        sources = tuple(_build(SourceConfig, s, f"sources[{i}]" if len(raw_sources) > 1 else "source")
                        for i, s in enumerate(raw_sources))
        for key, sub in (("tokenizer", TokenizerConfig), ("output", OutputConfig)):
            if key not in data:
                raise PrepError(f"{where}: missing `{key}:` section")
            data[key] = _build(sub, data[key], key)
        recipe = _build(cls, {**data, "sources": sources}, "", source_file=source_file)
        if validate:
            recipe.validate()
        return recipe

    def validate(self) -> None:
        o = self.output
        if o.shard_tokens <= 0:
            raise PrepError(f"output.shard_tokens: must be positive, got {o.shard_tokens}")
        if not 0.0 <= o.val_fraction < 1.0:
            raise PrepError(f"output.val_fraction: must be in [0, 1), got {o.val_fraction}")
        if isinstance(self.num_workers, int) and self.num_workers < 1:
            raise PrepError(f"num_workers: must be >= 1 or `auto`, got {self.num_workers}")
        if self.unit_bytes != "auto" and self.unit_bytes < 1 << 16:
            raise PrepError(f"unit_bytes: must be at least 65536, got {self.unit_bytes}")
        if self.batch_docs < 1:
            raise PrepError(f"batch_docs: must be >= 1, got {self.batch_docs}")
        if self.max_bad_records is not None and self.max_bad_records < 0:
            raise PrepError(f"max_bad_records: must be >= 0 or null, got {self.max_bad_records}")
        try:
            for i, s in enumerate(self.sources):
                s.validate(f"sources[{i}]" if len(self.sources) > 1 else "source")
        except PrepError as e:
            raise self.with_path_hint(e) from None

    def with_path_hint(self, error: PrepError) -> PrepError:
        """`error`, told where a relative path it names is, when that path is missing from the working
        directory but found from the recipe's (see elsewhere_hint)."""
        msg = str(error)
        paths = [self.tokenizer.path] + [p for s in self.sources for p in ([s.path] if isinstance(s.path, str) else s.path)]
        hint = next(filter(None, (elsewhere_hint(p, self.source_file) for p in paths if p in msg)), "")
        if not hint:
            return error
        said = f" (relative paths resolve against the current directory {os.getcwd()})"
        msg = msg.replace(said, hint).replace(hint + "; fix the path or glob", hint) if said in msg else msg + hint
        return PrepError(msg)

    # -- derived ---------------------------------------------------------------------------------
    def resolved_num_workers(self) -> int:
        return os.cpu_count() or 1 if self.num_workers == "auto" else int(self.num_workers)

    def content_dict(self) -> dict:
        """The recipe fields that decide the output bytes (not the output dir or the worker count)."""
        d = dataclasses.asdict(self)
        for run_only in ("num_workers", "source_file", "batch_docs"):
            d.pop(run_only)
        for run_only in ("dir", "storage_options", "local_dir"):  # where it goes, and credentials
            d["output"].pop(run_only)
        d["sources"] = [dict(s, format=SourceConfig(**s).resolved_format()) for s in d["sources"]]
        for s in d["sources"]:
            s.pop("storage_options")  # may hold credentials; never written to the manifest
            # a key added after datasets were made drops out at its default, so those datasets and
            # unfinished runs still match their recipe
            for added, default in (("records_field", None), ("delimiter", None), ("quoting", "csv"),
                                   ("columns", None)):
                if s[added] == default:
                    s.pop(added)
        # every backend is proven to give the same ids, so switching it resumes a run; the manifest's
        # tokenizer entry still records which engine ran
        d["tokenizer"].pop("backend")
        return d


# -- generic YAML -> dataclass with checks --------------------------------------------------------

# what a missing required key is for, in its error ("name: required key is missing" alone left
# users to guess what value it takes)
_REQUIRED_HINTS = {
    "name": " (the dataset's name, recorded in its manifest: add `name: my-corpus` at the top)",
    "source.path": " (the input: a file, glob, directory or fsspec URL, or for format hf a dataset id)",
    "tokenizer.path": " (a tokenizer.json file or its directory, a hub id such as gpt2, or tiktoken:<encoding>)",
    "output.dir": " (the directory the dataset is written to; --output DIR sets it too)",
}


def elsewhere_hint(path: str, recipe_file: str | None) -> str:
    """For a relative local path that is missing: where it is, found from the recipe's directory or
    one of its 3 nearest parents (the demo recipe's `recipes/demo/corpus.jsonl` is relative to the
    repository, the recipe's parent), and what to do. Relative paths stay relative to the working
    directory, as for every command-line tool and `--set`; a recipe run from elsewhere gets the fix."""
    if not recipe_file or not path or os.path.isabs(os.path.expanduser(path)) or is_url(path):
        return ""
    if glob.glob(path, recursive=True) if glob.has_magic(path) else os.path.exists(path):
        return ""  # there from here: the error is about something else
    base = Path(recipe_file).resolve().parent
    for _ in range(4):
        # joined as text, as `path` was looked for above: Path() drops a trailing "/", so `corpus.jsonl/`
        # was found beside the recipe, and the hint said to run prep from where it was run
        candidate = os.path.join(base, path)
        if glob.glob(candidate, recursive=True) if glob.has_magic(path) else os.path.exists(candidate):
            found = "matches files" if glob.has_magic(path) else "exists"
            return (f" ({Path(candidate)} {found}: relative paths resolve against the current directory "
                    f"{os.getcwd()}, not the recipe's; run prep from {base}, or give that path)")
        if base.parent == base:
            break
        base = base.parent
    return ""


def _build(cls, data, where: str, **extra):
    label = where or "recipe"
    if isinstance(data, str) and cls is SourceConfig:
        data = {"path": data}
    if isinstance(data, str) and cls is TokenizerConfig:
        data = {"path": data}
    if not isinstance(data, dict):
        raise PrepError(f"{label}: expected a mapping of keys, got {type(data).__name__} {data!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in extra]
    for key in data:
        if key not in names:
            dotted = f"{where}.{key}" if where else key
            raise PrepError(f"{dotted}: unknown key{closest(key, names)}; valid keys here: {', '.join(names)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in extra:
            continue
        dotted = f"{where}.{f.name}" if where else f.name
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                hint = _REQUIRED_HINTS.get(re.sub(r"^sources\[\d+\]", "source", dotted), "")
                raise PrepError(f"{dotted}: required key is missing{hint}")
            continue
        kwargs[f.name] = _check(data[f.name], hints[f.name], dotted)
    return cls(**kwargs, **extra)


# a number in exponent form that YAML 1.1 (PyYAML) reads as a string: it takes a float only with a dot
# and a signed exponent (1.0e+8), so `shard_tokens: 1e8` (and 1.5e9, 5e-4) was "expected an integer, got str"
_EXPONENT = re.compile(r"[-+]?(\d[\d_]*(\.[\d_]*)?|\.\d[\d_]*)[eE][-+]?\d+")


def _check(value, tp, dotted: str):
    """Check `value` against a type hint; return it (lists become tuples of configs where needed)."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        errors = []
        for arm in typing.get_args(tp):
            try:
                return _check(value, arm, dotted)
            except PrepError as e:
                errors.append(e)
        raise PrepError(f"{dotted}: {value!r} is not {_describe(tp)}")
    if origin is Literal:
        if value not in typing.get_args(tp):
            choices = [str(c) for c in typing.get_args(tp)]
            raise PrepError(f"{dotted}: {value!r} is not one of {', '.join(choices)}{closest(str(value), choices)}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise PrepError(f"{dotted}: expected a list, got {value!r}")
        (arm, *_) = typing.get_args(tp)
        return type(value)(_check(v, arm, f"{dotted}[{i}]") for i, v in enumerate(value))
    if tp is type(None):
        if value is not None:
            raise PrepError(f"{dotted}: expected nothing (null), got {value!r}")
        return None
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        raise PrepError(f"{dotted}: expected a mapping, got {value!r}")
    if tp in (int, float) and isinstance(value, str) and _EXPONENT.fullmatch(value):
        try:
            value = float(value)  # then an integer below where it is whole: 1e8, 1.5e9
        except ValueError:  # misplaced underscores (1__0e3): the error below, about the text
            pass
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, float) and value.is_integer():
        return int(value)  # 1.0e+8 in YAML is a float, 1e8 a string (converted above)
    if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
        raise PrepError(f"{dotted}: expected {_describe(tp)}, got {type(value).__name__} {value!r}")
    return value


def _describe(tp) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if origin is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(tp)))
    if origin in (list, tuple):
        return f"a list of {_describe(typing.get_args(tp)[0])}"
    return {str: "a string", int: "an integer", float: "a number", bool: "true/false",
            type(None): "null", dict: "a mapping"}.get(tp, getattr(tp, "__name__", str(tp)))


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply `--set key.sub=value` (value parsed as YAML) to the raw recipe mapping."""
    import yaml
    data = yaml.safe_load(yaml.safe_dump(data))  # deep copy
    for item in overrides or ():
        if "=" not in item:
            raise PrepError(f"--set {item!r}: expected key=value, for example --set output.dir=out/x")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        parts = key.strip().split(".")
        if parts[0] == "source" and "sources" in data:
            parts[0:1] = ["sources", "0"]
        node = data
        for i, part in enumerate(parts[:-1]):
            if isinstance(node, list):
                node = node[_list_index(node, part, key, parts[:i])]
                continue
            if part == "source" and "source" not in node and i == 0:
                node = node.setdefault("source", {})
                continue
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, (dict, list)):
                raise PrepError(f"--set {key}: {'.'.join(parts[:i + 1])} is not a section")
            node = nxt
        if isinstance(node, list):
            node[_list_index(node, parts[-1], key, parts[:-1])] = value
        else:
            node[parts[-1]] = value
    return data


def _list_index(node: list, part: str, key: str, path: list[str]) -> int:
    """`part` as an index of the list `node` (at dotted `path`) for `--set key=...`, or a PrepError
    naming the indices there are (int(part) and node[...] raised a ValueError or IndexError: a
    traceback). An index counts from 0 as the list is written; a negative one is refused too."""
    if part.isascii() and part.isdigit() and int(part) < len(node):  # ascii: int() refuses "²"
        return int(part)
    where = ".".join(path)
    has = (f"holds {len(node)} item{'s' if len(node) != 1 else ''}: give an index from 0 to {len(node) - 1}"
           if node else "is an empty list")
    raise PrepError(f"--set {key}: {part!r} is not an index of {where}, which {has}")
