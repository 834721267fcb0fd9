"""The default staging folder of a URL output (pipeline/remote.py) does not depend on the recipe's
name, which may change between a stop and its resume; one named by an older prep is still found."""

from __future__ import annotations

import hashlib
import os

from pipeline.remote import default_staging_dir

URL = "s3://bucket/prefix/ds"
DIGEST = hashlib.sha256(URL.encode()).hexdigest()[:12]


def test_the_staging_folder_is_the_urls_whatever_the_recipe_name(tmp_path, monkeypatch):
    """It was <name>-<hash of the URL>: a recipe renamed between a stop and its resume started over in
    a new folder, leaving the old one on disk."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_staging_dir(URL) == tmp_path / "prep" / "staging" / DIGEST
    assert default_staging_dir("s3://bucket/other") != default_staging_dir(URL)


def test_a_folder_named_by_an_older_prep_is_still_used(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    staging = tmp_path / "prep" / "staging"
    older, old = staging / f"first-name-{DIGEST}", staging / f"renamed-{DIGEST}"
    for k, folder in enumerate((older, old)):
        (folder / ".prep").mkdir(parents=True)
        os.utime(folder, ns=(k * 10**9, k * 10**9))
    (staging / f"x-{hashlib.sha256(b'other').hexdigest()[:12]}").mkdir()
    assert default_staging_dir(URL) == old  # the latest of this URL's
    (staging / DIGEST).mkdir()
    assert default_staging_dir(URL) == staging / DIGEST


def test_a_trailing_slash_names_the_same_staging_folder(tmp_path, monkeypatch):
    """s3://b/ds/ and s3://b/ds are one output, hashed apart: an upload stopped under one spelling and
    resumed under the other was refused as foreign files. A folder hashed from a slashed URL by an older
    prep is still found for it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_staging_dir(URL + "/") == default_staging_dir(URL) == tmp_path / "prep" / "staging" / DIGEST
    slashed = tmp_path / "prep" / "staging" / hashlib.sha256((URL + "/").encode()).hexdigest()[:12]
    (slashed / ".prep").mkdir(parents=True)
    assert default_staging_dir(URL + "/") == slashed
