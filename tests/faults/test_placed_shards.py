"""Final shards are journaled as they are placed and their parts deleted: the parts on disk never
duplicate placed shards, a resumed run keeps journaled shards as they are (same inode, same mtime),
and a journaled shard damaged or deleted before the resume is rebuilt. Always the same bytes as a
run that never failed (`reference`)."""

from __future__ import annotations

import signal

import pytest
from faultkit import assert_complete, assert_journal_parts_whole, journal_lines, placed_lines, run_prep

NUM_UNITS = 7


def part_files(out, split: str, names) -> list:
    root = out / ".prep" / "parts" / split
    return [p for n in names for p in (root / f"{n}.bin", root / f"{n}.idx") if p.exists()]


@pytest.mark.parametrize("workers", [1, 2])
def test_parts_of_journaled_shards_are_deleted_while_the_run_goes_on(tmp_path, recipe, reference, workers):
    out = tmp_path / "out"
    # the 4th shard is placed, not yet journaled: the 3 before it are journaled and their parts gone
    r = run_prep(recipe, out, workers=workers, fault="finalize-shard:4")
    assert r.returncode == -signal.SIGKILL, r.stderr
    placed = placed_lines(out)
    assert len(placed) == 3, placed
    for e in placed:
        assert part_files(out, e["placed"], e["parts"]) == [], e
        assert (out / e["placed"] / f"{e['name']}.bin").stat().st_size == 2 * e["num_tokens"]
    assert assert_journal_parts_whole(out) >= 3  # every other journaled unit's parts are whole
    rerun = run_prep(recipe, out, workers=workers)
    assert rerun.returncode == 0, rerun.stderr
    assert_complete(out, reference)


# Kill points with shards journaled as placed, whatever the timing: `manifest-before` (every unit and
# every shard journaled) and `journal-placed:2` (two shards journaled, units still running). They used
# to be `journal:7` (every unit journaled, the placing thread somewhere behind), which on a loaded
# machine had placed nothing yet: the guard failed, the test said nothing.
@pytest.mark.parametrize("fault", ["manifest-before:1", "journal-placed:2"])
def test_resume_keeps_journaled_shards_untouched(tmp_path, recipe, reference, fault):
    out = tmp_path / "out"
    r = run_prep(recipe, out, fault=fault)
    assert r.returncode == -signal.SIGKILL, r.stderr
    placed = placed_lines(out)
    assert len(placed) >= 2  # guard: something to keep
    before = {(e["placed"], e["name"]): (out / e["placed"] / f"{e['name']}.bin").stat() for e in placed}
    rerun = run_prep(recipe, out)
    assert rerun.returncode == 0, rerun.stderr
    if fault.startswith("manifest-before"):  # (at journal-placed:2 the units may or may not all be done)
        assert "0/7 units" in rerun.stdout
    assert_complete(out, reference)
    for (split, name), st in before.items():
        now = (out / split / f"{name}.bin").stat()
        assert (now.st_ino, now.st_mtime_ns) == (st.st_ino, st.st_mtime_ns), name  # kept, not rebuilt


@pytest.mark.parametrize("damage", ["delete", "truncate", "flip", "idx-lengths"])
def test_journaled_shard_damaged_before_resume_is_rebuilt(tmp_path, recipe, reference, damage):
    out = tmp_path / "out"
    # every unit and shard journaled (see above), so the rerun redoes only the damaged shard's units
    assert run_prep(recipe, out, fault="manifest-before:1").returncode == -signal.SIGKILL
    placed = [e for e in placed_lines(out) if e["placed"] == "train"]
    assert placed  # guard
    victim = out / "train" / f"{placed[0]['name']}.bin"
    if damage == "delete":
        victim.unlink()
    elif damage == "truncate":
        with open(victim, "r+b") as f:  # (a hard link of nothing else now: its part was deleted)
            f.truncate(victim.stat().st_size - 2)
    elif damage == "flip":  # same size: once kept by a size check, then a manifest sha256 it failed
        with open(victim, "r+b") as f:
            f.seek(10)
            byte = f.read(1)
            f.seek(10)
            f.write(bytes([byte[0] ^ 0x40]))
    else:  # the first two documents' lengths swapped: same size, same total
        idx = victim.with_suffix(".idx")
        data = bytearray(idx.read_bytes())
        data[34:38], data[38:42] = data[38:42], data[34:38]
        assert data != idx.read_bytes()  # guard: two documents of different lengths
        idx.write_bytes(bytes(data))
    rerun = run_prep(recipe, out)
    assert rerun.returncode == 0, rerun.stderr
    assert "0/7 units" not in rerun.stdout  # the units it was built from were redone
    assert_complete(out, reference)


@pytest.mark.parametrize("fault", ["journal-placed:2", "journal-placed-torn:2", "parts-drop:2"])
def test_kill_around_a_shard_journal_line_then_rerun_is_identical(tmp_path, recipe, reference, fault):
    out = tmp_path / "out"
    r = run_prep(recipe, out, fault=fault)
    assert r.returncode == -signal.SIGKILL, r.stderr
    placed = placed_lines(out)
    assert len(placed) == (1 if fault == "journal-placed-torn:2" else 2), placed  # guard: died there
    if fault == "parts-drop:2":  # journaled, parts not yet deleted: both there
        assert part_files(out, placed[1]["placed"], placed[1]["parts"])
    assert len(journal_lines(out)) <= NUM_UNITS
    rerun = run_prep(recipe, out)
    assert rerun.returncode == 0, rerun.stderr
    assert_complete(out, reference)


def test_exact_dedup_keeps_every_part_until_the_end(tmp_path, corpus):
    """dedup: exact places shards only after every unit (duplicates dropped first): no placed lines."""
    from faultkit import snapshot, write_recipe

    recipe = write_recipe(tmp_path, corpus, dedup="exact")
    ref = tmp_path / "ref"
    assert run_prep(recipe, ref).returncode == 0
    out = tmp_path / "out"
    assert run_prep(recipe, out, fault="finalize-shard:2").returncode == -signal.SIGKILL
    assert placed_lines(out) == [] and len(journal_lines(out)) == NUM_UNITS
    rerun = run_prep(recipe, out)
    assert rerun.returncode == 0, rerun.stderr
    assert snapshot(out) == snapshot(ref)
