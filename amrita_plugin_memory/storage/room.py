"""Room in a full partition: an automatic memory gives way, an explicit one never does.

``per_session_memory_limit`` bounds a partition. Active memory writes without
the user asking, so without a rule a partition filled by automatic memories
would refuse the user's own ``write_memory`` and stop learning for good. The
rule (``docs/active-memory.md``, "分区已满"):

* a write into a full partition may *displace* one **automatic** memory
  (``source = "auto"``) into the archive (reason ``displaced``, restorable):
  the one of the lowest importance, and of those the least recently updated;
* an explicit write (a tool call, a command) may displace any automatic
  memory; an automatic write only one of its own importance or lower, so a
  passing remark never pushes out what was learned as important;
* memories written explicitly are never displaced: a partition full of them
  refuses every write, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from ..core.errors import MemoryLimitReached
from ..core.records import IMPORTANCE_LEVELS, SOURCE_AUTO, MemoryRecord
from .archive.removal import RemovalStore, move_to_archive
from .archive.store import REASON_DISPLACED
from .partition.counts import PartitionCounts
from .partition.index import PartitionIndex
from .partition.recent import RecentIds

__all__ = ["EXPLICIT", "RoomStore", "displacement_victim", "make_room"]

EXPLICIT = "high"
"""``displace`` of an explicit write: any automatic memory may give way to it."""


def _rank(importance: str) -> int:
    return IMPORTANCE_LEVELS.index(importance) if importance in IMPORTANCE_LEVELS else 0


def displacement_victim(records: Iterable[MemoryRecord], up_to: str) -> MemoryRecord | None:
    """The automatic memory that gives way to a write allowed to displace ``up_to``
    importance (the lowest importance first, then the least recently updated), or ``None``."""
    ceiling = _rank(up_to)
    best: MemoryRecord | None = None
    best_key: tuple[int, str] | None = None
    for record in records:
        if record.source != SOURCE_AUTO or _rank(record.importance) > ceiling:
            continue
        key = (_rank(record.importance), record.updated_at or record.created_at)
        if best_key is None or key < best_key:
            best, best_key = record, key
    return best


class RoomStore(RemovalStore, Protocol):
    """What :func:`make_room` needs of :class:`~.memory_store.MemoryStore` (which imports this)."""

    counts: PartitionCounts
    recent: RecentIds
    index: PartitionIndex

    async def _count(self, partition: str) -> int: ...


async def make_room(store: RoomStore, partition: str, limit: int, displace: str | None) -> None:
    """Under the partition's lock: return when one more memory fits in ``partition``, else
    raise :class:`MemoryLimitReached`. With ``displace`` an automatic memory may give way
    (see the module docstring): it is archived (reason ``displaced``) first."""
    count = store.counts.get(partition)
    if count is None or count >= limit:  # unknown, or about to refuse: exact
        count = await store._count(partition)
        store.counts.set(partition, count)
    if count < limit:
        return
    victim = None
    if displace is not None and count == limit:
        where: Any = {"$and": [{"user_id": partition}, {"source": SOURCE_AUTO}]}
        res = await store._run(lambda c: c.get(where=where, include=["metadatas"]))
        metas = res.get("metadatas") or []
        auto = [
            MemoryRecord.from_chroma(i, None, m) for i, m in zip(res["ids"], metas, strict=False)
        ]
        victim = displacement_victim(auto, displace)
    if victim is None or not await move_to_archive(
        store, partition, victim.id, reason=REASON_DISPLACED
    ):
        raise MemoryLimitReached(limit, count)
    store.counts.adjust(partition, -1)
    store.recent.removed(partition, victim.id)
    store.index.removed(partition, victim.id)
