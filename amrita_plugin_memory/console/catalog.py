"""Every partition with its size and last change: one scan of the metadata, cached.

Listing the partitions needs every memory's metadata (Chroma cannot group):
about 3 s at 100,000 memories. The scan runs at most once per ``ttl`` and
never twice at once (concurrent requests share it); the console's own writes
invalidate it, and the page's refresh button asks for a fresh one. The
memory table itself never waits for this scan (see :mod:`..upkeep.listing`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..storage.keys import parse_key
from ..storage.memory_store import MemoryStore

__all__ = ["Catalog", "PartitionCatalog", "PartitionSummary"]


@dataclass(slots=True)
class PartitionSummary:
    """One partition: its memories per scope and its newest change."""

    key: str
    count: int = 0
    scopes: dict[str, int] = field(default_factory=dict)
    last_update: str = ""

    def to_json(self) -> dict[str, Any]:
        parsed = parse_key(self.key)
        return {
            "partition": self.key,
            "kind": parsed[0] if parsed else "unknown",
            "number": str(parsed[1]) if parsed else None,
            "count": self.count,
            "scopes": dict(self.scopes),
            "last_update": self.last_update,
        }


@dataclass(slots=True)
class Catalog:
    """The result of one scan."""

    partitions: dict[str, PartitionSummary]
    taken: float
    """``time.monotonic()`` when the scan finished."""
    seconds: float
    """How long the scan took."""

    @property
    def total(self) -> int:
        return sum(p.count for p in self.partitions.values())

    def distribution(self) -> dict[tuple[str, str], int]:
        """Memory count per ``(partition, scope)``, as ``ambot memory status`` shows it."""
        return {
            (p.key, scope): n for p in self.partitions.values() for scope, n in p.scopes.items()
        }


class PartitionCatalog:
    """The cached partition scan of one store."""

    def __init__(self, store: MemoryStore, *, ttl: float = 30.0) -> None:
        self.store = store
        self.ttl = ttl
        self._catalog: Catalog | None = None
        self._generation = 0
        """Moved on by :meth:`invalidate`: a scan that began before keeps no cache."""
        self._lock = asyncio.Lock()
        self.listeners: list[Callable[[], None]] = []
        """Other caches of the same data, invalidated together with this one."""
        store.coherence.on_change(self.invalidate)  # another process's writes (remote mode)

    def invalidate(self) -> None:
        """Forget the scan (after a write); the next request scans again.

        A scan running now still answers the requests waiting for it, but is not
        kept: it may have read what the write changed.
        """
        self._catalog = None
        self._generation += 1
        for listener in self.listeners:
            listener()

    def _fresh(self, max_age: float) -> Catalog | None:
        catalog = self._catalog
        if catalog is not None and time.monotonic() - catalog.taken <= max_age:
            return catalog
        return None

    async def get(self, *, fresh: bool = False) -> Catalog:
        """The catalog, at most ``ttl`` seconds old (``fresh``: scanned after this call began)."""
        await self.store.fresh()  # other processes' writes applied (invalidate above)
        asked = time.monotonic()
        max_age = 0.0 if fresh else self.ttl
        if (catalog := self._fresh(max_age)) is not None:
            return catalog
        async with self._lock:
            catalog = self._catalog
            if catalog is not None and (
                catalog.taken >= asked or time.monotonic() - catalog.taken <= max_age
            ):
                return catalog  # scanned by the request we waited for
            generation = self._generation
            catalog = await self._scan()
            if generation == self._generation:
                self._catalog = catalog
            return catalog

    async def _scan(self) -> Catalog:
        started = time.monotonic()
        parts: dict[str, PartitionSummary] = {}
        async for page in self.store.iter_all_records():
            for record in page:
                summary = parts.get(record.partition)
                if summary is None:
                    summary = parts[record.partition] = PartitionSummary(record.partition)
                summary.count += 1
                summary.scopes[record.scope] = summary.scopes.get(record.scope, 0) + 1
                stamp = record.updated_at or record.created_at
                summary.last_update = max(summary.last_update, stamp)
        now = time.monotonic()
        return Catalog(parts, now, now - started)
