"""An in-process exact vector index per partition, so a search costs O(partition).

Chroma's ``where user_id == partition`` makes every filtered query pay for the
whole collection (18 ms for a 1,000-memory partition at 100,000 memories in
total); an exact numpy scan of that partition's vectors costs well under a
millisecond. ChromaDB stays the single source of truth: a partition is loaded
lazily from Chroma (ids, vectors, documents, metadata) under its lock, kept in
step by the store's own writes (which run under the same lock), and dropped on
any error, on :meth:`PartitionIndex.clear` (``MemoryStore.invalidate``), when the
connection's ``generation`` or the collection's id changes (remap, reconnect),
and after ``ttl`` seconds in remote mode so that another process's writes are
seen, like :class:`~.counts.PartitionCounts`.

Only Chroma's default space ``l2`` (squared Euclidean distance) is scanned
here; a collection configured for ``cosine`` / ``ip`` keeps using Chroma's own
query. Results equal Chroma's: same ids, same order, same distances (float32).
At exact distance ties the order is by id (Chroma's own order at an exact tie
is not specified). Chroma's filtered HNSW search is approximate in large
partitions (it sometimes misses a closer memory); this scan is always exact.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from nonebot import logger

from ..core.records import ORIGIN_GROUP_FLAG, MemoryRecord
from ..core.text import short_error

if TYPE_CHECKING:
    from ..core.locks import PartitionLocks
    from .chroma import ChromaConnection


class IndexedStore(Protocol):
    """What the index needs of :class:`~.memory_store.MemoryStore` (no import cycle)."""

    connection: ChromaConnection
    locks: PartitionLocks

    async def collection(self) -> Any: ...


__all__ = ["DEFAULT_INDEX_MB", "IndexedStore", "PartitionIndex"]

DEFAULT_INDEX_MB = 256
"""Default byte budget of the cache, in MiB (``vector_index_max_mb``)."""

INLINE_SCAN_ROWS = 2048
"""Partitions up to this size are scanned on the event loop (well under 1 ms);
larger ones in a worker thread."""

OVERSIZED_RECHECK = 60.0
"""Seconds before a partition found too large for the budget is read again (it may shrink)."""

OVERSIZED_MAX = 4096
"""How many too-large partitions are remembered."""

_ROW_OVERHEAD = 256
"""Rough bytes per row for the id, the metadata dict and list slots."""

_ENTRY_OVERHEAD = 1024
"""Rough bytes per cached partition, so that empty partitions count into the budget too."""


@dataclass(frozen=True, slots=True)
class _Entry:
    """One partition's rows; immutable (a write builds a new entry), so a scan in a
    worker thread never sees a half-applied write."""

    ids: tuple[str, ...]
    vectors: np.ndarray
    documents: tuple[str | None, ...]
    metadatas: tuple[dict[str, Any], ...]
    generation: tuple[int, str]
    taken: float
    nbytes: int
    norms: np.ndarray
    """Squared norms of ``vectors`` (the matrix-product pre-selection)."""
    importance: np.ndarray
    """``importance`` of every row (object array), for the filter."""
    group: np.ndarray
    """Rows written in a group chat (``ORIGIN_GROUP_FLAG is True``), for the filter."""
    derived: dict[str, Any] = field(default_factory=dict, compare=False)
    """Structures computed lazily from these rows by other modules (the keyword
    index of :mod:`.keyword_index`); a write builds a new entry, so they never go stale."""


def _size(vectors: np.ndarray, ids: Sequence[str], docs: Sequence[str | None]) -> int:
    text = sum(len(i) + len(d or "") * 3 for i, d in zip(ids, docs, strict=False))
    return _ENTRY_OVERHEAD + int(vectors.nbytes) + text + _ROW_OVERHEAD * len(ids)


def _entry(
    ids: Sequence[str],
    vectors: np.ndarray,
    docs: Sequence[str | None],
    metas: Sequence[dict[str, Any]],
    generation: tuple[int, str],
    taken: float,
) -> _Entry:
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    return _Entry(
        tuple(ids),
        vectors,
        tuple(docs),
        tuple(metas),
        generation,
        taken,
        _size(vectors, ids, docs),
        np.einsum("ij,ij->i", vectors, vectors) if len(ids) else np.zeros(0, np.float32),
        np.asarray([m.get("importance") for m in metas], dtype=object),
        np.asarray([m.get(ORIGIN_GROUP_FLAG) is True for m in metas], dtype=bool),
    )


def collection_space(col: Any) -> str:
    """The distance space of ``col`` (its configuration, else the legacy metadata; default l2)."""
    cfg = getattr(col, "configuration_json", None)
    hnsw = cfg.get("hnsw") if isinstance(cfg, dict) else None
    space = hnsw.get("space") if isinstance(hnsw, dict) else None
    return str(space or (col.metadata or {}).get("hnsw:space") or "l2")


def scan(
    entry: _Entry,
    query: np.ndarray,
    top_k: int,
    importance: str | None,
    group_origin_only: bool,
) -> list[tuple[int, float]]:
    """``(row, squared L2 distance)`` of the ``top_k`` nearest matching rows, ties by id."""
    rows = np.arange(len(entry.ids))
    if importance is not None or group_origin_only:
        keep = np.ones(len(rows), dtype=bool)
        if importance is not None:
            keep &= entry.importance == importance
        if group_origin_only:
            keep &= entry.group
        rows = rows[keep]
    if not len(rows) or top_k <= 0:
        return []
    vectors = entry.vectors[rows] if len(rows) < len(entry.ids) else entry.vectors
    if len(rows) > top_k:
        # Pre-select with one matrix product (|v|^2 - 2 v.q + |q|^2), keeping every row
        # within a float32 error margin of the k-th; then exact distances on those only.
        qq = float(query @ query)
        rough = entry.norms[rows] - 2.0 * (vectors @ query) + qq
        kth = float(np.partition(rough, top_k - 1)[top_k - 1])
        margin = 1e-4 * (1.0 + abs(kth) + qq + float(entry.norms[rows].max()))
        cand = np.nonzero(rough <= kth + margin)[0]
    else:
        cand = np.arange(len(rows))
    diff = vectors[cand] - query
    exact = np.einsum("ij,ij->i", diff, diff)
    if len(cand) > top_k:
        kth = float(np.partition(exact, top_k - 1)[top_k - 1])
        keep_c = np.nonzero(exact <= kth)[0]  # ties at the k-th included, ordered below
        cand, exact = cand[keep_c], exact[keep_c]
    dist = np.empty(len(rows), dtype=np.float32)
    dist[cand] = exact
    sel = cand
    ordered = sorted(sel.tolist(), key=lambda i: (float(dist[i]), entry.ids[rows[i]]))[:top_k]
    return [(int(rows[i]), float(dist[i])) for i in ordered]


class PartitionIndex:
    """LRU cache of per-partition exact indexes, bounded by ``max_bytes`` (0 disables)."""

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_INDEX_MB * 1024 * 1024,
        ttl: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_bytes = max_bytes
        self.ttl = ttl
        """Seconds an entry is trusted; ``None`` = until dropped (set for remote mode)."""
        self.clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.nbytes = 0
        self.loads = 0
        """Partitions loaded from Chroma (tests and the bench read it)."""
        self._oversized: OrderedDict[str, float] = OrderedDict()
        """Partitions found larger than the whole budget, and when: Chroma answers for them
        without a (useless, expensive) reload until ``OVERSIZED_RECHECK`` has passed."""

    # -- bookkeeping -----------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, partition: object) -> bool:
        return partition in self._entries

    def clear(self) -> None:
        self._entries.clear()
        self._oversized.clear()
        self.nbytes = 0

    def drop(self, partition: str) -> None:
        entry = self._entries.pop(partition, None)
        if entry is not None:
            self.nbytes -= entry.nbytes

    def _put(self, partition: str, entry: _Entry) -> None:
        self.drop(partition)
        if entry.nbytes > self.max_bytes:  # larger than the whole budget: stays with Chroma
            self._oversized[partition] = self.clock()
            self._oversized.move_to_end(partition)
            while len(self._oversized) > OVERSIZED_MAX:
                self._oversized.popitem(last=False)
            return
        self._oversized.pop(partition, None)
        self._entries[partition] = entry
        self.nbytes += entry.nbytes
        while self.nbytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self.nbytes -= old.nbytes

    def _valid(self, partition: str, generation: tuple[int, str]) -> _Entry | None:
        while self.nbytes > self.max_bytes:  # the budget was lowered
            _, old = self._entries.popitem(last=False)
            self.nbytes -= old.nbytes
        entry = self._entries.get(partition)
        if entry is None:
            return None
        if entry.generation != generation:
            self.clear()  # reconnected or collection replaced: every entry is stale
            return None
        if self.ttl is not None and self.clock() - entry.taken > self.ttl:
            self.drop(partition)
            return None
        self._entries.move_to_end(partition)
        return entry

    # -- writes of the store (called under the partition's lock) ----------------------

    def added(self, partition: str, vector: Sequence[float], record: MemoryRecord) -> None:
        entry = self._entries.get(partition)
        if entry is None:
            return
        try:
            row = np.asarray([vector], dtype=np.float32)
            vectors = np.concatenate([entry.vectors, row]) if len(entry.ids) else row
            new = _entry(
                [*entry.ids, record.id],
                vectors,
                [*entry.documents, record.content],
                [*entry.metadatas, record.to_metadata()],
                entry.generation,
                entry.taken,
            )
        except Exception:  # e.g. another dimension: let Chroma answer until reloaded
            self.drop(partition)
            return
        self._put(partition, new)

    def updated(self, partition: str, vector: Sequence[float] | None, record: MemoryRecord) -> None:
        entry = self._entries.get(partition)
        if entry is None:
            return
        try:
            row = entry.ids.index(record.id)
            vectors = entry.vectors
            if vector is not None:
                vectors = vectors.copy()
                vectors[row] = np.asarray(vector, dtype=np.float32)
            docs = list(entry.documents)
            docs[row] = record.content
            metas = list(entry.metadatas)
            metas[row] = record.to_metadata()
            new = _entry(entry.ids, vectors, docs, metas, entry.generation, entry.taken)
        except Exception:  # not cached (another process added it) or a bad vector
            self.drop(partition)
            return
        self._put(partition, new)

    def removed(self, partition: str, memory_id: str) -> None:
        entry = self._entries.get(partition)
        if entry is None:
            return
        if memory_id not in entry.ids:
            self.drop(partition)
            return
        row = entry.ids.index(memory_id)
        keep = [i for i in range(len(entry.ids)) if i != row]
        new = _entry(
            [entry.ids[i] for i in keep],
            entry.vectors[keep],
            [entry.documents[i] for i in keep],
            [entry.metadatas[i] for i in keep],
            entry.generation,
            entry.taken,
        )
        self._put(partition, new)

    # -- reads ------------------------------------------------------------------------

    async def snapshot(self, store: IndexedStore, partition: str) -> _Entry | None:
        """The partition's cached rows (loaded from Chroma when needed), or ``None``
        when Chroma must answer (index disabled, not ``l2``, too large, a reconnect)."""
        if self.max_bytes <= 0:
            return None
        col = await store.collection()
        if collection_space(col) != "l2":
            return None
        generation = (store.connection.generation, str(col.id))
        entry = self._valid(partition, generation)
        if entry is None:
            seen = self._oversized.get(partition)
            if seen is not None and self.clock() - seen < OVERSIZED_RECHECK:
                return None
            entry = await self._load(store, col, partition, generation)
        return entry

    async def query(
        self,
        store: IndexedStore,
        partition: str,
        vector: Sequence[float],
        top_k: int,
        importance: str | None,
        group_origin_only: bool,
    ) -> list[MemoryRecord] | None:
        """The search answered from the index, or ``None`` when Chroma must answer."""
        try:
            entry = await self.snapshot(store, partition)
            if entry is None:
                return None
            query = np.asarray(vector, dtype=np.float32)
            if len(entry.ids) and query.shape != entry.vectors.shape[1:]:
                return None  # Chroma reports the dimension mismatch itself
            args = (entry, query, top_k, importance, group_origin_only)
            hits = (
                scan(*args)
                if len(entry.ids) <= INLINE_SCAN_ROWS
                else await asyncio.to_thread(scan, *args)
            )
            return [
                MemoryRecord.from_chroma(entry.ids[r], entry.documents[r], entry.metadatas[r], d)
                for r, d in hits
            ]
        except Exception as exc:
            self.drop(partition)
            logger.warning(f"[Memory] 分区向量索引出错，改用 Chroma 查询：{short_error(exc)}")
            return None

    async def _load(
        self, store: IndexedStore, col: Any, partition: str, generation: tuple[int, str]
    ) -> _Entry | None:
        """Read the partition from Chroma and cache it, all under its lock, so that no
        write of ours lands between the read and the caching (it would be missing)."""
        async with store.locks.hold(partition):
            entry = self._valid(partition, generation)
            if entry is not None:
                return entry
            entry = await store.connection.run(
                _read_partition, col, partition, generation, self.clock()
            )
            # A reconnect meanwhile: do not cache rows of an older generation.
            if store.connection.generation != generation[0]:
                return None
            self.loads += 1
            self._put(partition, entry)
            return entry


def _read_partition(col: Any, partition: str, generation: tuple[int, str], taken: float) -> _Entry:
    """One partition's rows from Chroma, as an entry (a worker thread: no numpy on the loop)."""
    res = col.get(where={"user_id": partition}, include=["embeddings", "documents", "metadatas"])
    ids = list(res["ids"])
    embeddings = res.get("embeddings")
    if ids and embeddings is None:
        raise ValueError("Chroma returned no embeddings")
    vectors = np.asarray(embeddings if ids else np.zeros((0, 0)), dtype=np.float32)
    docs: list[str | None] = list(res.get("documents") or [None] * len(ids))
    metas = [dict(m or {}) for m in (res.get("metadatas") or [None] * len(ids))]
    return _entry(ids, vectors, docs, metas, generation, taken)
