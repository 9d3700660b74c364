"""The change feed: every write of a partition is seen by every other process within a second.

Each process keeps partitions cached (counts, id lists, vectors:
:mod:`..partition.cache`). Whatever writes a partition appends a row to the
table ``amrita_plugin_memory_partition_change`` (:class:`~..models.PartitionChange`)
after its Chroma write, still inside the partition's write section; every
process reads the rows newer than the last it saw, in a background task every
:data:`POLL_INTERVAL` seconds, and invalidates those partitions in its caches
(its own rows are skipped: its caches already follow its own writes).

Before a cached partition is used, :meth:`ChangeFeed.fresh` checks when the
last poll succeeded: older than :data:`MAX_LAG`, it polls first (so a stalled
poller never makes a read older than that). A failed poll clears the caches:
the reads go to Chroma until the feed answers again, never to stale rows.

Sequence numbers are handed out before commit, so on PostgreSQL a row may
become visible after a higher one; each poll therefore re-reads the last
:data:`REREAD` numbers (rows already applied are remembered and skipped).
Rows older than :data:`KEEP_MS` are pruned; a process that could not poll for
half that long clears its caches instead of trusting a feed with holes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable

from nonebot.log import logger
from sqlalchemy import delete, func, insert, select

from ...core.text import short_error
from .sessions import Detached, SessionFactory, orm_session, wall_ms

__all__ = ["ALL_PARTITIONS", "MAX_LAG", "POLL_INTERVAL", "ChangeFeed"]

ALL_PARTITIONS = "*"
"""The partition of a change of the whole collection (every cached partition goes)."""

POLL_INTERVAL = 0.25
"""Seconds between two polls of the background task."""

MAX_LAG = 0.75
"""A read polls first when the last successful poll is older than this (seconds)."""

POLL_TIMEOUT = 2.0
"""Seconds one poll may take before it counts as failed."""

BATCH = 500
"""Rows read per poll; more waiting than that and every cached partition goes."""

REREAD = 32
"""Sequence numbers re-read by each poll (rows committed out of order)."""

SEEN = 4096
"""Sequence numbers remembered as applied."""

KEEP_MS = 10 * 60 * 1000
"""Rows older than this are pruned (milliseconds)."""

PRUNE_EVERY = 60.0
"""Seconds between two prunes by one process."""

Invalidate = Callable[[str], None]
"""Drops one partition from a cache (:meth:`~..partition.cache.PartitionCache.invalidate`)."""


class ChangeFeed:
    """The feed of one collection, as one process writes and reads it."""

    def __init__(
        self,
        collection: str,
        *,
        sessions: SessionFactory = orm_session,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.collection = collection
        """The feed's key: the collection's name, prefixed by its store's scope."""
        self.sessions = sessions
        self.clock = clock
        self.origin = uuid.uuid4().hex
        """This process's token on the rows it writes."""
        self.last_seq: int | None = None
        """The highest sequence number applied (``None``: never polled)."""
        self.polled_at = float("-inf")
        """When the last poll succeeded (``clock``)."""
        self.polls = 0
        self.applied = 0
        """Rows of other processes applied (tests and the measurements read them)."""
        self._caches: list[tuple[Invalidate, Callable[[], None]]] = []
        self._seen: OrderedDict[int, None] = OrderedDict()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        """Ends the background task after its current poll (one per task: an event belongs
        to one loop, and a private loop's task is replaced by the bot loop's)."""
        self._work = Detached()
        self._polling: asyncio.Task[None] | None = None
        """The poll reading the table now (it may outlive a wait that timed out)."""
        self._pruned_at = float("-inf")
        self._failing = False
        self._retry_at = float("-inf")
        self.closed = False

    def follow(self, invalidate: Invalidate, clear: Callable[[], None]) -> None:
        """Have a cache follow the feed: ``invalidate(partition)``, ``clear()`` for everything."""
        self._caches.append((invalidate, clear))

    def _clear_all(self) -> None:
        for _, clear in self._caches:
            clear()

    # -- writes ----------------------------------------------------------------------

    async def publish(self, partitions: Iterable[str]) -> None:
        """Record that ``partitions`` changed (after the Chroma write, in its write section)."""
        from ..models import PartitionChange  # lazily: importable without NoneBot

        keys = sorted(set(partitions))
        if not keys or self.closed:
            return
        at = wall_ms()
        rows = [
            {"collection": self.collection, "partition": p, "origin": self.origin, "at_ms": at}
            for p in keys
        ]
        async with self.sessions() as session:
            await session.execute(insert(PartitionChange), rows)
            await session.commit()

    # -- reads -----------------------------------------------------------------------

    async def fresh(self) -> None:
        """Before a cached partition is used: poll unless the last poll is recent enough."""
        if self.closed:
            return
        self._ensure_task()
        now = self.clock()
        if now - self.polled_at <= MAX_LAG:
            return
        if self._failing and now < self._retry_at:
            self._clear_all()  # the feed is down: Chroma answers every read
            return
        await self.poll()

    async def poll(self) -> bool:
        """Apply every change of other processes committed so far; whether that worked
        (a failure clears the caches and is logged once per outage).

        The reading runs in a task of its own (:class:`.sessions.Detached`): a poll
        that takes longer than :data:`POLL_TIMEOUT` counts as failed, but is never
        interrupted half-way through its statement; the next poll first waits for it.
        """
        async with self._lock:
            began = self.clock()
            try:
                await self._read_within(POLL_TIMEOUT)
            except Exception as exc:
                self._clear_all()
                self._retry_at = self.clock() + MAX_LAG
                if not self._failing:
                    logger.warning(
                        f"[Memory] 读取跨进程变更记录失败，暂时每次直接读取向量库：{short_error(exc)}"
                    )
                self._failing = True
                return False
            if self._failing:
                logger.info("[Memory] 跨进程变更记录已恢复")
            self._failing = False
            self.polled_at = began
            self.polls += 1
            return True

    async def _read_within(self, seconds: float) -> None:
        """One reading of the table, waited for at most ``seconds`` in all."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        earlier = self._polling
        if earlier is not None and not earlier.done():  # a reading that outlived its wait
            await asyncio.wait({earlier}, timeout=seconds)
            if not earlier.done():
                raise TimeoutError(f"上一次读取超过 {seconds:g} 秒仍未完成")
        self._polling = reading = self._work.start(self._poll_once())
        await asyncio.wait({reading}, timeout=max(deadline - loop.time(), 0.0))
        if not reading.done():
            raise TimeoutError(f"读取超过 {seconds:g} 秒未完成")
        reading.result()

    async def _poll_once(self) -> None:
        from ..models import PartitionChange  # lazily: importable without NoneBot

        if self.clock() - self.polled_at > KEEP_MS / 2000:
            self.last_seq = None  # rows may have been pruned meanwhile: start over
        table = PartitionChange
        async with self.sessions() as session:
            if self.last_seq is None:
                top = await session.scalar(select(func.max(table.seq)))
                self._clear_all()
                self.last_seq = int(top or 0)
                return
            floor = max(self.last_seq - REREAD, 0)
            query = (
                select(table.seq, table.partition, table.origin)
                .where(table.seq > floor, table.collection == self.collection)
                .order_by(table.seq)
                .limit(BATCH)
            )
            rows = (await session.execute(query)).all()
        if len(rows) >= BATCH:  # far behind: start again from the newest row
            self._clear_all()
            self.last_seq = max(self.last_seq, int(rows[-1][0]))
            self._seen.clear()
            return
        for seq, partition, origin in rows:
            if seq in self._seen:
                continue
            self._seen[seq] = None
            if len(self._seen) > SEEN:
                self._seen.popitem(last=False)
            self.last_seq = max(self.last_seq, int(seq))
            if origin == self.origin:
                continue
            self.applied += 1
            for invalidate, clear in self._caches:
                if partition == ALL_PARTITIONS:
                    clear()
                else:
                    invalidate(partition)

    async def prune(self) -> None:
        """Delete rows older than :data:`KEEP_MS` (any process may; the table stays bounded)."""
        from ..models import PartitionChange  # lazily: importable without NoneBot

        async with self.sessions() as session:
            newest = select(func.max(PartitionChange.seq)).scalar_subquery()
            await session.execute(
                delete(PartitionChange).where(
                    PartitionChange.at_ms < wall_ms() - KEEP_MS, PartitionChange.seq < newest
                )
            )
            await session.commit()

    # -- the background task ------------------------------------------------------------

    def _ensure_task(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._stop = asyncio.Event()
            self._task = loop.create_task(self._run(self._stop))

    async def _run(self, stop: asyncio.Event) -> None:
        while not self.closed and not stop.is_set():
            await self.poll()
            if self.clock() - self._pruned_at > PRUNE_EVERY:
                self._pruned_at = self.clock()
                try:
                    await self.prune()
                except Exception as exc:
                    logger.debug(f"[Memory] 清理跨进程变更记录：{short_error(exc)}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_INTERVAL)

    async def settle(self) -> None:
        """Stop this loop's background task after its current poll and wait for every
        reading still running: before the event loop ends (a private loop's, or the
        bot's at shutdown), which would otherwise cancel them while they hold a
        connection. The next read on a running loop starts the task again."""
        task, stop = self._task, self._stop
        if task is not None and stop is not None and task.get_loop() is asyncio.get_running_loop():
            stop.set()
            await asyncio.wait({task})
            self._task = self._stop = None
        await self._work.settle()

    async def close(self) -> None:
        """Stop the background task for good (the runtime's shutdown)."""
        self.closed = True
        await self.settle()
