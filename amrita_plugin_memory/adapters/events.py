"""The one place that turns a chat event into partition keys and a :class:`Caller`."""

from __future__ import annotations

from typing import Any, Protocol

from ..storage.keys import ChatTarget, group_key, user_key
from ..tools.memory_tools import Caller

__all__ = [
    "amrita_event",
    "caller_from_event",
    "caller_from_tool_context",
    "target_from_event",
]


class _OneBotLikeEvent(Protocol):
    def get_user_id(self) -> str: ...


def target_from_event(event: _OneBotLikeEvent) -> ChatTarget:
    """Build the partition keys of a OneBot message event."""
    uid = str(event.get_user_id())
    gid = getattr(event, "group_id", None)
    if gid:
        return ChatTarget(uid, user_key(uid), group_key(gid), str(gid))
    return ChatTarget(uid, user_key(uid), None, None)


def amrita_event(chat_object: Any) -> Any:
    """The OneBot event of an Amrita chat turn; ``None`` for background agents."""
    from amrita.plugins.chat.runtime import try_get_amrita_ctx

    if chat_object is None:
        return None
    ctx = try_get_amrita_ctx(chat_object)
    return ctx["event"] if ctx else None


async def caller_from_event(bot: Any, event: Any) -> Caller:
    """The :class:`Caller` of a OneBot message event.

    Group management rights are Amrita's own rule (``is_group_admin``): the
    group's admin or owner, or a bot admin / superuser.
    """
    from amrita.plugins.chat.check_rule import is_group_admin
    from nonebot.adapters.onebot.v11 import GroupMessageEvent

    async def can_manage_group() -> bool:
        return isinstance(event, GroupMessageEvent) and await is_group_admin(event, bot)

    return Caller(target_from_event(event), can_manage_group)


async def caller_from_tool_context(ctx: Any) -> Caller | None:
    """The caller of a tool invoked in an Amrita chat turn; ``None`` elsewhere."""
    from amrita.plugins.chat.runtime import try_get_amrita_ctx

    chat = getattr(ctx.ctx, "chat_object", None)
    amrita_ctx = try_get_amrita_ctx(chat) if chat is not None else None
    if not amrita_ctx:
        return None
    return await caller_from_event(amrita_ctx["bot"], amrita_ctx["event"])
