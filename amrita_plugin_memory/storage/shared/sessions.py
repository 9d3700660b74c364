"""Where the shared tables are reached: the bot's ORM session, or any async session factory,
and the time limits of every statement the plugin runs there.

**Time limits.** Other processes share these tables (remote mode: several bots,
``ambot memory`` on one database), so a statement may meet a lock another
process holds: a peer frozen between its ``UPDATE`` and its ``COMMIT``, a
``VACUUM FULL`` or a migration holding a whole table. No statement of the
plugin waits for that without a bound. Every session the plugin opens
(:func:`orm_session`) sets limits at the start of each transaction:

* PostgreSQL, per transaction (``set_config(…, true)``, i.e. ``SET LOCAL``):
  ``lock_timeout`` :data:`LOCK_WAIT`, ``statement_timeout`` :data:`STATEMENT_LIMIT`,
  and ``idle_in_transaction_session_timeout`` :data:`IDLE_LIMIT` (a process of ours
  frozen inside a transaction has it ended by the server, so the locks it holds
  are released for the others);
* SQLite: the busy timeout, :data:`BUSY_WAIT` (how long a statement waits for
  another connection's write lock).

A statement over its limit fails with the database's own error; :func:`busy`
tells those apart ("not now") from other failures.

**Waits with a bound, never a cancelled statement.** The database-side limits
do not cover a connection that hangs (a server that stopped answering, a pool
that has no free connection). So a caller also waits with a time limit of its
own (:func:`bounded`, :class:`SharedWork`): the work runs in a task of its own
and the caller stops *waiting* when the limit passes; the work itself goes on
until its statement ends and releases its connection. Work is never cancelled
half-way: a task cancelled while it holds a connection (inside a statement, or
while the session closes and rolls back) leaves that connection to the garbage
collector, and SQLAlchemy's pool logs the interrupted rollback as an error with
its traceback. Work left running is kept in a :class:`Detached` set, which an
owner drains before its event loop ends (:meth:`Detached.settle`): ending a loop
cancels every task still on it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from ...core.errors import VectorStoreError

__all__ = [
    "BUSY_WAIT",
    "IDLE_LIMIT",
    "LOCK_WAIT",
    "OPERATION_LIMIT",
    "STATEMENT_LIMIT",
    "Detached",
    "SessionFactory",
    "SharedDatabaseError",
    "SharedWork",
    "bounded",
    "busy",
    "commit_one",
    "limited",
    "orm_session",
    "read_scalars",
    "rowcount",
    "wall_ms",
]

T = TypeVar("T")

LOCK_WAIT = 2.0
"""Seconds a PostgreSQL statement waits for a lock another transaction holds (``lock_timeout``)."""

STATEMENT_LIMIT = 5.0
"""Seconds one PostgreSQL statement may run (``statement_timeout``)."""

IDLE_LIMIT = 20.0
"""Seconds a transaction of ours may sit idle before PostgreSQL ends it (a frozen process's
locks are released; ``idle_in_transaction_session_timeout``)."""

BUSY_WAIT = 5.0
"""Seconds a SQLite statement waits for another connection's write lock (the busy timeout)."""

OPERATION_LIMIT = 8.0
"""Seconds a caller waits for one operation on the shared tables (a few statements) before
it is told the database did not answer (:class:`SharedWork`)."""

SessionFactory = Callable[[], AsyncSession]
"""Opens one session (``async with factory() as session``)."""

_PG_LIMITS = (
    f"SELECT set_config('lock_timeout', '{int(LOCK_WAIT * 1000)}', true),"
    f" set_config('statement_timeout', '{int(STATEMENT_LIMIT * 1000)}', true),"
    f" set_config('idle_in_transaction_session_timeout', '{int(IDLE_LIMIT * 1000)}', true)"
)
_SQLITE_LIMITS = f"PRAGMA busy_timeout = {int(BUSY_WAIT * 1000)}"

_BUSY_STATES = frozenset({"55P03", "57014", "40P01", "40001"})
"""PostgreSQL: lock not available (``lock_timeout``), query cancelled (``statement_timeout``),
deadlock, serialization failure."""


class SharedDatabaseError(VectorStoreError):
    """The shared tables did not answer in time (or refused); the message is meant for humans."""


def _set_limits(session: Any, transaction: Any, connection: Any) -> None:
    """``after_begin`` of one of the plugin's sessions: the limits of this transaction."""
    dialect = connection.dialect.name
    if dialect == "postgresql":
        connection.exec_driver_sql(_PG_LIMITS)
    elif dialect == "sqlite":
        connection.exec_driver_sql(_SQLITE_LIMITS)


def limited(session: AsyncSession) -> AsyncSession:
    """``session`` with the time limits of the module docstring set on each of its transactions
    (its own listener: sessions of Amrita or of migrations keep the database's defaults)."""
    event.listen(session.sync_session, "after_begin", _set_limits)
    return session


def orm_session() -> AsyncSession:
    """A session of nonebot-plugin-orm (the bot's database: SQLite, PostgreSQL, …), every
    transaction of it limited (:func:`limited`). The plugin opens no other kind."""
    from nonebot_plugin_orm import get_session

    return limited(get_session())


async def read_scalars(stmt: Any) -> list[Any]:
    """The first column of every row of one read, in an ORM session of its own."""
    async with orm_session() as session:
        return list((await session.scalars(stmt)).all())


async def commit_one(stmt: Any) -> int:
    """One change committed in an ORM session of its own; the rows it touched."""
    async with orm_session() as session:
        result = await session.execute(stmt)
        await session.commit()
    return rowcount(result)


def rowcount(result: Any) -> int:
    """The rows a statement's result says it touched (0 when the driver does not say)."""
    return int(getattr(result, "rowcount", 0) or 0)


def wall_ms() -> int:
    """Wall-clock milliseconds since the epoch (the time stored in the shared tables)."""
    return int(time.time() * 1000)


def busy(exc: BaseException) -> bool:
    """Whether a database error means "not now": a time limit or a lock wait hit, SQLite's
    database locked or busy, a deadlock. Worth retrying within the caller's own bound."""
    if not isinstance(exc, DBAPIError):
        return False
    if getattr(exc.orig, "sqlstate", None) in _BUSY_STATES:
        return True
    text = str(exc.orig if exc.orig is not None else exc).lower()
    return "database is locked" in text or "database is busy" in text


class Detached:
    """Database work that runs in tasks of its own, so that no caller can cancel it.

    A caller that stops waiting (its time limit passed, or it was cancelled)
    leaves the task running; the set keeps a reference until it ends.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        """Drop the reference; a failure nobody waited for any more (the wait ended first
        and reported it) counts as seen. Otherwise asyncio logs it, with its traceback,
        when the task is collected: at any moment, even inside another traceback's
        formatting, where Python 3.11 then fails the outer ``ast.parse``."""
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()

    @property
    def running(self) -> int:
        return sum(1 for task in self._tasks if not task.done())

    async def settle(self) -> None:
        """Wait until every task of this loop has ended (before the loop itself ends)."""
        loop = asyncio.get_running_loop()
        while pending := [t for t in self._tasks if not t.done() and t.get_loop() is loop]:
            await asyncio.wait(pending)


async def bounded(detached: Detached, work: Coroutine[Any, Any, T], seconds: float) -> T:
    """The result of ``work``, waited for at most ``seconds`` (then :class:`TimeoutError`).

    ``work`` runs in a task of ``detached``: neither the time limit nor a
    cancellation of the caller interrupts it, so it always releases its
    connection itself.
    """
    task = detached.start(work)
    done, _ = await asyncio.wait({task}, timeout=max(seconds, 0.0))
    if not done:
        raise TimeoutError(f"数据库操作超过 {seconds:g} 秒未完成")
    return task.result()


class SharedWork:
    """Operations on the shared tables, each waited for at most :data:`OPERATION_LIMIT`.

    What a caller is told when the limit passes or the database says "not now"
    (:func:`busy`) is a :class:`SharedDatabaseError` naming the operation: a write
    is refused with that reason, a read serves what is known and logs it. The
    operation itself is never cancelled (:func:`bounded`); it ends by the
    database's own limits, so a write reported as not confirmed may still land
    a few seconds later (the message says so).
    """

    def __init__(self, seconds: float = OPERATION_LIMIT) -> None:
        self.seconds = seconds
        self._work = Detached()

    async def run(self, work: Coroutine[Any, Any, T], what: str) -> T:
        try:
            return await bounded(self._work, work, self.seconds)
        except TimeoutError:
            raise SharedDatabaseError(
                f"{what}：共享数据库 {self.seconds:g} 秒内没有完成（若是写入，可能稍后才生效），请稍后重试"
            ) from None
        except DBAPIError as exc:
            if busy(exc):
                raise SharedDatabaseError(
                    f"{what}：共享数据库繁忙（等待锁或语句超过时限），请稍后重试"
                ) from exc
            raise

    @property
    def running(self) -> int:
        return self._work.running

    async def settle(self) -> None:
        await self._work.settle()
