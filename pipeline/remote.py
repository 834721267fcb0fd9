"""An output `dir` that is an fsspec URL (`s3://bucket/prefix`, `gs://...`, `memory://...`).

The run itself is local: shards, journal and lock live in a staging directory (`output.local_dir`,
default ~/.cache/prep/staging/<hash of the URL>), so resume, determinism and the journal work
exactly as for a local output. After finalize, each shard (`.bin`, then its `.idx`) and
`rejects.jsonl` are uploaded one by one, remote files of an older run that the new manifest does not
list are deleted, and `manifest.json` is uploaded last: a remote dataset with a manifest is complete.
An interrupted upload is resumed by re-running the same command (files already uploaded from the
same local file are skipped, `.prep/uploaded.json` in the staging directory). A remote manifest of
the same recipe means "already complete"; one of another recipe is refused without --overwrite, and
stays until the new dataset's upload starts. As for a local output (pipeline.outdir), a URL that
holds files which are neither a prep dataset nor this staging directory's upload is refused, with
--overwrite too, and --overwrite refuses to replace a file the run reads.
A URL that holds only a dataset's files and no manifest (an upload whose staging directory was
deleted) is refused as unfinished, and --overwrite replaces it.
The staging directory needs the dataset's size in local disk; it is kept after the upload.
Two concurrent runs to one URL from different machines are not locked against each other.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from pipeline.dataset_path import only_dataset_files
from pipeline.errors import PrepError
from pipeline.manifest import MANIFEST_NAME, Manifest
from pipeline.outdir import foreign_output, reads_deleted_input
from pipeline.recipe import Recipe
from pipeline.source_formats import is_url, local_path

__all__ = ["tokenize_to_url", "upload_dataset", "default_staging_dir"]

UPLOAD_LOG = "uploaded.json"


def default_staging_dir(url: str) -> Path:
    """staging/<hash of the URL>: the recipe's `name` may change between a stop and its resume, and
    the resume must find the run's staging folder. prep up to a51c40d named it <name>-<hash>: such a
    folder for this URL is still used (the latest modified, if several names were staged to it), so its
    unfinished run resumes and its upload log (UPLOAD_LOG) still counts."""
    staging = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "prep" / "staging"
    # s3://b/ds/ and s3://b/ds are one output (remote._fs strips the slash): hashed apart, an upload stopped
    # under one spelling and resumed under the other was refused as foreign files. A folder hashed from
    # the URL as given (prep before this) is still found.
    canonical = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:12]
    for digest in dict.fromkeys([canonical, hashlib.sha256(url.encode()).hexdigest()[:12]]):
        if (staging / digest).exists():
            return staging / digest
        named = sorted(staging.glob(f"?*-{digest}"), key=lambda p: p.stat().st_mtime_ns)
        if named:
            return named[-1]
    return staging / canonical


def _fs(url: str, storage_options: dict):
    import fsspec

    from pipeline.source_files import refuse_url_credentials
    refuse_url_credentials(url, "output.dir")  # else written into the staging path's messages and notes
    try:
        fs, root = fsspec.core.url_to_fs(url, **storage_options)
    except Exception as e:
        raise PrepError(f"output.dir: cannot open {url!r} ({type(e).__name__}: {e}); check the URL and "
                        "output.storage_options") from None
    if _protocols(fs) & {"http", "https"}:  # fsspec's http is read-only: it cannot list, delete or PUT a prefix
        raise PrepError(f"output.dir: {url} is an http(s) URL, which prep can read from but not write a dataset to; "
                        "give a local directory or an object store URL (s3://bucket/prefix, gs://, az://)")
    root = root.rstrip("/")
    if not root:  # s3:// (no bucket), local:/// (the whole disk): nothing to sweep train/ and val/ in
        raise PrepError(f"output.dir: {url!r} names no bucket or directory; give one, such as s3://bucket/prefix")
    return fs, root


def tokenize_to_url(recipe: Recipe, url: str, *, num_workers: int | None = None, overwrite: bool = False,
                    show_progress: bool = True, console=None):
    from pipeline.executor import TokenizeResult, failed_units_note, tokenize

    fs, root = _fs(url, recipe.output.storage_options)
    local = Path(recipe.output.local_dir).expanduser() if recipe.output.local_dir else default_staging_dir(url)
    content = recipe.content_dict()
    remote_manifest = f"{root}/{MANIFEST_NAME}"
    try:
        exists = fs.exists(remote_manifest)
    except Exception as e:  # credentials, endpoint, missing bucket
        raise PrepError(f"output.dir: cannot reach {url!r} ({type(e).__name__}: {e}); check the URL and "
                        "output.storage_options") from None
    if exists and not overwrite:
        manifest = _read_remote_manifest(fs, remote_manifest, url)
        if manifest.recipe != content:
            raise PrepError(f"{url}: already holds a dataset made from a different recipe; choose another "
                            "output.dir, or pass --overwrite to replace it")
        return TokenizeResult(manifest, local, already_complete=True, notes=failed_units_note(manifest))

    def check(paths: list[str]) -> None:  # the local rule (pipeline.outdir), before anything is written
        if not exists:
            _refuse_foreign(fs, root, url, local, overwrite)
        if overwrite:
            _refuse_replacing_inputs(fs, root, url, paths)
    def publish(manifest: Manifest) -> str:  # under the staging directory's lock: no run replaces its files meanwhile
        sent = upload_dataset(local, fs, root, manifest, url)
        return f"uploaded {sent} file(s) to {url} (manifest last); staging copy in {local}"
    # the remote dataset stays complete while the local run goes: its manifest goes when the upload starts
    return tokenize(recipe, output=str(local), num_workers=num_workers, overwrite=overwrite,
                    show_progress=show_progress, console=console, check_inputs=check, publish=publish)


def _read_remote_manifest(fs, path: str, url: str) -> Manifest:
    """The remote dataset's manifest, or a PrepError naming it by its URL (`where`: fsspec's path lacks
    the scheme). A damaged one (cut short by an interrupted copy) was json's traceback out of the run."""
    where = f"{url.rstrip('/')}/{MANIFEST_NAME}"
    try:
        data = json.loads(fs.cat_file(path))
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise PrepError(f"{where}: not valid JSON ({e}); the dataset there is damaged: pass --overwrite to replace "
                        "it, or choose another output.dir") from None
    except Exception as e:  # network, permissions
        raise PrepError(f"output.dir: cannot read {where} ({type(e).__name__}: {e}); check the URL and "
                        "output.storage_options") from None
    if not isinstance(data, dict):
        raise PrepError(f"{where}: not a JSON object (a manifest is one); pass --overwrite to replace the dataset "
                        "there, or choose another output.dir")
    return Manifest.from_dict(data, where=where)


def _refuse_foreign(fs, root: str, url: str, local: Path, overwrite: bool) -> None:
    """A URL with no manifest must hold nothing but what this staging directory uploaded there (an
    interrupted upload, or the files of a dataset that an interrupted --overwrite was replacing), as a
    local output must be empty or prep's, with or without --overwrite. Before, the files of a prefix
    that held others were written among them, and the upload's sweep of stale shards deleted every
    file under its train/ and val/ (with --overwrite, until this check applied to it too)."""
    try:
        found = fs.find(root)
    except FileNotFoundError:
        return
    except Exception as e:  # credentials, endpoint, missing bucket
        raise PrepError(f"output.dir: cannot list {url!r} ({type(e).__name__}: {e}); check the URL and "
                        "output.storage_options") from None
    if root in found:  # an object of that very name: s3fs's find() of a file is the file
        raise PrepError(f"output.dir: {url} is a file (an object of that name exists), not a prefix for a dataset's "
                        "files; choose another output.dir")
    log_path = local / ".prep" / UPLOAD_LOG
    log = _load_log(log_path, url)
    foreign = sorted(rel for rel in _listed(found, root) if rel not in log["files"])
    if not foreign:
        return
    holds = f"{len(foreign)} file(s) that prep did not upload from {local}, such as {foreign[0]!r}"
    if not only_dataset_files(foreign):
        raise foreign_output(url, holds, overwrite, run_state="record of an upload")
    # only a dataset's file names and no manifest: an upload interrupted, its staging directory (and
    # record) deleted since, or another machine's. --overwrite replaces it; recorded as this upload's,
    # so that a re-run of an interrupted --overwrite goes on without it
    if not overwrite:
        raise PrepError(f"{url}: holds {holds}, and no manifest.json: an unfinished upload, whose staging directory "
                        "is gone or on another machine; pass --overwrite to replace it, or choose another output.dir")
    for rel in foreign:
        log["files"].setdefault(rel, "replaced")
    _save(log_path, log)


def _listed(found: list[str], root: str) -> list[str]:
    """The files of `fs.find(root)`, relative to root, without folder markers: the 0-byte keys ending in
    "/" that the S3 console's "Create folder" (and other tools) make, which s3fs lists as `bkt/ds/`. An
    empty prefix made so was refused as holding a file prep did not upload, "such as ''"."""
    return [rel for path in found if not path.endswith("/") and (rel := path[len(root):].lstrip("/"))]


def _refuse_replacing_inputs(fs, root: str, url: str, paths: list[str]) -> None:
    """--overwrite replaces a remote dataset's manifest.json, rejects.jsonl and files under train/ and val/
    (upload_dataset): refused when the run reads one of them, as a local --overwrite refuses to delete
    an input (pipeline.outdir)."""
    protocols = _protocols(fs)
    local_fs = "file" in protocols  # local://: local inputs may lie under it
    base = os.path.realpath(root) if local_fs else root  # never empty: _fs refuses a URL of no directory
    replaced = {f"{base}/{MANIFEST_NAME}", f"{base}/rejects.jsonl"}
    under = tuple(f"{base}/{split}/" for split in ("train", "val"))
    for path in paths:
        if is_url(path):
            if path.split("://", 1)[0].split("::")[-1] not in protocols:
                continue
            found = type(fs)._strip_protocol(path)
            if local_fs:
                found = os.path.realpath(found)
        elif local_fs and os.path.exists(local_path(path)):
            found = os.path.realpath(local_path(path))
        else:  # a local file, a hub id, tiktoken:<name>
            continue
        if found in replaced or found.startswith(under):
            raise reads_deleted_input(url, path)


def _protocols(fs) -> set[str]:
    """An fsspec filesystem's protocol names (one string, or a tuple of them)."""
    return {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)


def _load_log(path: Path, url: str) -> dict:
    """The staging directory's record of what it uploaded to `url` ({rel: size:mtime_ns})."""
    try:
        log = json.loads(path.read_text())
    except (OSError, ValueError):
        log = {}
    # s3://b/ds/ and s3://b/ds are one output and one staging folder (default_staging_dir): compared as
    # spelled, an upload stopped under one was refused as foreign files under the other (review)
    return log if str(log.get("url", "")).rstrip("/") == url.rstrip("/") else {"url": url, "files": {}}


def upload_dataset(local: Path, fs, root: str, manifest: Manifest, url: str) -> int:
    """Upload a finished local dataset; manifest.json last. Returns the number of files sent."""
    files = [f"{split}/{s.name}.{ext}" for split, info in manifest.splits.items() for s in info.shards
             for ext in ("bin", "idx")]
    if (local / "rejects.jsonl").exists():
        files.append("rejects.jsonl")
    log_path = local / ".prep" / UPLOAD_LOG
    log = _load_log(log_path, url)
    sent = 0
    try:
        _unfinish(fs, root, log, log_path)
        if "file" in _protocols(fs):
            # local:// (a mount of a bucket, say): put_file creates no directory; object stores need none
            for split in manifest.splits:
                fs.makedirs(f"{root}/{split}", exist_ok=True)
        for rel in files:
            st = (local / rel).stat()
            stamp = f"{st.st_size}:{st.st_mtime_ns}"
            target = f"{root}/{rel}"
            if log["files"].get(rel) == stamp and fs.exists(target):
                continue
            fs.put_file(str(local / rel), target)
            log["files"][rel] = stamp
            _save(log_path, log)
            sent += 1
        _remove_stale(fs, root, manifest, files)
        fs.put_file(str(local / MANIFEST_NAME), f"{root}/{MANIFEST_NAME}")
        log["files"] = {rel: log["files"][rel] for rel in files}  # not those swept: another's, if ever put there
        _save(log_path, log)
    except PrepError:
        raise
    except Exception as e:
        raise PrepError(f"output.dir: upload to {url} failed ({type(e).__name__}: {e}); the local dataset in "
                        f"{local} is complete: re-run the same command to finish the upload") from None
    return sent + 1


def _unfinish(fs, root: str, log: dict, log_path: Path) -> None:
    """Before the first file is replaced: a remote dataset there (an --overwrite) stops being complete,
    its manifest deleted first, and its files are recorded as this upload's, so that a re-run after an
    interrupted upload knows them from other files (_refuse_foreign) and sweeps those it no longer needs."""
    manifest = f"{root}/{MANIFEST_NAME}"
    if not fs.exists(manifest):
        return
    for rel in _listed(fs.find(root), root):
        log["files"].setdefault(rel, "replaced")
    _save(log_path, log)
    fs.rm_file(manifest)


def _remove_stale(fs, root: str, manifest: Manifest, files: list[str]) -> None:
    keep = set(files)
    for split in ("train", "val"):
        prefix = f"{root}/{split}"
        try:
            listed = fs.ls(prefix, detail=False)
        except FileNotFoundError:
            continue
        for path in listed:
            rel = f"{split}/{path.rstrip('/').rsplit('/', 1)[-1]}"
            if rel not in keep:
                fs.rm_file(path)
    if "rejects.jsonl" not in keep and fs.exists(f"{root}/rejects.jsonl"):
        fs.rm_file(f"{root}/rejects.jsonl")


def _save(path: Path, log: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(log, sort_keys=True))
    os.replace(tmp, path)
