"""Pre-signed http(s) URLs (S3's `?X-Amz-Signature=...`, GCS's `X-Goog-Signature`, Azure's SAS `sig=`,
CloudFront's `Signature`): their signing query is a credential, valid for hours or days to anyone who
reads it. A run names such an input by the URL less that query (its `name`) in everything it writes or
prints (manifest, plan.json, journal, rejects, messages); only the reads fetch the signed URL
(`address`). A URL re-signed before a resume (same object, new signature) is then the same input:
the plan compares names, sizes and ETags, never signatures.

The signed URL is known to a process from the recipe (`remember`: the parent when it lists its files,
each worker when it starts); a name opened where it is not remembered is fetched unsigned (the
server's 403 then names the URL, without a secret)."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote_plus, urlsplit, urlunsplit

__all__ = ["address", "is_signed", "name", "redact", "remember", "remember_sources"]

# a query holding one of these is signed (lower case: S3 SigV4 and SigV2, GCS V4 and V2, Azure SAS, CloudFront)
_SIGNATURES = {"x-amz-signature", "signature", "x-goog-signature", "sig"}
# the query parameters of a signing scheme (each changes when the URL is re-signed), left out of a signed URL's name
_SIGNING = _SIGNATURES | {
    "x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-expires", "x-amz-signedheaders",
    "x-amz-security-token", "awsaccesskeyid", "expires", "x-goog-algorithm", "x-goog-credential",
    "x-goog-date", "x-goog-expires", "x-goog-signedheaders", "googleaccessid", "key-pair-id", "policy",
    "sv", "ss", "srt", "sp", "se", "st", "spr", "sr", "si", "skoid", "sktid", "skt", "ske", "sks", "skv",
}
# a secret parameter's value anywhere in a text (an aiohttp error's str() holds the URL it fetched)
_SECRET_VALUE = re.compile(r"(?i)([?&](?:x-amz-signature|x-amz-credential|x-amz-security-token|signature|"
                           r"x-goog-signature|x-goog-credential|sig|awsaccesskeyid|googleaccessid|policy)=)[^&\s'\"<>]*")

# name -> signed URL, in this process
_ADDRESSES: dict[str, str] = {}


def is_signed(url: str) -> bool:
    if not url.startswith(("http://", "https://")) or "?" not in url:
        return False
    return any(k.lower() in _SIGNATURES for k, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True))


def name(url: str) -> str:
    """`url` less its signing query (kept: any other parameter, such as ?download=1); itself if unsigned."""
    if not is_signed(url):
        return url
    parts = urlsplit(url)
    # the other parameters kept as written: parse_qsl + urlencode made `f=a%20b` and `f=a+b` (two objects
    # on some servers) one name, so one of them was read twice (review)
    kept = [pair for pair in parts.query.split("&") if unquote_plus(pair.split("=", 1)[0]).lower() not in _SIGNING]
    return urlunsplit(parts._replace(query="&".join(kept)))


def remember(url: str) -> str:
    """The name of `url`, whose signed form reads now fetch (`address`)."""
    public = name(url)
    if public != url:
        _ADDRESSES[public] = url
    return public


def remember_sources(sources) -> None:
    """Remember each signed URL of the recipe's sources (a worker's start: the parent's listing did it there)."""
    for source in sources:
        for path in source.paths():
            remember(path)


def address(path: str) -> str:
    """What to fetch for the input named `path`: its signed URL when one is remembered."""
    return _ADDRESSES.get(path, path)


def redact(text: str) -> str:
    """`text` with every signed URL of this process shown by its name, and any other secret query
    value masked (`X-Amz-Signature=***`)."""
    for public, signed in _ADDRESSES.items():
        if signed in text:
            text = text.replace(signed, public)
    return _SECRET_VALUE.sub(r"\1***", text)
