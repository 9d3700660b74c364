"""One cached partition's rows for :mod:`.index`: immutable entries, cheap writes.

An entry is what a search scans (possibly in a worker thread) while the event
loop goes on writing, so it never changes once built; a write builds the next
entry. Copying a 10,000 x 384 matrix for every write, though, cost ~3 ms
(appends) to ~16 ms (deletes) on the event loop, a third of the raw Chroma
write. So the vectors live in an :class:`Arena` shared by the successive
entries of a partition: an entry refers to its rows through ``phys`` (arena
rows, in the order of ``ids``), and only to arena rows below the arena's
``used`` at its creation. The arena only ever writes rows at or above
``used`` (an append, or the new vector of an update), so what an entry sees
never changes. A delete only drops the row from ``phys``. When the arena is
full, or holds more dead rows than live ones, the live rows are copied into a
new arena with 50 % headroom (amortized O(1) per write); older entries keep
the old arena.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...core.records import ORIGIN_PRIVATE, PENDING_KEY, MemoryRecord, OriginFilter

__all__ = ["Arena", "Entry", "appended", "build_entry", "removed", "scan", "updated"]

_ROW_OVERHEAD = 256
"""Rough bytes per row for the id, the metadata dict and list slots."""

_ENTRY_OVERHEAD = 1024
"""Rough bytes per cached partition, so that empty partitions count into the budget too."""

_MIN_HEADROOM = 32
"""Spare arena rows at least, when an arena is (re)built for writes."""


class Arena:
    """Vectors and squared norms of a partition's rows; rows below ``used`` are final."""

    __slots__ = ("data", "norms", "used")

    def __init__(self, data: np.ndarray, norms: np.ndarray, used: int) -> None:
        self.data = data
        self.norms = norms
        self.used = used

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes + self.norms.nbytes)

    def push(self, row: np.ndarray) -> int | None:
        """Write ``row`` into the next free row (its index), or ``None`` when full."""
        if self.used >= len(self.data):
            return None
        at = self.used
        self.data[at] = row
        self.norms[at] = float(row @ row)
        self.used = at + 1
        return at


def _arena(vectors: np.ndarray, spare: int) -> Arena:
    """A new arena holding ``vectors`` (rows 0..n-1) with room for ``spare`` more rows."""
    n = len(vectors)
    data = np.empty((n + spare, vectors.shape[1]), dtype=np.float32)
    data[:n] = vectors
    norms = np.empty(n + spare, dtype=np.float32)
    norms[:n] = np.einsum("ij,ij->i", vectors, vectors) if n else norms[:0]
    return Arena(data, norms, n)


def _text_bytes(ids: Sequence[str], docs: Sequence[str | None]) -> int:
    return sum(len(i) + len(d or "") * 3 for i, d in zip(ids, docs, strict=False))


@dataclass(frozen=True, slots=True)
class Entry:
    """One partition's rows; immutable (a write builds a new entry, see the module docstring)."""

    ids: tuple[str, ...]
    documents: tuple[str | None, ...]
    metadatas: tuple[dict[str, Any], ...]
    generation: tuple[int, str]
    taken: float
    arena: Arena
    phys: np.ndarray
    """Arena row of every row (int64, in the order of ``ids``)."""
    span: int
    """The arena's ``used`` when this entry was built: every ``phys`` is below it."""
    text_bytes: int
    importance: np.ndarray
    """``importance`` of every row (object array), for the filter."""
    origin: np.ndarray
    """The origin of every row as a code of ``origin_codes`` (int32), for the filter."""
    origin_codes: Mapping[str, int]
    """Code of every origin seen (``private`` is always 0); never changed once
    built: a row of a new origin makes a new table."""
    derived: dict[str, Any] = field(default_factory=dict, compare=False)
    """Structures computed lazily from these rows by other modules (the keyword
    index of :mod:`.retrieval`); a write builds a new entry, so they never go stale."""
    _dense: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    @property
    def nbytes(self) -> int:
        """Bytes counted against the cache budget (the arena's full capacity included)."""
        return (
            _ENTRY_OVERHEAD
            + self.arena.nbytes
            + int(self.phys.nbytes)
            + self.text_bytes
            + _ROW_OVERHEAD * len(self.ids)
        )

    @property
    def dim(self) -> int:
        """The vectors' dimension (0 while the partition is empty and never was written)."""
        return int(self.arena.data.shape[1])

    def vector(self, row: int) -> np.ndarray:
        """The vector of one row (no copy of the others; prefer it to ``vectors[row]``)."""
        out = self.arena.data[int(self.phys[row])]
        out.flags.writeable = False
        return out

    @property
    def vectors(self) -> np.ndarray:
        """The rows' vectors in the order of ``ids`` (a view when they are contiguous,
        else gathered once and kept: O(rows) the first time after a delete or a
        re-embedded update; read-only either way)."""
        n = len(self.ids)
        if n == 0:
            return self.arena.data[:0]
        cached = self._dense.get("v")
        if cached is None:
            contiguous = bool(np.array_equal(self.phys, np.arange(n)))
            cached = self.arena.data[:n] if contiguous else self.arena.data[self.phys]
            cached = cached.view()
            cached.flags.writeable = False
            self._dense["v"] = cached
        return cached


_PRIVATE_ONLY: Mapping[str, int] = {ORIGIN_PRIVATE: 0}


def _origin_codes(
    metas: Sequence[Mapping[str, Any]], known: Mapping[str, int]
) -> tuple[np.ndarray, Mapping[str, int]]:
    """The origin code of every row of ``metas`` and the table (``known``, or a
    copy of it with the origins it lacked)."""
    grown: dict[str, int] | None = None
    codes = np.empty(len(metas), dtype=np.int32)
    for i, meta in enumerate(metas):
        origin = str(meta.get("origin") or ORIGIN_PRIVATE)
        code = (known if grown is None else grown).get(origin)
        if code is None:
            grown = dict(known) if grown is None else grown
            code = grown[origin] = len(grown)
        codes[i] = code
    return codes, known if grown is None else grown


def build_entry(
    ids: Sequence[str],
    vectors: np.ndarray,
    docs: Sequence[str | None],
    metas: Sequence[dict[str, Any]],
    generation: tuple[int, str],
    taken: float,
) -> Entry:
    """A fresh entry (a partition read from Chroma); its arena has no spare rows yet."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2:
        vectors = vectors.reshape(len(ids), -1)
    importance = np.empty(len(metas), dtype=object)
    importance[:] = [m.get("importance") for m in metas]
    origin, codes = _origin_codes(metas, _PRIVATE_ONLY)
    arena = _arena(vectors, 0)
    return Entry(
        tuple(ids),
        tuple(docs),
        tuple(metas),
        generation,
        taken,
        arena,
        np.arange(len(ids), dtype=np.int64),
        arena.used,
        _text_bytes(ids, docs),
        importance,
        origin,
        codes,
    )


def _row(entry: Entry, vector: Sequence[float]) -> np.ndarray:
    row = np.asarray(vector, dtype=np.float32).reshape(-1)
    if len(entry.ids) and row.shape[0] != entry.arena.data.shape[1]:
        raise ValueError("vector of another dimension")
    return row


def _push(entry: Entry, row: np.ndarray, phys: np.ndarray) -> tuple[Arena, np.ndarray, int]:
    """Write ``row`` into ``entry``'s arena (or a compacted, larger copy of the rows in
    ``phys``); returns the arena, ``phys`` (renumbered after a copy) and the new row's index."""
    arena = entry.arena
    if arena.data.shape[1] == row.shape[0]:
        at = arena.push(row)
        if at is not None:
            return arena, phys, at
    live = len(phys)
    vectors = arena.data[phys] if live else np.zeros((0, row.shape[0]), dtype=np.float32)
    arena = _arena(vectors, max(live // 2, _MIN_HEADROOM))
    at = arena.push(row)
    assert at is not None
    return arena, np.arange(live, dtype=np.int64), at


def appended(entry: Entry, vector: Sequence[float], record: MemoryRecord) -> Entry:
    """``entry`` plus ``record`` (a memory just added)."""
    row = _row(entry, vector)
    arena, phys, at = _push(entry, row, entry.phys)
    meta = record.to_metadata()
    origin, codes = _origin_codes([meta], entry.origin_codes)
    return Entry(
        (*entry.ids, record.id),
        (*entry.documents, record.content),
        (*entry.metadatas, meta),
        entry.generation,
        entry.taken,
        arena,
        np.append(phys, at),
        arena.used,
        entry.text_bytes + _text_bytes([record.id], [record.content]),
        np.append(entry.importance, np.asarray([meta.get("importance")], dtype=object)),
        np.append(entry.origin, origin),
        codes,
    )


def updated(entry: Entry, vector: Sequence[float] | None, record: MemoryRecord) -> Entry:
    """``entry`` with ``record``'s row replaced; ``ValueError`` when it is not cached."""
    r = entry.ids.index(record.id)
    arena, phys, span = entry.arena, entry.phys, entry.span
    if vector is not None:
        arena, phys, at = _push(entry, _row(entry, vector), entry.phys.copy())
        phys[r] = at
        span = arena.used
    meta = record.to_metadata()
    importance = entry.importance.copy()
    importance[r] = meta.get("importance")
    changed, codes = _origin_codes([meta], entry.origin_codes)
    origin = entry.origin
    if origin[r] != changed[0]:
        origin = origin.copy()
        origin[r] = changed[0]
    old_doc = entry.documents[r]
    return Entry(
        entry.ids,
        (*entry.documents[:r], record.content, *entry.documents[r + 1 :]),
        (*entry.metadatas[:r], meta, *entry.metadatas[r + 1 :]),
        entry.generation,
        entry.taken,
        arena,
        phys,
        span,
        entry.text_bytes + (len(record.content) - len(old_doc or "")) * 3,
        importance,
        origin,
        codes,
    )


def removed(entry: Entry, memory_id: str) -> Entry:
    """``entry`` without ``memory_id``; ``ValueError`` when it is not cached."""
    r = entry.ids.index(memory_id)
    phys = np.delete(entry.phys, r)
    arena, span = entry.arena, entry.span
    if span - len(phys) > len(phys) + _MIN_HEADROOM:  # mostly dead rows: compact
        arena = _arena(arena.data[phys], max(len(phys) // 2, _MIN_HEADROOM))
        phys = np.arange(len(phys), dtype=np.int64)
        span = arena.used
    return Entry(
        entry.ids[:r] + entry.ids[r + 1 :],
        entry.documents[:r] + entry.documents[r + 1 :],
        entry.metadatas[:r] + entry.metadatas[r + 1 :],
        entry.generation,
        entry.taken,
        arena,
        phys,
        span,
        entry.text_bytes - _text_bytes([memory_id], [entry.documents[r]]),
        np.delete(entry.importance, r),
        np.delete(entry.origin, r),
        entry.origin_codes,
    )


def _origin_mask(entry: Entry, origins: OriginFilter) -> np.ndarray:
    """The rows ``origins`` lets through (not for :attr:`OriginFilter.ALL`)."""
    if origins.kind == "any_group":
        return entry.origin != entry.origin_codes[ORIGIN_PRIVATE]
    code = entry.origin_codes.get(origins.origin)
    if code is None:
        return np.zeros(len(entry.ids), dtype=bool)
    return entry.origin == code


def pending_mask(entry: Entry) -> np.ndarray:
    """The rows stored without their vector (a placeholder: never a nearest neighbour);
    computed once per entry (a write builds a new one)."""
    mask = entry.derived.get(PENDING_KEY)
    if mask is None:
        mask = np.asarray([bool(m.get(PENDING_KEY)) for m in entry.metadatas], dtype=bool)
        entry.derived[PENDING_KEY] = mask
    return mask


def scan(
    entry: Entry,
    query: np.ndarray,
    top_k: int,
    importance: str | None,
    origins: OriginFilter,
) -> list[tuple[int, float]]:
    """``(row, squared L2 distance)`` of the ``top_k`` nearest matching rows, ties by id."""
    n = len(entry.ids)
    rows = np.arange(n)
    pending = pending_mask(entry)
    if importance is not None or origins.narrows or pending.any():
        keep = ~pending
        if importance is not None:
            keep &= entry.importance == importance
        if origins.narrows:
            keep &= _origin_mask(entry, origins)
        rows = rows[keep]
    if not len(rows) or top_k <= 0:
        return []
    phys = entry.phys[rows]
    data, norms = entry.arena.data, entry.arena.norms
    if len(rows) > top_k:
        # Pre-select with one matrix product over the arena (|v|^2 - 2 v.q + |q|^2),
        # keeping every row within a float32 error margin of the k-th; then exact
        # distances on those only.
        qq = float(query @ query)
        rough = norms[phys] - 2.0 * (data[: entry.span] @ query)[phys] + qq
        kth = float(np.partition(rough, top_k - 1)[top_k - 1])
        margin = 1e-4 * (1.0 + abs(kth) + qq + float(norms[phys].max()))
        cand = np.nonzero(rough <= kth + margin)[0]
    else:
        cand = np.arange(len(rows))
    diff = data[phys[cand]] - query
    exact = np.einsum("ij,ij->i", diff, diff)
    if len(cand) > top_k:
        kth = float(np.partition(exact, top_k - 1)[top_k - 1])
        keep_c = np.nonzero(exact <= kth)[0]  # ties at the k-th included, ordered below
        cand, exact = cand[keep_c], exact[keep_c]
    order = sorted(
        range(len(cand)), key=lambda j: (float(exact[j]), entry.ids[int(rows[cand[j]])])
    )[:top_k]
    return [(int(rows[cand[j]]), float(exact[j])) for j in order]
