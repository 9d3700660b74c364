"""The change feed: every write of a partition is seen by every other process within a second.

Each process keeps partitions cached (counts, id lists, vectors:
:mod:`..partition.cache`; memos, opt-outs, personas, settings: :mod:`.keyed`).
Whatever writes a partition appends rows to the table
``amrita_plugin_memory_partition_change`` (:class:`~..models.PartitionChange`);
every process reads the rows newer than the last it saw, in a background task
every :data:`POLL_INTERVAL` seconds, and invalidates those partitions in its
caches (its own rows are skipped: its caches already follow its own writes).

**A write of Chroma: intent, then completion.** Chroma and the SQL database
cannot commit together, so a write of the memories announces itself twice,
inside its write section (:meth:`.coherence.Coherence.section`): an *intent*
row (``intent:<partition>``, :meth:`ChangeFeed.intend`), committed before the
Chroma write starts, and the plain row after it (:meth:`ChangeFeed.publish`,
the *completion*). A reader that sees an intent drops the partition at once and
again at every poll until the writer's completion arrives or
:data:`INTENT_TTL` seconds have passed, then once more. So a writer killed
between its Chroma write and its completion row leaves no process stale for
longer than one poll: while the intent is open nobody keeps the partition
cached, and when it expires the partition is read again, with whatever the
killed writer wrote. A write whose intent cannot be written is refused (the
others could not be told); a completion that cannot be written is logged (the
intent expires in its place).

**A write of a SQL table: in its own transaction.** A row cache's write (memo,
opt-out, persona, a group's setting, the self memory) adds its feed row to the
transaction of the data (:meth:`ChangeFeed.note`): both are committed together,
or neither.

**A row committed late is still applied.** Sequence numbers are handed out before
commit, so on PostgreSQL a row may become visible after a higher one. Every
number a poll skips over is remembered as a *gap* and read again by each poll
until its row appears or :data:`GAP_KEEP` seconds have passed (a rolled-back
insert never fills; our transactions end within
:data:`~.sessions.IDLE_LIMIT` + :data:`~.sessions.STATEMENT_LIMIT`, so a row
committing later than that does not exist). Rows of every collection are read
(only the sequence numbers of the others), so a gap is never another
collection's row.

**Reads.** Before a cached partition is used, :meth:`ChangeFeed.fresh` checks
when the last poll succeeded: older than :data:`MAX_LAG`, it polls first (so a
stalled poller never makes a read older than that). Only one poll runs at a
time and every reader that needs one waits for the same one: six turns arriving
together while the table is locked wait :data:`POLL_TIMEOUT` once, not six
times in a row. A failed poll clears the caches: the reads go to Chroma until
the feed answers again, never to stale rows. Rows older than :data:`KEEP_MS`
are pruned; a process that could not poll for half that long clears its
caches instead of trusting a feed with holes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from nonebot.log import logger
from sqlalchemy import delete, func, insert, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from ...core.text import short_error
from .sessions import (
    OPERATION_LIMIT,
    Detached,
    SessionFactory,
    SharedDatabaseError,
    bounded,
    orm_session,
    wall_ms,
)

__all__ = [
    "ALL_PARTITIONS",
    "GAP_KEEP",
    "INTENT_TTL",
    "MAX_LAG",
    "POLL_INTERVAL",
    "POLL_TIMEOUT",
    "ChangeFeed",
]

ALL_PARTITIONS = "*"
"""The partition of a change of the whole collection (every cached partition goes)."""

INTENT = "intent:"
"""Prefix of an intent row: a write of this partition has begun (see the module docstring)."""

POLL_INTERVAL = 0.25
"""Seconds between two polls of the background task."""

MAX_LAG = 0.75
"""A read polls first when the last successful poll is older than this (seconds)."""

POLL_TIMEOUT = 2.0
"""Seconds one poll may take before it counts as failed."""

WRITE_TIMEOUT = OPERATION_LIMIT
"""Seconds a writer waits for its feed rows (then the write is refused, or the failure logged)."""

INTENT_TTL = 30.0
"""Seconds an intent without its completion keeps its partition uncached in other processes."""

GAP_KEEP = 60.0
"""Seconds a skipped sequence number is read again before it counts as never committed."""

MAX_GAPS = 2048
"""Gaps remembered at most (more: every cache is cleared and the oldest are dropped)."""

BATCH = 500
"""Rows read per poll; more waiting than that and every cached partition goes."""

START_WINDOW = 32
"""Numbers below the newest at a process's first poll that are checked for gaps."""

KEEP_MS = 10 * 60 * 1000
"""Rows older than this are pruned (milliseconds)."""

PRUNE_EVERY = 60.0
"""Seconds between two prunes by one process."""

Invalidate = Callable[[str], None]
"""Drops one partition from a cache (:meth:`~..partition.cache.PartitionCache.invalidate`)."""


def intent_of(row: str) -> str | None:
    """The partition of an intent row (``None``: another row)."""
    return row[len(INTENT) :] if row.startswith(INTENT) else None


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
        """The highest sequence number read (``None``: never polled)."""
        self.polled_at = float("-inf")
        """When the last successful poll began (``clock``)."""
        self.polls = 0
        self.started = 0
        """Polls begun (tests read it: readers arriving together share one)."""
        self.applied = 0
        """Rows of other processes applied (tests and the measurements read them)."""
        self.gaps: dict[int, float] = {}
        """Sequence numbers skipped over, not yet committed: number → when first missed."""
        self.intents: dict[tuple[str, str], float] = {}
        """Open intents of other processes: (origin, partition) → when they stop counting."""
        self._caches: list[tuple[Invalidate, Callable[[], None]]] = []
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        """Ends the background task after its current poll (one per task: an event belongs
        to one loop, and a private loop's task is replaced by the bot loop's)."""
        self._work = Detached()
        self._flight: asyncio.Task[bool] | None = None
        """The poll now under way; every reader that needs a poll waits for it."""
        self._flight_no = 0
        self._reading: asyncio.Task[None] | None = None
        """The reading of the table now (it may outlive a poll that timed out)."""
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

    def _invalidate(self, partition: str) -> None:
        for invalidate, clear in self._caches:
            if partition == ALL_PARTITIONS:
                clear()
            else:
                invalidate(partition)

    # -- writes ----------------------------------------------------------------------

    def rows(self, partitions: Iterable[str], *, intent: bool = False) -> list[dict[str, Any]]:
        """The rows announcing ``partitions`` (as intents: a write begins)."""
        at = wall_ms()
        prefix = INTENT if intent else ""
        return [
            {
                "collection": self.collection,
                "partition": prefix + p,
                "origin": self.origin,
                "at_ms": at,
            }
            for p in sorted(set(partitions))
        ]

    async def note(self, session: AsyncSession, partitions: Iterable[str]) -> None:
        """Add the rows of ``partitions`` to ``session``'s transaction (committed with the
        data it changes: no window between the two)."""
        from ..models import PartitionChange  # lazily: importable without NoneBot

        rows = self.rows(partitions)
        if rows and not self.closed:
            await session.execute(insert(PartitionChange), rows)

    async def _insert(self, rows: list[dict[str, Any]]) -> None:
        from ..models import PartitionChange  # lazily: importable without NoneBot

        async with self.sessions() as session:
            await session.execute(insert(PartitionChange), rows)
            await session.commit()

    async def _write(self, rows: list[dict[str, Any]], what: str) -> None:
        if not rows or self.closed:
            return
        try:
            await bounded(self._work, self._insert(rows), WRITE_TIMEOUT)
        except TimeoutError:
            raise SharedDatabaseError(
                f"{what}：共享数据库 {WRITE_TIMEOUT:g} 秒内没有写入跨进程变更记录"
            ) from None

    async def publish(self, partitions: Iterable[str]) -> None:
        """Record that ``partitions`` changed (after the Chroma write, in its write section;
        waited for at most :data:`WRITE_TIMEOUT`)."""
        await self._write(self.rows(partitions), "记录分区变更")

    async def intend(self, partitions: Iterable[str]) -> None:
        """Record that a write of ``partitions`` begins (before the Chroma write): raises
        (:class:`~.sessions.SharedDatabaseError` or the database's error) when it cannot,
        and the write must then not be made."""
        await self._write(self.rows(partitions, intent=True), "记录即将写入的分区")

    # -- reads -----------------------------------------------------------------------

    async def fresh(self) -> None:
        """Before a cached partition is used: poll unless the last poll is recent enough
        (joining the poll under way, if any)."""
        if self.closed:
            return
        self._ensure_task()
        now = self.clock()
        if now - self.polled_at <= MAX_LAG:
            return
        if self._failing and now < self._retry_at:
            self._clear_all()  # the feed is down: Chroma answers every read
            return
        flight = self._flight
        if flight is None or flight.done() or flight.get_loop() is not asyncio.get_running_loop():
            flight = self._begin()
        await asyncio.shield(flight)

    async def poll(self) -> bool:
        """Apply every change of other processes committed before this call; whether that
        worked (a failure clears the caches and is logged once per outage).

        A poll already under way may have read the table before this call: it is
        waited for, then one more begins (shared with whoever else asks meanwhile).
        """
        flight = self._flight
        if (
            flight is not None
            and not flight.done()
            and flight.get_loop() is asyncio.get_running_loop()
        ):
            number = self._flight_no
            await asyncio.wait({flight})
            if self._flight_no != number and self._flight is not None:
                return await asyncio.shield(self._flight)  # begun after this call
        return await asyncio.shield(self._begin())

    def _begin(self) -> asyncio.Task[bool]:
        self._flight_no += 1
        self.started += 1
        self._flight = self._work.start(self._polled())
        return self._flight

    async def _polled(self) -> bool:
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
        """One reading of the table, waited for at most ``seconds`` in all (never cancelled:
        :mod:`.sessions`; a reading that outlives its poll is waited for by the next)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        earlier = self._reading
        if earlier is not None and not earlier.done():
            await asyncio.wait({earlier}, timeout=seconds)
            if not earlier.done():
                raise TimeoutError(f"上一次读取超过 {seconds:g} 秒仍未完成")
        self._reading = reading = self._work.start(self._poll_once())
        await asyncio.wait({reading}, timeout=max(deadline - loop.time(), 0.0))
        if not reading.done():
            raise TimeoutError(f"读取超过 {seconds:g} 秒未完成")
        reading.result()

    async def _poll_once(self) -> None:
        from ..models import PartitionChange as table  # lazily: importable without NoneBot

        if self.clock() - self.polled_at > KEEP_MS / 2000:
            self.last_seq = None  # rows may have been pruned meanwhile: start over
        async with self.sessions() as session:
            if self.last_seq is None:
                top = int(await session.scalar(select(func.max(table.seq))) or 0)
                floor = max(top - START_WINDOW, 0)
                seen = set(
                    (await session.scalars(select(table.seq).where(table.seq > floor))).all()
                )
                self._clear_all()
                self.last_seq, self.intents = top, {}
                self.gaps = {n: self.clock() for n in range(floor + 1, top + 1) if n not in seen}
                return
            wanted = table.seq > self.last_seq
            if self.gaps:
                wanted = or_(wanted, table.seq.in_(sorted(self.gaps)))
            query = (
                select(table.seq, table.collection, table.partition, table.origin)
                .where(wanted)
                .order_by(table.seq)
                .limit(BATCH)
            )
            rows = (await session.execute(query)).all()
        if len(rows) >= BATCH:  # far behind: this much is not worth applying one by one
            self._clear_all()
        self._advance([int(r[0]) for r in rows])
        for _seq, collection, partition, origin in rows:
            if collection == self.collection and origin != self.origin:
                self.applied += 1
                self._apply(origin, partition)
        self._tick_intents()

    def _advance(self, numbers: list[int]) -> None:
        """Move :attr:`last_seq` over ``numbers`` (read now), remembering the ones skipped."""
        assert self.last_seq is not None
        now = self.clock()
        for n in numbers:
            self.gaps.pop(n, None)
        top = max([self.last_seq, *numbers])
        got = set(numbers)
        self.gaps.update((n, now) for n in range(self.last_seq + 1, top + 1) if n not in got)
        self.last_seq = top
        for n in [n for n, at in self.gaps.items() if now - at > GAP_KEEP]:
            del self.gaps[n]
        if len(self.gaps) > MAX_GAPS:  # e.g. a sequence that jumped: trust nothing cached
            self._clear_all()
            for n in sorted(self.gaps)[: len(self.gaps) - MAX_GAPS]:
                del self.gaps[n]

    def _apply(self, origin: str, row: str) -> None:
        partition = intent_of(row)
        if partition is not None:  # a write begins: uncached until it ends
            self.intents[(origin, partition)] = self.clock() + INTENT_TTL
            self._invalidate(partition)
            return
        self.intents.pop((origin, row), None)
        self._invalidate(row)

    def _tick_intents(self) -> None:
        """Every open intent drops its partition again (a read since may have cached it
        while the write was landing); an expired one a last time, then no more."""
        now = self.clock()
        for key, until in list(self.intents.items()):
            if now >= until:
                del self.intents[key]
            self._invalidate(key[1])

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
                    await bounded(self._work, self.prune(), WRITE_TIMEOUT)
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
