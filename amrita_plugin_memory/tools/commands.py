"""``/memory`` chat commands (alias ``记忆``).

Parsing and reply text live here (plain, testable); the NoneBot matcher in
:mod:`..adapters.matchers` only adapts events and sends replies. The
commands reuse :class:`~.memory_tools.MemoryTools`, so argument checks,
partition confinement and permissions are the same as in the tool path.

Privacy rule: a user's personal memories are never posted into a group. In a
group, ``/memory user list|search`` answers by private message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .memory_tools import Caller, MemoryTools

__all__ = ["PAGE_SIZE", "USAGE", "CommandRequest", "MemoryCommands", "parse_command"]

PAGE_SIZE = 10
PREVIEW_CHARS = 120

_SCOPES = {"user": "user", "个人": "user", "group": "group", "群": "group", "群聊": "group"}
_ACTIONS = {
    "list": "list",
    "列表": "list",
    "ls": "list",
    "search": "search",
    "搜索": "search",
    "find": "search",
    "delete": "delete",
    "删除": "delete",
    "del": "delete",
    "rm": "delete",
    "help": "help",
    "帮助": "help",
}

USAGE = """记忆命令：
/memory user list [页码] — 列出个人记忆
/memory user search <关键词> — 搜索个人记忆
/memory user delete <ID> — 删除个人记忆
/memory group list [页码] — 列出群共享记忆
/memory group search <关键词> — 搜索群共享记忆
/memory group delete <ID> — 删除群共享记忆（仅管理员 / 群主）
兼容旧格式 /memory list|search|delete（个人范围）"""


@dataclass(frozen=True, slots=True)
class CommandRequest:
    scope: str
    action: str
    argument: str


def parse_command(text: str) -> CommandRequest:
    """Parse the text after ``/memory``; unknown input becomes ``help``."""
    tokens = text.split()
    scope = "user"
    if tokens and tokens[0].lower() in _SCOPES:
        scope = _SCOPES[tokens.pop(0).lower()]
    action = _ACTIONS.get(tokens[0].lower()) if tokens else None
    if action is None:
        return CommandRequest(scope, "help", "")
    return CommandRequest(scope, action, " ".join(tokens[1:]))


def _scope_name(scope: str) -> str:
    return "群共享记忆" if scope == "group" else "个人记忆"


def _preview(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _line(index: int, memory: Mapping[str, Any], *, with_distance: bool = False) -> str:
    extras = [f"重要性 {memory.get('importance', '?')}"]
    if memory.get("tags"):
        extras.append("标签 " + "、".join(memory["tags"]))
    if memory.get("created_at"):
        extras.append(str(memory["created_at"])[:10])
    if with_distance and memory.get("distance") is not None:
        extras.append(f"距离 {memory['distance']:.4f}")
    return f"{index}. {_preview(str(memory.get('content', '')))}\n   ID: {memory['id']}｜{'｜'.join(extras)}"


class MemoryCommands:
    """Executes parsed ``/memory`` requests and renders Chinese replies."""

    def __init__(self, tools: MemoryTools) -> None:
        self.tools = tools

    async def run(self, request: CommandRequest, caller: Caller) -> str:
        if request.action == "help":
            return USAGE
        if request.scope == "group" and not caller.target.is_group:
            return "群共享记忆只能在群聊中使用"
        if request.action == "list":
            return await self._list(request, caller)
        if request.action == "search":
            return await self._search(request, caller)
        return await self._delete(request, caller)

    async def _list(self, request: CommandRequest, caller: Caller) -> str:
        page = 1
        if request.argument:
            if not request.argument.isdigit() or int(request.argument) < 1:
                return "页码必须是正整数，例如 /memory user list 2"
            page = int(request.argument)
        result = await self.tools.list_memory(
            caller, {"limit": PAGE_SIZE, "offset": (page - 1) * PAGE_SIZE, "scope": request.scope}
        )
        if not result["ok"]:
            return f"查询失败：{result['error']}"
        total = result["total"]
        name = _scope_name(request.scope)
        if total == 0:
            return f"暂无{name}"
        pages = (total + PAGE_SIZE - 1) // PAGE_SIZE
        if not result["memories"]:
            return f"{name}共 {total} 条，只有 {pages} 页"
        start = (page - 1) * PAGE_SIZE
        lines = [f"{name}（共 {total} 条，第 {page}/{pages} 页）："]
        lines += [_line(start + i + 1, m) for i, m in enumerate(result["memories"])]
        if page < pages:
            lines.append(f"下一页：/memory {request.scope} list {page + 1}")
        return "\n".join(lines)

    async def _search(self, request: CommandRequest, caller: Caller) -> str:
        if not request.argument:
            return f"请提供关键词，例如 /memory {request.scope} search 生日"
        result = await self.tools.read_memory(
            caller, {"query": request.argument, "top_k": 5, "scope": request.scope}
        )
        if not result["ok"]:
            return f"搜索失败：{result['error']}"
        if not result["memories"]:
            return f"没有找到相关的{_scope_name(request.scope)}"
        lines = [
            f"与「{_preview(request.argument)}」最相关的{_scope_name(request.scope)}（距离越小越相似）："
        ]
        lines += [_line(i + 1, m, with_distance=True) for i, m in enumerate(result["memories"])]
        return "\n".join(lines)

    async def _delete(self, request: CommandRequest, caller: Caller) -> str:
        if not request.argument:
            return f"请提供记忆 ID，例如 /memory {request.scope} delete <ID>"
        result = await self.tools.delete_memory(
            caller, {"id": request.argument.split()[0], "scope": request.scope}
        )
        if not result["ok"]:
            return f"删除失败：{result['error']}"
        return f"已删除{_scope_name(request.scope)} {result['deleted']}"
