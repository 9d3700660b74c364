"""``write_memory`` without copies: a near-duplicate refreshes the memory it repeats.

Chat models write the same fact again and again in other words; five copies of
one fact push other memories out of a top-5 and fill the partition limit. A
write whose text is a duplicate (:mod:`..core.duplicates`: close vectors,
overlapping wording, no value replaced) of a memory of the same partition and
scope updates that memory instead: the newer text (unless the stored text
already contains it), the union of the tags, the higher importance, a new
``updated_at``. The previous text is kept in the archive first, so a merge
never loses either text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..core.duplicates import cosine, is_duplicate_text
from ..core.records import IMPORTANCE_LEVELS, ORIGIN_PRIVATE, MemoryRecord
from .archive_store import REASON_MERGED
from .retrieval import RetrievalSettings

if TYPE_CHECKING:
    from .partition_index import PartitionIndex

__all__ = ["MERGE_NEIGHBOURS", "WriteResult", "merge_candidates", "merge_into", "merged_record"]

MERGE_NEIGHBOURS = 5
"""How many nearest memories are tested as duplicates of a new text."""

T = TypeVar("T")


class MergeStore(Protocol):
    """What a merge needs of :class:`~.memory_store.MemoryStore` (which imports this module)."""

    settings: RetrievalSettings
    index: PartitionIndex
    clock: Callable[[], str]

    async def get(self, partition: str, memory_id: str) -> MemoryRecord | None: ...

    async def stored_vector(self, memory_id: str) -> list[float] | None: ...

    async def keep_history(
        self, previous: MemoryRecord, vector: Sequence[float] | None, *, reason: str
    ) -> None: ...

    async def _write(self, fn: Callable[[Any], T]) -> T: ...

    async def vanished(self, memory_id: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What ``write_memory`` did: a new memory, or ``merged`` into an existing one."""

    record: MemoryRecord
    merged: bool = False


def _normalised(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def merge_candidates(
    near: Sequence[MemoryRecord], scope: str, content: str, settings: RetrievalSettings
) -> list[MemoryRecord]:
    """Of the nearest memories ``near``, those whose text is a duplicate of ``content``
    by wording (their vectors are checked under the lock by :func:`merge_into`)."""
    return [
        r
        for r in near
        if r.scope == scope
        and is_duplicate_text(r.content, content, min_similarity=settings.dedup_min_text_similarity)
    ]


def is_close(stored: Sequence[float], vector: Sequence[float], settings: RetrievalSettings) -> bool:
    return cosine(stored, vector) >= settings.dedup_min_cosine


def merged_record(
    current: MemoryRecord,
    content: str,
    *,
    tags: Sequence[str],
    importance: str,
    origin: str,
    now: str,
) -> tuple[MemoryRecord, bool]:
    """``current`` refreshed by a repeated write, and whether its text changed."""
    keep_old_text = _normalised(content) in _normalised(current.content)
    merged_tags = list(dict.fromkeys([*current.tags, *tags]))
    rank = {level: i for i, level in enumerate(IMPORTANCE_LEVELS)}
    higher = max(current.importance, importance, key=lambda lvl: rank.get(lvl, 1))
    # Said in a group now or before: the fact is no longer private-only.
    new_origin = current.origin if origin == ORIGIN_PRIVATE else origin
    record = dataclasses.replace(
        current,
        content=current.content if keep_old_text else content,
        tags=merged_tags,
        importance=higher,
        origin=new_origin,
        updated_at=now,
        distance=None,
    )
    return record, not keep_old_text


async def merge_into(
    store: MergeStore,
    partition: str,
    memory_id: str,
    content: str,
    vector: Sequence[float],
    *,
    tags: Sequence[str],
    importance: str,
    origin: str,
) -> MemoryRecord | None:
    """Refresh ``memory_id`` with a repeated write (the caller holds the partition's
    lock); ``None`` when it is gone (also when another process archived it just
    before the refresh landed) or its stored vector is not close enough."""
    current = await store.get(partition, memory_id)
    if current is None:
        return None
    stored = await store.stored_vector(memory_id)
    if stored is None or not is_close(stored, vector, store.settings):
        return None
    record, text_changed = merged_record(
        current, content, tags=tags, importance=importance, origin=origin, now=store.clock()
    )
    kwargs: dict[str, Any] = {"ids": [memory_id], "metadatas": [record.to_metadata()]}
    if text_changed:
        # The replaced text goes to the archive first: if that fails, nothing changes.
        await store.keep_history(dataclasses.replace(current), stored, reason=REASON_MERGED)
        kwargs.update(documents=[record.content], embeddings=[list(vector)])
    try:
        await store._write(lambda c: c.update(**kwargs))
        gone = await store.vanished(memory_id)
    except BaseException:
        store.index.drop(partition)
        raise
    if gone:  # archived by another process meanwhile: the write becomes a new memory
        store.index.drop(partition)
        return None
    store.index.updated(partition, vector if text_changed else None, record)
    return record
