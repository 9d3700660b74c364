"""Async locks keyed by partition (or any string), bounded by use."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator

__all__ = ["PartitionLocks"]


class PartitionLocks:
    """Async locks keyed by partition, bounded by use.

    Locks live in a ``WeakValueDictionary``: a lock exists only while some
    coroutine holds or waits for it, so the pool never grows with the number
    of partitions ever seen.
    """

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def get(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock = self.get(key)  # strong reference for the duration
        async with lock:
            yield

    def __len__(self) -> int:
        return len(self._locks)
