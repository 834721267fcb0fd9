"""`run_loader_bench` (behind `prep bench-loader`): rows with the documented keys, sane values."""

from loaders.bench import format_table, private_memory_bytes, run_loader_bench

KEYS = {"mode", "workers", "batches_per_s", "tokens_per_s", "first_batch_s", "cold_first_batch_s", "fill",
        "padding_fraction", "data_wait_share", "batch_size", "seq_len", "device"}


def test_bench_rows(dataset):
    rows = run_loader_bench(dataset, modes=("windows", "packed", "grouped"), num_workers=(0, 1), batch_size=4,
                            seq_len=64, num_batches=30, step_ms=1.0)
    assert [(r["mode"], r["workers"]) for r in rows] == [(m, w) for m in ("windows", "packed", "grouped")
                                                         for w in (0, 1)]
    for r in rows:
        assert set(r) == KEYS
        assert r["batches_per_s"] > 0 and r["tokens_per_s"] > 0 and r["first_batch_s"] > 0
        assert 0 <= r["data_wait_share"] <= 1
    assert rows[2]["fill"] > 0.9 and rows[4]["padding_fraction"] is not None
    table = format_table(rows)
    assert table.count("\n") == len(rows) + 1 and "packed" in table
    assert private_memory_bytes() > 0
