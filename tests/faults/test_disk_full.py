"""A full disk (ENOSPC) at each stage of a run: one clear line naming the file, no traceback, no
unit journaled with a partial part, no half-written manifest; after space is freed the re-run
completes with the same bytes as a run that never failed.

Two ways to fill the disk:
  * injected (runs everywhere): PREP_FAULT=enospc:<bytes> makes a process's shard writes fail
    once it has written that many bytes;
  * real (needs root to mount a tmpfs; skipped otherwise): the run parks itself (SIGSTOP) at a
    named point, the test fills the filesystem, and lets it continue into the full disk.
"""

from __future__ import annotations

import dataclasses
import errno
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from faultkit import (
    assert_complete,
    assert_journal_parts_whole,
    assert_no_survivors,
    journal_lines,
    run_prep,
)

from pipeline.manifest import read_manifest, write_manifest

NUM_UNITS = 7


def _check_failed_cleanly(rc: int, err: str, where: str) -> None:
    err = err.replace("\n", "")
    assert rc == 1, err
    assert "no space left on device" in err and "re-run the same command to resume" in err, err
    assert any(w in err for w in ((where,) if isinstance(where, str) else where)), (where, err)  # names the file
    assert "Traceback" not in err, err


# -- injected -------------------------------------------------------------------------------------
@pytest.mark.parametrize("budget,workers,where", [
    (1, 2, "/.prep/parts/train/u"),        # the first write of every worker
    (30_000, 2, "/.prep/parts/"),          # each worker's second unit
    (30_000, 1, "/.prep/parts/"),
    (120_000, 1, "/.prep/parts/"),         # a later unit
    # every part fits, but not the parts plus the parent's copies into coalesced shards (placed while
    # units run, so either write may be the one that fails; tests/pipeline/test_assemble.py fails
    # the copy alone)
    ("all-parts", 1, ("/shard-0", "/.prep/parts/")),
])
def test_injected_disk_full_then_rerun_is_identical(tmp_path, recipe, reference, reference_out, budget, workers,
                                                    where):
    if budget == "all-parts":  # every part fits; finalize's first copy does not
        manifest = read_manifest(reference_out)
        budget = 2 * sum(s.num_tokens for s in manifest.splits.values())
    out = tmp_path / "out"
    tag = f"enospc-{time.monotonic_ns()}"
    r = run_prep(recipe, out, workers=workers, fault=f"enospc:{budget}", tag=tag)
    _check_failed_cleanly(r.returncode, r.stderr, where)
    assert_no_survivors(tag)
    assert not (out / "manifest.json").exists()
    done = assert_journal_parts_whole(out)  # nothing partial was recorded as finished
    assert done < NUM_UNITS or not isinstance(where, str)
    if workers == 1:  # the failing process removed its temporaries (a pool's killed peers cannot)
        assert not [p for p in out.rglob("*tmp*")], list(out.rglob("*tmp*"))
    rerun = run_prep(recipe, out, workers=workers)  # "space freed": no budget this time
    assert rerun.returncode == 0, rerun.stderr
    assert_complete(out, reference)


# -- a real full filesystem -----------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs of our own (root only; skipped where mounting is not allowed)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(disk: Path) -> Path:
    """Write a file until the filesystem refuses another byte."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (1 << 20, 1 << 14, 512, 1):
            block = b"\0" * chunk
            try:
                while f.write(block) == chunk:
                    pass
            except OSError as e:
                assert e.errno == errno.ENOSPC
    return filler


def _wait_stopped(pid: int, proc, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if psutil.Process(pid).status() == psutil.STATUS_STOPPED:
            return
        if proc.poll() is not None:
            break
        time.sleep(0.01)
    proc.kill()
    pytest.fail(f"the run never reached its stop point (rc {proc.poll()})")


STAGES = [  # (the run parks here, workers, the file ENOSPC hits)
    ("start:1:stop", 1, "/.prep/parts/train/u0000000-0000.bin.tmp"),
    ("start:1:stop", 2, "/.prep/parts/train/u"),
    ("journal:3:stop", 1, "/.prep/parts/train/u0000003-0000.bin.tmp"),
    # placing shards: the shard being built, or the journal line of one just placed
    ("journal:7:stop", 1, ("/val/shard-000000.bin.tmp", "/.prep/journal.jsonl")),
    ("manifest-before:1:stop", 1, "/manifest.json.tmp"),      # the manifest itself
]


@pytest.mark.parametrize("stop,workers,where", STAGES, ids=[f"{s.rsplit(':', 1)[0]}-j{w}" for s, w, _ in STAGES])
def test_real_full_disk_then_free_space_and_rerun(small_disk, recipe, reference, stop, workers, where):
    out = small_disk / "out"
    tag = f"tmpfs-{time.monotonic_ns()}"
    proc = run_prep(recipe, out, workers=workers, fault=stop, tag=tag, wait=False)
    _wait_stopped(proc.pid, proc)
    filler = _fill(small_disk)
    finished = len(journal_lines(out))
    proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
    _check_failed_cleanly(proc.returncode, err.decode(), where)
    assert_no_survivors(tag)
    assert not (out / "manifest.json").exists()  # never a half-written manifest
    assert len(journal_lines(out)) == finished or workers > 1
    assert_journal_parts_whole(out)
    if workers == 1:
        assert not [p for p in out.rglob("*tmp*")], list(out.rglob("*tmp*"))
    filler.unlink()  # free the space
    rerun = run_prep(recipe, out, workers=workers)
    assert rerun.returncode == 0, rerun.stderr
    assert_complete(out, reference)


def test_manifest_rewrite_on_full_disk_keeps_the_old_one_whole(small_disk, reference_out):
    """write_json_atomic on a full disk: the old manifest.json stays byte for byte, no temporary stays."""
    out = small_disk / "ds"
    out.mkdir()
    old = (reference_out / "manifest.json").read_bytes()
    (out / "manifest.json").write_bytes(old)
    manifest = read_manifest(out)
    bigger = dataclasses.replace(manifest, recipe={"padding": "x" * 20000})
    _fill(small_disk)
    with pytest.raises(OSError) as e:
        write_manifest(out, bigger)
    assert e.value.errno == errno.ENOSPC and "manifest.json.tmp" in str(e.value.filename)
    assert (out / "manifest.json").read_bytes() == old
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]


@pytest.mark.parametrize("budget,workers", [(100_000, 2), (150_000, 3)])
def test_disk_full_while_spooling_a_compressed_file_stops_the_run(tmp_path, corpus, budget, workers):
    """A .zst cut into ranges is decompressed by the parent into window files (pipeline.spool); a window
    write that hit ENOSPC was read as the input's damage ("corrupt or truncated input ... replace the
    file"): the units from there on failed, and the run finished without their documents for good
    (failed_units). Now it stops the run like any full disk, and the re-run gives a clean run's bytes."""
    import zstandard
    from faultkit import snapshot, write_recipe

    packed = tmp_path / "small.jsonl.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(corpus.read_bytes()))
    recipe = write_recipe(tmp_path, packed)
    clean = run_prep(recipe, tmp_path / "clean", workers=1)
    assert clean.returncode == 0, clean.stderr
    out = tmp_path / "out"
    tag = f"enospc-spool-{time.monotonic_ns()}"
    r = run_prep(recipe, out, workers=workers, fault=f"enospc:{budget}", tag=tag)  # in the parent: the windows
    _check_failed_cleanly(r.returncode, r.stderr, "/.prep/spool/u")
    assert "corrupt" not in r.stderr, r.stderr
    assert_no_survivors(tag)
    assert [e["unit"] for e in journal_lines(out) if e["status"] != "ok"] == []  # no unit failed for it
    rerun = run_prep(recipe, out, workers=workers)
    assert rerun.returncode == 0, rerun.stderr
    assert_complete(out, snapshot(tmp_path / "clean"))
