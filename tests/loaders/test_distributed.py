"""Two CPU processes with the gloo backend: disjoint samples that together cover the epoch."""

import subprocess
import sys
from pathlib import Path

import numpy as np

WORKER = Path(__file__).with_name("dist_worker.py")


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
