"""The memory collection itself: its handle, metadata, caches and reads by id or page.

The base of :class:`~.memory_store.MemoryStore`, kept apart so the store's module holds
the memory operations (writes, searches) and stays readable. Every read of memories
takes a :class:`~.scope.View` (the partition and the origins it may see); the few
passes over the whole collection (key migration, the console's catalog, the sweep,
``status``) are separate methods whose names say so (``*_all``, ``*_anywhere``). The
raw row operations at the end are the doors of the work on stored memories as a
whole (``upkeep/``: a forget's real deletion, key migration, the sweep, restores),
which never reach the Chroma handle themselves. Every Chroma call goes through the
:class:`~.chroma.remap_markers.CollectionGuard` (refused or retried while a remap
replaces the collection) in a worker thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from collections.abc import Collection as Keys
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from ..core.records import META_AUTHOR, MemoryRecord
from ..infra.gate import WriteGate
from ..infra.locks import PartitionLocks
from .archive.removal import deleted_count
from .archive.store import ArchiveStore, archive_name
from .chroma.connection import ChromaConnection
from .chroma.paging import Item
from .chroma.remap_markers import CollectionGuard
from .partition.counts import PartitionCounts
from .partition.index import PartitionIndex
from .partition.recent import RecentIds
from .scope import View
from .shared.coherence import SAFETY_EXPIRY, Coherence

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

__all__ = ["MemoryCollection", "Row"]

T = TypeVar("T")


class Row(NamedTuple):
    """One stored memory as read: the record, its raw metadata and stored vector."""

    record: MemoryRecord
    metadata: dict[str, Any]
    vector: list[float] | None


def _rows(res: Mapping[str, Any]) -> list[Row]:
    """The items of a Chroma ``get`` as rows (in Chroma's order)."""
    ids = list(res["ids"])
    docs = res.get("documents") or [None] * len(ids)
    metas = res.get("metadatas") or [None] * len(ids)
    vectors = res.get("embeddings")
    out: list[Row] = []
    for i, memory_id in enumerate(ids):
        meta = dict(metas[i] or {})
        vector = None if vectors is None or i >= len(vectors) else [float(x) for x in vectors[i]]
        out.append(Row(MemoryRecord.from_chroma(memory_id, docs[i], meta), meta, vector))
    return out


def _include(documents: bool, vectors: bool) -> Any:
    return [
        "metadatas",
        *(["documents"] if documents else []),
        *(["embeddings"] if vectors else []),
    ]


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
        try:
            await self.set_metadatas(list(metadatas), list(metadatas.values()))
        finally:
            self.counts.clear()
            self.recent.clear()
            self.index.clear()

    # -- reads by id or page (every one names what it may see) ------------------

    async def _vanished(self, memory_id: str) -> bool:
        """After an update of ``memory_id``: whether another process deleted (archived) it
        before the update landed. Chroma drops an update of a missing id silently; only a
        remote store has other writers (a local one belongs to one process)."""
        if self.connection.mode != "remote":
            return False
        res = await self._run(lambda c: c.get(ids=[memory_id], include=[]))
        return not res["ids"]

    async def _stored_vector(self, memory_id: str) -> list[float] | None:
        res = await self._run(lambda c: c.get(ids=[memory_id], include=["embeddings"]))
        stored = res.get("embeddings")
        if not res["ids"] or stored is None or not len(stored):
            return None
        return [float(x) for x in stored[0]]

    async def stored_vector(self, view: View, memory_id: str) -> list[float] | None:
        """The stored embedding of ``memory_id`` (``None`` if ``view`` does not show it)."""
        View.check(view)
        rows = await self.fetch(view, [memory_id], vectors=True, documents=False)
        return rows[0].vector if rows else None

    async def ids(self, view: View) -> list[str]:
        """The ids of the memories ``view`` shows, in insertion order (ids only: cheap)."""
        where = View.check(view).where()
        res = await self._run(lambda c: c.get(where=where, include=[]))
        return list(res["ids"])

    async def rows(
        self, view: View, *, author: str | None = None, documents: bool = False
    ) -> list[Row]:
        """Every row ``view`` shows (only those whose writer mark is ``author``, if given),
        in one read: for bounded sets (a forget clearing one user's marks under the lock)."""
        where = View.check(view).where(**{META_AUTHOR: author})
        include = _include(documents, False)
        return _rows(await self._run(lambda c: c.get(where=where, include=include)))

    async def fetch(
        self,
        view: View,
        ids: Sequence[str],
        *,
        documents: bool = True,
        vectors: bool = False,
    ) -> list[Row]:
        """The rows of ``ids`` that ``view`` shows, in the order of ``ids`` (one Chroma call;
        an id deleted, moved or of another partition meanwhile is left out)."""
        View.check(view)
        return [
            row
            for row in await self.fetch_anywhere(ids, documents=documents, vectors=vectors)
            if view.allows_meta(row.metadata)
        ]

    async def nearest(
        self, view: View, vectors: Sequence[Sequence[float]], *, top_k: int
    ) -> list[list[tuple[str, float]]]:
        """``(id, distance)`` of the ``top_k`` nearest memories ``view`` shows, for each of
        ``vectors``, in one batched query (same distance as every search)."""
        where = View.check(view).where()
        if not vectors:
            return []
        res = await self._run(
            lambda c: c.query(
                query_embeddings=[list(v) for v in vectors],  # type: ignore[arg-type]
                n_results=top_k,
                where=where,
                include=["distances"],
            )
        )
        ids = res["ids"] or []
        dists = res.get("distances") or [[] for _ in ids]
        return [
            [(i, float(d)) for i, d in zip(row_ids, row_d, strict=False)]
            for row_ids, row_d in zip(ids, dists, strict=False)
        ]

    async def iter_records(
        self, view: View, *, with_documents: bool = False, page_size: int | None = None
    ) -> AsyncIterator[list[MemoryRecord]]:
        """Every memory ``view`` shows, page by page by id."""
        async for page in self._pages(View.check(view).where(), with_documents, page_size):
            yield page

    # -- the whole collection (operators and upkeep only; the names say so) ---------------

    async def count_all(self) -> int:
        """Memories in the whole collection, every partition (``status``, start-up, totals)."""
        return await self._run(lambda c: c.count())

    async def iter_all_records(
        self, *, with_documents: bool = False, page_size: int | None = None
    ) -> AsyncIterator[list[MemoryRecord]]:
        """Every memory of every partition, page by page by id (key migration, the catalog)."""
        async for page in self._pages(None, with_documents, page_size):
            yield page

    async def iter_stored_form(self, *, page_size: int | None = None) -> AsyncIterator[list[Item]]:
        """Every row of the collection as stored (raw metadata, no documents), page by page:
        maintenance of the stored form itself (the published plugin's memories adopted)."""
        async for page in self.guard.pages(
            self.name, self.invalidate, with_documents=False, page_size=page_size
        ):
            yield page

    async def iter_authored(self, user_id: str) -> AsyncIterator[list[Item]]:
        """Raw items (any partition) whose writer mark is ``user_id`` (a user's export and forget)."""
        where: dict[str, Any] = {META_AUTHOR: user_id}
        async for page in self.guard.pages(self.name, self.invalidate, where=where):
            yield page

    async def scan_all(self, *, offset: int, limit: int) -> list[MemoryRecord]:
        """Memories ``offset .. offset+limit`` of the whole collection, metadata only (the
        sweep's bounded scan; no documents, no vectors)."""
        res = await self._run(lambda c: c.get(include=["metadatas"], limit=limit, offset=offset))
        return [row.record for row in _rows(res)]

    async def fetch_anywhere(
        self, ids: Sequence[str], *, documents: bool = True, vectors: bool = False
    ) -> list[Row]:
        """The rows of ``ids`` in whatever partition, in the order of ``ids`` (an operator's
        lookup by id, the sweep's re-read; a chat never reads across partitions)."""
        wanted = list(ids)
        if not wanted:
            return []
        include = _include(documents, vectors)
        found = {
            r.record.id: r
            for r in _rows(await self._run(lambda c: c.get(ids=wanted, include=include)))
        }
        return [found[i] for i in wanted if i in found]

    async def _pages(
        self, where: dict[str, Any] | None, with_documents: bool, page_size: int | None
    ) -> AsyncIterator[list[MemoryRecord]]:
        async for page in self.guard.pages(
            self.name,
            self.invalidate,
            where=where,
            with_documents=with_documents,
            page_size=page_size,
        ):
            yield [MemoryRecord.from_chroma(i.id, i.document, i.metadata) for i in page]

    # -- raw row writes (upkeep: real deletion, key migration, sweep, restore) -----------

    async def put_row(self, record: MemoryRecord, vector: Sequence[float]) -> None:
        """Add ``record`` with its own id and ``vector`` (an archive restore; the caller holds
        the partition's write section and keeps the caches, see ``upkeep/archive/restore``)."""
        await self._write(
            lambda c: c.add(
                ids=[record.id],
                documents=[record.content],
                embeddings=[list(vector)],  # type: ignore[arg-type]
                metadatas=[record.to_metadata()],
            )
        )

    async def set_metadatas(
        self, ids: Sequence[str], metadatas: Sequence[Mapping[str, Any]]
    ) -> None:
        """Replace the metadata of the rows ``ids`` (raw: a forget clearing writer marks;
        the caller holds the partitions' write section)."""
        if ids:
            wanted, metas = list(ids), [dict(m) for m in metadatas]
            await self._write(lambda c: c.update(ids=wanted, metadatas=metas))  # type: ignore[arg-type]

    async def rewrite_keys(self, updates: Mapping[str, str]) -> None:
        """Set ``user_id`` of the memories ``{memory id: new key}`` (key migration only).

        Key migration runs before the bot serves anyone (the start-up check, ``ambot
        memory migrate-keys`` with the bot stopped, after a backup restore), so its calls
        are plain, not guarded writes: a guarded write would make this process count as
        a writer and every re-embedding after it wait for writers that cannot exist.
        """
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

    async def remove_rows(
        self, ids: Sequence[str], *, where: dict[str, Any] | None = None
    ) -> int | None:
        """Delete the rows ``ids`` (matching ``where``, if given) for good: how many went
        (``None``: the server did not say). Only a forget and the sweep's second step
        (after the archive copy) call this; a delete is ``MemoryStore.delete``."""
        if not ids:
            return 0
        return deleted_count(await self._write(lambda c: c.delete(ids=list(ids), where=where)))
