"""MemmapLoader: token shards -> training batches, around torch's DataLoader.

    loader = MemmapLoader("out/owt", split="train", batch_size=8, seq_len=1024, mode="packed",
                          num_workers=2, seed=0, device="cuda")
    for batch in loader:          # one epoch; the next `for` continues with the next epoch
        ...
    state = loader.state_dict()   # -> MemmapLoader(...).load_state_dict(state)

The DataLoader is driven by a sampler of *global batch starts*; each worker builds whole rank
batches (`collate.build_batch`) from (epoch, start, rank) alone, so the batch sequence is the same
for any num_workers, and the state is just (epoch, units consumed), counted here on batches
actually handed to the caller; batches prefetched but not handed out are simply rebuilt.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import warnings
from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from pipeline.errors import PrepError

from .cache import ArrayCache, check_cache_dir
from .collate import build_batch, finish_batch
from .mixing import check_mix, check_weights
from .plan import EpochPlan, LoaderConfig, Source, is_flag, is_int
from .prefetch import Prefetcher
from .rank_settings import RankSettings, build_site
from .ranks import RankSource, process_group
from .shards import TokenShards

__all__ = ["MemmapLoader", "STATE_VERSION", "TooSmallForABatch"]

STATE_VERSION = 1
_PREFETCH_FACTOR = 2  # batches each worker makes ahead (torch's default with workers; its None means this)
_PREFETCH_DEPTH = 2  # batches copied ahead to a CUDA device
_WORKER_ERROR = "_prep_error"  # the key of a "batch" that carries a worker's PrepError instead
PathLike = str | os.PathLike


class TooSmallForABatch(PrepError):
    """An epoch holds fewer units than one global batch: with drop_last it would yield nothing."""

    def __init__(self, units: int, unit: str, step: int, advice: str = "lower batch_size, or pass drop_last=False"):
        super().__init__(f"an epoch has {units} {unit}, fewer than one global batch of {step}; {advice}")
        self.units, self.unit, self.step = units, unit, step


class _RankBatches(Dataset):
    """dataset[(epoch, start)] -> this rank's raw batch; pickled once per worker (small: no arrays)."""

    def __init__(self, plan: EpochPlan, rank: int, pin: bool):
        self.plan, self.rank, self.pin = plan, rank, pin

    def __getitem__(self, key: tuple[int, int]) -> dict:
        epoch, start = key
        try:
            return build_batch(self.plan, epoch, start, self.rank, pin=self.pin)
        except PrepError as e:
            # handed back as a batch: raised in a worker, torch re-raised it as "Caught PrepError in
            # DataLoader worker process 0. Original Traceback ...", the user's one line buried in it
            return {_WORKER_ERROR: (type(e), str(e))}


def _raise_worker_errors(raws: Iterator[dict]) -> Iterator[dict]:
    """Raise the PrepError a worker handed back (see _RankBatches) as itself, one line."""
    for raw in raws:
        if _WORKER_ERROR in raw:
            kind, message = raw[_WORKER_ERROR]
            try:
                error = kind(message)
            except TypeError:  # a subclass built from other arguments (TooSmallForABatch)
                error = PrepError(message)
            raise error
        yield raw


class _StartSampler(Sampler):
    """Yields (epoch, start) for the starts the loader sets before each pass, lazily: a range, not a
    list of 10^6 tuples. Set, not rebuilt, so persistent workers survive epochs."""

    def __init__(self):
        self.epoch, self.starts = 0, range(0)

    def __iter__(self):
        return ((self.epoch, s) for s in self.starts)

    def __len__(self) -> int:
        return len(self.starts)


def _too_small_advice(plan: EpochPlan, world_size: int) -> str:
    """What makes an epoch hold one global batch. "lower batch_size" was the advice with batch_size 1
    on 8 ranks (the ranks make the batch) and with max_tokens (batch_size sets no batch's size)."""
    c = plan.cfg
    if plan.token_budget():  # one micro-batch per rank and step
        fixes = [f"lower max_tokens (now {c.max_tokens})", f"use fewer than {world_size} ranks"]
    else:
        fixes = [f"lower batch_size (now {c.batch_size})"] if c.batch_size > 1 else []
        fixes += [f"use fewer than {world_size} ranks"] if world_size > 1 else []
    fixes.append("pass drop_last=False")
    return ", ".join(fixes[:-1]) + (", or " if len(fixes) > 1 else "") + fixes[-1]


def _passthrough(raw):
    return raw


def _order_difference(saved, mine: dict, saved_world=None, batch_size=None, world_size=None) -> str:
    """'another mode ('windows'; this loader: 'packed')' for the fields of two order_fields() that differ.
    The grouped global batch is told as batch_size x world_size: resuming on more GPUs changes it, and
    "grouped_global_batch 6 (this loader: 9)" named neither."""
    if not isinstance(saved, dict):  # a state from before the fields were saved
        return "other data or another sample order (datasets, weights, mode, seq_len, seed, or the grouped global batch)"
    diff = []
    for k in mine:
        if saved.get(k) == mine[k]:
            continue
        if k == "grouped_global_batch" and mine[k] is not None:
            diff.append(_global_batch_difference("grouped global batch", saved.get(k), saved_world, batch_size,
                                                 world_size, "the grouped order is built per global batch"))
        else:
            diff.append(f"{k} {saved.get(k)!r} (this loader: {mine[k]!r})")
    return "another run: " + ("; ".join(diff) if diff else "the sample order differs")


def _global_batch_difference(what: str, saved, saved_world, batch_size, world_size, why: str) -> str:
    """'global batch 8 on world_size 2 (this loader: 12 = batch_size 6 x world_size 2; <why>: pass
    batch_size=4 to resume it on 2 ranks)': the saved global batch, and the batch_size that gives it here."""
    was, fit = saved, ""
    if is_int(saved_world) and saved_world != world_size:
        was = f"{was} on world_size {saved_world}"
    if is_int(saved) and saved % world_size == 0:
        fit = f": pass batch_size={saved // world_size} to resume it on {world_size} ranks"
    return f"{what} {was} (this loader: {batch_size * world_size} = batch_size {batch_size} x world_size {world_size}; {why}{fit})"


def _parse_sources(data) -> list[tuple[PathLike, float]]:
    if isinstance(data, (str, os.PathLike)):
        return [(data, 1.0)]
    items = list(data)
    if not items or not all(isinstance(x, (tuple, list)) and len(x) == 2 for x in items):
        raise PrepError(f"expected a dataset dir or a list of (dir, weight) pairs, got {data!r}")
    return list(zip([p for p, _ in items], check_weights(items)))


def _check_config_names(config: dict) -> None:
    """Unknown or missing LoaderConfig arguments, named (they were TypeErrors about LoaderConfig.__init__)."""
    known = [f.name for f in dataclasses.fields(LoaderConfig)]
    unknown = sorted(set(config) - set(known))
    if unknown:
        raise PrepError(f"MemmapLoader got unknown argument(s) {', '.join(unknown)}; loader settings are "
                        f"{', '.join(known)} (see LoaderConfig), plus the DataLoader and device arguments")
    required = {"batch_size": "rows per rank per batch", "seq_len": "tokens per row"}
    if config.get("max_tokens") is not None:  # token-budget batches: batch_size sets no batch's size
        del required["batch_size"]
    missing = [f"{k}=... ({what})" for k, what in required.items() if k not in config]
    if missing:
        raise PrepError(f"MemmapLoader needs {' and '.join(missing)}")


def _check_worker_options(num_workers: int, prefetch_factor, persistent_workers, multiprocessing_context) -> int:
    """DataLoader options of worker processes, as loaders.options refuses a mode's option in another mode:
    with num_workers=0 a value other than the default did nothing, silently (torch's DataLoader raises
    ValueError there for each of the three, even for prefetch_factor=2). The defaults are taken in
    torch's spelling too: prefetch_factor=None (torch 2.x's default, its only value without workers) and
    persistent_workers 0/1 (ints from argparse or YAML). Returns the prefetch_factor for the DataLoader."""
    if not is_flag(persistent_workers):  # LoaderConfig's booleans take the same
        raise PrepError(f"persistent_workers must be True or False, got {persistent_workers!r}")
    if num_workers > 0:  # torch asserted on the first batch, then warned from the iterator's __del__
        methods = multiprocessing.get_all_start_methods()
        if isinstance(multiprocessing_context, str) and multiprocessing_context not in methods:
            # torch's ValueError came from the first iter(), as a traceback
            raise PrepError(f"multiprocessing_context={multiprocessing_context!r} is not a start method here; use one "
                            f"of {', '.join(map(repr, methods))} (or None: the platform's default)")
        if prefetch_factor is None:  # torch's default: 2 batches per worker
            return _PREFETCH_FACTOR
        return _check_count("prefetch_factor", prefetch_factor, 1)
    for option, value, defaults in (("prefetch_factor", prefetch_factor, (_PREFETCH_FACTOR, None)),
                                    ("persistent_workers", persistent_workers, (False,)),
                                    ("multiprocessing_context", multiprocessing_context, (None,))):
        if value not in defaults:  # `in` compares with == too: persistent_workers=0 is False
            shown = " or ".join(map(repr, defaults))
            raise PrepError(f"{option}={value!r} has no effect with num_workers=0: it applies to worker processes "
                            f"(num_workers > 0) only; leave {option} out (or at its default {shown}), or "
                            "set num_workers")
    return _PREFETCH_FACTOR


def _check_count(name: str, value, least: int) -> int:
    if not is_int(value) or value < least:
        raise PrepError(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)


class MemmapLoader:
    """Batches from one dataset dir, or a weighted mix `[("a", 0.7), ("b", 0.3)]` (weights > 0, relative;
    the datasets of one tokenizer: see mixing.check_mix).

    Keyword arguments not listed here are `LoaderConfig` fields (mode, seq_len, batch_size, ...).
    Other arguments: `epoch` to start at; `rank`/`world_size` (default: torch.distributed when it is
    initialized, else 0/1); `num_workers`, `prefetch_factor`, `persistent_workers`,
    `multiprocessing_context` ("fork", "spawn", ...) for the DataLoader; `device` ("cpu", "cuda",
    ...), `pin_memory` (default: device is CUDA), `prefetch_depth` (batches copied ahead on CUDA);
    `expect_tokenizer` (name or sha256) and `verify` (full sha256 check on open); `cache_dir` for
    derived arrays (default DIR/.cache/loaders, or the user cache dir if DIR is read-only; False
    keeps them in memory).
    """

    def __init__(self, data: PathLike | Sequence[tuple[PathLike, float]], *, epoch: int = 0,
                 rank: int | None = None, world_size: int | None = None, num_workers: int = 0,
                 prefetch_factor: int | None = _PREFETCH_FACTOR, persistent_workers: bool = False,
                 multiprocessing_context: str | None = None, device: str | torch.device = "cpu",
                 pin_memory: bool | None = None, prefetch_depth: int = _PREFETCH_DEPTH, expect_tokenizer: str | None = None,
                 verify: bool = False, cache_dir: PathLike | bool | None = None, **config):
        _check_config_names(config)
        self.config = LoaderConfig(**config)
        specs = _parse_sources(data)
        self._ranks = RankSource(rank, world_size)  # None: torch.distributed's, re-checked at each pass
        rank, world_size = self._ranks.rank, self._ranks.world_size
        # checked as integers: rank=1.5 was truncated to rank 1 (two processes reading one rank's rows)
        world_size, rank = _check_count("world_size", world_size, 1), _check_count("rank", rank, 0)
        if rank >= world_size:
            raise PrepError(f"rank {rank} is outside world_size {world_size}")
        self.rank, self.world_size = rank, world_size
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError):  # torch's message lists 20 device types; `prep bench-loader` printed a traceback
            raise PrepError(f"device={device!r} is not a torch device; use 'cpu' or 'cuda' (or 'cuda:N')") from None
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise PrepError(f"device={device!r} but CUDA is not available; use device='cpu'")
        count = torch.cuda.device_count() if self.device.type == "cuda" else 0
        if self.device.type == "cuda" and self.device.index is not None and self.device.index >= count:
            # cuda:{RANK} on the second node of 8-GPU nodes: "CUDA error: invalid device ordinal" as a
            # traceback from the first batch's copy stream
            raise PrepError(f"device={device!r} but this machine has {count} CUDA device(s) (cuda:0 to "
                            f"cuda:{count - 1}); with several nodes pass the local rank (LOCAL_RANK: "
                            "f'cuda:{local_rank}'), not the global rank")
        if pin_memory is not None and not is_flag(pin_memory):  # "no" was truthy: pinned
            raise PrepError(f"pin_memory must be True, False or None (pin on CUDA devices), got {pin_memory!r}")
        self.pin = self.device.type == "cuda" if pin_memory is None else bool(pin_memory)
        if self.pin and not torch.cuda.is_available():
            # as torch's DataLoader does (it warns and does not pin): with num_workers 0 the batch was
            # allocated pinned here, and torch raised "no pinned memory allocator" on a CPU-only machine
            warnings.warn("pin_memory=True, but no CUDA device is available: batches are not pinned", stacklevel=2)
            self.pin = False
        check_cache_dir(cache_dir)
        if cache_dir is False:
            cache = ArrayCache(None)
        elif cache_dir is None or cache_dir is True:
            cache = ArrayCache.for_dataset(specs[0][0])  # resolved (and probed) on first use
        else:
            cache = ArrayCache(cache_dir)
        shards = [TokenShards(p, self.config.split, expect_tokenizer=expect_tokenizer, verify=verify)
                  for p, _ in specs]
        check_mix(shards, expect_tokenizer)
        self.plan = EpochPlan([Source(s, self.config, cache) for s in shards], [w for _, w in specs],
                              self.config, self.world_size, cache)
        self.num_workers = _check_count("num_workers", num_workers, 0)  # 1.5 was taken as 1, "2" a ValueError
        prefetch_factor = _check_worker_options(self.num_workers, prefetch_factor, persistent_workers,
                                                multiprocessing_context)
        self._dl_kwargs = {"num_workers": self.num_workers, "persistent_workers": bool(persistent_workers),
                           "multiprocessing_context": multiprocessing_context}
        if self.num_workers > 0:  # torch raises ValueError for any prefetch_factor but None without workers
            self._dl_kwargs["prefetch_factor"] = prefetch_factor
        prefetch_depth = _check_count("prefetch_depth", prefetch_depth, 0)  # 0 and -1 were taken as 1
        if prefetch_depth != _PREFETCH_DEPTH and self.device.type != "cuda":
            # a warning, not a refusal: the same config runs on CPU in tests and on CUDA in training
            warnings.warn(f"prefetch_depth={prefetch_depth} has no effect on device {str(self.device)!r}: it sets "
                          "how many batches are copied ahead to a CUDA device; on CPU, num_workers and "
                          "prefetch_factor set how far ahead batches are made", stacklevel=2)
        # a partial, not a bound method: a loader -> prefetcher -> loader cycle would leave persistent
        # workers to the cycle collector, whose shutdown of them hangs for 5 s per worker
        self._prefetcher = Prefetcher(self.device, functools.partial(finish_batch, attention_mask=self.config.attention_mask),
                                      prefetch_depth)
        self._sampler = _StartSampler()
        self._dataloader: DataLoader | None = None
        self._passes = 0  # iterations started: the newest is the only one that may continue
        self._open_pass = 0  # the pass number of a pass handing out batches now (0: none open)
        self._restored = False  # load_state_dict set the position and no pass has started since
        self._kept_position = False  # set_epoch(e) kept a restored position and no pass has started since
        self.epoch, self.consumed = _check_count("epoch", epoch, 0), 0  # a negative one failed in numpy
        # counted here, when built, with the place that built it (loaders/rank_settings.py); last, so a
        # construction refused on one rank (and caught) does not shift that rank's count
        self._rank_settings = None if self.world_size == 1 else RankSettings(
            {"site": build_site(), "datasets": self.plan.dataset_keys(), "split": self.config.split})

    def __getstate__(self) -> dict:
        # with persistent workers the DataLoader holds its live worker iterator, which cannot be
        # pickled (NotImplementedError from torch); a copy starts its own DataLoader on first use
        return {**self.__dict__, "_dataloader": None}

    # -- iteration --------------------------------------------------------------------------------

    def _get_dataloader(self) -> DataLoader:
        if self._dataloader is None:
            # pinning: in the main process build straight into pinned memory; with workers, the
            # DataLoader's pin thread pins the shared-memory batches
            workers = self.num_workers > 0
            self._dataloader = DataLoader(_RankBatches(self.plan, self.rank, pin=self.pin and not workers),
                                          sampler=self._sampler, batch_size=None, collate_fn=_passthrough,
                                          pin_memory=self.pin and workers, **self._dl_kwargs)
        return self._dataloader

    def __iter__(self) -> Iterator[dict]:
        """The remaining batches of the current epoch; at its end the epoch advances."""
        self._ranks.check(self.rank, self.world_size)  # built before init_process_group: every rank read rank 0's
        self._compare_ranks()
        self._restored = False
        kept, self._kept_position = self._kept_position, False
        for s in self.plan.sources:  # one stat each: rebuilt under us, the plan would mix two datasets
            s.shards.check_unchanged()
        starts = self.plan.batch_starts(self.epoch, self.consumed)
        if not starts and self.consumed and kept:
            # set_epoch(e) kept a state saved at epoch e's last batch: this is the trainer's epoch-e
            # pass, and it has nothing left. Running e+1 here ran it twice (its set_epoch(e+1) next)
            self.set_epoch(self.epoch + 1)
            return
        if not starts and self.consumed:  # resumed exactly at an epoch's end, with no set_epoch: go on
            self.set_epoch(self.epoch + 1)
            starts = self.plan.batch_starts(self.epoch, 0)
        epoch, n_units, step = self.epoch, self.plan.num_units(self.epoch), self.plan.units_per_step()
        if not self.plan.num_batches(epoch):
            raise TooSmallForABatch(n_units, self.state_dict()["unit"], step, _too_small_advice(self.plan, self.world_size))
        self.plan.prepare(epoch)  # build cached arrays here, once, before any worker starts
        self._sampler.epoch, self._sampler.starts = epoch, starts
        # One live pass at a time. A second iter() while an older pass was suspended mid-epoch left
        # both running from the same counter: the older one handed out batches the newer had too
        # (num_workers 0), or the two split one persistent-worker stream between them, and
        # state_dict() counted neither right. The older pass now stops with an error instead (and so
        # does a pass whose position set_epoch / load_state_dict moved).
        self._passes += 1
        this_pass = self._open_pass = self._passes
        raws = iter(self._get_dataloader())
        try:
            for start, batch in zip(starts, self._prefetcher(_raise_worker_errors(raws))):
                self.consumed = min(start + step, n_units)  # counted on hand-out, not on prefetch
                yield batch
                if self._passes != this_pass:
                    raise PrepError("this loader was iterated again (a newer `for ... in loader` or iter(loader)), "
                                    "or its position set (set_epoch, load_state_dict), while this iterator was "
                                    "still open; it cannot continue. Keep one iterator per loader, and move it "
                                    "between passes: break out of the loop, then set_epoch and iterate again")
        except Exception:
            # a pass ended by an error (DatasetChanged, ...): its workers stop now. Left to the error's
            # traceback, which holds this frame, they stopped whenever the cycle collector came by
            # (`except ... as e` kept, pytest.raises), and its shutdown waits 5 s per worker
            if not self._dl_kwargs["persistent_workers"] and hasattr(raws, "_shutdown_workers"):
                raws._shutdown_workers()
            raise
        finally:  # ended, broken out of, or stopped by an error: batches_left speaks of the next pass again
            if self._open_pass == this_pass:
                self._open_pass = 0
        if self.epoch == epoch:  # ran to the end (a `break` closes the generator at the yield)
            self.set_epoch(epoch + 1)

    def _compare_ranks(self) -> None:
        """At its first pass: this loader's settings against the first rank's to start its counterpart
        (the process group's store; loaders/rank_settings.py), when it reads for that group's ranks
        (rank= / world_size= of a data-parallel subgroup, or rank=0, world_size=1: not checked)."""
        if self._rank_settings is None or process_group() != (self.rank, self.world_size):
            return
        c = self.plan.order_fields()
        settings = {**dataclasses.asdict(self.config), "datasets": c["datasets"], "weights": c["weights"],
                    "world_size": self.world_size, "epoch": self.epoch, "consumed": self.consumed}
        self._rank_settings.check(self.rank, settings)

    def _pass_position(self) -> tuple[int, int]:
        """(epoch, units consumed) of the open pass, else of the pass the next `for` starts: a position at
        an epoch's end goes on with the next epoch (see __iter__), unless set_epoch kept it (an empty pass)."""
        if self._open_pass and self._open_pass == self._passes:
            return self.epoch, self.consumed
        if self.consumed and not self._kept_position and not self.plan.batch_starts(self.epoch, self.consumed):
            return self.epoch + 1, 0
        return self.epoch, self.consumed

    def __len__(self) -> int:
        """Batches in the whole epoch of the open (or next) pass, from its start, as torch's DataLoader and
        torchdata's StatefulDataLoader count it after a resume too: `epochs * len(loader)` sizes a
        schedule. The batches that pass still yields: `batches_left`."""
        return self.plan.num_batches(self._pass_position()[0])

    @property
    def batches_left(self) -> int:
        """Batches the open pass will still hand out, or the next `for` will, after a resume too (len()
        counts the whole epoch): `tqdm(loader, total=len(loader), initial=len(loader) - loader.batches_left)`."""
        return len(self.plan.batch_starts(*self._pass_position()))

    def close(self) -> None:
        """Stop persistent workers and close the shard files this process opened (with num_workers=0
        up to MAX_OPEN_FILES of them stayed open until the loader was collected). The loader stays
        usable: a later pass re-opens what it reads."""
        it = getattr(self._dataloader, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        self._dataloader = None
        for s in self.plan.sources:
            s.shards.close()

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its beginning; right after load_state_dict, the restored epoch keeps its
        restored position (trainers call set_epoch(e) at the top of every epoch, resumed ones too). A
        state saved at epoch e's last batch has none left: that pass yields nothing and ends at (e+1, 0)."""
        epoch = _check_count("epoch", epoch, 0)
        restored, self._restored = self._restored, False
        self._kept_position = False
        if restored and epoch == self.epoch:
            # `for e in range(start, E): loader.set_epoch(e); for batch in loader` after a resume set
            # consumed to 0 here: the resumed run silently repeated the epoch's first batches
            self._passes += 1
            self._kept_position = True  # the next pass is the trainer's epoch-e pass (see __iter__)
            return
        # a state taken on epoch e's last batch has nothing of e left: set_epoch(e + 1) next is where it
        # goes (a trainer counting epochs by finished steps), not a position dropped
        at_end = epoch == self.epoch + 1 and not self.plan.batch_starts(self.epoch, self.consumed)
        if restored and self.consumed and not at_end:
            warnings.warn(f"set_epoch({epoch}) right after load_state_dict of a state {self.consumed} "
                          f"{self.state_dict()['unit']} into epoch {self.epoch}: that position is dropped and epoch "
                          f"{epoch} starts from its beginning; call set_epoch({self.epoch}), or none, to resume it",
                          stacklevel=2)
        self.epoch, self.consumed = epoch, 0
        # a pass still open would go on with the old epoch's batches and write their count over the
        # new position (state_dict: epoch 5 with epoch 0's count): it stops instead
        self._passes += 1

    # -- state --------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return {"version": STATE_VERSION, "epoch": self.epoch, "consumed": self.consumed,
                "unit": "microbatches" if self.plan.token_budget() else "samples",
                "fingerprint": self.plan.fingerprint, "seed": self.config.seed,
                "global_batch": self.plan.global_batch, "world_size": self.world_size,
                "order": self.plan.order_fields()}

    def load_state_dict(self, state: dict, strict: bool = True) -> MemmapLoader:
        """Continue where `state` was taken: the next batches equal those of an uninterrupted run."""
        # a state comes back from a checkpoint file: check its shape here, or a None, a list or a
        # missing field surfaced as AttributeError/KeyError, and a negative count resumed silently
        if not isinstance(state, dict):
            raise PrepError(f"loader state must be the dict state_dict() returned, got {type(state).__name__}")
        if state.get("version") != STATE_VERSION:
            raise PrepError(f"loader state version {state.get('version')!r}; this loader reads {STATE_VERSION}")
        for key in ("epoch", "consumed"):
            v = state.get(key)
            if not is_int(v) or v < 0:
                raise PrepError(f"loader state field {key!r} must be an integer >= 0, got {v!r}; pass the dict "
                                "state_dict() returned, unchanged")
        if strict and state.get("fingerprint") != self.plan.fingerprint:
            why = _order_difference(state.get("order"), self.plan.order_fields(), state.get("world_size"),
                                    self.config.batch_size, self.world_size)
            raise PrepError(f"loader state was saved for {why}; "
                            "resuming would not continue the same run. Construct the loader with the saved "
                            "settings, or pass strict=False to resume anyway")
        saved_batch = state.get("global_batch")
        if strict and not self.plan.token_budget() and is_int(saved_batch) and saved_batch != self.plan.global_batch:
            # windows / packed: the fingerprint holds no batch size (the sample order does not depend on
            # it), so a state of 4 x 2 rows resumed under 6 x 2 silently, the same samples cut into
            # other batches from there on; grouped names its global batch through the fingerprint
            why = _global_batch_difference("global batch", saved_batch, state.get("world_size"), self.config.batch_size,
                                           self.world_size, "batches are cut per global batch")
            raise PrepError(f"loader state was saved for another run: {why}; resuming would not continue the same "
                            "run. Construct the loader with the saved settings, or pass strict=False to resume "
                            "anyway (the same samples, in batches of this loader's size)")
        self.epoch, self.consumed = int(state["epoch"]), int(state["consumed"])
        self._kept_position = False
        self._passes += 1  # as set_epoch: an open pass must not continue from the old position
        self._restored = True  # until the next pass: set_epoch(this epoch) keeps the position
        return self

    # -- reporting ------------------------------------------------------------------------------

    def stats(self) -> dict:
        """Counts for the current epoch, plus `fill` (packed) or `padding_fraction` (grouped)."""
        return {**self.plan.stats(self.epoch), "rank": self.rank, "world_size": self.world_size,
                "num_workers": self.num_workers}

    @property
    def vocab_size(self) -> int:
        """Ids the model's embedding must hold: the largest vocab_size of the datasets (a mix may differ)."""
        return max(s.shards.manifest.vocab_size for s in self.plan.sources)

    @property
    def num_docs(self) -> int:
        return sum(s.shards.num_docs for s in self.plan.sources)

    @property
    def num_tokens(self) -> int:
        return sum(s.shards.num_tokens for s in self.plan.sources)
