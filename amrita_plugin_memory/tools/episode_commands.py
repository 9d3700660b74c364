"""``/memory episodes [N]``, ``/memory episodes delete <ID>`` and ``/memory group episodes``.

The past conversations (issue #48) as the chat shows them: a user's episodes of
their private chat, a group's episodes to its managers. Every read and delete
goes through the turn's :class:`~.chat_stores.ChatStores` (the request's
:class:`~..storage.scope.View` of ``kind``'s partition), so the store itself
keeps the privacy rule (:meth:`~..core.episodes.EpisodeRecord.visible_in`):

* ``/memory episodes`` reads the caller's own partition with the origins of a
  private chat; in a group the spec replies privately
  (:func:`~.command_parsing.replies_privately`), so the answer is read as in the
  caller's private chat and sent there, never posted into the group;
* ``/memory group episodes`` reads the group's view (this group only) and is for
  the group's admins, its owner and superusers (``Scope.manages_group``);
* a delete moves the episode to the archive through the same view: an id of
  another chat is "not found", as for memories.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..core.calendar import OwnerCalendar
from ..core.episodes import EpisodeRecord
from ..core.errors import ScopeRefused
from ..core.records import ORIGIN_PRIVATE
from ..storage.scope import Scope
from ..storage.shared.sessions import SharedDatabaseError
from .chat_stores import ChatStores, ChatStoreSource
from .command_parsing import CommandRequest, split_head

__all__ = ["DEFAULT_SHOWN", "MAX_SHOWN", "EpisodeCommands", "episode_line"]

DEFAULT_SHOWN = 5
"""Episodes shown without a number."""
MAX_SHOWN = 20
"""The most episodes one reply shows."""

_MANAGERS = "群管理员、群主或超级用户"
_SOURCE = {"model": "模型摘要", "extract": "抽取"}


def episode_line(index: int, episode: EpisodeRecord, calendar: OwnerCalendar) -> str:
    """``1. 2026-12-04 周五 20:15–20:47｜summary`` and a second line: topics, marker, id."""
    day = calendar.show_day(episode.start)
    start = calendar.local(episode.start)
    end = calendar.local(episode.end)
    span = ""
    if start is not None and end is not None:
        until = end.strftime("%H:%M")
        if end.date() != start.date():
            until = f"{end.strftime('%m-%d')} {until}"
        span = f" {start.strftime('%H:%M')}–{until}"
    summary = " ".join(episode.summary.split()) or "（无摘要）"
    extras = []
    if episode.topics:
        extras.append("话题 " + "、".join(episode.topics))
    extras.append(f"{episode.messages} 条消息")
    extras.append(_SOURCE.get(episode.source, episode.source))
    extras.append(f"ID: {episode.id}")
    return f"{index}. {day}{span}｜{summary}\n   {'｜'.join(extras)}"


def _count(argument: str) -> int | None:
    """How many to show (``None``: not a number in range)."""
    if not argument:
        return DEFAULT_SHOWN
    if not argument.isdigit():
        return None
    number = int(argument)
    return number if 1 <= number <= MAX_SHOWN else None


class EpisodeCommands:
    """The episode commands over the stores of one process (``chat``: with its episodes)."""

    def __init__(
        self,
        chat: ChatStoreSource,
        calendar: OwnerCalendar,
        enabled: Callable[[], bool] = lambda: True,
    ) -> None:
        self.chat = chat
        self.calendar = calendar
        self.enabled = enabled
        """``[episodes] enabled``, asked at each command."""

    async def run(self, request: CommandRequest, scope: Scope) -> str:
        if not self.enabled():
            return "本 Bot 未启用对话片段（[episodes] enabled = false）"
        try:
            if request.scope == "group":
                return await self._group(request, scope)
            if request.action == "delete":
                return await self._delete(self._own(scope), "user", request.argument, "episodes")
            return await self._own_list(request.argument, scope)
        except ScopeRefused as exc:
            return str(exc)
        except SharedDatabaseError as exc:  # a reply with the reason, never a traceback
            return str(exc)

    # -- the caller's private chat ------------------------------------------------------

    def _own(self, scope: Scope) -> ChatStores:
        """The caller's own partition (never another's), read as in their private chat."""
        if not scope.origins("user").allows(ORIGIN_PRIVATE):
            raise ScopeRefused("私聊的对话片段只在私聊中查看：请私聊我发送 /memory episodes")
        return self.chat.of(scope)

    async def _own_list(self, argument: str, scope: Scope) -> str:
        shown = _count(argument)
        if shown is None:
            return f"条数必须是 1 到 {MAX_SHOWN} 的整数，例如 /memory episodes 10"
        own = self._own(scope)
        found = await own.recent_episodes("user", shown)
        if not found:
            return "还没有保存我们私聊的对话片段（一段对话空闲一段时间或到当天结束后才会保存）"
        total = await own.count_episodes("user")
        return self._reply(f"我们最近的私聊对话（共 {total} 段，最新的在后）：", found, "episodes")

    # -- a group's episodes (its managers) ---------------------------------------------

    async def _group(self, request: CommandRequest, scope: Scope) -> str:
        if not scope.in_group:
            return "群的对话片段只能在群聊中查看：/memory group episodes"
        if not await scope.manages_group():
            return f"查看或删除本群的对话片段需要{_MANAGERS}权限"
        group = self.chat.of(scope)  # this group's partition only
        if request.action == "episodes_delete":
            return await self._delete(group, "group", request.argument, "group episodes")
        shown = _count(request.argument)
        if shown is None:
            return f"条数必须是 1 到 {MAX_SHOWN} 的整数，例如 /memory group episodes 10"
        found = await group.recent_episodes("group", shown)
        if not found:
            return "本群还没有保存的对话片段"
        total = await group.count_episodes("group")
        return self._reply(
            f"本群最近的对话（共 {total} 段，最新的在后）：", found, "group episodes"
        )

    # -- shared --------------------------------------------------------------------------

    def _reply(self, head: str, found: Sequence[EpisodeRecord], command: str) -> str:
        lines = [head]
        lines += [episode_line(i, e, self.calendar) for i, e in enumerate(found, 1)]
        lines.append(f"删除一段：/memory {command} delete <ID>")
        return "\n".join(lines)

    async def _delete(self, stores: ChatStores, kind: str, argument: str, command: str) -> str:
        episode_id, rest = split_head(argument)
        if not episode_id or rest:
            return f"请提供对话片段 ID，例如 /memory {command} delete <ID>"
        episode_id = argument.split()[0]  # ids are case-sensitive hex: not lower-cased
        if not await stores.delete_episode(kind, episode_id):
            return f"删除失败：对话片段 {episode_id[:64]} 不存在（或不属于当前聊天）"
        return f"已删除对话片段 {episode_id}（已存入归档）"
