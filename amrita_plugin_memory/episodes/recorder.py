"""The lines of conversations going on, heard from the chat (issue #48).

The chat hooks call :meth:`EpisodeRecorder.heard` (a user's message, private or
group) and :meth:`EpisodeRecorder.replied` (the bot's answer); both only append
to a bounded buffer and never wait. :meth:`EpisodeRecorder.flush` (the service's
loop, and the shutdown) writes the buffer to the store in one transaction.

A user's choices hold at the flush, for every process: lines of a user who
switched automatic memory off (``/memory auto off``) are not kept, nor lines said
at or before their last forget or opt-out anywhere (:meth:`UserFences.void_points`),
nor the bot's replies to such lines, nor anything of a forgotten private chat.
The buffer is bounded: past :data:`MAX_WAITING` lines the oldest are dropped with
a warning (an episode is a record of the chat, never the only copy of a memory).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from nonebot import logger

from ..core.episodes import LINE_MAX_CHARS, EpisodeLine
from ..core.records import ORIGIN_PRIVATE, origin_of_group
from ..storage.episodes.store import EpisodeStore
from ..storage.keys import ChatTarget
from ..storage.scope import ScopeRules, UserView
from ..storage.users.fences import UserFences

__all__ = ["MAX_WAITING", "EpisodeRecorder", "Heard"]

MAX_WAITING = 5000
"""Lines held in memory between two flushes (the oldest are dropped beyond)."""

Allows = Callable[[UserView], Awaitable[bool]]
"""``the speaker's view -> may their lines be kept?`` (active memory's consent)."""


@dataclass(frozen=True, slots=True)
class Heard:
    """A line waiting for the flush, and whose message it belongs to (``about``: the
    speaker for their own line, the user answered for a reply)."""

    line: EpisodeLine
    about: str
    who: UserView
    """``about``'s view (from the turn's scope): what their consent is read with."""


def _line_of(
    target: ChatTarget, user_id: str, text: str, at: float, name: str, is_bot: bool
) -> EpisodeLine:
    origin = ORIGIN_PRIVATE if target.group_id is None else origin_of_group(target.group_id)
    return EpisodeLine(
        chat=target.session,
        origin=origin,
        user_id=user_id,
        text=text[:LINE_MAX_CHARS],
        at=at,
        name=name[:64],
        is_bot=is_bot,
    )


def _speaker(target: ChatTarget) -> UserView:
    return ScopeRules().of_turn(target).user_view()


class EpisodeRecorder:
    """Chat lines buffered for the store (see the module docstring)."""

    def __init__(
        self,
        store: EpisodeStore,
        fences: UserFences,
        allows: Allows | None = None,
        *,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self.store = store
        self.fences = fences
        self.allows = allows
        self._waiting: deque[Heard] = deque()
        self.max_waiting = max(1, max_waiting)
        self.dropped = 0
        """Lines dropped because the buffer was full (since start)."""
        self._flushing = asyncio.Lock()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _add(self, heard: Heard) -> None:
        if len(self._waiting) >= self.max_waiting:
            self._waiting.popleft()
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                logger.warning(f"[Memory] 对话片段缓冲已满，已丢弃 {self.dropped} 条最早的消息")
        self._waiting.append(heard)

    def heard(self, target: ChatTarget, name: str, text: str, at: float) -> None:
        """A user's message in ``target``'s chat (never waits)."""
        if not isinstance(text, str) or not text.strip():
            return
        line = _line_of(target, target.user_id, text.strip(), at, name, False)
        self._add(Heard(line, target.user_id, _speaker(target)))

    def replied(self, target: ChatTarget, bot_id: str, text: str, at: float) -> None:
        """The bot's answer to ``target``'s speaker (never waits)."""
        if not isinstance(text, str) or not text.strip():
            return
        line = _line_of(target, bot_id, text.strip(), at, "", True)
        self._add(Heard(line, target.user_id, _speaker(target)))

    def forget(self, user_id: str, private_chat: str = "") -> int:
        """Drop ``user_id``'s waiting lines here (a forget or an opt-out in this process);
        how many went."""
        kept = deque(
            h for h in self._waiting if h.about != user_id and h.line.chat != (private_chat or None)
        )
        gone = len(self._waiting) - len(kept)
        self._waiting = kept
        return gone

    async def _keepable(self, waiting: Sequence[Heard]) -> list[EpisodeLine]:
        """The lines of ``waiting`` whose users still allow them (see the module docstring)."""
        speakers = {h.about: h.who for h in waiting}
        void = await self.fences.void_points(speakers, "active")
        refused: set[str] = set()
        if self.allows is not None:
            for user_id, who in speakers.items():
                if not await self.allows(who):
                    refused.add(user_id)
        return [
            h.line
            for h in waiting
            if h.about not in refused and h.line.at > void.get(h.about, float("-inf"))
        ]

    async def flush(self) -> int:
        """Write the waiting lines (one transaction); how many were kept. On a failure
        the lines go back to the buffer for the next flush."""
        async with self._flushing:
            if not self._waiting:
                return 0
            waiting = list(self._waiting)
            self._waiting.clear()
            try:
                lines = await self._keepable(waiting)
                await self.store.add_lines(lines)
            except BaseException:
                # Back in front of what arrived meanwhile, still within the bound.
                self._waiting.extendleft(reversed(waiting))
                while len(self._waiting) > self.max_waiting:
                    self._waiting.popleft()
                    self.dropped += 1
                raise
            return len(lines)
