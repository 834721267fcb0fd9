"""Recipes: YAML -> frozen, validated dataclasses.

Everything a run needs is checked here, before any work starts: unknown keys (with the closest valid
name), wrong types, bad choices, missing input files. `Recipe.content_dict()` is the part of the
recipe that determines the output bytes; it is stored in the manifest and compared on resume.
A source's format and files come from pipeline.source_formats and pipeline.source_files; `--set`
overrides and the type checks of each value from pipeline.recipe_values.
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pipeline import signed_urls, source_files
from pipeline.errors import PrepError, closest
from pipeline.recipe_values import apply_overrides, check_value
from pipeline.recipe_yaml import load_recipe_yaml, located, overridden_keys
from pipeline.source_files import elsewhere_hint
from pipeline.source_formats import FORMATS, infer_format, infer_source_format, is_url

# infer_format and is_url (as apply_overrides, FORMATS and elsewhere_hint) were defined here before
# source_formats, source_files and recipe_values were split off: named here still, for code that imports them
__all__ = ["SourceConfig", "TokenizerConfig", "OutputConfig", "Recipe", "apply_overrides", "FORMATS",
           "infer_format", "is_url", "elsewhere_hint"]


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
    DatasetDict) has one split: the one it records being saved from (`train` if none), and slices of it
    (`train[:10%]`)."""
    streaming: bool = False
    """hf only: stream the dataset (never downloaded whole); work is sharded by the dataset's own shards."""
    data_files: str | list[str] | None = None
    """hf only: data files for a builder (`path: json` with `data_files: data/*.jsonl`)."""
    storage_options: dict = field(default_factory=dict)
    """fsspec options for URLs (e.g. `endpoint_url`, `key`, `secret`, `anon`); never stored in the manifest."""

    def paths(self) -> list[str]:
        return [self.path] if isinstance(self.path, str) else list(self.path)

    def resolved_format(self) -> str:
        return self.format or infer_source_format(self.path)

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
        return source_files.expand_files(self, seen)


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
    """Local staging directory for a URL `dir` (default: ~/.cache/prep/staging/<hash of the URL>)."""


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
        data, lines = load_recipe_yaml(text, str(path))
        data = apply_overrides(data, overrides)
        if output_dir is not None and isinstance(data.get("output") or {}, dict):
            data["output"] = {**(data.get("output") or {}), "dir": output_dir}
        try:
            return cls.from_dict(data, where=str(path), source_file=str(path), validate=validate)
        except PrepError as e:  # an error about a key: at its line in the file
            raise PrepError(located(str(e), str(path), lines, overridden_keys(overrides, output_dir))) from None

    @classmethod
    def from_dict(cls, data: dict, where: str = "recipe", source_file: str | None = None,
                  validate: bool = True) -> Recipe:
        data = dict(data)
        or_source = "; or leave it out to read `source:`" if "source" in data else ""
        if "sources" in data and not isinstance(data["sources"], list):
            # before "not both": `--set sources=null` beside `source:` was told to give only one of them
            got = "null" if data["sources"] is None else f"{type(data['sources']).__name__} {data['sources']!r}"
            raise PrepError(f"{where}: `sources:` must be a list of sources, such as [{{path: a.jsonl}}, {{path: "
                            f"b.csv}}], got {got}{or_source}")
        if data.get("sources") == []:
            # before "missing `source:`" (it is there, empty) and "not both" (`--set sources=[]` beside `source:`)
            raise PrepError(f"{where}: `sources:` is an empty list; give at least one source, such as sources: "
                            f"[{{path: a.jsonl}}]{or_source}")
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
        said = f" (relative paths resolve against the current directory {os.getcwd()})"
        if not hint:
            hint = self._env_var_hint(msg)
            if not hint:
                return error
        msg = msg.replace(said, hint).replace(hint + "; fix the path or glob", hint) if said in msg else msg + hint
        return PrepError(msg)

    def _env_var_hint(self, msg: str) -> str:
        """For a missing path holding `$NAME` or `${NAME}`: prep does not expand it (the file was looked
        for under a directory literally named `$DATA`); the shell does, in a --set."""
        keys = [("tokenizer.path", self.tokenizer.path)]
        for i, s in enumerate(self.sources):
            key = f"sources.{i}.path" if len(self.sources) > 1 else "source.path"
            # one entry of a list by its index: `--set source.path=...` replaced the whole list, and the
            # run went on without the other inputs (review)
            keys += [(key, s.path)] if isinstance(s.path, str) else [(f"{key}.{j}", p) for j, p in enumerate(s.path)]
        for key, path in keys:
            if path in msg and (var := _ENV_VAR.search(path)) and not os.path.lexists(path):
                return (f" ({var.group(0)} is not expanded: a recipe's paths are taken as written; give the path "
                        f"where the shell expands it: --set {key}=\"{path}\")")
        return ""

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
            # a pre-signed URL's signature is one too, and a re-signed URL is the same input (signed_urls)
            s["path"] = _named(s["path"])
            if s.get("data_files") is not None:  # an hf source's files: a str or a list
                s["data_files"] = _named(s["data_files"])
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


# an environment variable in a path (`$DATA/*.jsonl`, `${HOME}/t.json`): a recipe's paths are not expanded
_ENV_VAR = re.compile(r"\$(\w+|\{\w+\})")


# -- generic YAML -> dataclass with checks --------------------------------------------------------

# what a missing required key is for, in its error ("name: required key is missing" alone left
# users to guess what value it takes)
_REQUIRED_HINTS = {
    "name": " (the dataset's name, recorded in its manifest: add `name: my-corpus` at the top)",
    "source.path": " (the input: a file, glob, directory or fsspec URL, or for format hf a dataset id)",
    "tokenizer.path": " (a tokenizer.json file or its directory, a hub id such as gpt2, or tiktoken:<encoding>)",
    "output.dir": " (the directory the dataset is written to; --output DIR sets it too)",
}


def _build(cls, data, where: str, **extra):
    label = where or "recipe"
    if isinstance(data, str) and cls is SourceConfig:
        data = {"path": data}
    if isinstance(data, str) and cls is TokenizerConfig:
        data = {"path": data}
    if isinstance(data, str) and cls is OutputConfig:  # `output: out/x`, as `source: data.jsonl`
        data = {"dir": data}
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
        kwargs[f.name] = check_value(data[f.name], hints[f.name], dotted)
    return cls(**kwargs, **extra)


def _named(paths):
    """A path or a list of them, each pre-signed URL named less its signature."""
    return signed_urls.name(paths) if isinstance(paths, str) else [signed_urls.name(p) for p in paths]
