"""Hooks of conversation episodes (issue #48): NoneBot events and amrita-core chat turns →
:class:`~..episodes.service.EpisodeService`.

* Every private or group message (a NoneBot message matcher at priority 1 that never
  blocks, before Amrita's chat at 11) → a line of the chat's conversation. Commands
  (a ``COMMAND_START`` prefix) are not conversation and are left out.
* Pre-completion (priority 19, after the memo, the L3 notes, the group blocks and
  ``<MEMORIES>``): ``<EPISODES>`` after the chat history, in this request only
  (:func:`.turn_context.add_turn_block`), when the message asks about past
  conversations; read through the chat's own view (a group's turn sees the group's
  episodes only, a private turn the user's private ones).
* Completion (priority 19): the bot's reply → a line of the same conversation.
"""

# No ``from __future__ import annotations``: NoneBot and amrita-sense inject
# handler arguments by their annotation objects.

from typing import Any

from amrita_core import CompletionEvent, PreCompletionEvent
from nonebot import logger
from nonebot.adapters import Bot, Event

from ..episodes.recorder import Allows
from ..episodes.service import EpisodeService
from ..services import MemoryRuntime
from ..storage.groups.directory import GroupDirectory
from ..storage.usage import UsageLedger
from .events import RulesOf, amrita_event, target_from_event
from .hooks import HookSet
from .turn_context import add_turn_block

__all__ = ["EpisodeHooks", "current_episodes", "setup_episodes"]

EPISODE_HOOK_PRIORITY = 19

_CURRENT: "list[EpisodeHooks]" = []


def current_episodes() -> "EpisodeHooks | None":
    """The hooks registered by :func:`setup_episodes` in this process."""
    return _CURRENT[-1] if _CURRENT else None


def _plaintext(event: Any) -> str:
    try:
        return str(event.get_plaintext() or "")
    except Exception:
        return ""


def _nickname(event: Any) -> str:
    sender = getattr(event, "sender", None)
    if sender is None:
        return ""
    return str(getattr(sender, "card", None) or getattr(sender, "nickname", None) or "")


class EpisodeHooks:
    """The matcher and chat hooks of episodes; ``service`` may be swapped (tests)."""

    def __init__(
        self,
        service: EpisodeService,
        rules: RulesOf,
        command_start: set[str] | None = None,
        *,
        usage: UsageLedger | None = None,
    ) -> None:
        self.service = service
        self.rules = rules
        self.usage = usage
        """Counts what ``<EPISODES>`` adds to turns (in memory; never waits)."""
        self.command_prefixes = tuple(p for p in (command_start or set()) if p.strip())
        self._hooks = HookSet()

    def observe_event(self, event: Any) -> None:
        """A OneBot private or group message → a line (synchronous: the observer's cost)."""
        text = _plaintext(event)
        if self.command_prefixes and text.startswith(self.command_prefixes):
            return
        self.service.heard(target_from_event(event), _nickname(event), text)

    async def inject(self, event: PreCompletionEvent) -> None:
        service = self.service
        if not service.enabled:
            return
        ev = amrita_event(event.chat_object)
        if ev is None:
            return  # a background agent, not a chat turn
        view = self.rules().of_turn(target_from_event(ev)).conversation_view()
        try:
            block = await service.block(view, _plaintext(ev))
        except Exception as exc:  # the chat goes on without the block
            logger.warning(
                f"[Memory] 召回对话片段失败，本轮不注入：{exc.__class__.__name__}: {exc}"
            )
            return
        if block:
            add_turn_block(event.get_context_messages(), block)
            if self.usage is not None:
                self.usage.count_block("episodes", len(block))

    def record_reply(self, event: CompletionEvent) -> None:
        if not self.service.enabled:
            return
        ev = amrita_event(event.chat_object)
        if ev is None:
            return
        bot_id = str(getattr(ev, "self_id", "") or "")
        self.service.replied(target_from_event(ev), bot_id, event.model_response or "")

    def register(self) -> None:
        from nonebot.adapters.onebot.v11 import GroupMessageEvent, PrivateMessageEvent

        if self._hooks.registered:
            return

        async def recording(event: Event) -> bool:
            return self.service.enabled and isinstance(
                event, (GroupMessageEvent, PrivateMessageEvent)
            )

        async def observe_message(bot: Bot, event: Event) -> None:
            self.observe_event(event)

        async def record_reply(event: CompletionEvent) -> None:
            self.record_reply(event)

        self._hooks.on_message(recording, observe_message, priority=1)
        self._hooks.on_precompletion(self.inject, priority=EPISODE_HOOK_PRIORITY)
        self._hooks.on_completion(record_reply, priority=EPISODE_HOOK_PRIORITY)

    def unregister(self) -> None:
        self._hooks.remove()


def setup_episodes(
    runtime: MemoryRuntime, directory: GroupDirectory, allows: Allows | None = None
) -> EpisodeService:
    """Build the episodes service, register its hooks, its loop and its shutdown.

    ``directory``: the group labels the summaries name members with (anonymised unless
    the group turned it off); ``allows``: active memory's consent (an opted-out user's
    lines are not kept)."""
    from nonebot import get_driver

    driver = get_driver()
    service = EpisodeService.build(runtime, directory=directory, allows=allows)
    hooks = EpisodeHooks(
        service, lambda: runtime.scopes, set(driver.config.command_start), usage=runtime.usage
    )
    hooks.register()
    _CURRENT.append(hooks)

    async def start() -> None:
        hooks.service.start()

    async def stop() -> None:
        await hooks.service.close()

    driver.on_startup(start)
    driver.on_shutdown(stop)
    return service
