"""One store kept coherent across processes: the write section and the checked read.

:class:`Coherence` bundles the change feed (:mod:`.feed`) and the leases
(:mod:`.leases`) of one collection. It is switched on where another process
can write the same Chroma store (remote mode); the embedded and the local
child-server modes belong to one process, so there it does nothing and costs
nothing.

The write section of a partition (:meth:`Coherence.section`) is, in order: the
write gate (maintenance of this process), the partition's asyncio lock (this
process), the partition's lease (every process; so a limit or a repeat is
decided by one writer at a time, wherever it runs), a poll of the feed (the
counts and vectors the decision reads include every write committed
elsewhere), the intent row (the others stop caching the partition until the
write ends; when it cannot be written the write is refused), the block, and
last the feed row naming the partition (written even when the block failed:
the Chroma write may have landed). Every step that reaches the database is
bounded (:mod:`.sessions`, :mod:`.leases`, :mod:`.feed`): the section ends,
or refuses, within its bounds; it never hangs inside the lock and the gate.

A row cache's write (memo, opt-out, persona, a group's setting, the self memory)
adds its feed row to its own transaction (:meth:`Coherence.note`), and its
other database work is waited for with a bound (:meth:`Coherence.run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from typing import Any, Protocol, TypeVar

from nonebot.log import logger
from sqlalchemy.ext.asyncio import AsyncSession

from ...core.config import EnvConfig
from ...core.text import short_error
from ...infra.gate import WriteGate
from ...infra.locks import PartitionLocks
from .feed import ALL_PARTITIONS, ChangeFeed
from .leases import Leases
from .sessions import SharedDatabaseError, SharedWork

__all__ = [
    "PARTITION_LEASE_TTL",
    "PARTITION_LEASE_WAIT",
    "SAFETY_EXPIRY",
    "Coherence",
    "forgotten_of",
    "forgotten_row",
    "setting_of",
    "setting_row",
]

T = TypeVar("T")

PARTITION_LEASE_TTL = 15.0
"""Seconds a partition's write lease lasts without renewal (a killed writer's, at most)."""

PARTITION_LEASE_WAIT = 30.0
"""Seconds a write waits for another process's partition lease before it gives up."""

EXCLUSIVE_WAIT = 10.0
"""Seconds a change of a shared setting or list waits for another process's (:meth:`Coherence.exclusive`)."""

SAFETY_EXPIRY = 600.0
"""Seconds a cached partition is trusted at most while the feed runs (a backstop for a
change whose feed row could not be written; without the feed the caches keep 60 s)."""


FORGOTTEN = "forgotten:"
"""Prefix of the feed row of a user's forget: what is no cache but data held in memory
(a group's window) drops the user when it sees it. Caches of partitions ignore it."""


def forgotten_row(partition: str) -> str:
    """The feed row that tells every process the user of ``partition`` was forgotten."""
    return FORGOTTEN + partition


def forgotten_of(row: str) -> str | None:
    """The partition of a forget row (``None``: another row)."""
    return row[len(FORGOTTEN) :] if row.startswith(FORGOTTEN) else None


SETTING = "setting:"
"""Prefix of the feed row of a run-time setting or list (a group's anonymisation switch,
the self memory): no partition, so the partition caches ignore it."""


def setting_row(kind: str, key: str = "") -> str:
    """The feed row telling every process that setting ``kind`` (of ``key``) changed."""
    return f"{SETTING}{kind}:{key}"


def setting_of(row: str, kind: str) -> str | None:
    """The key of a row of setting ``kind`` (``None``: another row)."""
    prefix = f"{SETTING}{kind}:"
    return row[len(prefix) :] if row.startswith(prefix) else None


class FollowingCache(Protocol):
    """A cache the feed invalidates (:class:`~..partition.cache.PartitionCache`)."""

    def invalidate(self, partition: str, /) -> None: ...

    def clear(self) -> None: ...


class Coherence:
    """The feed and the leases of one collection (both ``None``: one process owns it)."""

    def __init__(
        self, collection: str, feed: ChangeFeed | None = None, leases: Leases | None = None
    ) -> None:
        self.collection = collection
        self.feed = feed
        self.leases = leases
        self.work = SharedWork()
        """Other database work of the stores that follow this feed, each waited for with a
        bound (:meth:`run`)."""
        self._later: set[asyncio.Task[Any]] = set()

    @classmethod
    def remote(cls, env: EnvConfig, name: str) -> Coherence:
        """The feed and leases of collection ``name`` on the remote Chroma store of ``env``.

        Feed rows and lease names carry the store's scope (a hash of server, port,
        tenant and database): bots on other Chroma stores that share the SQL database
        never invalidate or wait for each other.
        """
        where = f"{env.vector_db_server}:{env.vector_db_port}/{env.vector_db_tenant}/{env.vector_db_database}"
        scope = hashlib.sha1(where.encode()).hexdigest()[:12]
        return cls(name, ChangeFeed(f"{scope}:{name}"), Leases(scope=scope))

    @property
    def active(self) -> bool:
        return self.feed is not None

    def follow(self, *caches: FollowingCache) -> None:
        if self.feed is not None:
            for cache in caches:
                self.feed.follow(cache.invalidate, cache.clear)

    def follow_with(self, invalidate: Callable[[str], None], clear: Callable[[], None]) -> None:
        """:meth:`follow` with the two calls given apart (a store whose own ``clear``
        means something else)."""
        if self.feed is not None:
            self.feed.follow(invalidate, clear)

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever another process changed any partition (a whole-store
        cache such as the console's partition scan)."""
        if self.feed is not None:
            self.feed.follow(lambda partition: callback(), callback)

    async def fresh(self) -> None:
        """Before a cached partition is read (:meth:`.feed.ChangeFeed.fresh`)."""
        if self.feed is not None:
            await self.feed.fresh()

    async def changed(self, partitions: Iterable[str]) -> None:
        """Tell the other processes that ``partitions`` changed (``*``: all)."""
        if self.feed is not None:
            await self.feed.publish(partitions)

    async def run(self, work: Coroutine[Any, Any, T], what: str) -> T:
        """``work`` on the shared tables, waited for with a bound (:class:`.sessions.SharedWork`:
        a :class:`~.sessions.SharedDatabaseError` naming ``what`` after it); one process
        (inactive): simply awaited."""
        if self.feed is None:
            return await work
        return await self.work.run(work, what)

    async def note(self, session: AsyncSession, partitions: Iterable[str]) -> None:
        """In the transaction of a row cache's write, before its commit: the feed rows
        telling the other processes, committed with the data (:meth:`.feed.ChangeFeed.note`)."""
        if self.feed is not None:
            await self.feed.note(session, partitions)

    @contextlib.asynccontextmanager
    async def exclusive(self, name: str, what: str) -> AsyncIterator[None]:
        """Hold lease ``name`` for the block when other processes share the store (a
        read-modify-write of a shared table: the self memory's size limit, a knowledge
        entry); nothing to take in one process."""
        if self.leases is None:
            yield
            return
        async with self.leases.hold(
            f"{self.collection}:{name}", ttl=PARTITION_LEASE_TTL, wait=EXCLUSIVE_WAIT, what=what
        ):
            yield

    async def announce(self, partitions: Iterable[str]) -> None:
        """:meth:`changed` after a committed write of a row cache (memo, consent, persona;
        :mod:`.keyed`): a failure is logged, the write stands (the others' entries expire)."""
        if self.feed is not None:
            await self._publish(sorted(set(partitions)))

    def changed_later(self, partitions: Iterable[str] = (ALL_PARTITIONS,)) -> None:
        """:meth:`changed` from synchronous code (a replaced collection); logged on failure."""
        if self.feed is None:
            return
        keys = list(partitions)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a CLI's end): the other processes see the new collection id

        async def send() -> None:
            try:
                await self.changed(keys)
            except Exception as exc:
                logger.warning(f"[Memory] 写入跨进程变更记录失败：{short_error(exc)}")

        task = loop.create_task(send())
        self._later.add(task)
        task.add_done_callback(self._later.discard)

    def lease_name(self, partition: str) -> str:
        return f"partition:{self.collection}:{partition}"

    @contextlib.asynccontextmanager
    async def section(
        self,
        gate: WriteGate,
        locks: PartitionLocks,
        partitions: Iterable[str],
        *,
        lease: bool = True,
    ) -> AsyncIterator[None]:
        """The write section of ``partitions`` (see the module docstring); locks and
        leases are taken in sorted order (nothing holds two otherwise)."""
        keys = sorted(set(partitions))
        async with gate.writing(), contextlib.AsyncExitStack() as stack:
            for key in keys:
                await stack.enter_async_context(locks.hold(key))
            if self.feed is None:
                yield
                return
            if lease and self.leases is not None:
                for key in keys:
                    await stack.enter_async_context(
                        self.leases.hold(
                            self.lease_name(key),
                            ttl=PARTITION_LEASE_TTL,
                            wait=PARTITION_LEASE_WAIT,
                            what=f"写入分区 {key}",
                        )
                    )
            await self.feed.poll()
            try:
                await self.feed.intend(keys)
            except Exception as exc:  # the others could not be told: nothing is written
                raise SharedDatabaseError(
                    f"写入分区 {', '.join(keys)} 未执行：无法通知其他进程（{short_error(exc)}）"
                ) from exc
            try:
                yield
            finally:  # also after an error: the Chroma write may have landed
                await self._publish(keys)

    async def _publish(self, keys: list[str]) -> None:
        """The feed row of a write section; a failure is logged (the write stands; other
        processes drop the partition until the section's intent expires)."""
        assert self.feed is not None
        try:
            await self.feed.publish(keys)
        except Exception as exc:
            logger.warning(f"[Memory] 写入跨进程变更记录失败：{short_error(exc)}")

    async def settled(self) -> None:
        """Wait for the rows :meth:`changed_later` is still writing."""
        for task in list(self._later):
            with contextlib.suppress(Exception):
                await task

    async def settle(self) -> None:
        """Before the event loop that ran this store ends (a private loop: the start-up
        check, a command): every database task it started here finishes first, the
        feed rows of :meth:`changed_later`, the feed's poller, lease renewals. Ending
        the loop would cancel them while they hold a connection (the interrupted
        rollback SQLAlchemy's pool reports), and a cancelled feed row never tells
        the other processes. The store keeps working on the next loop."""
        await self.settled()
        await self.work.settle()
        if self.feed is not None:
            await self.feed.settle()
        if self.leases is not None:
            await self.leases.settle()

    async def close(self) -> None:
        await self.settle()
        if self.feed is not None:
            await self.feed.close()
