"""Memories in one Chroma collection, every operation confined to one partition.

:class:`MemoryStore` makes an id of another partition behave exactly like an
id that does not exist: searches, listings and counts filter inside the
database query (``where user_id == partition``); operations on one id fetch
that id alone and check the stored partition before anything is returned or
changed (a ``where`` next to ``ids`` makes Chroma evaluate the filter over the
whole partition, which made by-id cost grow with its size).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..core.errors import MaintenanceInProgress, MemoryLimitReached, VectorStoreError
from ..core.gate import WriteGate
from ..core.locks import PartitionLocks
from ..core.protocols import Embedder, TextKind
from ..core.records import ORIGIN_GROUP_FLAG, ORIGIN_PRIVATE, MemoryRecord, utc_now
from .chroma import ChromaConnection, is_missing_collection
from .counts import PartitionCounts
from .guard import CollectionGuard
from .paging import iter_pages
from .partition_index import PartitionIndex
from .recent import RecentIds

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

__all__ = ["MEMORY_COLLECTION", "MemoryStore", "PartitionCounts"]

MEMORY_COLLECTION = "amrita_user_memory"

T = TypeVar("T")


def _where(
    partition: str, *, group_origin_only: bool = False, **filters: str | None
) -> dict[str, Any]:
    clauses: list[dict[str, Any]] = [{"user_id": partition}]
    if group_origin_only:  # memories written in a group chat (see core.records.ORIGIN_GROUP_FLAG)
        clauses.append({ORIGIN_GROUP_FLAG: True})
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
        self.recent = RecentIds()
        """Id lists of partitions listed newest first (admin console, :mod:`.listing`)."""
        self.gate = WriteGate()
        """Closed by maintenance that replaces the collection inside the bot (reindex, restore)."""
        self.clock: Callable[[], str] = utc_now
        """ISO timestamps for ``created_at`` / ``updated_at`` (replaceable in tests)."""
        self.guard = CollectionGuard(connection)
        """The cached handle and the cross-process remap markers (never re-creates it)."""
        self.index = PartitionIndex(ttl=60.0 if connection.mode == "remote" else None)
        """Exact per-partition vector index: searches cost O(partition), not O(collection)."""

    # -- collection handle --------------------------------------------------

    async def collection(self) -> Collection:
        return await self.guard.collection(self.name)

    def invalidate(self) -> None:
        """Forget the cached handle and counts (after the collection was replaced)."""
        self.guard.invalidate()
        self.counts.clear()
        self.recent.clear()
        self.index.clear()

    async def _run(self, fn: Callable[[Collection], T]) -> T:
        generation = self.connection.generation
        col = await self.collection()
        try:
            return await self.connection.run(fn, col)
        except VectorStoreError as exc:
            # A replaced collection (remote remap), or a client reopened meanwhile
            # (a remap's check): refetch once, never re-create it.
            if is_missing_collection(exc) or self.connection.generation != generation:
                self.invalidate()
                col = await self.collection()
                return await self.connection.run(fn, col)
            raise

    async def _write(self, fn: Callable[[Collection], T]) -> T:
        """One memory write, refused while a remap replaces the collection (:class:`CollectionGuard`)."""
        generation = self.connection.generation
        col, read_at = await self.guard.for_write(self.name)
        try:
            result = await self.connection.run(fn, col)
        except VectorStoreError as exc:
            # Replaced, or its client closed by a remap meanwhile: the write did not land.
            if is_missing_collection(exc) or self.connection.generation != generation:
                self.invalidate()
                raise MaintenanceInProgress() from exc
            raise
        await self.guard.after_write(self.name, col, read_at)
        return result

    # -- collection metadata --------------------------------------------------

    async def get_metadata(self) -> dict[str, Any]:
        """The collection metadata, read fresh (another process may have changed it)."""
        view = await self.guard.read(self.name)
        return dict(view.collection.metadata or {})

    async def get_meta(self, key: str) -> Any:
        return (await self.get_metadata()).get(key)

    async def set_meta(self, values: Mapping[str, Any]) -> None:
        """Merge ``values`` into the collection metadata (Chroma replaces it whole)."""
        merged = await self.get_metadata()
        merged.update(values)
        merged = {k: v for k, v in merged.items() if not k.startswith("hnsw:")}
        await self._run(lambda c: c.modify(metadata=merged))

    # -- embedding --------------------------------------------------------------

    async def _embed(self, texts: Sequence[str], kind: TextKind = "document") -> list[list[float]]:
        return await self.embedder.embed(list(texts), kind)

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
        origin: str = ORIGIN_PRIVATE,
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
            origin=origin,
        )
        async with self.gate.writing(), self.locks.hold(partition):
            if limit is not None:
                count = self.counts.get(partition)
                if count is None or count >= limit:  # unknown, or about to refuse: exact
                    count = await self.count(partition)
                    self.counts.set(partition, count)
                if count >= limit:
                    raise MemoryLimitReached(limit, count)
            try:
                await self._write(
                    lambda c: c.add(
                        ids=[record.id],
                        documents=[record.content],
                        embeddings=[vector],  # type: ignore[arg-type]
                        metadatas=[record.to_metadata()],
                    )
                )
            except BaseException:
                self.counts.drop(partition)  # the add may or may not have landed
                self.recent.drop(partition)
                self.index.drop(partition)
                raise
            self.counts.adjust(partition, +1)
            self.recent.added(partition, record.id)
            self.index.added(partition, vector, record)
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
        async with self.gate.writing(), self.locks.hold(partition):
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
            try:
                await self._write(lambda c: c.update(**kwargs))
            except BaseException:
                self.index.drop(partition)
                raise
            self.index.updated(partition, vector, current)
        return current

    async def delete(self, partition: str, memory_id: str) -> bool:
        """Delete a memory of ``partition``; ``False`` if it is not there."""
        async with self.gate.writing(), self.locks.hold(partition):
            # Ownership is checked under the partition's lock; only key
            # migration moves a memory between partitions, and it runs before
            # the bot serves anyone.
            if await self.get(partition, memory_id) is None:
                return False
            try:
                await self._write(lambda c: c.delete(ids=[memory_id]))
            except BaseException:
                self.counts.drop(partition)
                self.recent.drop(partition)
                self.index.drop(partition)
                raise
            self.counts.adjust(partition, -1)
            self.recent.removed(partition, memory_id)
            self.index.removed(partition, memory_id)
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
        group_origin_only: bool = False,
    ) -> list[MemoryRecord]:
        """Nearest memories of ``partition`` (smaller distance = closer)."""
        vector = (await self._embed([text], "query"))[0]
        return await self.query_vector(
            partition,
            vector,
            top_k=top_k,
            importance=importance,
            group_origin_only=group_origin_only,
        )

    async def query_vector(
        self,
        partition: str,
        vector: Sequence[float],
        *,
        top_k: int = 5,
        importance: str | None = None,
        group_origin_only: bool = False,
    ) -> list[MemoryRecord]:
        hits = await self.index.query(self, partition, vector, top_k, importance, group_origin_only)
        if hits is not None:
            return hits
        res = await self._run(
            lambda c: c.query(
                query_embeddings=[list(vector)],
                n_results=top_k,
                where=_where(partition, importance=importance, group_origin_only=group_origin_only),
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

    async def list(
        self, partition: str, *, limit: int = 20, offset: int = 0, group_origin_only: bool = False
    ) -> list[MemoryRecord]:
        """Memories of ``partition``, oldest first."""
        res = await self._run(
            lambda c: c.get(
                where=_where(partition, group_origin_only=group_origin_only),
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

    async def count(self, partition: str | None = None, *, group_origin_only: bool = False) -> int:
        """Memories in ``partition``, or in the whole collection."""
        if partition is None:
            return await self._run(lambda c: c.count())
        where = _where(partition, group_origin_only=group_origin_only)
        res = await self._run(lambda c: c.get(where=where, include=[]))
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
            self.recent.clear()
            self.index.clear()

    async def distribution(self, *, page_size: int | None = None) -> dict[tuple[str, str], int]:
        """Memory count per ``(partition, scope)`` over the whole collection."""
        counts: dict[tuple[str, str], int] = {}
        async for page in self.iter_records(page_size=page_size):
            for record in page:
                key = (record.partition, record.scope)
                counts[key] = counts.get(key, 0) + 1
        return counts

    # -- comparing stored vectors (the L3 duplicate helper) -------------------------------

    async def vectors(
        self, partition: str, cap: int, *, page_size: int = 256
    ) -> list[tuple[MemoryRecord, list[float]]]:
        """Up to ``cap`` memories of ``partition`` with their STORED vectors, paged by id.

        Comparing memories with each other needs no embedding request, and
        compares what was stored even when the embedding client would now use
        another model (``EMBED_MISMATCH_POLICY=never``).
        """
        res = await self._run(lambda c: c.get(where=_where(partition), include=[]))
        ids = list(res["ids"])[: max(cap, 0)]
        out: list[tuple[MemoryRecord, list[float]]] = []
        for start in range(0, len(ids), page_size):
            page = ids[start : start + page_size]
            got = await self._run(
                lambda c, page=page: c.get(
                    ids=page, include=["documents", "metadatas", "embeddings"]
                )
            )
            docs = got.get("documents") or [None] * len(got["ids"])
            metas = got.get("metadatas") or [None] * len(got["ids"])
            vecs = got.get("embeddings")
            for i, memory_id in enumerate(got["ids"]):
                meta = metas[i]
                if vecs is None or meta is None or meta.get("user_id") != partition:
                    continue  # deleted or moved meanwhile
                record = MemoryRecord.from_chroma(memory_id, docs[i], meta)
                out.append((record, [float(x) for x in vecs[i]]))
        return out

    async def nearest(
        self, partition: str, vectors: Sequence[Sequence[float]], *, top_k: int
    ) -> list[list[tuple[str, float]]]:
        """``(id, distance)`` of the ``top_k`` nearest memories of ``partition`` for
        each of ``vectors``, in one batched query (same distance as every search)."""
        if not vectors:
            return []
        res = await self._run(
            lambda c: c.query(
                query_embeddings=[list(v) for v in vectors],  # type: ignore[arg-type]
                n_results=top_k,
                where=_where(partition),
                include=["distances"],
            )
        )
        ids = res["ids"] or []
        dists = res.get("distances") or [[] for _ in ids]
        return [
            [(i, float(d)) for i, d in zip(row_ids, row_d, strict=False)]
            for row_ids, row_d in zip(ids, dists, strict=False)
        ]
