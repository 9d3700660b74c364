"""Memory counts per partition, so that the limit check does not list a partition."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["PartitionCounts"]


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
