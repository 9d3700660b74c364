"""``/memory`` chat commands (alias ``记忆``): the dispatch.

The commands are plain logic with their reply text (testable); the NoneBot
matcher in :mod:`..adapters.matchers` only adapts events and sends replies.
This module routes a parsed request (:mod:`.command_parsing`) to its command
family by the handler its spec names (:mod:`.command_specs`, :data:`_ROUTES`)
and answers ``/memory auto`` itself:

* ``user|group list|search|delete`` and ``user archive`` (the stored
  memories) are :class:`~.listing_commands.ListingCommands`;
* the group-awareness commands (``self``, ``persona``, ``memo``, ``group
  anonymize|context|memo``) are :class:`~.group_commands.GroupCommands`;
* a user's export and forget of their own data (``user export|forget``,
  private chats only) are :class:`~.user_commands.UserCommands`;
* the past conversations (``episodes``, ``group episodes``) are
  :class:`~.episode_commands.EpisodeCommands`; an opt-out of active memory
  (``auto off``) also drops the caller's lines of conversations not ended yet.

Every family reaches the memo, the archive and the episodes only through the turn's
:class:`~.chat_stores.ChatStores` (``chat``: one :class:`~.chat_stores.ChatStoreSource`
per process).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from ..storage.scope import Scope, UserView
from ..storage.shared.sessions import SharedDatabaseError
from .chat_stores import ChatStoreSource
from .command_parsing import USAGE, CommandRequest, parse_command, replies_privately
from .command_specs import SPECS, spec_of
from .episode_commands import EpisodeCommands
from .group_commands import GroupCommands
from .listing_commands import PAGE_SIZE, ListingCommands
from .memory_tools import MemoryTools
from .user_commands import Send, Upload, UserCommands

__all__ = [
    "PAGE_SIZE",
    "USAGE",
    "AutoSwitch",
    "CommandRequest",
    "MemoryCommands",
    "parse_command",
    "replies_privately",
]


class AutoSwitch(Protocol):
    """What ``/memory auto`` needs of active memory (:class:`~..active.ActiveMemory`)."""

    @property
    def enabled(self) -> bool: ...

    async def allows(self, view: UserView) -> bool: ...

    async def set_consent(self, view: UserView, allowed: bool) -> bool: ...


_AUTO_SWITCH = next(spec.switch for spec in SPECS if spec.handler == "auto" and spec.switch)
"""The configuration switch of ``/memory auto`` as declared (:mod:`.command_specs`)."""

AUTO_ON = (
    "我会在回答你之后自动记下你提到的关于自己的事（每几条消息整理一次），并在聊天时想起相关的记忆。"
)
AUTO_OFF = "不会自动记录你的消息，也不会自动想起记忆；已记下的记忆保留（/memory user list 查看，delete 删除）。"


class MemoryCommands:
    """Executes parsed ``/memory`` requests and renders Chinese replies."""

    def __init__(
        self,
        tools: MemoryTools,
        group: GroupCommands | None = None,
        users: UserCommands | None = None,
        auto: AutoSwitch | None = None,
        episodes: EpisodeCommands | None = None,
        chat: ChatStoreSource | None = None,
    ) -> None:
        self.tools = tools
        self.group = group
        self.users = users
        self.auto = auto
        self.episodes = episodes
        self.listing = ListingCommands(tools, chat)

    async def run(self, request: CommandRequest, scope: Scope, *, superuser: bool = False) -> str:
        spec = spec_of(request.scope, request.action)
        if spec is None:
            return USAGE
        return await _ROUTES[spec.handler](self, request, scope, superuser)

    async def _help(self, request: CommandRequest, scope: Scope, superuser: bool) -> str:
        return USAGE

    async def _listing(self, request: CommandRequest, scope: Scope, superuser: bool) -> str:
        """``user|group list|search|delete`` (:mod:`.listing_commands`)."""
        if request.scope == "group" and not scope.in_group:
            return "群共享记忆只能在群聊中使用"
        if request.action == "list":
            return await self.listing.list_memories(request, scope)
        if request.action == "search":
            return await self.listing.search(request, scope)
        return await self.listing.delete(request, scope)

    async def _archive(self, request: CommandRequest, scope: Scope, superuser: bool) -> str:
        return await self.listing.own_archive(request, scope)

    async def _own_data_route(self, request: CommandRequest, scope: Scope, superuser: bool) -> str:
        return await self._own_data(request, scope)

    async def _auto_route(self, request: CommandRequest, scope: Scope, superuser: bool) -> str:
        return await self._auto(request.action, scope)

    async def _auto(self, action: str, scope: Scope) -> str:
        """``/memory auto [on|off]``: the caller's own consent to active memory."""
        if self.auto is None or not self.auto.enabled:
            return f"本 Bot 未启用主动记忆（{_AUTO_SWITCH} = false）"
        me = scope.user_view()
        try:
            if action == "show":
                if await self.auto.allows(me):
                    return f"主动记忆：已开启。{AUTO_ON}\n关闭：/memory auto off"
                return f"主动记忆：已关闭，{AUTO_OFF}\n开启：/memory auto on"
            allowed = action == "on"
            changed = await self.auto.set_consent(me, allowed)
            if not allowed and self.episodes is not None:
                # Their lines of conversations going on never become an episode.
                await self.episodes.chat.of(scope).drop_own_episode_lines()
        except SharedDatabaseError as exc:  # a reply with the reason, never a traceback
            return str(exc)
        state = "开启" if allowed else "关闭"
        prefix = f"已{state}主动记忆" if changed else f"主动记忆本来就是{state}的"
        return f"{prefix}：{AUTO_ON if allowed else AUTO_OFF}"

    async def _own_data(
        self,
        request: CommandRequest,
        scope: Scope,
        upload: Upload | None = None,
        send: Send | None = None,
    ) -> str:
        """``/memory user export|forget``: the caller's own data (:mod:`.user_commands`)."""
        if request.scope != "user":
            return "导出与遗忘只用于你自己的数据：/memory user export、/memory user forget"
        if self.users is None:
            return "该命令未启用"
        if request.action == "forget":
            return await self.users.forget(scope, request.argument)
        if upload is None or send is None:
            return "导出只在私聊中进行：请私聊我发送 /memory user export"
        return await self.users.export(scope, request.argument, upload, send)

    async def export(
        self, request: CommandRequest, scope: Scope, upload: Upload, send: Send
    ) -> str:
        """``/memory user export``: the matcher gives the ways to send (a file, messages)."""
        return await self._own_data(request, scope, upload, send)

    async def _episodes(self, request: CommandRequest, scope: Scope, superuser: bool) -> str:
        """``episodes [N]``, ``episodes delete``, ``group episodes`` (:mod:`.episode_commands`)."""
        if self.episodes is None:
            return "该命令未启用"
        return await self.episodes.run(request, scope)

    async def _group_awareness(self, request: CommandRequest, scope: Scope, superuser: bool) -> str:
        """``self``, ``persona``, ``memo``, ``group memo|anonymize|context`` (:mod:`.group_commands`)."""
        group = self.group
        if group is None:
            return "该命令未启用"
        try:
            if request.scope == "self":
                return await group.self_memory(
                    request.action, request.argument, superuser=superuser
                )
            if request.scope == "persona":
                return await group.persona(request.action, scope)
            if request.scope == "memo":
                return await group.private_memo(request.action, scope)
            return await group.group(request.action, request.argument, scope)
        except SharedDatabaseError as exc:  # a reply with the reason, never a traceback
            return str(exc)


Route = Callable[[MemoryCommands, CommandRequest, Scope, bool], Awaitable[str]]

_ROUTES: dict[str, Route] = {
    "help": MemoryCommands._help,
    "listing": MemoryCommands._listing,
    "archive": MemoryCommands._archive,
    "own_data": MemoryCommands._own_data_route,
    "auto": MemoryCommands._auto_route,
    "self_memory": MemoryCommands._group_awareness,
    "persona": MemoryCommands._group_awareness,
    "private_memo": MemoryCommands._group_awareness,
    "group_settings": MemoryCommands._group_awareness,
    "episodes": MemoryCommands._episodes,
}
"""Each :attr:`~.command_specs.CommandSpec.handler` and the method that answers it."""
