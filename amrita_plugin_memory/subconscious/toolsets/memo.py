"""The loop's L1 memo tools: the target user's private memo."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from amrita_core import FunctionDefinitionSchema, ToolContext

from ...storage.memo_store import MemoService
from ...storage.scope import Scope
from ...tools.memory_tools import MemoryTools
from ...tools.schemas import define, prop
from ..context import LoopContext, count_action
from .base import LoopTool, SimpleGroup

__all__ = ["MemoToolset", "memo_schemas"]


def memo_schemas(memo_limit: int) -> dict[str, FunctionDefinitionSchema]:
    """The target user's private L1 memo."""
    return {
        "subconscious_read_memo": define(
            "subconscious_read_memo",
            "读取该用户的 L1 备忘录全文及字数。",
            {},
            [],
        ),
        "subconscious_update_memo": define(
            "subconscious_update_memo",
            f"整篇替换该用户的 L1 备忘录（上限 {memo_limit} 字，超出会被拒绝）。先读取，融合或压缩后输出完整新全文；"
            "细节应先用 subconscious_write_memory 下放到 L2。",
            {"content": prop("string", "备忘录完整新全文")},
            ["content"],
        ),
    }


class MemoToolset:
    """Read and replace the target user's private memo."""

    name = "memo"

    def __init__(
        self, ctx: LoopContext, memory: MemoryTools, memo: MemoService, scope: Scope
    ) -> None:
        self.ctx = ctx
        self.memory = memory
        self.memo = memo
        self.scope = scope

    def group(self) -> SimpleGroup:
        defs = memo_schemas(self.memo.max_chars)
        return SimpleGroup(
            self.name,
            [
                LoopTool(defs["subconscious_read_memo"], self.read_memo),
                LoopTool(defs["subconscious_update_memo"], self.update_memo),
            ],
        )

    async def read_memo(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        memo = await self.memo.get(self.scope.chat_view())
        return {
            "ok": True,
            "content": memo,
            "chars": len(memo),
            "limit": self.memo.max_chars,
        }

    async def update_memo(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        result = await self.memory.update_memo(self.scope, args)
        if result.get("ok"):
            count_action(self.ctx, "memo")
        return result
