"""Every ``/memory`` command declared once: :class:`CommandSpec` and :data:`SPECS`.

A command is ``/memory <head> <words…> [argument]``: its head is a scope
(``user``, ``group``) or a head of its own (``self``, ``persona``, ``memo``,
``auto``), each word comes with its Chinese aliases. One spec says how the
command is written, its help line, who may run it, the configuration switch
that turns it off (if any) and whether its answer goes to the private chat.
The help reply (:data:`USAGE`, also the menu entry of the matcher), the
parser (:mod:`.command_parsing`) and the dispatch (:mod:`.commands`, by
:attr:`CommandSpec.handler`) are built from :data:`SPECS`; adding a command is
one spec here and its handler there.

Permissions are checked where they are today (the handlers, the tools); the
spec's :attr:`CommandSpec.who` says which check applies and is compared with
the help line in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "LEGACY_HEAD",
    "LEGACY_USAGE",
    "SPECS",
    "USAGE",
    "Argument",
    "CommandSpec",
    "Who",
    "Word",
    "spec_of",
]

Word = tuple[str, ...]
"""A command word: its English name first, then its aliases (all lower case)."""

Who = Literal["user", "group_admin", "superuser"]
"""Who may run a command: anyone on their own data, a group's admins, owner and
superusers (``Scope.manages_group``), or superusers only."""

Argument = Literal["none", "text", "raw", "word"]
"""What may follow the words: nothing; any words (joined by single spaces); the
rest verbatim; exactly one word (lower-cased). Anything else parses to help."""

# Heads.
USER: Word = ("user", "个人")
GROUP: Word = ("group", "群", "群聊")
SELF: Word = ("self", "自我")
PERSONA: Word = ("persona", "画像")
MEMO: Word = ("memo", "备忘录")
AUTO: Word = ("auto", "自动")
EPISODES: Word = ("episodes", "对话", "聊过")

# Words after a head.
LIST: Word = ("list", "列表", "ls")
SEARCH: Word = ("search", "搜索", "find")
DELETE: Word = ("delete", "删除", "del", "rm")
HELP: Word = ("help", "帮助")
ARCHIVE: Word = ("archive", "归档")
EXPORT: Word = ("export", "导出")
FORGET: Word = ("forget", "遗忘")
ADD: Word = ("add", "添加")
CLEAR: Word = ("clear", "清空")
ON: Word = ("on", "开启")
OFF: Word = ("off", "关闭")
ANONYMIZE: Word = ("anonymize", "匿名")
CONTEXT: Word = ("context", "上下文")

LEGACY_HEAD = USER
"""The head of a command written without one (the old ``/memory list|search|delete``)."""

_ADMINS = "（仅管理员 / 群主）"
_EPISODES_SWITCH = "[episodes] enabled"


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """One ``/memory`` command: parsed to ``CommandRequest(head[0], action, argument)``."""

    head: Word
    words: tuple[Word, ...]
    action: str
    handler: str
    """The dispatch entry that answers it (``MemoryCommands``' routes)."""
    usage: tuple[str, ...] = ()
    """Its lines of the help reply (none: a form answered but not advertised)."""
    argument: Argument = "none"
    who: Who = "user"
    switch: str | None = None
    """The configuration switch without which the command only says it is off."""
    private: bool = False
    """In a group, the answer is about the caller only and goes to the private chat."""

    @property
    def scope(self) -> str:
        return self.head[0]


SPECS: tuple[CommandSpec, ...] = (
    CommandSpec(
        USER,
        (LIST,),
        "list",
        "listing",
        ("/memory user list [时间段] [页码] — 列出个人记忆（时间段如 上周、十月份、2026-11）",),
        "text",
        private=True,
    ),
    CommandSpec(
        USER,
        (SEARCH,),
        "search",
        "listing",
        ("/memory user search <关键词> — 搜索个人记忆",),
        "text",
        private=True,
    ),
    CommandSpec(
        USER, (DELETE,), "delete", "listing", ("/memory user delete <ID> — 删除个人记忆",), "text"
    ),
    CommandSpec(
        USER,
        (ARCHIVE,),
        "archive",
        "archive",
        (
            "/memory user archive [页码] — 查看你已归档的记忆（过期的、删除的与更新前的旧版本，私聊）",
            "/memory user archive restore <ID> — 恢复一条归档记忆",
        ),
        "text",
        private=True,
    ),
    CommandSpec(
        USER,
        (EXPORT,),
        "export",
        "own_data",
        ("/memory user export — 导出机器人保存的你的全部数据（JSON 文件，私聊）",),
        "text",
    ),
    CommandSpec(
        USER,
        (FORGET,),
        "forget",
        "own_data",
        ("/memory user forget — 删除机器人保存的你的全部数据（先显示将删除什么，再确认；私聊）",),
        "text",
    ),
    CommandSpec(
        GROUP,
        (LIST,),
        "list",
        "listing",
        ("/memory group list [时间段] [页码] — 列出群共享记忆",),
        "text",
    ),
    CommandSpec(
        GROUP,
        (SEARCH,),
        "search",
        "listing",
        ("/memory group search <关键词> — 搜索群共享记忆",),
        "text",
    ),
    CommandSpec(
        GROUP,
        (DELETE,),
        "delete",
        "listing",
        ("/memory group delete <ID> — 删除群共享记忆" + _ADMINS,),
        "text",
        who="group_admin",
    ),
    CommandSpec(
        PERSONA,
        (),
        "show",
        "persona",
        (
            "/memory persona [clear|off|on] — 查看（私聊发送）/ 删除你的画像 / 停止并删除 / 恢复学习",
        ),
        private=True,
    ),
    CommandSpec(PERSONA, (CLEAR,), "clear", "persona"),
    CommandSpec(PERSONA, (OFF,), "off", "persona"),
    CommandSpec(PERSONA, (ON,), "on", "persona"),
    CommandSpec(
        MEMO,
        (),
        "show",
        "private_memo",
        ("/memory memo [clear] — 查看 / 清空你的个人备忘录（私聊）",),
    ),
    CommandSpec(MEMO, (CLEAR,), "clear", "private_memo"),
    CommandSpec(
        GROUP,
        (MEMO,),
        "memo",
        "group_settings",
        ("/memory group memo [clear] — 查看本群备忘录 / 清空" + _ADMINS,),
    ),
    CommandSpec(GROUP, (MEMO, CLEAR), "memo_clear", "group_settings", who="group_admin"),
    CommandSpec(
        GROUP,
        (ANONYMIZE,),
        "anonymize",
        "group_settings",
        ("/memory group anonymize on|off — 本群成员匿名开关" + _ADMINS,),
        "word",
        "group_admin",
    ),
    CommandSpec(
        GROUP,
        (CONTEXT, CLEAR),
        "context_clear",
        "group_settings",
        ("/memory group context clear — 清空本群的群聊上下文窗口" + _ADMINS,),
        who="group_admin",
    ),
    CommandSpec(
        AUTO,
        (),
        "show",
        "auto",
        ("/memory auto [on|off] — 查看 / 开启 / 关闭主动记忆（自动记下你说的事并在聊天时想起）",),
        switch="[active_memory] enabled",
    ),
    CommandSpec(AUTO, (ON,), "on", "auto", switch="[active_memory] enabled"),
    CommandSpec(AUTO, (OFF,), "off", "auto", switch="[active_memory] enabled"),
    CommandSpec(
        EPISODES,
        (),
        "show",
        "episodes",
        ("/memory episodes [条数] — 查看我们最近的私聊对话片段（在群里发送则私聊回复）",),
        "text",
        switch=_EPISODES_SWITCH,
        private=True,
    ),
    CommandSpec(
        EPISODES,
        (DELETE,),
        "delete",
        "episodes",
        ("/memory episodes delete <ID> — 删除一段私聊对话片段（存入归档，私聊回复）",),
        "text",
        switch=_EPISODES_SWITCH,
        private=True,
    ),
    CommandSpec(
        GROUP,
        (EPISODES,),
        "episodes",
        "episodes",
        ("/memory group episodes [条数] — 查看本群最近的对话片段" + _ADMINS,),
        "text",
        "group_admin",
        _EPISODES_SWITCH,
    ),
    CommandSpec(
        GROUP,
        (EPISODES, DELETE),
        "episodes_delete",
        "episodes",
        ("/memory group episodes delete <ID> — 删除本群的一段对话片段" + _ADMINS,),
        "text",
        "group_admin",
        _EPISODES_SWITCH,
    ),
    CommandSpec(
        SELF,
        (ADD,),
        "add",
        "self_memory",
        ("/memory self add <文本>|list|delete <编号> — 机器人的自我记忆（仅超级用户）",),
        "raw",
        "superuser",
    ),
    CommandSpec(SELF, (LIST,), "list", "self_memory", argument="raw", who="superuser"),
    CommandSpec(SELF, (DELETE,), "delete", "self_memory", argument="raw", who="superuser"),
    # Answered, not advertised: help, and the user-only commands under ``group``
    # (their handlers point to the user form).
    CommandSpec(USER, (HELP,), "help", "help", argument="text"),
    CommandSpec(GROUP, (HELP,), "help", "help", argument="text"),
    CommandSpec(GROUP, (ARCHIVE,), "archive", "archive", argument="text"),
    CommandSpec(GROUP, (EXPORT,), "export", "own_data", argument="text"),
    CommandSpec(GROUP, (FORGET,), "forget", "own_data", argument="text"),
)

LEGACY_USAGE = "兼容旧格式 /memory list|search|delete（个人范围）"

USAGE = "\n".join(["记忆命令：", *(line for spec in SPECS for line in spec.usage), LEGACY_USAGE])
"""The help reply: every spec's lines in declaration order."""


def _by_request() -> dict[tuple[str, str], CommandSpec]:
    found: dict[tuple[str, str], CommandSpec] = {}
    for spec in SPECS:
        key = (spec.scope, spec.action)
        if key in found:
            raise ValueError(f"/memory {spec.scope} {spec.action} is declared twice")
        found[key] = spec
    return found


_BY_REQUEST = _by_request()


def spec_of(scope: str, action: str) -> CommandSpec | None:
    """The spec a parsed request came from (``None``: help, or not a command)."""
    return _BY_REQUEST.get((scope, action))
