"""Where Megatron's gigatoken path (`preprocess_data_fast.py`, the `megatron-fast` row of
bench_tokenize.py) spends its time, phase by phase, in one process:

    RAYON_NUM_THREADS=2 python benchmarks/megatron_fast_phases.py CORPUS.jsonl TOKENIZER.json

imports (numpy, awkward, gigatoken) -> gigatoken.Tokenizer.from_json -> encode_files over the whole
file (gigatoken's Rust JSONL reader and encoder, RAYON_NUM_THREADS threads) -> flatten, EOD after each
document, one write. Prints seconds per phase and the token count (documents + EOD ids).
"""

import json
import os
import sys
import tempfile
import time

t0 = time.perf_counter()
import awkward as ak  # noqa: E402  (the imports are a phase of their own)
import gigatoken as gt  # noqa: E402
import numpy as np  # noqa: E402


def main(corpus: str, tokenizer: str) -> None:
    t1 = time.perf_counter()
    spec = json.loads(open(tokenizer).read())
    eod = next(t["id"] for t in spec["added_tokens"] if t["content"] == "<|endoftext|>")
    tok = gt.Tokenizer.from_json(json.dumps(spec))
    t2 = time.perf_counter()
    docs = tok.encode_files(gt.JsonlFileSource([corpus], field="text"), parallel=True)
    t3 = time.perf_counter()
    flat = np.asarray(ak.flatten(docs)).astype(np.uint16)
    ends = np.cumsum(np.asarray(ak.num(docs, axis=1)))
    out = np.insert(flat, ends, np.uint16(eod))
    with tempfile.TemporaryFile() as f:
        f.write(out.tobytes())
    t4 = time.perf_counter()
    print(f"threads {os.environ.get('RAYON_NUM_THREADS', 'all')}: imports {t1 - t0:.3f} s, from_json {t2 - t1:.3f} s, "
          f"encode_files {t3 - t2:.3f} s, flatten + write {t4 - t3:.3f} s, total {t4 - t0:.3f} s; {len(out):,} tokens")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
