"""Hugging Face datasets: saved directories (row ranges), builders over local files, streaming shards."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import datasets
import pytest

from pipeline.errors import PrepError
from pipeline.readers import BadRecords
from pipeline.readers import hf as hf_reader
from pipeline.recipe import SourceConfig
from tests.pipeline.readers import readerkit


@pytest.fixture(autouse=True)
def _fresh_cache():
    hf_reader._CACHE.clear()
    datasets.disable_progress_bars()
    yield
    hf_reader._CACHE.clear()


def read_all(source: SourceConfig, unit_bytes: int = 1 << 16):
    return readerkit.read_all(hf_reader, source, [source.path], unit_bytes, batch_docs=8)


def test_saved_dataset_dict_split_and_row_ranges(tmp_path):
    texts = [f"row {i} " + "q" * (i % 50) for i in range(500)]
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": texts, "n": list(range(500))}),
                               "test": datasets.Dataset.from_dict({"text": ["t"], "n": [0]})})
    dd.save_to_disk(str(tmp_path / "saved"), num_shards={"train": 3, "test": 1})
    units, got, positions, bad = read_all(SourceConfig(path=str(tmp_path / "saved"), format="hf"), unit_bytes=4096)
    assert len(units) > 3 and got == texts and positions == list(range(500)) and not bad
    assert read_all(SourceConfig(path=str(tmp_path / "saved"), format="hf", split="test"))[1] == ["t"]
    with pytest.raises(PrepError, match=r"'validation' is not a split of .* \(it has train, test\)"):
        read_all(SourceConfig(path=str(tmp_path / "saved"), format="hf", split="validation"))


def test_a_split_of_a_saved_single_dataset_is_refused_unless_it_is_the_one_saved(tmp_path):
    """A directory of Dataset.save_to_disk (not a DatasetDict) has no splits: `split: test` read the
    whole Dataset without a word. It is refused, naming source.split and the fix, as a split a
    DatasetDict lacks is, read with pyarrow or through `datasets` (a slice, streaming), except the split
    the Dataset records being saved from (or `train`, the default, when it records none); without split
    the whole Dataset is read, as before."""
    datasets.Dataset.from_dict({"text": ["a", "b", "c"]}).save_to_disk(str(tmp_path / "single"))
    path = str(tmp_path / "single")
    assert read_all(SourceConfig(path=path, format="hf"))[1] == ["a", "b", "c"]
    hf_reader._CACHE.clear()
    assert read_all(SourceConfig(path=path, format="hf", split="train"))[1] == ["a", "b", "c"]  # the default, said
    for how in ({"split": "test"}, {"split": "test[:1]"}, {"split": "test", "streaming": True}):
        hf_reader._CACHE.clear()
        with pytest.raises(PrepError, match=r"^source\.split: '[^']+' is not a split of .*single: the directory holds "
                                            r"a single Dataset \(Dataset\.save_to_disk, not a DatasetDict; read as "
                                            r"split 'train', the default\), which has no other split; remove "
                                            r"source\.split to read all of it, or slice it as 'train\[:10%\]'$"):
            read_all(SourceConfig(path=path, format="hf", **how))
    data = tmp_path / "a.jsonl"
    data.write_text('{"text": "x"}\n{"text": "y"}\n')
    saved = datasets.load_dataset("json", data_files={"test": str(data)}, split="test", cache_dir=str(tmp_path / "c"))
    saved.save_to_disk(str(tmp_path / "test_split"))
    path = str(tmp_path / "test_split")
    assert read_all(SourceConfig(path=path, format="hf", split="test"))[1] == ["x", "y"]
    for split in ("train", "train[:1]"):
        hf_reader._CACHE.clear()
        with pytest.raises(PrepError, match=r"is not a split of .*test_split: .*not a DatasetDict; saved from "
                                            r"split 'test'\), which has no other split; remove source\.split to read "
                                            r"all of it, or slice it as 'test\[:10%\]'"):
            read_all(SourceConfig(path=path, format="hf", split=split))


def test_a_slice_of_a_saved_single_dataset_reads_its_rows(tmp_path):
    """`train[:1]` of a Dataset.save_to_disk directory was refused ("has no splits"), though the Dataset
    is read as the train split: a slice of the split it was saved from (or of `train` when it records
    none) reads those rows, as the same slice of a saved DatasetDict does."""
    datasets.Dataset.from_dict({"text": [f"d{i}" for i in range(10)]}).save_to_disk(str(tmp_path / "single"))
    path = str(tmp_path / "single")
    for split, want in (("train[:2]", ["d0", "d1"]), ("train[80%:]", ["d8", "d9"]), ("train[3:5]+train[:1]", ["d3", "d4", "d0"])):
        hf_reader._CACHE.clear()
        _, got, positions, bad = read_all(SourceConfig(path=path, format="hf", split=split))
        assert got == want and positions == list(range(len(want))) and not bad, split
    data = tmp_path / "a.jsonl"
    data.write_text('{"text": "x"}\n{"text": "y"}\n')
    datasets.load_dataset("json", data_files={"test": str(data)}, split="test", cache_dir=str(tmp_path / "c")
                          ).save_to_disk(str(tmp_path / "test_split"))
    hf_reader._CACHE.clear()
    assert read_all(SourceConfig(path=str(tmp_path / "test_split"), format="hf", split="test[1:]"))[1] == ["y"]



def test_a_saved_dataset_of_no_rows_is_an_input_of_no_documents(tmp_path):
    """A Dataset of no rows saved with no Arrow file (from_dict of empty lists, a DatasetDict's empty
    split) failed as "cannot load the Hugging Face dataset ... IndexError: list index out of range; for a
    hub id the hub must be reachable" (load_from_disk's own failure); one whose Arrow file has no rows
    (a filter that kept none) was planned as no unit, "source.path: matched no input". Each is one unit
    of no documents, as an empty JSONL file is; its columns are still checked."""
    features = datasets.Features({"text": datasets.Value("string")})
    datasets.Dataset.from_dict({"text": []}, features=features).save_to_disk(str(tmp_path / "empty"))
    datasets.Dataset.from_dict({"text": ["a"]}).filter(lambda r: False).save_to_disk(str(tmp_path / "filtered"))
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["a"]}),
                          "test": datasets.Dataset.from_dict({"text": []}, features=features)}
                         ).save_to_disk(str(tmp_path / "dict"))
    for source in (SourceConfig(path=str(tmp_path / "empty"), format="hf"),
                   SourceConfig(path=str(tmp_path / "filtered"), format="hf"),
                   SourceConfig(path=str(tmp_path / "dict"), format="hf", split="test")):
        units, texts, _, bad = read_all(source)
        assert len(units) == 1 and texts == [] and bad == []
    with pytest.raises(PrepError, match=r"text_field 'body' is not a column of .*empty; it has 'text'"):
        read_all(SourceConfig(path=str(tmp_path / "empty"), format="hf", text_field="body"))

def test_a_null_value_is_listed_as_json_null_not_the_text_none(tmp_path):
    """As for Parquet: a null text was listed as the text "None"; now JSON null (and a template's
    record as JSON, its nulls null)."""
    datasets.Dataset.from_dict({"title": ["A", None], "text": ["x", None]}).save_to_disk(str(tmp_path / "s"))
    _, _, _, bad = read_all(SourceConfig(path=str(tmp_path / "s"), format="hf"))
    assert [(r["reason"], r["text"]) for r in bad] == [("null_text", None)]
    _, _, _, bad = read_all(SourceConfig(path=str(tmp_path / "s"), format="hf", text_template="{title}|{text}"))
    assert [json.loads(r["text"]) for r in bad] == [{"title": None, "text": None}]


def test_null_values_and_template(tmp_path):
    ds = datasets.Dataset.from_dict({"title": ["A", "B", None], "text": ["x", None, "z"]})
    ds.save_to_disk(str(tmp_path / "s"))
    _, got, _, bad = read_all(SourceConfig(path=str(tmp_path / "s"), format="hf"))
    assert got == ["x", "z"] and [(r["reason"], r["row"]) for r in bad] == [("null_text", 1)]
    _, got, _, bad = read_all(SourceConfig(path=str(tmp_path / "s"), format="hf", text_template="{title}|{text}"))
    assert got == ["A|x"] and len(bad) == 2
    with pytest.raises(PrepError, match=r"text_field 'body' is not a column of .*; it has 'title', 'text'; set source\.text_field to one"):
        read_all(SourceConfig(path=str(tmp_path / "s"), format="hf", text_field="body"))


def test_a_column_named_with_a_dot_is_read_as_named(tmp_path):
    """Dataset.flatten() names a struct's fields `meta.body`: such a column was refused ("'meta' is not
    a column") as text_field and in a template. The literal column wins over a struct `meta`'s field,
    as in the JSONL reader; a dotted path still enters a struct column; a missing one is named whole."""
    flat = datasets.Dataset.from_dict({"title": ["A", "B"], "meta": [{"body": "x"}, {"body": "y"}]}).flatten()
    assert flat.column_names == ["title", "meta.body"]
    flat.save_to_disk(str(tmp_path / "flat"))
    source = SourceConfig(path=str(tmp_path / "flat"), format="hf", text_field="meta.body")
    assert read_all(source)[1:] == (["x", "y"], [0, 1], [])
    assert read_all(SourceConfig(path=source.path, format="hf", text_template="{title}|{meta.body}"))[1] == ["A|x", "B|y"]
    both = datasets.Dataset.from_dict({"meta": [{"body": "nested"}], "meta.body": ["literal"], "title": ["T"]})
    both.save_to_disk(str(tmp_path / "both"))
    for how, want in (({"text_field": "meta.body"}, "literal"), ({"text_template": "{title}|{meta.body}"}, "T|literal")):
        assert read_all(SourceConfig(path=str(tmp_path / "both"), format="hf", **how))[1] == [want]
    nested = datasets.Dataset.from_dict({"meta": [{"body": "nested"}], "title": ["T"]})
    nested.save_to_disk(str(tmp_path / "nested"))
    assert read_all(SourceConfig(path=str(tmp_path / "nested"), format="hf", text_field="meta.body"))[1] == ["nested"]
    with pytest.raises(PrepError, match=r"text_template field 'other\.body' is not a column of .*nested; it has "
                                        r"'meta', 'title'"):
        read_all(SourceConfig(path=str(tmp_path / "nested"), format="hf", text_template="{title} {other.body}"))
    # the same through `datasets` (a split slice of a builder's dataset) and streamed
    data = tmp_path / "a.jsonl"
    data.write_text("".join(json.dumps({"title": t, "meta.body": b}) + "\n" for t, b in (("A", "x"), ("B", "y"))))
    for how in ({"split": "train[0:2]"}, {"streaming": True}):
        hf_reader._CACHE.clear()
        got = read_all(SourceConfig(path="json", format="hf", data_files=[str(data)], text_template="{title}|{meta.body}",
                                    **how))[1]
        assert got == ["A|x", "B|y"], how


def write_parts(tmp_path, n_files: int, per_file: int) -> list[str]:
    files = []
    for f in range(n_files):
        p = tmp_path / f"part{f}.jsonl"
        p.write_text("".join(json.dumps({"text": f"f{f} doc {i}", "meta": {"k": i}}) + "\n" for i in range(per_file)))
        files.append(str(p))
    return files


def test_streaming_over_local_files_is_sharded_by_file(tmp_path, caplog):
    files = write_parts(tmp_path, 3, 40)
    source = SourceConfig(path="json", format="hf", data_files=files, streaming=True)
    units, got, positions, bad = read_all(source)
    assert [(u.start, u.end, u.file_index) for u in units] == [(0, 1, 0), (1, 2, 1), (2, 3, 2)]
    assert got == [f"f{f} doc {i}" for f in range(3) for i in range(40)]
    assert positions == list(range(40)) * 3 and not bad
    with caplog.at_level(logging.WARNING, logger="prep"):
        hf_reader.warn_unbalanced(source, units, 2)
        hf_reader.warn_unbalanced(source, units, 4)
        hf_reader.warn_unbalanced(source, units, 3)
    assert len(caplog.records) == 2
    assert "cannot be balanced: the last round keeps 1 of 2 workers busy" in caplog.records[0].message
    assert "only 3 worker(s) will be busy" in caplog.records[1].message
    dotted = SourceConfig(path="json", format="hf", data_files=files, streaming=True, text_template="{meta.k}:{text}")
    assert read_all(dotted)[1][:2] == ["0:f0 doc 0", "1:f0 doc 1"]


def test_builder_without_streaming_gives_the_same_documents(tmp_path):
    files = write_parts(tmp_path, 2, 30)
    units, got, positions, _ = read_all(SourceConfig(path="json", format="hf", data_files=files), unit_bytes=512)
    assert got == [f"f{f} doc {i}" for f in range(2) for i in range(30)] and positions == list(range(60))
    # workers open the prepared Arrow cache files directly (no second load_dataset, no hub request)
    assert len(units) > 1 and units[0].paths and all(f.endswith(".arrow") for f in units[0].paths)
    hf_reader._CACHE.clear()
    units, got, positions, _ = read_all(SourceConfig(path="json", format="hf", data_files=files,
                                                     split="train[10:40]"), unit_bytes=512)
    assert not units[0].paths  # a slice is a view: workers load it the same way the parent did
    assert got == [f"f0 doc {i}" for i in range(10, 30)] + [f"f1 doc {i}" for i in range(10)]
    assert positions == list(range(30))  # row numbers of the dataset as loaded (the slice)


def test_unreachable_hub_id_is_one_clear_error(monkeypatch):
    import huggingface_hub.constants
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # read at import time, not from the env
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(PrepError, match=r"cannot load the Hugging Face dataset 'nobody/nothing-here'"):
        hf_reader.plan(SourceConfig(path="nobody/nothing-here", format="hf"), 0, [], 1 << 20)


def test_an_unreachable_hub_turns_offline_mode_on_only_for_a_repo_id(monkeypatch, tmp_path):
    """huggingface_hub's retries made an offline run wait ~23 s before the cache or the error; the
    probe (pipeline.hub) decides at once, and is not made for builders over local files."""
    import huggingface_hub.constants

    from pipeline import hub
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)  # restored after the test
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    probes, seen = [], []
    monkeypatch.setattr(hub, "unreachable", lambda: probes.append(1) or "no route")

    def load_dataset(path, *a, **k):
        seen.append((path, datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE))
        return datasets.Dataset.from_dict({"text": ["a", "b"]})
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    local = tmp_path / "a.jsonl"
    local.write_text('{"text": "a"}\n')
    hf_reader.load(SourceConfig(path="json", format="hf", data_files=[str(local)]))
    assert probes == [] and seen == [("json", False, False)]
    hf_reader.load(SourceConfig(path="org/cached-corpus", format="hf"))
    assert probes == [1] and seen[-1] == ("org/cached-corpus", True, True)


def test_saved_directory_is_planned_as_datasets_would_and_read_without_it(tmp_path):
    """A local save_to_disk directory is planned and read with pyarrow alone: the same units (row
    ranges, sizes, Arrow files) as through load_from_disk, the same documents, and no `import
    datasets` in the process (0.67 s of the parent's start-up on 55 MB)."""
    import subprocess
    import sys

    from pipeline.source_formats import is_local_saved_dataset
    texts = [f"doc {i} " + "w" * (i % 97) for i in range(3000)]
    datasets.Dataset.from_dict({"text": texts, "n": list(range(3000))}).save_to_disk(str(tmp_path / "s"), num_shards=3)
    source = SourceConfig(path=str(tmp_path / "s"), format="hf")
    assert is_local_saved_dataset(source.path) and not is_local_saved_dataset("s3://bucket/s")
    assert not is_local_saved_dataset(str(tmp_path))
    units = hf_reader.plan(source, 0, [source.path], 8192)
    ds = datasets.load_from_disk(source.path)
    old = hf_reader._row_ranges(0, source.path, len(ds), int(ds.data.nbytes), 8192, hf_reader._arrow_files(ds, source))
    assert len(units) > 3 and units == old and [u.paths for u in units] == [u.paths for u in old]
    assert read_all(source, 8192)[1] == texts
    script = ("import sys; from pipeline.readers import hf, BadRecords; from pipeline.recipe import SourceConfig\n"
              f"s = SourceConfig(path={source.path!r}, format='hf')\n"
              "units = hf.plan(s, 0, [s.path], 8192)\n"
              "n = sum(len(b.texts) for u in units for b in hf.iter_batches(u, s, BadRecords(u, 'skip'), 64))\n"
              "print(n, 'datasets' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["3000", "False"]


def test_saved_directory_fast_path_keeps_errors_and_falls_back(tmp_path):
    ds = datasets.Dataset.from_dict({"text": ["a", "b", "c"]})
    ds.save_to_disk(str(tmp_path / "s"))
    with pytest.raises(PrepError, match=r"text_field 'body' is not a column of .*; it has 'text'"):
        hf_reader.plan(SourceConfig(path=str(tmp_path / "s"), format="hf", text_field="body"), 0, [], 1 << 16)
    # a state.json this reader does not know: load_from_disk reads the directory, as before
    state = json.loads((tmp_path / "s" / "state.json").read_text())
    (tmp_path / "s" / "state.json").write_text(json.dumps({**state, "_data_files": []}))
    assert hf_reader._saved_arrow(SourceConfig(path=str(tmp_path / "s"), format="hf")) is None
    # an Arrow file gone after planning: the unit fails naming the dataset
    (tmp_path / "s" / "state.json").write_text(json.dumps(state))
    source = SourceConfig(path=str(tmp_path / "s"), format="hf")
    units = hf_reader.plan(source, 0, [], 1 << 16)
    for f in units[0].paths:
        Path(f).unlink()
    hf_reader._CACHE.clear()
    with pytest.raises(PrepError, match="cannot read its Arrow files"):
        list(hf_reader.iter_batches(units[0], source, BadRecords(units[0], "skip"), 8))


def test_forkserver_preloads_datasets_only_where_workers_use_it(tmp_path):
    from pipeline.pool import _workers_import_datasets
    datasets.Dataset.from_dict({"text": ["a"]}).save_to_disk(str(tmp_path / "s"))
    uses = {
        "saved directory": SourceConfig(path=str(tmp_path / "s"), format="hf"),
        "prepared builder": SourceConfig(path="json", format="hf", data_files=["x.jsonl"]),
        "streamed": SourceConfig(path="json", format="hf", data_files=["x.jsonl"], streaming=True),
        "split slice": SourceConfig(path="json", format="hf", data_files=["x.jsonl"], split="train[:10%]"),
        "remote saved directory": SourceConfig(path="s3://bucket/saved", format="hf"),
        "jsonl": SourceConfig(path="x.jsonl"),
    }
    assert {k for k, s in uses.items() if _workers_import_datasets(s)} == {"streamed", "split slice",
                                                                           "remote saved directory"}


def test_a_load_dataset_cache_directory_is_read_with_pyarrow(tmp_path):
    """load_dataset's cache directory (dataset_info.json, <builder>-<split>[-NNNNN-of-NNNNN].arrow; no
    state.json) failed: load_from_disk refuses it. Its Arrow files are read in shard order, a .map()
    cache file beside them left out, and a split it lacks is named with those it has."""
    (tmp_path / "data").mkdir()
    splits = (("train", 300), ("test", 20), ("train_sft", 7))  # a split named as another's prefix, too
    for name, n in splits:
        (tmp_path / "data" / f"{name}.jsonl").write_text(
            "".join(json.dumps({"text": f"{name} document {i}"}) + "\n" for i in range(n)))
    files = {s: str(tmp_path / "data" / f"{s}.jsonl") for s, _ in splits}
    ds = datasets.load_dataset("json", data_files=files, cache_dir=str(tmp_path / "cache"))
    ds["train"].map(lambda r: {"text": r["text"].upper()})  # writes a cache-<fingerprint>.arrow beside them
    cache_dir = Path(ds["train"].cache_files[0]["filename"]).parent
    assert (cache_dir / "dataset_info.json").is_file() and not (cache_dir / "state.json").exists()
    assert any(p.name.startswith("cache-") for p in cache_dir.glob("*.arrow"))
    for split, n in splits:
        source = SourceConfig(path=str(cache_dir), format="hf", split=split)
        units, texts, positions, bad = read_all(source, unit_bytes=2048)
        assert texts == [f"{split} document {i}" for i in range(n)] and positions == list(range(n)) and not bad
        assert all(u.paths for u in units)  # read with pyarrow, no `datasets` in the workers
    with pytest.raises(PrepError, match=r"source\.split: 'validation' is not a split of .* \(its Arrow files have "
                                        r"test, train, train_sft\)"):
        hf_reader.plan(SourceConfig(path=str(cache_dir), format="hf", split="validation"), 0, [str(cache_dir)], 1 << 16)


def test_a_split_a_builder_lacks_or_a_streamed_slice_names_source_split(tmp_path):
    """An unknown split of a builder's dataset, or a slice of a streamed one, ended in "cannot load the
    Hugging Face dataset ...; for a hub id the hub must be reachable": the split was the problem, and the
    error names source.split and the fix now."""
    data = tmp_path / "a.jsonl"
    data.write_text('{"text": "x"}\n')
    with pytest.raises(PrepError, match=r"^source\.split: 'validation' is not a split of 'json' \(Unknown split "
                                        r"\"validation\"\. Should be one of \['train'\]\.\); set source\.split"):
        read_all(SourceConfig(path="json", format="hf", data_files=[str(data)], split="validation"))
    hf_reader._CACHE.clear()
    with pytest.raises(PrepError, match=r"^source\.split: 'train\[:50%\]': a streamed dataset cannot be sliced .*; "
                                        r"remove source\.streaming to read the slice, or stream the whole split "
                                        r"\('train'\)$"):
        read_all(SourceConfig(path="json", format="hf", data_files=[str(data)], split="train[:50%]", streaming=True))
