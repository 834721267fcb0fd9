"""The parent's tokenizer proof is cached across runs (pipeline/tokenizer_cache.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pipeline import tokenizers as ptok
from pipeline.recipe import TokenizerConfig
from pipeline.tokenizers import load_tokenizer

tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PREP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tokenizers"


@pytest.fixture
def no_tokenizers_load(monkeypatch):
    """Fails any attempt to load a tokenizer.json into `tokenizers` (what a cache hit skips)."""
    def refuse(*a, **k):
        raise AssertionError("tokenizers was loaded: the cache was not used")
    monkeypatch.setattr(tokenizers.Tokenizer, "from_str", refuse)


def _copy(demo_tokenizer, tmp_path, name="tok.json", edit=None):
    d = json.loads(demo_tokenizer.read_text())
    if edit:
        edit(d)
    path = tmp_path / name
    path.write_text(json.dumps(d))
    return path


def test_second_load_is_served_from_the_cache(demo_tokenizer, tmp_path, cache, monkeypatch):
    path = _copy(demo_tokenizer, tmp_path)
    first = load_tokenizer(TokenizerConfig(path=str(path)))
    assert len(list(cache.glob("*.pickle"))) == 1
    monkeypatch.setattr(tokenizers.Tokenizer, "from_str", lambda *a: pytest.fail("cache not used"))
    again = load_tokenizer(TokenizerConfig(path=str(path)))
    assert again.manifest_dict() == first.manifest_dict()
    assert (again.backend, again.engine_data, again.definition) == (first.backend, first.engine_data, first.definition)
    # the same file under another name is the same tokenizer; the spec names it as the recipe does
    other = _copy(demo_tokenizer, tmp_path, "renamed.json")
    renamed = load_tokenizer(TokenizerConfig(path=str(other)))
    assert renamed.name == str(other) and renamed.sha256 == first.sha256
    assert (renamed.build_encoder().encode_batch(["cached and proven"])[0]
            == first.build_encoder().encode_batch(["cached and proven"])[0]).all()


@pytest.mark.parametrize("change", ["definition", "settings"])
def test_a_changed_tokenizer_or_setting_is_proven_again(demo_tokenizer, tmp_path, cache, change):
    path = _copy(demo_tokenizer, tmp_path)
    base = load_tokenizer(TokenizerConfig(path=str(path)))
    if change == "definition":
        _copy(demo_tokenizer, tmp_path, edit=lambda d: d["model"]["vocab"].update({"zzzz-new": len(d["model"]["vocab"])}))
        cfg = TokenizerConfig(path=str(path))
    else:
        cfg = TokenizerConfig(path=str(path), boundary="none")
    spec = load_tokenizer(cfg)
    assert len(list(cache.glob("*.pickle"))) == 2
    if change == "definition":
        assert spec.sha256 != base.sha256 and spec.vocab_size == base.vocab_size + 1
    else:
        assert spec.boundary == "none" and base.boundary == "eos"


def test_a_damaged_entry_is_ignored_and_rewritten(demo_tokenizer, tmp_path, cache):
    path = _copy(demo_tokenizer, tmp_path)
    first = load_tokenizer(TokenizerConfig(path=str(path)))
    (entry,) = cache.glob("*.pickle")
    entry.write_bytes(entry.read_bytes()[:100])
    again = load_tokenizer(TokenizerConfig(path=str(path)))
    assert again.manifest_dict() == first.manifest_dict()
    assert entry.stat().st_size > 100


def test_cache_off_writes_nothing(demo_tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("PREP_CACHE_DIR", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    spec = load_tokenizer(TokenizerConfig(path=str(_copy(demo_tokenizer, tmp_path))))
    assert spec.backend in ("gigatoken", "tiktoken", "hf")
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "home").exists()


def test_an_unwritable_cache_does_not_stop_the_run(demo_tokenizer, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("PREP_CACHE_DIR", str(blocker / "cache"))
    spec = load_tokenizer(TokenizerConfig(path=str(_copy(demo_tokenizer, tmp_path))))
    assert spec.vocab_size > 0


def test_a_cached_spec_of_another_definition_is_not_trusted(demo_tokenizer, tmp_path, cache, monkeypatch):
    """An entry whose recorded sha256 is not the file's (a hash-key collision, a hand-copied file) is
    ignored: the tokenizer is proven again."""
    path = _copy(demo_tokenizer, tmp_path)
    load_tokenizer(TokenizerConfig(path=str(path)))
    (entry,) = cache.glob("*.pickle")
    import pickle
    spec = pickle.loads(entry.read_bytes())
    entry.write_bytes(pickle.dumps(replace(spec, sha256="0" * 64, backend="hf")))
    again = load_tokenizer(TokenizerConfig(path=str(path)))
    assert again.sha256 != "0" * 64 and again.backend == spec.backend
    assert ptok.TokenizerSpec is type(again)


def test_engine_versions_are_importlib_metadata_s():
    from importlib.metadata import PackageNotFoundError, version

    from pipeline import tokenizer_cache

    def meta(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return "-"
    assert tokenizer_cache._versions() == [f"{n} {meta(n)}" for n in tokenizer_cache._ENGINES]


def test_engine_versions_come_from_the_first_dist_info_on_the_path(tmp_path, monkeypatch):
    from pipeline import tokenizer_cache
    first, second = tmp_path / "a", tmp_path / "b"
    for d, names in ((first, ["Tokenizers-9.1.dist-info", "unrelated-1.0.dist-info"]),
                     (second, ["tokenizers-0.1.dist-info", "gigatoken-2.0rc1.dist-info", "tiktoken-3.dist-info"])):
        for name in names:
            (d / name).mkdir(parents=True)
    (tmp_path / "plain.zip").write_bytes(b"")
    monkeypatch.setattr(tokenizer_cache.sys, "path", [str(tmp_path / "plain.zip"), str(tmp_path / "none"), str(first),
                                                      str(second)])
    assert tokenizer_cache._versions() == ["tokenizers 9.1", "gigatoken 2.0rc1", "tiktoken 3"]
    # one not found as a dist-info: importlib.metadata answers for it ("-": not installed at all)
    monkeypatch.setattr(tokenizer_cache, "_ENGINES", ("tokenizers", "no-such-engine-anywhere"))
    assert tokenizer_cache._versions() == ["tokenizers 9.1", "no-such-engine-anywhere -"]
