"""The memory collection itself: its handle, metadata, caches and reads by id or page.

The base of :class:`~.memory_store.MemoryStore`, kept apart so the store's module holds
the memory operations (writes, searches) and stays readable. Nothing here reads or
writes a memory's content by partition rules beyond a fetch by id; every Chroma call
goes through the :class:`~.chroma.remap_markers.CollectionGuard` (refused or retried
while a remap replaces the collection) in a worker thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from collections.abc import Collection as Keys
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from ..core.records import MemoryRecord, where_partition
from ..infra.gate import WriteGate
from ..infra.locks import PartitionLocks
from .archive.store import ArchiveStore, archive_name
from .chroma.connection import ChromaConnection
from .chroma.remap_markers import CollectionGuard
from .partition.counts import PartitionCounts
from .partition.index import PartitionIndex
from .partition.recent import RecentIds
from .shared.coherence import SAFETY_EXPIRY, Coherence

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

__all__ = ["MemoryCollection"]

T = TypeVar("T")


class MemoryCollection:
    """One Chroma collection of memories: the cached handle, its caches and raw reads."""

    def __init__(self, connection: ChromaConnection, name: str) -> None:
        self.connection = connection
        self.name = name
        self.locks = PartitionLocks()
        self.counts = PartitionCounts()
        self.recent = RecentIds()
        """Id lists of partitions listed newest first (admin console, ``upkeep/listing``)."""
        self.gate = WriteGate()
        """Closed by maintenance that replaces the collection inside the bot (reindex, restore)."""
        self.guard = CollectionGuard(connection)
        """The cached handle and the cross-process remap markers (never re-creates it)."""
        self.index = PartitionIndex(ttl=60.0 if connection.mode == "remote" else None)
        """Exact per-partition vector index: searches cost O(partition), not O(collection)."""
        self.archive = ArchiveStore(connection, archive_name(name))
        """Swept memories and previous versions (``storage.archive.store``), same Chroma store."""
        self.coherence = Coherence(name)
        """The change feed and the leases shared with other processes (:meth:`share`)."""

    def share(self, coherence: Coherence) -> None:
        """Keep this store coherent with other processes' (remote mode, ``storage/shared``)."""
        self.coherence = coherence
        coherence.follow(self.counts, self.recent, self.index)
        self.counts.ttl = self.index.ttl = self.recent.ttl = SAFETY_EXPIRY

    async def fresh(self) -> None:
        """Before a cached partition is read: every other process's writes are applied."""
        await self.coherence.fresh()

    def writing(self, *partitions: str, lease: bool = True) -> AbstractAsyncContextManager[None]:
        """The write section of ``partitions`` (:meth:`.shared.coherence.Coherence.section`)."""
        return self.coherence.section(self.gate, self.locks, partitions, lease=lease)

    # -- collection handle --------------------------------------------------

    async def collection(self) -> Collection:
        return await self.guard.collection(self.name)

    def invalidate(self) -> None:
        """Forget the cached handle and counts (after the collection was replaced)."""
        self.guard.invalidate()
        self.archive.invalidate()
        self.counts.clear()
        self.recent.clear()
        self.index.clear()
        self.coherence.changed_later()

    async def _run(self, fn: Callable[[Collection], T]) -> T:
        return await self.guard.run(self.name, fn, self.invalidate)

    async def _write(self, fn: Callable[[Collection], T]) -> T:
        """One memory write, refused while a remap replaces the collection (:class:`CollectionGuard`)."""
        return await self.guard.write(self.name, fn, self.invalidate)

    def drop_views(self, partition: str) -> None:
        """Drop what is cached about ``partition`` (rebuilt from Chroma on its next use)."""
        self.counts.drop(partition)
        self.recent.drop(partition)
        self.index.drop(partition)

    # -- collection metadata --------------------------------------------------

    async def get_metadata(self) -> dict[str, Any]:
        """The collection metadata, read fresh (another process may have changed it)."""
        view = await self.guard.read(self.name)
        return dict(view.collection.metadata or {})

    async def get_meta(self, key: str) -> Any:
        return (await self.get_metadata()).get(key)

    async def set_meta(self, values: Mapping[str, Any], *, drop: Keys[str] = ()) -> None:
        """Merge ``values`` into the collection metadata, without the keys ``drop``
        (Chroma replaces it whole)."""
        merged = await self.get_metadata()
        merged.update(values)
        merged = {k: v for k, v in merged.items() if not k.startswith("hnsw:") and k not in drop}
        await self._run(lambda c: c.modify(metadata=merged))

    async def rewrite_metadata(self, metadatas: Mapping[str, Mapping[str, Any]]) -> None:
        """Replace the stored metadata of rows ``{id: metadata}`` as given (maintenance of
        the stored form only: documents, vectors and ids are untouched); caches dropped."""
        ids = list(metadatas)
        if not ids:
            return
        rows = [dict(metadatas[i]) for i in ids]
        try:
            await self._write(lambda c: c.update(ids=ids, metadatas=rows))  # type: ignore[arg-type]
        finally:
            self.counts.clear()
            self.recent.clear()
            self.index.clear()

    # -- raw reads ------------------------------------------------------------------

    async def vanished(self, memory_id: str) -> bool:
        """After an update of ``memory_id``: whether another process deleted (archived) it
        before the update landed. Chroma drops an update of a missing id silently; only a
        remote store has other writers (a local one belongs to one process)."""
        if self.connection.mode != "remote":
            return False
        res = await self._run(lambda c: c.get(ids=[memory_id], include=[]))
        return not res["ids"]

    async def stored_vector(self, memory_id: str) -> list[float] | None:
        """The stored embedding of ``memory_id`` (``None`` if it is not there)."""
        res = await self._run(lambda c: c.get(ids=[memory_id], include=["embeddings"]))
        stored = res.get("embeddings")
        if not res["ids"] or stored is None or not len(stored):
            return None
        return [float(x) for x in stored[0]]

    async def iter_records(
        self,
        partition: str | None = None,
        *,
        with_documents: bool = False,
        page_size: int | None = None,
    ) -> AsyncIterator[list[MemoryRecord]]:
        """Every memory (of ``partition``, or of the whole collection), page by page by id."""
        where = where_partition(partition) if partition is not None else None
        async for page in self.guard.pages(
            self.name,
            self.invalidate,
            where=where,
            with_documents=with_documents,
            page_size=page_size,
        ):
            yield [MemoryRecord.from_chroma(i.id, i.document, i.metadata) for i in page]
