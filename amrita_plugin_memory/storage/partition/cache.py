"""One per-partition cache: budget, generation, invalidation, safety expiry.

:class:`PartitionCache` holds one value per partition (a count, an id list, a
partition's vectors) for :mod:`.counts`, :mod:`.recent` and :mod:`.index`:

* **budget**: at most ``max_entries`` partitions and, when the values report a
  size, at most ``max_bytes`` in all; the least recently used go first;
* **generation**: a value is kept with the generation it was read in
  (connection generation and collection id); asked under another generation,
  every entry is stale (a reconnect or a replaced collection) and all go;
* **invalidation**: :meth:`PartitionCache.invalidate` drops a partition (the
  change feed does this for another process's writes, :mod:`..shared.feed`);
  a load that began before an invalidation is not cached when it ends
  (:meth:`PartitionCache.get` records the miss, :meth:`PartitionCache.put`
  checks it): a read of Chroma racing another process's write can never
  leave the older rows in the cache;
* **safety expiry**: ``expiry`` seconds (``None``: none), a backstop for a change
  that was written to Chroma but whose feed row could not be written.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["PartitionCache"]

T = TypeVar("T")

MISS_TICKETS = 4096
"""Misses remembered for :meth:`PartitionCache.put` (older ones count as invalidated)."""

INVALIDATIONS = 4096
"""Partitions whose last invalidation is remembered (older ones share one floor)."""


@dataclass(slots=True)
class _Slot(Generic[T]):
    value: T
    generation: Hashable
    taken: float
    nbytes: int


class PartitionCache(Generic[T]):
    """Values per partition, bounded, invalidated by generation, by name or by age."""

    def __init__(
        self,
        *,
        max_entries: int = 4096,
        max_bytes: int | None = None,
        size: Callable[[T], int] | None = None,
        expiry: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.size = size
        self.expiry = expiry
        self.clock = clock
        self._slots: OrderedDict[str, _Slot[T]] = OrderedDict()
        self.nbytes = 0
        self._counter = 0
        """Bumped by every invalidation: a load's ticket is the value when it began."""
        self._invalidated: OrderedDict[str, int] = OrderedDict()
        self._floor = 0
        """Invalidations forgotten from ``_invalidated`` happened no later than this."""
        self._misses: OrderedDict[str, int] = OrderedDict()

    # -- bookkeeping -------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, partition: object) -> bool:
        return partition in self._slots

    def _remove(self, partition: str) -> None:
        slot = self._slots.pop(partition, None)
        if slot is not None:
            self.nbytes -= slot.nbytes

    def _trim(self) -> None:
        while len(self._slots) > self.max_entries or (
            self.max_bytes is not None and self.nbytes > self.max_bytes and self._slots
        ):
            _, old = self._slots.popitem(last=False)
            self.nbytes -= old.nbytes

    # -- invalidation --------------------------------------------------------------

    def ticket(self) -> int:
        """Taken before a load from Chroma; :meth:`put` with it refuses an older read."""
        return self._counter

    def invalidate(self, partition: str) -> None:
        """Drop ``partition``; a load of it already under way will not be cached."""
        self._counter += 1
        self._invalidated[partition] = self._counter
        self._invalidated.move_to_end(partition)
        while len(self._invalidated) > INVALIDATIONS:
            _, at = self._invalidated.popitem(last=False)
            self._floor = max(self._floor, at)
        self._remove(partition)

    def drop(self, partition: str) -> None:
        """Drop ``partition`` (this process's own reason: no load is refused for it)."""
        self._remove(partition)

    def clear(self) -> None:
        """Drop everything; loads under way are not cached either."""
        self._counter += 1
        self._floor = self._counter
        self._invalidated.clear()
        self._slots.clear()
        self.nbytes = 0

    def _invalidated_since(self, partition: str, ticket: int) -> bool:
        at = self._invalidated.get(partition, self._floor)
        return at > ticket

    # -- values ------------------------------------------------------------------------

    def get(self, partition: str, generation: Hashable = None) -> T | None:
        """The cached value, or ``None`` (a miss: the load that follows is ticketed)."""
        self._trim()  # the budget may have been lowered
        slot = self._slots.get(partition)
        if slot is not None and slot.generation != generation:
            self.clear()
            slot = None
        if slot is not None and self.expiry is not None and self.clock() - slot.taken > self.expiry:
            self._remove(partition)
            slot = None
        if slot is None:
            self._misses[partition] = self._counter
            self._misses.move_to_end(partition)
            while len(self._misses) > MISS_TICKETS:
                self._misses.popitem(last=False)
            return None
        self._slots.move_to_end(partition)
        return slot.value

    def age(self, partition: str) -> float | None:
        """Seconds since the value of ``partition`` was read from Chroma (``None``: not cached)."""
        slot = self._slots.get(partition)
        return None if slot is None else self.clock() - slot.taken

    def put(
        self,
        partition: str,
        value: T,
        generation: Hashable = None,
        *,
        ticket: int | None = None,
    ) -> bool:
        """Cache a value read from Chroma; ``False`` (not cached) when ``partition`` was
        invalidated since the read began (``ticket``, else the last miss of it) or when
        the value alone exceeds the byte budget."""
        if ticket is None:
            ticket = self._misses.get(partition, self._floor)
        if self._invalidated_since(partition, ticket):
            return False
        return self._store(partition, value, generation, self.clock())

    def replace(self, partition: str, change: Callable[[T], T]) -> None:
        """Apply a write of this process to a cached value (kept under the partition's
        lock); an error in ``change`` drops the entry (Chroma answers until reloaded)."""
        slot = self._slots.get(partition)
        if slot is None:
            return
        try:
            value = change(slot.value)
        except Exception:
            self._remove(partition)
            return
        self._store(partition, value, slot.generation, slot.taken)

    def _store(self, partition: str, value: T, generation: Hashable, taken: float) -> bool:
        self._remove(partition)
        nbytes = self.size(value) if self.size is not None else 0
        if self.max_bytes is not None and nbytes > self.max_bytes:
            return False
        self._slots[partition] = _Slot(value, generation, taken, nbytes)
        self.nbytes += nbytes
        self._trim()
        return partition in self._slots
