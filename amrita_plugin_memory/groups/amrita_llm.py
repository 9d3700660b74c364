"""The one isolated model call of group awareness (Amrita's current preset, no history, no tools)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["Completion", "add_usage", "complete_isolated"]

Completion = Callable[[list[dict[str, str]]], Awaitable[tuple[str, Any]]]
"""``messages -> (answer text, usage or None)``."""


async def complete_isolated(messages: list[dict[str, str]]) -> tuple[str, Any]:
    """Send ``messages`` alone to the chat model of Amrita's current preset.

    ``call_completion`` gets the messages and nothing else: no chat history,
    no tools, no hooks of a chat turn.
    """
    from amrita.plugins.chat.utils.preset import resolve_preset
    from amrita_core import call_completion, get_last_response
    from amrita_core.types import Message

    wrapped: Any = [Message(role=m["role"], content=m["content"]) for m in messages]  # type: ignore[arg-type]
    response = await get_last_response(call_completion(wrapped, preset=await resolve_preset()))
    return str(response.content or ""), response.usage


async def add_usage(usage: Any, *, what: str) -> None:
    """Add an isolated request's tokens to Amrita's global statistics (like the L3 loop's).

    ``what`` names the request in the warning logged when that fails.
    """
    from nonebot import logger

    if usage is None or (usage.prompt_tokens == 0 and usage.completion_tokens == 0):
        return
    try:
        from nonebot_plugin_amrita.database import InsightsModel
        from nonebot_plugin_amrita.memory import add_usage as amrita_add_usage

        insights = await InsightsModel.get()
        amrita_add_usage(insights, usage)
        await insights.save()
    except Exception as exc:
        logger.warning(f"[Memory] 记录{what}的 token 用量失败：{exc.__class__.__name__}: {exc}")
