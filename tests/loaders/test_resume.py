"""Determinism and exact resume: after load_state_dict the next batches equal an uninterrupted run's,
with another num_workers, another world size at the same global batch, and across epoch ends."""

import itertools

import numpy as np
import pytest

from loaders import MemmapLoader
from pipeline.errors import PrepError

from .loaderkit import OFFSET_B, collect

T = 64
MODES = [
    ("windows", {}),
    ("windows", {"doc_aligned": True}),
    ("packed", {}),
    ("packed", {"packing": "concat"}),
    ("grouped", {"pad_multiple": 16}),
    ("grouped", {"pad_multiple": 16, "max_tokens": 512}),
]
IDS = [m + "-" + "-".join(f"{k}={v}" for k, v in kw.items()) for m, kw in MODES]


def same(a: list[dict], b: list[dict]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.keys() != y.keys():
            return False
        for k in x:
            if isinstance(x[k], np.ndarray):
                if x[k].shape != y[k].shape or not np.array_equal(x[k], y[k]):
                    return False
            elif x[k] != y[k]:
                return False
    return True


def two_epochs(loader) -> list[dict]:
    return collect(loader) + collect(loader)


@pytest.mark.parametrize("mode,kw", MODES, ids=IDS)
def test_resume_with_other_num_workers(dataset, mode, kw):
    args = dict(batch_size=4, seq_len=T, mode=mode, seed=11, **kw)
    full = two_epochs(MemmapLoader(dataset, **args))
    assert len(full) > 20
    cut = len(full) // 2 + 3  # inside the second epoch
    first = MemmapLoader(dataset, num_workers=2, prefetch_factor=4, **args)
    head = collect(first) + collect(first, limit=cut - len(full) // 2)
    assert same(head, full[:cut])
    state = first.state_dict()  # workers have prefetched ahead; the state counts only handed-out batches
    resumed = MemmapLoader(dataset, num_workers=1, **args).load_state_dict(state)
    assert same(collect(resumed), full[cut:])
    assert resumed.epoch == 2


@pytest.mark.parametrize("mode,kw", MODES, ids=IDS)
def test_resume_with_other_world_size(dataset, mode, kw):
    """World 2 x 2 rows == world 1 x 4 rows: rank batches concatenate to the single-rank batch."""
    full = collect(MemmapLoader(dataset, batch_size=4, seq_len=T, mode=mode, seed=5, **kw))
    ranks = [MemmapLoader(dataset, batch_size=2, seq_len=T, mode=mode, seed=5, rank=r, world_size=2, **kw)
             for r in range(2)]
    if kw.get("max_tokens"):  # the unit is a micro-batch: rank r takes micro-batch 2 * step + r
        steps = 5
        parts = [collect(r, limit=steps) for r in ranks]
        assert same([b for pair in zip(*parts) for b in pair], full[:2 * steps])
        cut = 2 * steps
    else:
        cut = 7
        parts = [collect(r, limit=cut) for r in ranks]
        for i in range(cut):
            merged = {k: np.concatenate([parts[0][i][k], parts[1][i][k]]) for k in full[i]
                      if isinstance(full[i][k], np.ndarray) and k != "cu_seqlens"}
            assert same([merged], [{k: full[i][k] for k in merged}])
    resumed = MemmapLoader(dataset, batch_size=4, seq_len=T, mode=mode, seed=5, **kw)
    resumed.load_state_dict(ranks[0].state_dict())
    assert same(collect(resumed), full[cut:])


def test_resume_at_epoch_end_and_state_contents(dataset):
    args = dict(batch_size=4, seq_len=T, mode="packed", seed=2)
    a = MemmapLoader(dataset, **args)
    e0 = collect(a)
    state = a.state_dict()
    assert state["epoch"] == 1 and state["consumed"] == 0  # a completed pass moves to the next epoch
    b = MemmapLoader(dataset, **args)
    for _ in itertools.islice(b, len(e0)):  # stop right after the last batch, without finishing the pass
        pass
    assert b.state_dict()["epoch"] == 0
    assert same(collect(MemmapLoader(dataset, **args).load_state_dict(b.state_dict())), collect(a))


def test_determinism_and_seed(dataset):
    args = dict(batch_size=4, seq_len=T, mode="grouped")
    assert same(collect(MemmapLoader(dataset, seed=1, **args)), collect(MemmapLoader(dataset, seed=1, **args)))
    assert not same(collect(MemmapLoader(dataset, seed=1, **args)), collect(MemmapLoader(dataset, seed=2, **args)))


def test_state_refuses_other_run(dataset):
    a = MemmapLoader(dataset, batch_size=4, seq_len=T, mode="windows", seed=1)
    next(iter(a))
    b = MemmapLoader(dataset, batch_size=4, seq_len=T, mode="windows", seed=2)
    with pytest.raises(PrepError, match="strict=False"):
        b.load_state_dict(a.state_dict())
    b.load_state_dict(a.state_dict(), strict=False)
    with pytest.raises(PrepError, match="version"):
        b.load_state_dict({"version": 99})


@pytest.mark.parametrize("other,field", [
    (dict(mode="packed"), "mode 'windows' (this loader: 'packed')"),
    (dict(seq_len=2 * T), f"seq_len {T} (this loader: {2 * T})"),
    (dict(seed=2), "seed 1 (this loader: 2)"),
    (dict(doc_aligned=True), "doc_aligned False (this loader: True)"),
    (dict(split="val"), "split 'train' (this loader: 'val')"),
])
def test_state_refusal_names_the_field(dataset_with_val, other, field):
    # was one message listing every field that might differ ("datasets, weights, mode, seq_len, ...")
    args = dict(batch_size=4, seq_len=T, mode="windows", seed=1, cache_dir=False)
    a = MemmapLoader(dataset_with_val, **args)
    next(iter(a))
    b = MemmapLoader(dataset_with_val, **{**args, **other})
    with pytest.raises(PrepError, match="strict=False") as e:
        b.load_state_dict(a.state_dict())
    assert field in str(e.value)
    if "split" in other:
        assert "datasets" in str(e.value)  # another split is other data


def test_state_refusal_names_another_dataset(dataset, dataset_b):
    a = MemmapLoader(dataset, batch_size=4, seq_len=T, cache_dir=False)
    b = MemmapLoader(dataset_b, batch_size=4, seq_len=T, cache_dir=False)
    with pytest.raises(PrepError, match=r"another run: datasets \['[0-9a-f]{16}'\] \(this loader: "):
        b.load_state_dict(a.state_dict())


def test_a_grouped_state_from_before_the_row_rule_is_refused(dataset):
    """Grouped rows became the documents of 2+ tokens; a state saved when every document was a row
    (its fingerprint without the rule, and no `order` fields) resumed silently onto another order."""
    from loaders.plan import hash_dict
    from loaders.samplers import derive_key

    loader = MemmapLoader(dataset, batch_size=4, seq_len=T, mode="grouped", cache_dir=False)
    plan = loader.plan
    before = derive_key(*(int(s.shards.fingerprint[:15], 16) for s in plan.sources), *plan.counts.tolist(),
                        hash_dict(plan.cfg.order_inputs()), plan.global_batch)  # the fingerprint as it was
    old = {k: v for k, v in loader.state_dict().items() if k != "order"}
    with pytest.raises(PrepError, match="strict=False"):
        loader.load_state_dict({**old, "fingerprint": before})
    assert loader.load_state_dict(loader.state_dict()).consumed == 0  # its own state still loads
    windows = MemmapLoader(dataset, batch_size=4, seq_len=T, cache_dir=False)  # other modes keep theirs
    wp = windows.plan
    assert wp.fingerprint == derive_key(*(int(s.shards.fingerprint[:15], 16) for s in wp.sources),
                                        *wp.counts.tolist(), hash_dict(wp.cfg.order_inputs()), 0)


@pytest.mark.parametrize("bad,match", [
    (None, "must be the dict state_dict.. returned, got NoneType"),
    ([1, 2], "must be the dict state_dict.. returned, got list"),
    ({"epoch": None}, "field 'epoch' must be an integer >= 0, got None"),
    ({"consumed": -4}, "field 'consumed' must be an integer >= 0, got -4"),
    ({"consumed": "8"}, "field 'consumed' must be an integer >= 0, got '8'"),
    ({"epoch": True}, "field 'epoch' must be an integer >= 0, got True"),
])
def test_state_shape_is_checked(dataset, bad, match):
    # was AttributeError / KeyError from inside load_state_dict, or a negative count resumed silently
    loader = MemmapLoader(dataset, batch_size=4, seq_len=T, cache_dir=False)
    state = bad if not isinstance(bad, dict) else {**loader.state_dict(), **bad}
    with pytest.raises(PrepError, match=match):
        loader.load_state_dict(state)


def test_state_survives_json_and_numpy_ints(dataset):
    import json
    args = dict(batch_size=4, seq_len=T, mode="grouped", pad_multiple=16, cache_dir=False)
    a = MemmapLoader(dataset, **args)
    want = collect(a, limit=5)[3:]
    b = MemmapLoader(dataset, **args)
    collect(b, limit=3)
    state = json.loads(json.dumps(b.state_dict()))
    state["consumed"] = np.int64(state["consumed"])
    c = MemmapLoader(dataset, **args).load_state_dict(state)
    assert same(collect(c, limit=2), want)


def test_spawn_workers_match(dataset):
    args = dict(batch_size=4, seq_len=T, mode="packed", seed=4)
    want = collect(MemmapLoader(dataset, **args), limit=12)
    got = collect(MemmapLoader(dataset, num_workers=2, multiprocessing_context="spawn", **args), limit=12)
    assert same(got, want)


def test_persistent_workers_across_epochs(dataset):
    args = dict(batch_size=4, seq_len=T, mode="grouped", seed=4)
    want = two_epochs(MemmapLoader(dataset, **args))
    got = two_epochs(MemmapLoader(dataset, num_workers=2, persistent_workers=True, **args))
    assert same(got, want)


# -- mixtures ------------------------------------------------------------------------------------


def test_mixture_matches_weights_exactly(dataset, dataset_b):
    loader = MemmapLoader([(dataset, 0.7), (dataset_b, 0.3)], batch_size=5, seq_len=T, mode="windows")
    rows = np.concatenate([b["input_ids"][:, 0] for b in collect(loader)])
    from_b = rows > OFFSET_B
    counts = np.cumsum(from_b)
    p = np.arange(1, rows.size + 1)
    assert np.all(np.abs(counts - 0.3 * p) <= 1)  # every prefix within one sample of the weights
    assert np.all(counts[9::10] == 3 * (p[9::10] // 10))  # exact at every period of 10
    assert rows.size > 100 and from_b.any()
    # no window drawn twice within the mix epoch
    assert np.unique(rows).size == rows.size
    again = np.concatenate([b["input_ids"][:, 0] for b in collect(
        MemmapLoader([(dataset, 0.7), (dataset_b, 0.3)], batch_size=5, seq_len=T, mode="windows"))])
    assert np.array_equal(rows, again)


def test_mixture_resume_grouped(dataset, dataset_b):
    args = dict(batch_size=4, seq_len=T, mode="grouped", pad_multiple=16, seed=9)
    mix = [(dataset, 2.0), (dataset_b, 1.0)]
    full = collect(MemmapLoader(mix, **args))
    a = MemmapLoader(mix, num_workers=2, **args)
    head = collect(a, limit=9)
    assert same(head, full[:9])
    assert same(collect(MemmapLoader(mix, **args).load_state_dict(a.state_dict())), full[9:])


def test_set_epoch_right_after_load_state_dict_keeps_the_position(dataset):
    """The usual loop, `for e in range(start, E): loader.set_epoch(e); for batch in loader`, resumed with
    load_state_dict before it: set_epoch reset the position, and the run repeated the epoch's first batches."""
    args = dict(batch_size=4, seq_len=T, mode="packed", seed=3, cache_dir=False)
    full = two_epochs(MemmapLoader(dataset, **args))
    per_epoch = len(full) // 2
    a = MemmapLoader(dataset, **args)
    collect(a, limit=5)
    b = MemmapLoader(dataset, **args).load_state_dict(a.state_dict())
    b.set_epoch(0)
    got = collect(b)
    assert same(got, full[5:per_epoch])
    b.set_epoch(1)  # the next epoch's set_epoch, after a pass: from its start, as always
    assert same(collect(b), full[per_epoch:])
    b.set_epoch(0)  # and without a restore in between, set_epoch restarts an epoch
    assert same(collect(b), full[:per_epoch])
    # A state saved at epoch 0's last batch is (0, consumed=all). set_epoch(0) kept it, the pass found nothing
    # left and ran epoch 1 inside the trainer's epoch-0 loop, and set_epoch(1) ran epoch 1 again (3 epochs of
    # 16 batches gave 48). The epoch-0 pass now yields nothing and leaves the loader at (1, 0).
    c = MemmapLoader(dataset, **args)
    for _ in itertools.islice(c, per_epoch):  # stop right after the last batch, without finishing the pass
        pass
    at_end = c.state_dict()
    assert (at_end["epoch"], at_end["consumed"]) == (0, per_epoch * 4)  # every batch of 4 samples handed out
    uninterrupted = MemmapLoader(dataset, **args)
    three = [batch for e in range(3) for batch in (uninterrupted.set_epoch(e), collect(uninterrupted))[1]]
    d = MemmapLoader(dataset, **args).load_state_dict(at_end)
    passes = []
    for e in range(3):
        d.set_epoch(e)
        passes.append(collect(d))
    assert [len(p) for p in passes] == [0, per_epoch, per_epoch]
    assert same(passes[0] + passes[1] + passes[2], three[per_epoch:])
    assert (d.state_dict()["epoch"], d.state_dict()["consumed"]) == (3, 0)
    d = MemmapLoader(dataset, **args).load_state_dict(at_end)
    d.set_epoch(0)
    assert collect(d) == [] and (d.state_dict()["epoch"], d.state_dict()["consumed"]) == (1, 0)


def test_set_epoch_to_another_epoch_after_load_state_dict_warns(dataset):
    args = dict(batch_size=4, seq_len=T, mode="windows", seed=3, cache_dir=False)
    a = MemmapLoader(dataset, **args)
    collect(a, limit=3)
    b = MemmapLoader(dataset, **args).load_state_dict(a.state_dict())
    with pytest.warns(UserWarning, match=r"set_epoch\(2\) right after load_state_dict of a state 12 samples into "
                                         r"epoch 0: that position is dropped"):
        b.set_epoch(2)
    assert b.state_dict()["epoch"] == 2 and b.state_dict()["consumed"] == 0


@pytest.mark.parametrize("drop_last", [True, False])
def test_set_epoch_to_the_next_epoch_after_a_state_at_an_epoch_end_does_not_warn(dataset, drop_last):
    """A state taken on epoch 0's last batch has nothing of epoch 0 left; a trainer that counts epochs by
    finished steps calls set_epoch(1) next. That warned that the position was dropped and advised
    set_epoch(0), though epoch 1 from its start is exactly where the run goes on."""
    import warnings

    args = dict(batch_size=4, seq_len=T, mode="packed", seed=3, drop_last=drop_last, cache_dir=False)
    a = MemmapLoader(dataset, **args)
    per_epoch = len(a)
    for _ in itertools.islice(a, per_epoch):  # stop on the last batch, without finishing the pass
        pass
    b = MemmapLoader(dataset, **args).load_state_dict(a.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b.set_epoch(1)
    assert same(collect(b), collect(MemmapLoader(dataset, epoch=1, **args)))
    c = MemmapLoader(dataset, **args)
    collect(c, limit=per_epoch - 1)  # one batch short of the end: that position is dropped, and said so
    d = MemmapLoader(dataset, **args).load_state_dict(c.state_dict())
    with pytest.warns(UserWarning, match="that position is dropped"):
        d.set_epoch(1)


def test_grouped_state_from_another_world_size_names_the_batch_size_that_resumes_it(dataset):
    """A grouped state resumed on more ranks was refused as 'grouped_global_batch 6 (this loader: 9)',
    naming neither the world size nor what to pass; batch_size=2 on 3 ranks does resume it exactly."""
    args = dict(seq_len=T, mode="grouped", pad_multiple=16, seed=4, cache_dir=False)
    two = [MemmapLoader(dataset, batch_size=3, rank=r, world_size=2, **args) for r in range(2)]
    for loader in two:
        collect(loader, limit=4)
    three = MemmapLoader(dataset, batch_size=3, rank=0, world_size=3, **args)
    with pytest.raises(PrepError) as e:
        three.load_state_dict(two[0].state_dict())
    assert ("grouped global batch 6 on world_size 2 (this loader: 9 = batch_size 3 x world_size 3; the grouped "
            "order is built per global batch: pass batch_size=2 to resume it on 3 ranks)") in str(e.value)
    fitted = [MemmapLoader(dataset, batch_size=2, rank=r, world_size=3, **args).load_state_dict(two[0].state_dict())
              for r in range(3)]
    want = collect(MemmapLoader(dataset, batch_size=6, **args))[4:7]
    got = [collect(loader, limit=3) for loader in fitted]
    for step in range(3):
        assert np.array_equal(np.concatenate([g[step]["input_ids"] for g in got]), want[step]["input_ids"])
