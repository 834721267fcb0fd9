import numpy as np
import pytest

from .loaderkit import OFFSET_B, lognormal_lengths, make_dataset


@pytest.fixture(scope="session")
def lengths():
    """600 documents, lognormal (median ~55 tokens), a few longer than seq_len=128, some of 1 token."""
    lens = lognormal_lengths(600, seed=1, mean=4.0, sigma=1.0, hi=700)
    lens[:5] = 1
    return lens


@pytest.fixture(scope="session")
def dataset(tmp_path_factory, lengths):
    """Position-id tokens (int32, token = position + 1) in several shards (documents never split)."""
    return make_dataset(tmp_path_factory.mktemp("ds") / "d", lengths, shard_tokens=9000)


@pytest.fixture(scope="session")
def dataset_b(tmp_path_factory):
    lens = lognormal_lengths(300, seed=2, mean=3.5, sigma=0.8, hi=400)
    return make_dataset(tmp_path_factory.mktemp("dsb") / "b", lens, shard_tokens=5000, offset=OFFSET_B)


@pytest.fixture(scope="session")
def dataset_u16(tmp_path_factory):
    lens = lognormal_lengths(400, seed=3, hi=500)
    return make_dataset(tmp_path_factory.mktemp("u16") / "u", lens, dtype=np.uint16, token_ids="random")


@pytest.fixture(scope="session")
def dataset_with_val(tmp_path_factory):
    """A train split and a val split (position ids; small)."""
    return make_dataset(tmp_path_factory.mktemp("dsv") / "v", lognormal_lengths(120, seed=4, hi=300),
                        extra_splits={"val": lognormal_lengths(60, seed=5, hi=300)})
