"""Which files a source reads: its paths, globs, directories and URLs listed into files, in the
order the paths are listed, each once; and, for a relative path that is missing, where it is.

The format of each path (and a directory's census) comes from pipeline.source_formats.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline import signed_urls
from pipeline.errors import PrepError
from pipeline.source_formats import (
    dir_census,
    format_suffixes,
    infer_format,
    is_data_name,
    is_url,
    local_dir,
    local_path,
    other_files_hint,
    refuse_slash_after_file,
)

if TYPE_CHECKING:  # annotations only: pipeline.recipe imports this module
    from pipeline.recipe import SourceConfig

__all__ = ["expand_files", "elsewhere_hint", "missing_bucket", "refuse_url_credentials"]

log = logging.getLogger("prep")


def expand_files(source: SourceConfig, seen: tuple[dict[str, int], dict] | None = None) -> list[str]:
    """Sorted files matched by each path/glob, in the order the paths are listed, each once (where
    its first path puts it); with `seen` (readers.base.planning_sizes: sizes, stamps), each local
    match's size and mtime are recorded there (one stat() per file tells all three)."""
    sizes, stamps = seen if seen is not None else (None, None)
    files: list[str] = []
    for p in source.paths():
        if is_url(p):
            files.extend(_expand_url(p, source.storage_options, source))
            continue
        local = p[len("file://"):] if p.startswith("file://") else p
        if (d := local_dir(p)) is not None:  # a directory: its files of this source's format
            fmt = source.resolved_format()
            matches = [f for f, kind in dir_census(d).items() if kind == fmt]
            if not matches:
                other = other_files_hint(d, format_set=True) if fmt == "text" else ""
                raise PrepError(f"source.path: the directory {p!r} holds no {fmt} file (suffixes "
                                f"{format_suffixes(fmt)}, compressed "
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
        if not exact:
            _refuse_partial_double_star(p)
        # a file reached through a linked directory is read once, under its first name: glob's `**` enters
        # linked directories, so `d/**/*.jsonl` with a link d/sub/up -> .. matched each file 41 times
        # (d/sub/up/sub/up/..., to the kernel's 40-link limit), each document 41 times in the dataset.
        # As in a directory source, a linked file is its own name (read as well as its target).
        real_dirs: dict[str, str] = {}  # a match's directory -> its real path (one realpath per directory)
        seen_names: dict[tuple[str, str], str] = {}
        for m in [literal] if exact else sorted(glob.glob(literal, recursive=True)):
            try:
                st = os.stat(m)
            except OSError:  # vanished since the listing, or a broken link: not a file
                continue
            if stat.S_ISREG(st.st_mode):
                head, name = os.path.split(m)
                if (real := real_dirs.get(head)) is None:
                    real = real_dirs[head] = os.path.realpath(head or ".")
                if (first := seen_names.setdefault((real, name), m)) is not m:
                    _warn_aliases(p, m, first)
                    continue
                matches.append(m)
                if sizes is not None:
                    sizes[m], stamps[m] = st.st_size, st.st_mtime_ns
        if not matches:
            refuse_slash_after_file(p)
            raise PrepError(f"source.path: no file matches {p!r} (relative paths resolve against "
                            f"the current directory {os.getcwd()}); fix the path or glob")
        files.extend(matches)
    return _each_once(files, source.path) if len(source.paths()) > 1 else files  # one path lists a file once


# the repeats already warned of in this process: a run lists its sources' files more than once
_REPEATS_WARNED: set[tuple[str, ...]] = set()
_ALIASES_WARNED: set[str] = set()


def _warn_aliases(pattern: str, name: str, first: str) -> None:
    """Once per pattern and process: `name`, matched by `pattern` through a linked directory, is the
    file `first`, already read under that name."""
    if pattern not in _ALIASES_WARNED:
        _ALIASES_WARNED.add(pattern)
        log.warning("source.path %s: %s is %s (through a linked directory); each file is read once, under the "
                    "first name the glob gives it", pattern, name, first)


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


# credentials before a URL's host: `user:password@` (the password may hold "/", "@", "?" or "#": AWS
# secret keys hold "/", so the host is not where urlsplit ends the authority) or a bare `token@`. Not
# credentials: a "@" in the path (hf://datasets/org/name@revision/...), also after a port
# (http://localhost:8000/u@x.jsonl: a ":" then digits then "/" is a port) or an IPv6 host ([::1]:8000)
_CREDENTIALS = re.compile(r"^[A-Za-z][\w+.-]*://(?:[^/?#@\[]*:[^@]*|[^/?#@:\[]+)@")
# where a host may carry a port (http, https, ftp, ws...): `host:8000/u@x` is a port then a path; elsewhere
# (s3, gs, az, hf: no ports) a secret of digits then "/" (AWS keys: base64, "/" included) is one (review)
_PORT_THEN_PATH = re.compile(r"^(?:https?|ftps?|wss?)://[^/?#@\[]*:\d{1,5}(?:[/?#]|$)", re.IGNORECASE)


def refuse_url_credentials(url: str, field: str) -> None:
    """A URL with credentials in it (`https://user:token@host/...`, `s3://key:secret@bucket/...`) is
    refused before anything reads it: the path is the recipe's, written as given into the manifest, the
    plan and every message naming the file (a password was in manifest.json and in each error). The
    message shows the URL with all up to its last "@" masked (a path's "@" after it masks more, never less)."""
    if not _CREDENTIALS.match(url) or _PORT_THEN_PATH.match(url):  # a host, its port, then a path: no userinfo
        return
    scheme, _, rest = url.partition("://")
    masked = f"{scheme}://***@{rest[rest.rindex('@') + 1:]}"  # a path's or query's "@" after it: masks more
    raise PrepError(f"{field}: {masked} holds credentials (user:password@ before its host, masked here), which would "
                    "be written into the manifest and messages; give the URL without them and pass them in "
                    f"{field.split('.')[0]}.storage_options (s3: key, secret; http(s): headers: {{Authorization: "
                    "'Basic <base64 of user:password>'}})")


def _url_dir_files(url: str, storage_options: dict, fmt: str) -> list[str]:
    """The files under a directory URL (`s3://bucket/prefix/`), recursively, of format `fmt`; hidden and
    README/LICENSE-like names left out, as in a local directory."""
    import fsspec
    try:
        fs, root = fsspec.core.url_to_fs(url, **storage_options)
        found = sorted(fs.find(root))
    except Exception as e:  # network, credentials, a filesystem that cannot list (https)
        gone = isinstance(e, FileNotFoundError) and missing_bucket(url, storage_options)
        raise PrepError(gone or f"source.path: cannot list {url!r} ({type(e).__name__}: {e}); check the URL and "
                        "source.storage_options, or list the files explicitly") from None

    def data(path: str) -> bool:
        rel = path[len(root.rstrip("/")) + 1:] if path.startswith(root.rstrip("/")) else path
        names = rel.split("/")
        return (not any(n.startswith(".") for n in names[:-1]) and is_data_name(names[-1])
                and infer_format(names[-1], look_inside=False) == fmt)
    matches = [fs.unstrip_protocol(f) for f in found if data(f)]
    if not found and (gone := missing_bucket(url, storage_options)):
        raise PrepError(gone)
    if not matches:
        raise PrepError(f"source.path: {url!r} holds no {fmt} file (suffixes "
                        f"{format_suffixes(fmt)}, compressed or not); "
                        "fix the URL or source.format")
    return matches


def _expand_url(url: str, storage_options: dict, source: SourceConfig) -> list[str]:
    """A URL without glob characters as is (checked when opened), or, one ending in "/", the files
    under that prefix of the source's format (as for a local directory); a glob listed through fsspec."""
    refuse_url_credentials(url, "source.path")
    if signed_urls.is_signed(url):  # one object, named without its signature (its "?" is no glob)
        return [signed_urls.remember(url)]
    from pipeline.readers import url_reads  # noqa: F401  (its import sets fsspec's http(s) stall timeout)
    if url.endswith("/") and not any(c in url.split("://", 1)[1] for c in "*?["):
        return _url_dir_files(url, storage_options, source.resolved_format())
    if not any(c in url.split("://", 1)[1] for c in "*?["):
        return [url]
    _refuse_partial_double_star(url)
    import fsspec
    try:
        fs, pattern = fsspec.core.url_to_fs(url, **storage_options)
        if fs.isfile(pattern):  # an object named with glob characters is that object (see expand_files)
            return [url]
        matches = sorted(m for m in fs.glob(pattern) if not _is_page_link(fs, m) and fs.isfile(m))
    except Exception as e:  # network, credentials, unsupported listing (https)
        raise PrepError(f"source.path: cannot list {url!r} ({type(e).__name__}: {e}); check the URL and "
                        "source.storage_options, or list the files explicitly") from None
    if not matches:
        raise PrepError(missing_bucket(url, storage_options) or f"source.path: no file matches {url!r}; fix the URL or glob")
    return [fs.unstrip_protocol(m) for m in matches]


# fsspec protocols whose first path component is a bucket (or container): a missing one is named
BUCKET_PROTOCOLS = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "oss"}


def missing_bucket(url: str, storage_options: dict | None) -> str | None:
    """The error for a URL whose bucket does not exist, or None (it exists, or cannot be told, or the
    URL has no bucket). On the error paths only: one more request (s3fs: head_bucket, and on a miss
    get_bucket_location), where "does not exist" or "no file matches" left the cause to guess."""
    scheme, _, rest = url.partition("://")
    bucket = rest.split("/", 1)[0]
    if scheme.split("::")[-1] not in BUCKET_PROTOCOLS or not bucket:
        return None
    try:
        import fsspec
        fs, _ = fsspec.core.url_to_fs(url, **(storage_options or {}))
        if fs.exists(bucket):
            return None
    except Exception:  # cannot be told: the caller's own message stands
        return None
    return (f"source.path: {url}: the bucket {bucket!r} does not exist (or these credentials cannot see it); "
            "fix the URL or source.storage_options")


def _refuse_partial_double_star(path: str) -> None:
    """`s3://bkt/in/**.jsonl.zst`: fsspec takes `**` only as a whole path component, and its ValueError
    came out as "cannot list ...; check the URL and source.storage_options". A local `in/**.jsonl` is
    Python's (and bash's) `in/*.jsonl`: the files of that directory only, the ones below it silently
    left out of the dataset. Says so, with the glob that matches at any depth (`in/**/*.jsonl`)."""
    scheme, rest = path.split("://", 1) if "://" in path else ("", path)
    parts = rest.split("/")
    for i, part in enumerate(parts):
        if "**" in part and part != "**":
            fixed = "/".join([*parts[:i], "**", re.sub(r"\*{2,}", "*", part), *parts[i + 1:]])
            raise PrepError(f"source.path: {path!r}: '**' matches directories only as a whole path component "
                            f"(`{part}`); for files at any depth write '{scheme + '://' if scheme else ''}{fixed}'")


def _is_page_link(fs, path: str) -> bool:
    """An http(s) glob's match that is a directory or another link of the listing page, not a file:
    fsspec lists a directory's HTML page's links, and every URL is a file to it (isfile is True), so
    `http://host/data/*` matched http.server's link to the subdirectory `data/sub/`, and that page's
    HTML was read as input; an Apache listing's sort links (`data/?C=N;O=D`) match `*` too. (An object
    store's key may hold "?" or "#": only http's listings are judged so.)"""
    if not {"http", "https"} & ({fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)):
        return False
    return path.endswith("/") or any(c in path.rsplit("/", 1)[-1] for c in "?#")


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
