"""``/memory self|persona|memo`` and ``/memory group anonymize|context|memo``: the group-awareness commands.

Plain logic and Chinese replies, like :mod:`.commands` (which parses and
dispatches here). Permissions:

* ``self …`` — superusers only (the self memory shapes every chat).
* ``persona …`` — the caller's own persona, anywhere.
* ``group anonymize|context clear|memo clear`` — the group's admins, its
  owner and superusers (``Scope.manages_group``); ``group memo`` (show)
  — any member.
* ``memo`` / ``memo clear`` — the caller's own private memo, in private chat.

The memos are reached through the turn's :class:`~.chat_stores.ChatStores`
(the scope's own partition only).
"""

from __future__ import annotations

from ..core.text import single_line
from ..prompting.persona import render_persona
from ..storage.groups.stores import GroupStores
from ..storage.scope import Scope
from ..storage.users.fences import UserFences
from .chat_stores import ChatStoreSource

__all__ = ["SELF_ENTRY_MAX_CHARS", "GroupCommands"]

SELF_ENTRY_MAX_CHARS = 500
"""One self memory entry; the total is bounded by ``[self_memory] max_chars``."""

_MANAGERS = "群管理员、群主或超级用户"


class GroupCommands:
    """The group-awareness commands on the stores of one process."""

    def __init__(
        self, stores: GroupStores, chat: ChatStoreSource, fences: UserFences | None = None
    ) -> None:
        self.stores = stores
        self.chat = chat
        """The memos as a turn may reach them (:meth:`ChatStoreSource.of`)."""
        self.fences = fences
        """Where ``/memory persona off`` is recorded as a point in time for every process."""

    # -- self memory (superusers) -----------------------------------------------------

    async def self_memory(self, action: str, argument: str, *, superuser: bool) -> str:
        if not superuser:
            return "自我记忆只有超级用户可以管理"
        store = self.stores.self_memory
        if action == "list":
            entries = await store.list()
            if not entries:
                return "自我记忆为空。添加：/memory self add <文本>"
            total = store.size(entries)
            lines = [f"自我记忆（{len(entries)} 条，共 {total}/{store.max_chars} 字）："]
            lines += [f"{i}. {e.content}" for i, e in enumerate(entries, 1)]
            return "\n".join(lines)
        if action == "add":
            text = argument.strip()
            if not text:
                return "请提供内容，例如 /memory self add 我喜欢猫"
            if len(text) > SELF_ENTRY_MAX_CHARS:
                return f"单条自我记忆过长（{len(text)} 字，上限 {SELF_ENTRY_MAX_CHARS} 字），未添加"
            result = await store.add(text)
            if not result.ok:
                return (
                    f"自我记忆超出上限，未添加：已有 {result.current_chars} 字，本条 {result.attempted_chars} 字，"
                    f"上限 {result.limit} 字（[self_memory] max_chars）。请先删除不需要的条目"
                )
            return f"已添加自我记忆（共 {result.current_chars}/{result.limit} 字）"
        number = argument.strip()
        if not number.isdigit() or int(number) < 1:
            return "请提供要删除的编号（见 /memory self list），例如 /memory self delete 2"
        removed = await store.delete(int(number))
        if removed is None:
            return f"没有第 {number} 条自我记忆（见 /memory self list）"
        return f"已删除第 {number} 条自我记忆：{single_line(removed.content)[:60]}"

    # -- the caller's persona --------------------------------------------------------------

    async def persona(self, action: str, scope: Scope) -> str:
        personas = self.stores.personas
        user_id = scope.user_id
        if action == "clear":
            cleared = await personas.clear(user_id)
            return "已删除你的画像" if cleared else "你还没有画像"
        if action == "off":
            if self.fences is not None:  # nothing said before it is learned, even after "on"
                await self.fences.void(user_id, "persona")
            await personas.set_learning(user_id, False)
            return "已停止学习你的画像，并删除了已有画像（恢复：/memory persona on）"
        if action == "on":
            await personas.set_learning(user_id, True)
            return "已恢复学习你的画像（只从你在群里说的话中学习）"
        persona = await personas.own(scope.view("user"))
        state = "（已停止学习：/memory persona on 恢复）" if persona.learning_off else ""
        if not persona.fields:
            return f"你还没有画像{state}"
        return f"{render_persona('你的画像', persona.fields)}\n{state}".rstrip()

    # -- group settings (admins) --------------------------------------------------------------

    async def group(self, action: str, argument: str, scope: Scope) -> str:
        group_id = scope.target.group_id
        if group_id is None or scope.target.group is None:
            return "该命令只能在群聊中使用"
        if action == "memo":
            memo = await self.chat.of(scope).memo_text("group")
            return f"本群备忘录：\n{memo}" if memo.strip() else "本群备忘录为空"
        if not await scope.manages_group():
            return f"该命令需要{_MANAGERS}权限"
        if action == "anonymize":
            value = {"on": True, "开": True, "开启": True, "off": False, "关": False, "关闭": False}
            choice = value.get(argument.strip().lower())
            if choice is None:
                return "用法：/memory group anonymize on|off"
            await self.stores.directory.set_anonymize(group_id, choice)
            if choice:
                return "本群已开启匿名：群上下文与画像中成员显示为「用户_」加 QQ 号末四位"
            return "本群已关闭匿名：群上下文与画像中成员显示为群名片/昵称"
        if action == "context_clear":
            await self.stores.windows.clear(group_id)
            return "已清空本群的群聊上下文窗口"
        if action != "memo_clear":
            return "未知的群命令，发送 /memory 查看用法"
        cleared = await self.chat.of(scope).clear_memo("group")
        return "已清空本群备忘录" if cleared else "清空失败"

    # -- the caller's private memo ---------------------------------------------------------------

    async def private_memo(self, action: str, scope: Scope) -> str:
        if scope.in_group:
            return "个人备忘录只能在私聊中查看或清空（群备忘录：/memory group memo）"
        if action == "clear":
            cleared = await self.chat.of(scope).clear_memo("user")
            return "已清空你的备忘录" if cleared else "清空失败"
        memo = await self.chat.of(scope).memo_text("user")
        return f"你的备忘录：\n{memo}" if memo.strip() else "你的备忘录为空"
