"""OneBot V11 message events as a real QQ client would deliver them."""

from __future__ import annotations

import itertools
import time
from typing import Any

_ids = itertools.count(1000)
BOT_ID = 12345


def private_event(user_id: int, text: str, *, to_me: bool = True) -> Any:
    from nonebot.adapters.onebot.v11 import Message, PrivateMessageEvent

    return PrivateMessageEvent.model_validate(
        {
            "time": int(time.time()),
            "self_id": BOT_ID,
            "post_type": "message",
            "sub_type": "friend",
            "user_id": user_id,
            "message_type": "private",
            "message_id": next(_ids),
            "message": Message(text),
            "original_message": Message(text),
            "raw_message": text,
            "font": 0,
            "sender": {"user_id": user_id, "nickname": f"user{user_id}"},
            "to_me": to_me,
        }
    )


def group_event(
    user_id: int, group_id: int, text: str, *, role: str = "member", to_me: bool = True
) -> Any:
    from nonebot.adapters.onebot.v11 import GroupMessageEvent, Message

    return GroupMessageEvent.model_validate(
        {
            "time": int(time.time()),
            "self_id": BOT_ID,
            "post_type": "message",
            "sub_type": "normal",
            "user_id": user_id,
            "group_id": group_id,
            "message_type": "group",
            "message_id": next(_ids),
            "message": Message(text),
            "original_message": Message(text),
            "raw_message": text,
            "font": 0,
            "sender": {"user_id": user_id, "nickname": f"user{user_id}", "role": role},
            "to_me": to_me,
        }
    )
