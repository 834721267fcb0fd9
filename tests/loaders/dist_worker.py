"""One rank of the two-process gloo test (run as a script by test_distributed.py).

argv: rank world_size init_file dataset_dir out_file. Rank and world size reach the loader only
through torch.distributed; the script records, per mode, what this rank saw.
"""

import sys
from pathlib import Path

import numpy as np
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from loaders import MemmapLoader  # noqa: E402

rank, world, init_file, dataset, out = sys.argv[1:6]
dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=int(rank), world_size=int(world))
seen = {}
for mode in ("windows", "packed", "grouped"):
    extra = {"pad_multiple": 16} if mode == "grouped" else {}  # refused where it has no effect
    loader = MemmapLoader(dataset, batch_size=3, seq_len=64, mode=mode, seed=7, drop_last=False, **extra)
    assert (loader.rank, loader.world_size) == (int(rank), int(world))
    batches = list(loader)
    seen[f"{mode}_shapes"] = np.array([b["input_ids"].shape for b in batches])
    if mode == "windows":  # a window is identified by its first token
        firsts = np.concatenate([b["input_ids"][:, 0].numpy() for b in batches])
        seen[mode] = firsts[firsts > 0]
    else:  # packed / grouped: the real tokens themselves
        seen[mode] = np.concatenate([b["input_ids"][b["input_ids"] > 0].numpy() for b in batches])
np.savez(out, **seen)
dist.barrier()
dist.destroy_process_group()
