"""Hooks of group awareness: NoneBot events and amrita-core chat turns → :class:`GroupAwareness`.

* Every group message (a NoneBot message matcher at priority 1 that never
  blocks, before Amrita's chat at 11) → the group's window. Commands
  (messages starting with a ``COMMAND_START`` prefix) are not conversation
  and are left out, as Amrita's chat leaves them out.
* Pre-completion (priority 17, after the memo at 15 and the L3 notes at 16):
  ``<GROUP_CONTEXT>`` and ``<PERSONAS>`` after the chat history of a group
  turn's request (:func:`.turn_context.add_turn_block`: they change every turn).
* Pre-completion (priority 90, after every other block): ``<SELF>`` at the
  very start of every turn's system prompt, private and group.
* Completion (priority 17): the reply into the window; persona extraction
  in the background.

The hooks are registered once per process and read the live configuration,
so with the layers switched off they cost one attribute check per message.
No block ever enters the chat history: ``train`` is never persisted by Amrita,
and the per-turn blocks are taken out again before it is (:mod:`.turn_context`).
"""

# No ``from __future__ import annotations``: NoneBot and amrita-sense inject
# handler arguments by their annotation objects.

from typing import Any

from amrita_core import CompletionEvent, PreCompletionEvent
from nonebot import logger
from nonebot.adapters import Bot, Event

from ..groups.service import GroupAwareness
from ..prompting.blocks import block_name
from ..prompting.group_blocks import SeenInRequest, prepend_block
from ..services import MemoryRuntime
from ..storage.usage import UsageLedger
from .events import amrita_event, group_view_of_event, user_view_of_event
from .hooks import HookSet
from .turn_context import add_turn_block, user_message

__all__ = ["GroupHooks", "current_hooks", "seen_in_request", "setup_group_awareness"]

GROUP_HOOK_PRIORITY = 17
SELF_HOOK_PRIORITY = 90

_CURRENT: "list[GroupHooks]" = []


def current_hooks() -> "GroupHooks | None":
    """The hooks registered by :func:`setup_group_awareness` in this process."""
    return _CURRENT[-1] if _CURRENT else None


def _text_of(message: Any) -> str:
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(getattr(part, "text", "") or "") for part in content)
    return ""


def seen_in_request(wrap: Any) -> SeenInRequest:
    """What the chat history of this request (history and the user's query) shows the model."""
    user: list[str] = []
    assistant: list[str] = []
    for message in [*wrap.memory, user_message(wrap)]:
        role = getattr(message, "role", None)
        if role == "user":
            user.append(_text_of(message))
        elif role == "assistant":
            assistant.append(_text_of(message))
    return SeenInRequest(user, assistant)


class GroupHooks:
    """The matcher and chat hooks of group awareness; ``awareness`` may be swapped."""

    def __init__(
        self,
        awareness: GroupAwareness,
        command_start: set[str] | None = None,
        *,
        usage: UsageLedger | None = None,
    ) -> None:
        self.awareness = awareness
        self.usage = usage
        """Counts what the blocks add to turns (in memory; never waits)."""
        self.command_prefixes = tuple(p for p in (command_start or set()) if p.strip())
        self._hooks = HookSet()

    # -- handlers ----------------------------------------------------------------------

    def observe_event(self, event: Any) -> None:
        """A OneBot group message → the window (synchronous: the observer's whole cost)."""
        text = event.get_plaintext()
        if self.command_prefixes and text.startswith(self.command_prefixes):
            return
        sender = event.sender
        nickname = sender.card or sender.nickname or ""
        self.awareness.observe(str(event.group_id), str(event.user_id), nickname, text)

    async def inject_group(self, event: PreCompletionEvent) -> None:
        from nonebot.adapters.onebot.v11 import GroupMessageEvent

        awareness = self.awareness
        if not awareness.window_enabled:
            return
        ev = amrita_event(event.chat_object)
        if not isinstance(ev, GroupMessageEvent):
            return
        wrap = event.get_context_messages()
        sender = ev.sender
        try:
            blocks = await awareness.turn_blocks(
                group_view_of_event(ev),
                str(ev.user_id),
                sender.card or sender.nickname or "",
                seen_in_request(wrap),
            )
        except Exception as exc:  # the chat goes on without the blocks
            logger.warning(
                f"[Memory] 构建群上下文失败，本轮不注入：{exc.__class__.__name__}: {exc}"
            )
            return
        for block in blocks:
            add_turn_block(wrap, block)
            if self.usage is not None:
                self.usage.count_block(block_name(block), len(block))

    async def inject_self(self, event: PreCompletionEvent) -> None:
        if amrita_event(event.chat_object) is None:
            return  # a background agent, not a chat turn
        train = event.get_context_messages().train
        if not isinstance(train.content, str):
            return
        try:
            block = await self.awareness.self_block()
        except Exception as exc:
            logger.warning(
                f"[Memory] 读取自我记忆失败，本轮不注入：{exc.__class__.__name__}: {exc}"
            )
            return
        if block:
            train.content = prepend_block(train.content, block)
            if self.usage is not None:
                self.usage.count_block("self", len(block))

    def record_reply(self, event: CompletionEvent) -> None:
        from nonebot.adapters.onebot.v11 import GroupMessageEvent

        if not self.awareness.window_enabled:
            return
        ev = amrita_event(event.chat_object)
        if not isinstance(ev, GroupMessageEvent):
            return
        self.awareness.answered(
            group_view_of_event(ev),
            user_view_of_event(ev),
            str(ev.self_id),
            event.model_response or "",
        )

    # -- registration ---------------------------------------------------------------------------

    def register(self) -> None:
        from nonebot.adapters.onebot.v11 import GroupMessageEvent

        if self._hooks.registered:
            return

        async def window_on(event: Event) -> bool:
            return self.awareness.window_enabled and isinstance(event, GroupMessageEvent)

        async def observe_group_message(bot: Bot, event: Event) -> None:
            self.observe_event(event)

        async def record_group_reply(event: CompletionEvent) -> None:
            self.record_reply(event)

        self._hooks.on_message(window_on, observe_group_message, priority=1)
        self._hooks.on_precompletion(self.inject_group, priority=GROUP_HOOK_PRIORITY)
        self._hooks.on_precompletion(self.inject_self, priority=SELF_HOOK_PRIORITY)
        self._hooks.on_completion(record_group_reply, priority=GROUP_HOOK_PRIORITY)

    def unregister(self) -> None:
        self._hooks.remove()


def setup_group_awareness(runtime: MemoryRuntime) -> GroupAwareness:
    """Build group awareness, register its hooks and its driver start-up / shutdown work."""
    from nonebot import get_driver

    driver = get_driver()
    awareness = GroupAwareness.build(
        runtime.config.file,
        fences=runtime.fences,
        coherence=runtime.store.coherence,
        budget=runtime.budget,
    )
    hooks = GroupHooks(awareness, set(driver.config.command_start), usage=runtime.usage)
    hooks.register()
    _CURRENT.append(hooks)

    async def start() -> None:
        try:
            await hooks.awareness.start()
        except Exception as exc:
            logger.warning(f"[Memory] 群上下文窗口启动压缩失败：{exc.__class__.__name__}: {exc}")

    async def stop() -> None:
        await hooks.awareness.close()

    driver.on_startup(start)
    driver.on_shutdown(stop)
    return awareness
