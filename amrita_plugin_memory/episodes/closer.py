"""The episode closer: ended conversations kept as episodes (issue #48).

One pass (:meth:`EpisodeCloser.run_once`) reads the chats with waiting lines,
the longest idle first, splits each chat's lines into conversations
(:func:`~.closing.split_conversations`) and keeps every ended one as an
episode, in one transaction with the removal of its lines
(:meth:`~..storage.episodes.store.EpisodeStore.keep`; a conversation another
process kept first is a no-op).

The summary comes from the background model: at most one request per
episode, none for a conversation of at most two messages within
``[episodes] short_chars`` characters, none once a ``[budget]`` cap holds the
chat back (feature ``episodes`` of the usage ledger). When no request is sent,
the model fails or its answer is refused (:func:`~..prompting.episode_summary.parse_summary`),
an extractive episode is kept instead (:func:`~..ranking.episode_extract.extract_episode`),
so no conversation is missing from the record.

Speakers are shown as in a group's blocks: through ``labels`` (the group's
labels, anonymised by default, :func:`directory_labels`), the nickname
otherwise; the bot is ``你``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import date
from typing import Literal

from nonebot import logger

from ..core.calendar import OwnerCalendar
from ..core.config_sections import EpisodesConfig
from ..core.episodes import EpisodeLine, EpisodeSource, NewEpisode
from ..core.records import group_of_origin
from ..groups.amrita_llm import Completion, add_usage
from ..prompting.episode_summary import parse_summary, summary_messages
from ..prompting.labels import named_label
from ..ranking.episode_extract import extract_episode
from ..storage.episodes.store import EpisodeStore, OpenChat
from ..storage.groups.directory import GroupDirectory
from ..storage.scope import operator_user_view
from ..storage.shared.leases import Leases
from ..storage.usage import BackgroundBudget, spend_of
from .closing import split_conversations

__all__ = ["BOT_NAME", "EpisodeCloser", "Labeller", "directory_labels", "nickname_labels"]

FEATURE = "episodes"
"""The usage ledger's feature of the summaries."""
BOT_NAME = "你"
"""How the bot's own lines are shown (the summary request says so)."""
PRIVATE_NAME = "用户"
"""A private chat's member without a nickname."""
MAX_CHATS = 100
"""Chats read per pass (the longest idle first; the rest wait for the next pass)."""
LEASE_TTL = 120.0
"""How long a chat's lease holds without renewal (kept renewed while its pass runs)."""

Labeller = Callable[[str, Sequence[tuple[str, str]]], Awaitable[dict[str, str]]]
"""``(group id, [(user id, nickname)]) -> {user id: label}``: how a group's members are shown."""

Outcome = Literal["model", "short", "off", "budget", "failed", "refused"]


async def nickname_labels(group_id: str, members: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Every member by their nickname and id (no directory at hand)."""
    return {user_id: named_label(nickname, user_id) for user_id, nickname in members}


def directory_labels(directory: GroupDirectory) -> Labeller:
    """The group's own labels: anonymised (``用户_1234``) unless the group turned that off."""

    async def labels(group_id: str, members: Sequence[tuple[str, str]]) -> dict[str, str]:
        if await directory.anonymize(group_id):
            return await directory.labels(group_id, [user_id for user_id, _ in members])
        return await nickname_labels(group_id, members)

    return labels


class EpisodeCloser:
    """Keeps the ended conversations of every chat as episodes (one pass: :meth:`run_once`)."""

    def __init__(
        self,
        store: EpisodeStore,
        calendar: OwnerCalendar,
        config: EpisodesConfig,
        complete: Completion | None,
        budget: BackgroundBudget | None = None,
        *,
        labels: Labeller = nickname_labels,
        max_chats: int = MAX_CHATS,
        leases: Leases | None = None,
    ) -> None:
        self.store = store
        self.calendar = calendar
        self.config = config
        self.complete = complete
        self.budget = budget
        self.labels = labels
        self.max_chats = max_chats
        self.leases = leases
        """Several processes on one store: a chat is closed by one of them at a time
        (``None``: this process owns the store)."""
        self.outcomes: dict[str, int] = {}
        """How each summary was made since start (``model``, or why not: status, tests)."""

    def configure(self, config: EpisodesConfig) -> None:
        self.config = config

    def _day(self, at: float) -> date:
        day = self.calendar.day_of(at)
        assert day is not None  # a number is always readable
        return day

    @property
    def idle_seconds(self) -> float:
        return self.config.idle_minutes * 60

    def _nothing_ended(self, chat: OpenChat, now: float) -> bool:
        """Whether ``chat``'s waiting lines are surely one conversation still going on."""
        idle = self.idle_seconds
        return (
            chat.lines < self.config.max_lines
            and chat.last - chat.first <= idle
            and now - chat.last <= idle
            and self._day(chat.first) == self._day(now)
        )

    async def run_once(self, now: float) -> int:
        """Keep every ended conversation as an episode; how many episodes were kept."""
        kept = 0
        for chat in await self.store.open_chats(self.max_chats):
            if self._nothing_ended(chat, now):
                continue
            try:
                kept += await self._close_leased(chat.chat, now)
            except Exception as exc:  # one chat's failure never stops the others
                logger.warning(
                    f"[Memory] 保存对话片段失败（{chat.chat}）：{exc.__class__.__name__}: {exc}"
                )
        return kept

    async def _close_leased(self, chat: str, now: float) -> int:
        """:meth:`_close_chat` under the chat's lease: another process closing it now
        means this pass leaves it (no second summary request)."""
        if self.leases is None:
            return await self._close_chat(chat, now)
        async with self.leases.attempt(f"episodes:{chat}", ttl=LEASE_TTL) as mine:
            return await self._close_chat(chat, now) if mine else 0

    async def _close_chat(self, chat: str, now: float) -> int:
        max_lines = self.config.max_lines
        limit = max_lines * 2
        lines = await self.store.lines_of(chat, limit)
        ended, rest = split_conversations(
            lines, idle_seconds=self.idle_seconds, day_of=self._day, max_lines=max_lines, now=now
        )
        if len(lines) >= limit and not rest and ended and len(ended[-1]) < max_lines:
            ended.pop()  # it may go on past the lines read: the next pass sees the rest
        kept = 0
        for conversation in ended:
            if await self.close(conversation):
                kept += 1
        return kept

    async def close(self, conversation: Sequence[EpisodeLine]) -> bool:
        """Keep one ended conversation as an episode (``False``: kept by another process)."""
        first, last = conversation[0], conversation[-1]
        participants = tuple(dict.fromkeys(ln.user_id for ln in conversation if not ln.is_bot))
        name_of = await self._names(first.origin, conversation)
        summary, topics, source = await self.summarize(conversation, name_of, participants)
        episode = NewEpisode(
            chat=first.chat,
            origin=first.origin,
            start=first.at,
            end=last.at,
            participants=participants,
            summary=summary,
            topics=topics,
            source=source,
            messages=len(conversation),
            chars=sum(len(ln.text) for ln in conversation),
            day=self._day(first.at).isoformat(),
        )
        return await self.store.keep(episode, [ln.id for ln in conversation]) is not None

    async def _names(
        self, origin: str, conversation: Sequence[EpisodeLine]
    ) -> Callable[[EpisodeLine], str]:
        """How each line's speaker is shown: the bot as ``你``, a group's members by
        ``labels``, a private chat's member by their nickname."""
        group_id = group_of_origin(origin)
        labels: dict[str, str] = {}
        if group_id is not None:
            members: dict[str, str] = {}
            for line in conversation:
                if not line.is_bot:
                    members[line.user_id] = line.name or members.get(line.user_id, "")
            labels = await self.labels(group_id, list(members.items()))

        def name_of(line: EpisodeLine) -> str:
            if line.is_bot:
                return BOT_NAME
            return labels.get(line.user_id) or line.name or PRIVATE_NAME

        return name_of

    def _count(self, outcome: Outcome) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def _short(self, conversation: Sequence[EpisodeLine]) -> bool:
        chars = sum(len(ln.text) for ln in conversation)
        return len(conversation) <= 2 and chars <= self.config.short_chars

    async def summarize(
        self,
        conversation: Sequence[EpisodeLine],
        name_of: Callable[[EpisodeLine], str],
        participants: Sequence[str],
    ) -> tuple[str, tuple[str, ...], EpisodeSource]:
        """``(summary, topics, source)``: the model's when it may be asked and answers
        well, else extracted."""
        answer = await self._asked(conversation, name_of, participants)
        if answer is not None:
            self._count("model")
            return answer[0], answer[1], "model"
        summary, topics = extract_episode(conversation, name_of)
        return summary, topics, "extract"

    async def _asked(
        self,
        conversation: Sequence[EpisodeLine],
        name_of: Callable[[EpisodeLine], str],
        participants: Sequence[str],
    ) -> tuple[str, tuple[str, ...]] | None:
        """The model's summary, or ``None`` (not asked, failed or refused: counted)."""
        if not self.config.summarize or self.complete is None:
            self._count("off")
            return None
        if self._short(conversation):
            self._count("short")
            return None
        who = participants[0] if participants else ""
        # The closer reads every chat's lines (off the chat path): the first speaker's
        # budget is read by their id through the operator door.
        payer = operator_user_view(who)
        if self.budget is not None and not (await self.budget.admit(FEATURE, payer)).allowed:
            self._count("budget")
            return None
        messages = summary_messages(
            conversation, name_of, self.config.max_request_chars, calendar=self.calendar
        )
        try:
            text, usage = await self.complete(messages)
        except Exception as exc:
            logger.warning(f"[Memory] 对话片段摘要请求失败：{exc.__class__.__name__}: {exc}")
            self._count("failed")
            return None
        await add_usage(usage, what="对话片段摘要")
        if self.budget is not None:
            spend = spend_of(usage, sent=[m["content"] for m in messages], answer=text)
            await self.budget.spent(FEATURE, who, spend)
        parsed = parse_summary(text)
        if isinstance(parsed, str):
            logger.debug(f"[Memory] 对话片段摘要不可用：{parsed}")
            self._count("refused")
            return None
        return parsed
