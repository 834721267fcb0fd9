"""Proven tokenizer specs kept across runs, so a run does not re-load and re-prove the same tokenizer.

Loading a tokenizer.json into `tokenizers`, building the fast engine and proving it on the torture
sample takes 0.33 s for GPT-2 in the parent, before any worker can start (a quarter of a 1.3 s run
on 57 MB with 2 workers). The outcome depends only on the definition's bytes, the recipe's tokenizer
settings, the bos/eos names beside the file, the engine versions and prep's own proof code, so it is
stored under a key of all of those: `$PREP_CACHE_DIR` (default `$XDG_CACHE_HOME/prep` or
`~/.cache/prep`) `/tokenizers/<key>.pickle`. `PREP_CACHE_DIR=off` disables it. The per-run check on
the run's first documents (Encoder.verify_next_documents) is never cached.

Entries are pickles written by prep itself into the user's own cache directory; an unreadable or
stale one is ignored and rewritten. Any error writing the cache is ignored: it only saves time.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import unicodedata
from pathlib import Path

__all__ = ["cache_dir", "spec_key", "load", "store", "versions"]

# the proof's code is part of the key (unicode_gaps.py: its probe's result is cached with the spec)
_CODE = ("fast_bpe.py", "tokenizers.py", "tokenizer_cache.py", "added_tokens.py", "joined.py", "unicode_gaps.py",
         "tiktoken_encode.py")
_ENGINES = ("tokenizers", "gigatoken", "tiktoken")


def cache_dir() -> Path | None:
    where = os.environ.get("PREP_CACHE_DIR")
    if where is not None:
        return None if where.strip().lower() in ("", "off", "0", "none") else Path(where).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "prep"


def _versions() -> list[str]:
    """'name version' of each engine, as importlib.metadata.version gives it ('name -' if missing)."""
    found = versions(_ENGINES)
    return [f"{name} {found[name] or '-'}" for name in _ENGINES]


def versions(names) -> dict[str, str | None]:
    """Each package's installed version (None: not installed), as importlib.metadata.version gives it."""
    found: dict[str, str | None] = dict(_installed_versions(names))
    missing = [name for name in names if name not in found]
    if missing:  # an egg-info install, or none: ask importlib.metadata
        from importlib.metadata import PackageNotFoundError, version
        for name in missing:
            try:
                found[name] = version(name)
            except PackageNotFoundError:
                found[name] = None
    return found


def _installed_versions(names) -> dict[str, str]:
    """Versions from the `<name>-<version>.dist-info` directories on sys.path, the first one of each
    name in path order (where importlib.metadata finds it too). Listing the path's directories takes
    ~1 ms; `import importlib.metadata` takes 25-40 ms in a fresh parent (email, zipfile, csv, ...), on
    every run's way to its first unit."""
    wanted = {n.replace("-", "_").lower(): n for n in names}
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as listing:
                for d in listing:
                    if d.name.endswith(".dist-info"):
                        name, _, version = d.name[: -len(".dist-info")].partition("-")
                        key = wanted.get(name.lower())
                        if key is not None and version and key not in found:
                            found[key] = version
        except OSError:  # a zip, a missing directory
            continue
        if len(found) == len(wanted):
            break
    return found


def spec_key(definition_sha: str, settings: dict) -> str:
    """sha256 over the definition's hash, `settings` (the recipe's tokenizer keys and the bos/eos
    names found beside the file), the engines' versions, this Python's Unicode version (NFC runs in
    Python where the engine is built from ranks) and the bytes of prep's proof code."""
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in _CODE:
        h.update((here / name).read_bytes())
    h.update(repr((definition_sha, sorted(settings.items()), _versions(), unicodedata.unidata_version)).encode())
    return h.hexdigest()


def load(key: str):
    """The cached TokenizerSpec, or None (no cache, no entry, or an unreadable one)."""
    root = cache_dir()
    if root is None:
        return None
    try:
        with open(root / "tokenizers" / f"{key}.pickle", "rb") as f:
            return pickle.load(f)
    except Exception:  # missing, truncated, from an incompatible version: prove again
        return None


def store(key: str, spec) -> None:
    root = cache_dir()
    if root is None:
        return
    folder = root / "tokenizers"
    tmp = folder / f"{key}.pickle.tmp{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            pickle.dump(spec, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, folder / f"{key}.pickle")  # readers see a whole entry or none
    except OSError:  # read-only home, full disk: run without the cache
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
