"""bos_token / eos_token named by a tokenizer_config.json beside the tokenizer.json."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from pipeline.errors import PrepError
from pipeline.recipe import TokenizerConfig
from pipeline.tokenizers import load_tokenizer


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PREP_CACHE_DIR", str(tmp_path / "cache"))


def folder(tmp_path, demo_tokenizer, **config):
    d = tmp_path / "tok"
    d.mkdir()
    shutil.copy(demo_tokenizer, d / "tokenizer.json")
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    return d


def test_a_token_the_boundary_does_not_use_may_be_missing(tmp_path, demo_tokenizer):
    """An unused `bos_token: <s>` not in the vocabulary once refused a boundary-eos run, naming
    tokenizer.bos_token, a key the user never set."""
    d = folder(tmp_path, demo_tokenizer, eos_token="<|endoftext|>", bos_token="<s>")
    spec = load_tokenizer(TokenizerConfig(path=str(d), boundary="eos"))
    assert spec.eos_id == 0
    with pytest.raises(PrepError, match=r"^tokenizer\.bos_token: '<s>', named by the tokenizer_config\.json beside .*"
                                        r"tok, is not a token of it; set tokenizer\.bos_token"):
        load_tokenizer(TokenizerConfig(path=str(d), boundary="bos"))
    spec = load_tokenizer(TokenizerConfig(path=str(d), boundary="both", bos_token="<|endoftext|>"))
    assert (spec.bos_id, spec.eos_id) == (0, 0)  # the recipe's own setting wins over the config's


def test_the_configs_token_is_used_when_it_is_in_the_vocabulary(tmp_path, demo_tokenizer):
    vocab = json.loads(demo_tokenizer.read_text())["model"]["vocab"]
    word, wid = next((w, i) for w, i in vocab.items() if i > 100)
    d = folder(tmp_path, demo_tokenizer, eos_token=word)
    assert load_tokenizer(TokenizerConfig(path=str(d), boundary="eos", backend="hf")).eos_id == wid


def test_an_unknown_tiktoken_encoding_is_one_line_naming_the_known_ones():
    """tiktoken's own message ran over 3 lines (its plugins and version) into the CLI's one-line error."""
    pytest.importorskip("tiktoken")
    with pytest.raises(PrepError) as e:
        load_tokenizer(TokenizerConfig(path="tiktoken:cl100k"))
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("tokenizer.path: tiktoken:cl100k is not a tiktoken encoding; known: ")
    assert "cl100k_base" in str(e.value)


@pytest.mark.parametrize("text, says", [
    ('{"version": "1.0"}', r"\(it is JSON with no \"model\" key\)$"),
    ('{"hello": 0, "world": 1}', r"\(it is JSON with no \"model\": a vocab\.json of token -> id; prep reads "),
    # GPT-2's own vocab.json has the word "model" among its tokens ("model": 19849)
    ('{"hello": 0, "model": 1}', r"\(it is JSON with no \"model\": a vocab\.json of token -> id; prep reads "),
    ("not json{", r"\(expected ident at line 1 column 2\)$"),
    ("#version: 0.2\nĠ t\n", r"\(it is a merges\.txt; prep reads "),
])
def test_a_json_that_is_not_a_tokenizer_says_what_it_is(tmp_path, text, says):
    """tokenizers answered valid JSON of another shape (GPT-2's vocab.json) with "expected `,` or `}` at
    line 1 column 5", a syntax error the file does not have."""
    path = tmp_path / "tokenizer.json"
    path.write_text(text)
    with pytest.raises(PrepError, match=rf"^tokenizer\.path: {path} is not a valid tokenizer\.json " + says):
        load_tokenizer(TokenizerConfig(path=str(path)))


def test_a_tokenizer_json_with_a_byte_order_mark_is_read(tmp_path, demo_tokenizer):
    """A tokenizer.json saved by a Windows editor begins with a UTF-8 BOM: it was refused as "not a valid
    tokenizer.json (expected value at line 1 column 1)"; the same ids and file hash as without it."""
    text = demo_tokenizer.read_text(encoding="utf-8")
    path = tmp_path / "tokenizer.json"
    path.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode("utf-8"))
    plain = load_tokenizer(TokenizerConfig(path=str(demo_tokenizer), backend="hf"))
    spec = load_tokenizer(TokenizerConfig(path=str(path), backend="hf"))
    assert not spec.definition.startswith("\ufeff")
    assert (spec.vocab_size, spec.eos_id) == (plain.vocab_size, plain.eos_id)
    texts = ["Hello world, again.\n", "数据 \ufeff<|endoftext|>"]
    assert spec.build_encoder().encode_lists(texts) == plain.build_encoder().encode_lists(texts)


def test_the_gpt2_vocab_json_says_it_is_a_vocab_json(gpt2_tokenizer):
    """The real file: its tokens include "model", which hid what it is behind tokenizers' parse error."""
    vocab = gpt2_tokenizer.parent / "vocab.json"
    if not vocab.exists():
        pytest.skip("no vocab.json beside the GPT-2 tokenizer.json")
    with pytest.raises(PrepError, match=r"it is JSON with no \"model\": a vocab\.json of token -> id"):
        load_tokenizer(TokenizerConfig(path=str(vocab)))


def _tiny_tiktoken(monkeypatch) -> object:
    """A small tiktoken encoding, registered as tiktoken:prep_test_tiny (named encodings download their
    BPE file on first use, and the tests run offline): the 256 bytes, "th", "the", " the", and
    <|endoftext|> as its one special token."""
    tiktoken = pytest.importorskip("tiktoken")
    ranks = {bytes([i]): i for i in range(256)} | {b"th": 256, b"the": 257, b" the": 258}
    enc = tiktoken.Encoding("prep_test_tiny", mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 259},
                            pat_str=r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
    monkeypatch.setitem(tiktoken.registry.ENCODINGS, "prep_test_tiny", enc)
    return enc


def test_a_tiktoken_boundary_token_may_be_an_ordinary_token_as_in_a_tokenizer_json(monkeypatch, tmp_path,
                                                                                     demo_tokenizer):
    """A tokenizer.json's eos_token/bos_token may name any token of its vocabulary (tokenizers'
    token_to_id); a tiktoken:<name> one was looked up among the special tokens only, so an ordinary
    token ("\\n" as a document separator) was refused as "not a token of tiktoken:...". Its vocabulary
    is bytes: the setting's UTF-8 is looked up there."""
    enc = _tiny_tiktoken(monkeypatch)
    spec = load_tokenizer(TokenizerConfig(path="tiktoken:prep_test_tiny", eos_token="\n"))
    assert spec.eos_id == 10
    ids, lengths = spec.build_encoder().encode_batch(["the cat", "x"])
    assert ids.tolist() == [*enc.encode_ordinary("the cat"), 10, ord("x"), 10] and lengths.tolist() == [6, 2]
    spec = load_tokenizer(TokenizerConfig(path="tiktoken:prep_test_tiny", boundary="both", bos_token=" the"))
    assert (spec.bos_id, spec.eos_id) == (258, 259)  # the special <|endoftext|> found as before
    with pytest.raises(PrepError, match=r"^tokenizer\.eos_token: 'the cat' is not a token of tiktoken:prep_test_tiny$"):
        load_tokenizer(TokenizerConfig(path="tiktoken:prep_test_tiny", eos_token="the cat"))

    # the same for a tokenizer.json: an ordinary token of its vocabulary, set in the recipe
    vocab = json.loads(demo_tokenizer.read_text())["model"]["vocab"]
    word, wid = next((w, i) for w, i in vocab.items() if i > 100)
    assert load_tokenizer(TokenizerConfig(path=str(demo_tokenizer), eos_token=word, backend="hf")).eos_id == wid


def _trained(tmp_path, specials: list[str]):
    """A small byte-level BPE trained here, with these special tokens (none: a tokenizer.json whose
    added_tokens list is empty)."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(["hello world, the quick brown fox"] * 20, tokenizers.trainers.BpeTrainer(
        vocab_size=300, show_progress=False, special_tokens=specials,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()))
    path = tmp_path / "tokenizer.json"
    path.write_text(tok.to_str())
    return path


@pytest.mark.parametrize("specials, boundary, says", [
    ([], "eos", r"needs an EOS token, and none was found in \S+ \(it has no added or special tokens at all\); "
                r"set tokenizer\.eos_token to the string of one of its tokens, or boundary: none$"),
    (["<pad>", "</s>", "<unk>"], "bos", r"needs a BOS token, and none was found in \S+ \(none of its added tokens, "
                                        r"<pad>, </s>, <unk>, is a known BOS: <\|begin_of_text\|>, <s>, <bos>, \.\.\.\); "
                                        r"set tokenizer\.bos_token to the string of one of its tokens, or boundary: none$"),
])
def test_a_missing_boundary_token_says_what_the_tokenizer_has(tmp_path, specials, boundary, says):
    """The error read "needs a EOS token, and none was found in PATH" whether the file had no special
    tokens at all (trained without any) or only ones prep does not look for (T5's <pad> </s> <unk> for
    a BOS): it now says which, and the fix."""
    path = _trained(tmp_path, specials)
    for backend in ("hf", "auto"):
        with pytest.raises(PrepError, match=rf"^tokenizer\.boundary: {boundary} " + says) as e:
            load_tokenizer(TokenizerConfig(path=str(path), boundary=boundary, backend=backend))
        assert "\n" not in str(e.value)
    set_it = {f"{boundary}_token": "hello"}  # any token of its vocabulary, as the error says
    spec = load_tokenizer(TokenizerConfig(path=str(path), boundary=boundary, **set_it))
    assert getattr(spec, f"{boundary}_id") == json.loads(path.read_text())["model"]["vocab"]["hello"]


def _with_template(tmp_path, demo_tokenizer, single: str):
    from tokenizers import Tokenizer, processors
    tok = Tokenizer.from_file(str(demo_tokenizer))
    tok.post_processor = processors.TemplateProcessing(single=single, special_tokens=[("<|endoftext|>", 0)])
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.mark.parametrize("backend", ["hf", "auto"])
def test_a_post_processor_the_boundary_does_not_match_is_named_in_a_note(tmp_path, demo_tokenizer, backend):
    """Llama 2's and Llama 3's hub files add BOS in a TemplateProcessing, which prep does not run
    (add_special_tokens=False): the dataset then held other ids than `tok.encode(text)` without a word."""
    path = _with_template(tmp_path, demo_tokenizer, "<|endoftext|> $A")
    spec = load_tokenizer(TokenizerConfig(path=str(path), boundary="eos", backend=backend))
    assert ("the post-processor of " + str(path) + " adds <|endoftext|> before each text, which prep does not run: "
            "tokenizer.boundary (eos) alone puts ids around each document; boundary: both writes them too"
            ) in spec.backend_reason
    assert "\n" not in spec.backend_reason
    # the ids are the boundary's alone, as before
    assert spec.build_encoder().encode_batch(["Hello world"])[0].tolist()[-1] == 0
    assert spec.build_encoder().encode_batch(["Hello world"])[0].tolist()[0] != 0
    for boundary in ("bos", "both"):  # these write what the post-processor adds: nothing to say
        spec = load_tokenizer(TokenizerConfig(path=str(path), boundary=boundary, backend=backend))
        assert "post-processor" not in spec.backend_reason
    plain = load_tokenizer(TokenizerConfig(path=str(demo_tokenizer), boundary="eos", backend=backend))
    assert "post-processor" not in plain.backend_reason


def test_a_post_processor_adding_both_ends_names_the_boundary_that_writes_them(tmp_path, demo_tokenizer):
    path = _with_template(tmp_path, demo_tokenizer, "<|endoftext|> $A <|endoftext|>")
    spec = load_tokenizer(TokenizerConfig(path=str(path), boundary="none", backend="hf"))
    assert spec.backend_reason.endswith("adds <|endoftext|> before and <|endoftext|> after each text, which prep does "
                                        "not run: tokenizer.boundary (none) alone puts ids around each document; "
                                        "boundary: both writes them too")
    assert "post-processor" not in load_tokenizer(TokenizerConfig(path=str(path), boundary="both", backend="hf")).backend_reason


def test_a_boundary_token_is_named_by_its_text_in_a_byte_level_vocabulary(tmp_path, demo_tokenizer):
    """The README's example, `eos_token: "\\n"`, was "not a token of" every byte-level tokenizer.json (GPT-2,
    Llama 3), whose vocabulary holds it as "Ċ"; the vocabulary's own spelling still works."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(demo_tokenizer))
    newline, the = tok.token_to_id("Ċ"), tok.token_to_id("Ġthe")
    assert None not in (newline, the)
    for backend in ("hf", "auto"):
        assert load_tokenizer(TokenizerConfig(path=str(demo_tokenizer), eos_token="\n", backend=backend)).eos_id == newline
    assert load_tokenizer(TokenizerConfig(path=str(demo_tokenizer), eos_token="Ċ", backend="hf")).eos_id == newline
    spec = load_tokenizer(TokenizerConfig(path=str(demo_tokenizer), boundary="both", bos_token=" the", eos_token="\n",
                                          backend="hf"))
    assert (spec.bos_id, spec.eos_id) == (the, newline)
    assert spec.build_encoder().encode_batch(["a b"])[0].tolist() == [the, *tok.encode("a b").ids, newline]
    # text the tokenizer makes several tokens of is no one token
    with pytest.raises(PrepError, match=r"^tokenizer\.eos_token: 'xyzzyq the' is not a token of "):
        load_tokenizer(TokenizerConfig(path=str(demo_tokenizer), eos_token="xyzzyq the"))


def _vocab_and_merges(folder, demo_tokenizer, prefix: str = "") -> None:
    """The demo tokenizer's BPE as GPT-2's two legacy files (Megatron names them gpt2-vocab.json, gpt2-merges.txt)."""
    model = json.loads(demo_tokenizer.read_text())["model"]
    folder.mkdir()
    (folder / f"{prefix}vocab.json").write_text(json.dumps(model["vocab"], ensure_ascii=False), encoding="utf-8")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (folder / f"{prefix}merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")


def test_vocab_json_and_merges_txt_get_the_tokenizers_line_that_converts_them(tmp_path, demo_tokenizer):
    """The advice was transformers' AutoTokenizer, which is not installed with prep and needs a config
    beside such files; the line given now runs with tokenizers and gives the same ids."""
    import subprocess
    import sys

    from tokenizers import Tokenizer
    folder = tmp_path / "megatron"
    _vocab_and_merges(folder, demo_tokenizer, prefix="gpt2-")
    for given in (folder, folder / "gpt2-vocab.json", folder / "gpt2-merges.txt"):
        with pytest.raises(PrepError) as e:
            load_tokenizer(TokenizerConfig(path=str(given)))
        message = str(e.value)
        assert "\n" not in message and "AutoTokenizer" not in message
        assert "tokenizers (installed with prep) writes one of a GPT-2-style vocab.json and merges.txt: python -c " in message
    line = re.search(r'python -c "([^"]+)"', message).group(1)
    subprocess.run([sys.executable, "-c", line], check=True)
    spec = load_tokenizer(TokenizerConfig(path=str(folder), backend="hf"))
    texts = ["Hello world, again.\n", "The loader shuffles <|endoftext|> tokens"]
    want = load_tokenizer(TokenizerConfig(path=str(demo_tokenizer), backend="hf"))
    assert spec.build_encoder().encode_lists(texts) == want.build_encoder().encode_lists(texts)
    assert spec.eos_id == want.eos_id == Tokenizer.from_file(str(demo_tokenizer)).token_to_id("<|endoftext|>")


def test_a_vocab_json_beside_a_tokenizer_json_names_that_file(tmp_path, demo_tokenizer):
    folder = tmp_path / "gpt2"
    _vocab_and_merges(folder, demo_tokenizer)
    shutil.copy(demo_tokenizer, folder / "tokenizer.json")
    with pytest.raises(PrepError, match=r"it is a merges\.txt; the tokenizer\.json beside it is one: tokenizer\.path: "
                                        + str(folder / "tokenizer.json") + r"\)$"):
        load_tokenizer(TokenizerConfig(path=str(folder / "merges.txt")))


def test_a_tokenizer_config_with_a_byte_order_mark_gives_its_eos_token(tmp_path, demo_tokenizer):
    """A BOM'd tokenizer_config.json was skipped as invalid JSON without a word, and its eos_token with it:
    the dataset's boundary id was another (review). A config that is not JSON is named, not skipped."""
    import shutil

    from tokenizers import Tokenizer
    folder = tmp_path / "tok"
    folder.mkdir()
    shutil.copy(demo_tokenizer, folder / "tokenizer.json")
    chosen = Tokenizer.from_file(str(demo_tokenizer)).token_to_id("Ġthe")
    (folder / "tokenizer_config.json").write_text('\ufeff{"eos_token": "Ġthe"}', encoding="utf-8")
    assert load_tokenizer(TokenizerConfig(path=str(folder), backend="hf")).eos_id == chosen
    (folder / "tokenizer_config.json").write_text('{"eos_token": ', encoding="utf-8")
    with pytest.raises(PrepError, match=r"tokenizer_config.json: not valid JSON .*fix the file, or move it out"):
        load_tokenizer(TokenizerConfig(path=str(folder), backend="hf"))


def test_a_boundary_text_is_no_token_that_decodes_to_it_only_at_a_texts_start(tmp_path):
    """A SentencePiece decoder strips a text's leading space: `eos_token: "token"` was taken for "▁token",
    and every document boundary decoded as " token" (review)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(["a token and another token here"] * 50,
                            trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "</s>"]))
    # a word the vocabulary holds only with its space mark ("▁another", no "another")
    word = next(t[1:] for t in sorted(tok.get_vocab()) if t.startswith("▁") and len(t) > 2
                and tok.token_to_id(t[1:]) is None)
    assert len(tok.encode(word, add_special_tokens=False).ids) == 1  # "▁word": what the old check took
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    with pytest.raises(PrepError, match=rf"^tokenizer\.eos_token: '{word}' is not a token of "):
        load_tokenizer(TokenizerConfig(path=str(path), eos_token=word, backend="hf"))
    assert load_tokenizer(TokenizerConfig(path=str(path), eos_token="</s>", backend="hf")).eos_id == tok.token_to_id("</s>")
