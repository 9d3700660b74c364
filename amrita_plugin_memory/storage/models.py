"""ORM models owned by the plugin (tables created by the shipped migrations)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nonebot_plugin_orm import Model
from sqlalchemy import JSON, DateTime, String, Text
from sqlalchemy.orm import Mapped, mapped_column

__all__ = ["SubconsciousState", "UserMemo", "db_now"]


def db_now() -> datetime:
    """Current UTC time as stored in the tables (naive, as SQLite keeps it)."""
    return datetime.now(UTC).replace(tzinfo=None)


class UserMemo(Model):
    """L1 memo: one row per uni_id (a user's private key or a group's key)."""

    __tablename__ = "amrita_plugin_memory_user_memo"

    user_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    content: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=db_now)


class SubconsciousState(Model):
    """L3 loop state (``total_runs``, abstracts, pending messages, suggestions)."""

    __tablename__ = "amrita_plugin_memory_subconscious_state"

    uid: Mapped[str] = mapped_column(String(64), primary_key=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=db_now)
