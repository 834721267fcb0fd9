"""CPU processes with the gloo backend: disjoint samples that together cover the epoch, a resume in
fresh processes, and a loader built before the process group."""

import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np

WORKER = Path(__file__).with_name("dist_worker.py")
TRAINER = Path(__file__).with_name("dist_trainer.py")


def test_two_gloo_ranks_split_the_epoch(dataset, lengths, tmp_path):
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(r), "2", str(tmp_path / "rdzv"), str(dataset),
                               str(tmp_path / f"rank{r}.npz")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(2)]
    for p in procs:
        out, _ = p.communicate(timeout=170)
        assert p.returncode == 0, out.decode()[-3000:]
    seen = [np.load(tmp_path / f"rank{r}.npz") for r in range(2)]
    total = int(np.sum(lengths))
    # same number of steps and equal shapes on both ranks (no DDP hang, one compiled shape per step)
    for mode in ("windows", "packed", "grouped"):
        assert np.array_equal(seen[0][f"{mode}_shapes"], seen[1][f"{mode}_shapes"])
    a, b = seen[0]["windows"], seen[1]["windows"]
    assert a.size and b.size and not np.intersect1d(a, b).size
    assert np.unique(np.concatenate([a, b])).size == (total - 1) // 64  # every window of the epoch once
    for mode in ("packed", "grouped"):
        a, b = seen[0][mode], seen[1][mode]
        assert a.size and b.size and not np.intersect1d(a, b).size  # disjoint
        both = np.sort(np.concatenate([a, b]))
        if mode == "packed":  # every token of the split exactly once
            assert np.array_equal(both, np.arange(1, total + 1))
        else:  # every document's first min(len, 64) tokens exactly once (1-token ones have no target: no row)
            starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            want = np.concatenate([np.arange(s, s + min(n, 64)) + 1 for s, n in zip(starts, lengths) if n >= 2])
            assert np.array_equal(both, want)


def run_ranks(tmp_path: Path, name: str, world: int, **job) -> list[dict]:
    """Start `world` dist_trainer.py processes on one job; each rank's results."""
    work = tmp_path / name
    work.mkdir()
    job["out"] = str(work / "rank%d.pkl")
    (work / "job.json").write_text(json.dumps(job))
    procs = [subprocess.Popen([sys.executable, str(TRAINER), str(r), str(world), str(work / "rdzv"),
                               str(work / "job.json")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(world)]
    try:
        for p in procs:
            out, _ = p.communicate(timeout=170)
            assert p.returncode == 0, out.decode()[-3000:]
    finally:
        for p in procs:  # a rank left waiting on a failed peer's barrier
            if p.poll() is None:
                p.kill()
                p.wait()
    return [pickle.loads((work / f"rank{r}.pkl").read_bytes()) for r in range(world)]


def test_a_loader_built_before_init_process_group_is_refused(dataset, tmp_path):
    """Built before init_process_group, the loader took rank 0 of world_size 1 in every process, and both
    ranks trained on the same batches, silently; the pass now stops in one line naming the fix."""
    runs = {"windows": {"batch_size": 3, "seq_len": 32, "cache_dir": False}}
    ranks = run_ranks(tmp_path, "late", 2, dataset=str(dataset), runs=runs, epochs=1, late_init=True)
    for r, got in enumerate(ranks):
        error = got["windows"].get("error", "")
        assert "built before torch.distributed.init_process_group" in error, got["windows"].get("seen", [])[:1]
        assert f"this process is rank {r} of 2" in error and "\n" not in error
    # built after init_process_group, the same job runs: the ranks split every step
    ranks = run_ranks(tmp_path, "early", 2, dataset=str(dataset), runs=runs, epochs=1)
    first = [got["windows"]["seen"][0][1] for got in ranks]
    assert first[0].shape == (3, 32) and not np.intersect1d(first[0][:, 0], first[1][:, 0]).size


def test_resume_in_fresh_gloo_processes(dataset, tmp_path):
    """The trainer's loop (set_epoch at each epoch) on two gloo ranks, stopped and resumed in fresh
    processes with other worker settings: each rank continues with exactly the batches of the
    uninterrupted run, inside the second epoch and exactly at the first one's end."""
    base = {"seq_len": 64, "seed": 5, "cache_dir": str(tmp_path / "cache")}
    runs = {"packed": {**base, "mode": "packed", "batch_size": 2},
            "budget": {**base, "mode": "grouped", "pad_multiple": 16, "max_tokens": 256},
            "windows": {**base, "batch_size": 2, "doc_aligned": True, "drop_last": False}}
    job = {"dataset": str(dataset), "runs": runs, "epochs": 2}
    full = run_ranks(tmp_path, "full", 2, **job)
    for name in runs:
        lens = [got[name]["lens"] for got in full]
        assert lens[0] == lens[1] and [len(got[name]["seen"]) for got in full] == [sum(lens[0])] * 2
    per_epoch = {name: full[0][name]["lens"][0] for name in runs}
    stop_at = {"packed": per_epoch["packed"] + 3, "budget": per_epoch["budget"], "windows": per_epoch["windows"] // 2}
    head = run_ranks(tmp_path, "head", 2, **job, stop_at=stop_at)
    for r, got in enumerate(head):  # each rank saves its own state, as a trainer's checkpoint does
        (tmp_path / f"states{r}.pkl").write_bytes(pickle.dumps({name: got[name]["state"] for name in runs}))
    assert head[0]["budget"]["state"]["epoch"] == 0  # stopped on epoch 0's last batch
    # other worker settings on resume; a spawned worker pickles the loader's dataset
    other = {"packed": {"num_workers": 1}, "budget": {"num_workers": 1, "multiprocessing_context": "spawn"},
             "windows": {"num_workers": 1, "persistent_workers": True}}
    resumed = run_ranks(tmp_path, "resumed", 2, **{**job, "runs": {n: {**kw, **other[n]} for n, kw in runs.items()}},
                        resume=str(tmp_path / "states%d.pkl"))
    for name in runs:
        for r in range(2):
            want = full[r][name]["seen"][stop_at[name]:]
            got = resumed[r][name]["seen"]
            assert [e for e, _, _ in got] == [e for e, _, _ in want], name
            assert all(np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2]) for a, b in zip(got, want)), name


def test_settings_that_differ_between_gloo_ranks_are_refused(dataset, tmp_path):
    """A seed that differs per rank (seed=1000 + rank, as for torch's per-worker RNG), shuffle on one rank
    only, another samples_per_epoch, or a state loaded on one rank only: the ranks' batches were no split
    of one epoch (samples repeated on two ranks, others never read), silently. Whichever rank starts a
    loader first, the other stops at its first pass in one line naming both values. A loader iterated
    on rank 0 alone after training runs, and neither hangs (a collective waited for the ranks that
    never came) nor is compared."""
    base = {"batch_size": 3, "seq_len": 32, "cache_dir": False}
    runs = {"seed": {**base, "mode": "packed"}, "shuffle": {**base, "mode": "windows"},
            "state": {**base, "mode": "grouped", "pad_multiple": 16},
            "samples": {**base, "mode": "packed", "samples_per_epoch": 60}, "same": {**base, "seed": 3},
            "eval": {**base, "batch_size": 2, "shuffle": False}}
    rank_runs = {"0": {"seed": {"seed": 1000}, "shuffle": {"shuffle": False}, "samples": {"samples_per_epoch": 120}},
                 "1": {"seed": {"seed": 1001}}}
    head = run_ranks(tmp_path, "head", 2, dataset=str(dataset), runs={"state": runs["state"]}, epochs=1,
                     stop_at={"state": 2})
    (tmp_path / "states0.pkl").write_bytes(pickle.dumps({"state": head[0]["state"]["state"]}))
    (tmp_path / "states1.pkl").write_bytes(pickle.dumps({}))  # rank 1 starts the epoch over
    ranks = run_ranks(tmp_path, "differ", 2, dataset=str(dataset), runs=runs, rank_runs=rank_runs, epochs=1,
                      resume=str(tmp_path / "states%d.pkl"), only_on={"eval": "0"})
    wants = {"seed": "seed: 1000 on rank 0, 1001 on rank 1", "shuffle": "shuffle: False on rank 0, True on rank 1",
             "state": "consumed: 12 on rank 0, 0 on rank 1", "samples": "samples_per_epoch: 120 on rank 0, 60 on rank 1"}
    for name, want in wants.items():
        errors = [got[name]["error"] for got in ranks if "error" in got[name]]
        assert len(errors) == 1, (name, errors)  # the rank that came second; the first ran
        assert want in errors[0] and "the ranks' MemmapLoaders differ" in errors[0] and "\n" not in errors[0]
    for got in ranks:
        assert "error" not in got["same"] and got["same"]["seen"]  # equal settings run as before
    assert "error" not in ranks[0]["eval"] and ranks[0]["eval"]["seen"] and "eval" not in ranks[1]


def test_a_batch_size_or_seq_len_set_per_rank_is_refused(dataset, tmp_path):
    """`batch_size=8 if rank == 0 else 4` (or a per-rank seq_len) was part of the loader's identity, so the
    ranks' loaders were never compared: they yielded different numbers of batches and DDP hung at its
    next collective. The rank that starts second now stops in one line naming the field and both values."""
    base = {"seq_len": 32, "cache_dir": False}
    runs = {"batch": {**base, "batch_size": 4}, "seq": {**base, "batch_size": 3, "mode": "packed"},
            "same": {**base, "batch_size": 3}}
    rank_runs = {"0": {"batch": {"batch_size": 8}, "seq": {"seq_len": 64}}}
    ranks = run_ranks(tmp_path, "shape", 2, dataset=str(dataset), runs=runs, rank_runs=rank_runs, epochs=1)
    wants = {"batch": "batch_size: 8 on rank 0, 4 on rank 1", "seq": "seq_len: 64 on rank 0, 32 on rank 1"}
    for name, want in wants.items():
        errors = [got[name]["error"] for got in ranks if "error" in got[name]]
        assert len(errors) == 1, (name, [len(got[name].get("seen", [])) for got in ranks])
        assert want in errors[0] and "the ranks' MemmapLoaders differ" in errors[0] and "\n" not in errors[0]
        assert "batch counts differ and DDP hangs" in errors[0]
    assert all("error" not in got["same"] and got["same"]["seen"] for got in ranks)


def test_a_peek_on_rank_0_is_not_taken_for_the_training_loader(dataset, tmp_path):
    """A loader of the training loader's data and shape, built and read on rank 0 alone before it (a peek
    in evaluation order: shuffle=False), was the first of its identity to start a pass there and was
    compared with rank 1's training loader: a sound job stopped on "shuffle: False on rank 0, True on
    rank 1", and rank 0's training loader was compared with nothing. Loaders are now paired by the line
    that builds them: the peek pairs with nothing, and the training loaders with each other."""
    runs = {"train": {"batch_size": 3, "seq_len": 32, "cache_dir": False}}
    ranks = run_ranks(tmp_path, "peek", 2, dataset=str(dataset), runs=runs, epochs=1,
                      peek={"train": {"rank": 0, "shuffle": False}})
    assert ranks[0]["train-peek"] == {"shape": (3, 32)} and "train-peek" not in ranks[1]
    for got in ranks:
        assert "error" not in got["train"], got["train"]["error"]
    assert len(ranks[0]["train"]["seen"]) == len(ranks[1]["train"]["seen"]) > 0
    # still compared: a per-rank seed on the training loader after the same peek is refused
    ranks = run_ranks(tmp_path, "peek_seed", 2, dataset=str(dataset), runs=runs, epochs=1,
                      peek={"train": {"rank": 0, "shuffle": False}}, rank_runs={"1": {"train": {"seed": 1}}})
    errors = [got["train"]["error"] for got in ranks if "error" in got["train"]]
    assert len(errors) == 1 and "seed: 0 on rank 0, 1 on rank 1" in errors[0]
