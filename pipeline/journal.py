"""Run state in DIR/.prep/: the lock, the plan fingerprint and the append-only journal.

A unit counts as finished only once its journal line is on disk (written and fsynced after its
part files were renamed into place; the parts themselves are not fsynced, their crc32s in the line
are checked on resume), so a crash at any point leaves either a finished unit or one that is redone
from scratch on the next run. Redoing a unit rewrites the same bytes. A torn or
unreadable journal tail (a crash mid-append, a power cut) is cut off and its units are redone.

The journal also records each final shard once it is placed and on disk (`record_placed`, a line
`{"placed": split, "shard": k, ..., "parts": [names]}`), after which its parts are deleted: parts
never pile up beside the whole output, and a resumed run keeps the shards already placed.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import orjson

from pipeline import faults
from pipeline.errors import PrepError
from pipeline.manifest import write_json_atomic

__all__ = ["RunState"]


class RunState:
    def __init__(self, out: Path):
        self.out = Path(out)
        self.dir = self.out / ".prep"
        self.parts = self.dir / "parts"
        self.rejects = self.dir / "rejects"
        self.journal_path = self.dir / "journal.jsonl"
        self.plan_path = self.dir / "plan.json"
        self.lock_path = self.dir / "lock"
        self.placed: dict[str, list[dict]] = {}  # split -> journaled final shards 0, 1, ... (see start)
        self.plan: dict = {}  # plan.json (see start)
        self._append_lock = threading.Lock()  # units are journaled by the main thread, shards by another
        self.trash = self.dir / "trash"
        self._deleters: list[threading.Thread] = []
        self._claimed: set[str] = set()  # trash batches a deleter of this run has taken

    # -- lock -----------------------------------------------------------------------------------
    @contextmanager
    def lock(self):
        """Refuse a second concurrent run on the same output, naming the holder's pid.

        An exclusive `flock` on DIR/.prep/lock held for the whole run: the kernel drops it when the
        holder ends, however it ends (kill -9 included), so there is no stale lock to take over and
        a reused pid cannot keep one alive. "pid host" is written into the file for the refusal
        message. Where flock is unsupported (some network filesystems) an O_EXCL pid file is used.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        me = f"{os.getpid()} {socket.gethostname()}"
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid, host = self._flock_holder()
            raise PrepError(f"{self.out}: another prep run (pid {pid} on {host}) is writing here; wait for it "
                            "to finish, or stop it, then re-run (it keeps its finished units)") from None
        except OSError:  # ENOLCK, EOPNOTSUPP: no flock on this filesystem
            os.close(fd)
            with self._pidfile_lock(me):
                yield
            return
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{me}\n".encode(), 0)
            yield
        finally:
            try:
                os.ftruncate(fd, 0)  # the file stays (unlinking a flocked file races); emptied
            finally:
                os.close(fd)

    def _flock_holder(self) -> tuple[str, str]:
        """(pid, host) written by the flock holder; it may not have written them yet, so retry briefly."""
        for _ in range(40):
            try:
                pid, host = self.lock_path.read_text().split(maxsplit=1)
                host = host.strip()
                return pid, host
            except (OSError, ValueError):
                time.sleep(0.025)
        return "unknown", "unknown host"

    @contextmanager
    def _pidfile_lock(self, me: str):
        """Fallback lock without flock: O_EXCL file; a dead holder's lock is taken over."""
        lock_path = self.dir / "lock.pid"
        for _ in range(2):
            try:
                fd = os.open(lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder(lock_path)
                if holder is not None:
                    pid, host = holder
                    raise PrepError(f"{self.out}: another prep run (pid {pid} on {host}) is writing here; wait "
                                    f"for it to finish, or if it is gone, delete {lock_path}") from None
                lock_path.unlink(missing_ok=True)  # stale: its process is gone
                continue
            with os.fdopen(fd, "w") as f:
                f.write(me)
            break
        else:
            raise PrepError(f"{lock_path}: could not take the lock; delete it if no prep run is active")
        try:
            yield
        finally:
            if lock_path.exists() and lock_path.read_text() == me:
                lock_path.unlink()

    @staticmethod
    def _holder(lock_path: Path) -> tuple[int, str] | None:
        """(pid, host) of a live pid-file lock holder, or None when the lock is stale."""
        try:
            pid_s, host = lock_path.read_text().split(" ", 1)
            pid = int(pid_s)
        except (OSError, ValueError):
            return None
        if host != socket.gethostname():
            return pid, host  # cannot check another machine's processes: assume alive
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid, host
        return pid, host

    # -- plan + journal -------------------------------------------------------------------------
    def start(self, fingerprint: str, describe: dict, replan=None) -> dict[int, dict]:
        """Open (or create) the journal for this plan; returns finished unit results by index.
        `self.plan` is then what plan.json holds: an interrupted run's `describe`, or this one's.
        An unfinished run of another fingerprint is refused, unless `replan(its plan, its finished
        units)` gives how many of its leading units this plan keeps (input_changes.replanned, which
        may raise its own refusal): the run then goes on with this plan, its journal cut to those
        units and the shards placed before any later one."""
        keep = None
        try:
            old = orjson.loads(self.plan_path.read_bytes()) if self.plan_path.exists() else None
        except (OSError, ValueError):  # unreadable: nothing in this run state can be trusted (orjson's
            # JSONDecodeError is a ValueError)
            self.plan_path.unlink()
            old = None
        if old is None:
            self.reset()
            self.dir.mkdir(parents=True, exist_ok=True)
            self.plan = {"fingerprint": fingerprint, **describe}
            write_json_atomic(self.plan_path, self.plan, compact=True)
            self.placed = {}
            return {}
        done, placed = self._read_journal()  # before replan: it refuses by the units done
        if old.get("fingerprint") != fingerprint and (keep := replan and replan(old, done)) is None:
            raise PrepError(f"{self.out}: holds an unfinished run of a different recipe or different input "
                            "files; re-run with the original recipe to resume it, or pass --overwrite "
                            "to discard it")
        self.plan = old
        self.placed = {}
        for split, by_index in placed.items():  # shards 0..k-1 with no gap: a shard is placed after its
            run = self.placed[split] = []       # predecessor, so a gap means lines were lost
            while len(run) in by_index:
                run.append(by_index[len(run)])
        if keep is not None:  # the journal cut first: a crash before the plan is rewritten replans again
            self.forget_units(done, {i for i in done if i >= keep})
            # inputs stay the old ones, and their spans: input_changes.accept compares them next, then
            # records these
            self.update_plan(fingerprint=fingerprint,
                             **{k: v for k, v in describe.items() if k not in ("inputs", "spans")})
        return done

    def _read_journal(self) -> tuple[dict[int, dict], dict[str, dict[int, dict]]]:
        """The journal's finished units by index, and its placed shards by split and index. A torn or
        garbled tail is cut off (its units are redone)."""
        done: dict[int, dict] = {}
        placed: dict[str, dict[int, dict]] = {}
        if not self.journal_path.exists():
            return done, placed
        data = self.journal_path.read_bytes()
        good = 0  # bytes of whole, readable lines
        while (end := data.find(b"\n", good)) != -1:
            try:
                entry = json.loads(data[good:end])
                if "placed" in entry:
                    placed.setdefault(str(entry["placed"]), {})[int(entry["shard"])] = entry
                else:
                    done[int(entry["unit"])] = entry  # a unit redone after its parts went missing:
                    # the later line wins (so does a shard placed again)
            except (ValueError, KeyError, TypeError):
                break
            good = end + 1
        if good != len(data):
            with open(self.journal_path, "r+b") as f:
                f.truncate(good)
        return done, placed

    def forget_units(self, done: dict[int, dict], units: set[int]) -> None:
        """`units` leave `done`, and with them every placed shard from the first that holds a part of
        one of them (shards are placed in unit order, assemble.PartStream), in `self.placed` and in the
        journal, rewritten atomically: forgotten in memory only, a run killed before redoing them
        resumed with their old lines (a unit that failed on a since replaced file, say, kept as failed).
        The units whose parts the dropped shards took are redone too: their parts were deleted when the
        shard was placed (resume_checks._drop_lost_units)."""
        from pipeline.worker import unit_of_part
        if not units:
            return
        first = min(units)
        for i in units:
            done.pop(i, None)
        for entries in self.placed.values():
            cut = next((k for k, e in enumerate(entries) if any(unit_of_part(n) >= first for n in e["parts"])),
                       len(entries))
            del entries[cut:]
        lines = [json.dumps(done[i], sort_keys=True) for i in sorted(done)]
        lines += [json.dumps(e, sort_keys=True) for entries in self.placed.values() for e in entries]
        tmp = self.journal_path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.journal_path)

    def update_plan(self, **fields) -> None:
        """Rewrite plan.json with `fields` changed (atomically: a crash leaves the old or the new)."""
        self.plan = {**self.plan, **fields}
        write_json_atomic(self.plan_path, self.plan, compact=True)

    def record(self, result: dict) -> None:
        with self._append_lock:
            self._append(json.dumps(result, sort_keys=True) + "\n", "journal")

    def record_placed(self, split: str, index: int, info: dict, parts: list[str]) -> None:
        """Final shard `index` of `split` (its ShardInfo as a dict) is placed, renamed and its
        directory fsynced; it was built from `parts`, which the caller deletes once this returns."""
        entry = {"placed": split, "shard": index, **info, "parts": parts}
        with self._append_lock:
            self._append(json.dumps(entry, sort_keys=True) + "\n", "journal-placed")

    def _append(self, line: str, fault: str) -> None:
        try:
            with open(self.journal_path, "a", encoding="utf-8") as f:
                torn = f"{fault}-torn"  # tests: a crash halfway through the append
                if faults.hit(torn):
                    f.write(line[: len(line) // 2])
                    f.flush()
                    faults.fire(torn)
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:  # ENOSPC: a torn line at most, dropped on resume; name the file
            if e.filename is None:
                raise OSError(e.errno, e.strerror, str(self.journal_path)) from None
            raise
        faults.point(fault)

    def reset(self) -> None:
        """Forget any unfinished run (keeps the lock); its parts are deleted in the background."""
        self.discard([self.parts, self.rejects])
        for p in (self.journal_path, self.plan_path, self.dir / "tokenizer.pickle", *self.dir.glob("*.tmp*")):
            p.unlink(missing_ok=True)

    def discard(self, paths) -> None:
        """Delete `paths` (files or trees on this output's filesystem) without waiting for it: each is
        renamed into DIR/.prep/trash/ and removed on a background thread, which `cleanup()` joins.
        Why: `--overwrite` unlinked the old output before the first unit could start (460 MB of shards:
        ~0.13 s on 2 cores; 1.15 GB: ~0.4 s on the GPU machine's ext4). A run killed while deleting
        leaves its trash behind; the next run's first discard takes it along."""
        batch = self.trash / f"{os.getpid()}-{len(self._deleters)}"
        for p in map(Path, paths):
            if os.path.lexists(p):
                batch.mkdir(parents=True, exist_ok=True)
                os.rename(p, batch / p.name)
        todo = [b for b in (self.trash.iterdir() if self.trash.is_dir() else ()) if b.name not in self._claimed]
        if todo:
            self._claimed.update(b.name for b in todo)
            t = threading.Thread(target=_remove_all, args=(todo,), name=batch.name, daemon=True)
            self._deleters.append(t)
            t.start()

    def cleanup(self) -> None:
        """After the manifest is written: drop everything but the lock (released by `lock()`)."""
        self.reset()
        for t in self._deleters:
            t.join()
        shutil.rmtree(self.trash, ignore_errors=True)


def _remove_all(paths: list[Path]) -> None:
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)
