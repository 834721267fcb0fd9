"""Loader arguments of the wrong type or range: one PrepError naming the argument, at construction,
never an error from inside numpy or torch on the first batch."""

import re
import warnings

import numpy as np
import pytest

from loaders import MemmapLoader
from loaders.plan import LoaderConfig
from pipeline.errors import PrepError

from .loaderkit import collect


@pytest.mark.parametrize("kw, match", [
    ({"batch_size": 2.5}, "batch_size must be an integer, got 2.5"),  # was TypeError in numpy, first batch
    ({"seq_len": 16.0}, "seq_len must be an integer, got 16.0"),
    ({"batch_size": "2"}, "batch_size must be an integer, got '2'"),  # was TypeError: '<' not supported
    ({"batch_size": None}, "batch_size must be an integer, got None"),
    ({"batch_size": True}, "batch_size must be an integer, got True"),
    ({"max_tokens": 64.5, "mode": "grouped"}, r"max_tokens must be an integer \(or None\), got 64.5"),
    ({"seed": -1}, "seed must be >= 0, got -1"),  # was numpy's "expected non-negative integer" (packed, grouped)
    ({"seed": 1.5}, "seed must be an integer, got 1.5"),
    ({"megabatch": 0, "mode": "grouped"}, "megabatch must be >= 1"),  # was silently taken as 1
    ({"shuffle": "no"}, "shuffle must be True or False, got 'no'"),  # a non-empty string was truthy
    ({"drop_last": None}, "drop_last must be True or False, got None"),
    ({"split": 0}, "split must be a string, got 0"),
])
def test_config_field_types_are_named(kw, match):
    with pytest.raises(PrepError, match=match):
        LoaderConfig(**{"batch_size": 2, "seq_len": 16, **kw})


def test_bool_options_take_0_and_1_as_yaml_and_argparse_give_them():
    # were refused ("shuffle must be True or False, got 0") while MemmapLoader's persistent_workers takes 0/1
    cfg = LoaderConfig(batch_size=2, seq_len=16, shuffle=0, drop_last=1, doc_aligned=np.int64(1))
    assert (cfg.shuffle, cfg.drop_last, cfg.doc_aligned) == (False, True, True)
    assert type(cfg.shuffle) is bool and type(cfg.doc_aligned) is bool
    assert LoaderConfig(batch_size=2, seq_len=16, mode="packed", attention_mask=1).attention_mask is True
    assert LoaderConfig(batch_size=2, seq_len=16, mode="grouped", attention_mask=0).attention_mask is False  # default
    for bad in (2, -1, 1.0, "1"):
        with pytest.raises(PrepError, match=rf"^drop_last must be True or False, got {re.escape(repr(bad))}$"):
            LoaderConfig(batch_size=2, seq_len=16, drop_last=bad)


def test_numpy_integers_are_taken_as_ints():
    cfg = LoaderConfig(batch_size=np.int64(2), seq_len=np.int32(16), seed=np.uint8(3), shuffle=np.bool_(True))
    assert (cfg.batch_size, cfg.seq_len, cfg.seed, cfg.shuffle) == (2, 16, 3, True)
    assert type(cfg.batch_size) is int and type(cfg.shuffle) is bool


@pytest.mark.parametrize("mode", ["windows", "packed", "grouped"])
def test_wrong_types_fail_at_construction_in_every_mode(dataset, mode):
    with pytest.raises(PrepError, match="seq_len must be an integer"):
        MemmapLoader(dataset, batch_size=2, seq_len=16.5, mode=mode, cache_dir=False)
    with pytest.raises(PrepError, match="seed must be >= 0"):
        MemmapLoader(dataset, batch_size=2, seq_len=16, mode=mode, seed=-3, cache_dir=False)


@pytest.mark.parametrize("kw, match", [
    ({"bogus": 1}, "unknown argument.s. bogus; loader settings are batch_size, seq_len"),  # was TypeError
    ({"batch_size": None, "seq_len": None}, r"needs batch_size=\.\.\. \(rows per rank per batch\) and seq_len"),
    ({"device": "gpu"}, "device='gpu' is not a torch device; use 'cpu' or 'cuda'"),  # was torch's RuntimeError
    ({"device": 3.5}, "device=3.5 is not a torch device"),
    ({"num_workers": 1, "prefetch_factor": 0}, "prefetch_factor must be an integer >= 1, got 0"),  # was an AssertionError
    ({"epoch": -1, "mode": "grouped"}, "epoch must be an integer >= 0, got -1"),  # was numpy's ValueError
    ({"rank": 1.5, "world_size": 2}, "rank must be an integer >= 0, got 1.5"),  # was taken as rank 1
    ({"rank": 0, "world_size": 0}, "world_size must be an integer >= 1, got 0"),
    ({"rank": 0, "world_size": "2"}, "world_size must be an integer >= 1, got '2'"),  # was a TypeError
])
def test_loader_arguments_are_named(dataset, kw, match):
    args = {"batch_size": 2, "seq_len": 16, "cache_dir": False, **kw}
    args = {k: v for k, v in args.items() if v is not None}
    with pytest.raises(PrepError, match=match):
        next(iter(MemmapLoader(dataset, **args)))


def test_mixture_weight_that_is_not_a_number_is_named(dataset):
    # named with its dataset, as the other weight errors are (was "mixture weights must be numbers, got ['a', 1]")
    with pytest.raises(PrepError, match=rf"mixture weight of {dataset} is 'a'; give a number > 0"):
        MemmapLoader([(dataset, "a"), (dataset, 1)], batch_size=2, seq_len=16)


def test_set_epoch_refuses_a_negative_epoch(dataset):
    loader = MemmapLoader(dataset, batch_size=2, seq_len=16, cache_dir=False)
    with pytest.raises(PrepError, match="epoch must be an integer >= 0, got -2"):
        loader.set_epoch(-2)


def test_bench_loader_with_a_device_torch_does_not_know_is_one_line(dataset):
    from typer.testing import CliRunner

    from pipeline.cli import app
    result = CliRunner().invoke(app, ["bench-loader", str(dataset), "--device", "gpu", "--workers", "0",
                                      "--seq-len", "16", "--num-batches", "1"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)  # was a RuntimeError traceback
    assert "--device 'gpu' is not a torch device" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("mode", ["windows", "packed"])
def test_max_tokens_outside_grouped_is_refused(dataset, mode):
    """max_tokens was taken and ignored in windows/packed: every batch was batch_size x seq_len tokens,
    past the budget (4 x 32 = 128 tokens under max_tokens=64)."""
    with pytest.raises(PrepError, match=r"max_tokens applies to mode 'grouped' only.*pass batch_size=2"):
        MemmapLoader(dataset, batch_size=4, seq_len=32, mode=mode, max_tokens=64, cache_dir=False)
    # a budget under one row: no batch_size fits it (it said batch_size=1, still 32 tokens over 16)
    with pytest.raises(PrepError, match=r"budget of 16, one row of seq_len=32 is already past it: lower seq_len to 16"):
        MemmapLoader(dataset, batch_size=4, seq_len=32, mode=mode, max_tokens=16, cache_dir=False)


def test_the_grouped_megabatch_is_sized_by_the_rows_mean_length(tmp_path):
    """With max_tokens, the megabatch holds a multiple of budget / mean row length; the mean was taken
    over every document, though those of 0-1 tokens are no rows: half 1-token documents halved it."""
    from .loaderkit import make_dataset
    d = make_dataset(tmp_path / "d", [1, 40] * 400)
    loader = MemmapLoader(d, batch_size=1, seq_len=64, mode="grouped", max_tokens=400, cache_dir=False)
    assert loader.plan.sources[0].num_samples == 400  # guard: the 1-token documents are not rows
    rows = loader.plan.megabatch_rows()
    assert rows % 10 == 0 and rows % 19 != 0  # 400 // 40 per batch; over all documents, 400 // 20.5 = 19


@pytest.mark.parametrize("mode, kw, where", [
    ("windows", {"pad_multiple": 16}, "mode 'grouped'"),
    ("packed", {"pad_multiple": 16}, "mode 'grouped'"),
    ("windows", {"megabatch": 8}, "mode 'grouped'"),
    ("packed", {"doc_aligned": True}, "mode 'windows'"),
    ("grouped", {"doc_aligned": True}, "mode 'windows'"),
    ("windows", {"packing": "concat"}, "mode 'packed'"),
    ("grouped", {"packing": "concat"}, "mode 'packed'"),
    ("windows", {"long_docs": "truncate"}, "mode 'packed' with packing='bfd'"),
    ("packed", {"packing": "concat", "long_docs": "truncate"}, "mode 'packed' with packing='bfd'"),
    ("windows", {"attention_mask": True}, "mode 'packed'"),
    ("grouped", {"attention_mask": True}, "mode 'packed' (grouped batches always carry"),
])
def test_an_option_with_no_effect_in_the_mode_is_refused(dataset, mode, kw, where):
    """pad_multiple=16 in windows mode, doc_aligned in packed mode, ... were taken and silently ignored."""
    option = list(kw)[-1]
    with pytest.raises(PrepError) as e:
        MemmapLoader(dataset, batch_size=2, seq_len=16, mode=mode, cache_dir=False, **kw)
    msg = str(e.value)
    assert msg.startswith(f"{option}={kw[option]!r} has no effect in mode {mode!r}") and "\n" not in msg
    assert f"it applies to {where}" in msg and f"leave {option} out" in msg


@pytest.mark.parametrize("mode", ["windows", "packed", "grouped"])
def test_every_option_at_its_default_is_taken_in_every_mode(dataset, mode):
    """A config shared across modes may pass every option explicitly at its default value."""
    from dataclasses import fields

    defaults = {f.name: f.default for f in fields(LoaderConfig) if f.name not in ("batch_size", "seq_len", "mode")}
    loader = MemmapLoader(dataset, batch_size=2, seq_len=16, mode=mode, cache_dir=False, **defaults)
    assert next(iter(loader))["input_ids"].shape[0] == 2


def test_bench_gives_a_mode_only_the_options_that_act_in_it(dataset):
    from loaders.bench import run_loader_bench

    rows = run_loader_bench(dataset, modes=("windows", "grouped"), num_workers=(0,), batch_size=2, seq_len=32,
                            num_batches=2, pad_multiple=8)  # grouped's option; windows runs without it
    assert [r["mode"] for r in rows] == ["windows", "grouped"]
    with pytest.raises(PrepError, match="pad_multiple=8 has no effect in mode 'windows'"):  # acts in no benched mode
        run_loader_bench(dataset, modes=("windows",), num_workers=(0,), batch_size=2, seq_len=32, num_batches=2,
                         pad_multiple=8)


@pytest.mark.parametrize("kw, shown", [
    ({"persistent_workers": True}, "persistent_workers=True"),
    ({"prefetch_factor": 4}, "prefetch_factor=4"),
    ({"multiprocessing_context": "spawn"}, "multiprocessing_context='spawn'"),
])
def test_worker_options_without_workers_are_refused_by_name(dataset, kw, shown):
    # were taken and silently ignored with num_workers=0 (torch's DataLoader raises ValueError for each there)
    option = next(iter(kw))
    with pytest.raises(PrepError, match=rf"^{re.escape(shown)} has no effect with num_workers=0: it applies to worker "
                                        rf"processes \(num_workers > 0\) only; leave {option} out"):
        MemmapLoader(dataset, batch_size=2, seq_len=16, cache_dir=False, num_workers=0, **kw)


@pytest.mark.parametrize("shared", [
    {"prefetch_factor": 2, "persistent_workers": False, "multiprocessing_context": None},
    # torch 2.x's DataLoader defaults: prefetch_factor=None is the only value it takes with num_workers=0;
    # persistent_workers=0 as argparse/YAML give it. Both were refused.
    {"prefetch_factor": None, "persistent_workers": 0},
])
def test_worker_option_defaults_passed_explicitly_are_taken_without_workers(dataset, shared):
    loader = MemmapLoader(dataset, batch_size=2, seq_len=16, cache_dir=False, num_workers=0, **shared)
    assert len(collect(loader, limit=2)) == 2


def test_torch_style_worker_options_are_taken_with_workers(dataset):
    # prefetch_factor=None is torch's "default" (2 with workers), persistent_workers=1 an int from a config
    # file; both were refused. The reference runs with the options left out.
    args = {"batch_size": 2, "seq_len": 16, "cache_dir": False, "num_workers": 1}
    loader = MemmapLoader(dataset, prefetch_factor=None, persistent_workers=1, **args)
    assert loader._dl_kwargs["prefetch_factor"] == 2 and loader._dl_kwargs["persistent_workers"] is True
    got, ref = collect(loader, limit=3), collect(MemmapLoader(dataset, **args), limit=3)
    assert len(got) == 3 and all((a["input_ids"] == b["input_ids"]).all() for a, b in zip(got, ref))


@pytest.mark.parametrize("kw, match", [
    ({"num_workers": 1.5}, "num_workers must be an integer >= 0, got 1.5"),  # was taken as 1 worker
    ({"num_workers": 2, "persistent_workers": "no"}, "persistent_workers must be True or False, got 'no'"),  # truthy
    ({"num_workers": 2, "persistent_workers": 2}, "persistent_workers must be True or False, got 2"),  # 0/1 only
    ({"num_workers": 2, "multiprocessing_context": "spwan"}, r"multiprocessing_context='spwan' is not a start method"),
    ({"prefetch_depth": -1}, "prefetch_depth must be an integer >= 0, got -1"),  # was taken as 1
])
def test_worker_and_prefetch_values_are_checked(dataset, kw, match):
    with pytest.raises(PrepError, match=match):
        MemmapLoader(dataset, batch_size=2, seq_len=16, cache_dir=False, **kw)


def test_prefetch_depth_on_cpu_warns_that_it_does_nothing(dataset):
    # a warning, not a refusal: one config runs on CPU in tests and on CUDA in training
    with pytest.warns(UserWarning, match="prefetch_depth=4 has no effect on device 'cpu': it sets how many batches "
                                         "are copied ahead to a CUDA device"):
        loader = MemmapLoader(dataset, batch_size=2, seq_len=16, cache_dir=False, prefetch_depth=4)
    assert len(collect(loader, limit=2)) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MemmapLoader(dataset, batch_size=2, seq_len=16, cache_dir=False, prefetch_depth=2)  # the default: no warning


def test_max_tokens_needs_no_batch_size(dataset):
    # batch_size was required with max_tokens, where it sizes no batch
    budget = {"seq_len": 128, "mode": "grouped", "max_tokens": 512, "cache_dir": False}
    loader = MemmapLoader(dataset, **budget)
    got = collect(loader)
    same = collect(MemmapLoader(dataset, batch_size=3, **budget))  # given anyway (as it had to be): the same batches
    assert len(got) == len(same) > 1
    for a, b in zip(got, same):
        np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
        assert a["input_ids"].size <= 512
    assert loader.state_dict()["global_batch"] is None  # rows per batch vary
    with pytest.raises(PrepError, match=r"needs batch_size=\.\.\. \(rows per rank per batch\)$"):
        MemmapLoader(dataset, seq_len=128, mode="grouped", cache_dir=False)
    with pytest.raises(PrepError, match="batch_size must be an integer, got None; only token-budget batches"):
        LoaderConfig(seq_len=16)
