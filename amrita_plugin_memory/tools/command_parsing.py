"""``/memory`` command text into a :class:`CommandRequest`: the word tables, the parser, :data:`USAGE`.

Kept apart from the dispatch (:mod:`.commands`) so that every command form,
its Chinese aliases and the help text are in one place, plain and testable
without any store. Unknown input parses to ``help``.

Privacy rule: a user's personal memories are never posted into a group. In a
group, ``/memory user list|search`` and ``/memory persona`` answer by private
message (:func:`replies_privately`); the matcher builds the request's
:class:`~..storage.scope.Scope` with it, so such an answer is read as in the
speaker's private chat.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "USAGE",
    "CommandRequest",
    "parse_command",
    "replies_privately",
    "split_head",
]

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


def split_head(text: str) -> tuple[str, str]:
    """The first word (lower-cased) and the rest verbatim (stripped)."""
    match = _HEAD_AND_REST.fullmatch(text)
    if match is None:
        return "", ""
    return match.group(1).lower(), (match.group(2) or "").strip()


def _parse_head(scope: str, rest: str) -> CommandRequest:
    word, argument = split_head(rest)
    if not word:
        action = _DEFAULT_ACTION[scope]
        return CommandRequest(scope, action, "") if action else CommandRequest(scope, "help", "")
    action = _SUBCOMMANDS[scope].get(word)
    if action is None or (argument and scope != "self"):
        return CommandRequest(scope, "help", "")
    return CommandRequest(scope, action, argument)


def _parse_group_extra(extra: str, rest: str) -> CommandRequest:
    word, more = split_head(rest)
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
    head, rest = split_head(text)
    if head in _HEADS:
        return _parse_head(_HEADS[head], rest)
    tokens = text.split()
    scope = "user"
    if tokens and tokens[0].lower() in _SCOPES:
        scope = _SCOPES[tokens.pop(0).lower()]
        if scope == "group" and tokens and tokens[0].lower() in _GROUP_EXTRAS:
            return _parse_group_extra(_GROUP_EXTRAS[tokens[0].lower()], split_head(rest)[1])
    action = _ACTIONS.get(tokens[0].lower()) if tokens else None
    if action is None:
        return CommandRequest(scope, "help", "")
    return CommandRequest(scope, action, " ".join(tokens[1:]))


def replies_privately(request: CommandRequest) -> bool:
    """Whether the reply is about one user only and must not be posted into a group."""
    personal_listing = request.scope == "user" and request.action in ("list", "search", "archive")
    return personal_listing or (request.scope == "persona" and request.action == "show")
