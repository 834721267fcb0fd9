"""len(loader) and batches_left after a resume: len() is the whole epoch (torch's and torchdata's
StatefulDataLoader's convention, so `epochs * len(loader)` sizes a schedule), batches_left what the
pass still yields, so a progress bar from them ends exactly at its total."""

import itertools

from loaders import MemmapLoader

from .loaderkit import collect

T = 64


def bar_positions(loader) -> tuple[int, list[int]]:
    """A tqdm-style bar: (total, the position after each batch) with total=len, initial=len - batches_left."""
    total = len(loader)
    at = total - loader.batches_left
    seen = []
    for _ in loader:
        at += 1
        seen.append(at)
    return total, seen


def test_batches_left_after_a_mid_epoch_resume(dataset):
    args = dict(batch_size=4, seq_len=T, mode="packed", seed=3, cache_dir=False)
    a = MemmapLoader(dataset, **args)
    per_epoch = len(a)
    assert a.batches_left == per_epoch and per_epoch > 10
    collect(a, limit=5)
    b = MemmapLoader(dataset, **args).load_state_dict(a.state_dict())
    assert len(b) == per_epoch  # the whole epoch, as torch's DataLoader
    assert b.batches_left == per_epoch - 5  # it counted a full epoch: a bar sized by it stopped short
    lefts = [b.batches_left for _ in b]  # during the pass: what is still to come after this batch
    assert lefts == list(range(per_epoch - 6, -1, -1))
    assert (len(b), b.batches_left) == (per_epoch, per_epoch)  # the next epoch, whole
    c = MemmapLoader(dataset, **args).load_state_dict(a.state_dict())
    total, seen = bar_positions(c)
    assert seen[-1] == total and len(seen) == per_epoch - 5


def test_a_progress_bar_does_not_overrun_after_a_state_at_an_epoch_end(dataset):
    """Token-budget epochs differ in batch count. A state taken on epoch e's last batch runs epoch e + 1
    on the next pass, but len() counted epoch e's batches: the bar went past (or stopped short of) its total."""
    args = dict(seq_len=T, mode="grouped", pad_multiple=16, max_tokens=256, seed=0, cache_dir=False)
    counts = {e: len(MemmapLoader(dataset, epoch=e, **args)) for e in range(6)}
    e = next(e for e in range(5) if counts[e + 1] > counts[e])  # the next epoch has more batches
    a = MemmapLoader(dataset, epoch=e, **args)
    for _ in itertools.islice(a, counts[e]):  # stop on the last batch, without finishing the pass
        pass
    b = MemmapLoader(dataset, **args).load_state_dict(a.state_dict())
    assert (len(b), b.batches_left) == (counts[e + 1], counts[e + 1])
    total, seen = bar_positions(b)
    assert len(seen) == counts[e + 1] and seen[-1] == total
    # set_epoch(e) keeps that position: the trainer's epoch-e pass is empty, and says so
    d = MemmapLoader(dataset, **args).load_state_dict(a.state_dict())
    d.set_epoch(e)
    assert d.batches_left == 0 and collect(d) == []
