"""Pending memories: stored without their vector, given one later (issue #47).

A memory written while the embedding service failed (or with ``EMBEDDING_ENABLED=false``)
carries :data:`~..core.records.PENDING_KEY` and a placeholder vector (:mod:`.vectors`).
Reached through ``MemoryStore.pending_batch`` / ``MemoryStore.count_pending`` (reads of
every partition: operator doors, for the background embedding of ``embedding/pending``)
and ``MemoryStore.settle`` (one memory's vector arrived).

:func:`settle` works in the partition's write section and re-reads the row first: a
memory edited, deleted or settled by another process meanwhile is left alone, so two
processes never both write a vector and a repeat is never merged twice. The write-time
merge that a pending write skipped happens here, now that the vector is known.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from ..core.records import PENDING_KEY, MemoryRecord, OriginFilter
from ..core.writes import NewMemory
from .archive.removal import RemovalStore, move_to_archive
from .archive.store import REASON_MERGED
from .merge import MERGE_NEIGHBOURS, MergeStore, merge_candidates, merge_into

__all__ = ["PENDING_WHERE", "Settled", "pending_rows", "settle"]

PENDING_WHERE: dict[str, Any] = {PENDING_KEY: True}

Settled = Literal["embedded", "merged", "skipped"]
"""What :func:`settle` did: the vector stored; the memory merged into an older repeat (and
archived, reason ``merged``); nothing (gone, changed, or no longer pending)."""


class PendingStore(MergeStore, RemovalStore, Protocol):
    counts: Any
    recent: Any

    def writing(self, *partitions: str, lease: bool = True) -> Any: ...

    def drop_views(self, partition: str) -> None: ...


def pending_rows(res: Any) -> list[MemoryRecord]:
    """The records of a Chroma ``get`` of pending rows."""
    ids = list(res["ids"])
    docs = res.get("documents") or [None] * len(ids)
    metas = res.get("metadatas") or [None] * len(ids)
    return [MemoryRecord.from_chroma(i, d, m) for i, d, m in zip(ids, docs, metas, strict=False)]


def _as_new(record: MemoryRecord) -> NewMemory:
    return NewMemory(
        content=record.content,
        partition=record.partition,
        scope=record.scope,
        tags=list(record.tags),
        importance=record.importance,
        origin=record.origin,
        source=record.source,
        author=record.author,
    )


async def settle(store: PendingStore, record: MemoryRecord, vector: Sequence[float]) -> Settled:
    """Give the pending memory ``record`` its ``vector`` (embedded from ``record.content``)."""
    partition = record.partition
    async with store.writing(partition):
        current = await store._get(partition, record.id)
        if current is None or not current.pending or current.content != record.content:
            return "skipped"
        try:
            if store.settings.dedup:
                memory = _as_new(current)
                near = await store._query_vector(
                    partition,
                    vector,
                    top_k=MERGE_NEIGHBOURS,
                    importance=None,
                    origins=OriginFilter.ALL,
                    load=False,
                )
                for candidate in merge_candidates(near, memory):
                    if candidate.id == current.id:
                        continue
                    if await merge_into(store, memory, vector, candidate.id) is not None:
                        if await move_to_archive(
                            store, partition, current.id, reason=REASON_MERGED
                        ):
                            store.counts.adjust(partition, -1)
                            store.recent.removed(partition, current.id)
                            store.index.removed(partition, current.id)
                        return "merged"
            settled = dataclasses.replace(current, pending=False, distance=None)
            meta = {**settled.to_metadata(), PENDING_KEY: False}  # Chroma merges metadata
            await store._write(
                lambda c: c.update(ids=[current.id], embeddings=[list(vector)], metadatas=[meta])
            )
        except BaseException:
            store.drop_views(partition)
            raise
        store.index.updated(partition, vector, settled)
    return "embedded"
