"""Group windows (Openmim's L1): in memory for every turn, in SQLite across restarts.

:meth:`GroupWindowStore.append` runs for every group message the bot sees, so
it only touches memory (:class:`~...prompting.group_window.GroupWindow`) and, when
the flush rule says so, starts a background write: every
``context_persist_every`` member messages, and at once for a bot reply. A
restart therefore loses at most the last ``context_persist_every - 1``
member messages of a group that were not flushed; :meth:`close` (driver
shutdown) flushes those too.

A group's persisted rows are read on first use (:meth:`recent`, or before
its first flush), cut to ``context_message_count`` and merged before what
this process saw. :meth:`compact` runs once at start-up and cuts what is
stored beyond the current limits (rows beyond the count, texts beyond the
character limits), so lowering a limit takes effect on the stored data too.

A forget is a point in time here too (``forgotten``, the shared tombstones):
a write never stores a message its member said at or before their forget, and a
read of the stored rows never brings one back (another process may have
written it in the instant the forget deleted that member's rows).

A chat turn reads one group's window through that group's
:class:`~..scope.GroupView` (:meth:`GroupWindowStore.recent`); a read of any group by
id is the operator door :meth:`GroupWindowStore.recent_any` (issue #49).

Every statement is waited for with the bound of ``work``
(:class:`~..shared.sessions.SharedWork`): a database that stops answering
costs a turn its ``<GROUP_CONTEXT>`` block, a flush its write (the entries
stay pending), never a wait without end.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from nonebot import logger
from sqlalchemy import delete, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from ...core.config import GroupContextConfig
from ...infra.locks import PartitionLocks
from ...prompting.group_window import GroupWindow, WindowEntry, cut_text
from ..models import GroupMessage
from ..scope import GroupView
from ..shared.sessions import SharedWork, commit_one, orm_session, read_scalars, rowcount
from ..users.tombstones import ForgottenUsers

__all__ = ["CompactReport", "GroupWindowStore"]


def _timestamp(value: datetime) -> float:
    return value.replace(tzinfo=UTC).timestamp()


def _db_time(at: float) -> datetime:
    return datetime.fromtimestamp(at, UTC).replace(tzinfo=None)


class CompactReport:
    """What :meth:`GroupWindowStore.compact` cut."""

    __slots__ = ("cut", "dropped")

    def __init__(self, dropped: int = 0, cut: int = 0) -> None:
        self.dropped = dropped
        self.cut = cut


class GroupWindowStore:
    """Every group's window, kept in memory and flushed to the ``GroupMessage`` table."""

    def __init__(
        self,
        config: GroupContextConfig,
        forgotten: ForgottenUsers | None = None,
        work: SharedWork | None = None,
    ) -> None:
        self._config = config
        self.work = work or SharedWork()
        """The bound every database operation of the windows is waited for with."""
        self.forgotten = forgotten
        """The tombstones of forgotten users (``None``: none are checked)."""
        self._windows: dict[str, GroupWindow] = {}
        self._locks = PartitionLocks()
        self._flushing: dict[str, asyncio.Task[None]] = {}

    @property
    def config(self) -> GroupContextConfig:
        return self._config

    @config.setter
    def config(self, value: GroupContextConfig) -> None:
        self._config = value
        for window in self._windows.values():
            window.resize(value.context_message_count)

    def _window(self, group_id: str) -> GroupWindow:
        window = self._windows.get(group_id)
        if window is None:
            window = self._windows[group_id] = GroupWindow(self._config.context_message_count)
        return window

    # -- the hot path -----------------------------------------------------------

    def append(
        self, group_id: str, user_id: str, nickname: str, text: str, *, is_bot: bool, at: float
    ) -> None:
        """Add one message (cut at its limit) to the group's window; never waits."""
        limit = (
            self._config.bot_context_max_chars if is_bot else self._config.context_max_text_chars
        )
        window = self._window(group_id)
        window.append(WindowEntry(user_id, nickname, cut_text(text, limit), is_bot, at))
        if is_bot or window.pending_members >= self._config.context_persist_every:
            self._schedule_flush(group_id)

    def _schedule_flush(self, group_id: str) -> None:
        running = self._flushing.get(group_id)
        if running is not None and not running.done():
            return  # it re-checks the pending entries before it ends
        task = asyncio.get_running_loop().create_task(self._flush_until_done(group_id))
        self._flushing[group_id] = task
        task.add_done_callback(lambda t, g=group_id: self._flush_done(g, t))

    def _flush_done(self, group_id: str, task: asyncio.Task[None]) -> None:
        if self._flushing.get(group_id) is task:
            del self._flushing[group_id]

    async def _flush_until_done(self, group_id: str) -> None:
        window = self._window(group_id)
        while True:
            if not await self.flush(group_id):
                return  # the write failed; the entries stay pending for the next rule hit
            due = window.pending and (
                any(e.is_bot for e in window.pending)
                or window.pending_members >= self._config.context_persist_every
            )
            if not due:
                return

    # -- reads ---------------------------------------------------------------------

    async def recent(self, view: GroupView, count: int) -> list[WindowEntry]:
        """The newest ``count`` messages of ``view``'s group, oldest first (a turn's
        ``<GROUP_CONTEXT>``, the group's extraction); a plain group id is refused."""
        return await self.recent_any(GroupView.check(view).group_id, count)

    async def recent_any(self, group_id: str, count: int) -> list[WindowEntry]:
        """Operator door: the newest ``count`` messages of any group, oldest first."""
        window = self._window(group_id)
        if not window.loaded:
            async with self._locks.hold(group_id):
                await self._load(group_id, window)
        return window.recent(count)

    async def _load(self, group_id: str, window: GroupWindow) -> None:
        """Merge the persisted rows in (once; the caller holds the group's lock)."""
        if window.loaded:
            return
        stmt = (
            select(GroupMessage)
            .where(GroupMessage.group_id == group_id)
            .order_by(GroupMessage.id.desc())
            .limit(window.capacity)
        )
        rows = await self.work.run(read_scalars(stmt), "读取群上下文窗口")
        rows.reverse()
        entries = [
            WindowEntry(r.user_id, r.nickname, r.text, r.is_bot, _timestamp(r.created_at))
            for r in rows
        ]
        window.merge_persisted(await self._not_forgotten(entries))

    async def _not_forgotten(self, entries: list[WindowEntry]) -> list[WindowEntry]:
        """``entries`` without the messages members said at or before their forget."""
        if self.forgotten is None or not entries:
            return entries
        members = {e.user_id for e in entries if not e.is_bot}
        # Keyed: these members' tombstones only, whatever the number of forgotten users.
        points = {u: at.timestamp() for u, at in (await self.forgotten.of(members)).items()}
        if not points:
            return entries
        return [e for e in entries if e.is_bot or e.at > points.get(e.user_id, -1.0)]

    # -- writes -------------------------------------------------------------------------

    async def flush(self, group_id: str) -> bool:
        """Write the group's pending messages and drop rows beyond the count; ``False`` on failure."""
        window = self._window(group_id)
        async with self._locks.hold(group_id):
            try:
                await self._load(group_id, window)  # before the first write: no duplicates
            except Exception as exc:
                logger.warning(
                    f"[Memory] 读取群 {group_id} 的上下文窗口失败：{exc.__class__.__name__}"
                )
                return False
            entries = window.take_pending()
            if not entries:
                return True
            try:
                entries = await self._not_forgotten(entries)
            except Exception as exc:
                window.restore_pending(entries)
                logger.warning(
                    f"[Memory] 读取遗忘记录失败，群 {group_id} 的上下文窗口暂不写入："
                    f"{exc.__class__.__name__}"
                )
                return False
            if not entries:
                return True
            try:
                await self.work.run(self._store(group_id, entries), "写入群上下文窗口")
            except Exception as exc:
                window.restore_pending(entries)
                logger.warning(
                    f"[Memory] 群 {group_id} 的上下文窗口写入失败（{len(entries)} 条留待下次）："
                    f"{exc.__class__.__name__}"
                )
                return False
            return True

    async def _store(self, group_id: str, entries: list[WindowEntry]) -> None:
        """Insert ``entries`` and drop the group's rows beyond the count, in one transaction."""
        keep = self._config.context_message_count
        async with orm_session() as session:
            session.add_all(
                GroupMessage(
                    group_id=group_id,
                    user_id=e.user_id,
                    nickname=e.nickname[:64],
                    is_bot=e.is_bot,
                    text=e.text,
                    created_at=_db_time(e.at),
                )
                for e in entries
            )
            await session.flush()
            await self._trim(session, group_id, keep)
            await session.commit()

    @staticmethod
    async def _trim(session: AsyncSession, group_id: str, keep: int) -> int:
        """Delete the group's rows older than the newest ``keep``; how many went."""
        threshold = await session.scalar(
            select(GroupMessage.id)
            .where(GroupMessage.group_id == group_id)
            .order_by(GroupMessage.id.desc())
            .offset(keep - 1)
            .limit(1)
        )
        if threshold is None:
            return 0
        result = await session.execute(
            delete(GroupMessage).where(
                GroupMessage.group_id == group_id, GroupMessage.id < threshold
            )
        )
        return rowcount(result)

    async def clear(self, group_id: str) -> None:
        """Forget the group's window, in memory and stored."""
        window = self._window(group_id)
        async with self._locks.hold(group_id):
            stmt = delete(GroupMessage).where(GroupMessage.group_id == group_id)
            await self.work.run(commit_one(stmt), "清空群上下文窗口")
            window.clear()
            window.loaded = True

    # -- one member's messages (a user's export and forget) ---------------------------

    async def messages_of(self, user_id: str) -> list[tuple[str, WindowEntry]]:
        """Every message of member ``user_id`` the windows keep, as ``(group id, entry)``,
        oldest first: the stored rows and those not written yet."""
        stmt = (
            select(GroupMessage)
            .where(GroupMessage.user_id == user_id, GroupMessage.is_bot.is_(False))
            .order_by(GroupMessage.id)
        )
        rows = await self.work.run(read_scalars(stmt), "读取群上下文窗口")
        out = [
            (
                r.group_id,
                WindowEntry(r.user_id, r.nickname, r.text, r.is_bot, _timestamp(r.created_at)),
            )
            for r in rows
        ]
        for group_id, window in self._windows.items():
            out += [(group_id, e) for e in window.pending if e.user_id == user_id and not e.is_bot]
        out.sort(key=lambda pair: pair[1].at)
        return out

    def drop_user(self, user_id: str) -> int:
        """Drop member ``user_id``'s messages from the windows in memory (a forget through
        another process, which deleted the stored rows); how many entries went."""
        return sum(window.drop_user(user_id) for window in self._windows.values())

    async def forget_user(self, user_id: str) -> int:
        """Remove member ``user_id``'s messages from every window, stored and in memory.

        Each group under its lock, so a background write of the group finishes
        first (its rows are then deleted too). The bot's replies stay. Returns
        how many messages went (stored rows plus those not written yet).
        """
        stmt = select(GroupMessage.group_id).where(
            GroupMessage.user_id == user_id, GroupMessage.is_bot.is_(False)
        )
        groups = set(await self.work.run(read_scalars(stmt.distinct()), "读取群上下文窗口"))
        groups |= {
            g
            for g, w in self._windows.items()
            if any(e.user_id == user_id for e in [*w.entries, *w.pending])
        }
        removed = 0
        for group_id in sorted(groups):
            async with self._locks.hold(group_id):
                gone = delete(GroupMessage).where(
                    GroupMessage.group_id == group_id,
                    GroupMessage.user_id == user_id,
                    GroupMessage.is_bot.is_(False),
                )
                removed += await self.work.run(commit_one(gone), "删除群上下文窗口中的消息")
                window = self._windows.get(group_id)
                if window is not None:
                    removed += sum(
                        1 for e in window.pending if e.user_id == user_id and not e.is_bot
                    )
                    window.drop_user(user_id)
        return removed

    async def drain(self) -> None:
        """Wait for the background writes started so far."""
        while self._flushing:
            await asyncio.gather(*list(self._flushing.values()), return_exceptions=True)

    async def close(self) -> None:
        """Finish the background writes and flush every window (driver shutdown)."""
        await self.drain()
        for group_id, window in list(self._windows.items()):
            if window.pending:
                await self.flush(group_id)

    async def compact(self) -> CompactReport:
        """Cut what is stored beyond the current limits (once, at start-up)."""
        return await self.work.run(self._compact(self._config), "压缩群上下文窗口")

    async def _compact(self, config: GroupContextConfig) -> CompactReport:
        report = CompactReport()
        async with orm_session() as session:
            groups = list((await session.scalars(select(GroupMessage.group_id).distinct())).all())
            for group_id in groups:
                report.dropped += await self._trim(session, group_id, config.context_message_count)
            too_long = await session.scalars(
                select(GroupMessage).where(
                    or_(
                        (GroupMessage.is_bot.is_(True))
                        & (func.length(GroupMessage.text) > config.bot_context_max_chars),
                        (GroupMessage.is_bot.is_(False))
                        & (func.length(GroupMessage.text) > config.context_max_text_chars),
                    )
                )
            )
            for row in too_long:
                limit = (
                    config.bot_context_max_chars if row.is_bot else config.context_max_text_chars
                )
                row.text = cut_text(row.text, limit)
                report.cut += 1
            await session.commit()
        return report
