"""Where the shared tables are reached: the bot's ORM session, or any async session factory."""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncSession

__all__ = ["SessionFactory", "orm_session", "wall_ms"]

SessionFactory = Callable[[], AsyncSession]
"""Opens one session (``async with factory() as session``)."""


def orm_session() -> AsyncSession:
    """A session of nonebot-plugin-orm (the bot's database: SQLite, PostgreSQL, …)."""
    from nonebot_plugin_orm import get_session

    return get_session()


def wall_ms() -> int:
    """Wall-clock milliseconds since the epoch (the time stored in the shared tables)."""
    return int(time.time() * 1000)
