"""Which rank of how many this process reads for: the arguments, else torch.distributed.

A loader takes its rank and world size when it is built. Built before
`torch.distributed.init_process_group`, it took rank 0 of world_size 1 in every process, so every
rank read the same batches (a 4-GPU run trained on one GPU's data four times), silently. What it
took from torch.distributed is checked again at each pass start (two calls into the process group,
no communication), and a process group that says otherwise stops the pass in one line.
"""

from __future__ import annotations

import torch.distributed as dist

from pipeline.errors import PrepError

__all__ = ["RankSource", "process_group"]


def process_group() -> tuple[int, int] | None:
    """(rank, world size) of the initialized default process group, or None."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


class RankSource:
    """Resolve rank / world_size (None: from torch.distributed) and re-check the ones resolved that way."""

    def __init__(self, rank, world_size):
        self.auto_rank, self.auto_world = rank is None, world_size is None
        group = process_group() or (0, 1)
        self.rank = group[0] if rank is None else rank
        self.world_size = group[1] if world_size is None else world_size

    def check(self, rank: int, world_size: int) -> None:
        """Refuse a pass when torch.distributed now gives another rank or world size than the loader took
        from it: the loader was built before init_process_group. Explicit rank / world_size arguments
        (a data-parallel group inside a larger world) are the caller's and are not checked."""
        if not (self.auto_rank or self.auto_world):
            return
        group = process_group()
        if group is None:
            return
        now = (group[0] if self.auto_rank else rank, group[1] if self.auto_world else world_size)
        if now != (rank, world_size):
            raise PrepError(f"this MemmapLoader was built before torch.distributed.init_process_group: it took rank "
                            f"{rank} of world_size {world_size}, but this process is rank {now[0]} of {now[1]}, so "
                            "every rank would read the same batches; build the loader after init_process_group, "
                            "or pass rank= and world_size=")

