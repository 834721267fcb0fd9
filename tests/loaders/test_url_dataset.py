"""A dataset given as a URL (an s3:// output.dir that `prep tokenize` uploaded to): the loader and
`verify_dataset` read local directories only, and say so in one line naming the URL as given."""

from __future__ import annotations

import pytest

from pipeline.errors import PrepError
from pipeline.verify import verify_dataset


@pytest.mark.parametrize("url", ["s3://bkt/ds", "https://host.example/data/ds/", "memory://bkt/ds"])
def test_a_url_dataset_is_refused_naming_the_url_and_the_staging_copy(url):
    """Path() made `s3://bkt/ds` into `s3:/bkt/ds`, and the error was "s3:/bkt/ds: no such directory"."""
    from loaders import MemmapLoader
    for build, reader in ((lambda: MemmapLoader(url, split="train", batch_size=2, seq_len=8), "the loader"),
                          (lambda: verify_dataset(url), "verify_dataset")):  # not `prep verify`: not run
        with pytest.raises(PrepError) as e:
            build()
        assert str(e.value).startswith(f"{url.rstrip('/')}: a URL; {reader} reads a local directory: give it the "
                                       "`prep tokenize` run's staging copy (output.local_dir"), str(e.value)
        assert "\n" not in str(e.value)


def test_a_local_folder_named_like_a_scheme_stays_a_path(tmp_path, monkeypatch):
    """`s3:/x` that exists here is a local path (a folder named "s3:"), and a drive letter is no scheme."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s3:" / "ds").mkdir(parents=True)
    report = verify_dataset("s3://ds")  # checked as the local folder s3:/ds (no manifest there: a problem)
    assert report.problems and "a URL" not in " ".join(report.problems)
    with pytest.raises(PrepError, match=r"^C:/data/ds: no such directory$"):
        verify_dataset("C:/data/ds")
