"""`run_loader_bench` (behind `prep bench-loader`): rows with the documented keys, sane values."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from loaders.bench import format_table, private_memory_bytes, run_loader_bench
from pipeline.cli import app
from pipeline.errors import PrepError

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


def test_tokens_per_s_is_batches_per_s_times_batch_tokens(dataset):
    rows = run_loader_bench(dataset, modes=("windows", "packed"), num_workers=(0,), batch_size=3, seq_len=32,
                            num_batches=5)
    for r in rows:
        assert r["tokens_per_s"] == pytest.approx(r["batches_per_s"] * 3 * 32)
        assert r["data_wait_share"] is None
    assert 0 < rows[1]["fill"] <= 1


@pytest.mark.parametrize("step", ["inf", "1e400"])
def test_a_step_that_is_not_finite_is_one_line(dataset, step):
    """--step-ms inf passed the option's min=0 and ended in an OverflowError traceback from time.sleep."""
    result = CliRunner().invoke(app, ["bench-loader", str(dataset), "--step-ms", step, "--workers", "0",
                                      "--mode", "windows", "--seq-len", "32", "--num-batches", "2"])
    assert result.exit_code == 1, result.output
    assert "step_ms must be a finite number of milliseconds" in result.output
    assert "Traceback" not in result.output and result.output.strip().count("\n") == 0


def test_cold_first_batch_is_measured_on_each_row(dataset, monkeypatch):
    """The cold first batch was measured on a mode's first row (0 workers) only and printed on every row
    of the mode, as if measured there. Each row now times its own, on an empty cache, with its workers."""
    from pathlib import Path

    import loaders.bench as bench

    real, calls = bench._first_batch, []

    def spy(path, mode, workers, cache_dir, **kw):
        empty = not any(Path(cache_dir).iterdir())
        loader, it, _ = real(path, mode, workers, cache_dir, **kw)
        calls.append((mode, workers, empty))
        return loader, it, float(len(calls))  # a distinct figure per call tells which call a row shows

    monkeypatch.setattr(bench, "_first_batch", spy)
    rows = run_loader_bench(dataset, modes=("windows", "packed", "grouped"), num_workers=(0, 1), batch_size=2,
                            seq_len=32, num_batches=2)
    assert len(rows) == 6
    for r in rows:
        cold, warm = int(r["cold_first_batch_s"]) - 1, int(r["first_batch_s"]) - 1
        assert calls[cold] == (r["mode"], r["workers"], True)  # this row's own run, on an empty cache
        assert calls[warm][:2] == (r["mode"], r["workers"]) and warm > cold
        if r["mode"] != "windows":  # tiled windows derive no array; the others' warm run finds the cold one's
            assert calls[warm][2] is False


@pytest.mark.parametrize("options, expected", [
    (["--device", "gpu"], "--device 'gpu' is not a torch device; use 'cpu' or 'cuda' (or 'cuda:N')"),
    (["--seq-len", "10000000"], "fewer than --seq-len + 1 = 10000001; lower --seq-len or add data"),
])
def test_loader_errors_name_the_options_typed(dataset, options, expected):
    """The loader's errors named its arguments (device='gpu', "lower seq_len") where the user typed --device
    and --seq-len; bench-loader words them as its options."""
    result = CliRunner().invoke(app, ["bench-loader", str(dataset), "--workers", "0", "--mode", "windows",
                                      "--num-batches", "2", *options])
    assert result.exit_code == 1, result.output
    assert expected in " ".join(result.output.split()), result.output
    assert "device=" not in result.output and "seq_len" not in result.output


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_unavailable_names_the_device_option(dataset):
    result = CliRunner().invoke(app, ["bench-loader", str(dataset), "--workers", "0", "--mode", "windows",
                                      "--num-batches", "2", "--device", "cuda"])
    assert result.exit_code == 1, result.output
    assert "--device 'cuda' but CUDA is not available; use --device 'cpu'" in " ".join(result.output.split())


@pytest.mark.parametrize("empty", ["", Path("")], ids=["str", "Path"])
def test_an_empty_cache_dir_is_refused_in_one_line(dataset, tmp_path, monkeypatch, empty):
    """cache_dir="" was a FileNotFoundError traceback from os.makedirs; Path("") (Path(".")) made the
    bench's temporary cache directories in the working directory. Refused as MemmapLoader refuses them."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PrepError, match=r"cache_dir=\S+ names no directory"):
        run_loader_bench(dataset, modes=("windows",), num_workers=(0,), seq_len=32, batch_size=2, num_batches=1,
                         cache_dir=empty)
    assert list(tmp_path.iterdir()) == []


def test_an_empty_split_says_there_is_nothing_to_measure_and_what_to_bench(tmp_path, demo_tokenizer):
    """A dataset written with --allow-empty: bench-loader said only the loader's "split 'train' has no
    documents", no option or way on; now it names the option and a split that has documents."""
    from tests.conftest import write_jsonl, write_recipe
    corpus = write_jsonl(tmp_path / "c.jsonl", ["", ""])
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=tmp_path / "out")
    runner = CliRunner()
    made = runner.invoke(app, ["tokenize", "-r", str(recipe), "--no-progress", "--allow-empty"])
    assert made.exit_code == 0, made.output
    out = tmp_path / "out"
    result = runner.invoke(app, ["bench-loader", str(out), "--workers", "0", "--num-batches", "1"])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: --split train: {out} holds no documents in train (an empty run, written with --allow-empty), so "
        "there is nothing to measure; bench a dataset that holds documents"), result.output
