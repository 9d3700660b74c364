"""Leases across processes: one holder at a time, and a killed holder never blocks the others.

A lease is a row of ``amrita_plugin_memory_lease`` (:class:`~..models.SharedLease`):
its name, its holder and when it expires. Taking it is one portable statement
(``UPDATE … WHERE name = … AND expires_ms < now``; on no row, an ``INSERT`` that
fails with an integrity error when another process inserted first), so it works
on SQLite and PostgreSQL alike. While held it is renewed every third of its
``ttl``; it is deleted when released. A holder killed with ``kill -9`` stops
renewing: its lease expires after at most ``ttl`` seconds and the next process
takes it.

Every holder gets its own token, so two holds in one process exclude each
other too. Waits are bounded: :meth:`Leases.hold` raises :class:`LeaseTimeout`
(a :class:`~...core.errors.VectorStoreError`, its message meant for humans)
after ``wait`` seconds, whatever the database does meanwhile. Waiting polls the
row (portable; no event crosses processes), every :data:`RETRY_MIN` seconds at
first, backing off to :data:`RETRY_MAX`.

A peer frozen between its ``UPDATE`` of the row and its ``COMMIT`` holds the
row's lock: our statement then gives up after the session's lock limit
(:data:`~.sessions.LOCK_WAIT`, counted as "not now"), and each attempt is also
waited for at most the time left (:func:`~.sessions.bounded`). An attempt still
running when the wait ends is left to finish (never cancelled); if it took the
lease after all, the lease is released at once. The renewals and the release
are bounded the same way: leaving the block never waits more than
:data:`RELEASE_WAIT` (a release that did not happen expires by itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import AsyncIterator

from nonebot.log import logger
from sqlalchemy import delete, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from ...core.errors import VectorStoreError
from ...core.text import short_error
from .sessions import OPERATION_LIMIT, Detached, SessionFactory, bounded, busy, orm_session, wall_ms

__all__ = ["LeaseTimeout", "Leases", "SharedTablesUnavailable"]

RETRY_MIN = 0.02
RETRY_MAX = 0.25

RELEASE_WAIT = 2.0
"""Seconds the end of a held block waits for the last renewal and the release."""


class LeaseTimeout(VectorStoreError):
    """Another process held the lease for longer than the wait allowed."""


class SharedTablesUnavailable(VectorStoreError):
    """The shared tables cannot be used (not created yet: ``ambot orm upgrade``)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"跨进程共享的数据表不可用（请先执行 ambot orm upgrade）：{detail}")


class Leases:
    """The leases of one process (tokens ``<process>:<n>``)."""

    def __init__(self, *, sessions: SessionFactory = orm_session, scope: str = "") -> None:
        self.sessions = sessions
        self.scope = scope
        """Prefix of every lease name (the Chroma store, :meth:`.coherence.Coherence.remote`)."""
        self.process = uuid.uuid4().hex[:16]
        self._numbers = itertools.count(1)
        self.taken = 0
        """Leases taken (tests read it)."""
        self._work = Detached()
        """Renewals and releases: never cancelled half-way (:mod:`.sessions`)."""

    def token(self) -> str:
        return f"{self.process}:{next(self._numbers)}"

    def _name(self, name: str) -> str:
        return f"{self.scope}:{name}" if self.scope else name

    async def try_take(self, name: str, holder: str, ttl: float) -> bool:
        """Take ``name`` for ``holder`` if it is free or expired; whether it was taken."""
        from ..models import SharedLease  # lazily: importable without NoneBot

        name = self._name(name)
        now = wall_ms()
        expires = now + int(ttl * 1000)
        async with self.sessions() as session:
            res = await session.execute(
                update(SharedLease)
                .where(SharedLease.name == name, SharedLease.expires_ms < now)
                .values(holder=holder, expires_ms=expires)
            )
            if getattr(res, "rowcount", 0) == 1:
                await session.commit()
                return True
            await session.rollback()
        try:
            async with self.sessions() as session:
                session.add(SharedLease(name=name, holder=holder, expires_ms=expires))
                await session.commit()
        except IntegrityError:
            return False
        return True

    async def _try(self, name: str, holder: str, ttl: float) -> bool:
        """:meth:`try_take`, a busy database (SQLite's lock between processes) counting as
        "not now" (the wait goes on within its bound); any other database error is
        :class:`SharedTablesUnavailable`."""
        try:
            return await self.try_take(name, holder, ttl)
        except DBAPIError as exc:
            if busy(exc):
                logger.debug(f"[Memory] 租约 {name}：数据库忙，稍后重试：{short_error(exc)}")
                return False
            raise SharedTablesUnavailable(short_error(exc)) from exc

    async def _try_within(self, name: str, holder: str, ttl: float, seconds: float) -> bool:
        """:meth:`_try`, waited for at most ``seconds``; an attempt that takes the lease after
        its wait ended releases it again (nobody holds it)."""
        attempt = self._work.start(self._try(name, holder, ttl))
        done, _ = await asyncio.wait({attempt}, timeout=max(seconds, 0.0))
        if done:
            return attempt.result()

        def late(task: asyncio.Task[bool]) -> None:
            if not task.cancelled() and task.exception() is None and task.result():
                self._work.start(self._release_quietly(name, holder))

        attempt.add_done_callback(late)
        return False

    async def _release_quietly(self, name: str, holder: str) -> None:
        try:
            await self.release(name, holder)
        except Exception as exc:  # it expires by itself
            logger.warning(f"[Memory] 释放租约 {name} 失败（将自动过期）：{short_error(exc)}")

    async def renew(self, name: str, holder: str, ttl: float) -> bool:
        """Move the expiry of a held lease forward; ``False`` if it was lost (expired, taken)."""
        from ..models import SharedLease  # lazily: importable without NoneBot

        name = self._name(name)
        async with self.sessions() as session:
            res = await session.execute(
                update(SharedLease)
                .where(SharedLease.name == name, SharedLease.holder == holder)
                .values(expires_ms=wall_ms() + int(ttl * 1000))
            )
            await session.commit()
            return getattr(res, "rowcount", 0) == 1

    async def release(self, name: str, holder: str) -> None:
        from ..models import SharedLease  # lazily: importable without NoneBot

        name = self._name(name)
        async with self.sessions() as session:
            await session.execute(
                delete(SharedLease).where(SharedLease.name == name, SharedLease.holder == holder)
            )
            await session.commit()

    async def _keep(self, name: str, holder: str, ttl: float, stop: asyncio.Event) -> None:
        """Renew every third of ``ttl`` until ``stop`` is set (never cancelled: a renewal
        under way finishes and releases its connection)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), ttl / 3)
            if stop.is_set():
                return
            try:
                if not await bounded(self._work, self.renew(name, holder, ttl), ttl / 3):
                    logger.warning(f"[Memory] 租约 {name} 已失效（续期时已被其他进程取得）")
                    return
            except Exception as exc:
                logger.warning(f"[Memory] 租约 {name} 续期失败，稍后重试：{short_error(exc)}")

    async def _end(self, keeper: asyncio.Task[None], name: str, holder: str) -> None:
        """After the block: the keeper's last renewal, then the release."""
        await asyncio.wait({keeper})
        await self._release_quietly(name, holder)

    @contextlib.asynccontextmanager
    async def _held(self, name: str, holder: str, ttl: float) -> AsyncIterator[None]:
        """The block of a taken lease: renewed meanwhile, released after. The keeper
        and the release run as :class:`.sessions.Detached` work, so a holder
        cancelled in the block still releases (without waiting for it)."""
        self.taken += 1
        stop = asyncio.Event()
        keeper = self._work.start(self._keep(name, holder, ttl, stop))
        try:
            yield
        finally:
            stop.set()
            end = self._work.start(self._end(keeper, name, holder))
            await asyncio.wait({end}, timeout=RELEASE_WAIT)  # not cancellable, bounded
            if not end.done():
                logger.warning(
                    f"[Memory] 释放租约 {name} 超过 {RELEASE_WAIT:g} 秒未完成（继续在后台进行，否则自动过期）"
                )

    @contextlib.asynccontextmanager
    async def hold(self, name: str, *, ttl: float, wait: float, what: str) -> AsyncIterator[None]:
        """Hold ``name`` for the block: wait at most ``wait`` seconds (then :class:`LeaseTimeout`
        naming ``what``), renewed while held, released after."""
        holder = self.token()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        pause = RETRY_MIN
        while not await self._try_within(name, holder, ttl, deadline - loop.time()):
            if loop.time() + pause > deadline:
                raise LeaseTimeout(
                    f"{what}：另一个进程一直占用（等待 {wait:g} 秒后放弃），请稍后重试"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_MAX)
        async with self._held(name, holder, ttl):
            yield

    @contextlib.asynccontextmanager
    async def attempt(self, name: str, *, ttl: float) -> AsyncIterator[bool]:
        """Hold ``name`` for the block if it is free now: yields whether it is held (no wait)."""
        holder = self.token()
        if not await self._try_within(name, holder, ttl, OPERATION_LIMIT):
            yield False
            return
        async with self._held(name, holder, ttl):
            yield True

    async def settle(self) -> None:
        """Wait for the renewals and releases still running (before the event loop ends)."""
        await self._work.settle()
