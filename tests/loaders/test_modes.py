"""Invariants of each mode on a position-id dataset (token = global position + 1, so 0 is padding).

Every check is paired with a guard that the interesting case actually occurred (rows holding several
documents, split documents, masked labels, several padded widths), so a pass is never vacuous.
"""

import numpy as np
import pytest
import torch

from loaders import MemmapLoader
from loaders.collate import block_causal_mask, flat_cu_seqlens

from .loaderkit import collect, doc_of_token

T, B = 128, 4


def doc_starts(lengths):
    return np.concatenate([[0], np.cumsum(lengths)[:-1]])


# -- windows -------------------------------------------------------------------------------------


def test_windows_rows_and_next_token_labels(dataset, lengths):
    loader = MemmapLoader(dataset, batch_size=B, seq_len=T, mode="windows", seed=3, drop_last=False)
    batches = collect(loader)
    total = int(np.sum(lengths))
    assert len(batches) == len(loader) == -(-((total - 1) // T) // B)
    starts = []
    for b in batches:
        x, y = b["input_ids"], b["labels"]
        assert x.shape == y.shape == (B, T) and x.dtype == y.dtype == np.int64
        real = x[:, 0] > 0  # padding rows of the last batch are all 0 / -100
        assert np.all(np.diff(x[real], axis=1) == 1)  # T + 1 contiguous tokens of the stream
        assert np.array_equal(y[real], x[real] + 1)  # nanoGPT: labels are inputs shifted by one
        assert np.all(y[~real] == -100)
        starts.extend((x[real, 0] - 1).tolist())
    starts = np.array(starts)
    # every tiled window exactly once per epoch, all with the same phase
    assert starts.size == (total - 1) // T and np.unique(starts).size == starts.size
    assert np.unique(starts % T).size == 1
    assert starts.max() + T + 1 <= total


def test_windows_doc_aligned(dataset, lengths):
    loader = MemmapLoader(dataset, batch_size=B, seq_len=T, mode="windows", doc_aligned=True, drop_last=False)
    firsts = np.concatenate([b["input_ids"][:, 0] for b in collect(loader)])
    firsts = firsts[firsts > 0] - 1
    total = int(np.sum(lengths))
    eligible = doc_starts(lengths)[doc_starts(lengths) + T + 1 <= total]
    assert np.array_equal(np.sort(firsts), np.sort(eligible))  # each eligible document start once
    crosses = sum(doc_of_token(np.array([s + 1]), lengths)[0] != doc_of_token(np.array([s + T]), lengths)[0]
                  for s in eligible[:50])
    assert crosses > 0  # guard: windows do run on into the next documents (nanoGPT semantics)


def test_windows_epochs_reshuffle(dataset):
    loader = MemmapLoader(dataset, batch_size=B, seq_len=T, mode="windows", seed=0)
    e0 = collect(loader)
    e1 = collect(loader)  # the next pass is epoch 1
    assert loader.epoch == 2
    first0 = np.concatenate([b["input_ids"][:, 0] for b in e0])
    first1 = np.concatenate([b["input_ids"][:, 0] for b in e1])
    assert not np.array_equal(first0, first1)
    again = collect(MemmapLoader(dataset, batch_size=B, seq_len=T, mode="windows", seed=0, epoch=1))
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(e1, again))


# -- packed --------------------------------------------------------------------------------------


def check_packed_batch(b, lengths, seq_len=T):
    x, y, pos, cu = b["input_ids"], b["labels"], b["position_ids"], b["cu_seqlens"]
    assert x.shape == y.shape == pos.shape and x.shape[1] == seq_len
    assert cu.dtype == np.int32 and isinstance(b["max_seqlen"], int)
    real = x > 0
    # no label crosses a document: every target is the next token of the same document
    has = y != -100
    assert np.all(y[has] == x[has] + 1)
    assert np.all(doc_of_token(y[has], lengths) == doc_of_token(x[has], lengths))
    assert np.all(y[~real] == -100)  # nothing is learned on padding
    stats = {"multi_doc_rows": 0, "boundary_masks": 0}
    for r in range(x.shape[0]):
        # position ids restart at every segment; cu_seqlens mark exactly those restarts
        restarts = np.flatnonzero(pos[r] == 0)
        seg = np.unique(cu[r])
        assert seg[0] == 0 and seg[-1] == seq_len and np.array_equal(seg[:-1], restarts)
        assert b["max_seqlen"] >= np.diff(seg).max()
        assert np.all(np.diff(cu[r]) >= 0)
        docs = doc_of_token(x[r][real[r]], lengths)
        stats["multi_doc_rows"] += np.unique(docs).size > 1
        inner = real[r][:-1] & real[r][1:] & (pos[r][1:] == 0)
        stats["boundary_masks"] += int(np.sum(inner & (y[r][:-1] == -100)))
        # a real token is always followed by its doc's next token or a restart
        nxt = real[r][:-1] & (pos[r][1:] != 0)
        assert np.all(x[r][1:][nxt] == x[r][:-1][nxt] + 1)
    return stats


def test_packed_bfd_invariants_and_coverage(dataset, lengths):
    loader = MemmapLoader(dataset, batch_size=B, seq_len=T, mode="packed", drop_last=False)
    batches = collect(loader)
    totals = {"multi_doc_rows": 0, "boundary_masks": 0}
    for b in batches:
        for k, v in check_packed_batch(b, lengths).items():
            totals[k] += v
    assert totals["multi_doc_rows"] > 10 and totals["boundary_masks"] > 10  # guards
    # coverage: every token of every document exactly once per epoch (long documents split)
    tokens = np.concatenate([b["input_ids"][b["input_ids"] > 0] for b in batches])
    assert np.array_equal(np.sort(tokens), np.arange(1, int(np.sum(lengths)) + 1))
    assert (np.asarray(lengths) > T).sum() > 0  # guard: some documents were split
    fill = tokens.size / sum(b["input_ids"].size for b in batches if (b["input_ids"] > 0).any(axis=1).all())
    assert loader.stats()["fill"] >= 0.97 and fill >= 0.97


def test_packed_truncate_keeps_prefixes(dataset, lengths):
    loader = MemmapLoader(dataset, batch_size=B, seq_len=T, mode="packed", long_docs="truncate", drop_last=False)
    batches = collect(loader)
    for b in batches:
        check_packed_batch(b, lengths)
    tokens = np.concatenate([b["input_ids"][b["input_ids"] > 0] for b in batches])
    starts = doc_starts(lengths)
    expect = np.concatenate([np.arange(s, s + min(n, T)) + 1 for s, n in zip(starts, lengths)])
    assert np.array_equal(np.sort(tokens), expect)
    assert tokens.size < int(np.sum(lengths))  # guard: something was truncated


def test_packed_concat_covers_stream(dataset, lengths):
    loader = MemmapLoader(dataset, batch_size=B, seq_len=T, mode="packed", packing="concat", drop_last=False)
    batches = collect(loader)
    for b in batches:
        check_packed_batch(b, lengths)
    tokens = np.concatenate([b["input_ids"][b["input_ids"] > 0] for b in batches])
    assert np.array_equal(np.sort(tokens), np.arange(1, int(np.sum(lengths)) + 1))
    assert loader.stats()["fill"] > 0.99


def test_packed_sdpa_mask_is_block_causal(dataset, lengths):
    loader = MemmapLoader(dataset, batch_size=B, seq_len=T, mode="packed", attention_mask=True)
    b = next(iter(loader))
    mask = b["attention_mask"]
    assert mask.shape == (B, 1, T, T) and mask.dtype == torch.bool
    x = b["input_ids"].numpy()
    docs = np.where(x > 0, doc_of_token(x, lengths), -1)
    seg = np.cumsum(b["position_ids"].numpy() == 0, axis=1)
    expect = (seg[:, :, None] == seg[:, None, :]) & np.tril(np.ones((T, T), bool))
    assert np.array_equal(mask[:, 0].numpy(), expect)
    real = x > 0
    # never attends across documents
    same_doc = docs[:, :, None] == docs[:, None, :]
    both = real[:, :, None] & real[:, None, :]
    assert not np.any(mask[:, 0].numpy() & both & ~same_doc)
    assert np.any(both & ~same_doc)  # guard: rows do hold several documents
    assert torch.equal(block_causal_mask(b["position_ids"]), mask)


def test_flat_cu_seqlens(dataset):
    b = next(iter(MemmapLoader(dataset, batch_size=B, seq_len=T, mode="packed")))
    flat = flat_cu_seqlens(b["cu_seqlens"], T)
    assert flat.dtype == torch.int32 and flat[0] == 0 and flat[-1] == B * T
    assert torch.all(flat[1:] >= flat[:-1])
    starts = torch.nonzero(b["position_ids"].reshape(-1) == 0).flatten().to(torch.int32)
    assert torch.equal(torch.unique(flat)[:-1], starts)


# -- grouped -------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_tokens", [None, 1024])
def test_grouped_one_doc_per_row_and_coverage(dataset, lengths, max_tokens):
    loader = MemmapLoader(dataset, batch_size=B, seq_len=T, mode="grouped", pad_multiple=16,
                          max_tokens=max_tokens, drop_last=False)
    batches = collect(loader)
    starts = doc_starts(lengths)
    seen, widths, real_tokens, padded = [], set(), 0, 0
    for b in batches:
        x, y, m = b["input_ids"], b["labels"], b["attention_mask"]
        width = x.shape[1]
        assert width <= T and (width % 16 == 0 or width == T)
        widths.add(width)
        if max_tokens:
            assert x.size <= max_tokens
        n = m.sum(axis=1)
        assert np.all(np.diff(n) <= 0)  # sorted longest first inside a batch
        for r in range(x.shape[0]):
            if n[r] == 0:
                assert np.all(y[r] == -100)
                continue
            row = x[r, :n[r]]
            d = int(doc_of_token(row[:1], lengths)[0])
            assert row[0] - 1 == starts[d] and n[r] == min(lengths[d], T)  # one document, from its start
            assert np.all(np.diff(row) == 1) and np.all(x[r, n[r]:] == 0)
            want = np.full(width, -100)
            k = min(lengths[d] - 1, T)  # targets: the next tokens of the doc, one past T if it is longer
            want[:k] = row[0] + 1 + np.arange(k)
            assert np.array_equal(y[r], want)
            seen.append(d)
        real_tokens += int(n.sum())
        padded += x.size
    # every document with a next-token target (>= 2 tokens) exactly once per epoch; 1-token ones are no rows
    assert sorted(seen) == [d for d in range(len(lengths)) if lengths[d] >= 2]
    assert len(widths) > 2  # guard: several bucketed shapes, not one
    pad = 1 - real_tokens / padded
    assert abs(loader.stats()["padding_fraction"] - pad) < 0.02
    if max_tokens is None:  # the longest batch comes first (an OOM shows on step 1)
        assert batches[0]["attention_mask"].sum(axis=1).max() == min(int(np.max(lengths)), T)


def test_grouped_reports_low_padding(dataset):
    loader = MemmapLoader(dataset, batch_size=B, seq_len=T, mode="grouped", pad_multiple=8)
    plain = 1 - np.minimum(np.asarray(loader.plan.sources[0].doc_index()["lengths"]), T).mean() / T
    assert loader.stats()["padding_fraction"] < plain / 2  # grouping beats padding everything to T


def test_uint16_dataset_batches(dataset_u16):
    loader = MemmapLoader(dataset_u16, batch_size=2, seq_len=64, mode="packed")
    b = next(iter(loader))
    assert b["input_ids"].dtype == torch.int64 and b["input_ids"].max() < 50257
    raw_tokens = np.fromfile(next((dataset_u16 / "train").glob("*.bin")), dtype=np.uint16)
    assert np.isin(b["input_ids"].numpy(), raw_tokens).all()
    assert b["input_ids"].max() > 32767  # guard: the high half of uint16 survives the int64 conversion


@pytest.mark.parametrize("mode", ["windows", "packed", "grouped"])
def test_no_shuffle_is_dataset_order(dataset, lengths, mode):
    loader = MemmapLoader(dataset, batch_size=B, seq_len=T, mode=mode, shuffle=False, drop_last=False)
    firsts = np.concatenate([b["input_ids"][:, 0] for b in collect(loader)])
    firsts = firsts[firsts > 0]
    if mode == "windows":  # the stream, tiled in order
        assert np.array_equal(firsts, np.arange(firsts.size) * T + 1)
    elif mode == "packed":  # the pack plan's rows in order
        plan = loader.plan.sources[0].pack_plan()
        assert np.array_equal(firsts, np.asarray(plan["starts"])[plan["row_ptr"][:-1]] + 1)
    else:  # megabatches of consecutive documents, each sorted longest first
        docs = doc_of_token(firsts, lengths)
        assert np.corrcoef(np.arange(docs.size), docs)[0, 1] > 0.9
