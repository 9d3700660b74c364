"""Per-user consent to active memory (``/memory auto on|off``) and its notice, in SQLite.

Active memory is on for everyone unless a user switched it off; the
opted-out ids are few, read on every answered turn and every recall, so they
are cached after the first read and the cache is replaced on every change.
Who was told once that the bot learns on its own is read only after an
extraction learned something, so it is not cached.

In remote mode (:meth:`ConsentStore.share`) other bots switch the same rows: a
change commits a change-feed row for the user's personal partition with it (in
its transaction), and a feed row for a user's partition makes the next check of that user
read their row again (a whole-store row or a failed poll: every row). A check
first lets the feed catch up, so ``/memory auto off`` through one bot stops the
others within about a second; the fence of background work reads the row itself
(:meth:`ConsentStore.allows_now`).

Every operation's database work is waited for at most the bound of the store's
:class:`~.shared.sessions.SharedWork` (local mode too: a chat turn's check never waits
for ever on a database that stopped answering); past it the caller gets a
:class:`~.shared.sessions.SharedDatabaseError`.
"""

from __future__ import annotations

import time
from datetime import datetime

from sqlalchemy import delete, select

from .keys import user_key, user_of_key
from .models import ActiveMemoryNotice, ActiveMemoryOptOut, db_now
from .scope import UserView
from .shared.coherence import SAFETY_EXPIRY, Coherence
from .shared.sessions import SharedWork, orm_session

__all__ = ["ConsentStore"]


async def _opted_out() -> set[str]:
    async with orm_session() as session:
        return set((await session.scalars(select(ActiveMemoryOptOut.user_id))).all())


async def _has_row(user_id: str) -> bool:
    async with orm_session() as session:
        return await session.get(ActiveMemoryOptOut, user_id) is not None


RECHECKS = 4096
"""Users whose row is to be read again, at most; more and the whole set is read again."""


class ConsentStore:
    """Who opted out of active memory (learning and recall), and who was told of it."""

    def __init__(self, work: SharedWork | None = None) -> None:
        self.work = work or SharedWork()
        """Bounds every operation's wait (the runtime's one instance)."""
        self._opted_out: set[str] | None = None
        self._loaded_at = 0.0
        self._recheck: set[str] = set()
        """Users another process may have switched: their row is read at their next check."""
        self._generation = 0
        """Moved on by every invalidation: a read under way then caches nothing."""
        self.coherence = Coherence(ActiveMemoryOptOut.__tablename__)
        self.ttl: float | None = None

    def share(self, coherence: Coherence) -> None:
        """Follow other processes' switches (remote mode)."""
        self.coherence = coherence
        coherence.follow(self)
        self.ttl = SAFETY_EXPIRY

    def invalidate(self, partition: str) -> None:
        """A feed row for ``partition``: a user's partition makes their row be read again."""
        user_id = user_of_key(partition)
        if user_id is None:
            return  # a group's partition: no consent is kept for it
        self._generation += 1
        self._recheck.add(user_id)
        if len(self._recheck) > RECHECKS:
            self.clear()

    def clear(self) -> None:
        self._generation += 1
        self._opted_out = None
        self._recheck.clear()

    async def _load(self) -> set[str]:
        expired = self.ttl is not None and time.monotonic() - self._loaded_at > self.ttl
        if self._opted_out is None or expired:
            generation = self._generation
            rows = await self.work.run(_opted_out(), "读取自动记忆开关")
            if generation != self._generation:
                return rows  # invalidated meanwhile: used once, not cached
            self._opted_out, self._loaded_at = rows, time.monotonic()
            self._recheck.clear()
        return self._opted_out

    async def _row(self, user_id: str) -> bool:
        """Whether ``user_id`` has an opt-out row (read now)."""
        return await self.work.run(_has_row(user_id), "读取自动记忆开关")

    async def allows(self, view: UserView) -> bool:
        """Whether active memory may learn from and recall for the user of ``view``."""
        user_id = UserView.check(view).user_id
        await self.coherence.fresh()
        opted_out = await self._load()
        if user_id in self._recheck:
            generation = self._generation
            out = await self._row(user_id)
            if generation == self._generation and self._opted_out is opted_out:
                self._recheck.discard(user_id)
                (opted_out.add if out else opted_out.discard)(user_id)
            return not out
        return user_id not in opted_out

    async def allows_now(self, view: UserView) -> bool:
        """:meth:`allows`, read from the table when other processes may switch it (the
        fence of background work, checked right before its write)."""
        if not self.coherence.active:
            return await self.allows(view)
        return not await self._row(UserView.check(view).user_id)

    async def set_allowed(self, view: UserView, allowed: bool) -> bool:
        """Switch active memory on or off for the user of ``view``; whether anything changed."""
        user_id = UserView.check(view).user_id
        await self._load()
        if self.coherence.active:
            was_allowed = not await self._row(user_id)
        else:
            was_allowed = await self.allows(view)
        if allowed == was_allowed:
            return False
        await self.work.run(self._switch(user_id, allowed), "修改自动记忆开关")
        self._generation += 1
        self._recheck.discard(user_id)
        if self._opted_out is not None:
            (self._opted_out.discard if allowed else self._opted_out.add)(user_id)
        return True

    async def _switch(self, user_id: str, allowed: bool) -> None:
        """The row changed, its feed row committed with it (:meth:`Coherence.note`)."""
        async with orm_session() as session:
            if allowed:
                await session.execute(
                    delete(ActiveMemoryOptOut).where(ActiveMemoryOptOut.user_id == user_id)
                )
            else:
                session.add(ActiveMemoryOptOut(user_id=user_id, created_at=db_now()))
            await self.coherence.note(session, [user_key(user_id)])
            await session.commit()

    async def opted_out_since(self, view: UserView) -> datetime | None:
        """When the user of ``view`` switched active memory off (``None``: it is on), read
        from the table (a user's export)."""
        user_id = UserView.check(view).user_id
        return await self.work.run(_opted_out_at(user_id), "读取自动记忆开关")

    async def noticed(self, view: UserView) -> bool:
        """Whether the user of ``view`` was already told that the bot learns on its own."""
        user_id = UserView.check(view).user_id
        return await self.work.run(_noticed(user_id), "读取主动记忆提示记录")

    async def mark_noticed(self, user_id: str) -> None:
        await self.work.run(_mark_noticed(user_id), "写入主动记忆提示记录")

    async def forget_notice(self, user_id: str) -> None:
        """Drop the notice row of ``user_id`` (their forget; the opt-out choice stays)."""
        await self.work.run(_forget_notice(user_id), "删除主动记忆提示记录")


async def _opted_out_at(user_id: str) -> datetime | None:
    async with orm_session() as session:
        row = await session.get(ActiveMemoryOptOut, user_id)
        return row.created_at if row is not None else None


async def _noticed(user_id: str) -> bool:
    async with orm_session() as session:
        row = await session.get(ActiveMemoryNotice, user_id)
    return row is not None


async def _mark_noticed(user_id: str) -> None:
    async with orm_session() as session:
        if await session.get(ActiveMemoryNotice, user_id) is None:
            session.add(ActiveMemoryNotice(user_id=user_id, created_at=db_now()))
            await session.commit()


async def _forget_notice(user_id: str) -> None:
    async with orm_session() as session:
        await session.execute(
            delete(ActiveMemoryNotice).where(ActiveMemoryNotice.user_id == user_id)
        )
        await session.commit()
