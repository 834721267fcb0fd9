"""unit_bytes: auto: unit sizes follow the input's total size, never the worker count."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.readers import AUTO_UNIT_MAX, AUTO_UNIT_MIN, AUTO_UNITS, auto_unit_bytes, plan_units
from pipeline.recipe import Recipe


@given(st.integers(min_value=0, max_value=1 << 44), st.integers(min_value=0, max_value=1 << 44))
def test_auto_unit_bytes_is_a_bounded_monotone_power_of_two(a, b):
    ua, ub = auto_unit_bytes(a), auto_unit_bytes(b)
    assert AUTO_UNIT_MIN <= ua <= AUTO_UNIT_MAX
    assert ua & (ua - 1) == 0
    assert (ua <= ub) if a <= b else (ua >= ub)
    if a >= AUTO_UNITS * AUTO_UNIT_MAX:
        assert ua == AUTO_UNIT_MAX
    elif a >= AUTO_UNITS * AUTO_UNIT_MIN:  # enough input for AUTO_UNITS units of at least the minimum
        assert AUTO_UNITS <= -(-a // ua) <= 2 * AUTO_UNITS  # ua in (a/64, a/32]: 32 to 64 units, rounded up


def _recipe(path, **top) -> Recipe:
    return Recipe.from_dict({"name": "t", "source": {"path": str(path), "format": "jsonl"}, "tokenizer": {"path": "t"},
                             "output": {"dir": "o"}, **top})


def _sparse(path, size: int):
    with open(path, "wb") as f:  # planning a plain JSONL file reads only its size
        f.truncate(size)
    return path


def test_small_inputs_get_smaller_units_whatever_the_worker_count(tmp_path):
    path = _sparse(tmp_path / "a.jsonl", 55_000_000)
    plans = {w: plan_units(_recipe(path, num_workers=w)) for w in (1, 2, 16)}
    assert plans[1] == plans[2] == plans[16]  # the plan is the journal's fingerprint: resumable with any -j
    units = plans[1]
    assert len(units) == 27 and {u.size for u in units[:-1]} == {AUTO_UNIT_MIN}
    assert [u.index for u in units] == list(range(27))
    assert units[0].start == 0 and units[-1].end == 55_000_000
    assert all(a.end == b.start for a, b in zip(units, units[1:]))


def test_large_inputs_keep_16_mib_units_and_explicit_sizes_win(tmp_path):
    a = _sparse(tmp_path / "a.jsonl", 300 << 20)
    _sparse(tmp_path / "b.jsonl", 300 << 20)
    units = plan_units(_recipe(tmp_path / "*.jsonl"))
    assert len(units) == 2 * -(-300 // 16) and max(u.size for u in units) == AUTO_UNIT_MAX
    assert len(plan_units(_recipe(a, unit_bytes=100 << 20))) == 3
    assert len(plan_units(_recipe(tmp_path / "*.jsonl", unit_bytes=AUTO_UNIT_MAX))) == len(units)


def test_only_jsonl_ranges_of_compressed_files_are_spooled():
    from pipeline.readers import WorkUnit
    assert WorkUnit(0, 0, 0, "a.jsonl.zst", "jsonl", 0, 1 << 20, 1 << 20).is_spooled
    assert not WorkUnit(0, 0, 0, "a.jsonl.zst", "jsonl", 0, -1, 5).is_spooled  # the whole file: read directly
    assert not WorkUnit(0, 0, 0, "a.jsonl", "jsonl", 0, 1 << 20, 1 << 20).is_spooled
    # other formats' start/end are rows (an HF shard named .json.gz): never a byte range to spool
    assert not WorkUnit(0, 0, 0, "train-0.json.gz", "hf", 100, 200, 5).is_spooled


_unit_shapes = st.lists(st.tuples(st.integers(0, 5), st.integers(1, 3000), st.sampled_from(["jsonl", "hf", "text"]),
                                  st.booleans()), max_size=40)


@given(shapes=_unit_shapes, unit_bytes=st.integers(1, 5000), group_file_bytes=st.sampled_from([1 << 20, 700]))
def test_small_whole_files_are_grouped_in_order_and_nothing_else(shapes, unit_bytes, group_file_bytes):
    """shapes: per file, (units the plan cut it into, bytes per unit, format, a text unit of whole files)."""
    from unittest import mock

    import pipeline.readers as readers
    from pipeline.readers import WorkUnit, group_small_files
    GROUP_FILE_BYTES = group_file_bytes
    units = [WorkUnit(0, 0, fi, f"f{fi}", fmt, k, -1 if n == 1 else k + 1, size, paths=("a", "b") if many else ())
             for fi, (n, size, fmt, many) in enumerate(shapes) for k in range(n)]
    with mock.patch.object(readers, "GROUP_FILE_BYTES", group_file_bytes):
        grouped = group_small_files(units, unit_bytes)
    flat = [m for g in grouped for m in (g.group or (g,))]
    assert flat == units  # every unit once, in dataset order
    for g in grouped:
        if g.group:
            assert len(g.group) > 1 and g.size == sum(m.size for m in g.group) <= unit_bytes
            assert (g.path, g.file_index, g.start, g.end) == (g.group[0].path, g.group[0].file_index, 0, -1)
            assert all(m.format != "hf" and not m.paths and m.size < min(unit_bytes, GROUP_FILE_BYTES)
                       for m in g.group)
            assert all(sum(u.file_index == m.file_index for u in units) == 1 for m in g.group)  # whole files
    # a run of small files is never left ungrouped when the next one would have fitted
    for a, b in zip(grouped, grouped[1:]):
        a_last = (a.group or (a,))[-1]
        small = [(u.format != "hf" and not u.paths and sum(v.file_index == u.file_index for v in units) == 1
                  and u.size < min(unit_bytes, GROUP_FILE_BYTES)) for u in (a_last, b if not b.group else b.group[0])]
        if all(small):
            assert a.size + (b.group or (b,))[0].size > unit_bytes


@pytest.mark.parametrize("fmt, separator", [("jsonl", None), ("text", None), ("text", "\n"), ("text", "\n\n")])
def test_input_bytes_is_what_the_plan_covers(tmp_path, fmt, separator):
    """A reader's input_bytes stands for its plan at unit_bytes: auto (readers.plan_units plans once,
    at the size it gives): plain and compressed files, big and small, a JSON array read whole."""
    import gzip
    import json

    import zstandard

    from pipeline.readers import get_reader
    from pipeline.recipe import SourceConfig
    lines = "".join(json.dumps({"text": f"line {i} " + "w " * (i % 50)}) + "\n" for i in range(3000)).encode()
    files = []
    for name, data in [("a", lines), ("b.gz", gzip.compress(lines)), ("c.zst", zstandard.compress(lines * 4)),
                       ("d", lines[:300]), ("e", json.dumps([{"text": "x"}] * 5000).encode())]:
        path = tmp_path / f"{name.split('.')[0]}.{'jsonl' if fmt == 'jsonl' else 'txt'}{'.' + name.split('.')[1] if '.' in name else ''}"
        path.write_bytes(data)
        files.append(str(path))
    source = SourceConfig(path=str(tmp_path), format=fmt, doc_separator=separator)
    reader = get_reader(fmt)
    for unit_bytes in (1 << 10, 1 << 14, 1 << 30):
        assert sum(u.size for u in reader.plan(source, 0, files, unit_bytes)) == \
            reader.input_bytes(source, files, unit_bytes)
