"""A tokenizer named by hub id: fetched while the hub answers; offline, the local cache's copy at once
(huggingface_hub's own retries took ~23 s per run), or one clear error."""

from __future__ import annotations

import logging
import socket
from types import SimpleNamespace

import pytest

from pipeline import hub as hub_probe
from pipeline import tokenizers as ptok
from pipeline.errors import PrepError

hub = pytest.importorskip("huggingface_hub")


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache; `put(repo, text)` adds a repo's tokenizer.json as a download would."""
    root = tmp_path / "hf"
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))

    def put(repo: str, text: str) -> None:
        folder = root / f"models--{repo.replace('/', '--')}"
        (folder / "refs").mkdir(parents=True)
        (folder / "refs" / "main").write_text("0123abc")
        (folder / "snapshots" / "0123abc").mkdir(parents=True)
        (folder / "snapshots" / "0123abc" / "tokenizer.json").write_text(text)
    return put


def _no_config(repo, filename, **kw):
    from huggingface_hub.errors import EntryNotFoundError
    raise EntryNotFoundError(f"{repo} has no {filename}")


@pytest.fixture
def no_download(monkeypatch):
    from tokenizers import Tokenizer

    def refuse(*a, **k):
        raise AssertionError("the hub was asked")
    monkeypatch.setattr(Tokenizer, "from_pretrained", refuse)


def test_offline_and_not_cached_is_one_error_at_once(hf_cache, no_download, monkeypatch):
    monkeypatch.setattr(hub_probe, "unreachable", lambda: "huggingface.co: Name or service not known")
    with pytest.raises(PrepError, match=r"'org/tok' is not a local file, not in the local Hugging Face cache, and "
                                        r"could not be fetched from the hub \(huggingface.co: Name or service"):
        ptok._read_definition("org/tok")


def test_offline_uses_the_cached_copy(hf_cache, no_download, monkeypatch, caplog):
    hf_cache("org/tok", '{"cached": true}')
    monkeypatch.setattr(hub_probe, "unreachable", lambda: "no route")
    with caplog.at_level(logging.WARNING, logger="prep"):
        assert ptok._read_definition("org/tok") == ('{"cached": true}', None)
    assert "the Hugging Face hub is not reachable (no route); using the copy in the local cache" in caplog.text


def test_online_the_hub_is_asked_first(hf_cache, monkeypatch):
    from tokenizers import Tokenizer
    hf_cache("org/tok", '{"cached": true}')
    monkeypatch.setattr(hub_probe, "unreachable", lambda: None)
    monkeypatch.setattr(hub, "hf_hub_download", _no_config)
    monkeypatch.setattr(Tokenizer, "from_pretrained", lambda path: SimpleNamespace(to_str=lambda: '{"fresh": 1}'))
    assert ptok._read_definition("org/tok") == ('{"fresh": 1}', None)
    # the hub answers but refuses (no such repo, a gated one): the cache still serves, else the error says why
    def gated(path):
        raise OSError("401 Client Error\nmore lines")
    monkeypatch.setattr(Tokenizer, "from_pretrained", gated)
    assert ptok._read_definition("org/tok") == ('{"cached": true}', None)
    with pytest.raises(PrepError, match=r"could not be fetched from the hub \(OSError: 401 Client Error\)"):
        ptok._read_definition("org/other")


def test_reachability_probe(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("probed the network")
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_probe.unreachable() == "HF_HUB_OFFLINE is set"
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("https_proxy", "http://proxy.example:3128")  # the hub is reached through it
    assert hub_probe.unreachable() is None
    monkeypatch.undo()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # a port nothing listens on (bound, never listening)
    port = closed.getsockname()[1]
    try:
        for var in ("HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        assert hub_probe.unreachable().startswith("127.0.0.1: ")
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert hub_probe.unreachable() is None
        server.close()
    finally:
        closed.close()


def test_files_that_are_not_a_tokenizer_json_say_what_to_do(tmp_path):
    (tmp_path / "tokenizer.model").write_bytes(b"\x0a\x87\xff\x00sentencepiece")
    with pytest.raises(PrepError, match=r"tokenizer.model is not a tokenizer.json \(not UTF-8 text: a binary file "
                                        r"such as a SentencePiece \.model\); prep reads tokenizer.json files: "
                                        r"transformers writes one .*save_pretrained"):
        ptok._read_definition(str(tmp_path / "tokenizer.model"))
    (tmp_path / "vocab.json").write_text("{}")
    (tmp_path / "merges.txt").write_text("")
    with pytest.raises(PrepError, match=r"is a directory without tokenizer.json \(it has merges.txt, tokenizer.model, "
                                        r"vocab.json\); prep reads tokenizer.json files"):
        ptok._read_definition(str(tmp_path))
    (tmp_path / "empty").mkdir()
    with pytest.raises(PrepError, match=r"empty is a directory without tokenizer.json$"):
        ptok._read_definition(str(tmp_path / "empty"))


def _qwen_like(demo_tokenizer) -> tuple[str, int]:
    """The demo tokenizer.json with a second special token, `<|im_end|>`: (its text, that token's id)."""
    import json
    d = json.loads(demo_tokenizer.read_text())
    new_id = max(d["model"]["vocab"].values()) + 1
    d["added_tokens"].append({"id": new_id, "content": "<|im_end|>", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True})
    return json.dumps(d), new_id


@pytest.mark.parametrize("online", [False, True])
def test_a_hub_id_takes_its_boundary_token_from_the_repos_tokenizer_config(hf_cache, demo_tokenizer, monkeypatch,
                                                                           tmp_path, online):
    """A hub id ignored the repo's tokenizer_config.json, which a folder of the same files reads: by
    hub id, Qwen2.5-Instruct's boundary was <|endoftext|>, as a folder <|im_end|> (its config's eos)."""
    import json

    from tokenizers import Tokenizer

    from pipeline.recipe import TokenizerConfig
    monkeypatch.setenv("PREP_CACHE_DIR", str(tmp_path / "cache"))
    text, im_end = _qwen_like(demo_tokenizer)
    hf_cache("org/chat", text)
    config = json.dumps({"eos_token": "<|im_end|>"})
    if online:
        monkeypatch.setattr(hub_probe, "unreachable", lambda: None)
        monkeypatch.setattr(Tokenizer, "from_pretrained", lambda path: Tokenizer.from_str(text))
        fetched = tmp_path / "fetched"
        fetched.mkdir()
        (fetched / "tokenizer_config.json").write_text(config)
        monkeypatch.setattr(hub, "hf_hub_download", lambda repo, name, **kw: str(fetched / name))
    else:
        monkeypatch.setattr(hub_probe, "unreachable", lambda: "no route")
        snapshot = next((tmp_path / "hf").glob("models--org--chat/snapshots/*"))
        (snapshot / "tokenizer_config.json").write_text(config)
    spec = ptok.load_tokenizer(TokenizerConfig(path="org/chat", boundary="eos", backend="hf"))
    assert spec.eos_id == im_end != 0  # 0 is <|endoftext|>, the built-in candidate it took before


def test_a_hub_id_probes_the_hub_once(hf_cache, no_download, monkeypatch):
    """The tokenizer_config.json lookup probed again: each probe may wait its 3 s timeout where the
    network drops packets."""
    hf_cache("org/tok", '{"cached": true}')
    probes = []
    monkeypatch.setattr(hub_probe, "unreachable", lambda: probes.append(1) or "no route")
    assert ptok._read_definition("org/tok") == ('{"cached": true}', None)
    assert len(probes) == 1
