"""The archive sweep: memories past their lifetime move to the archive, never deleted.

A memory expires when the time since its ``updated_at`` exceeds
``ConfigFile.lifetime_days(importance)`` (0 = never). :func:`sweep` reads the
live collection's metadata in pages of :data:`SCAN_PAGE` (no documents, no
vectors; by offset: reading every id at once held the GIL for a second at
100,000 memories), then moves the expired memories in batches of ``batch_size``:

1. in chunks of :data:`WRITE_CHUNK`, each under the write gate and the locks
   of its partitions (taken in sorted order; nothing else holds two partition
   locks), the chunk is read again by id (document, metadata, stored vector):
   a memory updated, deleted or moved meanwhile is skipped;
2. the rows are saved into the archive (same id, reason ``expired``);
3. only then are they deleted from the live collection, and only in the state
   that was read (same partition and ``updated_at``,
   :func:`...storage.archive.removal.unchanged_where`): a memory another process changed in
   between (two bots on one Chroma server) stays live with its change, and the
   row saved for it becomes a previous version (:func:`_undo_changed`).

A crash between 2 and 3 leaves the memory in both collections: the next sweep
finds it still expired and completes the move (saving a row again overwrites
it), so a ``kill -9`` at any point loses nothing. Chroma unreachable: the chunk raises
before its delete, nothing is lost, the next sweep retries.

Every Chroma call runs in a worker thread (``connection.run``) and the sweep
yields to the event loop between batches, so a chat turn never waits for it.
The embedded ChromaDB holds the GIL for the whole of a write (an upsert of 200
rows stalled the loop for 175 ms and more), so writes go in chunks of
:data:`WRITE_CHUNK` rows: the loop runs between two chunks, and a chat write
to a partition being swept waits for one chunk at most, not a whole batch.
Back-to-back chunks would still leave the loop only the gaps between them (a
chat turn needs many loop turns), so with the embedded ChromaDB the sweep
rests after each chunk as long as the chunk took (:data:`REST_RATIO`): the
loop has at least half the time. A remote ChromaDB, or the local one served by
a child process (``VECTOR_DB_LOCAL_SERVER``, the default on Linux), releases
the GIL while it waits for the server: no rest is needed.
The conversation episodes (issue #48) expire with the same clock: with
``episodes`` given, the episodes that ended more than
``lifetime(EPISODE_IMPORTANCE)`` days ago move to their archive
(``EpisodeStore.sweep_episodes``, reason ``expired``; restorable, removed only by a
forget), in batches of ``batch_size``, after the memories.
The live-collection reads and writes go through the store's doors for work on the
whole collection (``MemoryStore.scan_all``, ``fetch_anywhere``, ``remove_rows``),
which are guarded: refused while a remap replaces the collection.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from nonebot.log import logger

from ...core.errors import ErrorKind, VectorStoreError
from ...core.records import MemoryRecord
from ...ranking.scores import parse_time
from ...storage.archive.store import REASON_EXPIRED, REASON_UPDATED, history_id
from ...storage.episodes.store import EpisodeStore
from ...storage.memory_store import MemoryStore, row_state, unchanged_where

__all__ = [
    "EPISODE_IMPORTANCE",
    "SWEEP_LEASE_TTL",
    "WRITE_CHUNK",
    "SweepBusy",
    "SweepResult",
    "expired",
    "parse_time",
    "sweep",
    "sweep_lease",
]

SWEEP_LEASE_TTL = 60.0
"""Seconds the sweep's lease (one sweeper at a time across processes) lasts unrenewed:
a sweeper killed mid-sweep blocks the others at most this long."""


def sweep_lease(store: MemoryStore) -> str:
    """The name of the sweep's lease of ``store`` (one sweeper per collection)."""
    return f"sweep:{store.name}"


class SweepBusy(VectorStoreError):
    """Another process is sweeping this collection right now."""

    kind = ErrorKind.CONFLICT


WRITE_CHUNK = 25
"""Rows per Chroma write of the sweep (see the module docstring: bounded loop stalls)."""

REST_RATIO = 1.0
"""Embedded ChromaDB: rest after each chunk for this multiple of the time it took."""

SCAN_PAGE = 250
"""Rows per metadata read while looking for expired memories."""

Lifetime = Callable[[str], float]
"""Days after its last update when a memory of an importance level expires (0 = never)."""

EPISODE_IMPORTANCE = "medium"
"""An episode lives as long as a memory of this importance (days after it ended)."""


@dataclass(slots=True)
class SweepResult:
    """What one sweep did."""

    scanned: int = 0
    archived: int = 0
    batches: int = 0
    skipped: int = 0
    """Expired at the scan, but changed, deleted or moved before their batch ran."""
    partitions: set[str] = field(default_factory=set)
    episodes: int = 0
    """Conversation episodes moved to their archive."""

    def describe(self) -> str:
        text = (
            f"扫描 {self.scanned} 条记忆，归档 {self.archived} 条"
            f"（{len(self.partitions)} 个分区，{self.batches} 批）"
        )
        return text + (f"，归档对话片段 {self.episodes} 段" if self.episodes else "")


def expired(record: MemoryRecord, lifetime: Lifetime, now: datetime) -> bool:
    """Whether ``record`` is past its lifetime at ``now`` (an unreadable date never is)."""
    days = lifetime(record.importance)
    if days <= 0:
        return False
    stamps = [parse_time(s) for s in (record.updated_at or record.created_at, record.imported_at)]
    known = [s for s in stamps if s is not None]
    return bool(known) and now - max(known) > timedelta(days=days)


async def _candidates(
    store: MemoryStore, lifetime: Lifetime, now: datetime, result: SweepResult
) -> dict[str, list[str]]:
    """Ids of the expired memories by partition (metadata only, page by page)."""
    found: dict[str, list[str]] = {}
    offset = 0
    while True:
        began = time.monotonic()
        # A memory deleted meanwhile shifts the pages: one may be missed this
        # time, never archived wrongly (each batch is checked again by id).
        page = await store.scan_all(offset=offset, limit=SCAN_PAGE)
        for record in page:
            if expired(record, lifetime, now):
                found.setdefault(record.partition, []).append(record.id)
        result.scanned += len(page)
        offset += len(page)
        if len(page) < SCAN_PAGE:
            return found
        await _rest(store, began)


async def _rest(store: MemoryStore, began: float) -> None:
    """Give the event loop time after a Chroma call (embedded only; see :data:`REST_RATIO`)."""
    if store.connection.in_process:
        await asyncio.sleep((time.monotonic() - began) * REST_RATIO)


def _batches(found: dict[str, list[str]], size: int) -> list[list[tuple[str, str]]]:
    """``(partition, id)`` batches of at most ``size``, a partition's ids kept together."""
    batches: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] = []
    for partition in sorted(found):
        for memory_id in found[partition]:
            current.append((partition, memory_id))
            if len(current) >= size:
                batches.append(current)
                current = []
    if current:
        batches.append(current)
    return batches


async def _move(
    store: MemoryStore,
    batch: Sequence[tuple[str, str]],
    lifetime: Lifetime,
    now: datetime,
    result: SweepResult,
) -> None:
    """Archive, then delete, one chunk (see the module docstring)."""
    partitions = sorted({p for p, _ in batch})
    # No partition leases: a sweep only removes rows it read unchanged (no limit or
    # repeat is decided here); the feed still tells other processes what changed.
    async with store.writing(*partitions, lease=False):
        wanted = {memory_id: partition for partition, memory_id in batch}
        rows: list[tuple[str, MemoryRecord, list[float]]] = []
        read: list[dict[str, Any]] = []
        for row in await store.fetch_anywhere(list(wanted), vectors=True):
            record = row.record
            if row.vector is None or record.partition != wanted.get(record.id):
                continue  # moved meanwhile (key migration)
            if not expired(record, lifetime, now):
                continue  # updated meanwhile
            rows.append((record.id, record, row.vector))
            read.append(row.metadata)
        result.skipped += len(batch) - len(rows)
        if not rows:
            return
        await store.archive.save(rows, reason=REASON_EXPIRED)
        moved = [row_id for row_id, _, _ in rows]
        where = unchanged_where(read)
        try:
            done = await store.remove_rows(moved, where=where)
            live = {} if done == len(rows) else await _still_live(store, moved)
        finally:
            # The delete may or may not have landed: cached views of these
            # partitions are rebuilt from Chroma on their next use.
            for partition in {record.partition for _, record, _ in rows}:
                store.drop_views(partition)
        changed = [
            (row, live[row[0]][0])
            for row, meta in zip(rows, read, strict=True)
            if row[0] in live and row_state(live[row[0]][1]) != row_state(meta)
        ]
        if changed:
            await _undo_changed(store, changed)
        result.skipped += len(changed)  # the rest still live: the next sweep completes them
        gone = [record for row_id, record, _ in rows if row_id not in live]
        result.archived += len(gone)
        result.partitions.update(record.partition for record in gone)


async def _still_live(store: MemoryStore, ids: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
    """``{id: (text, metadata)}`` of the rows among ``ids`` still in the live collection."""
    rows = await store.fetch_anywhere(ids)
    return {row.record.id: (row.record.content, row.metadata) for row in rows}


async def _undo_changed(
    store: MemoryStore, changed: Sequence[tuple[tuple[str, MemoryRecord, list[float]], str]]
) -> None:
    """Archive rows of memories another process changed between the sweep's read and its
    delete (the delete left them alone): the memory is live, so the row saved for it
    becomes what ``update_memory`` keeps, a previous version, when its text changed
    (unless that process kept it already), and is dropped otherwise."""
    versions = [(row, text) for row, text in changed if row[1].content != text]
    present = await store.archive.ids([history_id(row[1]) for row, _ in versions])
    for (_, record, vector), _ in versions:
        if history_id(record) not in present:
            await store.archive.save_version(record, vector, reason=REASON_UPDATED)
    await store.archive.remove([row[0] for row, _ in changed])


async def sweep(
    store: MemoryStore,
    lifetime: Lifetime,
    *,
    batch_size: int = 200,
    now: datetime | None = None,
    lease_ttl: float = SWEEP_LEASE_TTL,
    episodes: EpisodeStore | None = None,
) -> SweepResult:
    """Move every memory past its lifetime into the archive; what was done.

    ``lifetime`` is ``ConfigFile.lifetime_days``; ``now`` (aware) is for
    tests and defaults to the current UTC time. Raises on a Chroma error or
    while maintenance runs (``MaintenanceInProgress``): the batches done so far
    stay done, the rest is left for the next sweep, nothing is lost. Where other
    processes share the store, one sweeps at a time (a lease, ``lease_ttl``): the
    others raise :class:`SweepBusy`. ``episodes``: the conversation episodes expire too.
    """
    leases = store.coherence.leases
    if leases is None:
        return await _sweep(store, lifetime, batch_size, now, episodes)
    async with leases.attempt(sweep_lease(store), ttl=lease_ttl) as held:
        if not held:
            raise SweepBusy("另一个进程正在执行归档清理，本次跳过")
        return await _sweep(store, lifetime, batch_size, now, episodes)


async def _sweep_episodes(
    episodes: EpisodeStore, lifetime: Lifetime, batch_size: int, at: datetime
) -> int:
    """Archive the episodes past their lifetime (``0`` days: never); how many moved."""
    days = lifetime(EPISODE_IMPORTANCE)
    if days <= 0:
        return 0
    ended_before = (at - timedelta(days=days)).timestamp()
    moved = 0
    while True:
        done = await episodes.sweep_episodes(ended_before, at=at.timestamp(), limit=batch_size)
        moved += done
        if done < batch_size:
            return moved
        await asyncio.sleep(0)  # let chat turns run between batches


async def _sweep(
    store: MemoryStore,
    lifetime: Lifetime,
    batch_size: int,
    now: datetime | None,
    episodes: EpisodeStore | None = None,
) -> SweepResult:
    at = now or datetime.now(UTC)
    result = SweepResult()
    found = await _candidates(store, lifetime, at, result)
    for batch in _batches(found, max(batch_size, 1)):
        for start in range(0, len(batch), WRITE_CHUNK):
            began = time.monotonic()
            await _move(store, batch[start : start + WRITE_CHUNK], lifetime, at, result)
            await _rest(store, began)
        result.batches += 1
        await asyncio.sleep(0)  # let chat turns run between batches
    if episodes is not None:
        result.episodes = await _sweep_episodes(episodes, lifetime, max(batch_size, 1), at)
    if result.archived or result.episodes:
        logger.info(f"[Memory] 归档清理：{result.describe()}")
    return result
