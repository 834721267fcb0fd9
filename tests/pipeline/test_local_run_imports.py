"""What a run of local files imports: nothing for URLs (benchmarks/results/regression_check_cpu2_202611.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import DEMO_CORPUS, write_recipe


@pytest.mark.parametrize("workers", [1, 2])
def test_a_local_run_does_not_import_fsspec(tmp_path, demo_tokenizer, workers):
    """The run's check of URL inputs against its plan (readers.url_reads.expecting) imported url_reads,
    and with it fsspec, at every run's start, in the parent and in each worker: ~50 ms of CPU each
    (`prep tokenize` of 10 documents: 0.51 s, not 0.46 s). A run that reads no URL needs neither."""
    recipe = write_recipe(tmp_path / "r.yaml", corpus=DEMO_CORPUS, tokenizer=demo_tokenizer, out=tmp_path / "out",
                          num_workers=workers)
    code = ("import sys\n"
            "from pipeline.executor import tokenize\n"
            "from pipeline.recipe import Recipe\n"
            f"tokenize(Recipe.from_yaml({str(recipe)!r}), show_progress=False)\n"
            "print(sorted(m for m in ('fsspec', 'pipeline.readers.url_reads') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "out" / "manifest.json").exists()
