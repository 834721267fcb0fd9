"""Peak RSS of `prep tokenize` per process on JSON Lines of many tiny documents.

    python benchmarks/bench_rss_tiny_docs.py --docs 500000,1000000,2000000,4000000 --workers 2
    python benchmarks/bench_rss_tiny_docs.py --docs 1000000 --new-words      # every document new words

The project's memory target: peak RSS at 1x and 8x the corpus within 10%, memory bounded by a unit,
not by the corpus. Tiny documents (20-80 characters) stress what grows with the document count
rather than with bytes: per-document index entries (20 bytes each in a shard's .idx) and per-document
state anywhere in the parent. With `--new-words` every document has words no other has, so a
tokenizer's pre-token cache never stops growing (the pessimistic end).

Each run is a fresh `prep tokenize` subprocess, after one unmeasured run that fills the tokenizer proof
cache (demo tokenizer, one shard of up to 100 M tokens, so
1 M documents are one shard), its process tree (parent, forkserver, workers, resource tracker) read
from /proc every 50 ms; the report gives each process's peak VmRSS by role and the peak of their sum.
Inputs are written under --tmp and deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT / "recipes" / "demo" / "tokenizer.json"
WORDS = ("the of and to in is was for on that with as by at from his it an were are which this be or "
         "has had first one their its new after who they have her she two been other when there all "
         "during into school time may years more most only over city some world would where later up "
         "such used many can state about national out known university united then made").split()


def write_corpus(path: Path, docs: int, new_words: bool, seed: int = 7) -> int:
    """`docs` JSON lines of 20-80 characters of words; with `new_words`, each document also holds a
    word made of its own number in letters (a pre-token no other document has)."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        lines = []
        for i in range(docs):
            target = rng.randint(20, 80)
            words = [_letters(i)] if new_words else []
            while sum(len(w) + 1 for w in words) < target:
                words.append(rng.choice(WORDS))
            text = " ".join(words)[:target]  # letters and spaces: no JSON escapes needed
            lines.append(f'{{"text": "{text}"}}\n')
            if len(lines) == 65536:
                f.writelines(lines)
                lines = []
        f.writelines(lines)
    return path.stat().st_size


def _letters(n: int) -> str:
    out = []
    while True:
        n, r = divmod(n, 26)
        out.append(chr(97 + r))
        if not n:
            return "q" + "".join(out)


def recipe(path: Path, corpus: Path, out: Path, workers: int) -> None:
    path.write_text(f"""name: rss-tiny
source:
  path: {corpus}
  format: jsonl
  text_field: text
tokenizer:
  path: {TOKENIZER}
  boundary: eos
output:
  dir: {out}
  val_fraction: 0.01
  seed: 2357
num_workers: {workers}
on_bad_record: skip
""")


def _status_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB; (0, 0) once the process is gone."""
    rss = hwm = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
    except OSError:
        pass
    return rss, hwm


def _tree(root: int) -> list[int]:
    """root and its descendants, from /proc/<pid>/task/*/children."""
    seen, todo = [], [root]
    while todo:
        pid = todo.pop()
        seen.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return seen


def _role(pid: int, root: int) -> str:
    """parent; its children forkserver and resource tracker; the forkserver's children, workers."""
    if pid == root:
        return "parent"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return "?"
    if ppid != root:
        return "worker"
    if "forkserver" in cmd:
        return "forkserver"
    if "resource_tracker" in cmd:
        return "tracker"
    return "worker"


def measure(cmd: list[str], env: dict, log: Path) -> tuple[float, dict[str, int], int]:
    """(seconds, {role: peak KiB}, peak KiB of the sum). Each process's peak is its VmHWM (the
    kernel's high-water mark) at the last sample; the parent's is exact: wait4's ru_maxrss (its
    forkserver outlives it, so that is its own)."""
    t0 = time.perf_counter()
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env)
    peaks: dict[int, int] = {}
    roles: dict[int, str] = {}
    total = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            s = 0
            for pid in _tree(proc.pid):
                rss, hwm = _status_kib(pid)
                s += rss
                if roles.get(pid, "worker") == "worker":  # a child forked a moment ago shows its parent's cmdline
                    roles[pid] = _role(pid, proc.pid)
                peaks[pid] = max(peaks.get(pid, 0), hwm)
            total[0] = max(total[0], s)
            time.sleep(0.02)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    th.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"prep failed ({proc.returncode}):\n{log.read_text()[-4000:]}")
    peaks[proc.pid] = max(peaks.get(proc.pid, 0), usage.ru_maxrss)
    roles[proc.pid] = "parent"
    by_role: dict[str, int] = {}
    counts: dict[str, int] = {}
    for pid in sorted(peaks):
        r = roles[pid]
        counts[r] = counts.get(r, 0) + 1
        name = r if r in ("parent", "forkserver", "tracker") else f"{r}{counts[r]}"
        by_role[name] = max(by_role.get(name, 0), peaks[pid])
    return wall, by_role, total[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", default="500000,1000000,2000000,4000000")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--new-words", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--keep-output", default=None, help="copy each output tree here (to compare bytes)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rss_tiny_", dir=args.tmp))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
           "PREP_CACHE_DIR": str(tmp / "cache")}
    try:
        print("| docs | MB | workers | s | parent | forkserver | workers (each) | all processes (sum, sampled) |")
        print("|---:|---:|---:|---:|---:|---:|---|---:|")
        # an unmeasured run first fills the tokenizer proof cache (the first run of a tokenizer proves
        # its fast engine in the parent: ~150 MiB there once, whatever the corpus)
        warm = tmp / "warm.jsonl"
        write_corpus(warm, 1000, args.new_words)
        recipe(tmp / "r.yaml", warm, tmp / "warm-out", args.workers)
        measure([sys.executable, "-c", "from pipeline.launch import console; console()", "tokenize", "--recipe",
                 str(tmp / "r.yaml"), "--no-progress", "--overwrite"], env, tmp / "log.txt")
        for n in (int(x) for x in args.docs.split(",")):
            corpus = tmp / f"docs{n}.jsonl"
            size = write_corpus(corpus, n, args.new_words)
            for _ in range(args.repeat):
                out = tmp / f"out{n}"
                shutil.rmtree(out, ignore_errors=True)
                recipe(tmp / "r.yaml", corpus, out, args.workers)
                cmd = [sys.executable, "-c", "from pipeline.launch import console; console()", "tokenize",
                       "--recipe", str(tmp / "r.yaml"), "--no-progress", "--overwrite"]
                wall, peaks, total = measure(cmd, env, tmp / "log.txt")
                mib = {k: v / 1024 for k, v in peaks.items()}
                workers = ", ".join(f"{v:.0f}" for k, v in mib.items() if k.startswith("worker"))
                print(f"| {n:,} | {size / 1e6:.0f} | {args.workers} | {wall:.2f} | {mib.get('parent', 0):.0f} | "
                      f"{mib.get('forkserver', 0):.0f} | {workers} | {total / 1024:.0f} |", flush=True)
                if args.keep_output:
                    dst = Path(args.keep_output) / f"docs{n}"
                    shutil.rmtree(dst, ignore_errors=True)
                    shutil.copytree(out, dst, ignore=shutil.ignore_patterns(".prep"))
                shutil.rmtree(out, ignore_errors=True)
            corpus.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
