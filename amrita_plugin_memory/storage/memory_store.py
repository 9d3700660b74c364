"""Memories in one Chroma collection, every operation confined to one partition.

:class:`MemoryStore` makes an id of another partition behave exactly like an
id that does not exist: searches, listings and counts filter inside the
database query (``where user_id == partition``); operations on one id fetch
that id alone and check the stored partition before anything is returned or
changed (a ``where`` next to ``ids`` makes Chroma evaluate the filter over the
whole partition, which made by-id cost grow with its size).
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..core.errors import MemoryLimitReached, VectorStoreError
from ..core.locks import PartitionLocks
from ..core.protocols import Embedder
from ..core.records import MemoryRecord, utc_now
from .chroma import ChromaConnection
from .paging import iter_pages

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

__all__ = ["MEMORY_COLLECTION", "MemoryStore", "PartitionCounts"]

MEMORY_COLLECTION = "amrita_user_memory"

T = TypeVar("T")


class PartitionCounts:
    """Memory counts per partition for the limit check, so a write does not list its partition.

    Owned by :class:`MemoryStore` and changed only under the partition's lock.
    An entry is an exact count taken from Chroma, then kept by the store's own
    adds and deletes; it expires after ``ttl`` seconds so that writes of another
    process (a second bot or a CLI on a remote Chroma) are seen again, and the
    store re-counts before it refuses a write, so a refusal is always exact.
    At most ``max_entries`` partitions are remembered (least recently used go).
    """

    def __init__(
        self,
        *,
        ttl: float = 60.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self.clock = clock
        """Seconds from an arbitrary origin; injectable so tests need not sleep."""
        self._entries: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def get(self, partition: str) -> int | None:
        entry = self._entries.get(partition)
        if entry is None:
            return None
        count, taken = entry
        if self.clock() - taken > self.ttl:
            del self._entries[partition]
            return None
        self._entries.move_to_end(partition)
        return count

    def set(self, partition: str, count: int) -> None:
        self._entries[partition] = (count, self.clock())
        self._entries.move_to_end(partition)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def adjust(self, partition: str, delta: int) -> None:
        """Apply a write of ours to a known count (unknown partitions stay unknown)."""
        entry = self._entries.get(partition)
        if entry is not None:
            self._entries[partition] = (max(entry[0] + delta, 0), entry[1])

    def drop(self, partition: str) -> None:
        self._entries.pop(partition, None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _where(partition: str, **filters: str | None) -> dict[str, Any]:
    clauses: list[dict[str, Any]] = [{"user_id": partition}]
    clauses += [{k: v} for k, v in filters.items() if v is not None]
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


class MemoryStore:
    """Memories in one Chroma collection, every operation confined to a partition."""

    def __init__(
        self,
        connection: ChromaConnection,
        embedder: Embedder,
        name: str = MEMORY_COLLECTION,
    ) -> None:
        self.connection = connection
        self.embedder = embedder
        self.name = name
        self.locks = PartitionLocks()
        self.counts = PartitionCounts()
        self.clock: Callable[[], str] = utc_now
        """ISO timestamps for ``created_at`` / ``updated_at`` (replaceable in tests)."""
        self._collection: Collection | None = None

    # -- collection handle --------------------------------------------------

    async def collection(self) -> Collection:
        if self._collection is None:
            col = await self.connection.get_collection(self.name)
            assert col is not None
            self._collection = col
        return self._collection

    def invalidate(self) -> None:
        """Forget the cached handle and counts (after the collection was replaced)."""
        self._collection = None
        self.counts.clear()

    async def _run(self, fn: Callable[[Collection], T]) -> T:
        col = await self.collection()
        try:
            return await self.connection.run(fn, col)
        except VectorStoreError as exc:
            # A replaced or deleted collection: refetch once.
            if "does not exist" in str(exc) or "NotFound" in str(exc):
                self.invalidate()
                col = await self.collection()
                return await self.connection.run(fn, col)
            raise

    # -- collection metadata --------------------------------------------------

    async def get_metadata(self) -> dict[str, Any]:
        """The collection metadata, read fresh (another process may have changed it)."""
        col = await self.connection.get_collection(self.name)
        assert col is not None
        self._collection = col
        return dict(col.metadata or {})

    async def get_meta(self, key: str) -> Any:
        return (await self.get_metadata()).get(key)

    async def set_meta(self, values: Mapping[str, Any]) -> None:
        """Merge ``values`` into the collection metadata (Chroma replaces it whole)."""
        merged = await self.get_metadata()
        merged.update(values)
        merged = {k: v for k, v in merged.items() if not k.startswith("hnsw:")}
        await self._run(lambda c: c.modify(metadata=merged))

    # -- embedding --------------------------------------------------------------

    async def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.embedder.embed(list(texts))

    # -- writes ---------------------------------------------------------------------

    async def add(
        self,
        partition: str,
        scope: str,
        content: str,
        *,
        tags: Sequence[str] = (),
        importance: str = "medium",
        limit: int | None = None,
    ) -> MemoryRecord:
        """Embed and store one memory; with ``limit``, refuse when the partition is full.

        The count check and the add happen under the partition's lock, so
        concurrent writers cannot exceed the limit. The text is embedded before
        anything is written: an embedding failure leaves nothing behind.
        """
        vector = (await self._embed([content]))[0]
        now = self.clock()
        record = MemoryRecord(
            id=uuid.uuid4().hex,
            content=content,
            partition=partition,
            scope=scope,
            tags=list(tags),
            importance=importance,
            created_at=now,
            updated_at=now,
        )
        async with self.locks.hold(partition):
            if limit is not None:
                count = self.counts.get(partition)
                if count is None or count >= limit:  # unknown, or about to refuse: exact
                    count = await self.count(partition)
                    self.counts.set(partition, count)
                if count >= limit:
                    raise MemoryLimitReached(limit, count)
            try:
                await self._run(
                    lambda c: c.add(
                        ids=[record.id],
                        documents=[record.content],
                        embeddings=[vector],  # type: ignore[arg-type]
                        metadatas=[record.to_metadata()],
                    )
                )
            except BaseException:
                self.counts.drop(partition)  # the add may or may not have landed
                raise
            self.counts.adjust(partition, +1)
        return record

    async def update(
        self,
        partition: str,
        memory_id: str,
        *,
        content: str | None = None,
        tags: Sequence[str] | None = None,
        importance: str | None = None,
    ) -> MemoryRecord | None:
        """Change a memory of ``partition``; ``None`` if it is not there."""
        vector = (await self._embed([content]))[0] if content is not None else None
        async with self.locks.hold(partition):
            current = await self.get(partition, memory_id)
            if current is None:
                return None
            if content is not None:
                current.content = content
            if tags is not None:
                current.tags = list(tags)
            if importance is not None:
                current.importance = importance
            current.updated_at = self.clock()
            kwargs: dict[str, Any] = {"ids": [memory_id], "metadatas": [current.to_metadata()]}
            if vector is not None:
                kwargs.update(documents=[current.content], embeddings=[vector])
            await self._run(lambda c: c.update(**kwargs))
        return current

    async def delete(self, partition: str, memory_id: str) -> bool:
        """Delete a memory of ``partition``; ``False`` if it is not there."""
        async with self.locks.hold(partition):
            # Ownership is checked under the partition's lock; only key
            # migration moves a memory between partitions, and it runs before
            # the bot serves anyone.
            if await self.get(partition, memory_id) is None:
                return False
            try:
                await self._run(lambda c: c.delete(ids=[memory_id]))
            except BaseException:
                self.counts.drop(partition)
                raise
            self.counts.adjust(partition, -1)
        return True

    # -- reads ------------------------------------------------------------------------

    async def get(self, partition: str, memory_id: str) -> MemoryRecord | None:
        """The memory ``memory_id`` if it belongs to ``partition``, else ``None``.

        Fetches by id alone and compares the stored partition: as cheap in a
        10,000-memory partition as in an empty one. A memory of another
        partition is never returned, and callers mutate only what this returned.
        """
        res = await self._run(lambda c: c.get(ids=[memory_id], include=["documents", "metadatas"]))
        if not res["ids"]:
            return None
        meta = (res.get("metadatas") or [None])[0]
        if meta is None or meta.get("user_id") != partition:
            return None
        docs = res.get("documents") or [None]
        return MemoryRecord.from_chroma(res["ids"][0], docs[0], meta)

    async def query(
        self,
        partition: str,
        text: str,
        *,
        top_k: int = 5,
        importance: str | None = None,
    ) -> list[MemoryRecord]:
        """Nearest memories of ``partition`` (smaller distance = closer)."""
        vector = (await self._embed([text]))[0]
        return await self.query_vector(partition, vector, top_k=top_k, importance=importance)

    async def query_vector(
        self,
        partition: str,
        vector: Sequence[float],
        *,
        top_k: int = 5,
        importance: str | None = None,
    ) -> list[MemoryRecord]:
        res = await self._run(
            lambda c: c.query(
                query_embeddings=[list(vector)],
                n_results=top_k,
                where=_where(partition, importance=importance),
                include=["documents", "metadatas", "distances"],
            )
        )
        ids = res["ids"][0] if res["ids"] else []
        docs = (res.get("documents") or [[]])[0]
        metas = (res.get("metadatas") or [[]])[0]
        dists = (res.get("distances") or [[]])[0]
        return [
            MemoryRecord.from_chroma(i, d, m, dist)
            for i, d, m, dist in zip(ids, docs, metas, dists, strict=False)
        ]

    async def list(self, partition: str, *, limit: int = 20, offset: int = 0) -> list[MemoryRecord]:
        """Memories of ``partition``, oldest first."""
        res = await self._run(
            lambda c: c.get(
                where=_where(partition),
                limit=limit,
                offset=offset,
                include=["documents", "metadatas"],
            )
        )
        docs = res.get("documents") or [None] * len(res["ids"])
        metas = res.get("metadatas") or [None] * len(res["ids"])
        return [
            MemoryRecord.from_chroma(i, d, m)
            for i, d, m in zip(res["ids"], docs, metas, strict=False)
        ]

    async def count(self, partition: str | None = None) -> int:
        """Memories in ``partition``, or in the whole collection."""
        if partition is None:
            return await self._run(lambda c: c.count())
        res = await self._run(lambda c: c.get(where=_where(partition), include=[]))
        return len(res["ids"])

    # -- maintenance (key migration, statistics, backups) ------------------------------

    async def iter_records(
        self,
        partition: str | None = None,
        *,
        with_documents: bool = False,
        page_size: int | None = None,
    ) -> AsyncIterator[list[MemoryRecord]]:
        """Every memory (of ``partition``, or of the whole collection), page by page by id."""
        col = await self.collection()
        where = _where(partition) if partition is not None else None
        async for page in iter_pages(
            self.connection, col, where=where, with_documents=with_documents, page_size=page_size
        ):
            yield [MemoryRecord.from_chroma(i.id, i.document, i.metadata) for i in page]

    async def rewrite_partition_keys(self, updates: Mapping[str, str]) -> None:
        """Set ``user_id`` of the given memories (used by key migration only)."""
        ids = list(updates)
        res = await self._run(lambda c: c.get(ids=ids, include=["metadatas"]))
        new_metas = []
        for memory_id, meta in zip(res["ids"], res.get("metadatas") or [], strict=False):
            meta = dict(meta or {})
            meta["user_id"] = updates[memory_id]
            new_metas.append(meta)
        try:
            if res["ids"]:
                await self._run(lambda c: c.update(ids=list(res["ids"]), metadatas=new_metas))
        finally:
            self.counts.clear()  # memories moved between partitions

    async def distribution(self, *, page_size: int | None = None) -> dict[tuple[str, str], int]:
        """Memory count per ``(partition, scope)`` over the whole collection."""
        counts: dict[tuple[str, str], int] = {}
        async for page in self.iter_records(page_size=page_size):
            for record in page:
                key = (record.partition, record.scope)
                counts[key] = counts.get(key, 0) + 1
        return counts
