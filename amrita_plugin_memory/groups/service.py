"""Group awareness of one process: what the hooks call, independent of NoneBot's event types.

* :meth:`GroupAwareness.observe` — every group message and every bot reply
  in a group (the hot path: memory only, see
  :class:`~..storage.groups.window_store.GroupWindowStore`).
* :meth:`GroupAwareness.turn_blocks` — the ``<GROUP_CONTEXT>`` and
  ``<PERSONAS>`` blocks of a group turn.
* :meth:`GroupAwareness.self_block` — the ``<SELF>`` block of every turn.
* :meth:`GroupAwareness.answered` — after a group turn the bot answered:
  record the reply, start the background persona extraction.

Everything reads the live configuration (:meth:`configure`), so switching a
layer on or off needs no new hooks.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from nonebot import logger

from ..core.config import ConfigFile
from ..prompting.group_blocks import (
    SeenInRequest,
    render_group_context,
    render_personas,
    render_self,
)
from ..storage.groups.stores import GroupStores
from ..storage.scope import GroupView, UserView
from ..storage.shared.coherence import Coherence
from ..storage.usage import BackgroundBudget
from ..storage.users.fences import UserFences
from .amrita_llm import Completion, complete_isolated
from .extraction import PersonaExtractor

__all__ = ["GroupAwareness"]


class GroupAwareness:
    """The group window, personas and self memory, wired to one configuration."""

    def __init__(
        self,
        config: ConfigFile,
        stores: GroupStores,
        *,
        complete: Completion = complete_isolated,
        clock: Callable[[], float] = time.time,
        fences: UserFences | None = None,
        budget: BackgroundBudget | None = None,
    ) -> None:
        self.config = config
        self.stores = stores
        self.clock = clock
        self.extractor = PersonaExtractor(
            stores, config, complete=complete, clock=clock, fences=fences, budget=budget
        )

    @classmethod
    def build(
        cls,
        config: ConfigFile,
        *,
        fences: UserFences | None = None,
        coherence: Coherence | None = None,
        budget: BackgroundBudget | None = None,
    ) -> GroupAwareness:
        forgotten = fences.forgotten if fences is not None else None
        return cls(
            config, GroupStores.build(config, coherence, forgotten), fences=fences, budget=budget
        )

    def configure(self, config: ConfigFile) -> None:
        """Use another configuration from now on (stored data stays)."""
        self.config = config
        self.stores.configure(config)
        self.extractor.config = config

    @property
    def window_enabled(self) -> bool:
        return self.config.group_context.enabled

    @property
    def persona_enabled(self) -> bool:
        return self.config.group_context.enabled and self.config.persona.enabled

    # -- events ------------------------------------------------------------------------

    def observe(
        self, group_id: str, user_id: str, nickname: str, text: str, *, is_bot: bool = False
    ) -> None:
        """A message seen in (or a reply sent to) a group; never waits."""
        if not self.window_enabled or not text.strip():
            return
        self.stores.windows.append(
            group_id, user_id, nickname, text, is_bot=is_bot, at=self.clock()
        )

    def answered(self, view: GroupView, speaker: UserView, bot_id: str, reply: str) -> None:
        """The bot answered a turn in ``view``'s group: record the reply, learn personas in
        the background."""
        if not self.window_enabled or not reply.strip():
            return
        self.observe(GroupView.check(view).group_id, bot_id, "", reply, is_bot=True)
        if self.persona_enabled and self.config.persona.update_enabled:
            self.extractor.schedule(view, speaker)

    # -- blocks ----------------------------------------------------------------------------

    async def self_block(self) -> str:
        return render_self(await self.stores.self_memory.texts())

    async def turn_blocks(
        self, view: GroupView, speaker_id: str, speaker_name: str, seen: SeenInRequest
    ) -> list[str]:
        """``<GROUP_CONTEXT>`` then ``<PERSONAS>`` of a turn in ``view``'s group (empty ones
        left out)."""
        if not self.window_enabled:
            return []
        gc = self.config.group_context
        entries = await self.stores.windows.recent(
            view, min(gc.recent_context_messages, gc.context_message_count)
        )
        shown = [e for e in entries if not seen.shows(e)]
        labels = await self.stores.directory.member_labels(
            view, shown, [(speaker_id, speaker_name)]
        )
        blocks = [render_group_context(shown, lambda e: labels[e.user_id])]
        if self.persona_enabled:
            members = list(dict.fromkeys([speaker_id, *(e.user_id for e in shown if not e.is_bot)]))
            personas = await self.stores.personas.of_members(view, members)
            blocks.append(
                render_personas(
                    ((labels[u], personas[u].fields) for u in members),
                    max_chars=self.config.persona.prompt_max_chars,
                )
            )
        return [b for b in blocks if b]

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Cut stored windows to the current limits (driver start-up)."""
        if not self.window_enabled:
            return
        report = await self.stores.windows.compact()
        if report.dropped or report.cut:
            logger.info(
                f"[Memory] 群上下文窗口启动压缩：删除 {report.dropped} 条超出条数上限的消息，"
                f"截断 {report.cut} 条超长消息"
            )

    async def drain(self) -> None:
        """Wait for the background work started so far (extractions, then window writes)."""
        await self.extractor.drain()
        await self.stores.windows.drain()

    async def close(self) -> None:
        """Stop extractions and flush every window (driver shutdown)."""
        await self.extractor.close()
        await self.stores.windows.close()
