"""Limits that only real scale reaches (10^7 units, 10^6 shards, ...), reached here by naming or
building the large indexes directly instead of tokenizing that much."""

from __future__ import annotations

from pipeline.journal import RunState
from pipeline.worker import part_prefix, unit_of_part


def test_units_past_ten_million_keep_their_number_in_part_names(tmp_path):
    """part_prefix pads to 7 digits; unit 10^7 on has 8, and unit_of_part read only 7 of them."""
    big = 10_000_005
    assert unit_of_part(f"{part_prefix(big)}-0000") == big
    assert unit_of_part(f"{part_prefix(3)}-0012") == 3

    # forget_units drops every placed shard from the first that holds a forgotten unit's part
    state = RunState(tmp_path)
    state.dir.mkdir(parents=True)
    done = {u: {"unit": u, "status": "ok"} for u in (big - 1, big, big + 1)}
    state.placed = {"train": [
        {"placed": "train", "shard": 0, "name": "shard-000000", "parts": [f"{part_prefix(big - 1)}-0000"]},
        {"placed": "train", "shard": 1, "name": "shard-000001", "parts": [f"{part_prefix(big)}-0000"]},
    ]}
    state.forget_units(done, {big})
    assert sorted(done) == [big - 1, big + 1]
    assert [e["name"] for e in state.placed["train"]] == ["shard-000000"]
    _, placed = state._read_journal()  # the rewritten journal says the same
    assert sorted(placed["train"]) == [0]
