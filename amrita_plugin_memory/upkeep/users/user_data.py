"""Everything the plugin keeps about one user: one export document, one forget.

The one place that knows every kind of data tied to a user, so that the chat
command (``/memory user export|forget``), the admin console and
``ambot memory export|forget`` cover the same things:

* their personal partition: live memories (every origin) and its archive rows
  (swept memories and update history) — :mod:`.erase`;
* their private memo (:mod:`...storage.memo_store`), their persona (one per user, shown
  in every group: :mod:`...storage.groups.persona_store`);
* their messages in every group's context window, stored and in memory
  (:mod:`...storage.groups.window_store`), their anonymous label in every group
  (:mod:`...storage.groups.directory`);
* in the L3 loop's state: the messages waiting for them and the abstracts of
  the loop's cycles (only the loop's target user has any), and the knowledge
  suggestions they made (:mod:`...storage.users.loop_state_row`); the loop's profile of its
  target user, ``user_profile.md`` and its backups, or its row of the shared database,
  whichever process forgets (:mod:`...storage.users.loop_profile`);
* their turns that active memory has queued and not yet extracted
  (:attr:`UserData.pending_sources`); exported, and dropped by a forget
  (:attr:`UserData.forget_hooks`);
* the group memories they wrote, live and archived (writer mark,
  :data:`~...core.records.META_AUTHOR`): exported, and kept by a forget (they
  belong to the group) with the mark cleared;
* their conversation episodes (issue #48): every episode of their private chat and
  every group episode they took part in (its summary may tell what they said),
  archived ones too, and their lines of conversations not ended yet
  (:mod:`...storage.episodes.store`): exported, and removed by a forget;
* the usage ledger's rows kept under their QQ number (what their background requests
  cost, :mod:`...storage.usage.ledger`): exported, and removed by a forget;
* their choice about active memory (``/memory auto off``, :mod:`...storage.consent_store`)
  and persona learning: exported, and kept by a forget (it is their choice).

A forget first records the user's tombstone (:mod:`...storage.users.tombstones`) and tells
the other processes (a change-feed row, again when it ends), then stops
the background work of other components for the user and keeps it from
starting again until the forget ends (:attr:`UserData.forget_fences`: the L3
loop's running cycle and its planned one), then removes each kind, then
rewrites the backup files without the user's rows (:class:`BackupFiles`,
implemented by ``embedding.forgotten``). Each step is idempotent, so a forget
that failed half-way (Chroma down) completes when run again, and the tombstone
already keeps every restore from bringing back what was removed. Other users'
rows are never touched: every removal is filtered on this user's partition
key or user id. Amrita's own chat history is not the plugin's and is not
removed (:data:`~.forget_counts.AMRITA_HISTORY`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from datetime import UTC, datetime
from typing import Any, Protocol

from nonebot import logger

from ...core.calendar import OwnerCalendar
from ...core.episodes import EpisodeLine, EpisodeRecord
from ...core.errors import ErrorKind, PluginError
from ...storage.archive.store import ArchivedMemory
from ...storage.consent_store import ConsentStore
from ...storage.episodes.store import EpisodeStore
from ...storage.groups.stores import GroupStores
from ...storage.keys import user_key
from ...storage.memo_store import MemoService
from ...storage.memory_store import MemoryStore, operator_view
from ...storage.scope import UserView, operator_user_view
from ...storage.shared.coherence import forgotten_row
from ...storage.users.loop_profile import LoopProfile, profile_lines
from ...storage.users.loop_state_row import LoopStateAccess, drop_user_items, user_items
from ...storage.users.tombstones import ForgottenUsers
from .erase import (
    authored_archived,
    authored_records,
    erase_partition,
    partition_contents,
    unmark_author,
)
from .forget_counts import AMRITA_HISTORY, ForgetCounts

__all__ = [
    "AMRITA_HISTORY",
    "EXPORT_FORMAT",
    "BackupFiles",
    "ForgetBlocked",
    "ForgetCounts",
    "UsageRows",
    "UserData",
]

EXPORT_FORMAT = "amrita_plugin_memory/user_export"
EXPORT_VERSION = 1


class ForgetBlocked(PluginError, RuntimeError):
    """Work for the user still runs and a forget cannot fence it (a forget fence gave
    up waiting): the forget stopped before removing anything more; run it again."""

    kind = ErrorKind.CONFLICT


class UsageRows(Protocol):
    """The usage ledger, as a user's export and forget need it (``storage.usage.UsageLedger``)."""

    async def of_user(self, view: UserView) -> list[dict[str, Any]]:
        """Every entry kept under the user's id."""
        ...

    async def forget_user(self, user_id: str) -> int:
        """Delete them; how many."""
        ...


class BackupFiles(Protocol):
    """The backup files, as a forget needs them (``embedding.forgotten.BackupScrubber``)."""

    def count(self) -> int:
        """How many backup files there are (nothing is read)."""
        ...

    async def scrub(self, user_id: str, partition: str) -> tuple[int, int]:
        """Rewrite every backup without the user's rows: ``(files rewritten, rows removed)``."""
        ...


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


def _with_local(out: dict[str, Any], calendar: OwnerCalendar) -> dict[str, Any]:
    """``out`` with each UTC stamp (``created_at`` …) kept and also shown in the owner's
    zone beside it (``created_local``: ``2026-12-04T07:30:00+08:00``), for the person
    reading the file; the stamps stay the data (an import reads them)."""
    for key in [k for k in out if k.endswith("_at") or k == "at"]:
        shown = calendar.show_stamp(out[key]) if isinstance(out[key], str) else ""
        if shown:
            out["at_local" if key == "at" else key[: -len("_at")] + "_local"] = shown
    return out


def _archived_json(row: ArchivedMemory, calendar: OwnerCalendar) -> dict[str, Any]:
    out = row.record.to_json()
    out.update(id=row.id, memory_id=row.memory_id, reason=row.reason, archived_at=row.archived_at)
    return _with_local(out, calendar)


def _episode_json(episode: EpisodeRecord, calendar: OwnerCalendar) -> dict[str, Any]:
    """One episode in the export (who took part: a count, never the other members' ids)."""
    out = {
        "id": episode.id,
        "chat": episode.chat,
        "origin": episode.origin,
        "day": episode.day,
        "start_at": _iso(episode.start),
        "end_at": _iso(episode.end),
        "summary": episode.summary,
        "topics": list(episode.topics),
        "source": episode.source,
        "messages": episode.messages,
        "participants": len(episode.participants),
        "archived": episode.archived,
    }
    return _with_local(out, calendar)


def _line_json(line: EpisodeLine, calendar: OwnerCalendar) -> dict[str, Any]:
    out = {
        "chat": line.chat,
        "origin": line.origin,
        "text": line.text,
        "at": _iso(line.at),
        "by_bot": line.is_bot,
    }
    return _with_local(out, calendar)


ForgetFence = Callable[[str], AbstractAsyncContextManager[object]]
"""Entered with the user id before a forget removes anything, left when it ends."""
PendingSource = Callable[[str], list[dict[str, Any]]]
"""A user's queued, not yet processed turns in another component (the export)."""


class UserData:
    """Export and forget of one user over the stores of one process."""

    def __init__(
        self,
        store: MemoryStore,
        memo: MemoService,
        groups: GroupStores,
        *,
        calendar: OwnerCalendar,
        forgotten: ForgottenUsers,
        loop: LoopStateAccess,
        loop_target: str | None = None,
        profile: LoopProfile | None = None,
        consent: ConsentStore | None = None,
        backups: BackupFiles | None = None,
        usage: UsageRows | None = None,
        episodes: EpisodeStore | None = None,
    ) -> None:
        self.store = store
        self.memo = memo
        self.groups = groups
        self.calendar = calendar
        """The owner's calendar: the export's local times and the zone it names."""
        self.forgotten = forgotten
        self.loop = loop
        self.loop_target = loop_target
        """The L3 loop's target user (the only one with waiting messages, abstracts, a profile)."""
        self.profile = profile
        """The L3 loop's profile of its target user, found by the user's id (``None``: not
        kept in this process)."""
        self.consent = consent
        """Active memory's opt-outs (``None``: not exported)."""
        self.backups = backups
        self.usage = usage
        """The usage ledger (``None``: not exported, nothing removed)."""
        self.episodes = episodes
        """The conversation episodes (``None``: not exported, nothing removed)."""
        self.loop_owners: Callable[[], Awaitable[set[str]]] | None = None
        """Who the stored loop items (waiting messages, abstracts) belong to, as the rows
        record it (``LoopStateRow.owners``): the loop's target when they were written."""
        self.forget_hooks: list[Callable[[str], object]] = []
        """Called with the user id when a forget starts: in-memory work of other
        components (active memory's unprocessed messages) is dropped too."""
        self.forget_fences: list[ForgetFence] = []
        """Entered, in order, before anything is removed and left when the forget ends
        (even a failed one): background work for the user running in other components
        is stopped and kept from starting again meanwhile (the L3 loop's cycle)."""
        self.pending_sources: list[PendingSource] = []
        """The user's turns queued in other components, ``[{"text", "reply", "origin"}]``
        (active memory's batches): exported as ``queued_turns``, counted by a preview."""
        self.after_forget: list[Callable[[str], object]] = []
        """Called with the user id when a forget ended, even a failed one (caches of
        the admin console are dropped)."""

    async def _is_target(self, user_id: str) -> bool:
        """Whether the loop's items (waiting messages, abstracts) are ``user_id``'s: this
        process's loop or configuration says so, or the stored items name them as their
        owner (a bot that runs no loop forgets them too, whatever its own config says)."""
        if self.loop_target is not None and user_id == self.loop_target.strip():
            return True
        return self.loop_owners is not None and user_id in await self.loop_owners()

    def _queued(self, user_id: str) -> list[dict[str, Any]]:
        return [turn for source in self.pending_sources for turn in source(user_id)]

    async def _profile_text(self, user_id: str) -> str:
        # Found by the user's id, not by this process's target: a bot without the loop
        # exports (and forgets) the shared profile too.
        return (
            "" if self.profile is None else await self.profile.text_of(operator_user_view(user_id))
        )

    async def _active_memory(self, user_id: str) -> dict[str, Any] | None:
        if self.consent is None:
            return None
        since = await self.consent.opted_out_since(operator_user_view(user_id))
        return {
            "learning_off": since is not None,
            "since": since.replace(tzinfo=UTC).isoformat(timespec="seconds") if since else None,
        }

    async def _episodes(self, user_id: str, partition: str) -> dict[str, list[dict[str, Any]]]:
        """Their episodes and waiting lines, JSON-ready (stamps UTC, each with its local)."""
        if self.episodes is None:
            return {"episodes": [], "episode_lines": []}
        episodes = await self.episodes.of_user_anywhere(user_id, partition)
        lines = await self.episodes.lines_of_user(user_id, partition)
        return {
            "episodes": [_episode_json(e, self.calendar) for e in episodes],
            "episode_lines": [_line_json(ln, self.calendar) for ln in lines],
        }

    # -- export ----------------------------------------------------------------------

    async def export(self, user_id: str) -> dict[str, Any]:
        """One JSON-ready document of everything kept about ``user_id``."""
        partition = user_key(user_id)
        rows = await partition_contents(self.store, partition)
        persona = await self.groups.personas.of_user_anywhere(user_id)
        messages = await self.groups.windows.messages_of(user_id)
        items = user_items(
            await self.loop.read(),
            operator_user_view(user_id),
            target=await self._is_target(user_id),
        )
        memo = await self.memo.get(operator_view(partition))
        archived_authored = await authored_archived(self.store, user_id)
        calendar = self.calendar
        return {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
            # Stamps (``…_at``) are UTC; each ``…_local`` beside one is it in this zone.
            "timezone": calendar.name,
            "user_id": user_id,
            "partition": partition,
            "memories": [_with_local(r.to_json(), calendar) for r in rows.memories],
            "archive": [_archived_json(a, calendar) for a in rows.archived],
            "memo": memo or None,
            "persona": {
                "fields": [
                    _with_local(
                        {"field": f.field, "value": f.value, "updated_at": _iso(f.updated_at)},
                        calendar,
                    )
                    for f in persona.fields
                ],
                "learning_off": persona.learning_off,
            },
            "active_memory": await self._active_memory(user_id),
            "queued_turns": self._queued(user_id),
            "group_memories": [
                _with_local(r.to_json(), calendar)
                for r in await authored_records(self.store, user_id)
            ],
            "group_memories_archived": [_archived_json(a, calendar) for a in archived_authored],
            "group_messages": [
                _with_local(
                    {"group_id": gid, "nickname": e.nickname, "text": e.text, "at": _iso(e.at)},
                    calendar,
                )
                for gid, e in messages
            ],
            "labels": await self.groups.directory.labels_of(user_id),
            "pending_messages": items.pending,
            "knowledge_suggestions": items.suggestions,
            "l3_profile": await self._profile_text(user_id) or None,
            "l3_abstracts": items.abstracts,
            "usage": await self.usage.of_user(operator_user_view(user_id))
            if self.usage is not None
            else [],
            **await self._episodes(user_id, partition),
        }

    # -- forget ----------------------------------------------------------------------

    async def preview(self, user_id: str) -> ForgetCounts:
        """What :meth:`forget` would remove now (reads only)."""
        partition = user_key(user_id)
        target = await self._is_target(user_id)
        items = user_items(await self.loop.read(), operator_user_view(user_id), target=target)
        persona = await self.groups.personas.of_user_anywhere(user_id)
        authored = len(await authored_records(self.store, user_id))
        authored += len(await authored_archived(self.store, user_id))
        episodes = await self._episodes(user_id, partition)
        return ForgetCounts(
            memories=await self.store.count(operator_view(partition)),
            archived=await self.store.archive.count(operator_view(partition)),
            memo=1 if await self.memo.get(operator_view(partition)) else 0,
            persona_fields=len(persona.fields),
            group_messages=len(await self.groups.windows.messages_of(user_id)),
            labels=len(await self.groups.directory.labels_of(user_id)),
            queued_turns=len(self._queued(user_id)),
            pending_messages=len(items.pending),
            suggestions=len(items.suggestions),
            profile_lines=profile_lines(await self._profile_text(user_id)),
            abstracts=len(items.abstracts),
            usage_rows=len(await self.usage.of_user(operator_user_view(user_id)))
            if self.usage is not None
            else 0,
            authored=authored,
            episodes=len(episodes["episodes"]),
            episode_lines=len(episodes["episode_lines"]),
            backups=self.backups.count() if self.backups is not None else 0,
            target=target,
        )

    async def forget(self, user_id: str) -> ForgetCounts:
        """Remove everything kept about ``user_id`` (see the module docstring); the counts.

        The tombstone is written first: from then on no restore brings back
        anything of the user from before this moment, even if a later step
        fails (the error propagates; running the forget again completes it).
        """
        partition = user_key(user_id)
        await self.forgotten.add(user_id, partition, datetime.now(UTC))
        # Other processes (remote mode) drop what they hold of the user in memory at once
        # (group windows, queued turns, labels), not only when the forget has ended.
        await self.store.coherence.announce([forgotten_row(partition)])
        try:
            async with AsyncExitStack() as fences:
                for fence in self.forget_fences:
                    await fences.enter_async_context(fence(user_id))
                counts = await self._remove(user_id, partition)
            # Again at the end: what another process took in during the forget goes too.
            await self.store.coherence.announce([forgotten_row(partition)])
        finally:
            for hook in self.after_forget:
                hook(user_id)
        logger.info(f"[Memory] 已遗忘用户 {user_id}：{_audit(counts)}")
        return counts

    async def _remove(self, user_id: str, partition: str) -> ForgetCounts:
        target = await self._is_target(user_id)
        counts = ForgetCounts(target=target, queued_turns=len(self._queued(user_id)))
        for hook in self.forget_hooks:
            result = hook(user_id)
            if inspect.isawaitable(result):
                await result
        counts.memories, counts.archived = await erase_partition(self.store, partition)
        counts.memo = int(await self.memo.remove(partition))
        counts.persona_fields = await self.groups.personas.forget(user_id)
        counts.group_messages = await self.groups.windows.forget_user(user_id)
        counts.labels = await self.groups.directory.forget_user(user_id)
        items = await self.loop.edit(
            lambda state: drop_user_items(state, operator_user_view(user_id), target=target)
        )
        counts.pending_messages, counts.suggestions = len(items.pending), len(items.suggestions)
        counts.abstracts = len(items.abstracts)
        if self.profile is not None:  # whichever process forgets (see _profile_text)
            counts.profile_lines = await self.profile.remove_of(user_id)
        if self.usage is not None:
            counts.usage_rows = await self.usage.forget_user(user_id)
        counts.authored = await unmark_author(self.store, user_id)
        if self.episodes is not None:  # real deletion, archived episodes included
            gone = await self.episodes.forget_user(user_id, partition)
            counts.episodes, counts.episode_lines = gone.episodes, gone.lines
        # Once more: a window write another process began before the tombstone may have
        # landed after the first pass (every read leaves such rows out anyway).
        counts.group_messages += await self.groups.windows.forget_user(user_id)
        if self.backups is not None:
            counts.backups, counts.backup_rows = await self.backups.scrub(user_id, partition)
        return counts


def _audit(counts: ForgetCounts) -> str:
    """The counts for the log line (numbers only, never a text)."""
    values: Mapping[str, int] = counts.to_json()
    return " ".join(f"{k}={v}" for k, v in values.items())
