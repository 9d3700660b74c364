"""``/memory`` chat commands (alias ``记忆``).

Parsing and reply text live here (plain, testable); the NoneBot matcher in
:mod:`..adapters.matchers` only adapts events and sends replies. The
commands reuse :class:`~.memory_tools.MemoryTools`, so argument checks,
partition confinement and permissions are the same as in the tool path.

Privacy rule: a user's personal memories are never posted into a group. In a
group, ``/memory user list|search`` and ``/memory persona`` answer by private
message (:func:`replies_privately`); the matcher builds the request's
:class:`~..storage.scope.Scope` with it, so such an answer is read as in the
speaker's private chat.

The group-awareness commands (``self``, ``persona``, ``memo``, ``group
anonymize|context|memo``) are :class:`~.group_commands.GroupCommands`; a
user's export and forget of their own data (``user export|forget``, private
chats only) are :class:`~.user_commands.UserCommands`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.calendar import OwnerCalendar
from ..core.records import SOURCE_AUTO
from ..storage.scope import Scope
from ..storage.shared.sessions import SharedDatabaseError
from ..upkeep.archive.restore import restore
from ..upkeep.archive.view import describe_row
from .args import guard_tool_call, parse_memory_id, period_words
from .group_commands import GroupCommands
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
    "archive": "archive",
    "归档": "archive",
    "export": "export",
    "导出": "export",
    "forget": "forget",
    "遗忘": "forget",
}
_RESTORE = {"restore", "恢复"}

# Group-awareness commands: ``/memory <head> [<sub>] [<argument>]``.
_HEADS = {
    "self": "self",
    "自我": "self",
    "persona": "persona",
    "画像": "persona",
    "memo": "memo",
    "备忘录": "memo",
    "auto": "auto",
    "自动": "auto",
}
_SUBCOMMANDS: dict[str, dict[str, str]] = {
    "self": {
        "add": "add",
        "添加": "add",
        "list": "list",
        "ls": "list",
        "列表": "list",
        "delete": "delete",
        "del": "delete",
        "rm": "delete",
        "删除": "delete",
    },
    "persona": {
        "clear": "clear",
        "清空": "clear",
        "off": "off",
        "关闭": "off",
        "on": "on",
        "开启": "on",
    },
    "memo": {"clear": "clear", "清空": "clear"},
    "auto": {"on": "on", "开启": "on", "off": "off", "关闭": "off"},
}
_DEFAULT_ACTION = {"self": None, "persona": "show", "memo": "show", "auto": "show"}
_GROUP_EXTRAS = {
    "anonymize": "anonymize",
    "匿名": "anonymize",
    "context": "context",
    "上下文": "context",
    "memo": "memo",
    "备忘录": "memo",
}
_CLEAR = {"clear", "清空"}
_GROUP_ACTIONS = {"anonymize", "context_clear", "memo", "memo_clear"}
_HEAD_AND_REST = re.compile(r"\s*(\S+)(?:\s+(.*))?", re.DOTALL)

USAGE = """记忆命令：
/memory user list [时间段] [页码] — 列出个人记忆（时间段如 上周、十月份、2026-11）
/memory user search <关键词> — 搜索个人记忆
/memory user delete <ID> — 删除个人记忆
/memory user archive [页码] — 查看你已归档的记忆（过期的、删除的与更新前的旧版本，私聊）
/memory user archive restore <ID> — 恢复一条归档记忆
/memory user export — 导出机器人保存的你的全部数据（JSON 文件，私聊）
/memory user forget — 删除机器人保存的你的全部数据（先显示将删除什么，再确认；私聊）
/memory group list [时间段] [页码] — 列出群共享记忆
/memory group search <关键词> — 搜索群共享记忆
/memory group delete <ID> — 删除群共享记忆（仅管理员 / 群主）
/memory persona [clear|off|on] — 查看（私聊发送）/ 删除你的画像 / 停止并删除 / 恢复学习
/memory memo [clear] — 查看 / 清空你的个人备忘录（私聊）
/memory group memo [clear] — 查看本群备忘录 / 清空（仅管理员 / 群主）
/memory group anonymize on|off — 本群成员匿名开关（仅管理员 / 群主）
/memory group context clear — 清空本群的群聊上下文窗口（仅管理员 / 群主）
/memory auto [on|off] — 查看 / 开启 / 关闭主动记忆（自动记下你说的事并在聊天时想起）
/memory self add <文本>|list|delete <编号> — 机器人的自我记忆（仅超级用户）
兼容旧格式 /memory list|search|delete（个人范围）"""


@dataclass(frozen=True, slots=True)
class CommandRequest:
    scope: str
    action: str
    argument: str


def _split(text: str) -> tuple[str, str]:
    """The first word (lower-cased) and the rest verbatim (stripped)."""
    match = _HEAD_AND_REST.fullmatch(text)
    if match is None:
        return "", ""
    return match.group(1).lower(), (match.group(2) or "").strip()


def _parse_head(scope: str, rest: str) -> CommandRequest:
    word, argument = _split(rest)
    if not word:
        action = _DEFAULT_ACTION[scope]
        return CommandRequest(scope, action, "") if action else CommandRequest(scope, "help", "")
    action = _SUBCOMMANDS[scope].get(word)
    if action is None or (argument and scope != "self"):
        return CommandRequest(scope, "help", "")
    return CommandRequest(scope, action, argument)


def _parse_group_extra(extra: str, rest: str) -> CommandRequest:
    word, more = _split(rest)
    if extra == "anonymize":
        return (
            CommandRequest("group", "anonymize", word)
            if word and not more
            else CommandRequest("group", "help", "")
        )
    if extra == "context":
        ok = word in _CLEAR and not more
        return CommandRequest("group", "context_clear" if ok else "help", "")
    if not word:
        return CommandRequest("group", "memo", "")
    return CommandRequest("group", "memo_clear" if word in _CLEAR and not more else "help", "")


def parse_command(text: str) -> CommandRequest:
    """Parse the text after ``/memory``; unknown input becomes ``help``."""
    head, rest = _split(text)
    if head in _HEADS:
        return _parse_head(_HEADS[head], rest)
    tokens = text.split()
    scope = "user"
    if tokens and tokens[0].lower() in _SCOPES:
        scope = _SCOPES[tokens.pop(0).lower()]
        if scope == "group" and tokens and tokens[0].lower() in _GROUP_EXTRAS:
            return _parse_group_extra(_GROUP_EXTRAS[tokens[0].lower()], _split(rest)[1])
    action = _ACTIONS.get(tokens[0].lower()) if tokens else None
    if action is None:
        return CommandRequest(scope, "help", "")
    return CommandRequest(scope, action, " ".join(tokens[1:]))


def replies_privately(request: CommandRequest) -> bool:
    """Whether the reply is about one user only and must not be posted into a group."""
    personal_listing = request.scope == "user" and request.action in ("list", "search", "archive")
    return personal_listing or (request.scope == "persona" and request.action == "show")


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


class AutoSwitch(Protocol):
    """What ``/memory auto`` needs of active memory (:class:`~..active.ActiveMemory`)."""

    @property
    def enabled(self) -> bool: ...

    async def allows(self, user_id: str) -> bool: ...

    async def set_consent(self, user_id: str, allowed: bool) -> bool: ...


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
    ) -> None:
        self.tools = tools
        self.group = group
        self.users = users
        self.auto = auto

    async def run(self, request: CommandRequest, scope: Scope, *, superuser: bool = False) -> str:
        if request.action == "help":
            return USAGE
        if request.scope == "auto":
            return await self._auto(request.action, scope)
        if request.scope in ("self", "persona", "memo") or request.action in _GROUP_ACTIONS:
            return await self._group_awareness(request, scope, superuser)
        if request.action == "archive":
            return await self._archive(request, scope)
        if request.action in ("export", "forget"):
            return await self._own_data(request, scope)
        if request.scope == "group" and not scope.in_group:
            return "群共享记忆只能在群聊中使用"
        if request.action == "list":
            return await self._list(request, scope)
        if request.action == "search":
            return await self._search(request, scope)
        return await self._delete(request, scope)

    async def _auto(self, action: str, scope: Scope) -> str:
        """``/memory auto [on|off]``: the caller's own consent to active memory."""
        if self.auto is None or not self.auto.enabled:
            return "本 Bot 未启用主动记忆（[active_memory] enabled = false）"
        user_id = scope.user_id
        try:
            if action == "show":
                if await self.auto.allows(user_id):
                    return f"主动记忆：已开启。{AUTO_ON}\n关闭：/memory auto off"
                return f"主动记忆：已关闭，{AUTO_OFF}\n开启：/memory auto on"
            allowed = action == "on"
            changed = await self.auto.set_consent(user_id, allowed)
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

    async def _group_awareness(self, request: CommandRequest, scope: Scope, superuser: bool) -> str:
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

    async def _list(self, request: CommandRequest, scope: Scope) -> str:
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

    async def _search(self, request: CommandRequest, scope: Scope) -> str:
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

    async def _delete(self, request: CommandRequest, scope: Scope) -> str:
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

    async def _archive(self, request: CommandRequest, scope: Scope) -> str:
        """``/memory user archive [页码]`` and ``… archive restore <ID>``: the caller's own only."""
        if request.scope != "user":
            return "归档命令只用于个人记忆：/memory user archive"
        word, rest = _split(request.argument)
        if word in _RESTORE:
            return await self._restore(rest, scope)
        if word and (not word.isdigit() or int(word) < 1 or rest):
            return "用法：/memory user archive [页码] 或 /memory user archive restore <ID>"
        page = int(word) if word else 1
        if scope.origins("user").narrows:  # archived rows keep no origin filter: all or none
            return "归档只通过私聊查看：请私聊我发送 /memory user archive"
        archive = self.tools.store.archive
        view = scope.view("user")  # the caller's own partition, never another's
        total = await archive.count(view)
        if total == 0:
            return "你没有已归档的记忆"
        pages = (total + PAGE_SIZE - 1) // PAGE_SIZE
        rows = await archive.list(view, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
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
        tools = self.tools

        async def run() -> dict[str, Any]:
            row_id = parse_memory_id({"id": argument})
            partition = await scope.require("write", "user")
            done = await restore(tools.store, row_id, partition=partition, limit=tools.memory_limit)
            return {"ok": True, "message": done.describe()}

        result = await guard_tool_call("[Memory]", "archive_restore", run)
        return str(result["message"]) if result["ok"] else f"恢复失败：{result['error']}"
