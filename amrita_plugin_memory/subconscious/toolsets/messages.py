"""Ending the cycle and talking to the target user (sent now, or noted for the next chat)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from amrita_core import FunctionDefinitionSchema, ToolContext
from nonebot import logger

from ...core.errors import EmbeddingError, VectorStoreError
from ...storage.memory_store import MemoryStore, View
from ...tools.args import parse_text, tool_error
from ...tools.schemas import define, prop
from ..consts import PENDING_MAX
from ..context import LoopContext, count_action
from ..messaging import MessageComposeError, Messenger
from ..state import PendingMessages
from .base import FENCED, LoopTool, SimpleGroup, guard

__all__ = ["MessageToolset", "message_schemas"]

SUMMARY_CHARS = 500
INTENT_CHARS = 500


def message_schemas(*, can_send: bool) -> dict[str, FunctionDefinitionSchema]:
    """Ending the cycle and talking to the user."""
    schemas = {
        "subconscious_iter_stop": define(
            "subconscious_iter_stop",
            "结束本轮整理。summary 用一两句话写下本轮做了什么，下一轮会看到它。",
            {"summary": prop("string", "本轮做了什么", maxLength=SUMMARY_CHARS)},
            ["summary"],
        ),
    }
    intent = prop("string", "想告诉用户什么（意图，不必是原话）", maxLength=INTENT_CHARS)
    if can_send:
        schemas["subconscious_send_to_user"] = define(
            "subconscious_send_to_user",
            "主动给该用户发一条私聊消息：根据意图与相关记忆生成角色口吻的消息并立即发送"
            "（每轮最多一次）。Bot 不在线时改为在用户下次私聊时转达。没有必要就不要打扰用户。",
            {"intent": intent},
            ["intent"],
        )
    else:
        schemas["subconscious_note_for_user"] = define(
            "subconscious_note_for_user",
            "记下想告诉该用户的话：在用户下一次私聊时由 Bot 自然地转达（不会主动发消息，也不会出现在群聊中）。"
            "没有必要就不要使用。",
            {"intent": intent},
            ["intent"],
        )
    return schemas


class MessageToolset:
    """``subconscious_iter_stop`` and either ``send_to_user`` or ``note_for_user``."""

    name = "messages"

    def __init__(
        self,
        ctx: LoopContext,
        pending: PendingMessages,
        messenger: Messenger,
        store: MemoryStore,
        view: View,
        *,
        can_send: bool,
    ) -> None:
        self.ctx = ctx
        self.pending = pending
        self.messenger = messenger
        self.store = store
        self.view = view
        """The loop's view of its user's memories (``Scope.of_loop``)."""
        self.can_send = can_send

    def group(self) -> SimpleGroup:
        defs = message_schemas(can_send=self.can_send)
        items = [LoopTool(defs["subconscious_iter_stop"], self.iter_stop)]
        if self.can_send:
            items.append(LoopTool(defs["subconscious_send_to_user"], self.send_to_user))
        else:
            items.append(LoopTool(defs["subconscious_note_for_user"], self.note_for_user))
        return SimpleGroup(self.name, items)

    async def iter_stop(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            summary = parse_text(args, "summary", max_chars=SUMMARY_CHARS)
            cycle = self.ctx.current_cycle
            if cycle is not None:
                cycle.stop_requested = True
                cycle.stop_summary = summary
            return {"ok": True, "message": "本轮整理已结束"}

        return await guard("subconscious_iter_stop", run)

    async def note_for_user(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            intent = parse_text(args, "intent", max_chars=INTENT_CHARS)
            added = await self.pending.add(intent, since=self._since())
            if added is None:
                return tool_error(
                    f"待转达的消息已达上限（{PENDING_MAX} 条）或已有相同内容，本次未记录"
                )
            count_action(self.ctx, "note")
            return {
                "ok": True,
                "queued": True,
                "pending": len(self.pending.items),
                "message": "已记下，会在用户下一次私聊时转达",
            }

        return await guard("subconscious_note_for_user", run)

    def _since(self) -> float | None:
        """When the running cycle began: what it notes is buried by a forget since."""
        cycle = self.ctx.current_cycle
        return cycle.started_at if cycle is not None else None

    async def _memory_context(self, intent: str) -> str:
        try:
            hits = await self.store.query(self.view, intent, top_k=5)
        except (EmbeddingError, VectorStoreError) as exc:
            logger.warning(f"[Subconscious] send_to_user 检索相关记忆失败：{exc}")
            return "（相关记忆暂不可用）"
        return "\n".join(f"- {h.content}" for h in hits) or "（没有相关记忆）"

    async def send_to_user(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            intent = parse_text(args, "intent", max_chars=INTENT_CHARS)
            cycle = self.ctx.current_cycle
            if cycle is not None and cycle.sends >= 1:
                return tool_error("本轮已经主动发送过一条消息，不要再打扰用户")
            if cycle is not None:
                cycle.sends += 1
            try:
                text = await self.messenger.compose_message(
                    intent,
                    await self._memory_context(intent),
                    config=ctx.ctx.config,
                    preset=ctx.ctx.preset,
                    usage=ctx.ctx.usage,
                )
            except MessageComposeError as exc:
                text, reason = None, str(exc)
            else:
                if not await self.ctx.may_act():  # forgotten while the message was composed
                    return dict(FENCED)
                delivered, reason = await self.messenger.send_private(text)
                if delivered:
                    count_action(self.ctx, "send")
                    return {"ok": True, "delivered": True, "text": text}
            added = await self.pending.add(intent, text=text, since=self._since())
            if added is not None:
                count_action(self.ctx, "note")
            return {
                "ok": True,
                "delivered": False,
                "queued": added is not None,
                "reason": reason,
                "message": (
                    "未能发送，已改为在用户下一次私聊时转达"
                    if added is not None
                    else "未能发送，且待转达队列已满或已有相同内容"
                ),
            }

        return await guard("subconscious_send_to_user", run)
