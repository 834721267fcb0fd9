"""`prep verify`'s document-boundary check: each document starts with the BOS id and/or ends with the
EOS id that the manifest's `tokenizer.boundary` names (eos | bos | both | none).

Why: the manifest holds the `.bin`'s sha256 but nothing of the `.idx`. An index edited so that it stays
self-consistent (lengths >= 0, offsets their running sum, ending at the `.bin`'s token count, the
header's document count unchanged) passed every other check while its documents were merged and
split. prep writes every document with its boundary id(s): an empty text is never written (counted as
`skipped.empty`), a document is never cut (one longer than `shard_tokens` gets a shard of its own),
and filters and `dedup` drop whole documents. With the document count fixed, any boundary that moved
puts a document's first or last token where no boundary id is, which this finds; unless that id also
occurs inside documents (an EOS string that is a plain vocabulary token). `boundary: none` leaves only
the rule that no document is empty.

Run at the `full` level only (and by `prep inspect` on the shards it decodes), along the one
sequential read of each `.bin` that sha256 already makes: ~11-53 ns of CPU per document, 0.4 ms for the
55 MB benchmark corpus's 7,477 GPT-2 documents and 4.4 ms for the same text as 389,361 paragraphs,
against ~20 ms for sha256 alone on those 36 MB. `--quick` reads no `.bin`; gathering one token per
document through a memory map would touch 46% (documents) and 97% (paragraphs) of those `.bin`s'
4 KiB pages, at random: the whole read, without the checksum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BoundaryPolicy", "boundary_policy", "BoundaryWalk"]

# which ids each policy puts around every document (pipeline.tokenizers._BOUNDARY_NEEDS, not imported:
# that module loads the tokenizer engines, which verify never needs)
_NEEDS = {"eos": ("eos",), "bos": ("bos",), "both": ("bos", "eos"), "none": ()}


@dataclass(frozen=True)
class BoundaryPolicy:
    name: str          # eos | bos | both | none
    bos: int | None    # every document's first token, when the policy prepends one
    eos: int | None    # every document's last token, when the policy appends one


def boundary_policy(tokenizer: dict, vocab_size: int, where: str) -> tuple[BoundaryPolicy | None, list[str]]:
    """(the policy the manifest's `tokenizer` records, problems with those fields). None when there is
    nothing to check against: no `boundary` recorded (a dataset prep did not write), or a broken one
    (reported)."""
    name = tokenizer.get("boundary")
    if name is None:
        return None, []
    if not isinstance(name, str) or name not in _NEEDS:  # a list or a dict is not even hashable
        return None, [f"{where}: tokenizer.boundary is {name!r}, not one of eos, bos, both, none; restore "
                      "manifest.json from a copy, or rebuild with `prep tokenize --overwrite`"]
    ids, problems = {}, []
    for which in _NEEDS[name]:
        tid = tokenizer.get(f"{which}_id")
        # a vocab_size <= 0 is the manifest's own problem, reported once: ids are then only checked >= 0
        if isinstance(tid, bool) or not isinstance(tid, int) or tid < 0 or 0 < vocab_size <= tid:
            problems.append(f"{where}: tokenizer.boundary is {name}, but tokenizer.{which}_id is {tid!r}, not a "
                            f"token id below the vocabulary size {vocab_size}; restore manifest.json from a copy, "
                            "or rebuild with `prep tokenize --overwrite`")
        ids[which] = tid
    if problems:
        return None, problems
    return BoundaryPolicy(name, ids.get("bos"), ids.get("eos")), []


class _Edges:
    """Token positions of each non-empty document's first (or last) token in one shard, ascending,
    computed from its lengths `chunk` documents at a time (memory stays ~16 bytes per document of a
    chunk, whatever the shard's size), consumed in order by `take`."""

    def __init__(self, lengths: np.ndarray, last: bool, chunk: int):
        self.lengths, self.last, self.chunk = lengths, last, chunk
        self.next_doc = 0      # first document not yet in a chunk
        self.tokens = 0        # tokens before next_doc
        self.docs = np.zeros(0, np.int64)
        self.pos = np.zeros(0, np.int64)
        self.k = 0             # next unconsumed entry of docs/pos

    def _load(self) -> bool:
        n = len(self.lengths)
        if self.next_doc >= n:
            return False
        start, stop = self.next_doc, min(n, self.next_doc + self.chunk)
        lens = np.asarray(self.lengths[start:stop]).astype(np.int64)
        ends = np.cumsum(lens) + self.tokens  # exclusive end of each document
        keep = lens > 0  # an empty document has no edge token (the index check reports it)
        self.docs = np.flatnonzero(keep) + start
        self.pos = (ends - 1 if self.last else ends - lens)[keep]
        self.k = 0
        self.next_doc, self.tokens = stop, int(ends[-1])
        return True

    def take(self, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(document numbers, token positions) of the edges before token `stop`, not taken before."""
        docs, pos = [], []
        while True:
            j = int(np.searchsorted(self.pos, stop, side="left"))
            docs.append(self.docs[self.k:j])
            pos.append(self.pos[self.k:j])
            self.k = j
            if j < len(self.pos) or not self._load():
                break
        return np.concatenate(docs), np.concatenate(pos)


class BoundaryWalk:
    """Checks one shard's boundary tokens block by block, along the `.bin`'s sequential read: `feed`
    each block of ids with the position of its first token, then `problem` says what was found."""

    def __init__(self, policy: BoundaryPolicy, lengths: np.ndarray, chunk: int):
        self.policy = policy
        self.checks = [(_Edges(lengths, last, chunk), tid, what)
                       for last, tid, what in ((False, policy.bos, "starts"), (True, policy.eos, "ends"))
                       if tid is not None]
        self.wrong = 0                       # document edges without their boundary id
        self.first: tuple | None = None      # (document, what, token position, id found)

    def feed(self, ids: np.ndarray, pos: int) -> None:
        for edges, tid, what in self.checks:
            docs, at = edges.take(pos + len(ids))
            if not docs.size:
                continue
            bad = np.flatnonzero(ids[at - pos] != tid)
            if bad.size:
                self.wrong += int(bad.size)
                i = int(bad[0])
                if self.first is None or int(docs[i]) < self.first[0]:
                    self.first = (int(docs[i]), what, int(at[i]), int(ids[at[i] - pos]))

    def problem(self, path) -> str | None:
        """One line naming `path` (the file to blame), the first document whose edge is wrong and the id
        expected there; None when every edge holds its id."""
        if self.first is None:
            return None
        doc, what, at, found = self.first
        p = self.policy
        want = (f"the BOS id {p.bos}" if what == "starts" else f"the EOS id {p.eos}")
        more = f" ({self.wrong - 1} more document edges are wrong too)" if self.wrong > 1 else ""
        return (f"{path}: document {doc} {what} with token id {found} (token {at}), not {want} that "
                f"boundary: {p.name} puts at every document's {'start' if what == 'starts' else 'end'}{more}: "
                "the index's document lengths no longer cut the .bin where prep cut it (documents merged or "
                "split)")
