"""Paged, newest-first reads of one partition, and finding a memory by id alone.

For the admin console (see :mod:`..storage.partition.recent` for why pages are read by id).
Every read here is bounded: a page is at most ``limit`` memories fetched by
id, whatever the size of the partition or of the collection.
"""

from __future__ import annotations

import asyncio

from ..core.records import MemoryRecord
from ..storage.memory_store import MemoryStore, operator_view

__all__ = ["locate", "newest_page", "partition_ids"]

_refreshing: dict[tuple[int, str], asyncio.Task[None]] = {}
"""Background re-reads of stale id lists, one per (store, partition)."""


async def _read_ids(store: MemoryStore, partition: str) -> list[str]:
    """Read the partition's ids (insertion order) and cache them, under the partition's lock.

    The store's adds and deletes hold the same lock while they change the
    collection and the cached list, so the list read here misses none of them.
    """
    async with store.locks.hold(partition):
        ids = await store.ids(operator_view(partition))
        store.recent.set(partition, ids)
        return ids


def _refresh_later(store: MemoryStore, partition: str) -> None:
    key = (id(store), partition)
    if key in _refreshing:
        return

    async def refresh() -> None:
        try:
            await _read_ids(store, partition)
        except Exception:  # the next listing tries again; the old list stays usable
            store.recent.drop(partition)
        finally:
            _refreshing.pop(key, None)

    _refreshing[key] = asyncio.get_running_loop().create_task(refresh())


async def partition_ids(store: MemoryStore, partition: str) -> list[str]:
    """The ids of ``partition``, oldest first (cached; see :mod:`..storage.partition.recent`).

    The returned list is the cache's own: slice it at once, do not keep it.
    """
    await store.fresh()  # other processes' writes applied
    cached = store.recent.lookup(partition)
    if cached is None:
        return await _read_ids(store, partition)
    ids, fresh = cached
    if not fresh:
        _refresh_later(store, partition)
    return ids


async def newest_page(
    store: MemoryStore, partition: str, *, offset: int = 0, limit: int = 20
) -> tuple[list[MemoryRecord], int]:
    """Memories ``offset .. offset+limit`` of ``partition``, newest first, and its size."""
    ids = await partition_ids(store, partition)
    total = len(ids)
    stop = max(total - max(offset, 0), 0)
    page = ids[max(stop - limit, 0) : stop][::-1]
    if not page:
        return [], total
    rows = await store.fetch(operator_view(partition), page)  # moved meanwhile: left out
    return [row.record for row in rows], total


async def locate(store: MemoryStore, memory_id: str) -> MemoryRecord | None:
    """The memory ``memory_id`` in whatever partition it is (admin only; tools never do this)."""
    rows = await store.fetch_anywhere([memory_id])
    return rows[0].record if rows else None
