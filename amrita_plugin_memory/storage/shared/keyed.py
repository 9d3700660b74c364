"""Per-process caches of rows keyed by a chat or a user, kept coherent by the change feed.

The memo cache (keyed by uni_id) and the persona cache (keyed by user id) are
:class:`KeyedCache` objects. In remote mode the store that owns one follows the
process's :class:`~.coherence.Coherence` (a feed row of a partition drops what
the cache keeps for it; a row of the whole store or a failed poll drops
everything) and publishes a row after each of its own writes. Entries then also
expire after :data:`~.coherence.SAFETY_EXPIRY` seconds: a backstop for a change
whose feed row could not be written. Locally (one process) nothing expires and
nothing is published.

A load that began before an invalidation is not cached (a generation counter,
as in :mod:`..partition.cache`): an older read never replaces what another
process wrote meanwhile.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["KeyedCache"]

V = TypeVar("V")


class KeyedCache(Generic[V]):
    """A bounded LRU of ``key -> value`` with invalidation and an optional expiry."""

    def __init__(self, capacity: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self.ttl: float | None = None
        """Seconds an entry is trusted (``None``: until dropped; set when shared)."""
        self.clock = clock
        self._entries: OrderedDict[str, tuple[V, float]] = OrderedDict()
        self._generation = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    @property
    def generation(self) -> int:
        """Taken before a load; hand it to :meth:`put` (moved on by every drop)."""
        return self._generation

    def get(self, key: str) -> V | None:
        """The cached value (``None``: missing or expired)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        value, at = entry
        if self.ttl is not None and self.clock() - at > self.ttl:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: str, value: V, since: int | None = None) -> None:
        """Cache ``value``; a load that began at generation ``since`` is dropped when
        anything was invalidated or written meanwhile."""
        if since is not None and since != self._generation:
            return
        self._entries[key] = (value, self.clock())
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def written(self, key: str, value: V | None) -> None:
        """After this process's own committed write: cache ``value`` (``None``: drop)."""
        self._generation += 1
        if value is None:
            self._entries.pop(key, None)
        else:
            self.put(key, value)

    def invalidate(self, key: str) -> None:
        """Another process changed ``key``: drop it; loads under way are not cached."""
        self._generation += 1
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._generation += 1
        self._entries.clear()
