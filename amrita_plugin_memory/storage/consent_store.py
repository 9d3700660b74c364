"""Per-user consent to active memory (``/memory auto on|off``) and its notice, in SQLite.

Active memory is on for everyone unless a user switched it off; the
opted-out ids are few, read on every answered turn and every recall, so they
are cached after the first read and the cache is replaced on every change.
Who was told once that the bot learns on its own is read only after an
extraction learned something, so it is not cached.
"""

from __future__ import annotations

from datetime import datetime

from nonebot_plugin_orm import get_session
from sqlalchemy import delete, select

from .models import ActiveMemoryNotice, ActiveMemoryOptOut, db_now

__all__ = ["ConsentStore"]


class ConsentStore:
    """Who opted out of active memory (learning and recall), and who was told of it."""

    def __init__(self) -> None:
        self._opted_out: set[str] | None = None

    async def _load(self) -> set[str]:
        if self._opted_out is None:
            async with get_session() as session:
                rows = (await session.scalars(select(ActiveMemoryOptOut.user_id))).all()
            self._opted_out = set(rows)
        return self._opted_out

    async def allows(self, user_id: str) -> bool:
        """Whether active memory may learn from and recall for ``user_id``."""
        return user_id not in await self._load()

    async def set_allowed(self, user_id: str, allowed: bool) -> bool:
        """Switch active memory on or off for ``user_id``; whether anything changed."""
        current = await self._load()
        if allowed == (user_id not in current):
            return False
        async with get_session() as session:
            if allowed:
                await session.execute(
                    delete(ActiveMemoryOptOut).where(ActiveMemoryOptOut.user_id == user_id)
                )
            else:
                session.add(ActiveMemoryOptOut(user_id=user_id, created_at=db_now()))
            await session.commit()
        self._opted_out = (current - {user_id}) if allowed else (current | {user_id})
        return True

    async def opted_out_since(self, user_id: str) -> datetime | None:
        """When ``user_id`` switched active memory off (``None``: it is on), read from
        the table (a user's export)."""
        async with get_session() as session:
            row = await session.get(ActiveMemoryOptOut, user_id)
            return row.created_at if row is not None else None

    async def noticed(self, user_id: str) -> bool:
        """Whether ``user_id`` was already told that the bot learns on its own."""
        async with get_session() as session:
            row = await session.get(ActiveMemoryNotice, user_id)
        return row is not None

    async def mark_noticed(self, user_id: str) -> None:
        async with get_session() as session:
            if await session.get(ActiveMemoryNotice, user_id) is None:
                session.add(ActiveMemoryNotice(user_id=user_id, created_at=db_now()))
                await session.commit()

    async def forget_notice(self, user_id: str) -> None:
        """Drop the notice row of ``user_id`` (their forget; the opt-out choice stays)."""
        async with get_session() as session:
            await session.execute(
                delete(ActiveMemoryNotice).where(ActiveMemoryNotice.user_id == user_id)
            )
            await session.commit()
