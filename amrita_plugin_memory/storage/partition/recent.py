"""Id lists of partitions, for listings newest first without re-reading the partition.

Chroma has no "order by" and a filtered ``get`` with an offset re-reads the
partition from its start: listing the last page of a big partition cost
milliseconds, so the
ids of a partition are read once (ids only, in Chroma's insertion order,
which is creation order: re-embedding and restores copy items in that order)
and kept here; a page is then a slice of this list and one ``get(ids=...)``.

:class:`RecentIds` is owned by the :class:`~..memory_store.MemoryStore`; the
store's own adds and deletes keep a cached list exact (under the partition's
lock). Writes of another process (a second bot on a remote Chroma) invalidate
a list through the change feed (:mod:`..shared.feed`); past the safety expiry
``ttl`` the listing answers from the list it has and re-reads it in the
background.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .cache import PartitionCache

__all__ = ["RecentIds"]


class RecentIds(PartitionCache[list[str]]):
    """Per-partition id lists (oldest first), bounded in number (:class:`~.cache.PartitionCache`)."""

    def __init__(
        self,
        *,
        ttl: float | None = 60.0,
        max_partitions: int = 32,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(max_entries=max_partitions, clock=clock)
        self.ttl = ttl
        """Seconds after which a listing re-reads the list in the background (``None``: never)."""

    def lookup(self, partition: str) -> tuple[list[str], bool] | None:
        """``(ids oldest first, fresh)`` or ``None`` when the partition is not cached."""
        ids = self.get(partition)
        if ids is None:
            return None
        age = self.age(partition) or 0.0
        return ids, self.ttl is None or age <= self.ttl

    def set(self, partition: str, ids: list[str]) -> None:
        self.put(partition, ids)

    def added(self, partition: str, memory_id: str) -> None:
        """A memory was added by this process (the newest of its partition)."""
        self.replace(partition, lambda ids: [*ids, memory_id])

    def removed(self, partition: str, memory_id: str) -> None:
        """A memory was deleted by this process."""
        self.replace(partition, lambda ids: [i for i in ids if i != memory_id])
