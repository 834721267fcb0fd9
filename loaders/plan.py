"""What goes into each batch: the loader config, per-dataset sample spaces, and the epoch plan.

A *sample* is one row's worth of data in a dataset: a window of seq_len + 1 tokens (windows), a
packed row of a plan (packed), or a document (grouped). An epoch is a sequence of *positions*
0..N-1; position p maps to (source k, sample s) by the weighted interleave and a keyed permutation
of each source's samples, recomputed on demand from (seed, epoch, p) - never stored. Only grouped
mode materializes an n-sized array per epoch (its length-sorted order), cached on disk.

Global batch g covers positions [start, start + batch_size * world_size); rank r takes rows
[start + r * batch_size, ...), and of a shorter last batch (drop_last=False) of m rows, rows
[start + r * m // W, start + (r + 1) * m // W) (`rank_slice`). With `max_tokens`, the unit is a
token-budget micro-batch instead and rank r takes micro-batch start + r. Resume state is the number
of units consumed, so it does not depend on num_workers, and (at the same global batch) not on
world_size either.
"""

from __future__ import annotations

import functools
import hashlib
import json
import numbers
from dataclasses import asdict, dataclass, fields

import numpy as np

from pipeline.errors import PrepError

from .cache import ArrayCache
from .options import check_options_apply
from .packing import concat_max_segments, concat_num_rows, plan_bfd
from .samplers import (
    derive_key,
    epoch_rng,
    longest_batch_first,
    megabatch_order,
    mixture_lookup_batch,
    mixture_pattern,
    mixture_weights,
    padded_width,
    permute_batch,
    rank_slice,
    token_budget_batches,
)
from .shards import TokenShards

__all__ = ["LoaderConfig", "Source", "EpochPlan", "MODES", "is_flag", "is_int"]

MODES = ("windows", "packed", "grouped")
# grouped rows are the documents of 2+ tokens (Source.grouped_docs); they were every document, so a
# grouped state saved before (no rule in its fingerprint) is refused rather than resumed onto another order
GROUPED_ROWS_RULE = "documents of 2+ tokens"
GROUPED_ROWS = 2
_INT_FIELDS = ("batch_size", "seq_len", "pad_multiple", "max_tokens", "megabatch", "seed", "samples_per_epoch")
_BOOL_FIELDS = ("doc_aligned", "attention_mask", "shuffle", "drop_last")


def is_int(v) -> bool:
    """An integer (numpy's too), not a bool: True passed as 1 for counts, seeds and state fields."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def is_flag(v) -> bool:
    """True/False (numpy's too) or the ints 0/1 that YAML (`shuffle: 0`) and argparse (type=int) give;
    not 2, 1.0 or a string (a non-empty one was truthy). MemmapLoader's persistent_workers takes the same."""
    return isinstance(v, (bool, np.bool_)) or (is_int(v) and v in (0, 1))


@dataclass(frozen=True, kw_only=True)
class LoaderConfig:
    batch_size: int | None = None
    """Rows per rank per batch; the global batch is batch_size * world_size rows. Required, except with
    max_tokens (grouped), whose batches are sized by tokens: there it may be left out, and sets nothing."""
    seq_len: int
    """T: tokens per row (windows read T + 1 tokens; grouped rows are at most T)."""
    split: str = "train"
    mode: str = "windows"
    """windows | packed | grouped."""
    doc_aligned: bool = False
    """windows: start every window at a document start (else tile the token stream)."""
    packing: str = "bfd"
    """packed: "bfd" (best-fit-decreasing, padding only at row ends) or "concat" (cut the stream)."""
    long_docs: str = "split"
    """packed (bfd): documents longer than T are "split" into T-token pieces or "truncate"d."""
    attention_mask: bool = False
    """packed: also return a block-diagonal causal bool mask [B, 1, T, T] for SDPA (built on device)."""
    pad_multiple: int = 64
    """grouped: rows are padded to a multiple of this (capped at T), so compiled models see few shapes."""
    max_tokens: int | None = None
    """grouped: token-budget batches of at most this many padded tokens instead of batch_size rows."""
    megabatch: int | None = None
    """grouped: rows per sorted megabatch; default min(50, N // (4 * G)) * G as in HF's sampler."""
    shuffle: bool = True
    """False: samples in dataset order (evaluation); grouped then sorts consecutive megabatches."""
    seed: int = 0
    drop_last: bool = True
    """Drop the epoch's last partial global batch; else keep it, its rows spread evenly over the ranks,
    each rank's part filled up to batch_size with padding rows (labels -100; a rank gets only those when
    the batch has fewer rows than ranks, or with max_tokens fewer micro-batches: README)."""
    samples_per_epoch: int | None = None
    """Positions per epoch; default: every sample once (one dataset) or the most the mix allows."""

    def __post_init__(self):
        if self.batch_size is None and self.max_tokens is None:
            raise PrepError("batch_size must be an integer, got None; only token-budget batches (mode='grouped' "
                            "with max_tokens) are sized without it")
        self._check_types()
        if self.mode not in MODES:
            raise PrepError(f"mode must be one of {MODES}, got {self.mode!r}")
        if (self.batch_size is not None and self.batch_size < 1) or self.seq_len < 1:
            raise PrepError(f"batch_size and seq_len must be >= 1, got {self.batch_size}, {self.seq_len}")
        if self.packing not in ("bfd", "concat"):
            raise PrepError(f"packing must be 'bfd' or 'concat', got {self.packing!r}")
        if self.long_docs not in ("split", "truncate"):
            raise PrepError(f"long_docs must be 'split' or 'truncate', got {self.long_docs!r}")
        if self.samples_per_epoch is not None and self.samples_per_epoch < 1:
            raise PrepError(f"samples_per_epoch must be >= 1 (or None: every sample once), got {self.samples_per_epoch}")
        if self.pad_multiple < 1:
            raise PrepError(f"pad_multiple must be >= 1, got {self.pad_multiple}")
        if self.megabatch is not None and self.megabatch < 1:
            raise PrepError(f"megabatch must be >= 1 (or None: HF's default size), got {self.megabatch}")
        if self.seed < 0:  # numpy's SeedSequence refuses negative seeds (packed and grouped use it)
            raise PrepError(f"seed must be >= 0, got {self.seed}")
        # a row is padded up to seq_len at most, so a budget under seq_len cannot hold the widest one; it
        # was checked against min(seq_len, pad_multiple), and one-row batches then broke the budget
        # (seq_len 128, max_tokens 64: 1,480 of 1,890 batches over it)
        # only grouped batches by tokens: windows and packed took max_tokens and ignored it, so a batch
        # of batch_size * seq_len tokens went past the budget the caller set (4 x 32 rows under max_tokens=64)
        if self.max_tokens is not None and self.mode != "grouped":
            fit = (f"pass batch_size={self.max_tokens // self.seq_len}" if self.max_tokens >= self.seq_len else
                   f"one row of seq_len={self.seq_len} is already past it: lower seq_len to {self.max_tokens} or less")
            raise PrepError(f"max_tokens applies to mode 'grouped' only; mode {self.mode!r} batches are batch_size x "
                            f"seq_len tokens: for a budget of {self.max_tokens}, {fit} and leave max_tokens out")
        if self.max_tokens is not None and self.max_tokens < self.seq_len:
            raise PrepError(f"max_tokens={self.max_tokens} cannot hold one row of seq_len={self.seq_len} tokens (a "
                            "row is padded up to seq_len); raise max_tokens to at least seq_len, or lower seq_len")
        check_options_apply(self)  # pad_multiple in windows mode & co. were taken and ignored

    def _check_types(self) -> None:
        """Each field's type, named: a float or str batch_size/seq_len failed deep in numpy or torch on
        the first batch, a negative seed in numpy's SeedSequence (packed, grouped), megabatch=0 was
        silently taken as 1. Integral numpy values become ints (the state's order fields are JSON)."""
        defaults = {f.name: f.default for f in fields(self)}
        for name in _INT_FIELDS:
            v = getattr(self, name)
            if v is None and defaults[name] is None:
                continue
            if not is_int(v):
                # batch_size may be None only with max_tokens (checked first in __post_init__)
                none = " (or None)" if defaults[name] is None and (name != "batch_size" or self.max_tokens) else ""
                raise PrepError(f"{name} must be an integer{none}, got {v!r}")
            object.__setattr__(self, name, int(v))
        for name in _BOOL_FIELDS:
            if not is_flag(getattr(self, name)):  # 0/1 were refused here, though persistent_workers took them
                raise PrepError(f"{name} must be True or False, got {getattr(self, name)!r}")
            object.__setattr__(self, name, bool(getattr(self, name)))
        for name in ("split", "mode", "packing", "long_docs"):
            if not isinstance(getattr(self, name), str):
                raise PrepError(f"{name} must be a string, got {getattr(self, name)!r}")

    def order_inputs(self) -> dict:
        """The fields every sample order depends on (not batch_size/drop_last/split names)."""
        d = asdict(self)
        for k in ("batch_size", "drop_last", "attention_mask", "split"):
            d.pop(k)
        return d


def _empty_split_fix(shards, split: str) -> str:
    """'; ...' naming what fills an empty split: the splits that hold documents, and for the validation
    split the val_fraction it was made with (a small corpus at 0.0005 gets no document there)."""
    others = [name for name, info in shards.manifest.splits.items() if name != split and info.num_docs]
    fix = f"; read split={others[0]!r}" if others else ""
    fraction = (shards.manifest.recipe.get("output") or {}).get("val_fraction") if isinstance(
        shards.manifest.recipe, dict) else None
    if split == "val" and isinstance(fraction, (int, float)):
        fix += (f"{' or' if fix else ';'} re-tokenize with a larger output.val_fraction (it was {fraction}: "
                "each document goes to val with that chance)")
    return fix


class Source:
    """One dataset of the mix and its sample space for the configured mode; heavy arrays built lazily."""

    def __init__(self, shards: TokenShards, cfg: LoaderConfig, cache: ArrayCache):
        self.shards, self.cfg, self.cache = shards, cfg, cache
        self._memo: dict = {}  # arrays already opened in this process (hashing a cache key costs ~30 us)
        if shards.num_docs == 0:  # before the windows check, which called it "0 tokens, fewer than seq_len + 1"
            raise PrepError(f"{shards.root}: split {cfg.split!r} has no documents{_empty_split_fix(shards, cfg.split)}")
        if cfg.mode == "windows" and shards.num_tokens < cfg.seq_len + 1:
            raise PrepError(f"{shards.root}: split {cfg.split!r} has {shards.num_tokens} tokens, fewer than "
                            f"seq_len + 1 = {cfg.seq_len + 1}; lower seq_len or add data")

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_memo": {}}  # a worker re-opens the arrays from the cache itself

    def _memoized(self, name: str, get):
        got = self._memo.get(name)
        if got is None:
            got = self._memo[name] = get()
        return got

    def doc_index(self) -> dict[str, np.ndarray]:
        return self._memoized("doc", lambda: self.shards.doc_index(self.cache))

    def _key(self, **extra) -> dict:
        return {"fingerprint": self.shards.fingerprint, "seq_len": self.cfg.seq_len, **extra}

    def aligned_starts(self) -> np.ndarray:
        """windows + doc_aligned: starts of non-empty documents whose window fits, int64[n]."""
        def build():
            starts, lens = self.doc_index()["starts"], self.doc_index()["lengths"]
            ok = (np.asarray(lens) > 0) & (np.asarray(starts[:-1]) + self.cfg.seq_len + 1 <= self.shards.num_tokens)
            return {"starts": np.asarray(starts[:-1])[ok]}
        return self._memoized("aligned", lambda: self.cache.get("aligned", self._key(), build)["starts"])

    def pack_plan(self) -> dict[str, np.ndarray]:
        """packed + bfd: {"starts", "lengths", "row_ptr"} (see packing.PackPlan)."""
        def build():
            idx = self.doc_index()
            plan = plan_bfd(idx["starts"][:-1], idx["lengths"], self.cfg.seq_len, self.cfg.long_docs, self.cfg.seed)
            return {"starts": plan.starts, "lengths": plan.lengths, "row_ptr": plan.row_ptr}
        key = self._key(long_docs=self.cfg.long_docs, seed=self.cfg.seed)
        return self._memoized("packbfd", lambda: self.cache.get("packbfd", key, build))

    def grouped_docs(self) -> np.ndarray | None:
        """grouped: ids of the documents that become rows, int64[n]; None when that is all of them.

        A document of fewer than 2 tokens has no next-token target: as a row it only cost compute, an
        empty one had an all-False attention_mask row (NaN in SDPA), and length sorting gathered them
        into batches with no target at all (a mean loss of 0 / 0)."""
        def get():
            lens = np.asarray(self.doc_index()["lengths"])
            if int(lens.min(initial=2)) >= 2:
                return {}
            build = lambda: {"docs": np.flatnonzero(lens >= 2).astype(np.int64)}  # noqa: E731
            return self.cache.get("groupeddocs", {"fingerprint": self.shards.fingerprint}, build)
        return self._memoized("groupeddocs", get).get("docs")

    def doc_ids(self, samples: np.ndarray) -> np.ndarray:
        """grouped: sample ids -> document ids."""
        docs = self.grouped_docs()
        return np.asarray(samples, dtype=np.int64) if docs is None else np.asarray(docs[samples], dtype=np.int64)

    @functools.cached_property
    def num_samples(self) -> int:
        c, n_tok = self.cfg, self.shards.num_tokens
        if c.mode == "windows":
            return int(self.aligned_starts().size) if c.doc_aligned else (n_tok - 1) // c.seq_len
        if c.mode == "packed":
            return int(self.pack_plan()["row_ptr"].size - 1) if c.packing == "bfd" else concat_num_rows(n_tok, c.seq_len)
        docs = self.grouped_docs()
        return self.shards.num_docs if docs is None else int(docs.size)

    def no_samples_message(self) -> str:
        # windows never get here: a split of >= T + 1 tokens (checked on construction) has a tiled
        # window, and its first non-empty document, at token 0, an aligned one
        if self.cfg.mode == "grouped" and self.shards.num_tokens:
            return (f"{self.shards.root}: split {self.cfg.split!r}: none of its {self.shards.num_docs} documents has "
                    "2 or more tokens, so mode 'grouped' has no row with a next-token target; use mode "
                    "'windows' or 'packed', or leave this dataset out")
        return (f"{self.shards.root}: split {self.cfg.split!r} has {self.shards.num_docs} documents but all of "
                f"them are empty, so mode {self.cfg.mode!r} has nothing to batch; re-tokenize it, or leave "
                "this dataset out")

    @functools.cached_property
    def max_pieces(self) -> int:
        """packed: most document pieces in one row (sizes the fixed-width cu_seqlens)."""
        if self.cfg.packing == "bfd":
            return int(np.diff(self.pack_plan()["row_ptr"]).max(initial=0))
        return concat_max_segments(self.doc_index()["starts"], self.cfg.seq_len, self.shards.num_tokens)

    def window_starts(self, samples: np.ndarray, epoch: int, k: int) -> np.ndarray:
        """windows: first token of each sample's T + 1 tokens. Tiled windows shift by a per-epoch
        phase in [0, slack] (the tokens left over by the tiling), so epochs see different cuts."""
        c = self.cfg
        if c.doc_aligned:
            return np.asarray(self.aligned_starts()[samples], dtype=np.int64)
        slack = self.shards.num_tokens - 1 - self.num_samples * c.seq_len
        phase = derive_key(c.seed, k, epoch, 0xFA5E) % (slack + 1) if c.shuffle else 0
        return np.asarray(samples, dtype=np.int64) * c.seq_len + phase

    def clipped_lengths(self, samples: np.ndarray) -> np.ndarray:
        """grouped: input tokens of each document row, min(length, T)."""
        return np.minimum(np.asarray(self.doc_index()["lengths"])[self.doc_ids(samples)], self.cfg.seq_len)


class EpochPlan:
    """Positions of an epoch -> (source, sample) and -> per-rank batches; picklable, recomputable anywhere."""

    def __init__(self, sources: list[Source], weights, cfg: LoaderConfig, world_size: int, cache: ArrayCache):
        self.sources, self.cfg, self.world_size, self.cache = sources, cfg, int(world_size), cache
        self._grouped: tuple[int, dict, dict] | None = None  # (epoch, arrays, cache key) opened in this process
        self.counts = mixture_weights(weights) if len(sources) > 1 else np.ones(1, dtype=np.int64)
        self.pattern = mixture_pattern(self.counts)
        # rows per global batch; None for token-budget batches left without a batch_size (rows vary)
        self.global_batch = cfg.batch_size * self.world_size if cfg.batch_size is not None else None
        # grouped mode shuffles by its own megabatch permutation; a lone source needs no second one
        self.source_shuffle = cfg.shuffle and not (cfg.mode == "grouped" and len(sources) == 1)
        self.fingerprint = derive_key(*(int(s.shards.fingerprint[:15], 16) for s in sources),
                                      *self.counts.tolist(), hash_dict(cfg.order_inputs()),
                                      self.global_batch if cfg.mode == "grouped" and cfg.max_tokens is None else 0,
                                      *((GROUPED_ROWS,) if cfg.mode == "grouped" else ()))

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_grouped": None}

    def dataset_keys(self) -> list[str]:
        """Each source's dataset by its fingerprint's first 16 hex digits (order_fields' "datasets")."""
        return [s.shards.fingerprint[:16] for s in self.sources]

    def order_fields(self) -> dict:
        """What `fingerprint` hashes, field by field (JSON-safe), so a refused resume can name what differs."""
        grouped_batch = self.global_batch if self.cfg.mode == "grouped" and self.cfg.max_tokens is None else None
        rows = GROUPED_ROWS_RULE if self.cfg.mode == "grouped" else None
        return {"datasets": self.dataset_keys(), "split": self.cfg.split,
                "weights": self.counts.tolist(), **self.cfg.order_inputs(), "grouped_global_batch": grouped_batch,
                "grouped_rows": rows}

    @functools.cached_property
    def num_positions(self) -> int:
        for s in self.sources:
            # a source with no sample at all: alone it made "0 samples, pass drop_last=False" (which
            # does not help); in a mix the epoch silently shrank to 1 position, and drawing from it
            # (samples_per_epoch) indexed past its empty pack plan
            if s.num_samples == 0:
                raise PrepError(s.no_samples_message())
        if self.cfg.samples_per_epoch is not None:
            return int(self.cfg.samples_per_epoch)
        if len(self.sources) == 1:
            return self.sources[0].num_samples
        total = int(self.counts.sum())  # the most positions that draw no source twice (+-1)
        return max(1, min(s.num_samples * total // int(c) for s, c in zip(self.sources, self.counts)))

    def lookup(self, epoch: int, positions) -> tuple[np.ndarray, np.ndarray]:
        """Positions (int64[n]) -> (source ids, sample ids). A source drawn past its size wraps into a
        freshly shuffled pass, keyed by (seed, source, epoch, pass)."""
        pos = np.asarray(positions, dtype=np.int64)
        if len(self.sources) == 1:
            src, running = np.zeros_like(pos), pos
        else:
            src, running = mixture_lookup_batch(pos, self.counts, self.pattern)
        sample = np.empty_like(pos)
        for k, s in enumerate(self.sources):
            sel = np.flatnonzero(src == k)
            if not sel.size:
                continue
            n = s.num_samples
            passes, local = np.divmod(running[sel], n)
            for q in np.unique(passes).tolist():
                at = passes == q
                key = derive_key(self.cfg.seed, k, epoch, q)
                sample[sel[at]] = permute_batch(local[at], n, key) if self.source_shuffle else local[at]
        return src, sample

    @functools.cached_property
    def max_pieces(self) -> int:
        return max(s.max_pieces for s in self.sources)

    # -- grouped mode: the epoch's length-sorted order ------------------------------------------

    def megabatch_rows(self) -> int:
        c = self.cfg
        if c.megabatch is not None:
            return c.megabatch
        n = self.num_positions
        if c.max_tokens is None:
            g = self.global_batch
        else:  # rows of a typical token-budget batch: budget / mean row length
            s0 = self.sources[0]  # its rows' lengths: documents of 2+ tokens (Source.grouped_docs)
            mean = float(np.mean(s0.clipped_lengths(np.arange(s0.num_samples)))) if s0.num_samples else 1.0
            g = max(1, int(c.max_tokens // max(mean, 1.0)))
        return max(1, min(50, n // (4 * g))) * g

    def grouped_order(self, epoch: int) -> dict[str, np.ndarray]:
        """{"order": positions in batch order int64[N], "lengths": their row lengths int32[N],
        "bounds": micro-batch boundaries int64[nb+1] (max_tokens only)}; cached per epoch."""
        if self._grouped is not None and self._grouped[0] == epoch:
            return self._grouped[1]
        c = self.cfg

        def build():
            n = self.num_positions
            src, sample = self.lookup(epoch, np.arange(n, dtype=np.int64))
            lens = np.empty(n, dtype=np.int64)
            for k, s in enumerate(self.sources):
                sel = src == k
                lens[sel] = s.clipped_lengths(sample[sel])
            del src, sample
            mega = self.megabatch_rows()
            order = megabatch_order(lens, epoch_rng(c.seed, epoch, 0x9E0) if c.shuffle else None, mega)
            if c.max_tokens is None:
                order = longest_batch_first(order, lens, self.global_batch)
                return {"order": order, "lengths": lens[order].astype(np.int32)}
            bounds = token_budget_batches(lens[order], mega, c.max_tokens, c.pad_multiple, c.seq_len)
            first = int(np.argmax(lens[order[bounds[:-1]]]))  # the batch of the widest rows goes first
            if first:
                a, b = bounds[first], bounds[first + 1]
                order = np.concatenate([order[a:b], order[:a], order[b:]])
                sizes = np.diff(bounds)
                sizes = np.concatenate([sizes[first:first + 1], sizes[:first], sizes[first + 1:]])
                bounds = np.concatenate([[0], np.cumsum(sizes)])
            return {"order": order, "lengths": lens[order].astype(np.int32), "bounds": bounds}
        # the plan's fingerprint holds the rows' rule (GROUPED_ROWS): an order cached under the old one is not reused
        key = {"plan": self.fingerprint, "epoch": epoch, "n": self.num_positions, "megabatch": self.megabatch_rows()}
        got = self.cache.get("grouped", key, build)
        if self._grouped is not None:
            # one order per epoch, 12 B per row each: kept in the cache's memory they added up epoch
            # after epoch (anonymous RAM with cache_dir=False, open memory maps otherwise)
            self.cache.forget("grouped", self._grouped[2])
        self._grouped = (epoch, got, key)
        return got

    def prepare(self, epoch: int) -> None:
        """Build (or load) every cached array the workers will read for `epoch`, in this process."""
        c = self.cfg
        for s in self.sources:
            if c.mode == "windows" and c.doc_aligned:
                s.aligned_starts()
            elif c.mode != "windows":
                s.doc_index()
        if c.mode == "packed":
            _ = self.max_pieces
        if c.mode == "grouped":
            self.grouped_order(epoch)
            # this plan's orders of epochs before the last one go: ranks keep within an epoch of each
            # other (each step waits for all), and an older epoch, if asked for again, is rebuilt
            self.cache.prune("grouped", lambda inputs: inputs.get("plan") == self.fingerprint
                             and isinstance(inputs.get("epoch"), int) and inputs["epoch"] < epoch - 1)

    # -- units and batches ------------------------------------------------------------------------

    def token_budget(self) -> bool:
        return self.cfg.mode == "grouped" and self.cfg.max_tokens is not None

    def num_units(self, epoch: int) -> int:
        """Positions per epoch, or micro-batches per epoch with max_tokens."""
        if self.token_budget():
            return int(self.grouped_order(epoch)["bounds"].size - 1)
        return self.num_positions

    def units_per_step(self) -> int:
        return self.world_size if self.token_budget() else self.global_batch

    def batch_starts(self, epoch: int, consumed: int) -> range:
        """First unit of every remaining global batch of the epoch, after `consumed` units."""
        n, step = self.num_units(epoch), self.units_per_step()
        stop = n - step + 1 if self.cfg.drop_last else n
        return range(consumed, max(consumed, stop), step)

    def num_batches(self, epoch: int) -> int:
        return len(self.batch_starts(epoch, 0))

    def rows(self, epoch: int, start: int, rank: int) -> tuple[np.ndarray, np.ndarray, int]:
        """This rank's rows of the global batch at `start`: (source ids, sample ids, grouped width or 0)."""
        c, n = self.cfg, self.num_units(epoch)
        if self.token_budget():
            g = self.grouped_order(epoch)
            mb = start + rank
            # epoch tail without drop_last: this rank gets one all-padding row, no target (a NaN mean
            # loss, as documented in the README): a micro-batch is the unit resume counts, not split here
            if mb >= n:
                return np.zeros(0, np.int64), np.zeros(0, np.int64), min(c.pad_multiple, c.seq_len)
            a, b = int(g["bounds"][mb]), int(g["bounds"][mb + 1])
            width = int(padded_width(int(np.max(g["lengths"][a:b])), c.pad_multiple, c.seq_len))
            return *self.lookup(epoch, g["order"][a:b]), width
        stop = min(start + self.units_per_step(), n)
        a, b = rank_slice(start, stop, rank, self.world_size)
        if c.mode != "grouped":
            return *self.lookup(epoch, np.arange(a, b)), 0
        g = self.grouped_order(epoch)
        # every rank pads to the global batch's widest row: equal shapes across ranks, and the rank
        # batches concatenated equal the world_size=1 batch (resume across world sizes)
        width = int(padded_width(int(np.max(g["lengths"][start:stop])), c.pad_multiple, c.seq_len))
        return *self.lookup(epoch, g["order"][a:b]), width

    # -- reporting ----------------------------------------------------------------------------

    def stats(self, epoch: int) -> dict:
        c = self.cfg
        out = {"mode": c.mode, "samples_per_epoch": self.num_positions, "units_per_epoch": self.num_units(epoch),
               "batches_per_epoch": self.num_batches(epoch), "global_batch": self.global_batch}
        if c.mode == "packed":
            share = self.counts / self.counts.sum()
            fills = []
            for s in self.sources:
                tokens = s.shards.num_tokens if c.packing == "concat" else int(np.sum(s.pack_plan()["lengths"], dtype=np.int64))
                fills.append(tokens / (s.num_samples * c.seq_len))
            out["fill"] = float(np.dot(share, fills))
        if c.mode == "grouped":
            g = self.grouped_order(epoch)
            lens = np.asarray(g["lengths"], dtype=np.int64)
            bounds = g["bounds"] if self.token_budget() else np.arange(0, lens.size + self.global_batch,
                                                                      self.global_batch).clip(max=lens.size)
            bounds = np.unique(bounds)
            width = padded_width(np.maximum.reduceat(lens, bounds[:-1]), c.pad_multiple, c.seq_len)
            padded = int(np.sum(width * np.diff(bounds)))
            out["padding_fraction"] = 1.0 - float(lens.sum()) / max(1, padded)
        return out


def hash_dict(d: dict) -> int:
    return int(hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:15], 16)
