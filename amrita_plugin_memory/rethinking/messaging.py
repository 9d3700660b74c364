"""Messages from the loop to its user: composed with the send template, sent privately."""

from __future__ import annotations

import asyncio
from typing import Any

from amrita_core import ModelPreset, call_completion, get_last_response
from amrita_core.config import AmritaConfig
from amrita_core.types import CONTENT_LIST_TYPE, Message
from nonebot import logger

from .amrita_data import AmritaData
from .consts import SEND_TIMEOUT_SECONDS
from .templates import PromptError, PromptTemplates, format_time, local_now

__all__ = ["MessageComposeError", "Messenger"]


class MessageComposeError(RuntimeError):
    """The message for the user could not be generated; the text goes to the model."""


class Messenger:
    """Composes and sends the loop's proactive messages to its target user."""

    def __init__(self, templates: PromptTemplates, data: AmritaData, target_user_id: str) -> None:
        self.templates = templates
        self.data = data
        self.target_user_id = target_user_id

    async def compose_message(
        self,
        intent: str,
        memory_context: str,
        *,
        config: AmritaConfig | None,
        preset: ModelPreset | None,
        usage: Any,
    ) -> str:
        """Generate the message for the user with the send template and one LLM call."""
        try:
            system = self.templates.render(
                "prompt_send_file",
                {
                    "character_prompt": self.data.character_prompt(),
                    "intent": intent,
                    "memory_context": memory_context,
                    "current_time": format_time(local_now()),
                },
            )
        except PromptError as exc:
            logger.error(f"[Subconscious] {exc}")
            raise MessageComposeError(f"消息模板有误：{exc}") from None
        messages: CONTENT_LIST_TYPE = [
            Message(role="system", content=system),
            Message(role="user", content="请直接写出要发送给用户的消息正文。"),
        ]
        try:
            response = await get_last_response(
                call_completion(
                    messages,
                    preset=preset or await self.data.resolve_preset(),
                    config=config or self.data.loop_config(),
                    usage=usage,
                )
            )
        except Exception as exc:
            logger.warning(f"[Subconscious] 生成主动消息失败：{exc.__class__.__name__}: {exc}")
            raise MessageComposeError(f"生成消息失败：{exc.__class__.__name__}") from None
        text = (response.content or "").strip()
        if not text:
            raise MessageComposeError("模型没有生成消息内容")
        return text

    async def send_private(self, text: str) -> tuple[bool, str]:
        """Send ``text`` to the target user; ``(False, reason)`` when that is not possible."""
        if not self.target_user_id.isdigit():
            return False, "目标用户 ID 不是 QQ 号，无法私聊"
        import nonebot

        try:
            bot = nonebot.get_bot()
        except (ValueError, KeyError):
            return False, "Bot 当前未连接"
        try:
            await asyncio.wait_for(
                bot.call_api("send_private_msg", user_id=int(self.target_user_id), message=text),
                SEND_TIMEOUT_SECONDS,
            )
        except Exception as exc:
            logger.warning(f"[Subconscious] 主动消息发送失败：{exc.__class__.__name__}: {exc}")
            return False, f"发送失败：{exc.__class__.__name__}"
        logger.info(f"[Subconscious] Sent a message to user={self.target_user_id}")
        return True, ""
