"""A memory being written, and the rules of its way into a partition: one object each.

Every write of a new memory (``write_memory`` and its L3 twin, active memory's extraction,
an operator's or a test's plain add) builds a :class:`NewMemory` and a :class:`WriteRules`
and hands both to ``MemoryStore.write``, which passes them on unchanged: to merging
(``storage/merge``: does it repeat a stored memory?), to room-making (``storage/room``:
may an automatic memory give way?) and into the stored record. A new field of a memory is
one field here, not one more argument in four signatures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .protocols import Fence
from .records import ORIGIN_PRIVATE, MemoryRecord

__all__ = ["NewMemory", "WriteRules"]


@dataclass(frozen=True, slots=True)
class NewMemory:
    """What a new memory says and where it belongs (not yet stored: no id, no times)."""

    partition: str
    scope: str
    """``user`` or ``group``: the kind of partition it is written to (``core/records.SCOPES``)."""
    content: str
    tags: Sequence[str] = ()
    importance: str = "medium"
    origin: str = ORIGIN_PRIVATE
    """Where it was said: ``private`` or ``group:<gid>`` (which chats may show it)."""
    source: str = ""
    """``""`` (a tool call, a command) or ``SOURCE_AUTO`` (learned by active memory)."""
    author: str = ""
    """Who wrote a group memory (a user's export lists it; their forget clears the mark)."""
    event_time: str = ""
    """When what it tells happened (``core/calendar.parse_event_time``'s form; ``""``: unknown)."""
    created_at: str = ""
    """When it was said, if not now (an import keeps the original stamp: aware UTC ISO)."""
    imported_at: str = ""
    """When an import brought it in (its archive lifetime counts from then, not from
    :attr:`created_at`)."""
    memory_id: str = ""
    """A fixed id (an import's, derived from what the line says: a second import finds it
    stored and adds nothing); ``""``: a new random id."""

    def record(self, memory_id: str, now: str) -> MemoryRecord:
        """The stored memory: this one with its id, written ``now`` (or at :attr:`created_at`)."""
        said = self.created_at or now
        return MemoryRecord(
            id=memory_id,
            content=self.content,
            partition=self.partition,
            scope=self.scope,
            tags=list(self.tags),
            importance=self.importance,
            created_at=said,
            updated_at=said,
            origin=self.origin,
            source=self.source,
            author=self.author,
            event_time=self.event_time,
            imported_at=self.imported_at,
        )


@dataclass(frozen=True, slots=True)
class WriteRules:
    """How a new memory may be merged into its partition.

    The default is a plain add: no repeat merged, no limit, nothing displaced, no fence.
    """

    merge: bool = False
    """A true repeat of a memory of the partition, written with the same scope and origin,
    refreshes that memory instead of adding a copy (``storage/merge``; only while
    ``[retrieval] dedup`` is on)."""
    limit: int | None = None
    """The partition's bound (``per_session_memory_limit``): a full partition refuses
    (``MemoryLimitReached``) unless a memory gives way (:attr:`displace`)."""
    displace: str | None = None
    """The highest importance of an automatic memory that may give way in a full partition
    (``storage/room``): ``EXPLICIT`` for a user's own request, the new memory's own
    importance for an automatic one, ``None``: none."""
    fence: Fence | None = None
    """Awaited in the partition's write section right before anything is written: a forget
    or an opt-out voids background work in flight (``WriteFenced``)."""
