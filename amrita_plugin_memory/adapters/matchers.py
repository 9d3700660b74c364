"""The ``/memory`` matcher (alias ``记忆``): adapts events and sends replies.

Privacy rule: a user's personal memories are never posted into a group. In a
group, ``/memory user list|search`` and ``/memory persona`` answer by private
message (:func:`~..tools.command_parsing.replies_privately`); ``/memory user export``
sends its file or pages to the private chat only (:func:`_outbox`).
"""

# No ``from __future__ import annotations``: NoneBot injects handler
# arguments by their annotation objects.

from pathlib import Path

from nonebot.adapters.onebot.v11 import (
    Bot,
    GroupMessageEvent,
    Message,
    MessageEvent,
    MessageSegment,
)
from nonebot.params import CommandArg

from ..tools.command_parsing import USAGE, parse_command, replies_privately
from ..tools.command_specs import spec_of
from ..tools.commands import MemoryCommands
from ..tools.user_commands import Send, Upload
from .events import RulesOf, scope_from_event

__all__ = ["current_commands", "register_commands"]

_CURRENT: "list[MemoryCommands]" = []

_PRIVATE_WHAT = {
    "persona": ("画像", "/memory persona"),
    "episodes": ("私聊的对话片段", "/memory episodes"),
}
"""What a private reply sent from a group is about, and the command to use in private."""


def current_commands() -> "MemoryCommands | None":
    """The commands the ``/memory`` matcher of this process runs (tests reach the
    export and forget of the chat through it)."""
    return _CURRENT[-1] if _CURRENT else None


def _outbox(bot: Bot, event: MessageEvent) -> tuple[Upload, Send]:
    """How an export reaches the caller's private chat: a file (``upload_private_file``,
    NapCat / Lagrange.OneBot) or messages."""

    async def upload(path: Path, name: str) -> None:
        await bot.call_api("upload_private_file", user_id=event.user_id, file=str(path), name=name)

    async def send(text: str) -> None:
        # A segment, not a string: a CQ code in the exported text stays text.
        await bot.send_private_msg(
            user_id=event.user_id, message=Message(MessageSegment.text(text))
        )

    return upload, send


def register_commands(commands: MemoryCommands, rules: RulesOf) -> None:
    """Register the ``/memory`` matcher (priority 10, blocking, like Amrita's own commands);
    each command's scope is decided with the current ``rules()``."""
    # Handler annotations are resolved by NoneBot from this module's globals.
    from amrita.plugins.menu.models import MatcherData
    from nonebot import logger, on_command
    from nonebot.permission import SUPERUSER

    _CURRENT.append(commands)
    matcher = on_command(
        "memory",
        aliases={"记忆"},
        priority=10,
        block=True,
        state=MatcherData(
            name="长期记忆",
            description="查看、搜索与删除机器人记住的内容",
            usage=[str(line) for line in USAGE.splitlines()[1:]],
        ).model_dump(),
    )

    @matcher.handle()
    async def _(bot: Bot, event: MessageEvent, args: Message = CommandArg()) -> None:
        request = parse_command(args.extract_plain_text())
        private = replies_privately(request)
        scope = await scope_from_event(bot, event, rules(), private_reply=private)
        if request.action == "export":
            await matcher.finish(await commands.export(request, scope, *_outbox(bot, event)))
        spec = spec_of(request.scope, request.action)
        superuser = spec is not None and spec.who == "superuser" and await SUPERUSER(bot, event)
        reply = await commands.run(request, scope, superuser=superuser)
        if isinstance(event, GroupMessageEvent) and private:
            try:
                await bot.send_private_msg(user_id=event.user_id, message=reply)
            except Exception as exc:  # the user may not be a friend of the bot
                logger.info(
                    f"[Memory] 私聊发送个人记忆失败 user={event.user_id}: {exc.__class__.__name__}"
                )
                what, again = _PRIVATE_WHAT.get(request.scope, ("个人记忆", "/memory user …"))
                await matcher.finish(f"{what}不会在群里展示，请先加好友后私聊我使用 {again}")
            what = _PRIVATE_WHAT.get(request.scope, ("个人记忆", ""))[0]
            await matcher.finish(f"{what}已通过私聊发送给你")
        await matcher.finish(reply)
