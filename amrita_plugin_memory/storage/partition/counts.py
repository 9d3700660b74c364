"""Memory counts per partition, so that the limit check does not list a partition."""

from __future__ import annotations

import time
from collections.abc import Callable

from .cache import PartitionCache

__all__ = ["PartitionCounts"]


class PartitionCounts(PartitionCache[int]):
    """Memory counts per partition for the limit check, so a write does not list its partition.

    Owned by :class:`MemoryStore` and changed only under the partition's lock.
    An entry is an exact count taken from Chroma, then kept by the store's own
    adds and deletes; another process's writes invalidate it through the change
    feed (:mod:`..shared.feed`), and the store re-counts before it refuses a
    write, so a refusal is always exact. At most ``max_entries`` partitions are
    remembered (least recently used go); ``ttl`` is the safety expiry of
    :class:`~.cache.PartitionCache` (60 s without a change feed, longer with one).
    """

    def __init__(
        self,
        *,
        ttl: float | None = 60.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(max_entries=max_entries, expiry=ttl, clock=clock)

    @property
    def ttl(self) -> float | None:
        """The safety expiry in seconds (``None``: none)."""
        return self.expiry

    @ttl.setter
    def ttl(self, value: float | None) -> None:
        self.expiry = value

    def set(self, partition: str, count: int) -> None:
        self.put(partition, count)

    def adjust(self, partition: str, delta: int) -> None:
        """Apply a write of ours to a known count (unknown partitions stay unknown)."""
        self.replace(partition, lambda count: max(count + delta, 0))
