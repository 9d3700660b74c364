"""Messages from the loop to its user: composed with the send template, sent privately."""

from __future__ import annotations

import asyncio
from typing import Any

from amrita_core import ModelPreset, call_completion, get_last_response
from amrita_core.config import AmritaConfig
from amrita_core.types import CONTENT_LIST_TYPE, Message
from nonebot import logger

from ..core.calendar import OwnerCalendar
from ..core.errors import ErrorKind, PluginError
from ..prompting.blocks import render_block
from .amrita_data import AmritaData
from .consts import SEND_TIMEOUT_SECONDS
from .templates import PromptError, PromptTemplates, format_time

__all__ = ["MessageComposeError", "Messenger"]


class MessageComposeError(PluginError, RuntimeError):
    """The message for the user could not be generated; the text goes to the model."""

    kind = ErrorKind.FAILED


class Messenger:
    """Composes and sends the loop's proactive messages to its target user."""

    def __init__(
        self,
        templates: PromptTemplates,
        data: AmritaData,
        target_user_id: str,
        calendar: OwnerCalendar,
    ) -> None:
        self.templates = templates
        self.calendar = calendar
        """The owner's calendar: the ``current_time`` of the send template."""
        self.data = data
        self.target_user_id = target_user_id
        self.bot_id: str | None = None
        """``self_id`` of the bot that last saw a message of the target user
        (:meth:`saw_target`); messages to the user go through that bot only."""

    def saw_target(self, bot_id: str) -> None:
        """A message of the target user arrived through bot ``bot_id``.

        With several bots connected, only the one the user talks to is known to
        reach them (a friend of that QQ account); any other would fail or, worse,
        message the user from an account they never talked to.
        """
        self.bot_id = bot_id

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
                    # Data, not instructions: delimited blocks (see prompting.blocks).
                    "intent": render_block("INTENT", intent),
                    "memory_context": render_block("MEMORY_CONTEXT", memory_context),
                    "current_time": format_time(self.calendar.now()),
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

    def _serving_bot(self) -> tuple[Any, str]:
        """The connected bot that last saw the target user, or ``(None, reason)``."""
        import nonebot

        if self.bot_id is None:
            return None, "目标用户最近没有通过任何已连接的 Bot 联系过，无法确定用哪个 Bot 发送"
        bot = nonebot.get_bots().get(self.bot_id)
        if bot is None:
            return None, f"最近与目标用户联系的 Bot（{self.bot_id}）已断开连接"
        return bot, ""

    async def send_private(self, text: str) -> tuple[bool, str]:
        """Send ``text`` to the target user through the bot that last saw them.

        ``(False, reason)`` when that is not possible: no bot has seen the user
        since start-up, or that bot is no longer connected. Never another bot.
        """
        if not self.target_user_id.isdigit():
            return False, "目标用户 ID 不是 QQ 号，无法私聊"
        bot, reason = self._serving_bot()
        if bot is None:
            logger.warning(f"[Subconscious] 主动消息未发送：{reason}")
            return False, reason
        try:
            await asyncio.wait_for(
                bot.call_api("send_private_msg", user_id=int(self.target_user_id), message=text),
                SEND_TIMEOUT_SECONDS,
            )
        except Exception as exc:
            logger.warning(f"[Subconscious] 主动消息发送失败：{exc.__class__.__name__}: {exc}")
            return False, f"发送失败：{exc.__class__.__name__}"
        logger.info(
            f"[Subconscious] Sent a message to user={self.target_user_id} via bot={bot.self_id}"
        )
        return True, ""
