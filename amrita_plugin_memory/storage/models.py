"""ORM models owned by the plugin (tables created by the shipped migrations)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nonebot_plugin_orm import Model, plugin_config
from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Index, Integer, String, Text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Mapped, mapped_column

__all__ = [
    "ActiveMemoryNotice",
    "ActiveMemoryOptOut",
    "BotSelfMemory",
    "Episode",
    "EpisodeLineRow",
    "EpisodeMember",
    "ForgottenUser",
    "GroupMemberLabel",
    "GroupMessage",
    "GroupSetting",
    "LoopItem",
    "MemberPersona",
    "PartitionChange",
    "SharedDocument",
    "SharedLease",
    "SubconsciousState",
    "UsageDay",
    "UserMemo",
    "UserVoid",
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
    """L3 loop state: ``{"total_runs": n}`` (its items are rows of :class:`LoopItem`)."""

    __tablename__ = "amrita_plugin_memory_subconscious_state"

    uid: Mapped[str] = mapped_column(String(64), primary_key=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=db_now)


class GroupMessage(Model):
    """Group window (Openmim L1): one row per persisted message of a group's rolling window."""

    __tablename__ = "amrita_plugin_memory_group_message"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    group_id: Mapped[str] = mapped_column(String(32), index=True)
    user_id: Mapped[str] = mapped_column(String(32), index=True)
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
    """The anonymous label (``用户_1234``) of a member in one group, fixed once given; one
    label names one member of a group (a unique index: bots on one database never give
    two members the same label, ``storage/groups/directory``)."""

    __tablename__ = "amrita_plugin_memory_group_label"
    __table_args__ = (
        Index("ix_amrita_plugin_memory_group_label_unique", "group_id", "label", unique=True),
    )

    group_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(32), primary_key=True, index=True)
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


class LoopItem(Model):
    """One item of an L3 loop's state (``storage/users/loop_state_row``): a message waiting
    for the target user, a cycle's abstract or a knowledge suggestion. One row each, so a
    process changes only the items it changed and never writes back one another erased."""

    __tablename__ = "amrita_plugin_memory_loop_item"
    __table_args__ = (
        Index("ix_amrita_plugin_memory_loop_item_unique", "loop", "kind", "item_id", unique=True),
        {"sqlite_autoincrement": True},
    )

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    """The items' order (oldest first)."""
    loop: Mapped[str] = mapped_column(String(64))
    """The loop's state uid (:class:`SubconsciousState`)."""
    kind: Mapped[str] = mapped_column(String(16))
    """``pending``, ``abstract`` or ``suggestion``."""
    item_id: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(String(64), default="")
    """Whose it is (``""``: the loop's target user, items converted from the old document)."""
    since_us: Mapped[int] = mapped_column(BigInteger, default=0)
    """When the work that made it began (a cycle's start), microseconds since the epoch:
    a forget of its user at or after this time buries it."""
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class UserVoid(Model):
    """When a user last switched some learning off (``kind``: ``active``, ``/memory auto off``;
    ``persona``, ``/memory persona off``): background work on what they said before is void
    in every process (``storage/users/fences``), even after they switch it on again."""

    __tablename__ = "amrita_plugin_memory_user_void"

    user_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    at_us: Mapped[int] = mapped_column(BigInteger)
    """Microseconds since the epoch (UTC); only ever moved forward."""


class UsageDay(Model):
    """One local day of what the plugin's own model requests cost, per feature and user
    (``storage/usage/ledger``): extraction, persona, the L3 loop. Rows whose ``feature``
    starts with ``block:`` (and ``chat``) count what the blocks add to chat turns instead,
    with ``user_id`` empty. Every process adds to the rows with ``x = x + n``, never a
    read-modify-write."""

    __tablename__ = "amrita_plugin_memory_usage"

    day: Mapped[str] = mapped_column(String(10), primary_key=True)
    """The local date, ``YYYY-MM-DD``."""
    feature: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)
    requests: Mapped[int] = mapped_column(BigInteger, default=0)
    """Model requests (for a block: the chat turns that carried it)."""
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    estimated: Mapped[int] = mapped_column(BigInteger, default=0)
    """Requests whose tokens were estimated from characters (the provider reported none)."""
    chars: Mapped[int] = mapped_column(BigInteger, default=0)
    """Characters a block added to chat turns (0 for model requests)."""


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


class EpisodeLineRow(Model):
    """A message of a conversation that has not ended yet (issue #48): kept until its
    episode is made, then removed in the transaction that stores the episode."""

    __tablename__ = "amrita_plugin_memory_episode_line"
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    chat: Mapped[str] = mapped_column(String(255), index=True)
    """The chat's partition key (a user's private key, or a group's key)."""
    origin: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(64), default="")
    is_bot: Mapped[bool] = mapped_column(Boolean, default=False)
    text: Mapped[str] = mapped_column(Text)
    at_us: Mapped[int] = mapped_column(BigInteger)
    """When it was said: microseconds since the epoch (UTC)."""


class Episode(Model):
    """A past conversation of one chat (issue #48): its span, a short summary and topics.
    ``archived_us`` set: in the archive (past ``lifetime_days`` or deleted by its user),
    shown to nobody but the export; only a forget removes it."""

    __tablename__ = "amrita_plugin_memory_episode"
    __table_args__ = (
        # Two processes that end the same conversation keep one episode of it.
        Index("ix_amrita_plugin_memory_episode_start", "chat", "start_us", unique=True),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    chat: Mapped[str] = mapped_column(String(255))
    origin: Mapped[str] = mapped_column(String(64))
    start_us: Mapped[int] = mapped_column(BigInteger)
    end_us: Mapped[int] = mapped_column(BigInteger)
    day: Mapped[str] = mapped_column(String(10))
    """The owner's local date of the start, ``YYYY-MM-DD``."""
    participants: Mapped[list[Any]] = mapped_column(JSON, default=list)
    summary: Mapped[str] = mapped_column(Text, default="")
    topics: Mapped[list[Any]] = mapped_column(JSON, default=list)
    source: Mapped[str] = mapped_column(String(16), default="extract")
    messages: Mapped[int] = mapped_column(Integer, default=0)
    chars: Mapped[int] = mapped_column(Integer, default=0)
    archived_us: Mapped[int | None] = mapped_column(BigInteger, nullable=True, default=None)
    archive_reason: Mapped[str] = mapped_column(String(16), default="")


class EpisodeMember(Model):
    """Who took part in an episode (a forget finds a member's group episodes by it)."""

    __tablename__ = "amrita_plugin_memory_episode_member"

    episode_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)
