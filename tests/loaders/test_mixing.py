"""Weighted mixtures: what may be mixed, and weights."""

import warnings

import numpy as np
import pytest

from loaders import MemmapLoader
from pipeline.errors import PrepError

from .loaderkit import OFFSET_B, collect, lognormal_lengths, make_dataset

KW = dict(batch_size=4, seq_len=32, cache_dir=False)
GPT2 = {"name": "gpt2", "backend": "test", "sha256": "ab" * 32, "boundary": "eos"}


@pytest.fixture(scope="module")
def other_tokenizer(tmp_path_factory):
    tok = {"name": "llama", "backend": "test", "sha256": "cd" * 32, "boundary": "eos"}
    return make_dataset(tmp_path_factory.mktemp("tok") / "t", lognormal_lengths(100, seed=7, hi=300), tokenizer=tok)


@pytest.fixture(scope="module")
def bos_boundary(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("bos") / "t", lognormal_lengths(100, seed=8, hi=300),
                        tokenizer={**GPT2, "boundary": "bos"})


@pytest.mark.parametrize("mode", ["windows", "packed", "grouped"])
def test_datasets_of_different_tokenizers_are_refused(dataset, other_tokenizer, mode):
    """They were mixed silently: ids of one vocabulary read as the other's."""
    with pytest.raises(PrepError, match=r"different tokenizers: .*'gpt2'.*'llama'.*expect_tokenizer"):
        MemmapLoader([(dataset, 0.5), (other_tokenizer, 0.5)], mode=mode, **KW)


def test_expect_tokenizer_vouches_for_a_mix_of_one_vocabulary(dataset, tmp_path):
    """The same tokenizer saved twice has two sha256s: naming it (expect_tokenizer) takes the mix."""
    twin = make_dataset(tmp_path / "twin", lognormal_lengths(50, seed=9, hi=200), tokenizer={**GPT2, "sha256": "ef" * 32})
    with pytest.raises(PrepError, match="different tokenizers"):
        MemmapLoader([(dataset, 1), (twin, 1)], **KW)
    assert collect(MemmapLoader([(dataset, 1), (twin, 1)], expect_tokenizer="gpt2", **KW), limit=2)


def test_different_boundaries_warn(dataset, bos_boundary):
    with pytest.warns(UserWarning, match=r"different document boundaries .*: eos, .*: bos"):
        MemmapLoader([(dataset, 1), (bos_boundary, 1)], **KW)


def test_a_dataset_listed_twice_warns(dataset, dataset_b):
    """Accepted silently, and every sample was then drawn twice per epoch, once per entry."""
    with pytest.warns(UserWarning, match=r"listed 2 times in the mix \(entries \[0, 2\]\).*summed weight"):
        loader = MemmapLoader([(dataset, 1), (dataset_b, 1), (dataset, 1)], **KW)
    assert loader.plan.num_positions > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one dataset of each: no warning
        MemmapLoader([(dataset, 1), (dataset_b, 1)], **KW)


@pytest.mark.parametrize("weight, shown", [(0, "0.0"), (-1, "-1.0"), (float("nan"), "nan"), (float("inf"), "inf")])
def test_a_weight_that_is_not_positive_names_its_dataset(dataset, dataset_b, weight, shown):
    """Was a ValueError from the sampler listing the weights, naming neither the dataset nor the fix."""
    with pytest.raises(PrepError, match=rf"mixture weight of {dataset_b} is {shown}; .*drop its entry"):
        MemmapLoader([(dataset, 1), (dataset_b, weight)], **KW)


@pytest.mark.parametrize("weights", [(1.0, 1.0001, 1.0003), (1234567, 2345678, 987654)],
                         ids=["near-equal", "token-counts"])
def test_weights_without_a_short_exact_period_mix(dataset, dataset_b, tmp_path, weights):
    """Weights like token counts have no short exact period: the loader raised the sampler's ValueError
    ("need a period of 12495753059 samples; round them") as a traceback. They are apportioned instead."""
    dataset_c = make_dataset(tmp_path / "c", lognormal_lengths(200, seed=8, hi=300), offset=2 * OFFSET_B)
    loader = MemmapLoader(list(zip([dataset, dataset_b, dataset_c], weights)), **KW)
    firsts = np.concatenate([b["input_ids"][:, 0] for b in collect(loader)])  # a window is one dataset's
    drawn = np.bincount(firsts // OFFSET_B, minlength=3) / firsts.size
    assert np.abs(drawn - np.array(weights) / sum(weights)).max() < 0.01


def test_a_weight_too_small_for_the_interleave_names_its_dataset(dataset, dataset_b):
    """A share under 1 in 100,000 rounded to no position: a ValueError listing the weights, no dataset."""
    with pytest.raises(PrepError, match=rf"mixture weight of {dataset_b} is 1e-07, .*raise it to at least 1.1e-05"):
        MemmapLoader([(dataset, 1), (dataset_b, 1e-7)], **KW)


def test_a_bool_weight_is_refused(dataset, dataset_b):
    with pytest.raises(PrepError, match=rf"mixture weight of {dataset} is True; give a number > 0"):
        MemmapLoader([(dataset, True), (dataset_b, 1)], **KW)


@pytest.mark.parametrize("mode", ["windows", "packed", "grouped"])
def test_weights_are_relative(dataset, dataset_b, mode):
    a = collect(MemmapLoader([(dataset, 0.7), (dataset_b, 0.3)], mode=mode, **KW))
    b = collect(MemmapLoader([(dataset, 7), (dataset_b, 3)], mode=mode, **KW))
    assert len(a) == len(b) > 0 and all(np.array_equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, b))


def test_a_uint16_and_an_int32_dataset_mix(dataset, dataset_u16):
    """Same tokenizer, other dtypes: the batch is as wide as the widest; each row reads its own dataset's tokens."""
    # the kit's int32 dataset says vocab 2**24, its uint16 one 50257, under one tokenizer sha
    with pytest.warns(UserWarning, match="different vocabulary sizes"):
        loader = MemmapLoader([(dataset, 1), (dataset_u16, 1)], mode="grouped", shuffle=False, **KW)
    assert loader.vocab_size == 1 << 24
    raw = np.fromfile(next((dataset_u16 / "train").glob("*.bin")), dtype=np.uint16).astype(np.int64)
    src, sample, _ = loader.plan.rows(0, 0, 0)
    batch = next(iter(loader))
    idx = loader.plan.sources[1].doc_index()
    checked = 0
    for r in np.flatnonzero(src == 1):
        d = int(sample[r])
        n = min(int(idx["lengths"][d]), 32)
        assert np.array_equal(batch["input_ids"][r, :n].numpy(), raw[idx["starts"][d]:idx["starts"][d] + n])
        checked += 1
    assert checked
