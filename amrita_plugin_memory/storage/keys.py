"""Partition keys: the one place that turns an id into a uni_id (events: :mod:`..adapters.events`).

The key format is whatever the installed Amrita produces
(``amrita.plugins.chat.utils.sql.make_uni_id``); the plugin never hard-codes
it, so an Amrita upgrade that changes the format is followed automatically
and stored memories are migrated by ``upkeep/rekey.migrate_partition_keys`` (L1 memo rows
by :meth:`.memo_store.MemoService.migrate_keys`, with the same :func:`normalize_key`).

Both the legacy ``user_{qq}`` / ``group_{gid}`` form (Amrita <= 1.9) and the
current ``QQPlatform_Private_{qq}`` / ``QQPlatform_Group_{gid}`` form are read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "KEY_FORMAT_META",
    "ChatTarget",
    "current_key_format",
    "group_key",
    "normalize_key",
    "target_from_ids",
    "user_key",
    "user_of_key",
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


def user_of_key(key: str) -> str | None:
    """The user id of a personal partition (``None``: a group's, or not a key)."""
    try:
        parsed = parse_key(key)
    except Exception:  # not a uni_id at all (e.g. the whole store's "*")
        return None
    if parsed is None or parsed[0] != "user":
        return None
    return str(parsed[1])


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
