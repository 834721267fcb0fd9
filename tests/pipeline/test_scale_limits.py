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


def test_a_document_longer_than_an_index_length_holds_is_named_before_it_is_written(tmp_path, monkeypatch):
    """A .idx length is int32: a document of 2^31 tokens or more (a text file read whole, ~8 GB) reached
    write_idx only at the part's close, after its tokens were written, as "<part>.idx.tmp<pid>: a
    document length does not fit int32". The limit lowered to 40 tokens reaches the same path."""
    from pipeline import manifest
    from tests.conftest import DEMO_TOKENIZER, write_jsonl, write_recipe
    from tests.pipeline.test_tokenize import run_cli

    monkeypatch.setattr(manifest, "MAX_DOC_TOKENS", 40, raising=False)  # the run's one worker is this process
    texts = ["short one", "also short", " ".join(["word"] * 200), "short again"]
    corpus = write_jsonl(tmp_path / "in.jsonl", texts)
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=DEMO_TOKENIZER, out=tmp_path / "out",
                          output__val_fraction=0.0)
    code, output = run_cli("--recipe", recipe)
    line = output.strip()
    at = corpus.read_bytes().index(b'{"text": "word')
    assert code == 1 and "\n" not in line and "Traceback" not in line, output
    assert f"{corpus}: the document at byte {at} has 601 tokens" in line, line  # the unit fails, naming it
    assert "more than the 40 one document of a Megatron .idx can hold" in line
    assert "source.doc_separator" in line and "source.max_record_bytes" in line
    assert not list((tmp_path / "out").rglob("*.bin*"))  # no token of it was written
