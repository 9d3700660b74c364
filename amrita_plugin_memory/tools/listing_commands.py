"""``/memory user|group list|search|delete`` and ``/memory user archive``: the stored memories.

The command family that pages, searches and deletes memories (personal or the
group's shared ones) and shows and restores the caller's own archive, with its
reply lines; :mod:`.commands` parses and dispatches here. It reuses
:class:`~.memory_tools.MemoryTools`, so argument checks, partition confinement
and permissions are the same as in the tool path; the archive is reached through
the turn's :class:`~.chat_stores.ChatStores` (the caller's own partition only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.calendar import OwnerCalendar
from ..core.records import SOURCE_AUTO
from ..storage.scope import Scope
from ..upkeep.archive.view import describe_row
from .args import guard_tool_call, parse_memory_id, period_words
from .chat_stores import ChatStoreSource
from .command_parsing import CommandRequest, split_head
from .memory_tools import MemoryTools

__all__ = ["PAGE_SIZE", "PREVIEW_CHARS", "ListingCommands"]

PAGE_SIZE = 10
PREVIEW_CHARS = 120

_RESTORE = {"restore", "恢复"}


def _scope_name(scope: str) -> str:
    return "群共享记忆" if scope == "group" else "个人记忆"


def _preview(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _line(
    index: int,
    memory: Mapping[str, Any],
    calendar: OwnerCalendar,
    *,
    with_distance: bool = False,
) -> str:
    extras = [f"重要性 {memory.get('importance', '?')}"]
    if memory.get("tags"):
        extras.append("标签 " + "、".join(memory["tags"]))
    if memory.get("created_at"):  # the owner's day, whatever zone the stamp is written in
        extras.append(calendar.show_date(str(memory["created_at"])) or str(memory["created_at"]))
    if memory.get("event_time"):
        extras.append(f"事件 {memory['event_time']}")
    if memory.get("source") == SOURCE_AUTO:
        extras.append("自动记录")
    if with_distance and memory.get("distance") is not None:
        extras.append(f"距离 {memory['distance']:.4f}")
    return f"{index}. {_preview(str(memory.get('content', '')))}\n   ID: {memory['id']}｜{'｜'.join(extras)}"


class ListingCommands:
    """The stored-memory commands over the tools of one process."""

    def __init__(self, tools: MemoryTools, chat: ChatStoreSource | None = None) -> None:
        self.tools = tools
        self.chat = chat or ChatStoreSource.of_tools(tools)
        """The archive as a turn may reach it (:meth:`ChatStoreSource.of`)."""

    async def list_memories(self, request: CommandRequest, scope: Scope) -> str:
        page, words = 1, request.argument.split()
        if words and words[-1].isdigit():
            page = int(words.pop())
        if page < 1 or any(w.startswith("-") and w[1:].isdigit() for w in words):
            return "页码必须是正整数，例如 /memory user list 2"
        window: dict[str, str] = {}
        if words:
            span = period_words(" ".join(words), self.tools.store.calendar)
            if span is None:
                return (
                    f"看不懂时间段「{_preview(' '.join(words))}」，例如 /memory {request.scope} list 上周、"
                    f"list 十月份、list 2026-11、list 2026-11-01..2026-11-15"
                )
            window = {"since": span[0], "until": span[1]}
        result = await self.tools.list_memory(
            scope,
            {
                "limit": PAGE_SIZE,
                "offset": (page - 1) * PAGE_SIZE,
                "scope": request.scope,
                **window,
            },
        )
        if not result["ok"]:
            return f"查询失败：{result['error']}"
        total = result["total"]
        name = _scope_name(request.scope)
        if window:
            name = f"{window['since']} 至 {window['until']}的{name}"
        if total == 0:
            return f"暂无{name}"
        pages = (total + PAGE_SIZE - 1) // PAGE_SIZE
        if not result["memories"]:
            return f"{name}共 {total} 条，只有 {pages} 页"
        start = (page - 1) * PAGE_SIZE
        lines = [f"{name}（共 {total} 条，第 {page}/{pages} 页）："]
        calendar = self.tools.calendar
        lines += [_line(start + i + 1, m, calendar) for i, m in enumerate(result["memories"])]
        if page < pages:
            more = " ".join([*words, str(page + 1)])
            lines.append(f"下一页：/memory {request.scope} list {more}")
        return "\n".join(lines)

    async def search(self, request: CommandRequest, scope: Scope) -> str:
        if not request.argument:
            return f"请提供关键词，例如 /memory {request.scope} search 生日"
        result = await self.tools.read_memory(
            scope, {"query": request.argument, "top_k": 5, "scope": request.scope}
        )
        if not result["ok"]:
            return f"搜索失败：{result['error']}"
        if not result["memories"]:
            return f"没有找到相关的{_scope_name(request.scope)}"
        lines = [
            f"与「{_preview(request.argument)}」最相关的{_scope_name(request.scope)}（距离越小越相似）："
        ]
        calendar = self.tools.calendar
        lines += [
            _line(i + 1, m, calendar, with_distance=True) for i, m in enumerate(result["memories"])
        ]
        return "\n".join(lines)

    async def delete(self, request: CommandRequest, scope: Scope) -> str:
        if not request.argument:
            return f"请提供记忆 ID，例如 /memory {request.scope} delete <ID>"
        result = await self.tools.delete_memory(
            scope, {"id": request.argument.split()[0], "scope": request.scope}
        )
        if not result["ok"]:
            return f"删除失败：{result['error']}"
        deleted = result["deleted"]
        if request.scope == "group":  # restored by an operator (console, ambot memory)
            return f"已删除群共享记忆 {deleted}（已存入归档）"
        return f"已删除个人记忆 {deleted}（已存入归档，可用 /memory user archive restore {deleted} 恢复）"

    async def own_archive(self, request: CommandRequest, scope: Scope) -> str:
        """``/memory user archive [页码]`` and ``… archive restore <ID>``: the caller's own only."""
        if request.scope != "user":
            return "归档命令只用于个人记忆：/memory user archive"
        word, rest = split_head(request.argument)
        if word in _RESTORE:
            return await self._restore(rest, scope)
        if word and (not word.isdigit() or int(word) < 1 or rest):
            return "用法：/memory user archive [页码] 或 /memory user archive restore <ID>"
        page = int(word) if word else 1
        if scope.origins("user").narrows:  # archived rows keep no origin filter: all or none
            return "归档只通过私聊查看：请私聊我发送 /memory user archive"
        own = self.chat.of(scope)  # the caller's own partition, never another's
        total = await own.archive_count()
        if total == 0:
            return "你没有已归档的记忆"
        pages = (total + PAGE_SIZE - 1) // PAGE_SIZE
        rows = await own.archive_page(limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
        if not rows:
            return f"归档共 {total} 条，只有 {pages} 页"
        lines = [f"你已归档的记忆（共 {total} 条，第 {page}/{pages} 页，最新的在前）："]
        lines += [describe_row(row, self.tools.calendar, chars=PREVIEW_CHARS) for row in rows]
        lines.append("恢复：/memory user archive restore <ID>")
        if page < pages:
            lines.append(f"下一页：/memory user archive {page + 1}")
        return "\n".join(lines)

    async def _restore(self, argument: str, scope: Scope) -> str:
        if not argument:
            return "请提供归档 ID，例如 /memory user archive restore <ID>"
        own = self.chat.of(scope)

        async def run() -> dict[str, Any]:
            done = await own.restore(parse_memory_id({"id": argument}))
            return {"ok": True, "message": done.describe()}

        result = await guard_tool_call("[Memory]", "archive_restore", run)
        return str(result["message"]) if result["ok"] else f"恢复失败：{result['error']}"
