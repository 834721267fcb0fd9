"""Run as a script by test_memory.py: private memory loaders add, measured in a fresh process.

argv: dataset_dir first_batch(0|1) mode [mode ...]. Prints JSON {mode: {"num_docs",
"construct_bytes", "batch_bytes"}}, each delta taken around that mode's own loader.
Private memory = Private_Clean + Private_Dirty of /proc/self/smaps_rollup (= psutil's USS).
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def private_bytes() -> int:
    total = 0
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1]) * 1024
    return total


import torch  # noqa: E402,F401  (imported before the baseline: its own pages are not the loader's)
import torch.utils.data  # noqa: E402,F401

from loaders import MemmapLoader  # noqa: E402

path, first_batch, modes = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
result = {}
for mode in modes:
    kwargs = {"doc_aligned": True} if mode == "windows" else {}
    base = private_bytes()
    loader = MemmapLoader(path, batch_size=8, seq_len=256, mode=mode, **kwargs)
    result[mode] = {"num_docs": loader.num_docs, "construct_bytes": private_bytes() - base}
    if first_batch:
        batch = next(iter(loader))
        assert batch["input_ids"].shape[1] <= 256
        result[mode]["batch_bytes"] = private_bytes() - base
    del loader
print(json.dumps(result))
