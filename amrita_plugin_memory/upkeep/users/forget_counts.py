"""What a user's forget removes, per kind, and what it keeps: :class:`ForgetCounts`.

A preview and a finished forget (:class:`~.user_data.UserData`) are reported in
the same words wherever they are shown (the chat's ``/memory user forget``, the
admin console, ``ambot memory forget``); the counts and those Chinese lines are
kept here, apart from the work that gathers and removes the data.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...storage.keys import user_key

__all__ = ["AMRITA_HISTORY", "ForgetCounts"]

AMRITA_HISTORY = (
    "Amrita 自己保存的聊天记录（私聊的当前上下文、它的摘要与归档会话）不属于本插件，没有删除："
    "在私聊中发送 /session forget 清空当前上下文与摘要，/session clear 删除全部归档会话"
    "（群聊的上下文属于群，由群管理员在群里用同样的命令清理）"
)
"""What a forget does not remove, and how it is removed (Amrita's ``/session`` command)."""


@dataclass(slots=True)
class ForgetCounts:
    """What a forget removes (a preview) or removed, per kind."""

    memories: int = 0
    archived: int = 0
    memo: int = 0
    persona_fields: int = 0
    group_messages: int = 0
    labels: int = 0
    queued_turns: int = 0
    """Turns active memory had queued and not yet extracted."""
    pending_messages: int = 0
    suggestions: int = 0
    profile_lines: int = 0
    """Lines of the L3 loop's profile of its target user (``user_profile.md``)."""
    abstracts: int = 0
    """Abstracts of the L3 loop's cycles (each about its target user)."""
    usage_rows: int = 0
    """Rows of the usage ledger kept under the user's QQ number (their background requests)."""
    episodes: int = 0
    """Episodes of their private chat and group episodes they took part in (archived too)."""
    episode_lines: int = 0
    """Their messages of conversations not ended yet (and the bot's in their private chat)."""
    authored: int = 0
    """Group memories the user wrote, live and archived: kept, their writer mark cleared."""
    backups: int = 0
    """Backup files: all of them (preview) or those rewritten (done)."""
    backup_rows: int = 0
    target: bool = False
    """The user is the L3 loop's target (the loop works on their memories)."""

    def to_json(self) -> dict[str, int]:
        return {k: int(v) for k, v in asdict(self).items()}

    def report(self, user_id: str) -> dict[str, Any]:
        """The counts and the lines the chat, the console and the command line show."""
        return {
            "user_id": user_id,
            "partition": user_key(user_id),
            "counts": self.to_json(),
            "lines": self.removed(),
            "kept": self.kept(),
        }

    def removed(self) -> list[str]:
        """The kinds removed, one Chinese phrase each (zero counts included: nothing hidden)."""
        return [
            f"个人记忆 {self.memories} 条（私聊与群聊中写下的都算）",
            f"归档与更新历史 {self.archived} 条",
            f"个人备忘录 {self.memo} 份",
            f"成员画像字段 {self.persona_fields} 个（所有群共用一份画像）",
            f"群聊上下文中你的消息 {self.group_messages} 条",
            f"匿名代号 {self.labels} 个",
            f"主动记忆中尚未提取的消息 {self.queued_turns} 条",
            f"等待转达给你的消息 {self.pending_messages} 条",
            f"你提交的知识建议 {self.suggestions} 条（含不知由谁提交的建议）",
            f"L3 循环整理出的用户画像 {self.profile_lines} 行",
            f"L3 循环各轮的运行摘要 {self.abstracts} 条",
            f"按你的 QQ 号记下的后台请求用量 {self.usage_rows} 条",
            f"对话片段 {self.episodes} 段（与你的私聊，以及你参与过的群聊对话，含归档）",
            f"尚未结束的对话中的消息 {self.episode_lines} 条",
        ]

    def kept(self) -> list[str]:
        """What a forget does not remove, one Chinese phrase each (the same everywhere)."""
        lines: list[str] = []
        if self.authored:
            lines.append(
                f"你在群里写下的 {self.authored} 条群共享记忆（含归档）保留：它们属于群，"
                "只去掉“由你写下”的标记"
            )
        lines.append("主动记忆与画像学习的开关（/memory auto off、/memory persona off）保留")
        history = AMRITA_HISTORY
        if self.target:
            history += "；L3 循环今后不再读取遗忘之前的这些记录，全局知识库保留（不属于任何用户）"
        lines.append(history)
        return lines

    @property
    def total(self) -> int:
        return (
            self.memories
            + self.archived
            + self.memo
            + self.persona_fields
            + self.group_messages
            + self.labels
            + self.queued_turns
            + self.pending_messages
            + self.suggestions
            + self.profile_lines
            + self.abstracts
            + self.usage_rows
            + self.episodes
            + self.episode_lines
        )
