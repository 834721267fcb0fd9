"""A URL input's bytes, fetched as the readers ask for them (base.open_raw).

fsspec's files read ahead a block past every read that misses their cache: 50 MiB on s3fs. A unit
reads a range of a big file, so each unit downloaded its range plus 50 MiB (to the end of a smaller
file): 15 units of a 3.7 MB JSONL object on S3 fetched 28 MB, 14 units of a 3.6 MB CSV 76 MB (every
unit's header look fetched the file again), and a planned .zst's 18-byte header and 1 MiB sample each
fetched 50 MiB. Here a read that misses fetches at least REQUEST_BYTES but never past `ahead_to` (the
unit's end, the sample's), and a read that would cross it stops there; past it, reads of 64 KiB, then
growing (the rest of the record that crosses the end: its reader asked for a 1-4 MiB block).

An object replaced between the run's plan and a unit's read (another ETag, size or modification time
than the plan's, pipeline.input_changes) was read at the old plan's offsets, its new bytes silently in
the dataset beside units read before the change. While a run goes (`expecting`), each open compares the
object with the plan's record of it, and a change stops the run naming the URL (InputChanged); within
one open s3fs sends If-Match with the ETag it opened, and its 412 is named so too.

A read that fails for any reason but the object's absence (a network drop, a timeout, the endpoint
gone: botocore's and aiohttp's own exceptions, which no reader caught) is an InputUnreachable naming
the URL: one line, and the run stops with its finished units kept, under on_bad_record: skip too.

An object deleted (404) after the plan listed it failed its units under `on_bad_record: skip` (the
default), "cannot open it (FileNotFoundError)", and the run finished without its documents, a re-run
calling the dataset complete. While a run goes it is an InputChanged too (gone): the run stops naming
it, its finished units kept, and once it is back a re-run resumes.

An http(s) server that stalls (sends no byte) stops the run after STALL_SECONDS, naming the URL.
aiohttp's default limit was 300 s on each whole request, body included: a stalled server held the
plan 5 minutes on a look it then took for "not a JSON array" (and the unit 5 more), and a file read
whole as one stream (a server without ranges) failed after 5 minutes however fast its bytes came.

An http(s) server that declares no size (no Content-Length: a chunked or close-delimited body; or a
Content-Encoding such as gzip, whose Content-Length is the encoded body's) gave fsspec's info() a size
of None, and the plan stopped with "cannot read URL (TypeError: int() argument ... 'NoneType')". Its
size is now counted from one read of its body (size_of), and it is read as one stream (fsspec opens
it so: it cannot fetch a range of a body it cannot size), decoded by aiohttp once.
"""

from __future__ import annotations

import io
import logging
import time

from pipeline import signed_urls
from pipeline.errors import RESUME_FIX, InputUnreachable, PrepError
from pipeline.readers.members import GZIP_MAGIC, ZSTD_MAGIC

log = logging.getLogger("prep")

__all__ = ["open_url", "unreachable", "expecting", "expects", "check_unchanged", "checked_info", "stamp_of",
           "InputChanged", "size_of", "retrying", "transient"]

# bytes per request while a read is before `ahead_to` (or there is none): S3 answers a request in
# ~10-50 ms, so 4 MiB keeps one worker's stream at tens of MB/s, above what it tokenizes per core
REQUEST_BYTES = 4 << 20
# the first read past `ahead_to`: the rest of the record that crosses a unit's end (_StopsAt)
PAST_END_BYTES = 64 << 10


# seconds without a byte from an http(s) server before its read fails as stalled: botocore's read
# timeout on S3 (60 s) too; a connection gets aiohttp's own 30 s. No limit on a whole request: a file
# read as one stream takes as long as its size needs
STALL_SECONDS = 60


async def _stall_client(**kwargs):
    """fsspec's http(s) session (its get_client), with the STALL_SECONDS read timeout unless
    storage_options' client_kwargs give a timeout of their own."""
    import aiohttp
    kwargs.setdefault("timeout", aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=STALL_SECONDS))
    return aiohttp.ClientSession(**kwargs)


def _install_stall_timeout() -> None:
    """Every http(s) filesystem fsspec makes in this process gets _stall_client (fsspec.config's defaults
    apply to each filesystem it makes, under the caller's own options: a get_client given there wins).
    Run when this module is imported (by readers.base and source_files, before any URL is listed or
    read, in the parent and in each worker)."""
    import fsspec.config
    for protocol in ("http", "https"):
        fsspec.config.conf.setdefault(protocol, {}).setdefault("get_client", _stall_client)


_install_stall_timeout()


# seconds to wait before each retry of an http(s) request that failed transiently (`retrying`): 5 tries
# over 7.5 s, about what a load balancer's restart or a CDN's 503 burst lasts; botocore retries S3's own
# (its `retries` config), so s3:// is not retried here. Tests set shorter ones.
RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)
# an answer that says "try again": a server error, a gateway's, an overload, a gateway's timeout, and
# 429 Too Many Requests (a CDN's or the hub's rate limit: the one 4xx that passes with time). Other 4xx
# (403 expired, 404, 416) are the request's fault and never retried
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# aiohttp's names for a connection the server closed or reset (not ClientConnectorError, its subclass
# for a host that cannot be reached: retrying that only delays the "connecting" message)
_DROPPED = {"ServerDisconnectedError", "ClientOSError", "ClientConnectionResetError", "ClientPayloadError"}


def transient(error: BaseException) -> BaseException | None:
    """The error of `error`'s chain that makes it worth a retry (a 503, a reset), or None: fsspec's
    info() raises FileNotFoundError from a 503."""
    for _ in range(8):  # the chain of causes, not a cycle
        status = getattr(error, "status", None)
        if isinstance(status, int) and status in RETRY_STATUSES:
            return error
        if isinstance(error, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)) \
                or type(error).__name__ in _DROPPED:
            return error
        error = error.__cause__ or error.__context__
        if error is None:
            return None
    return None


def retrying(path: str, call):
    """call(), again after each of RETRY_DELAYS while an http(s) request fails transiently; the last
    failure is `unreachable`, saying how many tries were made. Other errors pass at once."""
    if not path.startswith(("http://", "https://")):
        return call()
    for tries, delay in enumerate((*RETRY_DELAYS, None), 1):
        try:
            return call()
        except PrepError:
            raise
        except Exception as e:
            if (cause := transient(e)) is None:
                raise
            if delay is None:  # named by what the server said, not fsspec's FileNotFoundError made of it
                raise unreachable(path, cause, tries=tries) from None
            why = f"HTTP {cause.status}" if hasattr(cause, "status") else type(cause).__name__
            log.warning("%s: %s; retrying in %g s (try %d of %d)", path, why, delay, tries + 1, len(RETRY_DELAYS) + 1)
            time.sleep(delay)


# what fsspec's filesystems call a version of an object in `info()`: s3 and http ETag, gcs etag,
# local and memory mtime or created; an http server's Last-Modified when it sends no ETag (Python's
# http.server, many static servers): without it a file rewritten at the same size after the plan was read
# at the old plan's offsets unnoticed (a plan.json of no stamp compares sizes only, as before)
REMOTE_STAMPS = ("ETag", "etag", "mtime", "LastModified", "last_modified", "updated", "created", "Last-Modified")

# {URL: [size, stamp]} of the run's plan while it goes (`expecting`): set in the parent (its spooler
# and inline units) and in each worker (pipeline.worker_process); empty otherwise, so a plan's own reads
# and reads outside a run compare nothing
_expected: dict[str, list] = {}


class InputChanged(InputUnreachable):
    """An input URL whose object is not the one the run planned. Of InputUnreachable's kind: it stops the
    run under `on_bad_record: skip` too, and is no damage (pipeline.input_changes.note_stop): a resume
    with units done from the old object is refused, not mixed."""


def stamp_of(info: dict) -> str | None:
    """An fsspec `info()`'s version stamp (REMOTE_STAMPS), as plan.json records it."""
    stamp = next((info[k] for k in REMOTE_STAMPS if info.get(k) is not None), None)
    return None if stamp is None else str(stamp)


def size_of(path: str, fs, p: str, info: dict) -> int:
    """The size of `path` (fsspec's `fs`, its path `p`, its `info()`): the one info() gives, else, for a
    server that declares none, its body counted as it comes (one more fetch of it, at plan time only:
    planning needs the size, and nothing else tells it)."""
    if info.get("size") is not None:
        return int(info["size"])
    n = 0
    with fs.open(p, "rb", block_size=0) as f:  # a stream: fsspec's own for a body of no declared size
        while chunk := f.read(1 << 20):
            n += len(chunk)
    return n


# the magic bytes of a compression prep decodes by a suffix: an object stored so under a plain name is asked
# for its Content-Encoding (_encoded_note)
_MAGIC = {GZIP_MAGIC: ".gz", ZSTD_MAGIC: ".zst"}


def _encoded_note(path: str, fs, p: str, head: bytes) -> None:
    """An S3 object stored compressed with a Content-Encoding (`aws s3 cp --content-encoding gzip`)
    under a plain name (`d.jsonl`) was refused as "its bytes are gzip ... rename it to d.jsonl.gz",
    which left users to wonder why a file they uploaded as text was gzip: S3 sends the stored bytes
    as they are. Raises a PrepError saying what the store said, with the fix. Asked (one HEAD) only
    for an object whose first bytes are a compression's under a name of no compression suffix, which
    is refused in any case."""
    from pipeline.readers.base import compression_of
    suffix = next((s for magic, s in _MAGIC.items() if head.startswith(magic)), None)
    call_s3 = getattr(fs, "call_s3", None)  # s3fs's: its info() leaves the ContentEncoding out
    if suffix is None or compression_of(path) or call_s3 is None:
        return
    try:
        bucket, key, version = fs.split_path(p)
        head_object = call_s3("head_object", Bucket=bucket, Key=key, **({"VersionId": version} if version else {}))
        encoding = str(head_object.get("ContentEncoding") or "")
    except Exception:  # the reader's own refusal stands
        return
    if encoding.strip().lower() in ("", "identity", "aws-chunked"):
        return
    name = path.rstrip("/").rsplit("/", 1)[-1]
    raise PrepError(f"{path}: stored with Content-Encoding: {encoding}, and S3 sends its bytes as stored: "
                    f"compressed ({suffix}), under a name that does not end in {suffix}, so prep would read them as "
                    f"plain text; rename the object to {name}{suffix}, or upload it uncompressed without "
                    "--content-encoding, then re-run")


def expecting(inputs: dict[str, list]) -> None:
    """From now on, opens of these URLs ({url: [size, stamp]}) check the object is still that one."""
    _expected.clear()
    _expected.update(inputs)


def expects(path: str) -> bool:
    """Whether opens of `path` are checked against the run's plan (`expecting`)."""
    return path in _expected


def changed(path: str, what: str) -> InputChanged:
    return InputChanged(f"{path}: changed since this run planned it ({what}); its units would mix the old and the new "
                        "object: re-run to plan it again (with --overwrite if units were done from the old one)")


def check_unchanged(path: str, info: dict) -> None:
    """Raises InputChanged when `info` (fsspec's, of `path`) is not the object the run planned."""
    planned = _expected.get(path)
    if planned is None:
        return
    size, stamp = info.get("size"), stamp_of(info)
    if size is not None and int(size) != planned[0]:  # None: a server that declares no size (size_of)
        raise changed(path, f"{planned[0]:,} bytes then, {size:,} now")
    if planned[1] is not None and stamp is not None and stamp != planned[1]:
        raise changed(path, f"version {planned[1]} then, {stamp} now")


def gone(path: str, error: BaseException) -> InputUnreachable:
    """The object's absence (404), or, for fsspec's http FileNotFoundError made of another answer (its
    info() raises one for any failed GET: a 403 of a pre-signed URL that expired), that answer."""
    if (answer := http_answer(error)) is not None and answer.status != 404:
        return unreachable(path, answer)
    return InputChanged(f"{path}: gone since this run planned it ({type(error).__name__}: "
                        f"{signed_urls.redact(str(error))}); put it back and {RESUME_FIX} (finished units are kept)")


def http_answer(error: BaseException) -> BaseException | None:
    """The error of `error`'s chain that carries an http status (aiohttp's ClientResponseError), or None."""
    for _ in range(8):  # the chain of causes, not a cycle
        if isinstance(getattr(error, "status", None), int):
            return error
        error = error.__cause__ or error.__context__
        if error is None:
            return None
    return None


def checked_info(path: str, fs, p: str) -> dict:
    """`fs.info(p)` of a URL the run planned, checked against the plan (check_unchanged); a missing
    object is `gone`, not a file that cannot be opened (which under skip failed its units)."""
    try:
        info = retrying(path, lambda: fs.info(p))
    except FileNotFoundError as e:
        raise gone(path, e) from None
    check_unchanged(path, info)
    return info


def _precondition_failed(e: BaseException) -> bool:
    """s3fs's answer to a read whose If-Match ETag the object no longer has (it was replaced while open)."""
    return (type(e).__name__ == "FileExpired"  # s3fs.utils's, with local_expiry_check
            or "PreconditionFailed" in str(e) or "(412)" in str(e))


def _timed_out(error: BaseException) -> str:
    """"connect" for a connection that timed out (aiohttp's ConnectionTimeoutError: the host, not a
    stalled server, review), "read" for a read that did (fsspec's FSTimeoutError says nothing, or s3fs's
    IndexError, "tuple index out of range": its _fetch_range reads args[0] of that empty error), else ""."""
    for _ in range(8):  # the chain of causes, not a cycle
        if "ConnectionTimeout" in type(error).__name__ or "Connect timeout" in str(error):
            return "connect"
        if isinstance(error, TimeoutError):
            return "read"
        error = error.__cause__ or error.__context__
        if error is None:
            return ""
    return ""


def unreachable(path: str, error: BaseException, at: int | None = None, tries: int = 1) -> InputUnreachable:
    if _precondition_failed(error):
        return changed(path, f"replaced while read, at byte {at or 0:,}")
    where = f" at byte {at:,}" if at else ""
    what = f"{type(error).__name__}: {signed_urls.redact(str(error))}"  # aiohttp's names the URL it fetched
    if tries > 1:
        what += f", {tries} tries over {sum(RETRY_DELAYS[:tries - 1]):g} s"
    if (kind := _timed_out(error)) == "connect":
        what = "connecting timed out: the host is unreachable or the network is down"
    elif kind:
        what = (f"no data for {STALL_SECONDS} s, or the timeout storage_options' client_kwargs set: the server stalled"
                if path.startswith(("http://", "https://"))
                else "timed out waiting for data, retries included: the server stalled or the network dropped")
    return InputUnreachable(f"{path}: reading it failed{where} ({what}); check the "
                            f"network, the endpoint and source.storage_options, then {RESUME_FIX} (finished units "
                            "are kept)")


def open_url(path: str, storage_options: dict | None, ahead_to: int | None):
    """`path` opened for reading; a remote file (fsspec's AbstractBufferedFile) through _Fetches."""
    import fsspec
    from fsspec.spec import AbstractBufferedFile
    try:
        fs, p = fsspec.core.url_to_fs(signed_urls.address(path), **(storage_options or {}))
        try:
            # every read() of it is one request of what it asks; http's open asks the size (a HEAD)
            f = retrying(path, lambda: fs.open(p, "rb", cache_type="none"))
        except FileNotFoundError as e:
            if path in _expected:
                raise gone(path, e) from None
            raise
        if path in _expected:
            # s3fs's file holds the HEAD it opened with (and reads with If-Match on its ETag); http's
            # and memory's hold no stamp: one info() more per unit
            info = getattr(f, "details", None) or {}
            if stamp_of(info) is None:
                checked_info(path, fs, p)
            else:
                check_unchanged(path, info)
    except (OSError, PrepError):  # missing, forbidden: base.unreadable names it
        raise
    except Exception as e:
        raise unreachable(path, e) from None
    if not isinstance(f, AbstractBufferedFile):  # memory://, local://: no requests to bound
        return f
    return _StopsAt(_Fetches(path, f, ahead_to, fs, p), ahead_to)


class _StopsAt(io.BufferedReader):
    """A BufferedReader (peek() for the readers' looks) whose reads stop at `ahead_to`: one that would
    cross it returns the bytes before it, and past it each read returns at most PAST_END_BYTES, then
    twice that, and so on. A unit owns the records that start in its range, so its reader reads past
    the end to the end of the last one (usually a few KB), in its blocks of 1-4 MiB: each unit
    fetched a block of the next unit's bytes."""

    def __init__(self, raw: _Fetches, ahead_to: int | None):
        super().__init__(raw, buffer_size=64 << 10)
        self._ahead_to = ahead_to
        self._past = PAST_END_BYTES

    def read(self, size: int | None = -1) -> bytes:
        if self._ahead_to is not None and size is not None and size > 0:
            pos = self.tell()
            if pos < self._ahead_to:
                size = min(size, self._ahead_to - pos)
            else:
                size = min(size, self._past)
                self._past *= 2
        return super().read(size)


class _Fetches(io.RawIOBase):
    """Seekable bytes of a remote file `f` (opened without a cache), fetched REQUEST_BYTES or more at a
    time, never past `ahead_to` until a read starts there; at most one fetch held."""

    def __init__(self, path: str, f, ahead_to: int | None, fs=None, p: str = ""):
        self._path, self._f, self._ahead_to = path, f, ahead_to
        self._fs, self._p = fs, p  # its filesystem and path there, for _encoded_note
        self._pos = 0
        self._held, self._held_at = b"", 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = (0, self._pos, self._f.size)[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, b) -> int:
        i = self._pos - self._held_at
        if not 0 <= i < len(self._held):
            want = len(b)
            if self._ahead_to is None or self._pos < self._ahead_to:
                want = max(want, REQUEST_BYTES)
                if self._ahead_to is not None:
                    want = min(want, self._ahead_to - self._pos)
            self._held, self._held_at, i = self._fetch(want), self._pos, 0
        data = memoryview(self._held)[i:i + len(b)]
        b[:len(data)] = data
        self._pos += len(data)
        return len(data)

    def _fetch(self, n: int) -> bytes:
        try:
            self._f.seek(self._pos)
            data = retrying(self._path, lambda: self._f.read(n))
        except FileNotFoundError as e:  # deleted since it was opened
            if self._path in _expected:
                raise gone(self._path, e) from None
            raise
        except PrepError:
            raise
        except Exception as e:
            raise unreachable(self._path, e, self._pos) from None
        if self._pos == 0 and self._fs is not None:
            _encoded_note(self._path, self._fs, self._p, data[:4])
        return data

    def close(self) -> None:
        try:
            self._f.close()
        finally:
            super().close()
