"""Episodes in the SQL database: the lines of open conversations and the kept episodes.

Three tables (``storage/models``): the lines of conversations that have not
ended (:class:`~..models.EpisodeLineRow`), the episodes
(:class:`~..models.Episode`) and who took part in each
(:class:`~..models.EpisodeMember`). Every process on the store writes and reads
the same rows, so a conversation observed by one bot and ended by another is
one episode: :meth:`EpisodeStore.keep` stores the episode and removes its lines
in one transaction, and the unique ``(chat, start)`` index turns a second
process's copy of the same conversation into a no-op.

Reads on the chat path take the chat's :class:`~..scope.View`: a private
episode is shown only through a view of that user's partition whose origins
allow ``private`` (the private chat), a group's episodes only through that
group's view (:meth:`~...core.episodes.EpisodeRecord.visible_in`). Reads of any
chat or any user by id (the closer's pending lines, the console's timeline, a
user's export and forget, the sweep) are operator doors, kept off the chat path
by ``.ci/architecture_doors.py``.

Every statement is waited for with the bound of ``work``
(:class:`~..shared.sessions.SharedWork`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError

from ...core.episodes import EpisodeLine, EpisodeRecord, NewEpisode
from ..models import Episode, EpisodeLineRow, EpisodeMember
from ..scope import View
from ..shared.sessions import SharedWork, commit_one, orm_session, read_scalars, rowcount
from .rows import MAX_READ, ForgottenEpisodes, OpenChat, as_line, as_record, seconds, us

__all__ = ["EpisodeStore", "ForgottenEpisodes", "OpenChat"]


def _visible(view: View) -> Any:
    """The ``where`` of the episodes ``view`` may see (live ones)."""
    view = View.check(view)
    clauses = [Episode.chat == view.partition, Episode.archived_us.is_(None)]
    if view.origins.kind == "one":
        clauses.append(Episode.origin == view.origins.origin)
    elif view.origins.kind == "any_group":
        clauses.append(Episode.origin != "private")
    return and_(*clauses)


class EpisodeStore:
    """The episode tables of one process (every process shares the rows)."""

    def __init__(self, work: SharedWork | None = None) -> None:
        self.work = work or SharedWork()

    # -- plumbing ------------------------------------------------------------------------

    async def _episodes(self, stmt: Any, what: str) -> list[EpisodeRecord]:
        return [as_record(r) for r in await self.work.run(read_scalars(stmt), what)]

    # -- lines of open conversations ----------------------------------------------------

    async def add_lines(self, lines: Sequence[EpisodeLine]) -> None:
        """Store ``lines`` (one transaction)."""
        if not lines:
            return

        async def insert() -> None:
            async with orm_session() as session:
                session.add_all(
                    EpisodeLineRow(
                        chat=line.chat,
                        origin=line.origin,
                        user_id=line.user_id,
                        name=line.name[:64],
                        is_bot=line.is_bot,
                        text=line.text,
                        at_us=us(line.at),
                    )
                    for line in lines
                )
                await session.commit()

        await self.work.run(insert(), "写入对话片段的消息")

    async def open_chats(self, limit: int) -> list[OpenChat]:
        """Operator door (the closer): the chats with lines waiting, the longest idle first."""
        stmt = (
            select(
                EpisodeLineRow.chat,
                func.min(EpisodeLineRow.origin),
                func.min(EpisodeLineRow.at_us),
                func.max(EpisodeLineRow.at_us),
                func.count(EpisodeLineRow.id),
            )
            .group_by(EpisodeLineRow.chat)
            .order_by(func.max(EpisodeLineRow.at_us))
            .limit(limit)
        )

        async def read() -> list[Any]:
            async with orm_session() as session:
                return list((await session.execute(stmt)).all())

        rows = await self.work.run(read(), "读取未结束的对话")
        return [
            OpenChat(chat, origin, seconds(first), seconds(last), int(n))
            for chat, origin, first, last, n in rows
        ]

    async def lines_of(self, chat: str, limit: int) -> list[EpisodeLine]:
        """Operator door (the closer): the oldest ``limit`` waiting lines of ``chat``, oldest first."""
        stmt = (
            select(EpisodeLineRow)
            .where(EpisodeLineRow.chat == chat)
            .order_by(EpisodeLineRow.at_us, EpisodeLineRow.id)
            .limit(limit)
        )
        return [as_line(r) for r in await self.work.run(read_scalars(stmt), "读取对话片段的消息")]

    async def conversation_start(self, view: View) -> float | None:
        """When the conversation going on in ``view``'s chat began (its oldest waiting
        line), or ``None``: "上次" means an episode that ended before it."""
        view = View.check(view)
        stmt = select(func.min(EpisodeLineRow.at_us)).where(EpisodeLineRow.chat == view.partition)

        async def read() -> int | None:
            async with orm_session() as session:
                return await session.scalar(stmt)

        first = await self.work.run(read(), "读取当前对话")
        return None if first is None else seconds(first)

    async def drop_lines(self, ids: Iterable[int]) -> int:
        """Remove waiting lines by id (lines no episode may keep: an opted-out member's)."""
        wanted = sorted(set(ids))
        if not wanted:
            return 0
        stmt = delete(EpisodeLineRow).where(EpisodeLineRow.id.in_(wanted))
        return await self.work.run(commit_one(stmt), "删除对话片段的消息")

    async def drop_user_lines(self, user_id: str, private_chat: str = "") -> int:
        """Remove ``user_id``'s waiting lines in every chat, and every line of their private
        chat ``private_chat`` (a forget or an opt-out: nothing of theirs goes into an episode)."""
        clause = and_(EpisodeLineRow.user_id == user_id, EpisodeLineRow.is_bot.is_(False))
        if private_chat:
            clause = or_(clause, EpisodeLineRow.chat == private_chat)
        return await self.work.run(
            commit_one(delete(EpisodeLineRow).where(clause)), "删除对话片段的消息"
        )

    # -- keeping an episode ---------------------------------------------------------------

    async def keep(self, episode: NewEpisode, line_ids: Sequence[int]) -> EpisodeRecord | None:
        """Store ``episode`` and remove the lines it was made of, in one transaction;
        ``None`` when another process kept this conversation first (its lines are gone
        then too, or go with this call), or when some of the lines were removed meanwhile
        (a forget: nothing is kept, the remaining lines wait for the next pass)."""
        episode_id = uuid.uuid4().hex
        row_of = {
            "id": episode_id,
            "chat": episode.chat,
            "origin": episode.origin,
            "start_us": us(episode.start),
            "end_us": us(episode.end),
            "day": episode.day,
            "participants": list(episode.participants),
            "summary": episode.summary,
            "topics": list(episode.topics),
            "source": episode.source,
            "messages": episode.messages,
            "chars": episode.chars,
            "archived_us": None,
            "archive_reason": "",
        }
        ids = sorted(set(line_ids))

        async def write() -> bool:
            async with orm_session() as session:
                try:
                    session.add(Episode(**row_of))
                    session.add_all(
                        EpisodeMember(episode_id=episode_id, user_id=u)
                        for u in dict.fromkeys(episode.participants)
                    )
                    if ids:
                        gone = await session.execute(
                            delete(EpisodeLineRow).where(EpisodeLineRow.id.in_(ids))
                        )
                        if rowcount(gone) < len(ids):
                            # A forget or an opt-out took some of these lines meanwhile:
                            # nothing is kept; the rest is closed again without them.
                            await session.rollback()
                            return False
                    await session.commit()
                    return True
                except IntegrityError:
                    await session.rollback()
            await commit_one(delete(EpisodeLineRow).where(EpisodeLineRow.id.in_(ids)))
            return False

        if not await self.work.run(write(), "保存对话片段"):
            return None
        return as_record(Episode(**row_of))

    # -- the chat path: one chat through its view ----------------------------------------

    async def recent(self, view: View, limit: int) -> list[EpisodeRecord]:
        """The newest ``limit`` live episodes ``view`` may see, oldest first."""
        stmt = (
            select(Episode)
            .where(_visible(view))
            .order_by(Episode.start_us.desc())
            .limit(max(0, min(limit, MAX_READ)))
        )
        found = await self._episodes(stmt, "读取对话片段")
        found.reverse()
        return found

    async def between(
        self, view: View, start: float, end: float, limit: int = MAX_READ
    ) -> list[EpisodeRecord]:
        """The live episodes ``view`` may see that overlap ``[start, end)``, oldest first."""
        stmt = (
            select(Episode)
            .where(_visible(view), Episode.start_us < us(end), Episode.end_us >= us(start))
            .order_by(Episode.start_us)
            .limit(max(0, min(limit, MAX_READ)))
        )
        return await self._episodes(stmt, "读取对话片段")

    async def first(self, view: View) -> EpisodeRecord | None:
        """The oldest live episode ``view`` may see."""
        stmt = select(Episode).where(_visible(view)).order_by(Episode.start_us).limit(1)
        found = await self._episodes(stmt, "读取对话片段")
        return found[0] if found else None

    async def get(self, view: View, episode_id: str) -> EpisodeRecord | None:
        """One live episode by id, if ``view`` may see it (another chat's id: ``None``)."""
        if not isinstance(episode_id, str) or not episode_id:
            return None
        stmt = select(Episode).where(_visible(view), Episode.id == episode_id)
        found = await self._episodes(stmt, "读取对话片段")
        return found[0] if found else None

    async def count(self, view: View) -> int:
        """How many live episodes ``view`` may see."""
        stmt = select(func.count(Episode.id)).where(_visible(view))

        async def read() -> int:
            async with orm_session() as session:
                return int(await session.scalar(stmt) or 0)

        return await self.work.run(read(), "统计对话片段")

    async def archive(self, view: View, episode_id: str, *, at: float, reason: str) -> bool:
        """Move one live episode ``view`` may see to the archive (a user's delete)."""
        if not isinstance(episode_id, str) or not episode_id:
            return False
        stmt = (
            update(Episode)
            .where(_visible(view), Episode.id == episode_id)
            .values(archived_us=us(at), archive_reason=reason[:16])
        )
        return await self.work.run(commit_one(stmt), "归档对话片段") > 0

    # -- operator doors: any chat, any user, the whole table -----------------------------

    async def of_chat_any(
        self, chat: str, *, start: float | None = None, end: float | None = None,
        archived: bool = False, limit: int = MAX_READ,
    ) -> list[EpisodeRecord]:  # fmt: skip
        """Operator door (the console's timeline): ``chat``'s episodes in ``[start, end)``,
        oldest first; archived ones too when ``archived``."""
        clauses: list[Any] = [Episode.chat == chat]
        if start is not None:
            clauses.append(Episode.end_us >= us(start))
        if end is not None:
            clauses.append(Episode.start_us < us(end))
        if not archived:
            clauses.append(Episode.archived_us.is_(None))
        stmt = (
            select(Episode)
            .where(*clauses)
            .order_by(Episode.start_us.desc())
            .limit(max(0, min(limit, MAX_READ)))
        )
        found = await self._episodes(stmt, "读取对话片段")
        found.reverse()
        return found

    def _of_user(self, user_id: str, private_chat: str) -> Any:
        took_part = select(EpisodeMember.episode_id).where(EpisodeMember.user_id == user_id)
        return or_(Episode.chat == private_chat, Episode.id.in_(took_part))

    async def of_user_anywhere(self, user_id: str, private_chat: str) -> list[EpisodeRecord]:
        """Operator door (a user's export): every episode of their private chat and every
        group episode they took part in, archived ones too, oldest first."""
        stmt = (
            select(Episode).where(self._of_user(user_id, private_chat)).order_by(Episode.start_us)
        )
        return await self._episodes(stmt, "读取对话片段")

    async def lines_of_user(self, user_id: str, private_chat: str) -> list[EpisodeLine]:
        """Operator door (a user's export): their waiting lines in every chat and the
        bot's in their private chat, oldest first."""
        stmt = (
            select(EpisodeLineRow)
            .where(
                or_(
                    and_(EpisodeLineRow.user_id == user_id, EpisodeLineRow.is_bot.is_(False)),
                    EpisodeLineRow.chat == private_chat,
                )
            )
            .order_by(EpisodeLineRow.at_us, EpisodeLineRow.id)
        )
        return [as_line(r) for r in await self.work.run(read_scalars(stmt), "读取对话片段的消息")]

    async def forget_user(self, user_id: str, private_chat: str) -> ForgottenEpisodes:
        """Operator door (a user's forget): remove every episode of their private chat,
        every group episode they took part in (its summary may tell what they said) and
        their waiting lines, archived episodes included. Real deletion."""

        async def remove() -> ForgottenEpisodes:
            async with orm_session() as session:
                ids = list(
                    (
                        await session.scalars(
                            select(Episode.id).where(self._of_user(user_id, private_chat))
                        )
                    ).all()
                )
                if ids:
                    await session.execute(
                        delete(EpisodeMember).where(EpisodeMember.episode_id.in_(ids))
                    )
                    await session.execute(delete(Episode).where(Episode.id.in_(ids)))
                await session.execute(delete(EpisodeMember).where(EpisodeMember.user_id == user_id))
                gone = await session.execute(
                    delete(EpisodeLineRow).where(
                        or_(
                            and_(
                                EpisodeLineRow.user_id == user_id,
                                EpisodeLineRow.is_bot.is_(False),
                            ),
                            EpisodeLineRow.chat == private_chat,
                        )
                    )
                )
                await session.commit()
            return ForgottenEpisodes(len(ids), rowcount(gone))

        return await self.work.run(remove(), "删除用户的对话片段")

    async def sweep_episodes(self, ended_before: float, *, at: float, limit: int = 1000) -> int:
        """Operator door (the archive sweep): move live episodes that ended before
        ``ended_before`` to the archive (reason ``expired``); how many moved."""
        pick = (
            select(Episode.id)
            .where(Episode.archived_us.is_(None), Episode.end_us < us(ended_before))
            .limit(limit)
        )

        async def move() -> int:
            async with orm_session() as session:
                ids = list((await session.scalars(pick)).all())
                if not ids:
                    return 0
                await session.execute(
                    update(Episode)
                    .where(Episode.id.in_(ids), Episode.archived_us.is_(None))
                    .values(archived_us=us(at), archive_reason="expired")
                )
                await session.commit()
                return len(ids)

        return await self.work.run(move(), "归档过期的对话片段")

    async def restore_episode(self, chat: str, episode_id: str) -> bool:
        """Operator door (the console): put an archived episode of ``chat`` back."""
        stmt = (
            update(Episode)
            .where(Episode.chat == chat, Episode.id == episode_id, Episode.archived_us.is_not(None))
            .values(archived_us=None, archive_reason="")
        )
        return await self.work.run(commit_one(stmt), "恢复对话片段") > 0
