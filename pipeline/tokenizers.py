"""Tokenizer backends and the document-boundary policy.

`load_tokenizer(cfg)` runs once in the parent: it resolves the tokenizer (tokenizer.json path,
Hugging Face hub id, or `tiktoken:<encoding>`), finds BOS/EOS ids, and returns a small picklable
`TokenizerSpec`. Each worker calls `spec.build_encoder()` once and then `encode_batch(texts)`.

Two settings that real hub files get wrong for pretraining are forced here:
- truncation and padding in a tokenizer.json are switched off (GPT-2's hub file ships
  `truncation.max_length = 50`: a silent cut to 50 tokens per document);
- special-token strings inside documents are plain text (`encode_special_tokens = True`), so a
  document that mentions `<|endoftext|>` does not produce the EOS id.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.errors import PrepError
from pipeline.recipe import TokenizerConfig

__all__ = ["TokenizerSpec", "Encoder", "load_tokenizer"]

# Looked up (in order) when no tokenizer_config.json names the tokens and the recipe does not either.
EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "<|im_end|>", "[SEP]")
BOS_CANDIDATES = ("<|begin_of_text|>", "<s>", "<bos>", "<|bos|>", "<|startoftext|>", "<|endoftext|>", "[CLS]")


@dataclass(frozen=True)
class TokenizerSpec:
    """Everything a worker needs to rebuild the encoder; also what the manifest records."""

    name: str           # as given in the recipe
    backend: str        # "hf" | "tiktoken"
    definition: str     # tokenizer.json text (hf) or encoding name (tiktoken)
    sha256: str         # of the definition
    vocab_size: int
    boundary: str
    bos_id: int | None
    eos_id: int | None
    backend_reason: str = ""

    def manifest_dict(self) -> dict:
        return {"name": self.name, "backend": self.backend, "sha256": self.sha256, "boundary": self.boundary,
                "bos_id": self.bos_id, "eos_id": self.eos_id, "vocab_size": self.vocab_size}

    def build_encoder(self) -> Encoder:
        if self.backend == "hf":
            from tokenizers import Tokenizer
            tok = Tokenizer.from_str(self.definition)
            _make_plain(tok)
            return Encoder(self, lambda texts: [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)])
        if self.backend == "tiktoken":
            enc = _tiktoken_encoding(self.definition)
            return Encoder(self, lambda texts: enc.encode_ordinary_batch(texts, num_threads=1))
        raise PrepError(f"tokenizer.backend: unknown backend {self.backend!r}")


class Encoder:
    """texts -> (concatenated ids int64[N], lengths int64[docs]) with the boundary ids added."""

    def __init__(self, spec: TokenizerSpec, encode_lists):
        self.spec = spec
        self._encode_lists = encode_lists
        self.prefix = [spec.bos_id] if spec.boundary in ("bos", "both") else []
        self.suffix = [spec.eos_id] if spec.boundary in ("eos", "both") else []

    def encode_lists(self, texts: list[str]) -> list[list[int]]:
        """Raw ids per document, no boundary tokens."""
        return self._encode_lists(texts)

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        lists = self._encode_lists(texts)
        raw = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        extra = len(self.prefix) + len(self.suffix)
        lengths = np.where(raw > 0, raw + extra, 0)  # an empty document gets no boundary ids either
        total = int(lengths.sum())
        if extra:
            pre, suf = self.prefix, self.suffix
            lists = [pre + x + suf if x else x for x in lists]
        ids = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=total)
        return ids, lengths


def _make_plain(tok) -> None:
    tok.no_truncation()
    tok.no_padding()
    tok.encode_special_tokens = True


def _tiktoken_encoding(name: str):
    import tiktoken
    try:
        return tiktoken.get_encoding(name)
    except ValueError as e:
        raise PrepError(f"tokenizer.path: tiktoken:{name}: {e}") from None
    except Exception as e:  # network errors when the BPE file is not cached yet
        raise PrepError(f"tokenizer.path: tiktoken:{name} could not be loaded ({type(e).__name__}); it is "
                        "downloaded on first use: run once online, set TIKTOKEN_CACHE_DIR to a cached copy, "
                        "or give a tokenizer.json path") from None


def load_tokenizer(cfg: TokenizerConfig) -> TokenizerSpec:
    if cfg.path.startswith("tiktoken:"):
        return _load_tiktoken(cfg)
    return _load_hf(cfg)


def _load_tiktoken(cfg: TokenizerConfig) -> TokenizerSpec:
    name = cfg.path.split(":", 1)[1]
    if cfg.backend == "hf":
        raise PrepError(f"tokenizer.backend: hf cannot run {cfg.path}; use backend auto or tiktoken")
    enc = _tiktoken_encoding(name)
    special = dict(enc._special_tokens)
    eos = _pick(cfg.eos_token, special, EOS_CANDIDATES, "eos_token", cfg)
    bos = _pick(cfg.bos_token, special, BOS_CANDIDATES, "bos_token", cfg)
    h = hashlib.sha256(f"{name}\n{enc._pat_str}\n{sorted(special.items())}\n".encode())
    for token, rank in sorted(enc._mergeable_ranks.items(), key=lambda kv: kv[1]):
        h.update(token + b"\x00" + rank.to_bytes(4, "little"))
    ranks_sha = h.hexdigest()
    return _finish(TokenizerSpec(cfg.path, "tiktoken", name, ranks_sha, enc.n_vocab, cfg.boundary, bos, eos), cfg)


def _read_definition(path: str) -> tuple[str, Path | None]:
    """tokenizer.json text and the directory it came from (None for hub downloads)."""
    p = Path(os.path.expanduser(path))
    if p.is_dir():
        p = p / "tokenizer.json"
        if not p.is_file():
            raise PrepError(f"tokenizer.path: {path} is a directory without tokenizer.json")
    if p.is_file():
        return p.read_text(encoding="utf-8"), p.parent
    if path.endswith(".json") or os.sep in path and not path.count("/") == 1:
        raise PrepError(f"tokenizer.path: {path} does not exist (a tokenizer.json path, a hub id such as "
                        "gpt2, or tiktoken:<encoding>)")
    from tokenizers import Tokenizer
    try:
        return Tokenizer.from_pretrained(path).to_str(), None
    except Exception as e:
        raise PrepError(f"tokenizer.path: {path!r} is not a local file and could not be fetched from the "
                        f"Hugging Face hub ({type(e).__name__}: {str(e).splitlines()[0][:120]}); when "
                        "offline, give the path of a downloaded tokenizer.json") from None


def _load_hf(cfg: TokenizerConfig) -> TokenizerSpec:
    from tokenizers import Tokenizer
    definition, folder = _read_definition(cfg.path)
    try:
        tok = Tokenizer.from_str(definition)
    except Exception as e:
        raise PrepError(f"tokenizer.path: {cfg.path} is not a valid tokenizer.json ({e})") from None
    _make_plain(tok)
    special = {t.content: i for i, t in tok.get_added_tokens_decoder().items()}
    named = _config_tokens(folder)
    eos = _pick(cfg.eos_token or named.get("eos_token"), special, EOS_CANDIDATES, "eos_token", cfg, tok)
    bos = _pick(cfg.bos_token or named.get("bos_token"), special, BOS_CANDIDATES, "bos_token", cfg, tok)
    # The definition is canonicalised through tokenizers itself, so the hash ignores JSON formatting.
    sha = hashlib.sha256(definition.encode()).hexdigest()
    vocab = tok.get_vocab_size(with_added_tokens=True)
    max_id = max([vocab - 1, *special.values()])
    spec = TokenizerSpec(cfg.path, "hf", definition, sha, max_id + 1, cfg.boundary, bos, eos)
    return _finish(spec, cfg)


def _config_tokens(folder: Path | None) -> dict:
    """bos_token/eos_token strings from a tokenizer_config.json beside the tokenizer.json, if any."""
    if folder is None or not (folder / "tokenizer_config.json").is_file():
        return {}
    try:
        conf = json.loads((folder / "tokenizer_config.json").read_text())
    except json.JSONDecodeError:
        return {}
    out = {}
    for key in ("bos_token", "eos_token"):
        v = conf.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[key] = v
    return out


def _pick(given, special: dict, candidates, key: str, cfg: TokenizerConfig, tok=None) -> int | None:
    if given is not None:
        tid = special.get(given)
        if tid is None and tok is not None:
            tid = tok.token_to_id(given)
        if tid is None:
            raise PrepError(f"tokenizer.{key}: {given!r} is not a token of {cfg.path}")
        return tid
    for c in candidates:
        if c in special:
            return special[c]
    return None


def _finish(spec: TokenizerSpec, cfg: TokenizerConfig) -> TokenizerSpec:
    needs = {"eos": ["eos"], "bos": ["bos"], "both": ["bos", "eos"], "none": []}[cfg.boundary]
    for which in needs:
        if getattr(spec, f"{which}_id") is None:
            raise PrepError(f"tokenizer.boundary: {cfg.boundary} needs a {which.upper()} token, and none was "
                            f"found in {cfg.path}; set tokenizer.{which}_token to its string, or boundary: none")
    return spec
