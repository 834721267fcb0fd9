"""One rank of a gloo training run as a trainer writes it (run as a script by test_distributed.py).

argv: rank world_size init_file job.json. The job names the dataset, the loader settings of each
run (`runs`: name -> MemmapLoader keyword arguments), the epochs, and optionally `stop_at` (name ->
batches after which that run's state_dict is taken and the run stops), `resume` (a pickle of such
states, `%d` for the rank, to load first) and `late_init` (build the loaders before
init_process_group) and `rank_runs` (rank -> name -> keyword arguments that rank adds: settings that
differ per rank) and `only_on` (name -> the one rank that iterates that run: an evaluation loader on
rank 0) and `peek` (name -> {"rank": r, **kwargs}: before the runs are built, rank r alone builds a
loader of that run's settings plus kwargs, at a line of its own, and reads one batch of it). Rank and world size reach the loader only through torch.distributed. Writes
`out % rank`: per run, the batches seen as (epoch, input_ids, labels), len() at each epoch start,
the state taken, or the error a pass raised.
"""

import json
import pickle
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from loaders import MemmapLoader  # noqa: E402
from pipeline.errors import PrepError  # noqa: E402


def train(loader: MemmapLoader, epochs: int, stop_at: int | None, saved: dict | None) -> dict:
    """`for epoch in range(start, E): loader.set_epoch(epoch); for batch in loader: step`."""
    seen, lens, start = [], [], 0
    if saved is not None:
        loader.load_state_dict(saved)
        start = saved["epoch"]
    step = 0
    for epoch in range(start, epochs):
        loader.set_epoch(epoch)
        lens.append(len(loader))
        for batch in loader:
            seen.append((epoch, batch["input_ids"].numpy().copy(), batch["labels"].numpy().copy()))
            step += 1
            if step == stop_at:
                return {"seen": seen, "lens": lens, "state": loader.state_dict()}
    return {"seen": seen, "lens": lens, "state": loader.state_dict()}


def main() -> None:
    rank, world, init_file, job_file = sys.argv[1:5]
    job = json.loads(Path(job_file).read_text())
    init = {"backend": "gloo", "init_method": f"file://{init_file}", "rank": int(rank), "world_size": int(world)}
    if not job.get("late_init"):
        dist.init_process_group(**init)
    own = job.get("rank_runs", {}).get(rank, {})
    out = {}
    for name, peek in job.get("peek", {}).items():
        if str(peek["rank"]) == rank:
            extra = {k: v for k, v in peek.items() if k != "rank"}
            loader = MemmapLoader(job["dataset"], **{**job["runs"][name], **extra})
            try:
                out[f"{name}-peek"] = {"shape": tuple(next(iter(loader))["input_ids"].shape)}
            except PrepError as e:
                out[f"{name}-peek"] = {"error": str(e)}
            loader.close()
    loaders = {name: MemmapLoader(job["dataset"], **{**kw, **own.get(name, {})}) for name, kw in job["runs"].items()}
    if job.get("late_init"):
        dist.init_process_group(**init)
    states = pickle.loads(Path(job["resume"] % int(rank)).read_bytes()) if job.get("resume") else {}
    for name, loader in loaders.items():
        if job.get("only_on", {}).get(name, rank) != rank:
            continue
        try:
            out[name] = train(loader, job["epochs"], job.get("stop_at", {}).get(name), states.get(name))
        except PrepError as e:
            out[name] = {"error": str(e)}
        loader.close()
    Path(job["out"] % int(rank)).write_bytes(pickle.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":  # spawned / forkserver workers import this module: no run there
    main()
