"""A cache_dir that cannot be used: one line naming it and the fix, not a FileNotFoundError /
FileExistsError traceback from the first pass; an empty one no longer means the working directory.
pin_memory takes the flags the other boolean options take."""

from pathlib import Path, PurePosixPath

import pytest

from loaders import MemmapLoader
from pipeline.errors import PrepError

from .loaderkit import collect


@pytest.mark.parametrize("mode", ["packed", "grouped"])
@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_an_unwritable_cache_dir_is_one_line(dataset, tmp_path, mode, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    cache_dir = blocker if where == "a file" else blocker / "cache"
    loader = MemmapLoader(dataset, batch_size=4, seq_len=32, mode=mode, cache_dir=cache_dir)
    with pytest.raises(PrepError) as e:
        collect(loader, limit=1)
    message = str(e.value)
    assert f"loader cache directory {cache_dir} cannot be written" in message and "cache_dir=False" in message
    assert "\n" not in message
    assert collect(MemmapLoader(dataset, batch_size=4, seq_len=32, mode=mode, cache_dir=False), limit=1)


@pytest.mark.parametrize("empty", ["", Path(""), PurePosixPath("")], ids=["str", "Path", "PurePosixPath"])
def test_an_empty_cache_dir_is_refused(dataset, tmp_path, monkeypatch, empty):
    """Path("") is Path(".") (os.fspath gives "."), so Path(os.environ.get("CACHE", "")) got past the check
    of "" and the cache files went into the working directory."""
    monkeypatch.chdir(tmp_path)  # it wrote the cache files into the working directory
    with pytest.raises(PrepError, match=r"cache_dir=\S+ names no directory") as e:
        collect(MemmapLoader(dataset, batch_size=4, seq_len=32, mode="packed", cache_dir=empty), limit=1)
    assert "\n" not in str(e.value) and "'.' as a string" in str(e.value)
    assert list(tmp_path.iterdir()) == []
    # the working directory named as a string is taken as asked
    assert collect(MemmapLoader(dataset, batch_size=4, seq_len=32, mode="packed", cache_dir="."), limit=1)
    assert list(tmp_path.iterdir())


def test_pin_memory_takes_flags_only(dataset):
    """pin_memory="no" (a YAML string) was truthy, so batches were pinned; the flags other options take are taken."""
    with pytest.raises(PrepError, match=r"pin_memory must be True, False or None .*got 'no'"):
        MemmapLoader(dataset, batch_size=4, seq_len=32, pin_memory="no")
    assert MemmapLoader(dataset, batch_size=4, seq_len=32, pin_memory=0).pin is False
