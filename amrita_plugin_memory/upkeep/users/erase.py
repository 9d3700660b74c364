"""Real deletion: what a user's forget removes from the memory collection and its archive.

Everywhere else the plugin keeps data (deletes and sweeps keep an archive
copy, see :mod:`...storage.archive.store`); a user's forget (:mod:`.user_data`) is the
one path that removes it. So nothing here goes through ``MemoryStore.delete``:
the rows are deleted from the collections directly, under the partition's lock
and the store's write gate (a sweep, an update or an archive restore of the
partition waits; a re-embedding or a backup restore refuses the forget), and
the store's caches of the partition (counts, recent ids, the vector index) are
dropped. It uses the stores' raw row doors (``MemoryStore.remove_rows``,
``MemoryStore.set_metadatas``, ``ArchiveStore.remove``), never the Chroma handle. Every call is idempotent: a forget interrupted half-way completes
when it runs again.

Group memories the user wrote stay (they belong to the group); only the
user's writer mark (:data:`~...core.records.META_AUTHOR`) is cleared on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...core.records import META_AUTHOR, MemoryRecord
from ...storage.archive.store import ArchivedMemory
from ...storage.memory_store import MemoryStore, operator_view

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


async def partition_contents(store: MemoryStore, partition: str) -> PartitionContents:
    """Every live memory and every archive row of ``partition``, with their texts."""
    memories: list[MemoryRecord] = []
    async for page in store.iter_records(operator_view(partition), with_documents=True):
        memories.extend(page)
    archived: list[ArchivedMemory] = []
    async for rows in store.archive.iter_rows({"user_id": partition}):
        archived.extend(rows)
    memories.sort(key=lambda r: (r.created_at, r.id))
    archived.sort(key=lambda r: (r.archived_at, r.id))
    return PartitionContents(memories, archived)


async def authored_records(store: MemoryStore, user_id: str) -> list[MemoryRecord]:
    """Live group memories whose writer mark is ``user_id``, oldest first."""
    out: list[MemoryRecord] = []
    async for items in store.iter_authored(user_id):
        out.extend(MemoryRecord.from_chroma(i.id, i.document, i.metadata) for i in items)
    out.sort(key=lambda r: (r.created_at, r.id))
    return out


async def authored_archived(store: MemoryStore, user_id: str) -> list[ArchivedMemory]:
    """Archive rows of group memories whose writer mark is ``user_id`` (swept, deleted
    or previous versions), oldest first."""
    out: list[ArchivedMemory] = []
    async for rows in store.archive.iter_rows({META_AUTHOR: user_id}):
        out.extend(rows)
    out.sort(key=lambda r: (r.archived_at, r.id))
    return out


async def erase_partition(store: MemoryStore, partition: str) -> tuple[int, int]:
    """Delete every live memory and every archive row of ``partition``: ``(live, archived)``."""
    async with store.writing(partition):
        live = await store.ids(operator_view(partition))
        try:
            for chunk in _chunks(live):
                await store.remove_rows(chunk)
        finally:
            store.drop_views(partition)
        archived = await store.archive.row_ids({"user_id": partition})
        for chunk in _chunks(archived):
            await store.archive.remove(chunk)
    return len(live), len(archived)


def _unmarked(rows: Sequence[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[Any]]:
    return [i for i, _ in rows], [{**meta, META_AUTHOR: ""} for _, meta in rows]


async def unmark_author(store: MemoryStore, user_id: str) -> int:
    """Clear ``user_id``'s writer mark on group memories (live and archived); rows changed.

    The memories themselves stay: they belong to their group. Live rows change
    under their partition's lock, so a concurrent update cannot put the mark back.
    """
    partitions: set[str] = set()
    async for items in store.iter_authored(user_id):
        partitions.update(str((i.metadata or {}).get("user_id", "")) for i in items)
    changed = 0
    for partition in sorted(partitions):
        async with store.writing(partition):
            try:
                rows = await store.rows(operator_view(partition), author=user_id)
                ids, metas = _unmarked([(r.record.id, r.metadata) for r in rows])
                for start in range(0, len(ids), ERASE_BATCH):
                    part = slice(start, start + ERASE_BATCH)
                    await store.set_metadatas(ids[part], metas[part])
                changed += len(ids)
            finally:
                store.index.drop(partition)  # its cached records carry the old mark
    archived = await store.archive.metadatas({META_AUTHOR: user_id})
    if archived:
        async with store.gate.writing():
            ids, metas = _unmarked(archived)
            for start in range(0, len(ids), ERASE_BATCH):
                part = slice(start, start + ERASE_BATCH)
                await store.archive.set_metadatas(ids[part], metas[part])
            changed += len(ids)
    return changed
