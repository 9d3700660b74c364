"""Partition keys: the one place that turns an id into a uni_id (events: :mod:`..adapters.events`).

The key format is whatever the installed Amrita produces
(``amrita.plugins.chat.utils.sql.make_uni_id``); the plugin never hard-codes
it, so an Amrita upgrade that changes the format is followed automatically
and stored memories are migrated by :func:`migrate_partition_keys` (L1 memo rows
by :meth:`.memo_store.MemoService.migrate_keys`, with the same :func:`normalize_key`).

Both the legacy ``user_{qq}`` / ``group_{gid}`` form (Amrita <= 1.9) and the
current ``QQPlatform_Private_{qq}`` / ``QQPlatform_Group_{gid}`` form are read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from .memory_store import MemoryStore

__all__ = [
    "KEY_FORMAT_META",
    "ChatTarget",
    "KeyMigrationReport",
    "current_key_format",
    "group_key",
    "migrate_partition_keys",
    "normalize_key",
    "target_from_ids",
    "user_key",
]

# Collection metadata entry recording which key format the stored data uses.
KEY_FORMAT_META = "partition_key_format"


def _sql():
    # Imported lazily: amrita.plugins.chat can only be imported once NoneBot is
    # initialised and the chat plugin is loaded (the plugin requires it first).
    from amrita.plugins.chat.utils import sql

    return sql


def user_key(user_id: int | str) -> str:
    """The personal partition of a user (private and group chats alike)."""
    return _sql().make_uni_id(str(user_id).strip(), is_group=False)


def group_key(group_id: int | str) -> str:
    """The shared partition of a group."""
    return _sql().make_uni_id(str(group_id).strip(), is_group=True)


def current_key_format() -> str:
    """A token describing the installed Amrita's key format.

    Stored in the collection metadata; when it equals the stored token, key
    migration is a no-op that costs one metadata read.
    """
    return f"{user_key('{id}')}|{group_key('{id}')}"


def parse_key(key: str) -> tuple[Literal["user", "group"], int] | None:
    """Parse a legacy or current key into ``(kind, number)``; ``None`` if invalid."""
    parsed = _sql().parse_uni_user_id(key)
    if parsed is None:
        return None
    kind, number = parsed
    if kind == "Group":
        return "group", number
    if kind == "Private":
        return "user", number
    return None


def normalize_key(key: str) -> str | None:
    """Rewrite any known key form into the current one; ``None`` if unparsable."""
    parsed = parse_key(key)
    if parsed is None:
        return None
    kind, number = parsed
    return group_key(number) if kind == "group" else user_key(number)


@dataclass(frozen=True, slots=True)
class ChatTarget:
    """Who is talking where, as partition keys.

    ``session`` is Amrita's session uni_id (the group in a group chat, the user
    in a private chat); ``user`` is always the speaker's personal partition;
    ``group`` is the group's shared partition or ``None`` in a private chat.
    """

    user_id: str
    user: str
    group: str | None
    group_id: str | None

    @property
    def is_group(self) -> bool:
        return self.group is not None

    @property
    def session(self) -> str:
        return self.group or self.user


def target_from_ids(user_id: int | str, group_id: int | str | None = None) -> ChatTarget:
    """Build the partition keys from raw ids (CLI, L3 loop, tests)."""
    uid = str(user_id)
    if group_id:
        return ChatTarget(uid, user_key(uid), group_key(group_id), str(group_id))
    return ChatTarget(uid, user_key(uid), None, None)


@dataclass(slots=True)
class KeyMigrationReport:
    """What a key migration found or did."""

    stored_format: str | None
    current_format: str
    scanned: int = 0
    rewritten: int = 0
    unparsable: int = 0
    skipped: bool = False


async def migrate_partition_keys(
    store: MemoryStore, *, dry_run: bool = False, page_size: int | None = None
) -> KeyMigrationReport:
    """Rewrite the ``user_id`` of stored memories into the current key format.

    Idempotent. When the collection metadata already records the current
    format this returns after a single metadata read, so it can run on every
    start. On an empty collection the format is simply recorded.
    """
    current = current_key_format()
    stored = await store.get_meta(KEY_FORMAT_META)
    report = KeyMigrationReport(stored_format=stored, current_format=current)
    if stored == current:
        report.skipped = True
        return report
    async for page in store.iter_records(page_size=page_size):
        updates: dict[str, str] = {}
        for record in page:
            report.scanned += 1
            new = normalize_key(record.partition)
            if new is None:
                report.unparsable += 1
            elif new != record.partition:
                updates[record.id] = new
        report.rewritten += len(updates)
        if updates and not dry_run:
            await rewrite_memory_keys(store, updates)
    if not dry_run:
        # Archived memories and versions follow their partition (restores find them).
        await store.archive.rewrite_partition_keys(normalize_key)
        await store.set_meta({KEY_FORMAT_META: current})
    return report


async def rewrite_memory_keys(store: MemoryStore, updates: Mapping[str, str]) -> None:
    """Set ``user_id`` of the given memories ``{memory id: new key}`` (key migration only)."""
    ids = list(updates)
    res = await store._run(lambda c: c.get(ids=ids, include=["metadatas"]))
    new_metas = []
    for memory_id, meta in zip(res["ids"], res.get("metadatas") or [], strict=False):
        meta = dict(meta or {})
        meta["user_id"] = updates[memory_id]
        new_metas.append(meta)
    try:
        if res["ids"]:
            await store._run(lambda c: c.update(ids=list(res["ids"]), metadatas=new_metas))
    finally:
        store.counts.clear()  # memories moved between partitions
        store.recent.clear()
        store.index.clear()
