"""Rows -> batches, in two halves.

`build_batch` runs in the DataLoader worker (or the main process with num_workers=0): it reads this
rank's rows straight from the shards into ONE contiguous token buffer of the dataset's dtype
(uint16 or int32) plus a small int32 `meta` array, both inside ONE byte buffer (allocated in shared
memory in a worker, so the queue passes a handle, not a copy). A B x T uint16 batch is 2 bytes per token across IPC, pinning and
H2D, against 16 for int64 input_ids + labels the usual way.

`finish_batch` runs where the batch will be used (on the GPU after the copy, or on the CPU): int64
conversion, label shifting and masking, attention masks. It is a handful of elementwise ops.

Raw batch: {"buf": uint8 tensor, "layout": ((name, dtype, shape, byte offset), ...), python ints}.
Arrays in the buffer ([B] rows; the first `num_rows` are real, the rest padding rows):
    windows  tokens [B, T + 1]                       input = [:, :T], labels = [:, 1:]
    packed   tokens [2, B, T] (plane 0 token ids, plane 1 position ids; padding is one segment)
             meta   int32 [B, K + 2]: cu_seqlens [B, K + 1] (padded with T), real tokens per row
    grouped  tokens [B, W + 1] (W = padded width <= T), meta int32 [B]: tokens read per row
"""

from __future__ import annotations

import numpy as np
import torch

from .packing import concat_row_segments
from .plan import EpochPlan

__all__ = ["alloc_batch", "unpack", "build_batch", "finish_batch", "to_long", "flat_cu_seqlens",
           "block_causal_mask"]

IGNORE_INDEX = -100
TORCH_DTYPES = {np.dtype(np.uint16): torch.uint16, np.dtype(np.int32): torch.int32}


def alloc_batch(parts: dict[str, tuple[tuple[int, ...], np.dtype]], pin: bool = False
                ) -> tuple[torch.Tensor, tuple, dict[str, np.ndarray]]:
    """ONE zeroed uint8 buffer holding every array of a batch, its layout, and numpy views to fill.

    One buffer means one shared-memory segment per batch to hand over (one fd passed, one pin copy,
    one H2D copy) however many arrays the mode needs; each part starts 8-byte aligned. In a
    DataLoader worker the storage is created in shared memory up front (as torch's default_collate
    does), so the queue moves a handle, not the bytes; in the main process it can be pinned.
    """
    layout, offset = [], 0
    for name, (shape, dtype) in parts.items():
        dtype = np.dtype(dtype)
        layout.append((name, dtype.str, tuple(int(x) for x in shape), offset))
        offset += -(-int(np.prod(shape)) * dtype.itemsize // 8) * 8
    if torch.utils.data.get_worker_info() is not None:
        buf = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(offset))
    else:
        buf = torch.empty(offset, dtype=torch.uint8, pin_memory=pin)
    raw = buf.numpy()
    raw.fill(0)  # numpy, not torch.zeros: torch fills > 32 KiB with an OpenMP team, ms of wake-ups
    views = {name: raw[off:off + int(np.prod(shape)) * np.dtype(dt).itemsize].view(dt).reshape(shape)
             for name, dt, shape, off in layout}
    return buf, tuple(layout), views


def unpack(raw: dict) -> dict[str, torch.Tensor]:
    """The arrays of a raw batch as tensors viewing its (possibly device-resident) byte buffer."""
    buf = raw["buf"]
    out = {}
    for name, dt, shape, off in raw["layout"]:
        dt = np.dtype(dt)
        n = int(np.prod(shape)) * dt.itemsize
        out[name] = buf[off:off + n].view(TORCH_DTYPES[dt]).view(shape)
    return out


def _read(plan: EpochPlan, src, starts, lens, out: np.ndarray, offsets) -> None:
    """Read token spans of several sources into the flat buffer `out` at `offsets`."""
    src, starts, lens, offsets = (np.asarray(a, dtype=np.int64) for a in (src, starts, lens, offsets))
    for k in np.unique(src).tolist():
        sel = src == k
        shards = plan.sources[k].shards
        if shards.dtype == out.dtype:
            shards.read_into(starts[sel], lens[sel], out, offsets[sel])
            continue
        tmp = np.empty(int(lens[sel].sum()), dtype=shards.dtype)  # a uint16 source in an int32 batch
        t_off = np.cumsum(lens[sel]) - lens[sel]
        shards.read_into(starts[sel], lens[sel], tmp, t_off)
        dest = np.repeat(offsets[sel] - t_off, lens[sel]) + np.arange(tmp.size)
        out.reshape(-1)[dest] = tmp


def batch_dtype(plan: EpochPlan, need_positions: bool = False) -> np.dtype:
    wide = any(s.shards.dtype == np.int32 for s in plan.sources) or (need_positions and plan.cfg.seq_len > 65535)
    return np.dtype(np.int32) if wide else np.dtype(np.uint16)


def build_batch(plan: EpochPlan, epoch: int, start: int, rank: int, pin: bool = False) -> dict:
    """This rank's part of the global batch starting at unit `start` of `epoch`, as a raw batch."""
    c = plan.cfg
    src, sample, width = plan.rows(epoch, start, rank)
    n = int(sample.size)
    raw = {"num_rows": n, "_mode": c.mode}
    if c.mode == "windows":
        t, layout, views = alloc_batch({"tokens": ((c.batch_size, c.seq_len + 1), batch_dtype(plan))}, pin)
        buf = views["tokens"]
        starts = np.empty(n, dtype=np.int64)
        for k, s in enumerate(plan.sources):
            sel = src == k
            starts[sel] = s.window_starts(sample[sel], epoch, k)
        _read(plan, src, starts, np.full(n, c.seq_len + 1), buf, np.arange(n) * (c.seq_len + 1))
        raw.update(buf=t, layout=layout)
    elif c.mode == "grouped":
        rows = n if plan.token_budget() else c.batch_size
        rows = max(rows, 1)  # a token-budget rank with nothing left gets one padding row
        t, layout, views = alloc_batch({"tokens": ((rows, width + 1), batch_dtype(plan)),
                                        "meta": ((rows,), np.int32)}, pin)
        buf = views["tokens"]
        starts, lens = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        for k, s in enumerate(plan.sources):
            sel = src == k
            idx, docs = s.doc_index(), s.doc_ids(sample[sel])
            starts[sel] = np.asarray(idx["starts"])[docs]
            lens[sel] = np.minimum(np.asarray(idx["lengths"])[docs], c.seq_len + 1)
        _read(plan, src, starts, lens, buf, np.arange(n) * (width + 1))
        views["meta"][:n] = lens
        raw.update(buf=t, layout=layout)
    else:
        raw.update(_packed(plan, src, sample, pin))
    return raw


def _packed(plan: EpochPlan, src, sample, pin: bool) -> dict:
    c, T, B = plan.cfg, plan.cfg.seq_len, plan.cfg.batch_size
    K = plan.max_pieces + 1  # + 1: the padding segment at the end of a row
    t, layout, views = alloc_batch({"tokens": ((2, B, T), batch_dtype(plan, need_positions=True)),
                                    "meta": ((B, K + 2), np.int32)}, pin)
    buf, meta = views["tokens"], views["meta"]
    p_src, p_start, p_len, seg_lens = [], [], [], []
    for b in range(B):
        if b < sample.size:
            k, r = int(src[b]), int(sample[b])
            s = plan.sources[k]
            if c.packing == "bfd":
                pp = s.pack_plan()
                a, e = int(pp["row_ptr"][r]), int(pp["row_ptr"][r + 1])
                starts, lens = np.asarray(pp["starts"][a:e]), np.asarray(pp["lengths"][a:e], dtype=np.int64)
            else:
                starts, lens = concat_row_segments(s.doc_index()["starts"], r, T, s.shards.num_tokens)
        else:
            starts, lens = np.zeros(0, np.int64), np.zeros(0, np.int64)
        real = int(lens.sum())
        p_src.append(np.full(lens.size, src[b] if b < sample.size else 0))
        p_start.append(starts)
        p_len.append(lens)
        segs = np.append(lens, T - real) if real < T else lens  # padding = one last segment
        seg_lens.append(segs)
        cu = np.concatenate([[0], np.cumsum(segs)])
        meta[b, :cu.size] = cu
        meta[b, cu.size:K + 1] = T
        meta[b, K + 1] = real
    lens = np.concatenate(p_len)
    row_off = np.concatenate([b * T + np.cumsum(x) - x for b, x in enumerate(p_len)])
    _read(plan, np.concatenate(p_src), np.concatenate(p_start), lens, buf[0], row_off)
    segs = np.concatenate(seg_lens)  # positions restart at 0 in every segment: [B * T]
    buf[1].reshape(-1)[:] = np.arange(B * T) - np.repeat(np.cumsum(segs) - segs, segs)
    return {"buf": t, "layout": layout, "max_seqlen": int(segs.max(initial=0))}


# ---------------------------------------------------------------------------------------------
# Device side.


def to_long(t: torch.Tensor) -> torch.Tensor:
    """uint16/int32 -> int64. uint16 goes through an int16 view and a mask, which every backend supports."""
    if t.dtype == torch.uint16:
        return t.view(torch.int16).long() & 0xFFFF
    return t.long()


def finish_batch(raw: dict, attention_mask: bool = False) -> dict:
    """Raw batch (any device) -> the training dict. Pure tensor ops; no host sync."""
    mode, n = raw["_mode"], raw["num_rows"]
    parts = unpack(raw)
    x = parts["tokens"]
    if mode == "windows":
        x = to_long(x)
        # clone, not contiguous(): with batch_size 1 the slice is already contiguous, so contiguous()
        # returned a view and masking a padding row wrote -100 into its input_ids (an out-of-range
        # embedding index on the GPU)
        labels = x[:, 1:].clone()
        labels[n:] = IGNORE_INDEX
        return {"input_ids": x[:, :-1].contiguous(), "labels": labels}
    if mode == "grouped":
        x = to_long(x)
        width = x.shape[1] - 1
        got = parts["meta"].long()[:, None]  # tokens read per row (<= T + 1)
        ar = torch.arange(width, device=x.device)[None]
        labels = torch.where(ar + 1 < got, x[:, 1:], IGNORE_INDEX)
        return {"input_ids": x[:, :width].contiguous(), "labels": labels, "attention_mask": ar < got}
    tok, pos = to_long(x[0]), to_long(x[1])
    meta = parts["meta"]
    real = meta[:, -1].long()[:, None]
    T = tok.shape[1]
    ar = torch.arange(1, T, device=tok.device)[None]
    same_doc = (pos[:, 1:] == pos[:, :-1] + 1) & (ar < real)  # next token continues this document
    labels = torch.full_like(tok, IGNORE_INDEX)
    labels[:, :-1] = torch.where(same_doc, tok[:, 1:], IGNORE_INDEX)
    out = {"input_ids": tok, "labels": labels, "position_ids": pos,
           "cu_seqlens": meta[:, :-1].contiguous(), "max_seqlen": raw["max_seqlen"]}
    if attention_mask:
        out["attention_mask"] = block_causal_mask(pos)
    return out


def block_causal_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """[B, T] positions (restarting at 0 per document) -> bool [B, 1, T, T], True = may attend.

    Causal within a document, nothing across documents; the SDPA `attn_mask` for packed rows.
    """
    seg = torch.cumsum(position_ids == 0, dim=1)
    T = position_ids.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool, device=position_ids.device).tril_()
    return ((seg[:, :, None] == seg[:, None, :]) & causal)[:, None]


def flat_cu_seqlens(cu_seqlens: torch.Tensor, seq_len: int) -> torch.Tensor:
    """[B, K + 1] per-row cu_seqlens -> int32 [B * K + 1] offsets into the flattened [B * T] batch,
    for flash_attn_varlen_func. Zero-length segments (the row padding of the fixed width) are kept
    so the shape is static."""
    B = cu_seqlens.shape[0]
    offs = torch.arange(B, device=cu_seqlens.device, dtype=torch.int32)[:, None] * seq_len
    flat = (cu_seqlens[:, :-1] + offs).reshape(-1)
    return torch.cat([flat, flat.new_tensor([B * seq_len])])
