"""An in-process exact vector index per partition, so a search costs O(partition).

Chroma's ``where user_id == partition`` makes every filtered query pay for the
whole collection (18 ms for a 1,000-memory partition at 100,000 memories in
total); an exact numpy scan of that partition's vectors costs well under a
millisecond. ChromaDB stays the single source of truth: a partition is loaded
lazily from Chroma (ids, vectors, documents, metadata) under its lock, kept in
step by the store's own writes (which run under the same lock), and dropped on
any error, on :meth:`PartitionIndex.clear` (``MemoryStore.invalidate``), when the
connection's ``generation`` or the collection's id changes (remap, reconnect),
when another process writes the partition (the change feed, :mod:`..shared.feed`)
and after the safety expiry ``ttl`` in remote mode: the bookkeeping is
:class:`~.cache.PartitionCache`'s, like that of :class:`~.counts.PartitionCounts`.

Only Chroma's default space ``l2`` (squared Euclidean distance) is scanned
here; a collection configured for ``cosine`` / ``ip`` keeps using Chroma's own
query. Results equal Chroma's: same ids, same order, same distances (float32).
At exact distance ties the order is by id (Chroma's own order at an exact tie
is not specified). Chroma's filtered HNSW search is approximate in large
partitions (it sometimes misses a closer memory); this scan is always exact.
A cached partition's rows and the scan live in :mod:`.rows` (a write
costs ~0.15 ms at 10,000 rows and never changes what a running search sees).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from nonebot import logger

from ...core.records import MemoryRecord, OriginFilter
from ...core.text import short_error
from . import rows as rows
from .cache import PartitionCache
from .rows import Entry, build_entry, scan

if TYPE_CHECKING:
    from ...infra.locks import PartitionLocks
    from ..chroma.connection import ChromaConnection


class IndexedStore(Protocol):
    """What the index needs of :class:`~..memory_store.MemoryStore` (no import cycle)."""

    connection: ChromaConnection
    locks: PartitionLocks

    async def collection(self) -> Any: ...

    async def fresh(self) -> None: ...


__all__ = ["DEFAULT_INDEX_MB", "IndexedStore", "PartitionIndex", "query_records"]

DEFAULT_INDEX_MB = 256
"""Default byte budget of the cache, in MiB (``vector_index_max_mb``)."""

INLINE_SCAN_ROWS = 2048
"""Partitions up to this size are scanned on the event loop (well under 1 ms);
larger ones in a worker thread."""

LOAD_CONCURRENCY = 2
"""Partition loads (and keyword-index builds) at once. Each is a worker thread
decoding thousands of vectors or tokenising thousands of texts, work that holds
the GIL; with many of them at once the event loop waited its turn behind all
(50 users asking at once: ticks of 0.4 s). Two keep both cores busy."""

OVERSIZED_RECHECK = 60.0
"""Seconds before a partition found too large for the budget is read again (it may shrink)."""

OVERSIZED_MAX = 4096
"""How many too-large partitions are remembered."""

_Entry = Entry
"""One cached partition (:class:`.rows.Entry`); readers use ``ids``,
``documents``, ``metadatas``, ``vectors`` and ``derived``."""


def _entry_bytes(entry: _Entry) -> int:
    return entry.nbytes


def query_records(res: Any) -> list[MemoryRecord]:
    """The records of a Chroma ``query`` of one vector, with their distances."""
    ids = res["ids"][0] if res["ids"] else []
    docs = (res.get("documents") or [[]])[0]
    metas = (res.get("metadatas") or [[]])[0]
    dists = (res.get("distances") or [[]])[0]
    return [
        MemoryRecord.from_chroma(i, d, m, dist)
        for i, d, m, dist in zip(ids, docs, metas, dists, strict=False)
    ]


def collection_space(col: Any) -> str:
    """The distance space of ``col`` (its configuration, else the legacy metadata; default l2)."""
    cfg = getattr(col, "configuration_json", None)
    hnsw = cfg.get("hnsw") if isinstance(cfg, dict) else None
    space = hnsw.get("space") if isinstance(hnsw, dict) else None
    return str(space or (col.metadata or {}).get("hnsw:space") or "l2")


class PartitionIndex(PartitionCache[_Entry]):
    """LRU cache of per-partition exact indexes, bounded by ``max_bytes`` (0 disables);
    budget, generation, invalidation and expiry are :class:`~.cache.PartitionCache`'s."""

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_INDEX_MB * 1024 * 1024,
        ttl: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            max_entries=1 << 20, max_bytes=max_bytes, size=_entry_bytes, expiry=ttl, clock=clock
        )
        self.loads = 0
        """Partitions loaded from Chroma (tests and the bench read it)."""
        self.heavy = asyncio.Semaphore(LOAD_CONCURRENCY)
        """Held around every partition load and keyword-index build (:data:`LOAD_CONCURRENCY`)."""
        self._oversized: OrderedDict[str, float] = OrderedDict()
        """Partitions found larger than the whole budget, and when: Chroma answers for them
        without a (useless, expensive) reload until ``OVERSIZED_RECHECK`` has passed."""

    @property
    def ttl(self) -> float | None:
        """Seconds an entry is trusted; ``None`` = until dropped or invalidated."""
        return self.expiry

    @ttl.setter
    def ttl(self, value: float | None) -> None:
        self.expiry = value

    # -- bookkeeping -----------------------------------------------------------

    def clear(self) -> None:
        super().clear()
        self._oversized.clear()

    def peek(self, partition: str) -> _Entry | None:
        """The cached entry as it is (tests), without touching its recency."""
        slot = self._slots.get(partition)
        return None if slot is None else slot.value

    def _cache(self, partition: str, entry: _Entry, ticket: int) -> None:
        if entry.nbytes > (self.max_bytes or 0):  # larger than the whole budget: stays with Chroma
            self.drop(partition)
            self._oversized[partition] = self.clock()
            self._oversized.move_to_end(partition)
            while len(self._oversized) > OVERSIZED_MAX:
                self._oversized.popitem(last=False)
            return
        self._oversized.pop(partition, None)
        self.put(partition, entry, entry.generation, ticket=ticket)

    # -- writes of the store (called under the partition's lock) ----------------------

    def added(self, partition: str, vector: Sequence[float], record: MemoryRecord) -> None:
        self.replace(partition, lambda e: rows.appended(e, vector, record))

    def updated(self, partition: str, vector: Sequence[float] | None, record: MemoryRecord) -> None:
        self.replace(partition, lambda e: rows.updated(e, vector, record))

    def removed(self, partition: str, memory_id: str) -> None:
        self.replace(partition, lambda e: rows.removed(e, memory_id))

    # -- reads ------------------------------------------------------------------------

    async def snapshot(
        self, store: IndexedStore, partition: str, *, load: bool = True
    ) -> _Entry | None:
        """The partition's cached rows (loaded from Chroma when needed and ``load``), or
        ``None`` when Chroma must answer (index disabled, not ``l2``, too large, a
        reconnect). Other processes' writes are applied first (``store.fresh``)."""
        if not self.max_bytes or self.max_bytes <= 0:
            return None
        await store.fresh()
        col = await store.collection()
        if collection_space(col) != "l2":
            return None
        generation = (store.connection.generation, str(col.id))
        entry = self.get(partition, generation)
        if entry is None and load:
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
        origins: OriginFilter,
        *,
        load: bool = True,
    ) -> list[MemoryRecord] | None:
        """The search answered from the index, or ``None`` when Chroma must answer."""
        try:
            entry = await self.snapshot(store, partition, load=load)
            if entry is None:
                return None
            query = np.asarray(vector, dtype=np.float32)
            if len(entry.ids) and query.shape != (entry.dim,):
                return None  # Chroma reports the dimension mismatch itself
            args = (entry, query, top_k, importance, origins)
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
            entry = self.get(partition, generation)
            if entry is not None:
                return entry
            ticket = self.ticket()
            async with self.heavy:
                entry = await store.connection.run(
                    _read_partition, col, partition, generation, self.clock()
                )
            # A reconnect meanwhile: do not cache rows of an older generation.
            if store.connection.generation != generation[0]:
                return None
            self.loads += 1
            self._cache(partition, entry, ticket)
            return entry


READ_PAGE = 500
"""Rows per Chroma read when a partition is loaded. Decoding a reply (JSON from a
server, then the conversion to numpy) holds the GIL for its whole length: the
10,000 rows of one reply stalled the event loop ~0.3 s; a page of 500 costs a
few milliseconds."""


def _read_partition(col: Any, partition: str, generation: tuple[int, str], taken: float) -> _Entry:
    """One partition's rows from Chroma, as an entry (a worker thread: no numpy on the loop).

    The ids first (one filtered read without payload), then the rows by id in pages
    of :data:`READ_PAGE`. A row deleted meanwhile is simply missing from its page.
    """
    head = col.get(where={"user_id": partition}, include=[])
    wanted = list(head["ids"])
    ids: list[str] = []
    pages: list[np.ndarray] = []
    docs: list[str | None] = []
    metas: list[dict[str, Any]] = []
    for start in range(0, len(wanted), READ_PAGE):
        res = col.get(
            ids=wanted[start : start + READ_PAGE],
            include=["embeddings", "documents", "metadatas"],
        )
        got = list(res["ids"])
        if not got:
            continue
        embeddings = res.get("embeddings")
        if embeddings is None:
            raise ValueError("Chroma returned no embeddings")
        ids.extend(got)
        pages.append(np.asarray(embeddings, dtype=np.float32))
        docs.extend(res.get("documents") or [None] * len(got))
        metas.extend(dict(m or {}) for m in (res.get("metadatas") or [None] * len(got)))
    vectors = np.concatenate(pages) if pages else np.zeros((0, 0), dtype=np.float32)
    return build_entry(ids, vectors, docs, metas, generation, taken)
