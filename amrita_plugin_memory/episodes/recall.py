"""The ``<EPISODES>`` block of a turn that asks about past conversations (issue #48).

Only a message that asks (:func:`~..ranking.episode_cues.episode_question`:
「上次我们聊了什么」「昨天群里聊了什么」"what did we talk about last time")
gets a block; every other turn costs one regular-expression pass and no read.
The episodes are read through the chat's :class:`~..storage.scope.View` (the
private chat's own, or the group's), so a private conversation never reaches a
group nor one group another. "上次" is the last episode that ended before the
conversation going on now began (its oldest waiting line).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..core.calendar import OwnerCalendar
from ..core.config_sections import EpisodesConfig
from ..core.episodes import EpisodeRecord
from ..prompting.blocks import render_episodes_block
from ..ranking.episode_cues import EpisodeAsk, episode_question
from ..ranking.episode_pick import pick_episodes
from ..storage.episodes.store import EpisodeStore
from ..storage.scope import View

__all__ = ["CANDIDATES", "EpisodeRecall"]

CANDIDATES = 60
"""Episodes read for a ``last`` or ``topic`` question (the newest of the chat)."""


class EpisodeRecall:
    """Reads and renders the episodes a message asks about."""

    def __init__(
        self,
        store: EpisodeStore,
        calendar: OwnerCalendar,
        config: Callable[[], EpisodesConfig],
    ) -> None:
        self.store = store
        self.calendar = calendar
        self.config = config

    def ask_of(self, text: str, now: float) -> EpisodeAsk | None:
        local = self.calendar.local(now)
        if local is None:
            return None
        return episode_question(text, local)

    async def candidates(self, view: View, ask: EpisodeAsk) -> list[EpisodeRecord]:
        if ask.kind == "first":
            first = await self.store.first(view)
            return [first] if first is not None else []
        if ask.kind == "period" and ask.period is not None:
            return await self.store.between(
                view, ask.period.start.timestamp(), ask.period.end.timestamp()
            )
        return await self.store.recent(view, CANDIDATES)

    async def episodes_for(self, view: View, text: str, now: float) -> list[EpisodeRecord]:
        """The episodes ``text`` (said at ``now``) asks about in ``view``'s chat, oldest first."""
        config = self.config()
        if not (config.enabled and config.recall):
            return []
        ask = self.ask_of(text, now)
        if ask is None:
            return []
        before = now
        if ask.kind == "last":
            started = await self.store.conversation_start(view)
            if started is not None:
                before = min(before, started)
        found = await self.candidates(view, ask)
        return pick_episodes(found, ask, before=before, limit=config.recall_max_episodes)

    async def block(
        self,
        view: View,
        text: str,
        now: float | None = None,
        name_of: Callable[[str], str] | None = None,
    ) -> str:
        """The rendered ``<EPISODES>`` block, empty when the message asks nothing or no
        episode answers it."""
        episodes = await self.episodes_for(view, text, time.time() if now is None else now)
        if not episodes:
            return ""
        return render_episodes_block(
            episodes, self.calendar, name_of, max_chars=self.config().recall_max_chars
        )
