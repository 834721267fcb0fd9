"""Host -> device: pinned buffers and side-stream copies that run ahead of the training step.

Pinning: with num_workers=0 the batch buffer is allocated pinned in the first place
(`collate.alloc_batch(pin=True)`, from torch's caching host allocator, so blocks are recycled and a
block is not reused before the copy reading it has finished); with workers, the DataLoader's pin
thread copies each shared-memory batch into such a block.

`Prefetcher` on CUDA: for each raw batch, on a side stream, `copy_(non_blocking=True)` of the
uint16/int32 buffers followed by `finish_batch` (int64 conversion, labels, masks) - so the int64
tensors are born on the device and the default stream never waits for a copy it could overlap.
`depth` batches are in flight ahead of the one handed out. Before a batch is handed out the
current stream waits on its event, and every output tensor is `record_stream`ed on the current
stream so the allocator does not recycle it while the step still uses it.
On CPU (or any non-CUDA device) it is a plain map of `finish_batch`; no CUDA call is made.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator

import torch

__all__ = ["Prefetcher", "move_batch"]


def move_batch(raw: dict, device: torch.device, non_blocking: bool = True) -> dict:
    """Tensors of a raw batch to `device` (non-blocking from pinned memory); other values as they are."""
    return {k: v.to(device, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v
            for k, v in raw.items()}


class Prefetcher:
    """`Prefetcher(device, finish)(raw_batches)` -> finished batches on `device`."""

    def __init__(self, device: torch.device | str, finish: Callable[[dict], dict], depth: int = 2):
        self.device = torch.device(device)
        self.finish = finish
        self.depth = int(depth)  # 0: each batch's copy is waited for as it is handed out

    def __call__(self, raws: Iterable[dict]) -> Iterator[dict]:
        if self.device.type != "cuda":
            for raw in raws:
                yield self.finish(move_batch(raw, self.device, non_blocking=False))
            return
        stream = torch.cuda.Stream(self.device)
        inflight: deque = deque()
        for raw in raws:
            inflight.append(self._launch(raw, stream))
            if len(inflight) > self.depth:
                yield self._land(*inflight.popleft())
        while inflight:
            yield self._land(*inflight.popleft())

    def _launch(self, raw: dict, stream: torch.cuda.Stream):
        # No wait on the default stream: the copy overlaps the step in flight. Memory is safe without
        # it: tensors made here come from the side stream's allocator pool, and those handed out are
        # record_stream'ed on the consumer stream, so they are not recycled before it is done.
        with torch.cuda.stream(stream):
            out = self.finish(move_batch(raw, self.device))
            done = torch.cuda.Event()
            done.record(stream)
        return out, done

    def _land(self, out: dict, done: torch.cuda.Event) -> dict:
        current = torch.cuda.current_stream(self.device)
        current.wait_event(done)
        for v in out.values():
            if isinstance(v, torch.Tensor) and v.device.type == "cuda":
                v.record_stream(current)
        return out
