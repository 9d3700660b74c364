"""The loop's review tools: what the target user said (recent chat, archived sessions)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from amrita_core import FunctionDefinitionSchema, ToolContext

from ...core.calendar import OwnerCalendar
from ...core.text import cut
from ...tools.args import parse_int
from ...tools.schemas import define, prop
from ..amrita_data import AmritaData
from ..consts import HISTORY_MESSAGE_CHARS
from ..workflow import message_text
from .base import LoopTool, SimpleGroup, guard

__all__ = ["ReviewToolset", "review_schemas"]

CHAT_CONTEXT_MAX = 50
CHAT_CONTEXT_DEFAULT = 20
SESSIONS_MAX = 10
SESSIONS_DEFAULT = 3


def review_schemas() -> dict[str, FunctionDefinitionSchema]:
    """Reading what the user said (recent chat and archived sessions)."""
    return {
        "subconscious_read_chat_context": define(
            "subconscious_read_chat_context",
            "读取该用户最近的私聊记录（最新的在最后）。",
            {
                "limit": prop(
                    "integer",
                    "条数",
                    minimum=1,
                    maximum=CHAT_CONTEXT_MAX,
                    default=CHAT_CONTEXT_DEFAULT,
                )
            },
            [],
        ),
        "subconscious_read_sessions": define(
            "subconscious_read_sessions",
            "读取该用户已归档的历史会话（每个会话附 LLM 生成的摘要，最新的在前）。",
            {
                "limit": prop(
                    "integer", "会话数", minimum=1, maximum=SESSIONS_MAX, default=SESSIONS_DEFAULT
                ),
                "offset": prop("integer", "跳过的会话数（翻页）", minimum=0, default=0),
            },
            [],
        ),
    }


class ReviewToolset:
    """Read-only access to the target user's chat through Amrita's data."""

    name = "review"

    def __init__(self, data: AmritaData, calendar: OwnerCalendar) -> None:
        self.data = data
        self.calendar = calendar
        """The owner's calendar: when each session began, as the model reads it."""

    def group(self) -> SimpleGroup:
        defs = review_schemas()
        return SimpleGroup(
            self.name,
            [
                LoopTool(defs["subconscious_read_chat_context"], self.read_chat_context),
                LoopTool(defs["subconscious_read_sessions"], self.read_sessions),
            ],
        )

    async def read_chat_context(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            limit = parse_int(
                args,
                "limit",
                low=1,
                high=CHAT_CONTEXT_MAX,
                default=CHAT_CONTEXT_DEFAULT,
            )
            memory = await self.data.read_chat_memory()
            lines: list[dict[str, str]] = []
            for message in memory.messages:
                role = getattr(message, "role", None)
                text = message_text(message).strip()
                if role in ("user", "assistant") and text:
                    lines.append({"role": role, "text": cut(text, HISTORY_MESSAGE_CHARS)})
            result: dict[str, Any] = {"ok": True, "total": len(lines), "messages": lines[-limit:]}
            if memory.abstract:
                result["earlier_summary"] = memory.abstract
            return result

        return await guard("subconscious_read_chat_context", run)

    async def read_sessions(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            limit = parse_int(args, "limit", low=1, high=SESSIONS_MAX, default=SESSIONS_DEFAULT)
            offset = parse_int(args, "offset", low=0, high=100_000, default=0)
            sessions = sorted(
                await self.data.read_archived_sessions(), key=lambda s: s.created_at, reverse=True
            )
            page = sessions[offset : offset + limit]
            out = []
            for session in page:
                summary = await self.data.summarize_session(
                    session, config=ctx.ctx.config, preset=ctx.ctx.preset, usage=ctx.ctx.usage
                )
                out.append(
                    {
                        "id": session.id,
                        "created_at": self.calendar.show_stamp(session.created_at),
                        "messages": len(session.data.messages),
                        "summary": summary,
                    }
                )
            return {"ok": True, "total": len(sessions), "offset": offset, "sessions": out}

        return await guard("subconscious_read_sessions", run)
