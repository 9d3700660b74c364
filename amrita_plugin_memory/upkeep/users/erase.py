"""Real deletion: what a user's forget removes from the memory collection and its archive.

Everywhere else the plugin keeps data (deletes and sweeps keep an archive
copy, see :mod:`...storage.archive.store`); a user's forget (:mod:`.user_data`) is the
one path that removes it. So nothing here goes through ``MemoryStore.delete``:
the rows are deleted from the collections directly, under the partition's lock
and the store's write gate (a sweep, an update or an archive restore of the
partition waits; a re-embedding or a backup restore refuses the forget), and
the store's caches of the partition (counts, recent ids, the vector index) are
dropped. Every call is idempotent: a forget interrupted half-way completes
when it runs again.

Group memories the user wrote stay (they belong to the group); only the
user's writer mark (:data:`~...core.records.META_AUTHOR`) is cleared on them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...core.records import META_AUTHOR, MemoryRecord, where_partition
from ...storage.archive.store import ArchivedMemory
from ...storage.memory_store import MemoryStore

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

__all__ = [
    "ERASE_BATCH",
    "PartitionContents",
    "authored_archived",
    "authored_records",
    "erase_partition",
    "partition_contents",
    "unmark_author",
]

ERASE_BATCH = 500
"""Ids per Chroma delete / update call."""


@dataclass(slots=True)
class PartitionContents:
    """What one partition holds in the two collections (the export's and the preview's view)."""

    memories: list[MemoryRecord]
    archived: list[ArchivedMemory]


def _chunks(ids: Sequence[str]) -> list[list[str]]:
    return [list(ids[i : i + ERASE_BATCH]) for i in range(0, len(ids), ERASE_BATCH)]


async def _archive_ids(store: MemoryStore, where: dict[str, Any]) -> list[str]:
    """Ids of archive rows matching ``where`` (none, and nothing created, without an archive)."""
    archive = store.archive
    if await archive.count() == 0:
        return []
    res = await archive._run(lambda c: c.get(where=where, include=[]))
    return list(res["ids"])


async def partition_contents(store: MemoryStore, partition: str) -> PartitionContents:
    """Every live memory and every archive row of ``partition``, with their texts."""
    memories: list[MemoryRecord] = []
    async for page in store.iter_records(partition, with_documents=True):
        memories.extend(page)
    archived: list[ArchivedMemory] = []
    if await store.archive.count(partition):
        archive = store.archive
        pages = archive.guard.pages(archive.name, archive.invalidate, where={"user_id": partition})
        async for items in pages:
            archived.extend(ArchivedMemory.from_chroma(i.id, i.document, i.metadata) for i in items)
    memories.sort(key=lambda r: (r.created_at, r.id))
    archived.sort(key=lambda r: (r.archived_at, r.id))
    return PartitionContents(memories, archived)


async def authored_records(store: MemoryStore, user_id: str) -> list[MemoryRecord]:
    """Live group memories whose writer mark is ``user_id``, oldest first."""
    out: list[MemoryRecord] = []
    pages = store.guard.pages(store.name, store.invalidate, where={META_AUTHOR: user_id})
    async for items in pages:
        out.extend(MemoryRecord.from_chroma(i.id, i.document, i.metadata) for i in items)
    out.sort(key=lambda r: (r.created_at, r.id))
    return out


async def authored_archived(store: MemoryStore, user_id: str) -> list[ArchivedMemory]:
    """Archive rows of group memories whose writer mark is ``user_id`` (swept, deleted
    or previous versions), oldest first."""
    if await store.archive.count() == 0:
        return []
    archive = store.archive
    out: list[ArchivedMemory] = []
    pages = archive.guard.pages(archive.name, archive.invalidate, where={META_AUTHOR: user_id})
    async for items in pages:
        out.extend(ArchivedMemory.from_chroma(i.id, i.document, i.metadata) for i in items)
    out.sort(key=lambda r: (r.archived_at, r.id))
    return out


async def erase_partition(store: MemoryStore, partition: str) -> tuple[int, int]:
    """Delete every live memory and every archive row of ``partition``: ``(live, archived)``."""
    async with store.gate.writing(), store.locks.hold(partition):
        res = await store._run(lambda c: c.get(where=where_partition(partition), include=[]))
        live = list(res["ids"])
        try:
            for chunk in _chunks(live):
                await store._write(lambda c, ids=chunk: c.delete(ids=ids))
        finally:
            store.counts.drop(partition)
            store.recent.drop(partition)
            store.index.drop(partition)
        archived = await _archive_ids(store, {"user_id": partition})
        for chunk in _chunks(archived):
            await store.archive._write(lambda c, ids=chunk: c.delete(ids=ids))
    return len(live), len(archived)


async def _unmark(
    run: Callable[[Callable[[Collection], Any]], Awaitable[Any]],
    write: Callable[[Callable[[Collection], Any]], Awaitable[Any]],
    where: dict[str, Any],
) -> int:
    """Set the writer mark of the rows matching ``where`` to ``""``; how many."""
    res = await run(lambda c: c.get(where=where, include=["metadatas"]))
    ids = list(res["ids"])
    metas: list[Any] = [{**(m or {}), META_AUTHOR: ""} for m in res.get("metadatas") or []]
    for start in range(0, len(ids), ERASE_BATCH):
        part = slice(start, start + ERASE_BATCH)
        await write(lambda c, i=ids[part], m=metas[part]: c.update(ids=i, metadatas=m))
    return len(ids)


async def unmark_author(store: MemoryStore, user_id: str) -> int:
    """Clear ``user_id``'s writer mark on group memories (live and archived); rows changed.

    The memories themselves stay: they belong to their group. Live rows change
    under their partition's lock, so a concurrent update cannot put the mark back.
    """
    res = await store._run(lambda c: c.get(where={META_AUTHOR: user_id}, include=["metadatas"]))
    partitions = sorted({str((m or {}).get("user_id", "")) for m in res.get("metadatas") or []})
    changed = 0
    for partition in partitions:
        async with store.gate.writing(), store.locks.hold(partition):
            where = {"$and": [{META_AUTHOR: user_id}, {"user_id": partition}]}
            try:
                changed += await _unmark(store._run, store._write, where)
            finally:
                store.index.drop(partition)  # its cached records carry the old mark
    if await store.archive.count():
        async with store.gate.writing():
            archive = store.archive
            changed += await _unmark(archive._run, archive._write, {META_AUTHOR: user_id})
    return changed
