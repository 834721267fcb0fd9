"""Run state in DIR/.prep/: the lock, the plan fingerprint and the append-only unit journal.

A unit counts as finished only once its journal line is on disk (written and fsynced after its
shard files were renamed into place), so a crash at any point leaves either a finished unit or one
that is redone from scratch on the next run. Redoing a unit rewrites the same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from contextlib import contextmanager
from pathlib import Path

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

    # -- lock -----------------------------------------------------------------------------------
    @contextmanager
    def lock(self):
        """Refuse a second concurrent run on the same output; a dead holder's lock is taken over."""
        self.dir.mkdir(parents=True, exist_ok=True)
        me = f"{os.getpid()} {socket.gethostname()}"
        for _ in range(2):
            try:
                fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is not None:
                    pid, host = holder
                    raise PrepError(f"{self.out}: another prep run (pid {pid} on {host}) is writing here; wait "
                                    f"for it to finish, or if it is gone, delete {self.lock_path}") from None
                self.lock_path.unlink(missing_ok=True)  # stale: its process is gone
                continue
            with os.fdopen(fd, "w") as f:
                f.write(me)
            break
        else:
            raise PrepError(f"{self.lock_path}: could not take the lock; delete it if no prep run is active")
        try:
            yield
        finally:
            if self.lock_path.exists() and self.lock_path.read_text() == me:
                self.lock_path.unlink()

    def _holder(self) -> tuple[int, str] | None:
        """(pid, host) of a live lock holder, or None when the lock is stale."""
        try:
            pid_s, host = self.lock_path.read_text().split(" ", 1)
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
    def start(self, fingerprint: str, describe: dict) -> dict[int, dict]:
        """Open (or create) the journal for this plan; returns finished unit results by index."""
        if self.plan_path.exists():
            old = json.loads(self.plan_path.read_text())
            if old.get("fingerprint") != fingerprint:
                raise PrepError(f"{self.out}: holds an unfinished run of a different recipe or different input "
                                "files; re-run with the original recipe to resume it, or pass --overwrite "
                                "to discard it")
        else:
            self.reset()
            self.dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.plan_path, {"fingerprint": fingerprint, **describe})
        done: dict[int, dict] = {}
        if self.journal_path.exists():
            data = self.journal_path.read_bytes()
            complete = data[: data.rfind(b"\n") + 1]  # a torn last line (crash mid-append) is dropped
            if len(complete) != len(data):
                with open(self.journal_path, "r+b") as f:
                    f.truncate(len(complete))
            for line in complete.decode("utf-8").splitlines():
                entry = json.loads(line)
                done[entry["unit"]] = entry
        return done

    def record(self, result: dict) -> None:
        line = json.dumps(result, sort_keys=True) + "\n"
        with open(self.journal_path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def reset(self) -> None:
        """Forget any unfinished run (keeps the lock)."""
        for p in (self.parts, self.rejects):
            shutil.rmtree(p, ignore_errors=True)
        for p in (self.journal_path, self.plan_path):
            p.unlink(missing_ok=True)

    def cleanup(self) -> None:
        """After the manifest is written: drop everything but the lock (released by `lock()`)."""
        self.reset()
