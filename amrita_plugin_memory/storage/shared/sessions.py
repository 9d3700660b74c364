"""Where the shared tables are reached: the bot's ORM session, or any async session factory.

Database work is never cancelled half-way. A task cancelled while it holds a
connection (inside a statement, or while the session closes and rolls back)
leaves that connection to the garbage collector, and SQLAlchemy's pool logs
the interrupted rollback as an error with its traceback. So a wait with a
time limit (:func:`bounded`) runs the work in a task of its own and stops
*waiting* when the limit passes; the work itself goes on until its statement
ends and releases its connection. Work left running that way is kept in a
:class:`Detached` set, which an owner drains before its event loop ends
(:meth:`Detached.settle`): ending a loop cancels every task still on it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

__all__ = ["Detached", "SessionFactory", "bounded", "orm_session", "wall_ms"]

T = TypeVar("T")

SessionFactory = Callable[[], AsyncSession]
"""Opens one session (``async with factory() as session``)."""


def orm_session() -> AsyncSession:
    """A session of nonebot-plugin-orm (the bot's database: SQLite, PostgreSQL, …)."""
    from nonebot_plugin_orm import get_session

    return get_session()


def wall_ms() -> int:
    """Wall-clock milliseconds since the epoch (the time stored in the shared tables)."""
    return int(time.time() * 1000)


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
        task.add_done_callback(self._tasks.discard)
        return task

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
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        raise TimeoutError(f"数据库操作超过 {seconds:g} 秒未完成")
    return task.result()
