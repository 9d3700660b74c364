"""ORM models owned by the plugin (tables created by the shipped migrations)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nonebot_plugin_orm import Model, plugin_config
from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Integer, String, Text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Mapped, mapped_column

__all__ = [
    "ActiveMemoryNotice",
    "ActiveMemoryOptOut",
    "BotSelfMemory",
    "ForgottenUser",
    "GroupMemberLabel",
    "GroupMessage",
    "GroupSetting",
    "MemberPersona",
    "PartitionChange",
    "SharedDocument",
    "SharedLease",
    "SubconsciousState",
    "UserMemo",
    "db_now",
    "migrates_on",
    "missing_table",
]


def db_now() -> datetime:
    """Current UTC time as stored in the tables: naive (UTC implied).

    The columns are ``TIMESTAMP WITHOUT TIME ZONE``: SQLite would keep an aware value's
    offset as text, PostgreSQL's asyncpg refuses it (``can't subtract offset-naive and
    offset-aware datetimes``). Every datetime written through the ORM comes from here
    (or from another naive UTC value read back from a table).
    """
    return datetime.now(UTC).replace(tzinfo=None)


def migrates_on(name: str) -> bool:
    """Whether a migration run for the database ``name`` (nonebot_plugin_orm's bind key,
    ``""`` the default) must create the plugin's tables.

    nonebot_plugin_orm puts the plugin's models on ``SQLALCHEMY_BINDS["amrita_plugin_memory"]``
    when that key is set, else on the default database (``_init_table``); with any bind
    set, ``ambot orm upgrade`` runs every revision once per database, ``name`` telling which.
    """
    key = str(UserMemo.__table__.info.get("bind_key", ""))
    return name == (key if key in plugin_config.sqlalchemy_binds else "")


def missing_table(exc: BaseException) -> bool:
    """Whether a database error says that a table does not exist (no migration ran there)."""
    if not isinstance(exc, DBAPIError):
        return False
    if "no such table" in str(exc):  # SQLite
        return True
    return getattr(exc.orig, "sqlstate", None) == "42P01"  # PostgreSQL: undefined_table


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


class GroupMessage(Model):
    """Group window (Openmim L1): one row per persisted message of a group's rolling window."""

    __tablename__ = "amrita_plugin_memory_group_message"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    group_id: Mapped[str] = mapped_column(String(32), index=True)
    user_id: Mapped[str] = mapped_column(String(32))
    nickname: Mapped[str] = mapped_column(String(64), default="")
    is_bot: Mapped[bool] = mapped_column(Boolean, default=False)
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=db_now)


class GroupSetting(Model):
    """Per-group switches; ``anonymize`` ``None`` follows ``[group_context] anonymize``."""

    __tablename__ = "amrita_plugin_memory_group_setting"

    group_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    anonymize: Mapped[bool | None] = mapped_column(Boolean, nullable=True, default=None)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=db_now)


class GroupMemberLabel(Model):
    """The anonymous label (``用户_1234``) of a member in one group, fixed once given."""

    __tablename__ = "amrita_plugin_memory_group_label"

    group_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    label: Mapped[str] = mapped_column(String(64))


class MemberPersona(Model):
    """A member's persona (Openmim L2), per user id across groups; ``learning_off``: opted out."""

    __tablename__ = "amrita_plugin_memory_persona"

    user_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    fields: Mapped[list[Any]] = mapped_column(JSON, default=list)
    learning_off: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=db_now)


class BotSelfMemory(Model):
    """One entry of the bot's self memory (Openmim L3), kept by superusers."""

    __tablename__ = "amrita_plugin_memory_self_memory"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    content: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=db_now)


class ActiveMemoryOptOut(Model):
    """A user who switched active memory off (``/memory auto off``); no row = on."""

    __tablename__ = "amrita_plugin_memory_active_optout"

    user_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=db_now)


class ActiveMemoryNotice(Model):
    """A user who was told that the bot learns on its own (the one-time notice)."""

    __tablename__ = "amrita_plugin_memory_active_notice"

    user_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=db_now)


class PartitionChange(Model):
    """The change feed: one row per write of a partition, read by every other process
    (``storage/shared/feed``); ``partition`` ``*`` is every partition of the collection."""

    __tablename__ = "amrita_plugin_memory_partition_change"
    __table_args__ = ({"sqlite_autoincrement": True},)  # no number reused after a prune

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    collection: Mapped[str] = mapped_column(String(128))
    partition: Mapped[str] = mapped_column(String(255))
    origin: Mapped[str] = mapped_column(String(64))
    """The writing process (its feed's token): it skips its own rows."""
    at_ms: Mapped[int] = mapped_column(BigInteger, index=True)
    """Wall-clock milliseconds since the epoch (old rows are pruned by it)."""


class SharedLease(Model):
    """A lease held by one process until ``expires_ms`` (``storage/shared/leases``): a
    partition's write section, the archive sweep, an L3 cycle. A killed holder's lease
    simply expires."""

    __tablename__ = "amrita_plugin_memory_lease"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64))
    expires_ms: Mapped[int] = mapped_column(BigInteger)


class ForgottenUser(Model):
    """A forget's tombstone, seen by every process (``storage/users/tombstones``; the
    file in the data dir is kept beside it for offline restores)."""

    __tablename__ = "amrita_plugin_memory_forgotten_user"

    user_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    partition: Mapped[str] = mapped_column(String(255), default="")
    at_us: Mapped[int] = mapped_column(BigInteger)
    """When the user was last forgotten: microseconds since the epoch (UTC)."""


class SharedDocument(Model):
    """A text document that is a file in the data directory of a single process, kept here
    when several processes share the store (``storage/shared/documents``): an entry of
    the L3 knowledge base (``kind`` ``knowledge``, ``name`` its kid, the entry's file
    text), the L3 loop's user profile (``kind`` ``profile``)."""

    __tablename__ = "amrita_plugin_memory_document"

    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    content: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=db_now)
