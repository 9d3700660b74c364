"""The ``/memory`` matcher (alias ``记忆``): adapts events and sends replies.

Privacy rule: a user's personal memories are never posted into a group. In a
group, ``/memory user list|search`` and ``/memory persona`` answer by private
message (:func:`~..tools.commands.replies_privately`).
"""

# No ``from __future__ import annotations``: NoneBot injects handler
# arguments by their annotation objects.

from nonebot.adapters.onebot.v11 import Bot, GroupMessageEvent, Message, MessageEvent
from nonebot.params import CommandArg

from ..tools.commands import USAGE, MemoryCommands, parse_command, replies_privately
from .events import caller_from_event

__all__ = ["register_commands"]


def register_commands(commands: MemoryCommands) -> None:
    """Register the ``/memory`` matcher (priority 10, blocking, like Amrita's own commands)."""
    # Handler annotations are resolved by NoneBot from this module's globals.
    from amrita.plugins.menu.models import MatcherData
    from nonebot import logger, on_command
    from nonebot.permission import SUPERUSER

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
        caller = await caller_from_event(bot, event)
        superuser = request.scope == "self" and await SUPERUSER(bot, event)
        reply = await commands.run(request, caller, superuser=superuser)
        if isinstance(event, GroupMessageEvent) and replies_privately(request):
            try:
                await bot.send_private_msg(user_id=event.user_id, message=reply)
            except Exception as exc:  # the user may not be a friend of the bot
                logger.info(
                    f"[Memory] 私聊发送个人记忆失败 user={event.user_id}: {exc.__class__.__name__}"
                )
                what = "画像" if request.scope == "persona" else "个人记忆"
                again = "/memory persona" if request.scope == "persona" else "/memory user …"
                await matcher.finish(f"{what}不会在群里展示，请先加好友后私聊我使用 {again}")
            await matcher.finish(
                "画像已通过私聊发送给你"
                if request.scope == "persona"
                else "个人记忆已通过私聊发送给你"
            )
        await matcher.finish(reply)
