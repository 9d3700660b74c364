"""Hooks of active memory: amrita-core chat turns → :class:`~..active.ActiveMemory`.

* Pre-completion (priority 18, after the memo, the L3 notes and the group
  blocks): the ``<MEMORIES>`` block of the memories relevant to the message,
  after the chat history in this turn's request (:func:`.turn_context.add_turn_block`).
* Completion (priority 18): the answered message is queued for extraction;
  the extraction itself runs in a background task, so the reply never waits.

The block is shown in this request only and never enters the chat history
(see :mod:`.turn_context`).
"""

# No ``from __future__ import annotations``: amrita-sense injects handler
# arguments by their annotation objects.

import asyncio
from typing import Any

from amrita_core import CompletionEvent, PreCompletionEvent
from nonebot import logger

from ..active import ActiveMemory
from ..services import MemoryRuntime
from ..storage.usage import UsageLedger
from .events import amrita_event, target_from_event
from .hooks import HookSet
from .turn_context import add_turn_block

__all__ = ["ActiveHooks", "current_active", "setup_active_memory"]

ACTIVE_HOOK_PRIORITY = 18
NOTICE_TIMEOUT_SECONDS = 10.0

_CURRENT: "list[ActiveHooks]" = []


def current_active() -> "ActiveHooks | None":
    """The hooks registered by :func:`setup_active_memory` in this process."""
    return _CURRENT[-1] if _CURRENT else None


def _message_text(event: Any) -> str:
    try:
        return str(event.get_plaintext() or "")
    except Exception:
        return ""


class ActiveHooks:
    """The chat hooks of active memory; ``active`` may be swapped (tests)."""

    def __init__(self, active: ActiveMemory, *, usage: UsageLedger | None = None) -> None:
        self.active = active
        self.usage = usage
        """Counts what ``<MEMORIES>`` adds to turns (in memory; never waits)."""
        self._hooks = HookSet()

    async def inject(self, event: PreCompletionEvent) -> None:
        ev = amrita_event(event.chat_object)
        if ev is None:
            return  # a background agent, not a chat turn
        try:
            block = await self.active.recall_block(target_from_event(ev), _message_text(ev))
        except Exception as exc:  # the chat goes on without recall
            logger.warning(f"[Memory] 主动召回失败，本轮不注入：{exc.__class__.__name__}: {exc}")
            return
        if block:
            add_turn_block(event.get_context_messages(), block)
            if self.usage is not None:
                self.usage.count_block("memories", len(block))

    async def answered(self, event: CompletionEvent) -> None:
        ev = amrita_event(event.chat_object)
        if ev is None:
            return
        try:
            await self.active.answered(
                target_from_event(ev),
                _message_text(ev),
                event.model_response or "",
                bot_id=str(getattr(ev, "self_id", "") or ""),
            )
        except Exception as exc:
            logger.warning(f"[Memory] 主动记忆排队失败：{exc.__class__.__name__}: {exc}")

    def register(self) -> None:
        if self._hooks.registered:
            return
        self._hooks.on_precompletion(self.inject, priority=ACTIVE_HOOK_PRIORITY)
        self._hooks.on_completion(self.answered, priority=ACTIVE_HOOK_PRIORITY)

    def unregister(self) -> None:
        self._hooks.remove()


async def send_notice(bot_id: str, user_id: str, text: str) -> bool:
    """One private message to ``user_id`` through the bot that answered them; whether it went.

    Never through another bot: only the one the user talks to is known to reach them."""
    import nonebot

    bot = nonebot.get_bots().get(bot_id) if bot_id else None
    if bot is None or not user_id.isdigit():
        logger.info(f"[Memory] 主动记忆提示未发送给 {user_id}：没有可用的 Bot 或不是 QQ 号")
        return False
    try:
        await asyncio.wait_for(
            bot.call_api("send_private_msg", user_id=int(user_id), message=text),
            NOTICE_TIMEOUT_SECONDS,
        )
    except Exception as exc:
        logger.info(f"[Memory] 主动记忆提示未发送给 {user_id}：{exc.__class__.__name__}")
        return False
    return True


def setup_active_memory(runtime: MemoryRuntime) -> ActiveMemory:
    """Build active memory, register its hooks and its shutdown."""
    from nonebot import get_driver

    active = ActiveMemory.build(runtime)
    active.notify = send_notice
    hooks = ActiveHooks(active, usage=runtime.usage)
    hooks.register()
    _CURRENT.append(hooks)

    async def stop() -> None:
        await hooks.active.close()

    get_driver().on_shutdown(stop)
    return active
