"""Everything the plugin keeps about one user: one export document, one forget.

The one place that knows every kind of data tied to a user, so that the chat
command (``/memory user export|forget``), the admin console and
``ambot memory export|forget`` cover the same things:

* their personal partition: live memories (every origin) and its archive rows
  (swept memories and update history) — :mod:`.erase`;
* their private memo (:mod:`..memo_store`), their persona (one per user, shown
  in every group: :mod:`..groups.persona_store`);
* their messages in every group's context window, stored and in memory
  (:mod:`..groups.window_store`), their anonymous label in every group
  (:mod:`..groups.directory`);
* in the L3 loop's state: the messages waiting for them (only the loop's
  target user has any) and the knowledge suggestions they made
  (:mod:`.loop_state_row`);
* the group memories they wrote (writer mark, :data:`~...core.records.META_AUTHOR`):
  exported, and kept by a forget (they belong to the group) with the mark cleared.

A forget first records the user's tombstone (:mod:`.tombstones`), then removes
each kind, then rewrites the backup files without the user's rows
(:class:`BackupFiles`, implemented by ``embedding.forgotten``). Each step is
idempotent, so a forget that failed half-way (Chroma down) completes when run
again, and the tombstone already keeps every restore from bringing back what
was removed. Other users' rows are never touched: every removal is filtered
on this user's partition key or user id.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from nonebot import logger

from ..archive.store import ArchivedMemory
from ..groups.stores import GroupStores
from ..keys import user_key
from ..memo_store import MemoService
from ..memory_store import MemoryStore
from .erase import authored_records, erase_partition, partition_contents, unmark_author
from .loop_state_row import LoopStateAccess, drop_user_items, user_items
from .tombstones import ForgottenUsers

__all__ = ["EXPORT_FORMAT", "BackupFiles", "ForgetCounts", "UserData"]

EXPORT_FORMAT = "amrita_plugin_memory/user_export"
EXPORT_VERSION = 1


class BackupFiles(Protocol):
    """The backup files, as a forget needs them (``embedding.forgotten.BackupScrubber``)."""

    def count(self) -> int:
        """How many backup files there are (nothing is read)."""
        ...

    async def scrub(self, user_id: str, partition: str) -> tuple[int, int]:
        """Rewrite every backup without the user's rows: ``(files rewritten, rows removed)``."""
        ...


@dataclass(slots=True)
class ForgetCounts:
    """What a forget removes (a preview) or removed, per kind."""

    memories: int = 0
    archived: int = 0
    memo: int = 0
    persona_fields: int = 0
    group_messages: int = 0
    labels: int = 0
    pending_messages: int = 0
    suggestions: int = 0
    authored: int = 0
    """Group memories the user wrote: kept, their writer mark cleared."""
    backups: int = 0
    """Backup files: all of them (preview) or those rewritten (done)."""
    backup_rows: int = 0

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    def report(self, user_id: str) -> dict[str, Any]:
        """The counts and the lines the chat, the console and the command line show."""
        return {
            "user_id": user_id,
            "partition": user_key(user_id),
            "counts": self.to_json(),
            "lines": self.removed(),
        }

    def removed(self) -> list[str]:
        """The kinds removed, one Chinese phrase each (zero counts included: nothing hidden)."""
        return [
            f"个人记忆 {self.memories} 条（私聊与群聊中写下的都算）",
            f"归档与更新历史 {self.archived} 条",
            f"个人备忘录 {self.memo} 份",
            f"成员画像字段 {self.persona_fields} 个（所有群共用一份画像）",
            f"群聊上下文中你的消息 {self.group_messages} 条",
            f"匿名代号 {self.labels} 个",
            f"等待转达给你的消息 {self.pending_messages} 条",
            f"你提交的知识建议 {self.suggestions} 条",
        ]

    @property
    def total(self) -> int:
        return (
            self.memories
            + self.archived
            + self.memo
            + self.persona_fields
            + self.group_messages
            + self.labels
            + self.pending_messages
            + self.suggestions
        )


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


def _archived_json(row: ArchivedMemory) -> dict[str, Any]:
    out = row.record.to_json()
    out.update(id=row.id, memory_id=row.memory_id, reason=row.reason, archived_at=row.archived_at)
    return out


class UserData:
    """Export and forget of one user over the stores of one process."""

    def __init__(
        self,
        store: MemoryStore,
        memo: MemoService,
        groups: GroupStores,
        *,
        forgotten: ForgottenUsers,
        loop: LoopStateAccess,
        loop_target: str | None = None,
        backups: BackupFiles | None = None,
    ) -> None:
        self.store = store
        self.memo = memo
        self.groups = groups
        self.forgotten = forgotten
        self.loop = loop
        self.loop_target = loop_target
        """The L3 loop's target user (the only one with waiting messages)."""
        self.backups = backups
        self.forget_hooks: list[Callable[[str], object]] = []
        """Called with the user id when a forget starts: in-memory work of other
        components (active memory's unprocessed messages) is dropped too."""

    def _is_target(self, user_id: str) -> bool:
        return self.loop_target is not None and user_id == self.loop_target.strip()

    # -- export ----------------------------------------------------------------------

    async def export(self, user_id: str) -> dict[str, Any]:
        """One JSON-ready document of everything kept about ``user_id``."""
        partition = user_key(user_id)
        rows = await partition_contents(self.store, partition)
        persona = await self.groups.personas.get(user_id)
        messages = await self.groups.windows.messages_of(user_id)
        pending, suggestions = user_items(
            await self.loop.read(), user_id, partition, target=self._is_target(user_id)
        )
        memo = await self.memo.get(partition)
        return {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "user_id": user_id,
            "partition": partition,
            "memories": [r.to_json() for r in rows.memories],
            "archive": [_archived_json(a) for a in rows.archived],
            "memo": memo or None,
            "persona": {
                "fields": [
                    {"field": f.field, "value": f.value, "updated_at": _iso(f.updated_at)}
                    for f in persona.fields
                ],
                "learning_off": persona.learning_off,
            },
            "group_memories": [r.to_json() for r in await authored_records(self.store, user_id)],
            "group_messages": [
                {"group_id": gid, "nickname": e.nickname, "text": e.text, "at": _iso(e.at)}
                for gid, e in messages
            ],
            "labels": await self.groups.directory.labels_of(user_id),
            "pending_messages": pending,
            "knowledge_suggestions": suggestions,
        }

    # -- forget ----------------------------------------------------------------------

    async def preview(self, user_id: str) -> ForgetCounts:
        """What :meth:`forget` would remove now (reads only)."""
        partition = user_key(user_id)
        pending, suggestions = user_items(
            await self.loop.read(), user_id, partition, target=self._is_target(user_id)
        )
        persona = await self.groups.personas.get(user_id)
        return ForgetCounts(
            memories=await self.store.count(partition),
            archived=await self.store.archive.count(partition),
            memo=1 if await self.memo.get(partition) else 0,
            persona_fields=len(persona.fields),
            group_messages=len(await self.groups.windows.messages_of(user_id)),
            labels=len(await self.groups.directory.labels_of(user_id)),
            pending_messages=len(pending),
            suggestions=len(suggestions),
            authored=len(await authored_records(self.store, user_id)),
            backups=self.backups.count() if self.backups is not None else 0,
        )

    async def forget(self, user_id: str) -> ForgetCounts:
        """Remove everything kept about ``user_id`` (see the module docstring); the counts.

        The tombstone is written first: from then on no restore brings back
        anything of the user from before this moment, even if a later step
        fails (the error propagates; running the forget again completes it).
        """
        partition = user_key(user_id)
        await self.forgotten.add(user_id, partition, datetime.now(UTC))
        for hook in self.forget_hooks:
            result = hook(user_id)
            if inspect.isawaitable(result):
                await result
        counts = ForgetCounts()
        counts.memories, counts.archived = await erase_partition(self.store, partition)
        counts.memo = int(await self.memo.remove(partition))
        counts.persona_fields = await self.groups.personas.forget(user_id)
        counts.group_messages = await self.groups.windows.forget_user(user_id)
        counts.labels = await self.groups.directory.forget_user(user_id)
        target = self._is_target(user_id)
        counts.pending_messages, counts.suggestions = await self.loop.edit(
            lambda state: drop_user_items(state, user_id, partition, target=target)
        )
        counts.authored = await unmark_author(self.store, user_id)
        if self.backups is not None:
            counts.backups, counts.backup_rows = await self.backups.scrub(user_id, partition)
        logger.info(f"[Memory] 已遗忘用户 {user_id}：{_audit(counts)}")
        return counts


def _audit(counts: ForgetCounts) -> str:
    """The counts for the log line (numbers only, never a text)."""
    values: Mapping[str, int] = counts.to_json()
    return " ".join(f"{k}={v}" for k, v in values.items())
