"""``write_memory`` without copies: a true repeat refreshes the memory it repeats.

Chat models write the same fact again and again; copies of one fact push other
memories out of a top-5 and fill the partition limit. A write whose text is a
true repeat (:mod:`..ranking.repeats`: the same statement in nearly the same
words, written in the same place: same scope, same origin) of a memory of the
same partition, with close vectors, updates that memory instead: the newer
text (unless the stored one already holds it), the union of the tags, the
higher importance, a new ``updated_at``. The previous text is kept in the
archive first, so a merge never loses either text. Anything less than a true
repeat (another person, another value, a plan instead of a fact) stays a
memory of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..core.records import IMPORTANCE_LEVELS, MemoryRecord, OriginFilter
from ..core.writes import NewMemory
from ..ranking.repeats import cosine, repeats_memory
from .archive.store import REASON_MERGED
from .partition.retrieval import RetrievalSettings, SearchStore

__all__ = [
    "MERGE_NEIGHBOURS",
    "WriteResult",
    "merge_candidates",
    "merge_into",
    "merge_repeat",
    "merged_record",
]

MERGE_NEIGHBOURS = 5
"""How many nearest memories are tested as duplicates of a new text."""

T = TypeVar("T")


class MergeStore(SearchStore, Protocol):
    """What a merge needs of :class:`~.memory_store.MemoryStore` (which imports this module):
    the neighbours of a search (``SearchStore._query_vector``), and these."""

    settings: RetrievalSettings

    async def _get(self, partition: str, memory_id: str) -> MemoryRecord | None: ...

    async def _stored_vector(self, memory_id: str) -> list[float] | None: ...

    async def keep_history(
        self, previous: MemoryRecord, vector: Sequence[float] | None, *, reason: str
    ) -> None: ...

    async def _write(self, fn: Callable[[Any], T]) -> T: ...

    async def _vanished(self, memory_id: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What ``write_memory`` did: a new memory, or ``merged`` into an existing one."""

    record: MemoryRecord
    merged: bool = False
    existed: bool = False
    """The fixed id (``NewMemory.memory_id``) was stored already, live or archived: nothing
    was written (``record`` is the stored one)."""

    @property
    def pending(self) -> bool:
        """Stored without its vector (the embedding failed or is off): found by keywords
        now, by meaning once the background embedding gives it one."""
        return self.record.pending


def _normalised(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _repeats(record: MemoryRecord, memory: NewMemory) -> bool:
    return repeats_memory(record, memory.content, scope=memory.scope, origin=memory.origin)


def merge_candidates(near: Sequence[MemoryRecord], memory: NewMemory) -> list[MemoryRecord]:
    """Of the nearest memories ``near``, those that ``memory`` repeats; their vectors are
    checked under the lock by :func:`merge_into`."""
    return [r for r in near if _repeats(r, memory)]


def is_close(stored: Sequence[float], vector: Sequence[float], settings: RetrievalSettings) -> bool:
    return cosine(stored, vector) >= settings.dedup_min_cosine


def merged_record(
    current: MemoryRecord, memory: NewMemory, *, now: str
) -> tuple[MemoryRecord, bool]:
    """``current`` refreshed by ``memory``, a repeated write, and whether its text changed
    (its origin stays: only a write of the same origin repeats it)."""
    keep_old_text = _normalised(memory.content) in _normalised(current.content)
    merged_tags = list(dict.fromkeys([*current.tags, *memory.tags]))
    rank = {level: i for i, level in enumerate(IMPORTANCE_LEVELS)}
    higher = max(current.importance, memory.importance, key=lambda lvl: rank.get(lvl, 1))
    record = dataclasses.replace(
        current,
        content=current.content if keep_old_text else memory.content,
        tags=merged_tags,
        importance=higher,
        updated_at=now,
        distance=None,
    )
    return record, not keep_old_text


async def merge_into(
    store: MergeStore, memory: NewMemory, vector: Sequence[float], memory_id: str
) -> MemoryRecord | None:
    """Refresh ``memory_id`` with ``memory``, a repeated write (the caller holds the
    partition's lock); ``None`` when it is gone (also when another process archived it
    just before the refresh landed), no longer repeated by ``memory`` (changed
    meanwhile) or its stored vector is not close enough."""
    partition = memory.partition
    current = await store._get(partition, memory_id)
    if current is None or not _repeats(current, memory):
        return None
    stored = await store._stored_vector(memory_id)
    if stored is None or not is_close(stored, vector, store.settings):
        return None
    record, text_changed = merged_record(current, memory, now=store.clock())
    kwargs: dict[str, Any] = {"ids": [memory_id], "metadatas": [record.to_metadata()]}
    if text_changed:
        # The replaced text goes to the archive first: if that fails, nothing changes.
        await store.keep_history(dataclasses.replace(current), stored, reason=REASON_MERGED)
        kwargs.update(documents=[record.content], embeddings=[list(vector)])
    try:
        await store._write(lambda c: c.update(**kwargs))
        gone = await store._vanished(memory_id)
    except BaseException:
        store.index.drop(partition)
        raise
    if gone:  # archived by another process meanwhile: the write becomes a new memory
        store.index.drop(partition)
        return None
    store.index.updated(partition, vector if text_changed else None, record)
    return record


async def merge_repeat(
    store: MergeStore, memory: NewMemory, vector: Sequence[float]
) -> MemoryRecord | None:
    """In the partition's write section: the memory ``memory`` repeats, refreshed, or
    ``None``. The neighbours are read once, as of now (every process's writes applied):
    from the index when it is cached, else from Chroma (a load would take the lock held)."""
    near = await store._query_vector(
        memory.partition,
        vector,
        top_k=MERGE_NEIGHBOURS,
        importance=None,
        origins=OriginFilter.ALL,
        load=False,
    )
    for candidate in merge_candidates(near, memory):
        merged = await merge_into(store, memory, vector, candidate.id)
        if merged is not None:
            return merged
    return None
