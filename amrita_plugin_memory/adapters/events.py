"""The one place that turns a chat event into partition keys and the request's :class:`Scope`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..storage.keys import ChatTarget, group_key, user_key
from ..storage.scope import GroupView, Scope, ScopeRules, UserView

__all__ = [
    "RulesOf",
    "amrita_event",
    "group_view_of_event",
    "scope_from_event",
    "scope_from_tool_context",
    "target_from_event",
    "target_from_tool_context",
    "user_view_of_event",
]

RulesOf = Callable[[], ScopeRules]
"""The runtime's current :class:`ScopeRules` (``lambda: rt.scopes``: read per request,
so a test can flip ``rt.scopes`` on the session's runtime)."""


class _OneBotLikeEvent(Protocol):
    def get_user_id(self) -> str: ...


def target_from_event(event: _OneBotLikeEvent) -> ChatTarget:
    """Build the partition keys of a OneBot message event."""
    uid = str(event.get_user_id())
    gid = getattr(event, "group_id", None)
    if gid:
        return ChatTarget(uid, user_key(uid), group_key(gid), str(gid))
    return ChatTarget(uid, user_key(uid), None, None)


def group_view_of_event(event: _OneBotLikeEvent) -> GroupView:
    """What a turn of a OneBot group message event may read of the group stores (its
    :class:`Scope`'s :meth:`~..storage.scope.Scope.group_view`)."""
    return ScopeRules().of_turn(target_from_event(event)).group_view()


def user_view_of_event(event: _OneBotLikeEvent) -> UserView:
    """The speaker's own rows of a OneBot message event (its :class:`Scope`'s
    :meth:`~..storage.scope.Scope.user_view`)."""
    return ScopeRules().of_turn(target_from_event(event)).user_view()


def amrita_event(chat_object: Any) -> Any:
    """The OneBot event of an Amrita chat turn; ``None`` for background agents."""
    from amrita.plugins.chat.runtime import try_get_amrita_ctx

    if chat_object is None:
        return None
    ctx = try_get_amrita_ctx(chat_object)
    return ctx["event"] if ctx else None


async def scope_from_event(
    bot: Any, event: Any, rules: ScopeRules, *, private_reply: bool = False
) -> Scope:
    """The :class:`Scope` of a OneBot message event (``private_reply``: the answer goes
    to the speaker's private chat).

    Group management rights are Amrita's own rule (``is_group_admin``): the
    group's admin or owner, or a bot admin / superuser, asked only when needed.
    """
    from amrita.plugins.chat.check_rule import is_group_admin
    from nonebot.adapters.onebot.v11 import GroupMessageEvent

    async def can_manage_group() -> bool:
        return isinstance(event, GroupMessageEvent) and await is_group_admin(event, bot)

    return rules.of_chat(target_from_event(event), can_manage_group, private_reply=private_reply)


def _tool_turn(ctx: Any) -> Any:
    """Amrita's context of the chat turn a tool runs in; ``None`` elsewhere."""
    from amrita.plugins.chat.runtime import try_get_amrita_ctx

    chat = getattr(ctx.ctx, "chat_object", None)
    return (try_get_amrita_ctx(chat) if chat is not None else None) or None


async def scope_from_tool_context(ctx: Any, rules: ScopeRules) -> Scope | None:
    """The scope of a tool invoked in an Amrita chat turn; ``None`` elsewhere."""
    turn = _tool_turn(ctx)
    if turn is None:
        return None
    return await scope_from_event(turn["bot"], turn["event"], rules)


def target_from_tool_context(ctx: Any) -> ChatTarget | None:
    """Who calls a tool, where (no rights: the knowledge tools only name the source)."""
    turn = _tool_turn(ctx)
    return target_from_event(turn["event"]) if turn is not None else None
