"""The ids of a partition in insertion order, so a page of its newest memories is one read by id.

Chroma has no "order by": ``get(where, limit, offset)`` evaluates the filter
over the whole partition and skips ``offset`` rows on every call (measured at
100,000 memories: 90 ms for the first page, 390 ms for the last), and reading
a partition's ids alone costs 330 ms. The admin console lists memories
newest first, page by page, and must answer in a few milliseconds, so the
ids of a partition are read once (ids only, in Chroma's insertion order,
which is creation order: re-embedding and restores copy items in that order)
and kept here; a page is then a slice of this list and one ``get(ids=...)``.

:class:`RecentIds` is owned by the :class:`~..memory_store.MemoryStore`; the
store's own adds and deletes keep a cached list exact (under the partition's
lock). Writes of another process (a second bot on a remote Chroma) are seen
again when the entry is older than ``ttl``: the listing then answers from
the list it has and re-reads it in the background.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["RecentIds"]


class RecentIds:
    """Per-partition id lists (oldest first), bounded in number, refreshed after ``ttl``."""

    def __init__(
        self,
        *,
        ttl: float = 60.0,
        max_partitions: int = 32,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_partitions = max_partitions
        self.clock = clock
        self._entries: OrderedDict[str, tuple[list[str], float]] = OrderedDict()

    def get(self, partition: str) -> tuple[list[str], bool] | None:
        """``(ids oldest first, fresh)`` or ``None`` when the partition is not cached."""
        entry = self._entries.get(partition)
        if entry is None:
            return None
        self._entries.move_to_end(partition)
        ids, taken = entry
        return ids, self.clock() - taken <= self.ttl

    def set(self, partition: str, ids: list[str]) -> None:
        self._entries[partition] = (ids, self.clock())
        self._entries.move_to_end(partition)
        while len(self._entries) > self.max_partitions:
            self._entries.popitem(last=False)

    def added(self, partition: str, memory_id: str) -> None:
        """A memory was added by this process (the newest of its partition)."""
        entry = self._entries.get(partition)
        if entry is not None:
            entry[0].append(memory_id)

    def removed(self, partition: str, memory_id: str) -> None:
        """A memory was deleted by this process."""
        entry = self._entries.get(partition)
        if entry is not None and memory_id in entry[0]:
            entry[0].remove(memory_id)

    def drop(self, partition: str) -> None:
        self._entries.pop(partition, None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
