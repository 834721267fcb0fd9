"""URLs with credentials before their host are refused, masked, before anything reads them."""

import pytest

from pipeline.errors import PrepError
from pipeline.source_files import refuse_url_credentials


@pytest.mark.parametrize("url, shown", [
    ("https://u:p@host/x.jsonl", "https://***@host/x.jsonl"),
    # a password holding "@" showed its end ("https://***@ss@host/...")
    ("https://u:pa@ss@host/x.jsonl", "https://***@host/x.jsonl"),
    # a secret holding "/" (AWS secret keys do) ended urlsplit's host early: not refused, printed whole
    ("s3://AKIAIOSFODNN7EXAMPLE:wJalr/K7MDENG@bucket/x.jsonl", "s3://***@bucket/x.jsonl"),
    ("https://u:p/w@host/x.jsonl", "https://***@host/x.jsonl"),
    ("https://TOKEN@github.com/x.jsonl", "https://***@github.com/x.jsonl"),
    # a password holding "?" or "#" (review)
    ("https://u:pa?ss@host/x.jsonl", "https://***@host/x.jsonl"),
    ("https://u:pa#ss@host/x.jsonl", "https://***@host/x.jsonl"),
    # a secret of digits then "/" where no port can be (review: taken for a port and accepted)
    ("s3://AKIAXXXX:9/abcdEFGH+ijkl@bucket/data.jsonl", "s3://***@bucket/data.jsonl"),
    ("s3://AKIAXXXX:12#abc@bucket/x.jsonl", "s3://***@bucket/x.jsonl"),
    ("https://user:pass@host:8000/x.jsonl", "https://***@host:8000/x.jsonl"),
])
def test_credentials_are_refused_and_never_shown(url, shown):
    with pytest.raises(PrepError) as e:
        refuse_url_credentials(url, "source.path")
    message = str(e.value)
    assert message.startswith(f"source.path: {shown} holds credentials")
    assert not any(secret in message for secret in ("pa@ss", "wJalr", "K7MDENG", "AKIA", "u:p", "TOKEN", ":p/w", "ss@",
                                                    "abcdEFGH", "12#abc", "user:pass@"))


@pytest.mark.parametrize("url", ["hf://datasets/org/name@main/data/*.parquet", "s3://bucket/user@example.com/a.jsonl",
                                 "https://host/x.jsonl?sig=a:b@c", "http://host:8080/x.jsonl", "s3://bucket/a:b@c/x",
                                 # a port, then a path with "@" (review: refused as credentials)
                                 "http://localhost:8000/data/user@example.com.jsonl",
                                 "https://hf.example:443/datasets/org/name@main/train.jsonl",
                                 "http://[::1]:8000/a@b.jsonl", "http://host:8000?x=a@b",
                                 "http://host:8000/x@y.jsonl"])
def test_an_at_sign_in_a_path_or_query_is_no_credential(url):
    refuse_url_credentials(url, "source.path")  # hf://...@revision is how a dataset's revision is named
