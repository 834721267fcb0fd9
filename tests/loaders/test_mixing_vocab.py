"""A mix of one vocabulary vouched for (expect_tokenizer) whose datasets record different vocabulary sizes
(a tokenizer saved again with added tokens): it was mixed silently, and a model sized from the first
dataset's manifest met ids past its embedding. It warns, and the loader's vocab_size is the largest."""

import pytest

from loaders import MemmapLoader

from .loaderkit import collect, lognormal_lengths, make_dataset

GPT2 = {"name": "gpt2", "backend": "test", "sha256": "ab" * 32, "boundary": "eos"}


def test_a_mix_of_two_vocabulary_sizes_warns_and_names_the_largest(tmp_path):
    import json
    base = make_dataset(tmp_path / "base", lognormal_lengths(40, seed=1, hi=100), dtype="uint16", token_ids="random")
    grown = make_dataset(tmp_path / "grown", lognormal_lengths(40, seed=2, hi=100), dtype="uint16", token_ids="random",
                         tokenizer={**GPT2, "sha256": "cd" * 32})
    manifest = json.loads((grown / "manifest.json").read_text())
    manifest["vocab_size"] = 50304  # GPT-2 with 47 added tokens
    (grown / "manifest.json").write_text(json.dumps(manifest, sort_keys=True))
    with pytest.warns(UserWarning, match=r"different vocabulary sizes \(.*base: 50257, .*grown: 50304\): token ids "
                                         r"reach 50303; size the model's embedding for 50304 ids"):
        loader = MemmapLoader([(base, 1), (grown, 1)], expect_tokenizer="gpt2", batch_size=2, seq_len=16, cache_dir=False)
    assert loader.vocab_size == 50304 and collect(loader, limit=1)
    assert MemmapLoader(base, batch_size=2, seq_len=16, cache_dir=False).vocab_size == 50257
