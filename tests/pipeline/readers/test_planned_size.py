"""How much decompressed text a compressed file's ranges are planned for: never less than it holds
where its declared size is wrong (multi-member gzip, a multi-frame zstd whose first frame declares
only itself, no size at all), exactly what it declares where that is right."""

from __future__ import annotations

import gzip
import io
import random

import zstandard

from pipeline.readers import base
from pipeline.readers.base import compressed_ranges


def _text(n: int, seed: int = 0) -> bytes:
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 9))) for _ in range(500)]
    out, size = [], 0
    while size < n:
        line = (" ".join(rng.choice(words) for _ in range(12)) + "\n").encode()
        out.append(line)
        size += len(line)
    return b"".join(out)[:n]


def _planned(tmp_path, name: str, blob: bytes) -> int:
    path = tmp_path / name
    path.write_bytes(blob)
    return base.planned_decompressed_size(str(path), len(blob))


def test_a_right_declared_size_is_used_exactly(tmp_path):
    text = _text(6 << 20)
    assert _planned(tmp_path, "a.zst", zstandard.ZstdCompressor().compress(text)) == len(text)
    assert _planned(tmp_path, "a.gz", gzip.compress(text, 1)) == len(text)


def test_a_small_file_is_measured_exactly(tmp_path):
    text = _text(300_000)
    c = zstandard.ZstdCompressor().compressobj()  # streamed: no size in the header
    assert _planned(tmp_path, "a.zst", c.compress(text) + c.flush()) == len(text)


def test_no_or_wrong_declared_sizes_still_cover_the_whole_stream(tmp_path):
    text, zeros = _text(8 << 20), bytes(3 << 20)
    c = zstandard.ZstdCompressor().compressobj()
    cases = {
        "unsized.zst": c.compress(text) + c.flush(),
        # the last member's ISIZE (3 MiB) exceeds the compressed size, so it used to be believed
        "members.gz": gzip.compress(text, 1) + gzip.compress(zeros),
        # the first frame declares 3 MiB of the 11 MiB
        "frames.zst": zstandard.ZstdCompressor().compress(zeros) + zstandard.ZstdCompressor().compress(text),
    }
    for name, blob in cases.items():
        assert len(blob) > base.SAMPLE_BYTES, name  # estimated from a sample, not measured whole
        truth = len(gzip.decompress(blob)) if name.endswith(".gz") else len(text) + (len(zeros) if "frames" in name else 0)
        planned = _planned(tmp_path, name, blob)
        # never short; over only by the sample's bias (frames.zst: its 3 MiB of zeros sit in the sample)
        assert truth <= planned <= 3 * truth, (name, truth, planned)
        units = compressed_ranges(0, 0, str(tmp_path / name), len(blob), 1 << 20, "jsonl")
        # the open-ended last range holds at most a unit's worth (or nothing): no straggler
        assert units[-1].end == -1 and truth - units[-1].start <= 1 << 20


class _FailingRead(io.RawIOBase):
    """A raw file whose reads fail with `error` once `after` bytes were read."""

    def __init__(self, path, after: int, error: BaseException):
        self.f, self.after, self.error = open(path, "rb"), after, error

    def readable(self):
        return True

    def readinto(self, b):
        at = self.f.tell()
        if at >= self.after:
            raise self.error
        data = self.f.read(min(len(b), self.after - at))
        b[:len(data)] = data
        return len(data)

    def tell(self):
        return self.f.tell()

    def close(self):
        self.f.close()
        super().close()


def test_a_read_error_while_planning_is_not_taken_for_damage(tmp_path, monkeypatch):
    """A disk's EIO or a URL's timeout half-way through the plan's decoding was recorded as damage:
    under on_bad_record: error the run stopped at plan time saying "corrupt or truncated input ...
    replace the file", advice that does not fit a file that is sound. A decoder's error still is damage."""
    import errno

    blob = gzip.compress(_text(300_000), 1)
    path = tmp_path / "a.gz"
    path.write_bytes(blob)
    real_open = base.open_raw
    for error in (OSError(errno.EIO, "Input/output error"), TimeoutError("read timed out")):
        monkeypatch.setattr(base, "open_raw", lambda p, so=None, ahead_to=None, e=error: _FailingRead(p, len(blob) // 2, e))
        with base.planning():
            base.planned_decompressed_size(str(path), len(blob))
            assert str(path) not in base.planning_damage(), error
    monkeypatch.setattr(base, "open_raw", real_open)
    flipped = bytearray(blob)
    flipped[len(blob) // 2] ^= 0xFF
    for name, damaged in (("cut.gz", blob[:len(blob) // 2]), ("flipped.gz", bytes(flipped))):
        (tmp_path / name).write_bytes(damaged)
        with base.planning():
            base.planned_decompressed_size(str(tmp_path / name), len(damaged))
            assert str(tmp_path / name) in base.planning_damage(), name
