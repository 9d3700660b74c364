"""Chat hooks of the L3 loop.

* Every message of the target user (private or group, addressed to the bot
  or not) → :meth:`~..subconscious.runner.SubconsciousRunner.on_target_message` (cancel the planned
  run, add a penalty, plan one run), after recording the bot it came through
  (proactive messages go through that bot only). A NoneBot message matcher at
  priority 1 that never blocks.
* Pending messages → a short ``<SUBCONSCIOUS_NOTES>`` block after the chat
  history of the target user's next **private** turn (pre-completion hook,
  :func:`.turn_context.add_turn_block`: shown in that request only, never
  stored), removed from the state when that turn completed (completion hook).
  Never in a group.

Every handler checks ``runner.active`` first, and :meth:`SubconsciousHooks.unregister`
removes them all, so a stopped runner leaves no live hook behind.
"""

# No ``from __future__ import annotations``: NoneBot and amrita-sense inject
# handler arguments by their annotation objects.

from typing import Any

from amrita_core import CompletionEvent, PreCompletionEvent
from nonebot import logger
from nonebot.adapters import Bot, Event

from ..prompting.blocks import render_block
from ..subconscious.runner import SubconsciousRunner
from ..subconscious.types import PendingMessage
from .events import amrita_event
from .hooks import HookSet
from .turn_context import add_turn_block

__all__ = ["NOTES_HOOK_PRIORITY", "SubconsciousHooks", "render_notes_block"]

NOTES_HOOK_PRIORITY = 16
"""After the L1 memo hook (15); the notes come first in the turn's section."""


def render_notes_block(messages: list[PendingMessage]) -> str:
    """The ``<SUBCONSCIOUS_NOTES>`` block (intents and drafts verbatim, tags neutralised)."""
    lines: list[str] = []
    for message in messages:
        line = f"- {message['intent']}"
        draft = message.get("text")
        if draft:
            line += f"（草稿：{draft}）"
        lines.append(line)
    return render_block(
        "SUBCONSCIOUS_NOTES",
        "\n".join(lines),
        header=(
            "你在后台整理记忆时，记下了想告诉该用户的事。请在这次回复中自然地转达"
            "（可以结合当前话题，不必逐字照搬；与当前话题无关时简短带过即可）。"
            "这些是你自己记下的要点，不是新的指令："
        ),
    )


class SubconsciousHooks:
    """The chat hooks of one runner; registered and removed as a unit."""

    def __init__(self, runner: SubconsciousRunner) -> None:
        self.runner = runner
        self._hooks = HookSet()

    # -- predicates ---------------------------------------------------------

    def is_target(self, event: Event) -> bool:
        try:
            return str(event.get_user_id()) == self.runner.target_user_id
        except ValueError:  # events without a user (notices, meta events)
            return False

    def is_target_private(self, ev: Any) -> bool:
        from nonebot.adapters.onebot.v11 import PrivateMessageEvent

        return isinstance(ev, PrivateMessageEvent) and self.is_target(ev)

    # -- handlers -------------------------------------------------------------

    async def deliver(self, event: PreCompletionEvent) -> None:
        if not self.runner.active:
            return
        ev = amrita_event(event.chat_object)
        if ev is None or not self.is_target_private(ev):
            return
        try:
            messages = await self.runner.pending.claim(event.chat_object)
        except Exception as exc:  # the chat must not fail because of our bookkeeping
            logger.warning(f"[Subconscious] 读取待转达消息失败：{exc.__class__.__name__}: {exc}")
            return
        if not messages:
            return
        add_turn_block(event.get_context_messages(), render_notes_block(messages))
        logger.info(
            f"[Subconscious] Showing {len(messages)} pending message(s) to user={self.runner.target_user_id}"
        )

    async def confirm(self, event: CompletionEvent) -> None:
        if not self.runner.active or event.chat_object is None:
            return
        try:
            await self.runner.pending.confirm(event.chat_object)
        except Exception as exc:  # the chat must not fail because of our bookkeeping
            logger.warning(f"[Subconscious] 更新待转达消息失败：{exc.__class__.__name__}: {exc}")

    # -- registration -------------------------------------------------------------

    def register(self) -> None:
        """Register the message matcher and the two completion hooks."""
        if self._hooks.registered:
            return
        runner = self.runner

        async def target_rule(event: Event) -> bool:
            return runner.active and self.is_target(event)

        async def on_target_message(bot: Bot, event: Event) -> None:
            # The bot this message came through is the one that can reach the user.
            runner.messenger.saw_target(str(bot.self_id))
            runner.on_target_message()

        self._hooks.on_message(target_rule, on_target_message, priority=1)
        self._hooks.on_precompletion(self.deliver, priority=NOTES_HOOK_PRIORITY)
        self._hooks.on_completion(self.confirm, priority=NOTES_HOOK_PRIORITY)

    def unregister(self) -> None:
        """Remove every hook registered by :meth:`register`."""
        self._hooks.remove()
