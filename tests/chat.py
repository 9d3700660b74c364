"""Drive real chat turns through NoneBot + Amrita with a recording OneBot bot."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.events import BOT_ID
from tests.servers import ChatServer, Reply


@dataclass
class ApiCall:
    api: str
    data: dict[str, Any]


@dataclass
class BotRecorder:
    """Answers OneBot API calls like a QQ client would and records them."""

    calls: list[ApiCall] = field(default_factory=list)
    roles: dict[tuple[int, int], str] = field(default_factory=dict)
    friends: set[int] = field(default_factory=set)
    fail_private: bool = False
    fail_upload: bool = False
    """``upload_private_file`` fails like an implementation without it (ActionFailed)."""
    uploads: list[tuple[str, str]] = field(default_factory=list)
    """``(name, file content)`` of every file uploaded (read when the call arrives)."""

    def sent(self) -> list[ApiCall]:
        return [
            c for c in self.calls if c.api in ("send_msg", "send_private_msg", "send_group_msg")
        ]

    def texts(self, where: str | None = None) -> list[str]:
        out = []
        for call in self.sent():
            kind = call.data.get("message_type") or (
                "group" if call.api == "send_group_msg" else "private"
            )
            if call.api == "send_private_msg":
                kind = "private"
            if where is None or kind == where:
                out.append(_plain(call.data.get("message")))
        return out

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        self.calls.append(ApiCall(api, data))
        if api in ("send_msg", "send_private_msg", "send_group_msg"):
            if api == "send_private_msg" and self.fail_private:
                raise RuntimeError("not a friend")
            return {"message_id": len(self.calls)}
        if api == "upload_private_file":  # NapCat / Lagrange.OneBot extension
            if self.fail_upload:
                from nonebot.adapters.onebot.v11.exception import ActionFailed

                raise ActionFailed(status="failed", retcode=1404, msg="API 不存在")
            self.uploads.append((data["name"], Path(data["file"]).read_text(encoding="utf-8")))
            return None
        if api == "get_friend_list":
            return [
                {"user_id": uid, "nickname": f"user{uid}", "remark": ""} for uid in self.friends
            ]
        if api == "get_group_member_info":
            gid, uid = int(data["group_id"]), int(data["user_id"])
            return {
                "group_id": gid,
                "user_id": uid,
                "nickname": f"user{uid}",
                "card": "",
                "role": self.roles.get((gid, uid), "member"),
            }
        if api == "get_login_info":
            return {"user_id": BOT_ID, "nickname": "bot"}
        return {}


def _plain(message: Any) -> str:
    if isinstance(message, str):
        return message
    try:
        from nonebot.adapters.onebot.v11 import Message

        return Message(message).extract_plain_text()
    except Exception:
        return str(message)


def make_bot(recorder: BotRecorder, *, self_id: int = BOT_ID) -> Any:
    """A recording bot; registered as connected unless a bot with ``self_id`` already is."""
    import nonebot
    from nonebot.adapters.onebot.v11 import Adapter, Bot

    class RecordingBot(Bot):
        async def call_api(self, api: str, **data: Any) -> Any:
            return recorder.answer(api, data)

    adapter = nonebot.get_adapter(Adapter)
    bot = RecordingBot(adapter, str(self_id))
    if str(self_id) not in nonebot.get_bots():
        nonebot.get_driver()._bot_connect(bot)  # type: ignore[attr-defined]
    return bot


def disconnect_bot(self_id: int = BOT_ID) -> None:
    """Disconnect the bot with ``self_id``, if one is connected."""
    import nonebot

    old = nonebot.get_bots().get(str(self_id))
    if old is not None:
        nonebot.get_driver()._bot_disconnect(old)  # type: ignore[attr-defined]


def connect_bot(recorder: BotRecorder, *, self_id: int = BOT_ID) -> Any:
    """Make a new recording bot *the* connected bot with ``self_id`` (several ids may be connected)."""
    import nonebot

    disconnect_bot(self_id)
    bot = make_bot(recorder, self_id=self_id)
    assert nonebot.get_bots()[str(self_id)] is bot
    return bot


async def run_turn(bot: Any, event: Any, *, deadline: float = 120.0) -> None:
    """Deliver one event and wait until the chat turn it started has completed.

    ``handle_event`` returns when the matchers return; the Amrita chat turn
    itself runs as a ChatObject task that may still be committing the
    history. The end of a turn is that ChatObject being done: every ChatObject
    registered in Amrita's chat manager is awaited (``deadline`` guards a
    hang, it is not a measurement).
    """
    from amrita.plugins.chat.runtime import bot_chat_manager
    from amrita.plugins.manager.checker import watch_group, watch_user
    from nonebot.message import handle_event

    # Amrita rate-limits commands per user/group (one per 5 s); tests send
    # many in a row, each as if after a pause.
    watch_user.clear()
    watch_group.clear()
    await handle_event(bot, event)
    running = [
        chat
        for chats in bot_chat_manager.running_chat_object.values()
        for chat in chats
        if not chat.is_done()
    ]
    if running:
        async with asyncio.timeout(deadline):
            # A ChatObject that never began raises at once; a failed turn is the test's to check.
            await asyncio.gather(*running, return_exceptions=True)


def offered(request: dict[str, Any]) -> set[str]:
    """Names of the tools offered in one model request."""
    return {t["function"]["name"] for t in request.get("tools") or []}


def request_tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool results carried by one model request, parsed, in order."""
    out = []
    for message in request["messages"]:
        if message["role"] == "tool":
            try:
                out.append(json.loads(message["content"]))
            except ValueError:
                out.append({"raw": message["content"]})
    return out


# -- a turn, its tool results, the requests the model saw ----------------------------


def model_requests(server: ChatServer) -> list[dict[str, Any]]:
    """Requests of the answering model (not Amrita's content-safety check)."""
    return [
        r
        for r in server.requests
        if [t["function"]["name"] for t in r.get("tools") or []] != ["report"]
    ]


def tool_results(server: ChatServer) -> list[dict[str, Any]]:
    """Tool results of this turn's tool calls, parsed, in order, without repeats.

    Results already present in the first request come from the stored history
    of earlier turns and are skipped.
    """
    requests = model_requests(server)
    history = {m.get("tool_call_id") for m in requests[0]["messages"]} if requests else set()
    seen: dict[str, dict[str, Any]] = {}
    for request in requests:
        for message in request["messages"]:
            call_id = message.get("tool_call_id")
            if message["role"] == "tool" and call_id not in seen and call_id not in history:
                try:
                    seen[message["tool_call_id"]] = json.loads(message["content"])
                except ValueError:
                    seen[message["tool_call_id"]] = {"raw": message["content"]}
    return list(seen.values())


async def turn(
    server: ChatServer, event: Any, *replies: Reply, recorder: BotRecorder | None = None
) -> BotRecorder:
    """One chat turn: ``replies`` scripted for the model, ``event`` sent; the bot's API calls."""
    recorder = recorder or BotRecorder()
    server.clear()
    server.script(*replies)
    await run_turn(make_bot(recorder), event)
    return recorder


def write_call(content: str, scope: str = "user", **extra: Any) -> Reply:
    """The model's ``write_memory`` call (tags and importance filled in)."""
    args = {"content": content, "tags": ["测试"], "importance": "medium", "scope": scope} | extra
    return Reply.tool_call("write_memory", args)
