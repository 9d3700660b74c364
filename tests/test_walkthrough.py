"""The README's walk-through ("从零到会记住的 Bot"), done the way an operator does it.

A throw-away bot project gets exactly what the walk-through tells the operator
to have: the repository's own ``.env`` (``EMBEDDING_PROCTOL=local``, so the real
bundled model embeds) with step 3's edits (a free ``PORT``, ``SUPERUSERS``), the
example chat config and preset of step 5 copied from ``docs/examples/chat``
(only the preset's address points at the local scripted chat server instead of
DeepSeek). Then ``ambot orm upgrade`` and ``ambot run`` as subprocesses, and a
OneBot V11 client connects to the reverse WebSocket URL of step 6 and goes
through the three checks of step 7: tell a fact, ``/session forget`` and ask
again (the answer must come from the memory, not from the chat history), and
``/memory user list``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import websockets

from tests.botproject import VENV_BIN, BotProject
from tests.chat import BotRecorder
from tests.events import BOT_ID
from tests.servers import ChatServer, Reply, free_port

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples" / "chat"
OPERATOR = 10001  # the operator's own QQ number, in SUPERUSERS as step 3 says
FACT = "用户的猫叫年糕，是只橘猫"
DEADLINE = 120.0  # hang guard only, never a measurement

_message_ids = itertools.count(1)


def private_message(text: str, user_id: int = OPERATOR) -> dict[str, Any]:
    """A OneBot V11 private message event as an implementation (NapCat…) pushes it."""
    return {
        "time": int(time.time()),
        "self_id": BOT_ID,
        "post_type": "message",
        "message_type": "private",
        "sub_type": "friend",
        "message_id": next(_message_ids),
        "user_id": user_id,
        "message": [{"type": "text", "data": {"text": text}}],
        "raw_message": text,
        "font": 0,
        "sender": {
            "user_id": user_id,
            "nickname": "operator" if user_id == OPERATOR else f"user{user_id}",
        },
    }


def group_mention(
    text: str, *, user_id: int, group_id: int, role: str = "member"
) -> dict[str, Any]:
    """A OneBot V11 group message that @-mentions the bot (a chat turn in a group)."""
    event = private_message(text, user_id)
    event.update(
        message_type="group",
        sub_type="normal",
        group_id=group_id,
        message=[
            {"type": "at", "data": {"qq": str(BOT_ID)}},
            {"type": "text", "data": {"text": " " + text}},
        ],
        raw_message=f"[CQ:at,qq={BOT_ID}] {text}",
        sender={"user_id": user_id, "nickname": f"user{user_id}", "role": role},
    )
    return event


class OneBotClient:
    """The OneBot side of the reverse WebSocket: pushes events, answers the bot's API calls."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.recorder = BotRecorder(friends={OPERATOR})

    async def serve(self) -> None:
        async for raw in self.ws:
            frame = json.loads(raw)
            if "action" not in frame:
                continue
            try:
                data = self.recorder.answer(frame["action"], frame.get("params") or {})
                reply = {"status": "ok", "retcode": 0, "data": data}
            except Exception as exc:  # the recorder refuses like a QQ client would
                reply = {"status": "failed", "retcode": 100, "data": None, "message": str(exc)}
            await self.ws.send(json.dumps({**reply, "echo": frame.get("echo")}))

    async def send(self, text: str) -> None:
        await self.ws.send(json.dumps(private_message(text)))

    def replies(self) -> list[str]:
        return self.recorder.texts("private")


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait until ``condition()`` holds (polling; the deadline only guards a hang)."""
    try:
        async with asyncio.timeout(DEADLINE):
            # Another process or the client task changes the state: polled.
            while not condition():  # noqa: ASYNC110
                await asyncio.sleep(0.1)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


def tool_messages(server: ChatServer) -> list[str]:
    """Contents of the tool results the model was sent, in order, without repeats."""
    seen: dict[str, str] = {}
    for request in server.requests:
        for message in request.get("messages", []):
            if message.get("role") == "tool":
                seen.setdefault(str(message.get("tool_call_id")), str(message.get("content")))
    return list(seen.values())


def walkthrough_env(port: int) -> str:
    """The repository's own ``.env`` with step 3's edits (a free port, the operator as superuser)."""
    lines = [
        line
        for line in (ROOT / ".env").read_text(encoding="utf-8").splitlines()
        if not line.startswith(("PORT=", "SUPERUSERS="))
    ]
    return "\n".join([*lines, f"PORT={port}", f'SUPERUSERS=["{OPERATOR}"]']) + "\n"


def write_walkthrough_project(root: Path, chat_base_url: str) -> tuple[BotProject, str]:
    """Steps 3 and 5 of the walk-through in a fresh project; returns it and step 6's URL."""
    project = BotProject(root)
    port = free_port()
    (root / ".env").write_text(walkthrough_env(port), encoding="utf-8")
    copy_example_chat(root, chat_base_url)
    return project, f"ws://127.0.0.1:{port}/onebot/v11/ws"


def copy_example_chat(root: Path, chat_base_url: str) -> None:
    """Step 5: the example chat config and preset copied; only the preset's address is the
    local chat server."""
    chat_dir = root / "config" / "chat"
    (chat_dir / "models").mkdir(parents=True)
    shutil.copy(EXAMPLES / "config.toml", chat_dir / "config.toml")
    for preset in (EXAMPLES / "models").glob("*.json"):
        data = json.loads(preset.read_text(encoding="utf-8"))
        data["base_url"] = chat_base_url
        (chat_dir / "models" / preset.name).write_text(json.dumps(data), encoding="utf-8")


@contextlib.asynccontextmanager
async def running_bot(project: BotProject) -> AsyncIterator[None]:
    """``ambot run`` until the block ends."""
    log_path = project.root / "bot.log"
    with log_path.open("w", encoding="utf-8") as log:
        proc = subprocess.Popen(  # noqa: ASYNC220 - Popen returns at once
            [str(VENV_BIN / "ambot"), "run"],
            cwd=project.root,
            env=project.process_env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        started = "Application startup complete"
        await until(
            lambda: started in log_path.read_text(encoding="utf-8") or proc.poll() is not None,
            "the bot to start",
        )
        text = log_path.read_text(encoding="utf-8")
        assert started in text, text[-3000:]
        assert "[Memory] 已加载" in text and "multilingual-e5-small-q4" in text, text[-3000:]
        yield
    finally:
        proc.terminate()
        try:
            await asyncio.to_thread(proc.wait, 15)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait)
    assert "Traceback" not in log_path.read_text(encoding="utf-8")


async def test_walkthrough_bot_remembers(tmp_path: Path, chat_server: ChatServer) -> None:
    project, url = write_walkthrough_project(tmp_path / "bot", chat_server.base_url)
    upgrade = project.command("orm", "upgrade")
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr

    async with running_bot(project):
        headers = {"X-Self-ID": str(BOT_ID), "X-Client-Role": "Universal"}
        async with websockets.connect(url, additional_headers=headers) as ws:
            client = OneBotClient(ws)
            serving = asyncio.create_task(client.serve())
            try:
                # 1. Tell it a fact: the model calls write_memory.
                chat_server.script(
                    Reply.tool_call(
                        "write_memory",
                        {"content": FACT, "tags": ["宠物"], "importance": "high", "scope": "user"},
                    ),
                    Reply.text("记住了，你的猫叫年糕。"),
                )
                await client.send("记住：我的猫叫年糕，是只橘猫")
                await until(
                    lambda: chat_server.pending == 0 and bool(client.replies()), "the first reply"
                )
                written = [json.loads(m) for m in tool_messages(chat_server)]
                assert written and written[0]["ok"] is True, written
                assert written[0]["memory"]["content"] == FACT

                # 2. Clear the chat context, ask again: the answer comes from the memory.
                await client.send("/session forget")
                await until(
                    lambda: any("上下文已清除" in r for r in client.replies()), "/session forget"
                )
                chat_server.clear()
                chat_server.script(
                    Reply.tool_call("read_memory", {"query": "我的猫叫什么名字", "scope": "user"}),
                    Reply.text("你的猫叫年糕。"),
                )
                before = len(client.replies())
                await client.send("我的猫叫什么名字？")
                await until(
                    lambda: chat_server.pending == 0 and len(client.replies()) > before,
                    "the answer",
                )
                first = next(
                    r for r in chat_server.requests if r.get("tools") and len(r["tools"]) > 1
                )
                history = json.dumps(first["messages"][1:-1], ensure_ascii=False)
                assert "年糕" not in history  # not in the chat context any more
                # Active memory (on by default) already recalls it into this turn's
                # message, after the chat history (the system prompt stays as it was).
                assert "年糕" not in first["messages"][0]["content"]
                current = first["messages"][-1]["content"]
                recalled = current.split("<MEMORIES>", 1)[1].split("</MEMORIES>", 1)[0]
                assert FACT in recalled
                assert "年糕" not in current.replace(recalled, "")
                found = json.loads(tool_messages(chat_server)[0])
                assert found["ok"] is True
                assert found["memories"][0]["content"] == FACT

                # 3. See the memory with /memory user list.
                before = len(client.replies())
                await client.send("/memory user list")
                await until(lambda: len(client.replies()) > before, "/memory user list")
                listing = client.replies()[before:]
                assert any(FACT in r for r in listing), listing
            finally:
                serving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await serving
